/*
 * Where each image's pixels come from: the crop box in source pixels and the
 * flip, for the three pipelines. Pure functions of the image size, the
 * transform and (seed, epoch, index) (invariant 1), so both decoders and every
 * worker agree, and a test can check the numbers against torchvision's.
 *
 * EVAL  = torchvision Resize(resize) + CenterCrop(height, width), as a box in
 *         the source. With S = shorter source side, L = longer:
 *           resized short side  = resize,
 *           resized long side   = floor(resize * L / S)   (Python's int() of the
 *                                  float quotient; integer division gives the
 *                                  same value for any size that fits 32 bits),
 *           crop offset (each axis) = round_half_even((resized - out) / 2)
 *                                  (Python's round(), as CenterCrop uses).
 *         The output column range [left, left + width) of the resized image
 *         samples source columns [left * W / W', (left + width) * W / W')
 *         (the resize maps pixel centres linearly, scale W / W' per axis), so
 *         that rational box is the exact one (fx, fw); x and x + w are its two
 *         ends rounded half up (exact integer arithmetic), so an integer-box
 *         consumer is off by at most half a source pixel at any point. Where the
 *         crop is larger than the resized image on an axis (resize < height or
 *         width), torchvision pads with black; a source box cannot, so the box
 *         then covers that whole axis (the image is stretched instead).
 * TRAIN = torchvision RandomResizedCrop.get_params + RandomHorizontalFlip,
 *         drawing from feeder_random*(seed, epoch, index, k) with a fixed
 *         counter per draw, so no draw depends on how many attempts failed
 *         before it:
 *           attempt a (0..9):  k = 4a     area share  uniform in [scale_min, scale_max)
 *                              k = 4a + 1 log ratio   uniform in [log ratio_min, log ratio_max)
 *                              k = 4a + 2 top  i      uniform integer in [0, H - h]
 *                              k = 4a + 3 left j      uniform integer in [0, W - w]
 *           flip:              k = 40     flip when uniform < flip_prob
 *         Integers are feeder_random() % n (bias below 2^-32 for any n that
 *         fits 32 bits). w and h are round_half_even(sqrt(area * ratio)) and
 *         round_half_even(sqrt(area / ratio)) as Python's round() gives.
 *         The fallback is torchvision's: the centred, largest box whose ratio
 *         is clamped to [ratio_min, ratio_max].
 * RESIZE = the whole image.
 */
#include <math.h>

#include "common/common.h"
#include "decode/transform.h"

enum { CROP_ATTEMPTS = 10, CROP_DRAWS_PER_ATTEMPT = 4, CROP_FLIP_COUNTER = 40 };

/* round_half_even((a - b) / 2) for integers a >= b. */
static uint32_t half_offset(uint32_t a, uint32_t b)
{
    uint32_t d = a - b, q = d / 2;
    if ((d & 1) && (q & 1))
        q++;
    return q;
}

/* round_half_up(num / den) in exact integer arithmetic, den > 0. */
static uint32_t div_round(uint64_t num, uint64_t den)
{
    return (uint32_t)((2 * num + den) / (2 * den));
}

/* One axis of EVAL: source length n, resized length r, output length o. */
static void eval_axis(uint32_t n, uint32_t r, uint32_t o, uint32_t *x, uint32_t *w, double *fx,
                      double *fw)
{
    if (o >= r || r == 0) {
        /* Crop not smaller than the resized image: the whole axis (see above). */
        *x = 0;
        *w = n;
        *fx = 0.0;
        *fw = n;
        return;
    }
    uint32_t off = half_offset(r, o);
    uint32_t x0 = div_round((uint64_t)off * n, r);
    uint32_t x1 = div_round((uint64_t)(off + o) * n, r);
    if (x1 > n)
        x1 = n;
    if (x1 <= x0) { /* tiny source: keep at least one pixel */
        if (x0 >= n)
            x0 = n - 1;
        x1 = x0 + 1;
    }
    *x = x0;
    *w = x1 - x0;
    *fx = (double)off * n / r;
    *fw = (double)o * n / r;
}

static void crop_eval(const feeder__transform *t, uint32_t sw, uint32_t sh, feeder__crop *c)
{
    uint64_t size = t->resize ? t->resize : 1;
    uint32_t rw, rh;
    if (sw <= sh) {
        rw = (uint32_t)size;
        rh = (uint32_t)(size * sh / sw);
    } else {
        rh = (uint32_t)size;
        rw = (uint32_t)(size * sw / sh);
    }
    eval_axis(sw, rw, t->width, &c->x, &c->w, &c->fx, &c->fw);
    eval_axis(sh, rh, t->height, &c->y, &c->h, &c->fy, &c->fh);
}

static uint32_t draw_int(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t k, uint32_t n)
{
    return (uint32_t)(feeder_random(seed, epoch, index, k) % n);
}

static void crop_train(const feeder__transform *t, uint32_t W, uint32_t H, uint64_t seed,
                       uint64_t epoch, uint64_t index, feeder__crop *c)
{
    double area = (double)W * H;
    double lr0 = log(t->ratio_min), lr1 = log(t->ratio_max);
    for (int a = 0; a < CROP_ATTEMPTS; a++) {
        uint64_t k = (uint64_t)a * CROP_DRAWS_PER_ATTEMPT;
        double u0 = feeder_random_uniform(seed, epoch, index, k);
        double u1 = feeder_random_uniform(seed, epoch, index, k + 1);
        double target = area * (t->scale_min + (t->scale_max - t->scale_min) * u0);
        double ratio = exp(lr0 + (lr1 - lr0) * u1);
        double w = feeder__round_half_even(sqrt(target * ratio));
        double h = feeder__round_half_even(sqrt(target / ratio));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            c->w = (uint32_t)w;
            c->h = (uint32_t)h;
            c->y = draw_int(seed, epoch, index, k + 2, H - c->h + 1);
            c->x = draw_int(seed, epoch, index, k + 3, W - c->w + 1);
            return;
        }
    }
    /* torchvision's fallback: centre crop with the ratio clamped. */
    double in_ratio = (double)W / H;
    double w = W, h = H;
    if (in_ratio < t->ratio_min)
        h = feeder__round_half_even(w / t->ratio_min);
    else if (in_ratio > t->ratio_max)
        w = feeder__round_half_even(h * t->ratio_max);
    /* A degenerate ratio range could round to 0 or past the edge; torchvision
     * would fail later, we keep a valid box. */
    if (w < 1)
        w = 1;
    if (h < 1)
        h = 1;
    if (w > W)
        w = W;
    if (h > H)
        h = H;
    c->w = (uint32_t)w;
    c->h = (uint32_t)h;
    c->x = (W - c->w) / 2;
    c->y = (H - c->h) / 2;
}

void feeder__crop_compute(const feeder__transform *t, uint32_t src_w, uint32_t src_h,
                          uint64_t seed, uint64_t epoch, uint64_t index, feeder__crop *out)
{
    feeder__crop c = {0, 0, src_w, src_h, 0, 0.0, 0.0, src_w, src_h};
    if (src_w == 0 || src_h == 0) {
        *out = c;
        return;
    }
    switch (t->pipeline) {
    case FEEDER_PIPELINE_EVAL:
        crop_eval(t, src_w, src_h, &c);
        break;
    case FEEDER_PIPELINE_TRAIN:
        crop_train(t, src_w, src_h, seed, epoch, index, &c);
        c.fx = c.x;
        c.fy = c.y;
        c.fw = c.w;
        c.fh = c.h;
        c.flip = feeder_random_uniform(seed, epoch, index, CROP_FLIP_COUNTER) < t->flip_prob;
        break;
    default: /* FEEDER_PIPELINE_RESIZE */
        break;
    }
    *out = c;
}
