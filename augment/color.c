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

/* The per-pixel loops are written once as inline functions of the pixel
 * stride and called with NHWC's and NCHW's constants, so each layout gets
 * its own specialised loop. */
#define INLINE static inline __attribute__((always_inline))
#define BY_LAYOUT(im, fn, ...)                                                                  \
    ((im).ps == 3 ? fn((im).p, (im).p + 1, (im).p + 2, 3, __VA_ARGS__)                         \
                  : fn((im).p, (im).p + (im).cs, (im).p + 2 * (im).cs, 1, __VA_ARGS__))
/* Gray images (nc 1) never go through BY_LAYOUT: each op that has one
 * handles them first. */

static inline uint8_t trunc_u8(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

/* Every channel through one 256-entry table (the 3n bytes are contiguous
 * in either layout). */
static void apply_lut(feeder__aimg im, const uint8_t lut[256])
{
    size_t n = im.nc * (size_t)im.w * im.h;
    uint8_t *p = im.p;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint8_t a = lut[p[i]], b = lut[p[i + 1]], c = lut[p[i + 2]], d = lut[p[i + 3]];
        p[i] = a;
        p[i + 1] = b;
        p[i + 2] = c;
        p[i + 3] = d;
    }
    for (; i < n; i++)
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

/* rgb_to_grayscale's luma: (0.2989 r + 0.587 g) + 0.114 b in float32,
 * truncated (each product rounded to float first, as torch's separate
 * tensor ops do; C11 does not contract them into fused multiply-adds). The
 * loops stay branch-free so the compiler vectorises them. */
typedef int luma_tab; /* unused: the luma is computed inline */

static inline float clamp255(float v)
{
    v = v > 0.0f ? v : 0.0f;
    return v < 255.0f ? v : 255.0f;
}

static inline uint8_t luma(const luma_tab *t, uint8_t r, uint8_t g, uint8_t b)
{
    (void)t;
    float l = 0.2989f * (float)r;
    l += 0.587f * (float)g;
    l += 0.114f * (float)b;
    return (uint8_t)(int)clamp255(l);
}

static inline void luma_init(luma_tab *t) { *t = 0; }

INLINE uint64_t luma_sum(const uint8_t *r, const uint8_t *g, const uint8_t *b, size_t ps,
                         size_t n, const luma_tab *t)
{
    uint32_t sum = 0; /* n <= 2^24 per call: the caller splits larger images */
    for (size_t i = 0; i < n; i++)
        sum += luma(t, r[i * ps], g[i * ps], b[i * ps]);
    return sum;
}

static uint64_t plane_sum(const uint8_t *p, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += p[i];
    return sum;
}

void feeder__aug_contrast(feeder__aimg im, double factor)
{
    luma_tab t;
    luma_init(&t);
    size_t n = (size_t)im.w * im.h;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += (size_t)1 << 24) {
        size_t m = n - i < ((size_t)1 << 24) ? n - i : ((size_t)1 << 24);
        feeder__aimg part = im;
        part.p += i * im.ps;
        /* torchvision: rgb_to_grayscale of one channel is the channel */
        sum += im.nc == 1 ? plane_sum(part.p, m) : BY_LAYOUT(part, luma_sum, m, &t);
    }
    float mean = n ? (float)((double)sum / (double)n) : 0.0f;
    blend_const(im, factor, mean);
}

/* In chunks: the chunk's luma first, then each channel against it, so
 * both loops vectorise. restrict holds: the pointers never reach the same
 * byte. */
enum { SAT_CHUNK = 1024 };

INLINE void luma_chunk(const uint8_t *restrict p0, const uint8_t *restrict p1,
                       const uint8_t *restrict p2, size_t ps, size_t n, const luma_tab *t,
                       float b, float *restrict g)
{
    for (size_t i = 0; i < n; i++)
        g[i] = b * (float)luma(t, p0[i * ps], p1[i * ps], p2[i * ps]);
}

INLINE void blend_chunk(uint8_t *restrict p, size_t ps, size_t n, float a,
                        const float *restrict g)
{
    for (size_t i = 0; i < n; i++)
        p[i * ps] = (uint8_t)(int)clamp255(a * (float)p[i * ps] + g[i]);
}

INLINE void saturate(uint8_t *p0, uint8_t *p1, uint8_t *p2, size_t ps, size_t n,
                     const luma_tab *t, float a, float b)
{
    float g[3 * SAT_CHUNK];
    if (ps == 3) { /* NHWC: each pixel's luma three times, then the bytes in a row */
        for (size_t i = 0; i < n; i += SAT_CHUNK) {
            size_t m = n - i < SAT_CHUNK ? n - i : SAT_CHUNK, o = i * 3;
            luma_chunk(p0 + o, p1 + o, p2 + o, 3, m, t, b, g + 2 * SAT_CHUNK);
            for (size_t k = 0; k < m; k++)
                g[3 * k] = g[3 * k + 1] = g[3 * k + 2] = g[2 * SAT_CHUNK + k];
            blend_chunk(p0 + o, 1, 3 * m, a, g);
        }
        return;
    }
    for (size_t i = 0; i < n; i += SAT_CHUNK) {
        size_t m = n - i < SAT_CHUNK ? n - i : SAT_CHUNK, o = i * ps;
        luma_chunk(p0 + o, p1 + o, p2 + o, ps, m, t, b, g);
        blend_chunk(p0 + o, ps, m, a, g);
        blend_chunk(p1 + o, ps, m, a, g);
        blend_chunk(p2 + o, ps, m, a, g);
    }
}

void feeder__aug_saturation(feeder__aimg im, double factor)
{
    if (im.nc == 1)
        return; /* torchvision: adjust_saturation of one channel is the image */
    luma_tab t;
    luma_init(&t);
    BY_LAYOUT(im, saturate, (size_t)im.w * im.h, &t, (float)factor, (float)(1.0 - factor));
}

INLINE void gray(uint8_t *restrict p0, uint8_t *restrict p1, uint8_t *restrict p2, size_t ps,
                 size_t n, const luma_tab *t)
{
    for (size_t i = 0; i < n; i++) {
        size_t o = i * ps;
        uint8_t l = luma(t, p0[o], p1[o], p2[o]);
        p0[o] = l;
        p1[o] = l;
        p2[o] = l;
    }
}

void feeder__aug_grayscale(feeder__aimg im)
{
    if (im.nc == 1)
        return;
    luma_tab t;
    luma_init(&t);
    BY_LAYOUT(im, gray, (size_t)im.w * im.h, &t);
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

INLINE void hue_loop(uint8_t *p0, uint8_t *p1, uint8_t *p2, size_t ps, size_t n, float shift,
                     const float *inv)
{
    for (size_t i = 0; i < n; i++) {
        size_t o = i * ps;
        float rgb[3] = {inv[p0[o]], inv[p1[o]], inv[p2[o]]};
        hue_pixel(rgb, shift);
        p0[o] = trunc_u8(rgb[0] * 255.0f);
        p1[o] = trunc_u8(rgb[1] * 255.0f);
        p2[o] = trunc_u8(rgb[2] * 255.0f);
    }
}

void feeder__aug_hue(feeder__aimg im, double hue)
{
    if (im.nc == 1)
        return; /* torchvision: adjust_hue of one channel is the image */
    float inv[256];
    for (int v = 0; v < 256; v++)
        inv[v] = (float)v / 255.0f;
    BY_LAYOUT(im, hue_loop, (size_t)im.w * im.h, (float)hue, inv);
}

void feeder__aug_posterize(feeder__aimg im, int bits)
{
    uint8_t mask = (uint8_t)(0xFF << (8 - bits));
    size_t n = im.nc * (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++)
        im.p[i] &= mask;
}

void feeder__aug_solarize(feeder__aimg im, double threshold)
{
    /* v >= threshold for an integer v is v >= ceil(threshold) */
    double c = ceil(threshold);
    if (c > 255.0)
        return;
    uint8_t t = (uint8_t)(c < 0.0 ? 0 : c);
    size_t n = im.nc * (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i++)
        im.p[i] = im.p[i] >= t ? (uint8_t)(255 - im.p[i]) : im.p[i];
}

/* Each channel through its own table. */
INLINE void luts3(uint8_t *p0, uint8_t *p1, uint8_t *p2, size_t ps, size_t n,
                  uint8_t lut[3][256])
{
    for (size_t i = 0; i < n; i++) {
        size_t o = i * ps;
        p0[o] = lut[0][p0[o]];
        p1[o] = lut[1][p1[o]];
        p2[o] = lut[2][p2[o]];
    }
}

INLINE void hists3(uint8_t *p0, uint8_t *p1, uint8_t *p2, size_t ps, size_t n,
                   uint32_t hist[3][256])
{
    memset(hist, 0, 3 * 256 * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        size_t o = i * ps;
        hist[0][p0[o]]++;
        hist[1][p1[o]]++;
        hist[2][p2[o]]++;
    }
}

/* A gray image's one plane goes through the three-channel loops as all
 * three channels, so its three histograms and tables are the same. */
static void hists_of(feeder__aimg im, size_t n, uint32_t hists[3][256])
{
    if (im.nc == 1)
        hists3(im.p, im.p, im.p, 1, n, hists);
    else
        BY_LAYOUT(im, hists3, n, hists);
}

static void luts_to(feeder__aimg im, size_t n, uint8_t luts[3][256])
{
    if (im.nc == 1)
        apply_lut(im, luts[0]);
    else
        BY_LAYOUT(im, luts3, n, luts);
}

void feeder__aug_autocontrast(feeder__aimg im)
{
    uint32_t hists[3][256];
    uint8_t luts[3][256];
    size_t n = (size_t)im.w * im.h;
    hists_of(im, n, hists);
    for (int c = 0; c < 3; c++) {
        const uint32_t *hist = hists[c];
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
        for (int v = 0; v < 256; v++)
            luts[c][v] = trunc_u8(((float)v - mn) * scale);
    }
    luts_to(im, n, luts);
}

/* _scale_channel: PIL's equalize. */
void feeder__aug_equalize(feeder__aimg im)
{
    uint32_t hists[3][256];
    uint8_t luts[3][256];
    size_t n = (size_t)im.w * im.h;
    hists_of(im, n, hists);
    for (int c = 0; c < 3; c++) {
        const uint32_t *hist = hists[c];
        uint8_t *lut = luts[c];
        for (int v = 0; v < 256; v++)
            lut[v] = (uint8_t)v;
        int last = 255;
        while (last > 0 && !hist[last])
            last--;
        uint64_t total = 0;
        for (int v = 0; v < last; v++)
            total += hist[v];
        uint64_t step = total / 255;
        if (step == 0)
            continue; /* identity */
        uint64_t cum = 0;
        lut[0] = 0;
        for (int v = 0; v < 255; v++) {
            cum += hist[v];
            uint64_t e = (cum + step / 2) / step;
            lut[v + 1] = (uint8_t)(e > 255 ? 255 : e);
        }
    }
    luts_to(im, n, luts);
}
