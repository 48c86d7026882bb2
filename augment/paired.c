/*
 * Paired transforms (include/feeder.h, "Fields"): one crop and flip per
 * sample, applied alike to an image, its mask and its boxes, for a fields
 * dataset's get callback. Its draws use their own counters, far from the
 * crop's (0..40) and the pipeline's steps (augment.h).
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

#define PAIR_COUNTER(k) ((UINT64_C(0xFFFE) << 32) | (uint64_t)(k))

/* The centre crop of the output's aspect: the fallback after ten tries. */
static void centre_crop(uint32_t sw, uint32_t sh, uint32_t ow, uint32_t oh, feeder_pair_crop *c)
{
    double want = (double)ow / oh;
    uint32_t w = sw, h = sh;
    if ((double)sw / sh > want)
        w = (uint32_t)fmax(1.0, round(sh * want));
    else
        h = (uint32_t)fmax(1.0, round(sw / want));
    c->x = (sw - w) / 2;
    c->y = (sh - h) / 2;
    c->width = w;
    c->height = h;
}

int feeder_pair_crop_draw(uint64_t seed, uint64_t epoch, uint64_t index, uint32_t src_width,
                          uint32_t src_height, uint32_t out_width, uint32_t out_height,
                          double scale_min, double scale_max, double flip_p,
                          feeder_pair_crop *out)
{
    if (!out || !src_width || !src_height || !out_width || !out_height || !(scale_min > 0) ||
        !(scale_min <= scale_max) || !(scale_max <= 1) || !(flip_p >= 0 && flip_p <= 1))
        return FEEDER_EINVAL;
    memset(out, 0, sizeof(*out));
    out->out_width = out_width;
    out->out_height = out_height;
    double area = (double)src_width * src_height, lo = log(3.0 / 4), hi = log(4.0 / 3);
    int found = 0;
    for (uint64_t t = 0; t < 10 && !found; t++) {
        double share = scale_min + (scale_max - scale_min) *
                                       feeder_random_uniform(seed, epoch, index, PAIR_COUNTER(4 * t));
        double ratio = exp(lo + (hi - lo) * feeder_random_uniform(seed, epoch, index,
                                                                  PAIR_COUNTER(4 * t + 1)));
        double w = round(sqrt(area * share * ratio)), h = round(sqrt(area * share / ratio));
        if (w < 1 || h < 1 || w > src_width || h > src_height)
            continue;
        out->width = (uint32_t)w;
        out->height = (uint32_t)h;
        out->x = (uint32_t)(feeder_random(seed, epoch, index, PAIR_COUNTER(4 * t + 2)) %
                            (src_width - out->width + 1));
        out->y = (uint32_t)(feeder_random(seed, epoch, index, PAIR_COUNTER(4 * t + 3)) %
                            (src_height - out->height + 1));
        found = 1;
    }
    if (!found)
        centre_crop(src_width, src_height, out_width, out_height, out);
    out->flip = feeder_random_uniform(seed, epoch, index, PAIR_COUNTER(100)) < flip_p;
    return 0;
}

/* Output column ox's source position (pixel centres), before clamping. */
static double src_pos(uint32_t o, uint32_t out, uint32_t start, uint32_t len)
{
    return start + ((double)o + 0.5) * len / out - 0.5;
}

static void nearest_row(const feeder_pair_crop *c, const uint8_t *src, uint32_t sw,
                        uint32_t ch, uint32_t oy, uint8_t *row)
{
    uint32_t sy = c->y + (uint32_t)(((uint64_t)oy * 2 + 1) * c->height / (2 * c->out_height));
    for (uint32_t ox = 0; ox < c->out_width; ox++) {
        uint32_t dx = c->flip ? c->out_width - 1 - ox : ox;
        uint32_t sx = c->x + (uint32_t)(((uint64_t)dx * 2 + 1) * c->width / (2 * c->out_width));
        memcpy(row + (size_t)ox * ch, src + ((size_t)sy * sw + sx) * ch, ch);
    }
}

static void bilinear_row(const feeder_pair_crop *c, const uint8_t *src, uint32_t sw,
                         uint32_t sh, uint32_t ch, uint32_t oy, uint8_t *row)
{
    double fy = fmin(fmax(src_pos(oy, c->out_height, c->y, c->height), 0), sh - 1);
    uint32_t y0 = (uint32_t)fy, y1 = y0 + 1 < sh ? y0 + 1 : y0;
    double wy = fy - y0;
    for (uint32_t ox = 0; ox < c->out_width; ox++) {
        uint32_t dx = c->flip ? c->out_width - 1 - ox : ox;
        double fx = fmin(fmax(src_pos(dx, c->out_width, c->x, c->width), 0), sw - 1);
        uint32_t x0 = (uint32_t)fx, x1 = x0 + 1 < sw ? x0 + 1 : x0;
        double wx = fx - x0;
        for (uint32_t k = 0; k < ch; k++) {
            double top = src[((size_t)y0 * sw + x0) * ch + k] * (1 - wx) +
                         src[((size_t)y0 * sw + x1) * ch + k] * wx;
            double bot = src[((size_t)y1 * sw + x0) * ch + k] * (1 - wx) +
                         src[((size_t)y1 * sw + x1) * ch + k] * wx;
            row[(size_t)ox * ch + k] = (uint8_t)lround(top * (1 - wy) + bot * wy);
        }
    }
}

int feeder_pair_crop_image(const feeder_pair_crop *c, const uint8_t *src, uint32_t src_width,
                           uint32_t src_height, uint32_t channels, int interp, uint8_t *dst)
{
    if (!c || !src || !dst || !channels || !c->width || !c->height || !c->out_width ||
        !c->out_height || c->x > src_width || c->width > src_width - c->x ||
        c->y > src_height || c->height > src_height - c->y ||
        (interp != FEEDER_INTERP_NEAREST && interp != FEEDER_INTERP_BILINEAR))
        return FEEDER_EINVAL;
    for (uint32_t oy = 0; oy < c->out_height; oy++) {
        uint8_t *row = dst + (size_t)oy * c->out_width * channels;
        if (interp == FEEDER_INTERP_NEAREST)
            nearest_row(c, src, src_width, channels, oy, row);
        else
            bilinear_row(c, src, src_width, src_height, channels, oy, row);
    }
    return 0;
}

static float clampf(float v, float hi) { return v < 0 ? 0 : v > hi ? hi : v; }

uint64_t feeder_pair_crop_boxes(const feeder_pair_crop *c, float *boxes, int64_t *classes,
                                uint64_t n)
{
    if (!c || !boxes || !c->width || !c->height)
        return 0;
    float sx = (float)c->out_width / c->width, sy = (float)c->out_height / c->height;
    float ow = (float)c->out_width, oh = (float)c->out_height;
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        float *b = boxes + i * 4;
        float x0 = clampf((b[0] - c->x) * sx, ow), x1 = clampf((b[2] - c->x) * sx, ow);
        float y0 = clampf((b[1] - c->y) * sy, oh), y1 = clampf((b[3] - c->y) * sy, oh);
        if (c->flip) {
            float t = ow - x1;
            x1 = ow - x0;
            x0 = t;
        }
        if (!(x1 > x0 && y1 > y0))
            continue;
        float *k = boxes + kept * 4;
        k[0] = x0, k[1] = y0, k[2] = x1, k[3] = y1;
        if (classes)
            classes[kept] = classes[i];
        kept++;
    }
    return kept;
}
