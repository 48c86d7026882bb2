/*
 * One sample through the plan's per-sample steps. Each step draws its
 * random parameters as torchvision's transform of the same name, from its
 * own counters (augment/augment.h); the k of each draw is written next to
 * it. Pure function of (plan, image, seed, epoch, index).
 */
#include <math.h>

#include "augment/augment.h"

typedef struct draw {
    uint64_t seed, epoch, index;
    uint32_t s;
} draw;

static double u(const draw *d, uint64_t k)
{
    return feeder_random_uniform(d->seed, d->epoch, d->index, FEEDER__AUG_COUNTER(d->s, k));
}

/* torch's uniform_(lo, hi). */
static double uniform(const draw *d, uint64_t k, double lo, double hi)
{
    return lo + (hi - lo) * u(d, k);
}

/* RandomAffine.get_params: k 0 angle, 1 and 2 the shifts, 3 scale, 4 and 5 shear. */
static void affine_step(feeder__aimg im, const feeder__aug_step *st, const draw *d, void *scr)
{
    const double *a = st->a;
    double angle = uniform(d, 0, -a[0], a[0]);
    double mx = a[1] * im.w, my = a[2] * im.h;
    double tx = feeder__round_half_even(uniform(d, 1, -mx, mx));
    double ty = feeder__round_half_even(uniform(d, 2, -my, my));
    double scale = uniform(d, 3, a[3], a[4]);
    double shx = uniform(d, 4, a[5], a[6]), shy = uniform(d, 5, a[7], a[8]);
    feeder__aug_affine(im, angle, tx, ty, scale, shx, shy, NULL, st->interp, st->fill, scr);
}

/* ColorJitter with draw.c's draws (the GPU kernels use the same). */
static void jitter_step(feeder__aimg im, const feeder__aug_step *st, const draw *d)
{
    feeder__jitter_draw j;
    feeder__aug_jitter_draw(st, d->seed, d->epoch, d->index, d->s, &j);
    for (int i = 0; i < 4; i++) {
        int f = j.order[i];
        if (!j.on[f])
            continue;
        if (f == 0)
            feeder__aug_brightness(im, j.value[f]);
        else if (f == 1)
            feeder__aug_contrast(im, j.value[f]);
        else if (f == 2)
            feeder__aug_saturation(im, j.value[f]);
        else
            feeder__aug_hue(im, j.value[f]);
    }
}

static void run_step(feeder__aimg im, const feeder__aug_step *st, const draw *d, void *scr)
{
    switch (st->op) {
    case FEEDER__AUG_FLIP:
        if (u(d, 0) < st->a[0])
            feeder__aug_flip(im, st->ivalue);
        break;
    case FEEDER__AUG_ROTATE:
        feeder__aug_rotate(im, uniform(d, 0, -st->a[0], st->a[0]), st->interp, st->fill, scr);
        break;
    case FEEDER__AUG_AFFINE: affine_step(im, st, d, scr); break;
    case FEEDER__AUG_JITTER: jitter_step(im, st, d); break;
    case FEEDER__AUG_GRAY:
        if (feeder__aug_gray_draw(st, d->seed, d->epoch, d->index, d->s))
            feeder__aug_grayscale(im);
        break;
    case FEEDER__AUG_BLUR:
        feeder__aug_gaussian_blur(im, (uint32_t)st->ivalue,
                                  feeder__aug_blur_draw(st, d->seed, d->epoch, d->index, d->s),
                                  scr);
        break;
    case FEEDER__AUG_ERASE:
        feeder__aug_erase(im, st, d->seed, d->epoch, d->index, d->s);
        break;
    case FEEDER__AUG_TRIVIAL:
    case FEEDER__AUG_RANDAUG:
        feeder__aug_auto(im, st, d->seed, d->epoch, d->index, d->s, scr);
        break;
    default: break;
    }
}

void feeder__augment_apply_ch(const feeder__augment_plan *plan, uint8_t *sample, uint32_t w,
                              uint32_t h, int layout, int channels, uint64_t seed, uint64_t epoch,
                              uint64_t index, void *scratch)
{
    feeder__aimg im = feeder__aimg_make_ch(sample, w, h, layout, channels);
    for (uint32_t s = 0; s < plan->nsteps; s++) {
        draw d = {seed, epoch, index, s};
        run_step(im, &plan->step[s], &d, scratch);
    }
}

void feeder__augment_apply(const feeder__augment_plan *plan, uint8_t *sample, uint32_t w,
                           uint32_t h, int layout, uint64_t seed, uint64_t epoch, uint64_t index,
                           void *scratch)
{
    feeder__augment_apply_ch(plan, sample, w, h, layout, 3, seed, epoch, index, scratch);
}
