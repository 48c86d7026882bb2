/*
 * What the plan makes before the epoch's work: the transform a sample goes
 * through, the sampler SHUFFLE and SEED pick when none was given.
 */
#include "loader/host.h"

const feeder__plan *feeder__loader_plan(const feeder_loader *ld) { return &ld->plan; }

void feeder__plan_transform(const feeder__plan *p, feeder__transform *t)
{
    t->pipeline = p->pipeline.pipeline;
    t->decoder = p->pipeline.decoder;
    t->layout = p->pipeline.layout;
    t->height = p->pipeline.height;
    t->width = p->pipeline.width;
    t->resize = p->pipeline.resize;
    t->scale_min = p->pipeline.scale_min;
    t->scale_max = p->pipeline.scale_max;
    t->ratio_min = p->pipeline.ratio_min;
    t->ratio_max = p->pipeline.ratio_max;
    t->flip_prob = p->pipeline.flip_prob;
    t->max_pixels = p->pipeline.max_pixels;
    t->max_decode_bytes = p->pipeline.max_decode_bytes;
    t->max_side = p->pipeline.max_side;
    t->channels = p->pipeline.channels;
}

/* The sampler SHUFFLE and SEED pick when none was given. */
int feeder__loader_default_sampler(const feeder_loader *ld, const feeder__plan *p,
                                   feeder_sampler **out)
{
    int rc = p->sampling.shuffle
                 ? feeder_sampler_random(ld->ds->n, 0, 0, p->sampling.seed, out)
                 : feeder_sampler_sequential(ld->ds->n, out);
    if (rc)
        return feeder__loader_fail(ld, rc, "cannot make the default sampler: %s",
                                   feeder_strerror(rc));
    return 0;
}
