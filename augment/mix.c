/*
 * Batch-level MixUp and CutMix, as torchvision's reference scripts
 * (references/classification/transforms.py, RandomMixup / RandomCutmix):
 * with probability p the batch is mixed with itself rolled by one (sample i
 * with sample i - 1, sample 0 with the last), lambda ~ Beta(alpha, alpha);
 * CutMix pastes a box centred on a uniform point with sides sqrt(1 -
 * lambda) of the image's (clipped at the edges) and sets lambda to the
 * share of the image left. On uint8 a mixup pixel is lambda * a + (1 -
 * lambda) * b rounded, in 16-bit fixed point (the scripts mix float
 * images).
 * The draws are draw.c's (shared with the GPU kernels), each
 * feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(k)):
 * k 0 apply (mixup alone, or the one chosen), 1 which of the two when both
 * are set, 2 and 3 CutMix's centre, from 16 on the Beta draw's Gamma
 * variates (k0 16 and 16 + 4096, each taking what its rejection loop
 * needs).
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

/* A pixel is (A x + B y + 2^15) >> 16 with A = lambda in 16-bit fixed
 * point, B = 2^16 - A: lambda x + (1 - lambda) y rounded, to within one
 * level, in a loop the compiler vectorises. */
static void mixup(uint8_t *data, uint32_t count, size_t bytes, uint32_t A, uint32_t B,
                  uint8_t *scratch)
{
    memcpy(scratch, data + (size_t)(count - 1) * bytes, bytes);
    for (uint32_t i = count; i-- > 0;) {
        uint8_t *x = data + (size_t)i * bytes;
        const uint8_t *y = i ? x - bytes : scratch;
        for (size_t j = 0; j < bytes; j++)
            x[j] = (uint8_t)((A * x[j] + B * y[j] + 32768u) >> 16);
    }
}

static void cutmix(uint8_t *data, uint32_t count, uint32_t w, uint32_t h, int layout,
                   int channels, const feeder__mix_draw *bx, uint8_t *scratch)
{
    size_t bytes = (size_t)w * h * (size_t)channels;
    memcpy(scratch, data + (size_t)(count - 1) * bytes, bytes);
    for (uint32_t i = count; i-- > 0;) {
        feeder__aimg x = feeder__aimg_make_ch(data + (size_t)i * bytes, w, h, layout, channels);
        feeder__aimg y = feeder__aimg_make_ch(i ? x.p - bytes : scratch, w, h, layout, channels);
        /* the box's rows are runs of bytes: one run per row in NHWC, one
         * per row and channel in NCHW (and gray) */
        int planes = x.ps == 3 ? 1 : (int)x.nc;
        size_t run = (size_t)(bx->x2 - bx->x1) * x.ps;
        for (int c = 0; c < planes; c++)
            for (uint32_t r = bx->y1; r < bx->y2; r++) {
                size_t o = ((size_t)r * w + bx->x1) * x.ps + (size_t)c * x.cs;
                memcpy(x.p + o, y.p + o, run);
            }
    }
}

int feeder__augment_mix(const feeder__augment_plan *plan, uint8_t *data, uint32_t count,
                        uint32_t w, uint32_t h, int layout, uint64_t seed, uint64_t epoch,
                        uint64_t batch, feeder_mix *mix, uint8_t *scratch)
{
    return feeder__augment_mix_ch(plan, data, count, w, h, layout, 3, seed, epoch, batch, mix,
                                  scratch);
}

int feeder__augment_mix_ch(const feeder__augment_plan *plan, uint8_t *data, uint32_t count,
                           uint32_t w, uint32_t h, int layout, int channels, uint64_t seed,
                           uint64_t epoch, uint64_t batch, feeder_mix *mix, uint8_t *scratch)
{
    feeder__mix_draw m;
    int kind = feeder__aug_mix_draw(plan, count, w, h, seed, epoch, batch, &m);
    if (kind == FEEDER__MIX_NONE)
        return 0;
    if (kind == FEEDER__MIX_CUTMIX)
        cutmix(data, count, w, h, layout, channels, &m, scratch);
    else
        mixup(data, count, (size_t)w * h * (size_t)channels, m.A, m.B, scratch);
    feeder__aug_mix_entries(&m, count, mix);
    return 1;
}

int feeder_batch_soft_labels(const feeder_batch *b, uint32_t num_classes, float *out)
{
    if (!b || !out || num_classes == 0 || (b->count && !b->labels)) /* a fields batch */
        return FEEDER_EINVAL;
    for (uint32_t i = 0; i < b->count; i++)
        if (b->labels[i] < 0 || (uint64_t)b->labels[i] >= num_classes)
            return FEEDER_ERANGE;
    memset(out, 0, (size_t)b->count * num_classes * sizeof(float));
    for (uint32_t i = 0; i < b->count; i++) {
        float *row = out + (size_t)i * num_classes;
        if (!b->mix) {
            row[b->labels[i]] = 1.0f;
            continue;
        }
        float lam = b->mix[i].lambda;
        row[b->labels[i]] += lam;
        row[b->labels[b->mix[i].partner]] += 1.0f - lam;
    }
    return 0;
}
