/*
 * Antialiased resize of an RGB/RGBX region into a sample's place in a batch:
 * a separable triangle filter whose support widens with the reduction
 * (Pillow's BILINEAR, which is what torchvision's Resize(antialias=True) and
 * RandomResizedCrop compute), in fixed point, with the horizontal flip and the
 * NHWC/NCHW layout folded in.
 *
 * WHY this one and not a library. Every candidate was measured on real
 * photos against a double-precision antialiased triangle filter (a program
 * removed after the result was recorded; docs/BENCHMARKS.md, "The resizer",
 * has the table).
 * libyuv is several times faster on the resize alone, but it is not the
 * filter the models were trained with: its ARGB "box" is bilinear without
 * antialiasing and its sampling grid is offset from the pixel-centre
 * convention, tens of levels off on edges; its planar box filter is slower
 * than this one and still far from the reference. stb_image_resize matches
 * the reference but is an order of magnitude slower. This filter stays
 * within 1 level of the reference at a fraction of the JPEG decode's cost.
 *
 * The filter follows Pillow's ImagingResample (precompute_coeffs): output
 * pixel i of an axis samples around centre = box0 + (i + 0.5) * scale,
 * scale = box_len / out_len, with the triangle stretched by
 * max(scale, 1), clipped to the available pixels (which may extend past the
 * box: the decoders hand over the whole decoded region, so border outputs see
 * their real neighbours, as a Resize-then-CenterCrop does) and renormalised.
 * Weights are int16 with the most fractional bits that fit (14..22), sums are
 * int32 with round-half-up, and the horizontal pass is rounded to 8 bits
 * before the vertical one, as Pillow does. The AVX2 path (chosen at run time),
 * the SSE2 path (x86-64 baseline) and the portable path do the same integer
 * arithmetic and give byte-identical results (tests/test_decode.c checks).
 * The flip is the horizontal weight table in reverse order, so a flipped
 * output is exactly the mirror of an unflipped one.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define FEEDER_RESIZE_SSE2 1
#endif
#if defined(FEEDER_RESIZE_SSE2) && defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FEEDER_RESIZE_AVX2 1
#endif

#include "decode/transform.h"

int feeder__buf_reserve(feeder__buf *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    /* Grow by half again so a run of slightly larger images does not
     * reallocate every time; 64-byte aligned for the SIMD loads. */
    size_t cap = b->cap + b->cap / 2;
    if (cap < n)
        cap = n;
    cap = (cap + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0)
        return -ENOMEM;
    free(b->p);
    b->p = p;
    b->cap = cap;
    return 0;
}

void feeder__buf_free(feeder__buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

void feeder__resizer_free(feeder__resizer *r)
{
    if (!r)
        return;
    feeder__buf_free(&r->coef);
    feeder__buf_free(&r->tmp);
    feeder__buf_free(&r->row);
}

/* One axis: for output i, taps [start[i], start[i] + count[i]) of the input
 * with weights w[i * ksize ...]. */
typedef struct axis {
    int32_t *start, *count;
    int16_t *w;
    int ksize;  /* stride of w, a multiple of the padding */
    int prec;   /* fractional bits of w */
    int padded; /* every count is a multiple of the padding (see axis_build) */
    int maxcount; /* the largest count */
} axis;

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Taps of output i in double precision, Pillow's precompute_coeffs. Returns
 * the number of taps, writes the first input index to *first. */
static int axis_taps(uint32_t in_len, double box0, double scale, double fscale, double support,
                     uint32_t i, int *first, double *k)
{
    double centre = box0 + (i + 0.5) * scale;
    double lo = centre - support + 0.5, hi = centre + support + 0.5;
    int xmin = lo < 0 ? 0 : (int)lo;
    int xmax = hi > (double)in_len ? (int)in_len : (int)hi;
    if (xmin >= (int)in_len)
        xmin = (int)in_len - 1;
    if (xmax <= xmin)
        xmax = xmin + 1;
    double sum = 0.0;
    int n = xmax - xmin;
    for (int x = 0; x < n; x++) {
        double d = x + xmin - centre + 0.5;
        k[x] = triangle(fscale == 1.0 ? d : d / fscale); /* d / 1.0 is d */
        sum += k[x];
    }
    if (sum > 0.0) {
        for (int x = 0; x < n; x++)
            k[x] /= sum;
    } else {
        /* A box outside the pixels (only from rounding at an edge): take
         * the nearest pixel. */
        for (int x = 0; x < n; x++)
            k[x] = x == 0;
    }
    *first = xmin;
    return n;
}

static int axis_ksize(double box_len, uint32_t out_len, int pad, double *scale, double *fscale,
                      double *support)
{
    *scale = box_len / out_len;
    *fscale = *scale > 1.0 ? *scale : 1.0;
    *support = 1.0 * *fscale;
    int ks = (int)ceil(*support) * 2 + 1;
    return (ks + pad - 1) / pad * pad;
}

static size_t axis_bytes(int ksize, uint32_t out_len)
{
    return (size_t)out_len * (2 * sizeof(int32_t) + (size_t)ksize * sizeof(int16_t));
}

/* Fill `a` (its arrays carved from `mem`) for one axis. `flip` reverses the
 * output order. With `fit` every tap count is rounded up to a multiple of
 * `pad` with zero weights, the window moved left where it would pass the last
 * pixel, so the SIMD passes read whole groups of `pad` pixels without tails
 * and without reading past the row (a->padded says whether that worked for
 * every output; a zero weight changes no sum, so the output is the same). */
static void axis_build(axis *a, void *mem, uint32_t in_len, double box0, double box_len,
                       uint32_t out_len, int flip, int pad, int fit, double *kd)
{
    double scale, fscale, support;
    a->ksize = axis_ksize(box_len, out_len, pad, &scale, &fscale, &support);
    a->padded = fit;
    a->maxcount = 0;
    a->start = mem;
    a->count = a->start + out_len;
    a->w = (int16_t *)(a->count + out_len);
    /* First pass in double to find the largest weight: it decides how many
     * fractional bits fit in int16. */
    double wmax = 0.0;
    double *kall = kd;
    for (uint32_t i = 0; i < out_len; i++) {
        int first;
        double *k = kall + (size_t)i * a->ksize;
        int n = axis_taps(in_len, box0, scale, fscale, support, i, &first, k);
        for (int x = 0; x < n; x++)
            if (k[x] > wmax)
                wmax = k[x];
        if (fit) {
            int n4 = (n + pad - 1) / pad * pad, shift = first + n4 - (int)in_len;
            if (shift > first) {
                a->padded = 0; /* fewer pixels than the padded window */
            } else {
                if (shift > 0) {
                    memmove(k + shift, k, (size_t)n * sizeof(double));
                    for (int x = 0; x < shift; x++)
                        k[x] = 0.0;
                    first -= shift;
                    n += shift;
                }
                for (; n < n4; n++)
                    k[n] = 0.0;
            }
        }
        uint32_t o = flip ? out_len - 1 - i : i;
        a->start[o] = first;
        a->count[o] = n;
        if (n > a->maxcount)
            a->maxcount = n;
    }
    int prec = 22;
    while (prec > 8 && wmax * (double)(1 << prec) + 0.5 > 32767.0)
        prec--;
    a->prec = prec;
    for (uint32_t i = 0; i < out_len; i++) {
        uint32_t o = flip ? out_len - 1 - i : i;
        const double *k = kall + (size_t)i * a->ksize;
        int16_t *w = a->w + (size_t)o * a->ksize;
        int n = a->count[o];
        for (int x = 0; x < a->ksize; x++)
            /* k >= 0: truncation is floor, without a libm call */
            w[x] = x < n ? (int16_t)(int32_t)(k[x] * (double)(1 << prec) + 0.5) : 0;
    }
}

static inline uint8_t clip8(int32_t v, int prec)
{
    v >>= prec;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/*
 * The passes. The intermediate image (horizontally resized rows) is packed
 * RGB, 3 bytes a pixel, rows `tstride` bytes apart, tstride a multiple of 32
 * with at least five spare bytes: the SSE2 horizontal pass stores 4 bytes per
 * pixel at 3-byte steps and the AVX2 one 8 bytes per pair of pixels at 6-byte
 * steps (the next store overwrites the spare bytes; an odd last pixel is
 * stored as a pair), and the vertical passes work on whole 16/32-byte blocks
 * of a row. The vertical pass then yields rows that are already NHWC.
 */

/* Horizontal pass, portable: rows [y0, y1) of src into tmp, oc sums a pixel
 * (3: RGB from pixels ch bytes apart; 1: gray, ch 1). Inlined with constant
 * counts, so each call's loop is compiled for its own shape. */
static inline __attribute__((always_inline)) void
hpass_portable(const axis *a, const uint8_t *src, size_t stride, int ch, int oc, uint32_t y0,
               uint32_t y1, uint8_t *tmp, size_t tstride, uint32_t out_w)
{
    int32_t half = 1 << (a->prec - 1);
    for (uint32_t y = y0; y < y1; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        uint8_t *d = tmp + (size_t)(y - y0) * tstride;
        for (uint32_t i = 0; i < out_w; i++) {
            const uint8_t *p = s + (size_t)a->start[i] * ch;
            const int16_t *w = a->w + (size_t)i * a->ksize;
            int32_t acc[3] = {half, half, half};
            for (int x = 0; x < a->count[i]; x++, p += ch)
                for (int c = 0; c < oc; c++)
                    acc[c] += p[c] * w[x];
            for (int c = 0; c < oc; c++)
                d[oc * i + c] = clip8(acc[c], a->prec);
        }
    }
}

/* Vertical pass, portable: output row `o` from tmp into `row`. */
static void vpass_portable(const axis *a, uint32_t o, const uint8_t *tmp, size_t tstride,
                           uint32_t y0, uint8_t *row, size_t nbytes)
{
    int32_t half = 1 << (a->prec - 1);
    const int16_t *w = a->w + (size_t)o * a->ksize;
    const uint8_t *base = tmp + (size_t)(a->start[o] - (int32_t)y0) * tstride;
    int n = a->count[o];
    for (size_t x = 0; x < nbytes; x++) {
        int32_t acc = half;
        const uint8_t *p = base + x;
        for (int k = 0; k < n; k++, p += tstride)
            acc += *p * w[k];
        row[x] = clip8(acc, a->prec);
    }
}

#ifdef FEEDER_RESIZE_SSE2
static inline __m128i load32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128(v);
}

/* Two int16 weights as one int32 lane, for pmaddwd against (a, b) pairs. */
static inline int32_t pair(const int16_t *w)
{
    return (int32_t)(((uint32_t)(uint16_t)w[1] << 16) | (uint16_t)w[0]);
}

/* Horizontal pass, SSE2, 4-byte pixels: two taps per pmaddwd. */
static void hpass_sse2(const axis *a, const uint8_t *src, size_t stride, uint32_t y0,
                       uint32_t y1, uint8_t *tmp, size_t tstride, uint32_t out_w)
{
    const __m128i zero = _mm_setzero_si128();
    const __m128i half = _mm_set1_epi32(1 << (a->prec - 1));
    const int prec = a->prec;
    for (uint32_t y = y0; y < y1; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        uint8_t *d = tmp + (size_t)(y - y0) * tstride;
        for (uint32_t i = 0; i < out_w; i++) {
            const uint8_t *p = s + (size_t)a->start[i] * 4;
            const int16_t *w = a->w + (size_t)i * a->ksize;
            int n = a->count[i], x = 0;
            __m128i acc = half;
            for (; x + 1 < n; x += 2) {
                __m128i v = _mm_loadl_epi64((const __m128i *)(p + 4 * x));
                v = _mm_unpacklo_epi8(v, _mm_srli_si128(v, 4)); /* r0 r1 g0 g1 b0 b1 x0 x1 */
                v = _mm_unpacklo_epi8(v, zero);
                acc = _mm_add_epi32(acc, _mm_madd_epi16(v, _mm_set1_epi32(pair(w + x))));
            }
            if (x < n) {
                __m128i v = _mm_unpacklo_epi8(load32(p + 4 * x), zero);
                v = _mm_unpacklo_epi16(v, zero);
                acc = _mm_add_epi32(acc, _mm_madd_epi16(v, _mm_set1_epi32((uint16_t)w[x])));
            }
            acc = _mm_srai_epi32(acc, prec);
            acc = _mm_packs_epi32(acc, acc);
            acc = _mm_packus_epi16(acc, acc);
            int32_t px = _mm_cvtsi128_si32(acc);
            memcpy(d + 3 * i, &px, 4);
        }
    }
}

/* Horizontal pass of a gray image, SSE2: four taps per pmaddwd. Needs a
 * padded axis (every count a multiple of 4, every window inside the row),
 * where the zero-weight taps change no sum: the same bytes as
 * hpass_portable's gray sums. */
static void hpass_gray_sse2(const axis *a, const uint8_t *src, size_t stride, uint32_t y0,
                            uint32_t y1, uint8_t *tmp, size_t tstride, uint32_t out_w)
{
    const __m128i zero = _mm_setzero_si128();
    const int32_t half = 1 << (a->prec - 1);
    for (uint32_t y = y0; y < y1; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        uint8_t *d = tmp + (size_t)(y - y0) * tstride;
        for (uint32_t i = 0; i < out_w; i++) {
            const uint8_t *p = s + a->start[i];
            const int16_t *w = a->w + (size_t)i * a->ksize;
            __m128i acc = zero;
            for (int x = 0; x < a->count[i]; x += 4) {
                __m128i v = _mm_unpacklo_epi8(load32(p + x), zero);
                __m128i c = _mm_loadl_epi64((const __m128i *)(const void *)(w + x));
                acc = _mm_add_epi32(acc, _mm_madd_epi16(v, c));
            }
            int32_t v = half + _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_srli_si128(acc, 4));
            d[i] = clip8(v, a->prec);
        }
    }
}

/* Vertical pass, SSE2: 16 bytes of the row at a time (resize_vpass.h). */
#define VPASS_NAME vpass_sse2
#define VPASS_TARGET
#define VEC __m128i
#define VEC_BYTES 16
#define VOP(op) _mm_##op
#define VEC_LOAD _mm_load_si128
#define VEC_STORE _mm_store_si128
#define VEC_ZERO _mm_setzero_si128
#include "decode/resize_vpass.h"
#endif

#ifdef FEEDER_RESIZE_AVX2
/*
 * AVX2 (chosen at run time). The horizontal pass works on two rows and two
 * outputs at a time: an output's sums for two rows end up in one register
 * (lane 0 the first row, lane 1 the second, RGBX as int32), two outputs'
 * registers are shifted, packed and stored together, 6 bytes a row. pshufb
 * pairs up neighbouring pixels' channels for pmaddwd. On an axis whose every
 * count is 2 (an enlargement: the triangle spans two pixels) one pmaddwd
 * takes both taps of both rows; whose every count is 4 (a reduction up to
 * about 1.5x), two pmaddwd take taps 0-1 and 2-3 of both rows; with longer
 * windows each group of four taps of a row is one pmaddwd (lane 0 taps 0-1,
 * lane 1 taps 2-3) and the lanes are added at the end. The vertical pass goes
 * 32 bytes at a time. Same integer arithmetic as the other paths.
 */
typedef struct hctx {
    __m128i pairs;  /* r0 r1 g0 g1 b0 b1 x0 x1 of two neighbouring pixels */
    __m256i spread; /* taps 0-1 to lane 0, taps 2-3 to lane 1 */
    __m256i half;   /* rounding: both lanes (one group a row), else lane 0 only */
    __m256i rgb;    /* packed RGBX RGBX to RGB RGB, in each lane */
} hctx;

/* Output i of rows s0 and s1 on an axis padded to 4: the rounded-up sums,
 * lane 0 for s0, lane 1 for s1. */
__attribute__((target("avx2"))) static inline __m256i hsum4(const hctx *h, const axis *a,
                                                            uint32_t i, const uint8_t *s0,
                                                            const uint8_t *s1)
{
    size_t off = (size_t)a->start[i] * 4;
    const int16_t *w = a->w + (size_t)i * a->ksize, *we = w + a->count[i];
    __m256i a0 = h->half, a1 = h->half;
    for (; w < we; w += 4, off += 16) {
        __m256i c = _mm256_permutevar8x32_epi32(
            _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)w)), h->spread);
        __m128i v0 = _mm_loadu_si128((const __m128i *)(s0 + off));
        __m128i v1 = _mm_loadu_si128((const __m128i *)(s1 + off));
        __m256i p0 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v0, h->pairs));
        __m256i p1 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v1, h->pairs));
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(p0, c));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(p1, c));
    }
    return _mm256_add_epi32(_mm256_permute2x128_si256(a0, a1, 0x20),
                            _mm256_permute2x128_si256(a0, a1, 0x31));
}

/* The same for an axis whose every count is 4: 16 bytes of each row, one
 * row a lane, taps 0-1 and 2-3 widened apart. */
__attribute__((target("avx2"))) static inline __m256i hsum4x1(const hctx *h, const axis *a,
                                                              uint32_t i, const uint8_t *s0,
                                                              const uint8_t *s1)
{
    size_t off = (size_t)a->start[i] * 4;
    const int16_t *w = a->w + (size_t)i * a->ksize;
    __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s0 + off))),
        _mm_loadu_si128((const __m128i *)(s1 + off)), 1);
    v = _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(h->pairs));
    __m256i lo = _mm256_unpacklo_epi8(v, _mm256_setzero_si256());
    __m256i hi = _mm256_unpackhi_epi8(v, _mm256_setzero_si256());
    __m256i acc = _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_set1_epi32(pair(w))),
                                   _mm256_madd_epi16(hi, _mm256_set1_epi32(pair(w + 2))));
    return _mm256_add_epi32(h->half, acc);
}

/* The same for an axis whose every count is 2: 8 bytes of each row. */
__attribute__((target("avx2"))) static inline __m256i hsum2(const hctx *h, const axis *a,
                                                            uint32_t i, const uint8_t *s0,
                                                            const uint8_t *s1)
{
    size_t off = (size_t)a->start[i] * 4;
    const int16_t *w = a->w + (size_t)i * a->ksize;
    int64_t q;
    memcpy(&q, s1 + off, 8);
    __m128i v = _mm_insert_epi64(_mm_loadl_epi64((const __m128i *)(s0 + off)), q, 1);
    __m256i p = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, h->pairs));
    return _mm256_add_epi32(h->half, _mm256_madd_epi16(p, _mm256_set1_epi32(pair(w))));
}

/* Outputs i and i + 1 (sums si, sj) of two rows: shift, saturate, 6 bytes
 * to d0 (first row) and d1 (second), 8 written. */
__attribute__((target("avx2"))) static inline void hstore2(const hctx *h, __m256i si,
                                                           __m256i sj, int prec, uint8_t *d0,
                                                           uint8_t *d1)
{
    __m256i v = _mm256_packs_epi32(_mm256_srai_epi32(si, prec), _mm256_srai_epi32(sj, prec));
    v = _mm256_shuffle_epi8(_mm256_packus_epi16(v, v), h->rgb);
    _mm_storel_epi64((__m128i *)d0, _mm256_castsi256_si128(v));
    _mm_storel_epi64((__m128i *)d1, _mm256_extracti128_si256(v, 1));
}

/* Rows s0 and s1 into d0 and d1 (the same pointers twice for a last odd
 * row). An odd last output is computed twice and stored as a pair whose
 * second half lands in the row's spare bytes. */
__attribute__((target("avx2"))) static void hrows_avx2(const hctx *h, const axis *a,
                                                       const uint8_t *s0, const uint8_t *s1,
                                                       uint8_t *d0, uint8_t *d1,
                                                       uint32_t out_w)
{
    for (uint32_t i = 0; i < out_w; i += 2) {
        uint32_t j = i + 1 < out_w ? i + 1 : i;
        __m256i si, sj;
        if (a->maxcount == 2) {
            si = hsum2(h, a, i, s0, s1);
            sj = hsum2(h, a, j, s0, s1);
        } else if (a->maxcount == 4) {
            si = hsum4x1(h, a, i, s0, s1);
            sj = hsum4x1(h, a, j, s0, s1);
        } else {
            si = hsum4(h, a, i, s0, s1);
            sj = hsum4(h, a, j, s0, s1);
        }
        hstore2(h, si, sj, a->prec, d0 + 3 * (size_t)i, d1 + 3 * (size_t)i);
    }
}

/* Needs a padded axis whose counts are all 2, or all multiples of 4 (every
 * window inside the row), and tmp rows with 5 spare bytes. */
__attribute__((target("avx2"))) static void hpass_avx2(const axis *a, const uint8_t *src,
                                                       size_t stride, uint32_t y0, uint32_t y1,
                                                       uint8_t *tmp, size_t tstride,
                                                       uint32_t out_w)
{
    const int32_t r = 1 << (a->prec - 1), l1 = a->maxcount <= 4 ? r : 0;
    hctx h;
    h.pairs = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    h.spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    h.half = _mm256_setr_epi32(r, r, r, r, l1, l1, l1, l1);
    h.rgb = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1,
                             2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (uint32_t y = y0; y < y1; y += 2) {
        const uint8_t *s0 = src + (size_t)y * stride, *s1 = y + 1 < y1 ? s0 + stride : s0;
        uint8_t *d0 = tmp + (size_t)(y - y0) * tstride, *d1 = y + 1 < y1 ? d0 + tstride : d0;
        hrows_avx2(&h, a, s0, s1, d0, d1, out_w);
    }
}

/* Vertical pass, AVX2: 32 bytes at a time, the same body (resize_vpass.h). */
#define VPASS_NAME vpass_avx2
#define VPASS_TARGET __attribute__((target("avx2")))
#define VEC __m256i
#define VEC_BYTES 32
#define VOP(op) _mm256_##op
#define VEC_LOAD _mm256_load_si256
#define VEC_STORE _mm256_store_si256
#define VEC_ZERO _mm256_setzero_si256
#include "decode/resize_vpass.h"

/* libgcc fills the CPU model in a constructor; this only reads it. */
static int have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#endif

/* A finished row (RGB, or gray when oc is 1: one plane in either layout)
 * into the output's row y, NHWC or NCHW. */
static void store_row(const uint8_t *row, uint8_t *dst, uint32_t y, uint32_t out_w,
                      uint32_t out_h, int layout, int oc)
{
    if (oc == 1) {
        memcpy(dst + (size_t)y * out_w, row, out_w);
    } else if (layout == FEEDER_LAYOUT_NCHW) {
        size_t plane = (size_t)out_w * out_h;
        uint8_t *r = dst + (size_t)y * out_w, *g = r + plane, *b = g + plane;
        for (uint32_t x = 0; x < out_w; x++) {
            r[x] = row[3 * x];
            g[x] = row[3 * x + 1];
            b[x] = row[3 * x + 2];
        }
    } else {
        memcpy(dst + (size_t)y * out_w * 3, row, (size_t)out_w * 3);
    }
}

static int box_ok(uint32_t n, double b0, double blen)
{
    /* NaN fails every comparison, so it is refused too. */
    return blen > 0.0 && b0 >= -1e-6 && b0 + blen <= n + 1e-6;
}

/* The widest code path this machine and the resizer's setting allow:
 * 0 portable, 1 SSE2, 2 AVX2. */
static int simd_level(const feeder__resizer *r)
{
    int level = 0;
#ifdef FEEDER_RESIZE_SSE2
    if (r->force != FEEDER__RESIZE_PORTABLE)
        level = 1;
#endif
#ifdef FEEDER_RESIZE_AVX2
    if (r->force == FEEDER__RESIZE_AUTO && have_avx2())
        level = 2;
#endif
    return level;
}

/* The weight tables of both axes, and the double scratch for building them,
 * in one buffer of the resizer. */
static int build_axes(feeder__resizer *r, uint32_t src_w, uint32_t src_h, double bx, double by,
                      double bw, double bh, uint32_t out_w, uint32_t out_h, int flip, int padx,
                      int fitx, axis *ax, axis *ay)
{
    double s_, f_, sup_;
    int kx = axis_ksize(bw, out_w, padx, &s_, &f_, &sup_);
    int ky = axis_ksize(bh, out_h, 2, &s_, &f_, &sup_);
    size_t hx = axis_bytes(kx, out_w), hy = axis_bytes(ky, out_h);
    size_t kmax = (size_t)(kx > ky ? kx : ky) * (out_w > out_h ? out_w : out_h);
    size_t dbl_off = (hx + hy + 15) & ~(size_t)15;
    int rc = feeder__buf_reserve(&r->coef, dbl_off + kmax * sizeof(double));
    if (rc)
        return rc;
    double *kd = (double *)(void *)(r->coef.p + dbl_off);
    axis_build(ax, r->coef.p, src_w, bx, bw, out_w, flip, padx, fitx, kd);
    axis_build(ay, r->coef.p + hx, src_h, by, bh, out_h, 0, 2, 0, kd);
    return 0;
}

/* The source rows [*y0, *y1) that some output row reads: only they go
 * through the horizontal pass. */
static void rows_read(const axis *ay, uint32_t out_h, uint32_t *y0, uint32_t *y1)
{
    *y0 = (uint32_t)ay->start[0];
    *y1 = 0;
    for (uint32_t o = 0; o < out_h; o++) {
        if ((uint32_t)ay->start[o] < *y0)
            *y0 = (uint32_t)ay->start[o];
        uint32_t e = (uint32_t)(ay->start[o] + ay->count[o]);
        if (e > *y1)
            *y1 = e;
    }
}

static void hpass(int level, const axis *ax, const uint8_t *src, size_t src_stride,
                  int src_channels, uint32_t y0, uint32_t y1, uint8_t *tmp, size_t tstride,
                  uint32_t out_w)
{
#ifdef FEEDER_RESIZE_SSE2
    if (src_channels == 1 && level >= 1) {
        hpass_gray_sse2(ax, src, src_stride, y0, y1, tmp, tstride, out_w);
        return;
    }
#endif
    switch (src_channels == 1 ? 0 : level) {
#ifdef FEEDER_RESIZE_AVX2
    case 2:
        hpass_avx2(ax, src, src_stride, y0, y1, tmp, tstride, out_w);
        break;
#endif
#ifdef FEEDER_RESIZE_SSE2
    case 1:
        hpass_sse2(ax, src, src_stride, y0, y1, tmp, tstride, out_w);
        break;
#endif
    default:
        if (src_channels == 1)
            hpass_portable(ax, src, src_stride, 1, 1, y0, y1, tmp, tstride, out_w);
        else
            hpass_portable(ax, src, src_stride, src_channels, 3, y0, y1, tmp, tstride, out_w);
        break;
    }
}

static void vpass(int level, const axis *ay, uint32_t o, const uint8_t *tmp, size_t tstride,
                  uint32_t y0, uint8_t *row, size_t nbytes)
{
    switch (level) {
#ifdef FEEDER_RESIZE_AVX2
    case 2:
        vpass_avx2(ay, o, tmp, tstride, y0, row, tstride);
        break;
#endif
#ifdef FEEDER_RESIZE_SSE2
    case 1:
        vpass_sse2(ay, o, tmp, tstride, y0, row, tstride);
        break;
#endif
    default:
        vpass_portable(ay, o, tmp, tstride, y0, row, nbytes);
        break;
    }
}

int feeder__resize(feeder__resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h,
                   size_t src_stride, int src_channels, double bx, double by, double bw,
                   double bh, uint8_t *dst, uint32_t out_w, uint32_t out_h, int flip, int layout)
{
    if (!src || !dst || src_w == 0 || src_h == 0 || out_w == 0 || out_h == 0 ||
        (src_channels != 1 && src_channels != 3 && src_channels != 4) ||
        src_stride < (size_t)src_w * (size_t)src_channels || !box_ok(src_w, bx, bw) ||
        !box_ok(src_h, by, bh) || out_w > (1u << 24) || out_h > (1u << 24))
        return FEEDER_EINVAL;
    int level = simd_level(r);
    /* RGBX: AVX2 or SSE2; RGB: portable; gray: SSE2 (level 1) on a padded
     * axis, else portable. */
    int hlevel = src_channels == 4 ? level : src_channels == 1 && level ? 1 : 0;
    /* AVX2 enlarging (every window 2 pixels): pairs; else groups of 4. */
    int two = hlevel == 2 && bw <= out_w;
    int padx = two ? 2 : hlevel == 2 || (src_channels == 1 && hlevel) ? 4 : 2;
    axis ax, ay;
    int rc = build_axes(r, src_w, src_h, bx, by, bw, bh, out_w, out_h, flip, padx,
                        padx == 4 || two, &ax, &ay);
    if (rc)
        return rc;
    if (hlevel == 2 && !(ax.padded && (!two || ax.maxcount == 2)))
        hlevel = 1;
    if (src_channels == 1 && !ax.padded)
        hlevel = 0;
    uint32_t y0, y1;
    rows_read(&ay, out_h, &y0, &y1);
    int oc = src_channels == 1 ? 1 : 3;
    /* 5 spare bytes a row: the AVX2 pass stores 8 bytes for 3 or 6. */
    size_t nbytes = (size_t)out_w * oc, tstride = (nbytes + 5 + 31) & ~(size_t)31;
    if ((rc = feeder__buf_reserve(&r->tmp, tstride * (y1 - y0))) ||
        (rc = feeder__buf_reserve(&r->row, tstride)))
        return rc;
    uint8_t *tmp = r->tmp.p, *row = r->row.p;
    hpass(hlevel, &ax, src, src_stride, src_channels, y0, y1, tmp, tstride, out_w);
    for (uint32_t o = 0; o < out_h; o++) {
        vpass(level, &ay, o, tmp, tstride, y0, row, nbytes);
        store_row(row, dst, o, out_w, out_h, layout, oc);
    }
    return 0;
}

int feeder__resize_reference(const uint8_t *src, uint32_t src_w, uint32_t src_h,
                             size_t src_stride, int src_channels, double bx, double by,
                             double bw, double bh, uint8_t *dst, uint32_t out_w, uint32_t out_h)
{
    if (!src || !dst || src_w == 0 || src_h == 0 || out_w == 0 || out_h == 0 ||
        (src_channels != 1 && src_channels != 3 && src_channels != 4) ||
        !box_ok(src_w, bx, bw) || !box_ok(src_h, by, bh))
        return FEEDER_EINVAL;
    int oc = src_channels == 1 ? 1 : 3;
    double sx, fx, supx, sy, fy, supy;
    int kx = axis_ksize(bw, out_w, 2, &sx, &fx, &supx);
    int ky = axis_ksize(bh, out_h, 2, &sy, &fy, &supy);
    double *wx = malloc((size_t)kx * sizeof(double)), *wy = malloc((size_t)ky * sizeof(double));
    if (!wx || !wy) {
        free(wx);
        free(wy);
        return -ENOMEM;
    }
    for (uint32_t oy = 0; oy < out_h; oy++) {
        int fy0, ny = axis_taps(src_h, by, sy, fy, supy, oy, &fy0, wy);
        for (uint32_t ox = 0; ox < out_w; ox++) {
            int fx0, nx = axis_taps(src_w, bx, sx, fx, supx, ox, &fx0, wx);
            double acc[3] = {0, 0, 0};
            for (int j = 0; j < ny; j++) {
                const uint8_t *p = src + (size_t)(fy0 + j) * src_stride;
                for (int i = 0; i < nx; i++) {
                    const uint8_t *q = p + (size_t)(fx0 + i) * src_channels;
                    double w = wy[j] * wx[i];
                    for (int c = 0; c < oc; c++)
                        acc[c] += w * q[c];
                }
            }
            for (int c = 0; c < oc; c++) {
                double v = floor(acc[c] + 0.5);
                dst[((size_t)oy * out_w + ox) * oc + c] = v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
            }
        }
    }
    free(wx);
    free(wy);
    return 0;
}
