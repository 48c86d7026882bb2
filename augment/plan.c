/*
 * The pipeline the user composes (feeder_augment_*, feeder.h): each call
 * checks its parameters and appends one step to the plan; and the
 * per-sample walk over the plan, which draws each step's random parameters
 * as torchvision's transform of the same name draws them, from the step's
 * own counters (augment/augment.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"

int feeder_augment_create(feeder_augment **out)
{
    if (!out)
        return FEEDER_EINVAL;
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void feeder_augment_destroy(feeder_augment *aug) { free(aug); }

const char *feeder_augment_errmsg(const feeder_augment *aug) { return aug ? aug->errmsg : ""; }

/* FEEDER_ERANGE naming the call, the parameter and its bounds, unless
 * lo <= v <= hi (NaN fails). */
static int check(feeder_augment *aug, const char *fn, const char *name, double v, double lo,
                 double hi)
{
    if (v >= lo && v <= hi)
        return 0;
    feeder__fmt(aug->errmsg, sizeof(aug->errmsg), "%s: %s is %g, outside [%g, %g]", fn, name, v,
                lo, hi);
    return FEEDER_ERANGE;
}

/* A new step of `op`, or NULL with FEEDER_ERANGE in *rc when the plan is full. */
static feeder__aug_step *add_step(feeder_augment *aug, const char *fn, int op, int *rc)
{
    if (aug->plan.nsteps >= FEEDER_AUGMENT_MAX_STEPS) {
        feeder__fmt(aug->errmsg, sizeof(aug->errmsg),
                    "%s: the pipeline has %d steps, the most it can hold", fn,
                    FEEDER_AUGMENT_MAX_STEPS);
        *rc = FEEDER_ERANGE;
        return NULL;
    }
    feeder__aug_step *st = &aug->plan.step[aug->plan.nsteps++];
    memset(st, 0, sizeof(*st));
    st->op = op;
    st->fill = FEEDER_FILL_NONE;
    return st;
}

static int check_geometry(feeder_augment *aug, const char *fn, int interp, int fill)
{
    int rc = check(aug, fn, "interp", interp, FEEDER_INTERP_NEAREST, FEEDER_INTERP_BILINEAR);
    return rc ? rc : check(aug, fn, "fill", fill, FEEDER_FILL_NONE, 255);
}

#define BEGIN(aug)                                                                              \
    if (!(aug))                                                                                 \
        return FEEDER_EINVAL;                                                                   \
    (aug)->errmsg[0] = 0;                                                                       \
    int rc = 0

int feeder_augment_flip(feeder_augment *aug, int vertical, double p)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "vertical", vertical, 0, 1)) ||
        (rc = check(aug, __func__, "p", p, 0, 1)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_FLIP, &rc);
    if (!st)
        return rc;
    st->ivalue = vertical;
    st->a[0] = p;
    return 0;
}

int feeder_augment_rotate(feeder_augment *aug, double max_degrees, int interp, int fill)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "max_degrees", max_degrees, 0, 180)) ||
        (rc = check_geometry(aug, __func__, interp, fill)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_ROTATE, &rc);
    if (!st)
        return rc;
    st->a[0] = max_degrees;
    st->interp = interp;
    st->fill = fill;
    return 0;
}

int feeder_augment_affine(feeder_augment *aug, const feeder_affine *a)
{
    BEGIN(aug);
    if (!a)
        return FEEDER_EINVAL;
    if ((rc = check(aug, __func__, "degrees", a->degrees, 0, 180)) ||
        (rc = check(aug, __func__, "translate[0]", a->translate[0], 0, 1)) ||
        (rc = check(aug, __func__, "translate[1]", a->translate[1], 0, 1)) ||
        (rc = check(aug, __func__, "scale[0]", a->scale[0], 1e-3, 10)) ||
        (rc = check(aug, __func__, "scale[1]", a->scale[1], a->scale[0], 10)) ||
        (rc = check(aug, __func__, "shear[0]", a->shear[0], -89, 89)) ||
        (rc = check(aug, __func__, "shear[1]", a->shear[1], a->shear[0], 89)) ||
        (rc = check(aug, __func__, "shear[2]", a->shear[2], -89, 89)) ||
        (rc = check(aug, __func__, "shear[3]", a->shear[3], a->shear[2], 89)) ||
        (rc = check_geometry(aug, __func__, a->interp, a->fill)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_AFFINE, &rc);
    if (!st)
        return rc;
    double v[9] = {a->degrees, a->translate[0], a->translate[1], a->scale[0], a->scale[1],
                   a->shear[0], a->shear[1], a->shear[2], a->shear[3]};
    memcpy(st->a, v, sizeof(v));
    st->interp = a->interp;
    st->fill = a->fill;
    return 0;
}

int feeder_augment_color_jitter(feeder_augment *aug, double brightness, double contrast,
                                double saturation, double hue)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "brightness", brightness, 0, 100)) ||
        (rc = check(aug, __func__, "contrast", contrast, 0, 100)) ||
        (rc = check(aug, __func__, "saturation", saturation, 0, 100)) ||
        (rc = check(aug, __func__, "hue", hue, 0, 0.5)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_JITTER, &rc);
    if (!st)
        return rc;
    st->a[0] = brightness;
    st->a[1] = contrast;
    st->a[2] = saturation;
    st->a[3] = hue;
    return 0;
}

int feeder_augment_grayscale(feeder_augment *aug, double p)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "p", p, 0, 1)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_GRAY, &rc);
    if (!st)
        return rc;
    st->a[0] = p;
    return 0;
}

int feeder_augment_blur(feeder_augment *aug, uint32_t kernel_size, double sigma_min,
                        double sigma_max)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "kernel_size", kernel_size, 1, 63)))
        return rc;
    if (!(kernel_size & 1)) {
        feeder__fmt(aug->errmsg, sizeof(aug->errmsg), "%s: kernel_size is %u, not odd",
                    __func__, kernel_size);
        return FEEDER_ERANGE;
    }
    if ((rc = check(aug, __func__, "sigma_min", sigma_min, 1e-6, 100)) ||
        (rc = check(aug, __func__, "sigma_max", sigma_max, sigma_min, 100)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_BLUR, &rc);
    if (!st)
        return rc;
    st->ivalue = (int)kernel_size;
    st->a[0] = sigma_min;
    st->a[1] = sigma_max;
    return 0;
}

int feeder_augment_erase(feeder_augment *aug, double p, double scale_min, double scale_max,
                         double ratio_min, double ratio_max, int value)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "p", p, 0, 1)) ||
        (rc = check(aug, __func__, "scale_min", scale_min, 1e-9, 1 - 1e-9)) ||
        (rc = check(aug, __func__, "scale_max", scale_max, scale_min, 1 - 1e-9)) ||
        (rc = check(aug, __func__, "ratio_min", ratio_min, 1e-3, 100)) ||
        (rc = check(aug, __func__, "ratio_max", ratio_max, ratio_min, 100)) ||
        (rc = check(aug, __func__, "value", value, -1, 255)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_ERASE, &rc);
    if (!st)
        return rc;
    double v[5] = {p, scale_min, scale_max, ratio_min, ratio_max};
    memcpy(st->a, v, sizeof(v));
    st->ivalue = value;
    return 0;
}

int feeder_augment_trivial(feeder_augment *aug, uint32_t num_bins, int interp, int fill)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "num_bins", num_bins, 2, 256)) ||
        (rc = check_geometry(aug, __func__, interp, fill)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_TRIVIAL, &rc);
    if (!st)
        return rc;
    st->u[0] = num_bins;
    st->interp = interp;
    st->fill = fill;
    return 0;
}

int feeder_augment_randaugment(feeder_augment *aug, uint32_t num_ops, uint32_t magnitude,
                               uint32_t num_bins, int interp, int fill)
{
    BEGIN(aug);
    if ((rc = check(aug, __func__, "num_bins", num_bins, 2, 256)) ||
        (rc = check(aug, __func__, "num_ops", num_ops, 1, 16)) ||
        (rc = check(aug, __func__, "magnitude", magnitude, 0, num_bins - 1.0)) ||
        (rc = check_geometry(aug, __func__, interp, fill)))
        return rc;
    feeder__aug_step *st = add_step(aug, __func__, FEEDER__AUG_RANDAUG, &rc);
    if (!st)
        return rc;
    st->u[0] = num_bins;
    st->u[1] = num_ops;
    st->u[2] = magnitude;
    st->interp = interp;
    st->fill = fill;
    return 0;
}

static int set_mix(feeder_augment *aug, const char *fn, double alpha, double p, double *a_out,
                   double *p_out)
{
    int rc;
    if ((rc = check(aug, fn, "alpha", alpha, 1e-6, 100)) || (rc = check(aug, fn, "p", p, 0, 1)))
        return rc;
    *a_out = alpha;
    *p_out = p;
    return 0;
}

int feeder_augment_mixup(feeder_augment *aug, double alpha, double p)
{
    BEGIN(aug);
    (void)rc;
    return set_mix(aug, __func__, alpha, p, &aug->plan.mixup_alpha, &aug->plan.mixup_p);
}

int feeder_augment_cutmix(feeder_augment *aug, double alpha, double p)
{
    BEGIN(aug);
    (void)rc;
    return set_mix(aug, __func__, alpha, p, &aug->plan.cutmix_alpha, &aug->plan.cutmix_p);
}

int feeder_augment_apply_channels(const feeder_augment *aug, uint8_t *img, uint32_t width,
                                  uint32_t height, uint32_t channels, int layout, uint64_t seed,
                                  uint64_t epoch, uint64_t index)
{
    if (!aug || !img || !width || !height || (channels != 1 && channels != 3) ||
        (layout != FEEDER_LAYOUT_NHWC && layout != FEEDER_LAYOUT_NCHW))
        return FEEDER_EINVAL;
    void *scratch = malloc(feeder__augment_scratch_bytes(width, height));
    if (!scratch)
        return -ENOMEM;
    feeder__augment_apply_ch(&aug->plan, img, width, height, layout, (int)channels, seed, epoch,
                             index, scratch);
    free(scratch);
    return 0;
}

int feeder_augment_apply(const feeder_augment *aug, uint8_t *img, uint32_t width,
                         uint32_t height, int layout, uint64_t seed, uint64_t epoch,
                         uint64_t index)
{
    return feeder_augment_apply_channels(aug, img, width, height, 3, layout, seed, epoch, index);
}

uint32_t feeder__augment_device_first(const feeder__augment_plan *p)
{
    uint32_t first = p->nsteps;
    while (first > 0 && (p->step[first - 1].op == FEEDER__AUG_JITTER ||
                         p->step[first - 1].op == FEEDER__AUG_GRAY ||
                         p->step[first - 1].op == FEEDER__AUG_BLUR))
        first--;
    return first;
}
