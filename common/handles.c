/*
 * Debug builds' record of live handles (common.h, FEEDER__CHECK_HANDLES):
 * which loaders exist and which batch structs each has lent, so that a call
 * on a destroyed loader, or on a batch of one, is refused before anything
 * reads the freed memory. Entries go when their loader is destroyed, so the
 * record holds no more than each live loader's slots and device buffers.
 * A mutex guards it: stats and cancel may come from other threads.
 */
#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if FEEDER__CHECK_HANDLES

typedef struct lent {
    const void *batch, *loader;
} lent;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const void **loaders;
static size_t nloaders, cap_loaders;
static lent *batches;
static size_t nbatches, cap_batches;
static _Thread_local char misuse[256];

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 1;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, c * size);
    if (!p)
        return 0;
    *v = p;
    *cap = c;
    return 1;
}

static size_t find_loader(const void *ld)
{
    size_t i = 0;
    while (i < nloaders && loaders[i] != ld)
        i++;
    return i;
}

static size_t find_batch(const void *b)
{
    size_t i = 0;
    while (i < nbatches && batches[i].batch != b)
        i++;
    return i;
}

void feeder__handle_add_loader(const void *ld)
{
    pthread_mutex_lock(&mu);
    /* Out of memory: left out, so the loader only loses the check. */
    if (find_loader(ld) == nloaders && grow((void **)&loaders, &cap_loaders, nloaders,
                                            sizeof(*loaders)))
        loaders[nloaders++] = ld;
    pthread_mutex_unlock(&mu);
}

void feeder__handle_remove_loader(const void *ld)
{
    pthread_mutex_lock(&mu);
    size_t i = find_loader(ld);
    if (i < nloaders)
        loaders[i] = loaders[--nloaders];
    for (size_t k = 0; k < nbatches;)
        if (batches[k].loader == ld)
            batches[k] = batches[--nbatches];
        else
            k++;
    if (!nloaders) {
        free(loaders);
        free(batches);
        loaders = NULL;
        batches = NULL;
        cap_loaders = cap_batches = 0;
    }
    pthread_mutex_unlock(&mu);
}

int feeder__handle_loader_live(const void *ld)
{
    pthread_mutex_lock(&mu);
    int live = find_loader(ld) < nloaders;
    pthread_mutex_unlock(&mu);
    return live;
}

void feeder__handle_add_batch(const void *ld, const void *b)
{
    pthread_mutex_lock(&mu);
    size_t i = find_batch(b);
    if (i < nbatches)
        batches[i].loader = ld; /* a struct freed and made again by another loader */
    else if (grow((void **)&batches, &cap_batches, nbatches, sizeof(*batches)))
        batches[nbatches++] = (lent){b, ld};
    pthread_mutex_unlock(&mu);
}

int feeder__handle_batch_live(const void *b)
{
    pthread_mutex_lock(&mu);
    int live = find_batch(b) < nbatches;
    pthread_mutex_unlock(&mu);
    return live;
}

int feeder__handle_misuse(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(misuse, sizeof(misuse), fmt, ap);
    va_end(ap);
    return rc;
}

const char *feeder__handle_misuse_msg(void) { return misuse; }

#endif
