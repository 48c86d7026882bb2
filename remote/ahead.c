/*
 * Fetching ahead of the sampler: threads that download the URL shards of
 * an epoch into the shard cache in the order the epoch first needs them,
 * a bounded number of shards ahead of the loader's position. One mechanism
 * for every shard format: packs (dataset/shards.c) and tar shards
 * (dataset/tar.c) describe their shards through feeder__ahead_src.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote/remote.h"

#define AHEAD_THREADS 4 /* downloads in flight ahead of the sampler, at most */

struct feeder__ahead {
    feeder__ahead_src src;
    pthread_t th[AHEAD_THREADS];
    uint32_t nth;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t *need;     /* URL shards in first-need order */
    uint64_t *need_pos; /* the position each is first needed at (ascending) */
    uint32_t nneed, next;
    uint64_t progress;
    int stop;
    uint64_t fetched, failed;
    uint8_t *landed;  /* per URL shard: fetched once by these threads */
    uint32_t nlanded; /* distinct shards in `landed` */
    pid_t pid; /* the process whose threads these are */
};

/* A dataset used in a process forked from the one that started the
 * threads: the child has no such threads, and the fork may have caught one
 * holding the mutex. Such a copy is never locked or joined, only freed. */
static int foreign(const feeder__ahead *a) { return a->pid != getpid(); }

static void forget(feeder__ahead **ap)
{
    free((*ap)->need);
    free((*ap)->need_pos);
    free((*ap)->landed);
    free(*ap);
    *ap = NULL;
}

uint32_t feeder__ahead_shards(uint32_t opt, uint64_t urls, uint64_t cache_max_bytes)
{
    if (!urls || opt == FEEDER_FETCH_AHEAD_NONE)
        return 0;
    return opt ? opt : cache_max_bytes ? 1 : feeder__remote_spare_cores();
}

/* How many planned shards may be fetched now: those first needed at or
 * before `progress`, plus src.ahead. */
static uint32_t allowed(const feeder__ahead *a)
{
    uint32_t lo = 0, hi = a->nneed;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->need_pos[mid] <= a->progress)
            lo = mid + 1;
        else
            hi = mid;
    }
    return a->src.ahead > UINT32_MAX - lo ? UINT32_MAX : lo + a->src.ahead;
}

static void *ahead_main(void *arg)
{
    feeder__ahead *a = arg;
    pthread_setname_np(pthread_self(), "feeder-ahead"); /* for ps, gdb and the tests */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && (a->next >= a->nneed || a->next >= allowed(a)))
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop)
            break;
        uint32_t s = a->need[a->next++];
        pthread_mutex_unlock(&a->mu);
        feeder__shard got;
        char msg[512];
        int rc = feeder__cache_fetch(a->src.cache, a->src.url(a->src.ctx, s),
                                     a->src.meta(a->src.ctx, s), a->src.flags, &got, msg,
                                     sizeof(msg));
        if (!rc)
            feeder__shard_release(&got); /* the readers map or open it */
        pthread_mutex_lock(&a->mu);
        a->fetched += !rc;
        a->failed += rc != 0;
        if (!rc && !a->landed[s]) {
            a->landed[s] = 1;
            a->nlanded++;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static feeder__ahead *ahead_start(const feeder__ahead_src *src)
{
    feeder__ahead *a = calloc(1, sizeof(*a));
    if (!a || !(a->landed = calloc((size_t)src->nshards + 1, 1))) {
        free(a);
        return NULL;
    }
    a->src = *src;
    a->pid = getpid();
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    uint32_t want = src->ahead < AHEAD_THREADS ? src->ahead : AHEAD_THREADS;
    while (a->nth < want && pthread_create(&a->th[a->nth], NULL, ahead_main, a) == 0)
        a->nth++;
    if (!a->nth) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->landed);
        free(a);
        return NULL;
    }
    return a;
}

void feeder__ahead_stop(feeder__ahead **ap)
{
    feeder__ahead *a = ap ? *ap : NULL;
    if (!a)
        return;
    if (foreign(a)) {
        forget(ap);
        return;
    }
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    for (uint32_t k = 0; k < a->nth; k++)
        pthread_join(a->th[k], NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->need);
    free(a->need_pos);
    free(a->landed);
    free(a);
    *ap = NULL;
}

/* Whether the cache holds a whole copy of shard s as open saw it (a worker
 * may have downloaded it before these threads reached it). */
static int in_cache(const feeder__ahead *a, uint32_t s)
{
    feeder__remote_meta m;
    const feeder__remote_meta *want = a->src.meta(a->src.ctx, s);
    return feeder__cache_lookup(a->src.cache, a->src.url(a->src.ctx, s), a->src.flags, &m) == 0 &&
           m.size == want->size && strcmp(m.etag, want->etag) == 0;
}

int feeder__ahead_settled(feeder__ahead *a, uint32_t nurl)
{
    if (!a || foreign(a) || a->src.cache->max_bytes)
        return 0;
    pthread_mutex_lock(&a->mu);
    uint32_t n = 0, *look = a->nlanded < nurl ? malloc(((size_t)a->nneed + 1) * sizeof(*look))
                                              : NULL;
    for (uint32_t k = 0; look && k < a->nneed; k++)
        if (!a->landed[a->need[k]])
            look[n++] = a->need[k];
    pthread_mutex_unlock(&a->mu);
    /* The planned shards these threads have not landed, looked up in the
     * cache outside the lock (a file each); found ones count as landed. */
    for (uint32_t k = 0; k < n; k++)
        look[k] = in_cache(a, look[k]) ? look[k] : UINT32_MAX;
    pthread_mutex_lock(&a->mu);
    for (uint32_t k = 0; k < n; k++)
        if (look[k] != UINT32_MAX && !a->landed[look[k]]) {
            a->landed[look[k]] = 1;
            a->nlanded++;
        }
    int all = a->nlanded >= nurl;
    pthread_mutex_unlock(&a->mu);
    free(look);
    return all;
}

/* The URL shards of order[0, len) in first-need order, with the positions
 * they are first needed at: 0, or -ENOMEM. */
static int first_needs(const feeder__ahead_src *src, const uint64_t *order, uint64_t len,
                       uint32_t **need, uint64_t **pos, uint32_t *m)
{
    *need = calloc((size_t)src->nshards + 1, sizeof(**need));
    *pos = calloc((size_t)src->nshards + 1, sizeof(**pos));
    uint8_t *seen = calloc((size_t)src->nshards + 1, 1);
    *m = 0;
    for (uint64_t i = 0; *need && *pos && seen && i < len; i++) {
        uint32_t s = src->shard_of(src->ctx, order[i]);
        if (s >= src->nshards || seen[s])
            continue;
        seen[s] = 1;
        (*need)[*m] = s;
        (*pos)[(*m)++] = i;
    }
    int ok = *need && *pos && seen;
    free(seen);
    if (ok)
        return 0;
    free(*need);
    free(*pos);
    return -ENOMEM;
}

void feeder__ahead_plan(feeder__ahead **ap, const feeder__ahead_src *src, const uint64_t *order,
                        uint64_t len)
{
    if (*ap && foreign(*ap))
        forget(ap); /* this process starts threads of its own if it needs them */
    if (!src->ahead || !src->cache || !src->cache->dir || (!len && !*ap))
        return;
    uint32_t *need, m;
    uint64_t *pos;
    if (first_needs(src, order, len, &need, &pos, &m) < 0)
        return; /* no fetching ahead: the readers fetch on demand */
    if (!*ap && (!m || !(*ap = ahead_start(src)))) {
        free(need); /* no URL shard in this epoch, or no thread: on demand */
        free(pos);
        return;
    }
    feeder__ahead *a = *ap;
    pthread_mutex_lock(&a->mu);
    free(a->need);
    free(a->need_pos);
    a->need = need;
    a->need_pos = pos;
    a->nneed = m;
    a->next = 0;
    a->progress = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void feeder__ahead_progress(feeder__ahead *a, uint64_t pos)
{
    if (!a || foreign(a))
        return;
    pthread_mutex_lock(&a->mu);
    if (pos > a->progress) {
        a->progress = pos;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
}
