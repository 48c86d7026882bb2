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
 * Every draw is feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(k)):
 * k 0 apply (mixup alone, or the one chosen), 1 which of the two when both
 * are set, 2 and 3 CutMix's centre, from 16 on the Beta draw's Gamma
 * variates (k0 16 and 16 + 4096, each taking what its rejection loop
 * needs).
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

enum { MIX_K_APPLY = 0, MIX_K_CHOICE = 1, MIX_K_CX = 2, MIX_K_CY = 3, MIX_K_BETA = 16,
       MIX_GAMMA_SPAN = 4096, GAMMA_TRIES = 64 };

static double uni(uint64_t seed, uint64_t epoch, uint64_t batch, uint64_t k)
{
    return feeder_random_uniform(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(k));
}

/* Marsaglia and Tsang's Gamma(a, 1), a >= 1, normals by Box-Muller; each
 * try takes three counters from *k. */
static double gamma_ge1(double a, uint64_t seed, uint64_t epoch, uint64_t batch, uint64_t k)
{
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (int t = 0; t < GAMMA_TRIES; t++, k += 3) {
        double u1 = uni(seed, epoch, batch, k), u2 = uni(seed, epoch, batch, k + 1);
        double x = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        double v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = uni(seed, epoch, batch, k + 2);
        if (log(1.0 - u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
    return a; /* its mean; reached with probability far below 2^-64 */
}

static double gamma_draw(double a, uint64_t seed, uint64_t epoch, uint64_t batch, uint64_t k)
{
    if (a >= 1.0)
        return gamma_ge1(a, seed, epoch, batch, k);
    /* Gamma(a) = Gamma(a + 1) * U^(1/a) */
    double g = gamma_ge1(a + 1.0, seed, epoch, batch, k + 1);
    double u = uni(seed, epoch, batch, k);
    return g * pow(1.0 - u, 1.0 / a);
}

double feeder__aug_beta(double alpha, uint64_t seed, uint64_t epoch, uint64_t batch, uint64_t k0)
{
    double x = gamma_draw(alpha, seed, epoch, batch, k0);
    double y = gamma_draw(alpha, seed, epoch, batch, k0 + MIX_GAMMA_SPAN);
    return x + y > 0.0 ? x / (x + y) : 0.5;
}

/* A pixel is (A x + B y + 2^15) >> 16 with A = lambda in 16-bit fixed
 * point, B = 2^16 - A: lambda x + (1 - lambda) y rounded, to within one
 * level, in a loop the compiler vectorises. */
static void mixup(uint8_t *data, uint32_t count, size_t bytes, double lam, uint8_t *scratch)
{
    uint32_t A = (uint32_t)(lam * 65536.0 + 0.5), B = 65536 - A;
    memcpy(scratch, data + (size_t)(count - 1) * bytes, bytes);
    for (uint32_t i = count; i-- > 0;) {
        uint8_t *x = data + (size_t)i * bytes;
        const uint8_t *y = i ? x - bytes : scratch;
        for (size_t j = 0; j < bytes; j++)
            x[j] = (uint8_t)((A * x[j] + B * y[j] + 32768u) >> 16);
    }
}

typedef struct mbox {
    uint32_t x1, y1, x2, y2;
} mbox;

static void cutmix(uint8_t *data, uint32_t count, uint32_t w, uint32_t h, int layout,
                   int channels, const mbox *bx, uint8_t *scratch)
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

static mbox cutmix_box(double lam, uint32_t w, uint32_t h, uint64_t seed, uint64_t epoch,
                       uint64_t batch)
{
    int64_t rx = (int64_t)(feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(MIX_K_CX)) % w);
    int64_t ry = (int64_t)(feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(MIX_K_CY)) % h);
    double r = 0.5 * sqrt(1.0 - lam);
    int64_t hw = (int64_t)(r * w), hh = (int64_t)(r * h);
    mbox b;
    b.x1 = (uint32_t)(rx - hw < 0 ? 0 : rx - hw);
    b.y1 = (uint32_t)(ry - hh < 0 ? 0 : ry - hh);
    b.x2 = (uint32_t)(rx + hw > w ? w : rx + hw);
    b.y2 = (uint32_t)(ry + hh > h ? h : ry + hh);
    return b;
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
    if (!feeder__augment_has_mix(plan) || count == 0)
        return 0;
    int cut = plan->mixup_alpha <= 0;
    if (plan->mixup_alpha > 0 && plan->cutmix_alpha > 0)
        cut = uni(seed, epoch, batch, MIX_K_CHOICE) < 0.5;
    double p = cut ? plan->cutmix_p : plan->mixup_p;
    if (uni(seed, epoch, batch, MIX_K_APPLY) >= p)
        return 0;
    double alpha = cut ? plan->cutmix_alpha : plan->mixup_alpha;
    double lam = feeder__aug_beta(alpha, seed, epoch, batch, MIX_K_BETA);
    if (cut) {
        mbox b = cutmix_box(lam, w, h, seed, epoch, batch);
        cutmix(data, count, w, h, layout, channels, &b, scratch);
        lam = 1.0 - (double)(b.x2 - b.x1) * (b.y2 - b.y1) / ((double)w * h);
    } else {
        mixup(data, count, (size_t)w * h * (size_t)channels, lam, scratch);
    }
    for (uint32_t i = 0; i < count; i++) {
        mix[i].partner = (i + count - 1) % count;
        mix[i].lambda = (float)lam;
    }
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
