/*
 * SubsetRandomSampler (shuffled) or the caller's indices as given.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/kind.h"

static int fill_subset(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    memcpy(out, s->indices, count * sizeof(*out));
    /* Shuffling the copy is SubsetRandomSampler's indices[randperm(count)]:
     * the same swaps applied to other contents. */
    if (s->shuffle)
        feeder__shuffle_prefix(out, count, count, s->seed, epoch, 0);
    return 0;
}

static void destroy_subset(feeder_sampler *s) { free(s->indices); }

const feeder__sampler_kind feeder__sampler_subset_kind = {
    .name = "subset", .pure = 1, .fill = fill_subset, .destroy = destroy_subset};

int feeder_sampler_subset(const uint64_t *indices, uint64_t count, int shuffle, uint64_t seed,
                          feeder_sampler **out)
{
    if (!indices && count)
        return FEEDER_EINVAL;
    if (count > SIZE_MAX / sizeof(uint64_t))
        return FEEDER_EOVERFLOW;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_subset_kind, out, &s);
    if (rc)
        return rc;
    if (count) {
        s->indices = malloc(count * sizeof(*s->indices));
        if (!s->indices) {
            free(s);
            return -ENOMEM;
        }
        memcpy(s->indices, indices, count * sizeof(*s->indices));
    }
    s->n = s->len = count;
    s->shuffle = shuffle != 0;
    s->seed = seed;
    *out = s;
    return 0;
}
