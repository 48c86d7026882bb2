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
        lut[v] = feeder__trunc_u8(r * (float)v + q * other);
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

/* Every pixel of an RGB image, a chunk at a time as planes: fn(q, m, ...)
 * between planes_in and planes_out, each layout with its constants (a macro,
 * so each caller's loop stays specialised as BY_LAYOUT's do). */
#define BY_CHUNKS(im, fn, ...)                                                                  \
    do {                                                                                        \
        uint8_t q[3][CHUNK];                                                                    \
        size_t n = (size_t)(im).w * (im).h;                                                     \
        for (size_t i = 0; i < n; i += CHUNK) {                                                 \
            size_t m = n - i < CHUNK ? n - i : CHUNK;                                           \
            if ((im).ps == 3) {                                                                 \
                planes_in((im).p + 3 * i, 3, 1, m, q);                                          \
                fn(q, m, __VA_ARGS__);                                                          \
                planes_out((im).p + 3 * i, 3, 1, m, q);                                         \
            } else {                                                                            \
                planes_in((im).p + i, 1, (im).cs, m, q);                                        \
                fn(q, m, __VA_ARGS__);                                                          \
                planes_out((im).p + i, 1, (im).cs, m, q);                                       \
            }                                                                                   \
        }                                                                                       \
    } while (0)

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

/* The float to byte of the blends: feeder__trunc_u8 of |v| < 2^31, clamped after
 * the conversion, in integers (v in (-1, 0] truncates to 0 as feeder__trunc_u8
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
            q[c][i] = wide ? (uint8_t)(int)feeder__clamp255(v) : sat_u8(v);
        }
}

INLINE void saturate_all(feeder__aimg im, float a, float b, int wide)
{
    BY_CHUNKS(im, saturate_chunk, a, b, wide);
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

/* Pixels [from, w * h) to their luma, through planes (the portable loop). */
MULTIVERSION static void gray_from(feeder__aimg im, size_t from)
{
    uint8_t q[3][CHUNK];
    size_t n = (size_t)im.w * im.h;
    for (size_t i = from; i < n; i += CHUNK) {
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

/* The AVX2 grayscale, picked at run time: the same float32 products and
 * sums in the same order as luma_of, lane by lane (no contraction in C11,
 * and the target has no FMA), so the bytes are the portable loop's. NHWC's
 * interleaved bytes are split into R, G and B with byte shuffles in
 * registers and the luma spread back to three bytes the same way, where
 * the portable loop copies every byte through planes in memory (its NHWC
 * ran at 1.3x its NCHW's time on the dev VM, 1.5x on the H100 host). */
#if FEEDER__AUG_X86
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* The luma of 8 pixels' channels, int32 lanes in [0, 255], as int32. */
AVX2 static inline __m256i luma8(__m256i r, __m256i g, __m256i b)
{
    __m256 l = _mm256_mul_ps(_mm256_set1_ps(0.2989f), _mm256_cvtepi32_ps(r));
    l = _mm256_add_ps(l, _mm256_mul_ps(_mm256_set1_ps(0.587f), _mm256_cvtepi32_ps(g)));
    l = _mm256_add_ps(l, _mm256_mul_ps(_mm256_set1_ps(0.114f), _mm256_cvtepi32_ps(b)));
    return _mm256_cvttps_epi32(l); /* in [0, 255]: the packs below are exact */
}

/* Two int32 vectors of bytes to 16 bytes, lo's first. */
AVX2 static inline __m128i bytes16(__m256i lo, __m256i hi)
{
    /* packs works within 128-bit lanes: the permute puts lo's halves first */
    __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

AVX2 static inline __m256i widen8(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* 8 NHWC pixels' luma from 28 readable bytes at p: pixels 0-3 in the low
 * 128-bit lane, 4-7 (from byte 12) in the high one, each channel's bytes
 * shuffled into int32 lanes within its lane. */
AVX2 static inline __m256i luma8_nhwc(const uint8_t *p)
{
    __m128i lo = _mm_loadu_si128((const __m128i *)p);
    __m128i hi = _mm_loadu_si128((const __m128i *)(p + 12));
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const __m256i mr = _mm256_setr_epi8(0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1,
                                        -1, 0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1,
                                        -1, -1);
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    return luma8(_mm256_shuffle_epi8(v, mr), _mm256_shuffle_epi8(v, _mm256_add_epi32(mr, one)),
                 _mm256_shuffle_epi8(v, _mm256_add_epi32(mr, two)));
}

/* 32 NHWC pixels at q to their luma: the four int32 vectors packed into 32
 * bytes in order, then each 32-byte third of the output shuffled from the
 * two 16-byte halves it draws on (byte k is luma k / 3). */
AVX2 static inline void gray32_nhwc(uint8_t *q)
{
    __m256i l0 = luma8_nhwc(q), l1 = luma8_nhwc(q + 24), l2 = luma8_nhwc(q + 48),
            l3 = luma8_nhwc(q + 72);
    __m256i w = _mm256_packus_epi16(_mm256_packs_epi32(l0, l1), _mm256_packs_epi32(l2, l3));
    __m256i l = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m128i a = _mm_setr_epi8(0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5),
                  b = _mm_setr_epi8(5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10),
                  c = _mm_setr_epi8(10, 11, 11, 11, 12, 12, 12, 13, 13, 13, 14, 14, 14, 15, 15, 15);
    __m256i *o = (__m256i *)q;
    _mm256_storeu_si256(o, _mm256_shuffle_epi8(_mm256_permute4x64_epi64(l, 0x44),
                                               _mm256_setr_m128i(a, b)));
    _mm256_storeu_si256(o + 1, _mm256_shuffle_epi8(l, _mm256_setr_m128i(c, a)));
    _mm256_storeu_si256(o + 2, _mm256_shuffle_epi8(_mm256_permute4x64_epi64(l, 0xEE),
                                                   _mm256_setr_m128i(b, c)));
}

/* NHWC: the first pixels, 32 a step while 34 are left (a step reads 100
 * of their 102 bytes); returns how many it did. */
AVX2 static size_t gray3_avx2(uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 34 <= n; i += 32)
        gray32_nhwc(p + 3 * i);
    return i;
}

/* NCHW (planes cs bytes apart): the first n / 16 * 16 pixels. */
AVX2 static size_t gray_planes_avx2(uint8_t *p, size_t cs, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint8_t *r = p + i, *g = p + cs + i, *b = p + 2 * cs + i;
        __m128i l = bytes16(luma8(widen8(r), widen8(g), widen8(b)),
                            luma8(widen8(r + 8), widen8(g + 8), widen8(b + 8)));
        _mm_storeu_si128((__m128i *)(p + i), l);
        _mm_storeu_si128((__m128i *)(p + cs + i), l);
        _mm_storeu_si128((__m128i *)(p + 2 * cs + i), l);
    }
    return i;
}
#endif

void feeder__aug_grayscale(feeder__aimg im)
{
    if (im.nc == 1)
        return;
    size_t done = 0;
#if FEEDER__AUG_X86
    if (feeder__aug_have_avx2()) {
        size_t n = (size_t)im.w * im.h;
        done = im.ps == 3 ? gray3_avx2(im.p, n) : gray_planes_avx2(im.p, im.cs, n);
    }
#endif
    gray_from(im, done);
}

/* _rgb2hsv, the hue shift and _hsv2rgb of a chunk of pixels, the
 * channels' bytes in q[0..2] and back: per pixel the same float32
 * operations in the same order as torchvision, 8 pixels at a time in GCC
 * vector types (two SSE registers each in the baseline build, one AVX
 * register in the AVX2 clone), with bitwise selects instead of branches.
 * Written as vectors rather than left to the auto-vectoriser: the scalar
 * loop vectorised only where the compiler if-converted every select, and
 * where it did not (the H100 host's gcc 13 build ran it at 2.7 ms an image,
 * the dev VM's gcc 12 at 0.17 ms) it ran as unpredictable branches.
 * fmod(x, 1) of x in [0, 2) is x - 1 when x >= 1 (exact); fmaxf/fminf of
 * these non-NaN values are the comparisons. */
#if defined(__GNUC__) && !defined(__clang__)
/* every function taking or giving these is inlined: no call passes one */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* Bytes to floats / 255 (c < 3) and back, CHUNK rounded up to 8 lanes. */
enum { CHUNK8 = (CHUNK + 7) / 8 * 8 };

#define VF v4f
#define VI v4i
#define LANES 4
#define FN(name) name##4
#include "augment/hue_lanes.h"
#undef VF
#undef VI
#undef LANES
#undef FN
#define VF v8f
#define VI v8i
#define LANES 8
#define FN(name) name##8
#include "augment/hue_lanes.h"
#undef VF
#undef VI
#undef LANES
#undef FN

/* One chunk through the hue shift, `lanes` (4 or 8) pixels a step. */
INLINE void hue_chunk(uint8_t q[3][CHUNK], size_t n, float shift, int lanes)
{
    float x[3][CHUNK8];
    for (int c = 0; c < 3; c++) {
        for (size_t k = 0; k < n; k++)
            x[c][k] = (float)q[c][k] / 255.0f;
        for (size_t k = n; k < (n + 7) / 8 * 8; k++)
            x[c][k] = 0.0f;
    }
    if (lanes == 8)
        hue_lanes8(x, n, shift);
    else
        hue_lanes4(x, n, shift);
    for (int c = 0; c < 3; c++)
        for (size_t k = 0; k < n; k++)
            q[c][k] = sat_u8(x[c][k]); /* in [0, 255] already */
}

INLINE void hue_all(feeder__aimg im, float shift, int lanes)
{
    BY_CHUNKS(im, hue_chunk, shift, lanes);
}

/* The AVX2 path is picked by hand (not target_clones): its 8-lane vectors
 * are another type than the baseline's 4-lane ones. */
#if FEEDER__AUG_X86
__attribute__((target("avx2"))) static void hue_avx2(feeder__aimg im, float shift)
{
    hue_all(im, shift, 8);
}
#endif

static void hue(feeder__aimg im, float shift)
{
#if FEEDER__AUG_X86
    if (feeder__aug_have_avx2()) {
        hue_avx2(im, shift);
        return;
    }
#endif
    hue_all(im, shift, 4);
}

void feeder__aug_hue(feeder__aimg im, double shift)
{
    if (im.nc == 1)
        return; /* torchvision: adjust_hue of one channel is the image */
    hue(im, (float)shift);
}

/* One loop over the nc * w * h bytes, contiguous in either layout, so
 * NHWC and NCHW run the same code (the H100 host's 6.5 against 4.2 µs was
 * the bench's, not the op's: the dev VM gives them equal). The AVX2 clone's
 * 32-byte AND ran a 224 x 224 x 3 image in 2.0 µs against 2.9 on the dev VM. */
MULTIVERSION static void and_bytes(uint8_t *restrict p, size_t n, uint8_t mask)
{
    for (size_t i = 0; i < n; i++)
        p[i] &= mask;
}

void feeder__aug_posterize(feeder__aimg im, int bits)
{
    and_bytes(im.p, im.nc * (size_t)im.w * im.h, (uint8_t)(0xFF << (8 - bits)));
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

/* autocontrast: each channel's lowest and highest value (one pass, byte
 * min/max the compiler vectorises; NHWC's interleaved channels as 48-byte
 * blocks, position k holding channel k % 3), then ((v - lo) * 255 / (hi -
 * lo)) in float32, truncated: the table torchvision's formula gives, as
 * arithmetic that vectorises where table lookups do not. */
INLINE void plane_minmax(const uint8_t *restrict p, size_t n, uint8_t *lo, uint8_t *hi)
{
    uint8_t mn = 255, mx = 0;
    for (size_t i = 0; i < n; i++) {
        mn = p[i] < mn ? p[i] : mn;
        mx = p[i] > mx ? p[i] : mx;
    }
    *lo = mn;
    *hi = mx;
}

enum { BLOCK = 48 }; /* 16 NHWC pixels */

INLINE void nhwc_minmax(const uint8_t *restrict p, size_t n, uint8_t lo[3], uint8_t hi[3])
{
    uint8_t mn[BLOCK], mx[BLOCK];
    memset(mn, 255, sizeof(mn));
    memset(mx, 0, sizeof(mx));
    size_t i = 0;
    for (; i + BLOCK <= 3 * n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++) {
            mn[k] = p[i + k] < mn[k] ? p[i + k] : mn[k];
            mx[k] = p[i + k] > mx[k] ? p[i + k] : mx[k];
        }
    for (int k = 0; i + k < 3 * n; k++) { /* the last pixels, k < 48 */
        mn[k] = p[i + k] < mn[k] ? p[i + k] : mn[k];
        mx[k] = p[i + k] > mx[k] ? p[i + k] : mx[k];
    }
    for (int c = 0; c < 3; c++) {
        lo[c] = 255;
        hi[c] = 0;
        for (int k = c; k < BLOCK; k += 3) {
            lo[c] = mn[k] < lo[c] ? mn[k] : lo[c];
            hi[c] = mx[k] > hi[c] ? mx[k] : hi[c];
        }
    }
}

INLINE void plane_stretch(uint8_t *restrict p, size_t n, float mn, float scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = sat_u8(((float)p[i] - mn) * scale);
}

INLINE void nhwc_stretch(uint8_t *restrict p, size_t n, const float mn[3], const float sc[3])
{
    float m[BLOCK], s[BLOCK];
    for (int k = 0; k < BLOCK; k++) {
        m[k] = mn[k % 3];
        s[k] = sc[k % 3];
    }
    size_t i = 0;
    for (; i + BLOCK <= 3 * n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            p[i + k] = sat_u8(((float)p[i + k] - m[k]) * s[k]);
    for (int k = 0; i + k < 3 * n; k++)
        p[i + k] = sat_u8(((float)p[i + k] - m[k]) * s[k]);
}

MULTIVERSION static void autocontrast(feeder__aimg im)
{
    size_t n = (size_t)im.w * im.h;
    int planes = im.ps == 3 ? 1 : (int)im.nc;
    uint8_t lo[3], hi[3];
    float mn[3], sc[3];
    if (im.ps == 3)
        nhwc_minmax(im.p, n, lo, hi);
    else
        for (int c = 0; c < planes; c++)
            plane_minmax(im.p + (size_t)c * im.cs, n, &lo[c], &hi[c]);
    for (int c = 0; c < (im.ps == 3 ? 3 : planes); c++) {
        /* torchvision: bound 255, scale 255 / (max - min), where max == min
         * the image as it is (min 0, scale 1) */
        mn[c] = hi[c] > lo[c] ? (float)lo[c] : 0.0f;
        sc[c] = hi[c] > lo[c] ? 255.0f / ((float)hi[c] - (float)lo[c]) : 1.0f;
    }
    if (im.ps == 3)
        nhwc_stretch(im.p, n, mn, sc);
    else
        for (int c = 0; c < planes; c++)
            plane_stretch(im.p + (size_t)c * im.cs, n, mn[c], sc[c]);
}

void feeder__aug_autocontrast(feeder__aimg im) { autocontrast(im); }

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
