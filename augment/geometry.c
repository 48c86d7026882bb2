/*
 * Flips and torchvision's tensor affine/rotate (functional_tensor 0.14):
 * the inverse matrix of _get_inverse_affine_matrix (in double, as Python
 * computes it), then for each output pixel the grid of _gen_affine_grid and
 * grid_sample's unnormalising (align_corners False, zero padding) in
 * float32 as torch computes them, nearest (round half to even) or bilinear.
 * With a fill, torchvision samples a mask channel of ones alongside: nearest
 * fills where the mask is below 0.5, bilinear gives img * mask + (1 - mask)
 * * fill; the result is rounded half to even.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "augment/augment.h"


#define INLINE static inline __attribute__((always_inline))

/* Two rows that never overlap: restrict lets the compiler swap them in
 * whole vectors without a runtime overlap check. */
INLINE void swap_bytes(uint8_t *restrict a, uint8_t *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* Rows are contiguous in both layouts: NHWC has one plane of rows of 3w
 * bytes, NCHW three planes of rows of w bytes. */
static void vflip(feeder__aimg im)
{
    int planes = im.ps == 3 ? 1 : (int)im.nc;
    size_t row = im.ps == 3 ? 3 * (size_t)im.w : im.w;
    for (int c = 0; c < planes; c++) {
        uint8_t *p = im.p + (size_t)c * im.cs;
        for (uint32_t y = 0; y < im.h / 2; y++)
            swap_bytes(p + y * row, p + (im.h - 1 - (size_t)y) * row, row);
    }
}

/* n bytes' two halves swapped end for end: lo[x] with hi[-x]. The halves
 * never overlap (x < n / 2), which restrict tells the compiler, so it
 * vectorises the reversal (byte shuffles). */
INLINE void reverse_bytes(uint8_t *restrict lo, uint8_t *restrict hi, size_t half)
{
    for (size_t x = 0; x < half; x++) {
        uint8_t t = lo[x];
        lo[x] = hi[-(ptrdiff_t)x];
        hi[-(ptrdiff_t)x] = t;
    }
}

INLINE void swap_ends(uint8_t *restrict p, uint32_t w)
{
    for (size_t x = 0; x < w; x++) {
        uint8_t t = p[3 * x];
        p[3 * x] = p[3 * x + 2];
        p[3 * x + 2] = t;
    }
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(FEEDER_AUGMENT_NO_CLONES) /* test_augment_baseline */
#define MULTIVERSION __attribute__((target_clones("avx2", "default"))) /* as augment/color.c */
#else
#define MULTIVERSION
#endif

MULTIVERSION static void hflip_rows(uint8_t *p, size_t ps, uint32_t w, size_t rows)
{
    for (size_t y = 0; y < rows; y++, p += (size_t)w * ps) {
        /* the row's bytes end for end, then each 3-byte pixel's first and
         * last byte back: two passes GCC vectorises, where one pass over
         * reversed 3-byte groups it does not */
        reverse_bytes(p, p + (size_t)w * ps - 1, (size_t)w * ps / 2);
        if (ps == 3)
            swap_ends(p, w);
    }
}

void feeder__aug_flip(feeder__aimg im, int vertical)
{
    if (vertical)
        vflip(im);
#if FEEDER__AUG_X86
    else if (im.ps == 3 && feeder__aug_have_vbmi())
        feeder__aug_hflip3_vbmi(im.p, im.w, im.h);
    else if (im.ps == 3 && feeder__aug_have_ssse3())
        feeder__aug_hflip3_ssse3(im.p, im.w, im.h);
#endif
    else if (im.ps == 3)
        hflip_rows(im.p, 3, im.w, im.h);
    else
        hflip_rows(im.p, 1, im.w, im.nc * (size_t)im.h); /* every plane's rows */
}

/* _get_inverse_affine_matrix(center, angle, translate, scale, shear). */
static void inverse_matrix(double cx, double cy, double angle, double tx, double ty,
                           double scale, double shx, double shy, double m[6])
{
    double rot = angle * M_PI / 180.0, sx = shx * M_PI / 180.0, sy = shy * M_PI / 180.0;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

typedef struct warp {
    float t[6];  /* rescaled theta: gx = xc * t[0] + yc * t[1] + t[2], gy likewise */
    int interp, fill;
} warp;

static void warp_make(warp *wp, const double m[6], uint32_t w, uint32_t h, int interp, int fill)
{
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    wp->t[0] = (float)m[0] / hw;
    wp->t[1] = (float)m[1] / hw;
    wp->t[2] = (float)m[2] / hw;
    wp->t[3] = (float)m[3] / hh;
    wp->t[4] = (float)m[4] / hh;
    wp->t[5] = (float)m[5] / hh;
    wp->interp = interp;
    wp->fill = fill;
}

static inline uint8_t round_u8(float v)
{
    v = nearbyintf(v);
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

/* One output pixel from `src` (a copy of the image, same layout: pixel
 * stride ps, channel stride cs). */
INLINE void sample_nearest(const uint8_t *src, uint8_t *dst, size_t ps, size_t cs, uint32_t w,
                           uint32_t h, size_t o, float ix, float iy, int fill)
{
    float rx = nearbyintf(ix), ry = nearbyintf(iy);
    int in = rx >= 0.0f && ry >= 0.0f && rx < (float)w && ry < (float)h;
    if (!in) {
        uint8_t f = (uint8_t)(fill < 0 ? 0 : fill);
        dst[o * ps] = dst[o * ps + cs] = dst[o * ps + 2 * cs] = f;
        return;
    }
    size_t i = ((size_t)ry * w + (size_t)rx) * ps;
    dst[o * ps] = src[i];
    dst[o * ps + cs] = src[i + cs];
    dst[o * ps + 2 * cs] = src[i + 2 * cs];
}

INLINE void sample_bilinear(const uint8_t *src, uint8_t *dst, size_t ps, size_t cs, uint32_t w,
                            uint32_t h, size_t o, float ix, float iy, int fill)
{
    float x0f = floorf(ix), y0f = floorf(iy);
    int64_t x0 = (int64_t)x0f, y0 = (int64_t)y0f;
    /* torch's weights: (ix_se - ix), (ix - ix_nw), likewise for y */
    float wx[2] = {(x0f + 1.0f) - ix, ix - x0f}, wy[2] = {(y0f + 1.0f) - iy, iy - y0f};
    float acc[3] = {0, 0, 0}, mask = 0.0f;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int64_t x = x0 + dx, y = y0 + dy;
            if (x < 0 || y < 0 || x >= (int64_t)w || y >= (int64_t)h)
                continue;
            float wgt = wx[dx] * wy[dy];
            const uint8_t *s = src + ((size_t)y * w + (size_t)x) * ps;
            acc[0] += wgt * s[0];
            acc[1] += wgt * s[cs];
            acc[2] += wgt * s[2 * cs];
            mask += wgt;
        }
    for (int c = 0; c < 3; c++) {
        float v = acc[c];
        if (fill >= 0)
            v = v * mask + (1.0f - mask) * (float)fill;
        dst[o * ps + (size_t)c * cs] = round_u8(v);
    }
}

/* Row y's pixels from x on. */
INLINE void warp_pixels(const uint8_t *src, uint8_t *dst, size_t ps, size_t cs, uint32_t w,
                        uint32_t h, const warp *wp, uint32_t y, uint32_t x)
{
    float fw = (float)w, fh = (float)h;
    float yc = -fh * 0.5f + 0.5f + (float)y;
    for (; x < w; x++) {
        float xc = -fw * 0.5f + 0.5f + (float)x;
        float gx = xc * wp->t[0] + yc * wp->t[1] + wp->t[2];
        float gy = xc * wp->t[3] + yc * wp->t[4] + wp->t[5];
        float ix = ((gx + 1.0f) * fw - 1.0f) / 2.0f;
        float iy = ((gy + 1.0f) * fh - 1.0f) / 2.0f;
        size_t o = (size_t)y * w + x;
        /* nearest: mask < 0.5 is "the nearest source pixel lies outside" */
        if (wp->interp == FEEDER_INTERP_NEAREST)
            sample_nearest(src, dst, ps, cs, w, h, o, ix, iy, wp->fill);
        else
            sample_bilinear(src, dst, ps, cs, w, h, o, ix, iy, wp->fill);
    }
}

INLINE void warp_loop(const uint8_t *src, uint8_t *dst, size_t ps, size_t cs, uint32_t w,
                      uint32_t h, const warp *wp)
{
    for (uint32_t y = 0; y < h; y++)
        warp_pixels(src, dst, ps, cs, w, h, wp, y, 0);
}

#if FEEDER__AUG_X86
/* The rows' blocks of 8 pixels with AVX2 (simd_x86.c, the same bytes), the
 * rest of each row as warp_loop does it. The gathers read 4 bytes a pixel:
 * NHWC and gray images from the copy (3 zero bytes after it), NCHW ones
 * from 4-byte pixels built after the copy. 0 where AVX2 is missing or the
 * image is too large for 32-bit offsets. */
static int warp_avx2(feeder__aimg im, const warp *wp, uint8_t *scratch)
{
    size_t n = (size_t)im.w * im.h;
    if (im.w < 8 || 4 * n + 64 > INT32_MAX || !feeder__aug_have_avx2())
        return 0;
    size_t ps = im.nc == 1 ? 1 : im.ps, cs = im.nc == 1 ? 0 : im.cs;
    feeder__vwarp v = {scratch, im.nc == 1 ? 1 : 3, (int)im.nc, im.w, im.h, {0}, wp->interp,
                       wp->fill};
    memcpy(v.t, wp->t, sizeof(v.t));
    memcpy(scratch, im.p, im.nc * n);
    memset(scratch + im.nc * n, 0, 4);
    if (im.nc == 3 && im.ps == 1) {
        uint32_t *q = (uint32_t *)(((uintptr_t)scratch + 3 * n + 3) & ~(uintptr_t)3);
        feeder__aug_planes_to_rgbx(scratch, n, n, q);
        v.src = (const uint8_t *)q;
        v.bpp = 4;
    }
    for (uint32_t y = 0; y < im.h; y++) {
        uint32_t x = feeder__aug_warp_row_avx2(&v, y, im.p, ps, cs);
        if (ps == 3)
            warp_pixels(scratch, im.p, 3, 1, im.w, im.h, wp, y, x);
        else
            warp_pixels(scratch, im.p, 1, cs, im.w, im.h, wp, y, x);
    }
    return 1;
}
#endif

/* The AVX2 clone (which has SSE4.1's roundss) makes floorf and nearbyintf
 * one instruction each, where x86-64's baseline calls libm for them, five
 * times a bilinear pixel; the same exact roundings either way. */
MULTIVERSION static void warp_scalar(feeder__aimg im, const warp *wp, void *scratch)
{
    memcpy(scratch, im.p, im.nc * (size_t)im.w * im.h);
    if (im.nc == 1) /* cs 0: the three channels are the one plane, written alike */
        warp_loop(scratch, im.p, 1, 0, im.w, im.h, wp);
    else if (im.ps == 3)
        warp_loop(scratch, im.p, 3, 1, im.w, im.h, wp);
    else
        warp_loop(scratch, im.p, 1, im.cs, im.w, im.h, wp);
}

static void warp_apply(feeder__aimg im, const warp *wp, void *scratch)
{
#if FEEDER__AUG_X86
    if (warp_avx2(im, wp, scratch))
        return;
#endif
    warp_scalar(im, wp, scratch);
}

void feeder__aug_affine(feeder__aimg im, double angle, double tx, double ty, double scale,
                        double shear_x, double shear_y, const double *center, int interp,
                        int fill, void *scratch)
{
    double cx = 0.0, cy = 0.0, m[6];
    if (center) {
        cx = center[0] - im.w * 0.5;
        cy = center[1] - im.h * 0.5;
    }
    inverse_matrix(cx, cy, angle, tx, ty, scale, shear_x, shear_y, m);
    warp wp;
    warp_make(&wp, m, im.w, im.h, interp, fill);
    warp_apply(im, &wp, scratch);
}

void feeder__aug_rotate(feeder__aimg im, double angle, int interp, int fill, void *scratch)
{
    double m[6];
    inverse_matrix(0.0, 0.0, -angle, 0.0, 0.0, 1.0, 0.0, 0.0, m);
    warp wp;
    warp_make(&wp, m, im.w, im.h, interp, fill);
    warp_apply(im, &wp, scratch);
}
