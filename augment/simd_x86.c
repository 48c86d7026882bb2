/*
 * The x86 vector versions of the ops GCC does not vectorise by itself:
 * the NHWC horizontal flip (AVX-512 VBMI byte permutes, else SSSE3 byte
 * shuffles) and the rotate / affine
 * warp (AVX2 gathers). Each is picked at run time (the CPU says what it
 * has); geometry.c keeps the portable loops for other CPUs, for the pixels
 * left over at the end of a row, and for builds with
 * FEEDER_AUGMENT_NO_CLONES (test_augment_baseline tests those loops).
 *
 * The warp computes, lane by lane, the same IEEE float32 operations in the
 * same order as geometry.c's scalar loop (C11 without contraction: no fused
 * multiply-adds, and the AVX2 target has no FMA), so its bytes are the
 * scalar loop's exactly: a neighbour outside the image gets weight +0,
 * which adds +0 to the sums, as skipping it does.
 */
#include <string.h>

#include "augment/augment.h"

#if FEEDER__AUG_X86

#include <immintrin.h>

#define SSSE3 __attribute__((target("ssse3")))
#define AVX2 __attribute__((target("avx2")))

int feeder__aug_have_ssse3(void) { return __builtin_cpu_supports("ssse3"); }
int feeder__aug_have_avx2(void) { return __builtin_cpu_supports("avx2"); }

/* ---- the NHWC horizontal flip ---- */

/* Pixels [i, i + 5) and [w - i - 5, w - i) of a row of 3-byte pixels
 * swapped end for end, from 16-byte loads: `f` at pixel i (its byte 15 is
 * pixel i + 5's first, stored back as it was) and `b` one byte before pixel
 * w - i - 5 (its byte 0 is the last byte of pixel w - i - 6, likewise). */
typedef struct ends {
    __m128i f, b;
} ends;

SSSE3 static inline ends load5(const uint8_t *row, uint32_t w, uint32_t i)
{
    ends e = {_mm_loadu_si128((const __m128i *)(row + 3 * (size_t)i)),
              _mm_loadu_si128((const __m128i *)(row + 3 * (size_t)(w - i - 5) - 1))};
    return e;
}

SSSE3 static inline void store5(uint8_t *row, uint32_t w, uint32_t i, ends e)
{
    const __m128i mf = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, -128);
    const __m128i mb = _mm_setr_epi8(-128, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2);
    const __m128i keep15 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1);
    const __m128i keep0 = _mm_setr_epi8(-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128i nf = _mm_or_si128(_mm_shuffle_epi8(e.b, mf), _mm_and_si128(e.f, keep15));
    __m128i nb = _mm_or_si128(_mm_shuffle_epi8(e.f, mb), _mm_and_si128(e.b, keep0));
    _mm_storeu_si128((__m128i *)(row + 3 * (size_t)i), nf);
    _mm_storeu_si128((__m128i *)(row + 3 * (size_t)(w - i - 5) - 1), nb);
}

/* The blocks of one row, each pair loaded before the previous pair is
 * stored: no load reads bytes a store before it wrote (a store-forwarding
 * stall each block otherwise). Both blocks and their extra bytes lie
 * inside the row, a pixel apart. Returns the first pixel not swapped. */
SSSE3 static uint32_t swap_blocks(uint8_t *row, uint32_t w)
{
    if (w < 11)
        return 0;
    ends e = load5(row, w, 0);
    uint32_t i = 0;
    for (; 2 * (size_t)(i + 5) + 11 <= w; i += 5) {
        ends next = load5(row, w, i + 5);
        store5(row, w, i, e);
        e = next;
    }
    store5(row, w, i, e);
    return i + 5;
}

/* 16 pixels (48 bytes, three vectors) end for end: output vector k takes
 * its bytes from at most three input vectors, one shuffle each. */
SSSE3 static inline void rev16(const __m128i a[3], __m128i o[3])
{
#define M(...) _mm_setr_epi8(__VA_ARGS__)
    const char z = -128;
    o[0] = _mm_or_si128(
        _mm_shuffle_epi8(a[2], M(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, z)),
        _mm_shuffle_epi8(a[1], M(z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, 14)));
    o[1] = _mm_or_si128(
        _mm_or_si128(
            _mm_shuffle_epi8(a[1], M(15, z, 11, 12, 13, 8, 9, 10, 5, 6, 7, 2, 3, 4, z, 0)),
            _mm_shuffle_epi8(a[0], M(z, z, z, z, z, z, z, z, z, z, z, z, z, z, 15, z))),
        _mm_shuffle_epi8(a[2], M(z, 0, z, z, z, z, z, z, z, z, z, z, z, z, z, z)));
    o[2] = _mm_or_si128(
        _mm_shuffle_epi8(a[0], M(z, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2)),
        _mm_shuffle_epi8(a[1], M(1, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)));
#undef M
}

/* Groups of 16 pixels from both ends of a row swapped end for end while
 * two fit; returns how many pixels each end has done. */
SSSE3 static uint32_t swap_groups(uint8_t *row, uint32_t w)
{
    uint32_t i = 0;
    for (; 2 * (size_t)(i + 16) <= w; i += 16) {
        __m128i *f = (__m128i *)(row + 3 * (size_t)i);
        __m128i *b = (__m128i *)(row + 3 * (size_t)(w - i - 16));
        __m128i a[3], c[3], ra[3], rc[3];
        for (int k = 0; k < 3; k++) {
            a[k] = _mm_loadu_si128(f + k);
            c[k] = _mm_loadu_si128(b + k);
        }
        rev16(a, ra);
        rev16(c, rc);
        for (int k = 0; k < 3; k++) {
            _mm_storeu_si128(f + k, rc[k]);
            _mm_storeu_si128(b + k, ra[k]);
        }
    }
    return i;
}

static inline void swap_pixel(uint8_t *a, uint8_t *b)
{
    for (int c = 0; c < 3; c++) {
        uint8_t t = a[c];
        a[c] = b[c];
        b[c] = t;
    }
}

/* One row: 16-pixel groups, then the middle (under 32 pixels) in 5-pixel
 * blocks, then pixel by pixel. */
SSSE3 static inline void flip_row_ssse3(uint8_t *p, uint32_t w)
{
    uint32_t g = swap_groups(p, w), m = w - 2 * g;
    uint8_t *mid = p + 3 * (size_t)g;
    uint32_t i = swap_blocks(mid, m);
    for (; 2 * (size_t)i + 1 < m; i++)
        swap_pixel(mid + 3 * (size_t)i, mid + 3 * (size_t)(m - 1 - i));
}

SSSE3 void feeder__aug_hflip3_ssse3(uint8_t *p, uint32_t w, size_t rows)
{
    for (size_t y = 0; y < rows; y++, p += 3 * (size_t)w)
        flip_row_ssse3(p, w);
}

/* 64 pixels (192 bytes) end for end with AVX-512 VBMI: output byte j is
 * input byte 189 - j + 2 (j mod 3), so output vector k (bytes 64k ..
 * 64k + 63) takes bytes from a 66-byte span, inside the 128 bytes of two
 * loads at base[k] and base[k] + 64: one two-source byte permute each
 * (vpermt2b), three per group, where SSSE3 needs seven shuffles per 16
 * pixels. */
#define RIX(j, base) (uint8_t)(189 - (j) + 2 * ((j) % 3) - (base))
#define RIX4(j, b) RIX(j, b), RIX((j) + 1, b), RIX((j) + 2, b), RIX((j) + 3, b)
#define RIX16(j, b) RIX4(j, b), RIX4((j) + 4, b), RIX4((j) + 8, b), RIX4((j) + 12, b)
#define RIX64(j, b) RIX16(j, b), RIX16((j) + 16, b), RIX16((j) + 32, b), RIX16((j) + 48, b)
static const uint8_t rev64_idx[3][64] __attribute__((aligned(64))) = {
    {RIX64(0, 64)}, {RIX64(64, 32)}, {RIX64(128, 0)}};
#undef RIX64
#undef RIX16
#undef RIX4
#undef RIX

#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

int feeder__aug_have_vbmi(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}

/* The five loads a group's permutes read: bytes 0, 32, 64, 96 and 128 on. */
typedef struct g64 {
    __m512i l[5];
} g64;

VBMI static inline g64 load64(const uint8_t *p)
{
    g64 g;
    for (int k = 0; k < 5; k++)
        g.l[k] = _mm512_loadu_si512(p + 32 * k);
    return g;
}

/* Group g reversed, stored at p. */
VBMI static inline void store64_reversed(uint8_t *p, g64 g)
{
    const __m512i *ix = (const __m512i *)rev64_idx;
    _mm512_storeu_si512(p, _mm512_permutex2var_epi8(g.l[2], _mm512_load_si512(ix), g.l[4]));
    _mm512_storeu_si512(p + 64,
                        _mm512_permutex2var_epi8(g.l[1], _mm512_load_si512(ix + 1), g.l[3]));
    _mm512_storeu_si512(p + 128,
                        _mm512_permutex2var_epi8(g.l[0], _mm512_load_si512(ix + 2), g.l[2]));
}

/* Groups of 64 pixels from both ends of a row swapped end for end while
 * two fit, both loaded before either is stored (in place); returns how
 * many pixels each end has done. */
VBMI static uint32_t swap_groups64(uint8_t *row, uint32_t w)
{
    uint32_t i = 0;
    for (; 2 * (size_t)(i + 64) <= w; i += 64) {
        uint8_t *f = row + 3 * (size_t)i, *b = row + 3 * (size_t)(w - i - 64);
        g64 gf = load64(f), gb = load64(b);
        store64_reversed(f, gb);
        store64_reversed(b, gf);
    }
    return i;
}

/* Output byte j's source is byte 3m - 3 - j + 2 (j mod 3) in a run of m
 * pixels: 2 (j mod 3) - j, mod 256, for j < 384, plus a constant. */
#define MIX(j) (uint8_t)(2 * ((j) % 3) - (j))
#define MIX4(j) MIX(j), MIX((j) + 1), MIX((j) + 2), MIX((j) + 3)
#define MIX16(j) MIX4(j), MIX4((j) + 4), MIX4((j) + 8), MIX4((j) + 12)
#define MIX64(j) MIX16(j), MIX16((j) + 16), MIX16((j) + 32), MIX16((j) + 48)
static const uint8_t mid_idx[384] = {MIX64(0),   MIX64(64),  MIX64(128),
                                     MIX64(192), MIX64(256), MIX64(320)};
#undef MIX64
#undef MIX16
#undef MIX4
#undef MIX

/* The middle of every row, m < 128 pixels (under 384 bytes) left by the
 * groups, end for end in one go, all loads before any store: output vector
 * k (64 bytes at out[k]; the last one ends at the middle's end, overlapping
 * the one before with the same bytes) reads a 66-byte span, inside the 128
 * bytes from base[k]. Where the middle has 128 bytes and more, every
 * vector lies inside it; in a shorter one the bytes past its end are
 * masked off (then the loads and stores cost more, and may overlap the
 * groups' stores just before). */
typedef struct mid {
    int n, masked;
    uint32_t base[6], out[6];
    __mmask64 lo[6], hi[6], keep[6];
    __m512i ix[6];
} mid;

static __mmask64 first_bytes(int64_t n)
{
    return n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : ((__mmask64)1 << n) - 1;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v > hi ? hi : v < lo ? lo : v;
}

VBMI static void mid_plan(mid *md, uint32_t m)
{
    int64_t len = 3 * (int64_t)m;
    md->n = (int)((len + 63) / 64);
    md->masked = len < 128;
    for (int k = 0; k < md->n; k++) {
        int64_t out = clamp64(len - 64, 0, 64 * k);
        int64_t base = clamp64(len - out - 66, 0, len < 128 ? 0 : len - 128);
        md->out[k] = (uint32_t)out;
        md->base[k] = (uint32_t)base;
        md->lo[k] = first_bytes(len - base);
        md->hi[k] = first_bytes(len - base - 64);
        md->keep[k] = first_bytes(len - out);
        md->ix[k] = _mm512_add_epi8(_mm512_loadu_si512(mid_idx + out),
                                    _mm512_set1_epi8((char)(uint8_t)(len - 3 - base)));
    }
}

/* n is a constant where this is inlined: the vectors stay in registers. */
VBMI static inline __attribute__((always_inline)) void mid_flip(uint8_t *p, const mid *md,
                                                                const int n)
{
    __m512i lo[6], hi[6];
    for (int k = 0; k < n; k++) {
        lo[k] = _mm512_loadu_si512(p + md->base[k]);
        hi[k] = _mm512_loadu_si512(p + md->base[k] + 64);
    }
    for (int k = 0; k < n; k++)
        _mm512_storeu_si512(p + md->out[k], _mm512_permutex2var_epi8(lo[k], md->ix[k], hi[k]));
}

VBMI static void mid_flip_masked(uint8_t *p, const mid *md)
{
    __m512i lo[2], hi[2];
    for (int k = 0; k < md->n; k++) {
        lo[k] = _mm512_maskz_loadu_epi8(md->lo[k], p + md->base[k]);
        hi[k] = _mm512_maskz_loadu_epi8(md->hi[k], p + md->base[k] + 64);
    }
    for (int k = 0; k < md->n; k++)
        _mm512_mask_storeu_epi8(p + md->out[k], md->keep[k],
                                _mm512_permutex2var_epi8(lo[k], md->ix[k], hi[k]));
}

/* Rows of w pixels: 64-pixel groups (g from each end), then the middle
 * of n vectors (0: a masked one). */
VBMI static inline __attribute__((always_inline)) void flip_rows(uint8_t *p, uint32_t w,
                                                                 size_t rows, uint32_t g,
                                                                 const mid *md, const int n)
{
    for (size_t y = 0; y < rows; y++, p += 3 * (size_t)w) {
        swap_groups64(p, w);
        if (n)
            mid_flip(p + 3 * (size_t)g, md, n);
        else
            mid_flip_masked(p + 3 * (size_t)g, md);
    }
}

VBMI void feeder__aug_hflip3_vbmi(uint8_t *p, uint32_t w, size_t rows)
{
    uint32_t g = 64 * (w / 128);
    mid md;
    mid_plan(&md, w - 2 * g);
    switch (md.masked ? 0 : md.n) { /* 2 .. 6 vectors where not masked */
    case 2: flip_rows(p, w, rows, g, &md, 2); break;
    case 3: flip_rows(p, w, rows, g, &md, 3); break;
    case 4: flip_rows(p, w, rows, g, &md, 4); break;
    case 5: flip_rows(p, w, rows, g, &md, 5); break;
    case 6: flip_rows(p, w, rows, g, &md, 6); break;
    default: flip_rows(p, w, rows, g, &md, 0);
    }
}

/* ---- the warp ---- */

/* The 8 pixels x .. x + 7 of a row: ix, iy as geometry.c's warp_loop
 * computes them, `yt1` being its yc * t[1] and `yt4` yc * t[4]. */
AVX2 static inline void coords(const feeder__vwarp *v, uint32_t x, float yt1, float yt4,
                               __m256 *ix, __m256 *iy)
{
    float fw = (float)v->w, fh = (float)v->h;
    __m256i xs = _mm256_add_epi32(_mm256_set1_epi32((int)x),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 xc = _mm256_add_ps(_mm256_set1_ps(-fw * 0.5f + 0.5f), _mm256_cvtepi32_ps(xs));
    __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(v->t[0])),
                                            _mm256_set1_ps(yt1)),
                              _mm256_set1_ps(v->t[2]));
    __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(v->t[3])),
                                            _mm256_set1_ps(yt4)),
                              _mm256_set1_ps(v->t[5]));
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    /* ((g + 1) * size - 1) / 2: halving is exact, so * 0.5 is the same */
    *ix = _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), _mm256_set1_ps(fw)),
                                      one),
                        half);
    *iy = _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), _mm256_set1_ps(fh)),
                                      one),
                        half);
}

/* Pixel `i`'s 4 bytes where `ok`, 0 elsewhere (masked lanes read nothing):
 * byte c of a lane is channel c. */
AVX2 static inline __m256i gather(const feeder__vwarp *v, __m256i i, __m256i ok)
{
    __m256i off = v->bpp == 4   ? _mm256_slli_epi32(i, 2)
                  : v->bpp == 3 ? _mm256_add_epi32(_mm256_slli_epi32(i, 1), i)
                                : i;
    return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)v->src, off, ok, 1);
}

/* y * w + x, lane by lane. */
AVX2 static inline __m256i pixel_index(const feeder__vwarp *v, __m256i x, __m256i y)
{
    return _mm256_add_epi32(_mm256_mullo_epi32(y, _mm256_set1_epi32((int)v->w)), x);
}

/* 0 <= a < n, lane by lane. */
AVX2 static inline __m256i inside(__m256i a, uint32_t n)
{
    return _mm256_and_si256(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(-1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), a));
}

AVX2 static inline __m256 channel(__m256i g, int c)
{
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, 8 * c),
                                               _mm256_set1_epi32(0xFF)));
}

/* round_u8 of each lane: round half to even, clamped to [0, 255]. */
AVX2 static inline __m256i to_byte(__m256 v)
{
    v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    return _mm256_cvtps_epi32(v);
}

/* Bilinear: the four neighbours in geometry.c's order (dy, then dx), each
 * weighted wx * wy, or +0 outside; the three channels packed in a lane. */
AVX2 static __m256i bilinear8(const feeder__vwarp *v, __m256 ix, __m256 iy)
{
    __m256 x0f = _mm256_floor_ps(ix), y0f = _mm256_floor_ps(iy);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 wx[2] = {_mm256_sub_ps(_mm256_add_ps(x0f, one), ix), _mm256_sub_ps(ix, x0f)};
    __m256 wy[2] = {_mm256_sub_ps(_mm256_add_ps(y0f, one), iy), _mm256_sub_ps(iy, y0f)};
    __m256i x0 = _mm256_cvttps_epi32(x0f), y0 = _mm256_cvttps_epi32(y0f);
    __m256i xs[2] = {x0, _mm256_add_epi32(x0, _mm256_set1_epi32(1))};
    __m256i ys[2] = {y0, _mm256_add_epi32(y0, _mm256_set1_epi32(1))};
    __m256i okx[2] = {inside(xs[0], v->w), inside(xs[1], v->w)};
    __m256 acc[3] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 mask = _mm256_setzero_ps();
    /* (x0 + dx, y0 + dy) is pixel i0 + dy * w + dx: one multiply */
    __m256i i0 = pixel_index(v, x0, y0);
    for (int dy = 0; dy < 2; dy++) {
        __m256i oky = inside(ys[dy], v->h);
        __m256i row = dy ? _mm256_add_epi32(i0, _mm256_set1_epi32((int)v->w)) : i0;
        for (int dx = 0; dx < 2; dx++) {
            __m256i ok = _mm256_and_si256(okx[dx], oky);
            __m256 wgt = _mm256_and_ps(_mm256_mul_ps(wx[dx], wy[dy]), _mm256_castsi256_ps(ok));
            __m256i at = dx ? _mm256_add_epi32(row, _mm256_set1_epi32(1)) : row;
            __m256i g = gather(v, at, ok);
            for (int c = 0; c < v->nc; c++)
                acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(wgt, channel(g, c)));
            mask = _mm256_add_ps(mask, wgt);
        }
    }
    __m256i out = _mm256_setzero_si256();
    for (int c = 0; c < v->nc; c++) {
        __m256 a = acc[c];
        if (v->fill >= 0)
            a = _mm256_add_ps(_mm256_mul_ps(a, mask),
                              _mm256_mul_ps(_mm256_sub_ps(one, mask),
                                            _mm256_set1_ps((float)v->fill)));
        out = _mm256_or_si256(out, _mm256_slli_epi32(to_byte(a), 8 * c));
    }
    return out;
}

/* Nearest: the source pixel at (round(ix), round(iy)), or the fill where
 * that lies outside. */
AVX2 static __m256i nearest8(const feeder__vwarp *v, __m256 ix, __m256 iy)
{
    /* The rounding mode must be a constant expression for clang's builtin. */
#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    __m256 rx = _mm256_round_ps(ix, ROUND_NEAREST), ry = _mm256_round_ps(iy, ROUND_NEAREST);
#undef ROUND_NEAREST
    __m256 z = _mm256_setzero_ps();
    __m256 in = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(rx, z, _CMP_GE_OQ),
                                            _mm256_cmp_ps(ry, z, _CMP_GE_OQ)),
                              _mm256_and_ps(_mm256_cmp_ps(rx, _mm256_set1_ps((float)v->w),
                                                          _CMP_LT_OQ),
                                            _mm256_cmp_ps(ry, _mm256_set1_ps((float)v->h),
                                                          _CMP_LT_OQ)));
    __m256i ok = _mm256_castps_si256(in);
    __m256i g = gather(v, pixel_index(v, _mm256_cvttps_epi32(rx), _mm256_cvttps_epi32(ry)), ok);
    uint32_t f = v->fill < 0 ? 0 : (uint32_t)v->fill;
    __m256i fill = _mm256_set1_epi32((int)(f | f << 8 | f << 16));
    __m256i keep = _mm256_set1_epi32(v->nc == 1 ? 0xFF : 0xFFFFFF);
    return _mm256_and_si256(_mm256_blendv_epi8(fill, g, ok), keep);
}

/* 8 packed pixels out: 24 bytes at dst (NHWC), or 8 bytes per plane. */
AVX2 static inline void store8(__m256i px, uint8_t *dst, size_t ps, size_t cs, int nc)
{
    uint8_t t[32];
    if (ps == 3) {
        const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                              -1, -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                              -1, -1, -1, -1);
        _mm256_storeu_si256((__m256i *)t, _mm256_shuffle_epi8(px, pack));
        memcpy(dst, t, 12);
        memcpy(dst + 12, t + 16, 12);
        return;
    }
    const __m256i idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int c = 0; c < nc; c++) {
        const __m256i pick = _mm256_setr_epi8(
            (char)c, (char)(c + 4), (char)(c + 8), (char)(c + 12), -1, -1, -1, -1, -1, -1, -1,
            -1, -1, -1, -1, -1, (char)c, (char)(c + 4), (char)(c + 8), (char)(c + 12), -1, -1,
            -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(px, pick), idx);
        _mm_storel_epi64((__m128i *)(dst + (size_t)c * cs), _mm256_castsi256_si128(b));
    }
}

AVX2 uint32_t feeder__aug_warp_row_avx2(const feeder__vwarp *v, uint32_t y, uint8_t *dst,
                                        size_t ps, size_t cs)
{
    float fh = (float)v->h;
    float yc = -fh * 0.5f + 0.5f + (float)y;
    float yt1 = yc * v->t[1], yt4 = yc * v->t[4];
    uint32_t x = 0;
    for (; x + 8 <= v->w; x += 8) {
        __m256 ix, iy;
        coords(v, x, yt1, yt4, &ix, &iy);
        __m256i px = v->interp == FEEDER_INTERP_NEAREST ? nearest8(v, ix, iy)
                                                        : bilinear8(v, ix, iy);
        store8(px, dst + ((size_t)y * v->w + x) * ps, ps, cs, v->nc);
    }
    return x;
}

/* NCHW's three planes as 4-byte pixels (byte c channel c, byte 3 zero). */
void feeder__aug_planes_to_rgbx(const uint8_t *restrict p, size_t cs, size_t n,
                                uint32_t *restrict q)
{
    const uint8_t *r = p, *g = p + cs, *b = p + 2 * cs;
    for (size_t i = 0; i < n; i++)
        q[i] = (uint32_t)r[i] | (uint32_t)g[i] << 8 | (uint32_t)b[i] << 16;
}

#endif
