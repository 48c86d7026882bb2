/*
 * The colour ops, as torchvision's functional_tensor (0.14) computes them on
 * uint8: products in float32, sums in the order torch adds the tensors, and
 * a cast that truncates (uint8 .to() of a float). Most reduce to lookup
 * tables: torch computes `ratio * img1` and `(1 - ratio) * img2` as whole
 * float tensors before adding them, so a table of each product and one
 * float addition per pixel give its bytes exactly.
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

#define PX(im, i, c) ((im).p[(size_t)(i) * (im).ps + (size_t)(c) * (im).cs])

static inline uint8_t trunc_u8(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

/* Every channel through one 256-entry table. */
static void apply_lut(feeder__aimg im, const uint8_t lut[256])
{
    size_t n = (size_t)im.w * im.h;
    if (im.ps == 1) {
        for (size_t i = 0; i < 3 * n; i++)
            im.p[i] = lut[im.p[i]];
        return;
    }
    uint8_t *p = im.p;
    for (size_t i = 0; i < 3 * n; i++)
        p[i] = lut[p[i]];
}

/* _blend(img, other, ratio) where `other` is the constant `other`. */
static void blend_const(feeder__aimg im, double ratio, float other)
{
    float r = (float)ratio, q = (float)(1.0 - ratio);
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = trunc_u8(r * (float)v + q * other);
    apply_lut(im, lut);
}

void feeder__aug_brightness(feeder__aimg im, double factor) { blend_const(im, factor, 0.0f); }

/* rgb_to_grayscale's luma tables: (0.2989 r + 0.587 g) + 0.114 b in float32. */
typedef struct luma_tab {
    float r[256], g[256], b[256];
} luma_tab;

static void luma_init(luma_tab *t)
{
    for (int v = 0; v < 256; v++) {
        t->r[v] = 0.2989f * (float)v;
        t->g[v] = 0.587f * (float)v;
        t->b[v] = 0.114f * (float)v;
    }
}

static inline uint8_t luma(const luma_tab *t, uint8_t r, uint8_t g, uint8_t b)
{
    return trunc_u8(t->r[r] + t->g[g] + t->b[b]);
}

void feeder__aug_contrast(feeder__aimg im, double factor)
{
    luma_tab t;
    luma_init(&t);
    size_t n = (size_t)im.w * im.h;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += luma(&t, PX(im, i, 0), PX(im, i, 1), PX(im, i, 2));
    float mean = n ? (float)((double)sum / (double)n) : 0.0f;
    blend_const(im, factor, mean);
}

void feeder__aug_saturation(feeder__aimg im, double factor)
{
    luma_tab t;
    luma_init(&t);
    float a[256], b[256];
    float r = (float)factor, q = (float)(1.0 - factor);
    for (int v = 0; v < 256; v++) {
        a[v] = r * (float)v;
        b[v] = q * (float)v;
    }
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p0 = &PX(im, i, 0), *p1 = &PX(im, i, 1), *p2 = &PX(im, i, 2);
        float g = b[luma(&t, *p0, *p1, *p2)];
        *p0 = trunc_u8(a[*p0] + g);
        *p1 = trunc_u8(a[*p1] + g);
        *p2 = trunc_u8(a[*p2] + g);
    }
}

void feeder__aug_grayscale(feeder__aimg im)
{
    luma_tab t;
    luma_init(&t);
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p0 = &PX(im, i, 0), *p1 = &PX(im, i, 1), *p2 = &PX(im, i, 2);
        uint8_t l = luma(&t, *p0, *p1, *p2);
        *p0 = *p1 = *p2 = l;
    }
}

/* _rgb2hsv, the hue shift and _hsv2rgb of one pixel in [0, 1] floats. */
static void hue_pixel(float *rgb, float shift)
{
    float r = rgb[0], g = rgb[1], b = rgb[2];
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    int eqc = maxc == minc;
    float cr = maxc - minc;
    float s = cr / (eqc ? 1.0f : maxc);
    float crd = eqc ? 1.0f : cr;
    float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
    float h;
    if (maxc == r)
        h = bc - gc;
    else if (maxc == g)
        h = 2.0f + rc - bc;
    else
        h = 4.0f + gc - rc;
    h = fmodf(h / 6.0f + 1.0f, 1.0f);
    h = h + shift;
    h = h - floorf(h); /* torch's %: the sign of the divisor */
    float v = maxc;
    float i = floorf(h * 6.0f), f = h * 6.0f - i;
    int ii = ((int)i % 6 + 6) % 6;
    float p = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
    float q = fminf(fmaxf(v * (1.0f - s * f), 0.0f), 1.0f);
    float t = fminf(fmaxf(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    static const uint8_t sel[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0},
                                      {0, 1, 2}};
    float vals[4] = {v, p, q, t};
    rgb[0] = vals[sel[ii][0]];
    rgb[1] = vals[sel[ii][1]];
    rgb[2] = vals[sel[ii][2]];
}

void feeder__aug_hue(feeder__aimg im, double hue)
{
    float shift = (float)hue, inv[256];
    for (int v = 0; v < 256; v++)
        inv[v] = (float)v / 255.0f;
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p0 = &PX(im, i, 0), *p1 = &PX(im, i, 1), *p2 = &PX(im, i, 2);
        float rgb[3] = {inv[*p0], inv[*p1], inv[*p2]};
        hue_pixel(rgb, shift);
        *p0 = trunc_u8(rgb[0] * 255.0f);
        *p1 = trunc_u8(rgb[1] * 255.0f);
        *p2 = trunc_u8(rgb[2] * 255.0f);
    }
}

void feeder__aug_posterize(feeder__aimg im, int bits)
{
    uint8_t mask = (uint8_t)(0xFF << (8 - bits)), lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)(v & mask);
    apply_lut(im, lut);
}

void feeder__aug_solarize(feeder__aimg im, double threshold)
{
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (double)v >= threshold ? (uint8_t)(255 - v) : (uint8_t)v;
    apply_lut(im, lut);
}

static void channel_lut(feeder__aimg im, int c, const uint8_t lut[256])
{
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++)
        PX(im, i, c) = lut[PX(im, i, c)];
}

static void channel_hist(feeder__aimg im, int c, uint32_t hist[256])
{
    memset(hist, 0, 256 * sizeof(uint32_t));
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++)
        hist[PX(im, i, c)]++;
}

void feeder__aug_autocontrast(feeder__aimg im)
{
    for (int c = 0; c < 3; c++) {
        uint32_t hist[256];
        channel_hist(im, c, hist);
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[lo])
            lo++;
        while (hi > 0 && !hist[hi])
            hi--;
        float mn = (float)lo, scale = 255.0f / ((float)hi - (float)lo);
        if (hi <= lo) {
            mn = 0.0f;
            scale = 1.0f;
        }
        uint8_t lut[256];
        for (int v = 0; v < 256; v++)
            lut[v] = trunc_u8(((float)v - mn) * scale);
        channel_lut(im, c, lut);
    }
}

/* _scale_channel: PIL's equalize. */
void feeder__aug_equalize(feeder__aimg im)
{
    for (int c = 0; c < 3; c++) {
        uint32_t hist[256];
        channel_hist(im, c, hist);
        int last = 255;
        while (last > 0 && !hist[last])
            last--;
        uint64_t total = 0;
        for (int v = 0; v < last; v++)
            total += hist[v];
        uint64_t step = total / 255;
        if (step == 0)
            continue;
        uint8_t lut[256];
        uint64_t cum = 0;
        lut[0] = 0;
        for (int v = 0; v < 255; v++) {
            cum += hist[v];
            uint64_t e = (cum + step / 2) / step;
            lut[v + 1] = (uint8_t)(e > 255 ? 255 : e);
        }
        channel_lut(im, c, lut);
    }
}
