/*
 * A user's batch sampler: its callbacks give each epoch's indices cut into
 * batches, each with its length and the worker it goes to.
 */
#include <errno.h>
#include <stdlib.h>

#include "sampler/kind.h"
#include "sampler/sampler.h"

static uint64_t len_batches(const feeder_sampler *s, uint64_t epoch)
{
    return s->bcb.len(s->user, epoch);
}

static int fill_batches(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    uint32_t *lengths;
    int32_t *workers;
    uint64_t nb;
    int rc = feeder__sampler_batches(s, epoch, out, count, &lengths, &workers, &nb);
    free(lengths);
    free(workers);
    return rc;
}

static void destroy_batches(feeder_sampler *s)
{
    if (s->bcb.destroy)
        s->bcb.destroy(s->user);
}

/* Not pure, as a user's sampler. */
const feeder__sampler_kind feeder__sampler_batches_kind = {.name = "batches",
                                                           .len = len_batches,
                                                           .fill = fill_batches,
                                                           .destroy = destroy_batches};

int feeder_sampler_create_batches(const feeder_batch_sampler_callbacks *cb, void *user,
                                  feeder_sampler **out)
{
    if (!cb || !cb->nbatches || !cb->len || !cb->fill)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_batches_kind, out, &s);
    if (rc)
        return rc;
    s->bcb = *cb;
    s->user = user;
    *out = s;
    return 0;
}

int feeder__sampler_batched(const feeder_sampler *s)
{
    return s && s->kind == &feeder__sampler_batches_kind;
}

int feeder__sampler_batches(const feeder_sampler *s, uint64_t epoch, uint64_t *indices,
                            uint64_t len, uint32_t **lengths, int32_t **workers, uint64_t *nb)
{
    *lengths = NULL;
    *workers = NULL;
    *nb = s->bcb.nbatches(s->user, epoch);
    size_t n = *nb ? (size_t)*nb : 1;
    if (*nb > SIZE_MAX / sizeof(uint32_t) || !(*lengths = malloc(n * sizeof(uint32_t))) ||
        !(*workers = malloc(n * sizeof(int32_t))))
        return -ENOMEM;
    int rc = s->bcb.fill(s->user, epoch, indices, len, *lengths, *workers, *nb);
    if (rc)
        return rc > 0 ? FEEDER_ECALLBACK : rc;
    uint64_t total = 0;
    for (uint64_t b = 0; b < *nb; b++)
        total += (*lengths)[b];
    return total == len ? 0 : FEEDER_EINVAL; /* the lengths must cover the indices */
}
