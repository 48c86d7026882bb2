/*
 * TrivialAugmentWide and RandAugment (torchvision 0.14 autoaugment.py):
 * the shared op set in the order of _augmentation_space (0 Identity, 1
 * ShearX, 2 ShearY, 3 TranslateX, 4 TranslateY, 5 Rotate, 6 Brightness, 7
 * Color, 8 Contrast, 9 Sharpness, 10 Posterize, 11 Solarize, 12
 * AutoContrast, 13 Equalize), each space's magnitudes (torch.linspace in
 * float32, computed as torch does: from the start for the first half, from
 * the end for the rest) and _apply_op's calls.
 * Counters of step s: TrivialAugment k 0 op, 1 bin, 2 sign; RandAugment op
 * i takes k 3i, 3i + 1 (unused: the magnitude is fixed), 3i + 2 sign.
 */
#include <math.h>

#include "augment/augment.h"

enum { AUTO_OPS = 14 };

/* torch.linspace(start, end, steps)[i] in float32. */
static float linspace(float start, float end, uint32_t steps, uint32_t i)
{
    if (steps == 1)
        return start;
    float step = (end - start) / (float)(steps - 1);
    uint32_t half = steps / 2;
    return i < half ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

/* Python's round of a float32 quotient, as torch's .round(). */
static int posterize_bits(uint32_t base, uint32_t div, uint32_t nb, uint32_t b)
{
    float q = (float)b / ((float)(nb - 1) / (float)div);
    return (int)base - (int)nearbyintf(q);
}

/* The magnitude of op `op` at bin b; 0 for the ops without one. */
static double magnitude(int wide, int op, uint32_t nb, uint32_t b, uint32_t w, uint32_t h)
{
    switch (op) {
    case 1:
    case 2:
        return linspace(0.0f, wide ? 0.99f : 0.3f, nb, b);
    case 3:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * w), nb, b);
    case 4:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * h), nb, b);
    case 5:
        return linspace(0.0f, wide ? 135.0f : 30.0f, nb, b);
    case 6:
    case 7:
    case 8:
    case 9:
        return linspace(0.0f, wide ? 0.99f : 0.9f, nb, b);
    case 10:
        return posterize_bits(8, wide ? 6 : 4, nb, b);
    case 11:
        return linspace(255.0f, 0.0f, nb, b);
    default:
        return 0.0;
    }
}

static int signed_op(int op) { return op >= 1 && op <= 9; }

void feeder__aug_auto_op(feeder__aimg im, int op, double m, int interp, int fill, void *scratch)
{
    static const double corner[2] = {0.0, 0.0};
    switch (op) {
    case 1:
        feeder__aug_affine(im, 0, 0, 0, 1, atan(m) * 180.0 / M_PI, 0, corner, interp, fill,
                           scratch);
        break;
    case 2:
        feeder__aug_affine(im, 0, 0, 0, 1, 0, atan(m) * 180.0 / M_PI, corner, interp, fill,
                           scratch);
        break;
    case 3:
        feeder__aug_affine(im, 0, (double)(int)m, 0, 1, 0, 0, NULL, interp, fill, scratch);
        break;
    case 4:
        feeder__aug_affine(im, 0, 0, (double)(int)m, 1, 0, 0, NULL, interp, fill, scratch);
        break;
    case 5: feeder__aug_rotate(im, m, interp, fill, scratch); break;
    case 6: feeder__aug_brightness(im, 1.0 + m); break;
    case 7: feeder__aug_saturation(im, 1.0 + m); break;
    case 8: feeder__aug_contrast(im, 1.0 + m); break;
    case 9: feeder__aug_sharpness(im, 1.0 + m, scratch); break;
    case 10: feeder__aug_posterize(im, (int)m); break;
    case 11: feeder__aug_solarize(im, m); break;
    case 12: feeder__aug_autocontrast(im); break;
    case 13: feeder__aug_equalize(im); break;
    default: break;
    }
}

static uint32_t draw_int(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t s, uint64_t k,
                         uint32_t n)
{
    return (uint32_t)(feeder_random(seed, epoch, index, FEEDER__AUG_COUNTER(s, k)) % n);
}

void feeder__aug_auto(feeder__aimg im, const feeder__aug_step *st, uint64_t seed,
                      uint64_t epoch, uint64_t index, uint32_t s, void *scratch)
{
    uint32_t nb = st->u[0];
    if (st->op == FEEDER__AUG_TRIVIAL) {
        int op = (int)draw_int(seed, epoch, index, s, 0, AUTO_OPS);
        double m = magnitude(1, op, nb, draw_int(seed, epoch, index, s, 1, nb), im.w, im.h);
        if (signed_op(op) && draw_int(seed, epoch, index, s, 2, 2))
            m = -m;
        feeder__aug_auto_op(im, op, m, st->interp, st->fill, scratch);
        return;
    }
    for (uint32_t i = 0; i < st->u[1]; i++) {
        int op = (int)draw_int(seed, epoch, index, s, 3 * (uint64_t)i, AUTO_OPS);
        double m = magnitude(0, op, nb, st->u[2], im.w, im.h);
        if (signed_op(op) && draw_int(seed, epoch, index, s, 3 * (uint64_t)i + 2, 2))
            m = -m;
        feeder__aug_auto_op(im, op, m, st->interp, st->fill, scratch);
    }
}
