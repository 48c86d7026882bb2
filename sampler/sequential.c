/* SequentialSampler: 0, 1, ..., n-1 in every epoch. */
#include "sampler/kind.h"

static int fill_sequential(const feeder_sampler *s, uint64_t epoch, uint64_t *out,
                           uint64_t count)
{
    (void)s;
    (void)epoch;
    for (uint64_t i = 0; i < count; i++)
        out[i] = i;
    return 0;
}

const feeder__sampler_kind feeder__sampler_sequential_kind = {
    .name = "sequential", .pure = 1, .fill = fill_sequential};

int feeder_sampler_sequential(uint64_t n, feeder_sampler **out)
{
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_sequential_kind, out, &s);
    if (rc)
        return rc;
    s->n = s->len = n;
    *out = s;
    return 0;
}
