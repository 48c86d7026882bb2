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

/* Where GCC can make them, the hot loops get an AVX2 clone picked at load
 * time (ifunc) beside the baseline one: the arithmetic is the same IEEE
 * float32 operations in either, so the bytes are too (tests/test_augment.c
 * checks them against the scalar formulas, every input colour). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(FEEDER_AUGMENT_NO_CLONES) /* test_augment_baseline */
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

/* rgb_to_grayscale's luma: (0.2989 r + 0.587 g) + 0.114 b in float32,
 * truncated (each product rounded to float first, as torch's separate
 * tensor ops do; C11 does not contract them into fused multiply-adds). No
 * integer formula gives these bytes: over all 2^24 colours, floor of the
 * exact sum with these float weights differs from the float result in 20
 * (r 20, g 152, b 7 is 96.000002 exactly and 95.99999 in float), and no
 * integer weights at 2^14 to 2^22 with any offset match all of them
 * (docs/ARCHITECTURE.md, augment). So the loops stay float and branch-free,
 * in chunks of contiguous planes, where the compiler vectorises them. */
static inline float clamp255(float v)
{
    v = v > 0.0f ? v : 0.0f;
    return v < 255.0f ? v : 255.0f;
}

static inline uint8_t luma_of(float r, float g, float b)
{
    float l = 0.2989f * r;
    l += 0.587f * g;
    l += 0.114f * b;
    /* in [0, 255.00001): no clamp needed (the weights sum to 1 + 2e-8) */
    return (uint8_t)(int)l;
}

enum { CHUNK = 1024 };

/* One chunk of n <= CHUNK pixels' three channels into planes (NHWC's
 * interleaved bytes are split here, once, so the arithmetic below runs on
 * contiguous data in both layouts). */
INLINE void planes_in(const uint8_t *restrict p, size_t ps, size_t cs, size_t n,
                      uint8_t q[3][CHUNK])
{
    if (ps == 3) {
        for (size_t i = 0; i < n; i++) {
            q[0][i] = p[3 * i];
            q[1][i] = p[3 * i + 1];
            q[2][i] = p[3 * i + 2];
        }
        return;
    }
    memcpy(q[0], p, n);
    memcpy(q[1], p + cs, n);
    memcpy(q[2], p + 2 * cs, n);
}

INLINE void planes_out(uint8_t *restrict p, size_t ps, size_t cs, size_t n,
                       uint8_t q[3][CHUNK])
{
    if (ps == 3) {
        for (size_t i = 0; i < n; i++) {
            p[3 * i] = q[0][i];
            p[3 * i + 1] = q[1][i];
            p[3 * i + 2] = q[2][i];
        }
        return;
    }
    memcpy(p, q[0], n);
    memcpy(p + cs, q[1], n);
    memcpy(p + 2 * cs, q[2], n);
}

INLINE void luma_plane(uint8_t q[3][CHUNK], size_t n, uint8_t *restrict l)
{
    for (size_t i = 0; i < n; i++)
        l[i] = luma_of((float)q[0][i], (float)q[1][i], (float)q[2][i]);
}

static inline uint32_t bytes_sum(const uint8_t *p, size_t n)
{
    uint32_t sum = 0; /* n <= CHUNK */
    for (size_t i = 0; i < n; i++)
        sum += p[i];
    return sum;
}

/* The sum of every pixel's luma (of the one plane when nc is 1:
 * torchvision's rgb_to_grayscale of one channel is the channel). */
MULTIVERSION static uint64_t luma_total(feeder__aimg im)
{
    uint8_t q[3][CHUNK], l[CHUNK];
    size_t n = (size_t)im.w * im.h;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (im.nc == 1) {
            sum += bytes_sum(im.p + i, m);
            continue;
        }
        if (im.ps == 3)
            planes_in(im.p + 3 * i, 3, 1, m, q);
        else
            planes_in(im.p + i, 1, im.cs, m, q);
        luma_plane(q, m, l);
        sum += bytes_sum(l, m);
    }
    return sum;
}

void feeder__aug_contrast(feeder__aimg im, double factor)
{
    size_t n = (size_t)im.w * im.h;
    uint64_t sum = luma_total(im);
    float mean = n ? (float)((double)sum / (double)n) : 0.0f;
    blend_const(im, factor, mean);
}

/* The float to byte of the blends: trunc_u8 of |v| < 2^31, clamped after
 * the conversion, in integers (v in (-1, 0] truncates to 0 as trunc_u8
 * gives it), which vectorises to min/max where the float clamp does not. */
static inline uint8_t sat_u8(float v)
{
    int i = (int)v;
    i = i > 0 ? i : 0;
    return (uint8_t)(i < 255 ? i : 255);
}

/* _blend(img, grayscale, factor) per chunk: a * p + (b * luma) in float32,
 * truncated; `wide` where |a| + |b| may take it past 2^31. */
INLINE void saturate_chunk(uint8_t q[3][CHUNK], size_t n, float a, float b, int wide)
{
    uint8_t l[CHUNK];
    luma_plane(q, n, l);
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) {
            float v = a * (float)q[c][i] + b * (float)l[i];
            q[c][i] = wide ? (uint8_t)(int)clamp255(v) : sat_u8(v);
        }
}

INLINE void saturate_all(feeder__aimg im, float a, float b, int wide)
{
    uint8_t q[3][CHUNK];
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (im.ps == 3) {
            planes_in(im.p + 3 * i, 3, 1, m, q);
            saturate_chunk(q, m, a, b, wide);
            planes_out(im.p + 3 * i, 3, 1, m, q);
        } else {
            planes_in(im.p + i, 1, im.cs, m, q);
            saturate_chunk(q, m, a, b, wide);
            planes_out(im.p + i, 1, im.cs, m, q);
        }
    }
}

MULTIVERSION static void saturate(feeder__aimg im, float a, float b)
{
    /* |a p + b l| <= 255 (|a| + |b|): below 2^31 for any factor under 4e6 */
    if (fabsf(a) + fabsf(b) < 4e6f)
        saturate_all(im, a, b, 0);
    else
        saturate_all(im, a, b, 1);
}

void feeder__aug_saturation(feeder__aimg im, double factor)
{
    if (im.nc == 1)
        return; /* torchvision: adjust_saturation of one channel is the image */
    saturate(im, (float)factor, (float)(1.0 - factor));
}

MULTIVERSION static void gray(feeder__aimg im)
{
    uint8_t q[3][CHUNK];
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (im.ps == 3)
            planes_in(im.p + 3 * i, 3, 1, m, q);
        else
            planes_in(im.p + i, 1, im.cs, m, q);
        luma_plane(q, m, q[0]);
        memcpy(q[1], q[0], m);
        memcpy(q[2], q[0], m);
        if (im.ps == 3)
            planes_out(im.p + 3 * i, 3, 1, m, q);
        else
            planes_out(im.p + i, 1, im.cs, m, q);
    }
}

void feeder__aug_grayscale(feeder__aimg im)
{
    if (im.nc == 1)
        return;
    gray(im);
}

/* _rgb2hsv, the hue shift and _hsv2rgb of a chunk of pixels, the
 * channels' bytes in q[0..2] and back: per pixel the same float32
 * operations in the same order as torchvision, written with selects
 * instead of branches and table lookups so that they vectorise. fmod(x, 1)
 * of x in [0, 2) is x - 1 when x >= 1 (exact); fmaxf/fminf of these
 * non-NaN values are the comparisons. */
INLINE float fmax2(float a, float b) { return a > b ? a : b; }
INLINE float fmin2(float a, float b) { return a < b ? a : b; }
INLINE float clamp01(float v) { return fmin2(fmax2(v, 0.0f), 1.0f); }
/* floorf of |x| < 2^23 (exact: the truncation and its float are exact). */
INLINE float floor_small(float x)
{
    float t = (float)(int)x, t1 = t - 1.0f;
    return t > x ? t1 : t;
}

INLINE void hue_chunk(uint8_t q[3][CHUNK], size_t n, float shift)
{
    for (size_t k = 0; k < n; k++) {
        float r = (float)q[0][k] / 255.0f, g = (float)q[1][k] / 255.0f;
        float b = (float)q[2][k] / 255.0f;
        float maxc = fmax2(r, fmax2(g, b)), minc = fmin2(r, fmin2(g, b));
        /* torchvision divides by 1 where maxc == minc (gray): there every
         * numerator below is +0, as it is over any positive divisor, and
         * elsewhere maxc and cr are near 1/255 or more, far above 1e-6 */
        float cr = maxc - minc;
        float s = cr / fmax2(maxc, 1e-6f);
        float crd = fmax2(cr, 1e-6f);
        float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
        /* every candidate computed, then picked: selects, not branches */
        float hr = bc - gc, hg = 2.0f + rc - bc, hb = 4.0f + gc - rc;
        float h = maxc == g ? hg : hb; /* one two-way select at a time */
        h = maxc == r ? hr : h;
        h = h / 6.0f + 1.0f;
        float h1 = h - 1.0f;
        h = h >= 1.0f ? h1 : h;
        h = h + shift;
        h = h - floor_small(h); /* torch's %: the sign of the divisor */
        float v = maxc;
        float i = floor_small(h * 6.0f), f = h * 6.0f - i;
        float i6 = i - 6.0f;
        i = i >= 6.0f ? i6 : i; /* h * 6 is in [0, 6] */
        float p = clamp01(v * (1.0f - s)), qq = clamp01(v * (1.0f - s * f));
        float t = clamp01(v * (1.0f - s * (1.0f - f)));
        /* sectors 0..5: (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q) */
        float ro = i == 4.0f ? t : p, go = i == 3.0f ? qq : p, bo = i == 5.0f ? qq : p;
        ro = i == 1.0f ? qq : ro;
        go = i == 0.0f ? t : go;
        bo = i == 2.0f ? t : bo;
        ro = (i == 0.0f) | (i == 5.0f) ? v : ro;
        go = (i == 1.0f) | (i == 2.0f) ? v : go;
        bo = (i == 3.0f) | (i == 4.0f) ? v : bo;
        q[0][k] = sat_u8(ro * 255.0f); /* in [0, 255] already */
        q[1][k] = sat_u8(go * 255.0f);
        q[2][k] = sat_u8(bo * 255.0f);
    }
}

/* Built with -fno-trapping-math (CMakeLists.txt), which lets GCC
 * if-convert the float operations it sinks into the select arms: it
 * changes no value, only which FP exception flags may be raised. */
MULTIVERSION static void hue(feeder__aimg im, float shift)
{
    uint8_t q[3][CHUNK];
    size_t n = (size_t)im.w * im.h;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        if (im.ps == 3) {
            planes_in(im.p + 3 * i, 3, 1, m, q);
            hue_chunk(q, m, shift);
            planes_out(im.p + 3 * i, 3, 1, m, q);
        } else {
            planes_in(im.p + i, 1, im.cs, m, q);
            hue_chunk(q, m, shift);
            planes_out(im.p + i, 1, im.cs, m, q);
        }
    }
}

void feeder__aug_hue(feeder__aimg im, double shift)
{
    if (im.nc == 1)
        return; /* torchvision: adjust_hue of one channel is the image */
    hue(im, (float)shift);
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
