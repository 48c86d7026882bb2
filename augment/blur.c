/*
 * The convolutions: adjust_sharpness (torchvision's 3x3 "degenerate" image,
 * kernel [1 1 1; 1 5 1; 1 1 1] / 13 on the interior, blended with the
 * original) and gaussian_blur (torchvision's kernel, reflect padding,
 * rounded to uint8). The sharpness kernel is applied in integers: the
 * degenerate pixel is round(S / 13) for the integer sum S, which float32
 * weights cannot round differently (S / 13 is never a half). The Gaussian
 * runs as two float passes (rows, then columns); torch convolves with the
 * 2-D outer product, so sums differ in their last bits and a pixel at a
 * rounding edge may differ by one.
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"


size_t feeder__augment_scratch_bytes(uint32_t w, uint32_t h)
{
    size_t n = (size_t)w * h;
    /* a copy of the image, then floats: one plane and a padded row */
    return 3 * n + 64 + sizeof(float) * (n + 2 * ((size_t)w + h) + 256);
}

/* One channel (pixel stride ps) of adjust_sharpness; `rows` holds three
 * source rows, rolling. */
static inline __attribute__((always_inline)) void
sharpen_channel(uint8_t *p, size_t ps, uint32_t w, uint32_t h, const float *a, const float *b,
                uint8_t *rows)
{
    for (uint32_t k = 0; k < 2; k++)
        for (uint32_t x = 0; x < w; x++)
            rows[k * w + x] = p[((size_t)k * w + x) * ps];
    for (uint32_t y = 1; y + 1 < h; y++) {
        uint8_t *up = rows + ((y - 1) % 3) * w, *mid = rows + (y % 3) * w,
                *dn = rows + ((y + 1) % 3) * w;
        for (uint32_t x = 0; x < w; x++)
            dn[x] = p[((size_t)(y + 1) * w + x) * ps];
        uint8_t *out = p + (size_t)y * w * ps;
        for (uint32_t x = 1; x + 1 < w; x++) {
            unsigned s = up[x - 1] + up[x] + up[x + 1] + mid[x - 1] + 5u * mid[x] + mid[x + 1] +
                         dn[x - 1] + dn[x] + dn[x + 1];
            unsigned deg = (2 * s + 13) / 26; /* round(s / 13) */
            out[x * ps] = feeder__trunc_u8(a[mid[x]] + b[deg]);
        }
    }
}

void feeder__aug_sharpness(feeder__aimg im, double factor, void *scratch)
{
    uint32_t w = im.w, h = im.h;
    if (w <= 2 || h <= 2)
        return;
    float a[256], b[256];
    float r = (float)factor, q = (float)(1.0 - factor);
    for (int v = 0; v < 256; v++) {
        a[v] = r * (float)v;
        b[v] = q * (float)v;
    }
    for (uint32_t c = 0; c < im.nc; c++) {
        uint8_t *p = im.p + (size_t)c * im.cs;
        if (im.ps == 3)
            sharpen_channel(p, 3, w, h, a, b, scratch);
        else
            sharpen_channel(p, 1, w, h, a, b, scratch);
    }
}

/* Rows: plane[y * w + x] = sum_j k[j] * src(x + j - r, y), reflected; the
 * sum in j order, as one accumulation per x (a loop the compiler vectorises
 * over x). */
static inline __attribute__((always_inline)) void
blur_rows_ps(const uint8_t *p, size_t ps, uint32_t w, uint32_t h, const float *k,
             uint32_t ksize, float *plane, float *row)
{
    uint32_t r = ksize / 2;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *src = p + (size_t)y * w * ps;
        for (uint32_t x = 0; x < r; x++) {
            row[x] = src[(size_t)feeder__reflect((int64_t)x - r, w) * ps];
            row[w + r + x] = src[(size_t)feeder__reflect((int64_t)w + x, w) * ps];
        }
        for (uint32_t x = 0; x < w; x++)
            row[r + x] = src[(size_t)x * ps];
        float *out = plane + (size_t)y * w;
        for (uint32_t x = 0; x < w; x++)
            out[x] = 0.0f;
        for (uint32_t j = 0; j < ksize; j++) {
            float kj = k[j];
            const float *in = row + j;
            for (uint32_t x = 0; x < w; x++)
                out[x] += kj * in[x];
        }
    }
}

static void blur_rows(feeder__aimg im, int c, const float *k, uint32_t ksize, float *plane,
                      float *row)
{
    const uint8_t *p = im.p + (size_t)c * im.cs;
    if (im.ps == 3)
        blur_rows_ps(p, 3, im.w, im.h, k, ksize, plane, row);
    else
        blur_rows_ps(p, 1, im.w, im.h, k, ksize, plane, row);
}

static inline __attribute__((always_inline)) void store_row(uint8_t *dst, size_t ps,
                                                          const float *acc, uint32_t w)
{
    for (uint32_t x = 0; x < w; x++) {
        float v = nearbyintf(acc[x]);
        dst[x * ps] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
    }
}

static void blur_cols(feeder__aimg im, int c, const float *k, uint32_t ksize, const float *plane,
                      float *acc)
{
    uint32_t w = im.w, h = im.h, r = ksize / 2;
    for (uint32_t y = 0; y < h; y++) {
        memset(acc, 0, w * sizeof(float));
        for (uint32_t j = 0; j < ksize; j++) {
            const float *src = plane + (size_t)feeder__reflect((int64_t)y + j - r, h) * w;
            float kj = k[j];
            for (uint32_t x = 0; x < w; x++)
                acc[x] += kj * src[x];
        }
        uint8_t *dst = im.p + (size_t)c * im.cs + (size_t)y * w * im.ps;
        if (im.ps == 3)
            store_row(dst, 3, acc, w);
        else
            store_row(dst, 1, acc, w);
    }
}

void feeder__aug_gaussian_blur(feeder__aimg im, uint32_t ksize, double sigma, void *scratch)
{
    if (ksize < 2 || im.w == 0 || im.h == 0)
        return;
    /* reflect padding needs r < each side (torch's rule too) */
    uint32_t r = ksize / 2;
    if (r >= im.w || r >= im.h)
        return;
    float k[64];
    feeder__aug_gauss_kernel(k, ksize, sigma);
    uint8_t *base = (uint8_t *)scratch + 3 * (size_t)im.w * im.h;
    float *plane = (float *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    float *row = plane + (size_t)im.w * im.h;
    for (int c = 0; c < (int)im.nc; c++) {
        blur_rows(im, c, k, ksize, plane, row);
        blur_cols(im, c, k, ksize, plane, row);
    }
}
