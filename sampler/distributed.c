/*
 * DistributedSampler: this rank's share of the (shuffled) order, padded or
 * cut so every rank gets as many.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/kind.h"


/* PyTorch's DistributedSampler: the padded order is order[k % n] for
 * k < total (its "indices += indices[:pad]", repeated when pad > n), and
 * this rank takes k = rank, rank + world, ... */
static int fill_distributed(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    (void)count;
    uint64_t n = s->n, len = s->len;
    if (len == 0)
        return 0;
    uint64_t pos = s->rank % n, step = s->world % n;
    if (!s->shuffle) {
        for (uint64_t t = 0; t < len; t++) {
            out[t] = pos;
            pos += step;
            if (pos >= n)
                pos -= n;
        }
        return 0;
    }
    if (s->world == 1 && len == n) {
        feeder__perm_prefix(out, n, n, s->seed, epoch, 0);
        return 0;
    }
    /* Positions beyond the last one this rank reads need no shuffling. */
    uint64_t last = s->rank + (len - 1) * (uint64_t)s->world;
    uint64_t *perm = feeder__alloc_u64(n);
    if (!perm)
        return -ENOMEM;
    feeder__perm_prefix(perm, n, last < n ? last + 1 : n, s->seed, epoch, 0);
    for (uint64_t t = 0; t < len; t++) {
        out[t] = perm[pos];
        pos += step;
        if (pos >= n)
            pos -= n;
    }
    free(perm);
    return 0;
}

const feeder__sampler_kind feeder__sampler_distributed_kind = {
    .name = "distributed", .pure = 1, .fill = fill_distributed};

int feeder_sampler_distributed(uint64_t n, uint32_t rank, uint32_t world_size, int shuffle,
                               uint64_t seed, int drop_last, feeder_sampler **out)
{
    if (world_size == 0 || rank >= world_size)
        return FEEDER_EINVAL;
    uint64_t len = n / world_size;
    if (!drop_last && n % world_size) {
        len++;
        /* PyTorch's total_size, len * world, bounds every padded position. */
        if (len > UINT64_MAX / world_size)
            return FEEDER_EOVERFLOW;
    }
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_distributed_kind, out, &s);
    if (rc)
        return rc;
    s->n = n;
    s->len = len;
    s->rank = rank;
    s->world = world_size;
    s->shuffle = shuffle != 0;
    s->seed = seed;
    *out = s;
    return 0;
}
