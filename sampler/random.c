/*
 * RandomSampler: whole permutations of 0..n-1 and a prefix of one more, or
 * draws with replacement, num_samples in all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/kind.h"

static int fill_random(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    (void)count;
    uint64_t n = s->n, len = s->len;
    if (s->replacement) {
        for (uint64_t i = 0; i < len; i++)
            out[i] = draw_below(n, s->seed, epoch, i, STREAM_DRAW);
        return 0;
    }
    uint64_t full = len / n, rem = len % n;
    if (rem && full == 0) {
        /* A prefix of one permutation (PyTorch: randperm(n)[:num_samples]):
         * the shuffle needs all n elements. */
        uint64_t *tmp = feeder__alloc_u64(n);
        if (!tmp)
            return -ENOMEM;
        feeder__perm_prefix(tmp, n, rem, s->seed, epoch, 0);
        memcpy(out, tmp, rem * sizeof(*out));
        free(tmp);
        return 0;
    }
    if (rem) {
        /* The truncated last permutation is shuffled in the last n places of
         * `out` (which overlap the full permutation before it, written after)
         * and its prefix moved to the end. */
        uint64_t *w = out + len - n;
        feeder__perm_prefix(w, n, rem, s->seed, epoch, full);
        memmove(out + len - rem, w, rem * sizeof(*out));
    }
    for (uint64_t p = 0; p < full; p++)
        feeder__perm_prefix(out + p * n, n, n, s->seed, epoch, p);
    return 0;
}

const feeder__sampler_kind feeder__sampler_random_kind = {
    .name = "random", .pure = 1, .fill = fill_random};

int feeder_sampler_random(uint64_t n, int replacement, uint64_t num_samples, uint64_t seed,
                          feeder_sampler **out)
{
    /* Nothing to draw from: PyTorch's RandomSampler refuses it too. */
    if (n == 0)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_random_kind, out, &s);
    if (rc)
        return rc;
    s->n = n;
    s->len = num_samples ? num_samples : n;
    s->replacement = replacement != 0;
    s->seed = seed;
    *out = s;
    return 0;
}
