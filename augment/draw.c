/*
 * The random parameters of the steps that can also run on the GPU (colour
 * jitter, random grayscale, Gaussian blur with its kernel) and of the
 * batch-level mixes, drawn apart from
 * the pixel work so the CPU ops (apply.c, mix.c) and the GPU layer's
 * kernels (cuda/augment.cu) use the same draws: one definition, compiled
 * into libfeeder and again into the GPU plugin. Every draw is a pure
 * function of (seed, epoch, index or batch, counter); the counters are the
 * ones augment/augment.h lists.
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

/* The mixes' counters (mix.c's header says what each holds). */
enum { MIX_K_APPLY = 0, MIX_K_CHOICE = 1, MIX_K_CX = 2, MIX_K_CY = 3, MIX_K_BETA = 16,
       MIX_GAMMA_SPAN = 4096, GAMMA_TRIES = 64 };

static double su(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t s, uint64_t k)
{
    return feeder_random_uniform(seed, epoch, index, FEEDER__AUG_COUNTER(s, k));
}

/* ColorJitter: k 0..3 the order (a Fisher-Yates shuffle), 4..6 the
 * brightness, contrast and saturation factors, 7 the hue shift. */
void feeder__aug_jitter_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                             uint64_t index, uint32_t s, feeder__jitter_draw *out)
{
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
        int j = (int)(feeder_random(seed, epoch, index, FEEDER__AUG_COUNTER(s, i)) %
                      (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    memcpy(out->order, order, sizeof(order));
    for (int f = 0; f < 4; f++) {
        double v = st->a[f];
        out->on[f] = v > 0;
        out->value[f] = 0;
        if (v <= 0)
            continue;
        double lo = f == 3 ? -v : fmax(0.0, 1.0 - v), hi = f == 3 ? v : 1.0 + v;
        out->value[f] = lo + (hi - lo) * su(seed, epoch, index, s, 4 + (uint64_t)f);
    }
}

/* RandomGrayscale: k 0. */
int feeder__aug_gray_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                          uint64_t index, uint32_t s)
{
    return su(seed, epoch, index, s, 0) < st->a[0];
}

/* GaussianBlur: k 0 the sigma. */
double feeder__aug_blur_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                             uint64_t index, uint32_t s)
{
    return st->a[0] + (st->a[1] - st->a[0]) * su(seed, epoch, index, s, 0);
}

/* torchvision's _get_gaussian_kernel1d, in float32. */
void feeder__aug_gauss_kernel(float *k, uint32_t ksize, double sigma)
{
    float half = (float)(ksize - 1) * 0.5f, sum = 0.0f, s = (float)sigma;
    for (uint32_t i = 0; i < ksize; i++) {
        float x = ksize > 1 ? -half + (float)i * (2.0f * half / (float)(ksize - 1)) : 0.0f;
        k[i] = expf(-0.5f * (x / s) * (x / s));
        sum += k[i];
    }
    for (uint32_t i = 0; i < ksize; i++)
        k[i] /= sum;
}

static double uni(uint64_t seed, uint64_t epoch, uint64_t batch, uint64_t k)
{
    return feeder_random_uniform(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(k));
}

/* Marsaglia and Tsang's Gamma(a, 1), a >= 1, normals by Box-Muller; each
 * try takes three counters from k. */
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

/* CutMix's box: k 2 and 3 its centre, sides sqrt(1 - lambda) of the
 * image's, clipped at the edges. */
static void cutmix_box(feeder__mix_draw *m, uint32_t w, uint32_t h, uint64_t seed,
                       uint64_t epoch, uint64_t batch)
{
    uint64_t cx = feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(MIX_K_CX));
    uint64_t cy = feeder_random(seed, epoch, batch, FEEDER__AUG_MIX_COUNTER(MIX_K_CY));
    int64_t rx = (int64_t)(cx % w), ry = (int64_t)(cy % h);
    double r = 0.5 * sqrt(1.0 - m->lambda);
    int64_t hw = (int64_t)(r * w), hh = (int64_t)(r * h);
    m->x1 = (uint32_t)(rx - hw < 0 ? 0 : rx - hw);
    m->y1 = (uint32_t)(ry - hh < 0 ? 0 : ry - hh);
    m->x2 = (uint32_t)(rx + hw > w ? w : rx + hw);
    m->y2 = (uint32_t)(ry + hh > h ? h : ry + hh);
}

int feeder__aug_mix_draw(const feeder__augment_plan *plan, uint32_t count, uint32_t w,
                         uint32_t h, uint64_t seed, uint64_t epoch, uint64_t batch,
                         feeder__mix_draw *m)
{
    memset(m, 0, sizeof(*m));
    if (!feeder__augment_has_mix(plan) || count == 0 || w == 0 || h == 0)
        return FEEDER__MIX_NONE;
    int cut = plan->mixup_alpha <= 0;
    if (plan->mixup_alpha > 0 && plan->cutmix_alpha > 0)
        cut = uni(seed, epoch, batch, MIX_K_CHOICE) < 0.5;
    double p = cut ? plan->cutmix_p : plan->mixup_p;
    if (uni(seed, epoch, batch, MIX_K_APPLY) >= p)
        return FEEDER__MIX_NONE;
    double alpha = cut ? plan->cutmix_alpha : plan->mixup_alpha;
    m->lambda = feeder__aug_beta(alpha, seed, epoch, batch, MIX_K_BETA);
    if (cut) {
        cutmix_box(m, w, h, seed, epoch, batch);
        m->lambda = 1.0 - (double)(m->x2 - m->x1) * (m->y2 - m->y1) / ((double)w * h);
        m->kind = FEEDER__MIX_CUTMIX;
    } else {
        m->A = (uint32_t)(m->lambda * 65536.0 + 0.5);
        m->B = 65536 - m->A;
        m->kind = FEEDER__MIX_MIXUP;
    }
    return m->kind;
}

void feeder__aug_mix_entries(const feeder__mix_draw *m, uint32_t count, feeder_mix *mix)
{
    for (uint32_t i = 0; i < count; i++) {
        mix[i].partner = (i + count - 1) % count;
        mix[i].lambda = (float)m->lambda;
    }
}
