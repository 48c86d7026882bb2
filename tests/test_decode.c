/*
 * decode/: crop math against torchvision's numbers, the resizer against a
 * double-precision reference, both JPEG decoders against each other and
 * against known colours, and every error path. Real photos (bench/photos),
 * cut and re-encoded in memory with bu_make_jpeg.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "benchutil.h"
#include "common/common.h"
#include "decode/decode.h"
#include "decode/jpeg_index.h"

static bu_photos *photos;

/* Check records every passing ck_assert through a pipe write; in per-pixel
 * loops that dominates the run time, so those loops use this instead. */
#define REQUIRE(cond, ...)              \
    do {                                \
        if (!(cond))                    \
            ck_abort_msg(__VA_ARGS__);  \
    } while (0)

static feeder__transform mk(int pipeline, int decoder, int layout, uint32_t h, uint32_t w)
{
    feeder__transform t = {0};
    t.pipeline = pipeline;
    t.decoder = decoder;
    t.layout = layout;
    t.height = h;
    t.width = w;
    t.resize = 256;
    t.scale_min = 0.08;
    t.scale_max = 1.0;
    t.ratio_min = 3.0 / 4.0;
    t.ratio_max = 4.0 / 3.0;
    t.flip_prob = 0.5;
    t.max_pixels = 178956970;
    return t;
}

static void make_photo(unsigned photo, uint32_t w, uint32_t h, int q, int subsamp, uint8_t **j,
                       size_t *len)
{
    ck_assert_int_eq(bu_make_jpeg(photos, photo, w, h, q, subsamp, 1000 + photo, j, len), 0);
}

/* A JPEG of raw pixels (pf: TJPF_RGB or TJPF_GRAY), any flags. */
static void make_raw(const uint8_t *px, uint32_t w, uint32_t h, int pf, int subsamp, int q,
                     int flags, uint8_t **j, size_t *len)
{
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long olen = 0;
    ck_assert_int_eq(tjCompress2(tj, px, (int)w, 0, (int)h, pf, &out, &olen, subsamp, q, flags),
                     0);
    *j = malloc(olen);
    memcpy(*j, out, olen);
    *len = olen;
    tjFree(out);
    tjDestroy(tj);
}

static uint8_t *decode_ok(feeder__decoder *d, const feeder__transform *t, const uint8_t *j,
                          size_t len, uint64_t index)
{
    size_t n = (size_t)t->width * t->height * 3;
    uint8_t *out = malloc(n);
    memset(out, 0xA5, n);
    char err[256];
    feeder__decode_times tm;
    int rc = feeder__decode_sample(d, t, j, len, 42, 3, index, out, &tm, err, sizeof(err));
    ck_assert_msg(rc == 0, "decode failed: %d %s", rc, err);
    ck_assert(tm.decode_ns > 0);
    ck_assert(tm.transform_ns > 0);
    return out;
}

/* ---------------------------------------------------------------- crop */

static void eval_box(uint32_t W, uint32_t H, uint32_t x, uint32_t y, uint32_t w, uint32_t h,
                     double fx, double fy, double fw, double fh)
{
    feeder__transform t = mk(FEEDER_PIPELINE_EVAL, FEEDER_DECODER_ROI, 0, 224, 224);
    feeder__crop c;
    feeder__crop_compute(&t, W, H, 1, 2, 3, &c);
    ck_assert_msg(c.x == x && c.y == y && c.w == w && c.h == h,
                  "%ux%u: got %u,%u %ux%u want %u,%u %ux%u", W, H, c.x, c.y, c.w, c.h, x, y, w,
                  h);
    ck_assert_int_eq(c.flip, 0);
    ck_assert_double_eq_tol(c.fx, fx, 1e-9);
    ck_assert_double_eq_tol(c.fy, fy, 1e-9);
    ck_assert_double_eq_tol(c.fw, fw, 1e-9);
    ck_assert_double_eq_tol(c.fh, fh, 1e-9);
}

/* Expected values worked out from torchvision's formulas (Resize: long side
 * int(256 * long / short); CenterCrop: int(round((H - h) / 2.0)), Python's
 * half-to-even round), see crop.c. */
/* The crop sizes' rounding (common/util.c, shared with augment's erase and
 * affine): Python's round(), halves to the even neighbour. */
START_TEST(round_half_even_as_python)
{
    const double in[] = {0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 2.5001, 7.0, -2.6};
    const double want[] = {0.0, 2.0, 2.0, 0.0, -2.0, 2.0, 3.0, 7.0, -3.0};
    for (unsigned i = 0; i < sizeof(in) / sizeof(in[0]); i++)
        ck_assert_double_eq(feeder__round_half_even(in[i]), want[i]);
}
END_TEST

START_TEST(crop_eval_exact)
{
    /* 500x375 -> 341x256; left = round(58.5) = 58 (half to even), top = 16. */
    eval_box(500, 375, 85, 23, 328, 329, 58 * 500.0 / 341, 23.4375, 224 * 500.0 / 341, 328.125);
    eval_box(375, 500, 23, 85, 329, 328, 23.4375, 58 * 500.0 / 341, 328.125, 224 * 500.0 / 341);
    eval_box(256, 256, 16, 16, 224, 224, 16, 16, 224, 224);
    /* 1000x200 -> 1280x256; left 528, top 16; both ends .5: rounded up. */
    eval_box(1000, 200, 413, 13, 175, 175, 412.5, 12.5, 175, 175);
    /* 503x375 -> 343x256; left = round(59.5) = 60 (half to even, upwards). */
    eval_box(503, 375, 88, 23, 328, 329, 60 * 503.0 / 343, 23.4375, 224 * 503.0 / 343, 328.125);

    /* resize smaller than the crop on one axis: that axis is taken whole. */
    feeder__transform t = mk(FEEDER_PIPELINE_EVAL, FEEDER_DECODER_ROI, 0, 224, 224);
    t.resize = 200; /* 500x375 -> 266x200 */
    feeder__crop c;
    feeder__crop_compute(&t, 500, 375, 0, 0, 0, &c);
    ck_assert_uint_eq(c.y, 0);
    ck_assert_uint_eq(c.h, 375);
    /* x: left 21 of 266, so round(21 * 500 / 266 = 39.47) .. round(460.53). */
    ck_assert_uint_eq(c.x, 39);
    ck_assert_uint_eq(c.w, 422);
}
END_TEST

START_TEST(crop_resize_whole)
{
    feeder__transform t = mk(FEEDER_PIPELINE_RESIZE, FEEDER_DECODER_ROI, 0, 224, 224);
    feeder__crop c;
    for (uint64_t i = 0; i < 10; i++) {
        feeder__crop_compute(&t, 640, 427, 9, 1, i, &c);
        ck_assert(c.x == 0 && c.y == 0 && c.w == 640 && c.h == 427 && c.flip == 0);
        ck_assert(c.fx == 0 && c.fy == 0 && c.fw == 640 && c.fh == 427);
    }
}
END_TEST

static double py_round(double v)
{
    double f = floor(v), d = v - f;
    return d > 0.5 ? f + 1 : d < 0.5 ? f : (fmod(f, 2) == 0 ? f : f + 1);
}

START_TEST(crop_train_properties)
{
    feeder__transform t = mk(FEEDER_PIPELINE_TRAIN, FEEDER_DECODER_ROI, 0, 224, 224);
    const uint32_t W = 500, H = 375;
    unsigned flips = 0, first_try = 0, n = 10000, distinct = 0;
    for (uint64_t i = 0; i < n; i++) {
        feeder__crop a, b, e;
        /* memcmp below compares padding too: start both from zero bytes. */
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        feeder__crop_compute(&t, W, H, 7, 2, i, &a);
        feeder__crop_compute(&t, W, H, 7, 2, i, &b);
        REQUIRE(memcmp(&a, &b, sizeof(a)) == 0, "not pure at %llu", (unsigned long long)i);
        feeder__crop_compute(&t, W, H, 7, 2, i + 1, &e);
        distinct += a.x != e.x || a.y != e.y || a.w != e.w || a.h != e.h;
        REQUIRE(a.w >= 1 && a.h >= 1 && a.x + a.w <= W && a.y + a.h <= H, "out of bounds");
        REQUIRE(a.fx == a.x && a.fy == a.y && a.fw == a.w && a.fh == a.h, "fractional box");
        /* Area and ratio in range, allowing for rounding w and h to whole
         * pixels (half a pixel on each side). */
        double share = (double)a.w * a.h / ((double)W * H);
        REQUIRE(share <= 1.0 && share >= 0.08 * 0.99, "share %f", share);
        double rlo = (a.w - 0.5) / (a.h + 0.5), rhi = (a.w + 0.5) / (a.h - 0.5);
        REQUIRE(rhi >= 0.75 && rlo <= 4.0 / 3.0, "ratio %u/%u", a.w, a.h);
        flips += a.flip;
        /* The counter assignment of crop.c, attempt 0: k 0 = area, 1 = ratio,
         * 2 = top, 3 = left. */
        double u0 = feeder_random_uniform(7, 2, i, 0), u1 = feeder_random_uniform(7, 2, i, 1);
        double ta = W * H * (0.08 + 0.92 * u0);
        double r = exp(log(0.75) + (log(4.0 / 3.0) - log(0.75)) * u1);
        double w = py_round(sqrt(ta * r)), h = py_round(sqrt(ta / r));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            first_try++;
            REQUIRE(a.w == (uint32_t)w && a.h == (uint32_t)h, "size at %llu", (unsigned long long)i);
            REQUIRE(a.y == feeder_random(7, 2, i, 2) % (H - a.h + 1), "top");
            REQUIRE(a.x == feeder_random(7, 2, i, 3) % (W - a.w + 1), "left");
        }
        REQUIRE(a.flip == (feeder_random_uniform(7, 2, i, 40) < 0.5), "flip counter");
    }
    ck_assert_uint_gt(first_try, n / 2);
    ck_assert_uint_gt(distinct, n * 99 / 100);
    /* 10k Bernoulli(0.5): sd 0.005; 0.02 is four sd. */
    double rate = (double)flips / n;
    ck_assert_msg(fabs(rate - 0.5) < 0.02, "flip rate %f", rate);

    /* Another epoch, another box. */
    feeder__crop a, b;
    feeder__crop_compute(&t, W, H, 7, 2, 5, &a);
    feeder__crop_compute(&t, W, H, 7, 3, 5, &b);
    ck_assert(a.x != b.x || a.y != b.y || a.w != b.w || a.h != b.h);

    /* flip_prob 0 and 1; flip_prob 0.2 within four sd (0.016). */
    t.flip_prob = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        feeder__crop_compute(&t, W, H, 7, 2, i, &a);
        REQUIRE(a.flip == 0, "flip with p 0");
    }
    t.flip_prob = 1;
    for (uint64_t i = 0; i < 1000; i++) {
        feeder__crop_compute(&t, W, H, 7, 2, i, &a);
        REQUIRE(a.flip == 1, "no flip with p 1");
    }
    t.flip_prob = 0.2;
    flips = 0;
    for (uint64_t i = 0; i < n; i++) {
        feeder__crop_compute(&t, W, H, 8, 0, i, &a);
        flips += a.flip;
    }
    ck_assert_msg(fabs((double)flips / n - 0.2) < 0.016, "flip rate %f", (double)flips / n);
}
END_TEST

START_TEST(crop_train_fallback)
{
    /* 1000x200 (ratio 5) with area share >= 0.9 and ratio <= 4/3: every
     * attempt needs h > 200, so torchvision's fallback: h = 200,
     * w = round(200 * 4/3) = 267, centred. */
    feeder__transform t = mk(FEEDER_PIPELINE_TRAIN, FEEDER_DECODER_ROI, 0, 224, 224);
    t.scale_min = 0.9;
    for (uint64_t i = 0; i < 50; i++) {
        feeder__crop c;
        feeder__crop_compute(&t, 1000, 200, 1, 0, i, &c);
        ck_assert(c.w == 267 && c.h == 200 && c.x == 366 && c.y == 0);
    }
    /* 200x1000 (ratio 0.2 < 3/4): w = 200, h = round(200 / 0.75) = 267. */
    for (uint64_t i = 0; i < 50; i++) {
        feeder__crop c;
        feeder__crop_compute(&t, 200, 1000, 1, 0, i, &c);
        ck_assert(c.w == 200 && c.h == 267 && c.x == 0 && c.y == 366);
    }
}
END_TEST

/* ---------------------------------------------------------------- resize */

/* A pattern with edges, gradients and fine detail. */
static uint8_t *pattern(uint32_t w, uint32_t h, int ch)
{
    uint8_t *p = malloc((size_t)w * h * ch);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * ch;
            q[0] = (uint8_t)(w > 1 ? (x * 255) / (w - 1) : 99);
            q[1] = ((x / 7 + y / 5) & 1) ? 230 : 20;
            q[2] = (uint8_t)(128 + 100 * sin(x * 0.3) * cos(y * 0.17));
            if (ch == 4)
                q[3] = 0xEE;
        }
    return p;
}

START_TEST(resize_vs_reference)
{
    static const struct {
        uint32_t sw, sh;
        double bx, by, bw, bh;
        uint32_t ow, oh;
    } cases[] = {
        {300, 200, 0, 0, 300, 200, 224, 224},             /* down x, up y */
        {500, 375, 85.04, 23.4375, 328.45, 328.125, 224, 224}, /* fractional eval box */
        {640, 480, 10, 20, 600, 440, 97, 61},             /* odd output */
        {1000, 900, 0, 0, 1000, 900, 224, 224},           /* 4x down */
        {120, 90, 30.5, 10.25, 40, 50.5, 224, 224},       /* strong upscale */
        {13, 7, 0, 0, 13, 7, 5, 3},                       /* tiny */
        {3, 5, 0, 0, 3, 5, 2, 4},                         /* narrower than 4 taps */
        {1, 1, 0, 0, 1, 1, 4, 4},                         /* one pixel */
        {7, 300, 0, 0, 7, 300, 1, 1},                     /* one output pixel */
        /* The AVX2 pass's two kinds of window: eval's 1/2-scale regions. */
        {203, 207, 3.25, 4.5, 197.5, 198.0, 224, 224},   /* up: 2 taps */
        {221, 219, 2.5, 3.0, 215.0, 213.0, 223, 221},    /* up, odd output */
        {230, 230, 3, 3, 224, 224, 224, 224},             /* 1:1, 2 taps */
        {350, 347, 3, 2, 335.5, 334, 224, 223},           /* down 1.5: 4 taps */
        {2, 9, 0, 0, 2, 9, 5, 5},                         /* 2 px wide, up */
    };
    feeder__resizer rs = {0};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint32_t sw = cases[k].sw, sh = cases[k].sh, ow = cases[k].ow, oh = cases[k].oh;
        uint8_t *p4 = pattern(sw, sh, 4), *p3 = pattern(sw, sh, 3);
        size_t n = (size_t)ow * oh * 3;
        uint8_t *ref = malloc(n), *a = malloc(n), *b = malloc(n), *c = malloc(n), *f = malloc(n),
                *pl = malloc(n);
        ck_assert_int_eq(feeder__resize_reference(p3, sw, sh, (size_t)sw * 3, 3, cases[k].bx,
                                                  cases[k].by, cases[k].bw, cases[k].bh, ref,
                                                  ow, oh),
                         0);
        uint8_t *sse = malloc(n);
        rs.force = FEEDER__RESIZE_AUTO;
        ck_assert_int_eq(feeder__resize(&rs, p4, sw, sh, (size_t)sw * 4, 4, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, a, ow, oh, 0,
                                        FEEDER_LAYOUT_NHWC),
                         0);
        rs.force = FEEDER__RESIZE_SSE2;
        ck_assert_int_eq(feeder__resize(&rs, p4, sw, sh, (size_t)sw * 4, 4, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, sse, ow, oh, 0,
                                        FEEDER_LAYOUT_NHWC),
                         0);
        rs.force = FEEDER__RESIZE_PORTABLE;
        ck_assert_int_eq(feeder__resize(&rs, p4, sw, sh, (size_t)sw * 4, 4, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, b, ow, oh, 0,
                                        FEEDER_LAYOUT_NHWC),
                         0);
        rs.force = FEEDER__RESIZE_AUTO;
        ck_assert_int_eq(feeder__resize(&rs, p3, sw, sh, (size_t)sw * 3, 3, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, c, ow, oh, 0,
                                        FEEDER_LAYOUT_NHWC),
                         0);
        ck_assert_int_eq(feeder__resize(&rs, p4, sw, sh, (size_t)sw * 4, 4, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, f, ow, oh, 1,
                                        FEEDER_LAYOUT_NHWC),
                         0);
        ck_assert_int_eq(feeder__resize(&rs, p4, sw, sh, (size_t)sw * 4, 4, cases[k].bx,
                                        cases[k].by, cases[k].bw, cases[k].bh, pl, ow, oh, 0,
                                        FEEDER_LAYOUT_NCHW),
                         0);
        /* Fixed point with an 8-bit intermediate vs double: off by at most 1
         * (the 8-bit rounding between the passes plus weight rounding). */
        int maxd = 0;
        for (size_t i = 0; i < n; i++) {
            int dd = abs((int)a[i] - (int)ref[i]);
            if (dd > maxd)
                maxd = dd;
        }
        ck_assert_msg(maxd <= 1, "case %zu: max diff vs reference %d", k, maxd);
        /* Every code path and 3-channel input agree, byte for byte. */
        ck_assert(memcmp(a, sse, n) == 0);
        ck_assert(memcmp(a, b, n) == 0);
        ck_assert(memcmp(a, c, n) == 0);
        /* Flip is the exact mirror; NCHW the exact transpose. */
        for (uint32_t y = 0; y < oh; y++)
            for (uint32_t x = 0; x < ow; x++)
                for (int ch = 0; ch < 3; ch++) {
                    uint8_t v = a[((size_t)y * ow + x) * 3 + ch];
                    REQUIRE(f[((size_t)y * ow + (ow - 1 - x)) * 3 + ch] == v, "flip at %u,%u", x, y);
                    REQUIRE(pl[(size_t)ch * ow * oh + (size_t)y * ow + x] == v, "nchw at %u,%u",
                            x, y);
                }
        free(p4);
        free(p3);
        free(ref);
        free(a);
        free(b);
        free(c);
        free(f);
        free(pl);
        free(sse);
    }
    /* Bad arguments. */
    uint8_t px[16 * 16 * 4] = {0}, out[8 * 8 * 3];
    ck_assert_int_eq(feeder__resize(&rs, px, 16, 16, 64, 4, 0, 0, 17, 16, out, 8, 8, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder__resize(&rs, px, 16, 16, 64, 4, 0, 0, 0, 16, out, 8, 8, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder__resize(&rs, px, 16, 16, 64, 2, 0, 0, 16, 16, out, 8, 8, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder__resize(&rs, px, 16, 16, 32, 4, 0, 0, 16, 16, out, 8, 8, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder__resize(&rs, px, 16, 16, 64, 4, 0, 0, 16, 16, out, 0, 8, 0, 0),
                     FEEDER_EINVAL);
    feeder__resizer_free(&rs);
}
END_TEST

/* ---------------------------------------------------------------- pixels */

static const int decoders[] = {FEEDER_DECODER_TURBO, FEEDER_DECODER_ROI};
static const int pipelines[] = {FEEDER_PIPELINE_EVAL, FEEDER_PIPELINE_TRAIN,
                                FEEDER_PIPELINE_RESIZE};

static void assert_solid(const uint8_t *out, size_t npx, int r, int g, int b, int tol,
                         const char *what)
{
    for (size_t i = 0; i < npx; i++) {
        const uint8_t *p = out + 3 * i;
        REQUIRE(abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol,
                      "%s: pixel %zu = (%d,%d,%d), want (%d,%d,%d) +-%d", what, i, p[0], p[1],
                      p[2], r, g, b, tol);
    }
}

START_TEST(solid_colour)
{
    const uint32_t w = 320, h = 240;
    const int col[3] = {200, 40, 90};
    uint8_t *px = malloc((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h; i++)
        memcpy(px + 3 * i, (uint8_t[3]){200, 40, 90}, 3);
    static const int subs[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420};
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    for (int s = 0; s < 3; s++) {
        uint8_t *j;
        size_t len;
        make_raw(px, w, h, TJPF_RGB, subs[s], 95, 0, &j, &len);
        for (int di = 0; di < 2; di++)
            for (int pi = 0; pi < 3; pi++) {
                feeder__transform t = mk(pipelines[pi], decoders[di], 0, 224, 224);
                uint8_t *out = decode_ok(d, &t, j, len, 11);
                /* JPEG's colour round trip of a flat colour: +-2. */
                assert_solid(out, 224 * 224, col[0], col[1], col[2], 2, "solid");
                free(out);
            }
        free(j);
    }
    free(px);
    feeder__decoder_destroy(d);
}
END_TEST

START_TEST(flip_and_layout_exact)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    uint8_t *j;
    size_t len;
    make_photo(2, 500, 375, 90, TJSAMP_420, &j, &len);
    for (int di = 0; di < 2; di++)
        for (uint64_t idx = 0; idx < 6; idx++) {
            /* The crop draws do not depend on flip_prob: 0 and 1 give the
             * same box, unflipped and flipped. */
            feeder__transform t = mk(FEEDER_PIPELINE_TRAIN, decoders[di], 0, 160, 224);
            t.flip_prob = 0;
            uint8_t *a = decode_ok(d, &t, j, len, idx);
            t.flip_prob = 1;
            uint8_t *f = decode_ok(d, &t, j, len, idx);
            t.flip_prob = 0;
            t.layout = FEEDER_LAYOUT_NCHW;
            uint8_t *pl = decode_ok(d, &t, j, len, idx);
            for (uint32_t y = 0; y < 160; y++)
                for (uint32_t x = 0; x < 224; x++)
                    for (int c = 0; c < 3; c++) {
                        uint8_t v = a[((size_t)y * 224 + x) * 3 + c];
                        REQUIRE(f[((size_t)y * 224 + (223 - x)) * 3 + c] == v, "flip at %u,%u",
                                x, y);
                        REQUIRE(pl[(size_t)c * 224 * 160 + (size_t)y * 224 + x] == v,
                                "nchw at %u,%u", x, y);
                    }
            free(a);
            free(f);
            free(pl);
        }
    free(j);
    feeder__decoder_destroy(d);
}
END_TEST

/* The DCT scaling ROI chooses (M of M/8), to group the differences. */
static unsigned roi_scale(const feeder__transform *t, uint32_t W, uint32_t H, uint64_t idx)
{
    feeder__crop c;
    feeder__crop_compute(t, W, H, 42, 3, idx, &c);
    return feeder__roi_scale(&c, t);
}

/*
 * ROI (cropped, possibly DCT-scaled decode) against TURBO (full decode, then
 * the same resize), per output image:
 *   no DCT scaling: byte-identical. Both use the ISLOW IDCT and fancy
 *                   upsampling, and ROI decodes a margin wider than the
 *                   filter's reach, so the cropped decode's edge columns
 *                   (chroma upsampled against the crop edge) never reach the
 *                   output;
 *   DCT-scaled:     mean abs diff <= 2.0 and max <= 64: the scaled IDCT's
 *                   low-pass replaces part of the triangle filter's, and a
 *                   box scaled to between 3/4 of the output and the output is
 *                   enlarged. When scaling needed a box >= the output,
 *                   measured over 1,200 random crops of 200..2000-pixel
 *                   photos, all subsamplings: 1/2: worst mean 1.01, max 26;
 *                   1/4: 1.36, 46; 1/8: 1.48, 47; average mean 0.27 / 0.46 /
 *                   0.79. With the 3/4 rule, the 72 scaled outputs here: worst
 *                   mean 1.81, max 59.
 * The worst cases seen here are printed.
 */
START_TEST(roi_vs_turbo)
{
    static const struct {
        uint32_t w, h;
    } sizes[] = {{500, 375}, {375, 500}, {333, 501}, {257, 263}, {640, 427}, {1000, 750},
                 {1203, 1601}};
    static const int subs[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_GRAY};
    static const char *subname[] = {"444", "422", "420", "gray"};
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    double worst_mean[2] = {0, 0};
    int worst_max[2] = {0, 0};
    unsigned count[2] = {0, 0};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (int s = 0; s < 4; s++) {
            uint8_t *j;
            size_t len;
            uint32_t W = sizes[si].w, H = sizes[si].h;
            make_photo((unsigned)(si + s), W, H, 85, subs[s], &j, &len);
            for (int pi = 0; pi < 3; pi++) {
                int reps = pipelines[pi] == FEEDER_PIPELINE_TRAIN ? 4 : 1;
                for (int r = 0; r < reps; r++) {
                    uint64_t idx = si * 100 + (uint64_t)s * 10 + (uint64_t)r;
                    feeder__transform t = mk(pipelines[pi], FEEDER_DECODER_TURBO, 0, 224, 224);
                    if (W >= 1000 && pipelines[pi] == FEEDER_PIPELINE_TRAIN)
                        t.scale_min = 0.5; /* big crops: exercises DCT scaling */
                    uint8_t *a = decode_ok(d, &t, j, len, idx);
                    t.decoder = FEEDER_DECODER_ROI;
                    uint8_t *b = decode_ok(d, &t, j, len, idx);
                    size_t n = 224 * 224 * 3;
                    double sum = 0;
                    int mx = 0;
                    for (size_t i = 0; i < n; i++) {
                        int dd = abs((int)a[i] - (int)b[i]);
                        sum += dd;
                        if (dd > mx)
                            mx = dd;
                    }
                    double mean = sum / n;
                    int scaled = roi_scale(&t, W, H, idx) < 8;
                    count[scaled]++;
                    if (mean > worst_mean[scaled])
                        worst_mean[scaled] = mean;
                    if (mx > worst_max[scaled])
                        worst_max[scaled] = mx;
                    REQUIRE(scaled ? mean <= 2.0 && mx <= 64 : mx == 0,
                                  "%ux%u %s pipeline %d idx %llu (scale %u/8): mean %.3f max %d",
                                  W, H, subname[s], pipelines[pi], (unsigned long long)idx,
                                  roi_scale(&t, W, H, idx), mean, mx);
                    free(a);
                    free(b);
                }
            }
            free(j);
        }
    printf("roi_vs_turbo: unscaled %u images: worst mean %.4f max %d; DCT-scaled %u images: "
           "worst mean %.4f max %d\n",
           count[0], worst_mean[0], worst_max[0], count[1], worst_mean[1], worst_max[1]);
    ck_assert_uint_gt(count[1], 0);
    feeder__decoder_destroy(d);
}
END_TEST

/* A baseline JPEG of an RGB image through the libjpeg API, luma sampled
 * hs x vs, a restart marker every `ri` MCUs (TurboJPEG writes none). */
static void make_restart(const uint8_t *rgb, uint32_t w, uint32_t h, int hs, int vs, unsigned ri,
                         uint8_t **j, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long olen = 0;
    jpeg_mem_dest(&c, &out, &olen);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 92, TRUE);
    c.comp_info[0].h_samp_factor = hs;
    c.comp_info[0].v_samp_factor = vs;
    c.restart_interval = ri;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW r = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *j = malloc(olen);
    memcpy(*j, out, olen);
    *len = olen;
    free(out);
}

/* ROI hands libjpeg's MCU decoder no block for the MCU columns left and
 * right of the crop (decode/jpeg.c, decode_mcu_cropped): with restart
 * markers every 1 or 7 MCUs, 4:4:4, 4:2:2 and 4:2:0, wide images and narrow
 * train crops, unscaled ROI output stays TURBO's byte for byte. */
START_TEST(roi_restart_intervals_exact)
{
    static const int samp[][2] = {{1, 1}, {2, 1}, {2, 2}};
    static const unsigned ri[] = {1, 7};
    static const uint32_t wh[][2] = {{300, 260}, {900, 250}};
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    for (size_t z = 0; z < 2; z++) {
        uint8_t *rgb = pattern(wh[z][0], wh[z][1], 3);
        for (size_t k = 0; k < 3; k++)
            for (size_t r = 0; r < 2; r++) {
                uint8_t *j;
                size_t len;
                make_restart(rgb, wh[z][0], wh[z][1], samp[k][0], samp[k][1], ri[r], &j, &len);
                for (int pi = 0; pi < 2; pi++)
                    for (uint64_t idx = 0; idx < 4; idx++) {
                        feeder__transform t = mk(pipelines[pi], FEEDER_DECODER_TURBO, 0, 224, 224);
                        ck_assert_uint_eq(roi_scale(&t, wh[z][0], wh[z][1], idx), 8);
                        uint8_t *a = decode_ok(d, &t, j, len, idx);
                        t.decoder = FEEDER_DECODER_ROI;
                        uint8_t *b = decode_ok(d, &t, j, len, idx);
                        REQUIRE(memcmp(a, b, 224 * 224 * 3) == 0,
                                "%ux%u %dx%d restart %u pipeline %d idx %llu: ROI != TURBO",
                                wh[z][0], wh[z][1], samp[k][0], samp[k][1], ri[r], pipelines[pi],
                                (unsigned long long)idx);
                        free(a);
                        free(b);
                    }
                free(j);
            }
        free(rgb);
    }
    feeder__decoder_destroy(d);
}
END_TEST

/* Sample `idx` of epoch `e` decoded by `plain` (no row index) and by `fast`
 * (with one): both succeed; 1 when their bytes are equal. */
static int same_with_index(feeder__decoder *plain, feeder__decoder *fast,
                           const feeder__transform *t, const uint8_t *j, size_t len, uint64_t e,
                           uint64_t idx)
{
    static uint8_t a[224 * 224 * 3], b[224 * 224 * 3];
    char err[256];
    ck_assert_int_eq(feeder__decode_sample(plain, t, j, len, 7, e, idx, a, NULL, err, sizeof(err)),
                     0);
    ck_assert_int_eq(feeder__decode_sample(fast, t, j, len, 7, e, idx, b, NULL, err, sizeof(err)),
                     0);
    return memcmp(a, b, sizeof(a)) == 0;
}

/* The row index (decode/jpeg_index.h): a decoder that records each image's
 * MCU-row starts and later jumps to the crop gives the bytes a decoder
 * without it gives, epoch after epoch of random crops, at every sampling
 * and DCT scale; a file with restart markers is not indexed, other bytes
 * under the same index are not mistaken for the recorded ones, and a spent
 * budget only stops the recording. */
START_TEST(roi_row_index_exact)
{
    static const int samp[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_GRAY};
    static const uint32_t wh[][2] = {{600, 450}, {450, 700}, {1200, 300}, {2000, 1500}};
    feeder__jindex *ix;
    ck_assert_int_eq(feeder__jindex_create(64, 1 << 20, &ix), 0);
    feeder__decoder *plain, *fast;
    ck_assert_int_eq(feeder__decoder_create(&plain), 0);
    ck_assert_int_eq(feeder__decoder_create(&fast), 0);
    feeder__decoder_set_index(fast, ix);
    for (size_t k = 0; k < 4; k++)
        for (size_t z = 0; z < 4; z++) {
            uint8_t *j;
            size_t len;
            make_photo((unsigned)(k * 4 + z), wh[z][0], wh[z][1], 90, samp[k], &j, &len);
            uint64_t idx = k * 4 + z;
            for (int pi = 0; pi < 2; pi++)
                for (uint64_t e = 0; e < 6; e++) {
                    feeder__transform t = mk(pipelines[pi], FEEDER_DECODER_ROI, 0, 224, 224);
                    REQUIRE(same_with_index(plain, fast, &t, j, len, e, idx), "samp %d %ux%u pipeline %d epoch %llu: the "
                            "row index changed the output", samp[k], wh[z][0], wh[z][1],
                            pipelines[pi], (unsigned long long)e);
                }
            free(j);
        }
    /* Eval's crop is the same every epoch: from the second on, every image
     * jumps; train's jump once the rows below their crops were seen. */
    ck_assert_uint_ge(feeder__decoder_index_jumps(fast), 16 * 5);
    ck_assert_uint_gt(feeder__jindex_used(ix), 0);

    /* Other bytes under index 0: no jump, the right pixels, and a new
     * record for them. */
    uint64_t jumps = feeder__decoder_index_jumps(fast);
    uint8_t *j;
    size_t len;
    make_photo(9, 600, 450, 80, TJSAMP_420, &j, &len);
    feeder__transform t = mk(FEEDER_PIPELINE_EVAL, FEEDER_DECODER_ROI, 0, 224, 224);
    for (int r = 0; r < 2; r++)
        ck_assert(same_with_index(plain, fast, &t, j, len, 0, 0));
    ck_assert_uint_eq(feeder__decoder_index_jumps(fast), jumps + 1);
    free(j);

    /* Restart markers: never indexed. */
    uint64_t used = feeder__jindex_used(ix);
    uint8_t *rgb = pattern(500, 400, 3);
    make_restart(rgb, 500, 400, 2, 2, 4, &j, &len);
    for (int r = 0; r < 3; r++)
        ck_assert(same_with_index(plain, fast, &t, j, len, 0, 40));
    ck_assert_uint_eq(feeder__jindex_used(ix), used);
    ck_assert_uint_eq(feeder__decoder_index_jumps(fast), jumps + 1);
    free(j);
    free(rgb);
    feeder__jindex_destroy(ix);

    /* A budget too small for one image: nothing recorded, nothing jumps,
     * the same pixels; an index past the table's count is never kept. */
    ck_assert_int_eq(feeder__jindex_create(4, 64, &ix), 0);
    feeder__decoder_set_index(fast, ix);
    make_photo(3, 600, 450, 90, TJSAMP_420, &j, &len);
    for (uint64_t idx = 2; idx < 6; idx++)
        for (int r = 0; r < 2; r++)
            ck_assert(same_with_index(plain, fast, &t, j, len, 0, idx));
    ck_assert_uint_eq(feeder__jindex_used(ix), 0);
    ck_assert_uint_eq(feeder__decoder_index_jumps(fast), jumps + 1);
    free(j);
    feeder__jindex_destroy(ix);
    feeder__jindex *none;
    ck_assert_int_eq(feeder__jindex_create(0, 64, &none), -EINVAL);
    ck_assert_int_eq(feeder__jindex_create(4, 0, &none), -EINVAL);
    ck_assert_ptr_null(none);
    feeder__decoder_destroy(plain);
    feeder__decoder_destroy(fast);
}
END_TEST

START_TEST(grayscale_is_rgb)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    uint8_t *j;
    size_t len;
    make_photo(0, 400, 300, 90, TJSAMP_GRAY, &j, &len);
    /* Reference: TurboJPEG's own grayscale decode, resized the same way. */
    tjhandle tj = tjInitDecompress();
    uint8_t *g = malloc(400 * 300), *g3 = malloc(400 * 300 * 3);
    ck_assert_int_eq(tjDecompress2(tj, j, len, g, 400, 0, 300, TJPF_GRAY, 0), 0);
    for (size_t i = 0; i < 400 * 300; i++)
        g3[3 * i] = g3[3 * i + 1] = g3[3 * i + 2] = g[i];
    tjDestroy(tj);
    feeder__resizer rs = {0};
    uint8_t *want = malloc(224 * 224 * 3);
    ck_assert_int_eq(feeder__resize(&rs, g3, 400, 300, 1200, 3, 0, 0, 400, 300, want, 224, 224, 0,
                                    FEEDER_LAYOUT_NHWC),
                     0);
    for (int di = 0; di < 2; di++) {
        feeder__transform t = mk(FEEDER_PIPELINE_RESIZE, decoders[di], 0, 224, 224);
        uint8_t *out = decode_ok(d, &t, j, len, 0);
        ck_assert(memcmp(out, want, 224 * 224 * 3) == 0);
        free(out);
    }
    /* Solid grey too. */
    uint8_t *px = malloc(64 * 48);
    memset(px, 77, 64 * 48);
    uint8_t *j2;
    size_t l2;
    make_raw(px, 64, 48, TJPF_GRAY, TJSAMP_GRAY, 95, 0, &j2, &l2);
    for (int di = 0; di < 2; di++) {
        feeder__transform t = mk(FEEDER_PIPELINE_EVAL, decoders[di], 0, 32, 32);
        t.resize = 40;
        uint8_t *out = decode_ok(d, &t, j2, l2, 0);
        assert_solid(out, 32 * 32, 77, 77, 77, 1, "grey");
        free(out);
    }
    free(px);
    free(j2);
    free(g);
    free(g3);
    free(want);
    free(j);
    feeder__resizer_free(&rs);
    feeder__decoder_destroy(d);
}
END_TEST

/* A CMYK (or YCCK) JPEG of one raw colour, written by libjpeg (which adds the
 * Adobe marker, as Photoshop does). Raw values are as stored: Adobe-inverted. */
static void make_cmyk(const uint8_t raw[4], uint32_t w, uint32_t h, int ycck, uint8_t **j,
                      size_t *len)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *buf = NULL;
    unsigned long blen = 0;
    jpeg_mem_dest(&ci, &buf, &blen);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = 4;
    ci.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, ycck ? JCS_YCCK : JCS_CMYK);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = malloc((size_t)w * 4);
    for (uint32_t x = 0; x < w; x++)
        memcpy(row + 4 * x, raw, 4);
    while (ci.next_scanline < h) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    *j = malloc(blen);
    memcpy(*j, buf, blen);
    *len = blen;
    free(buf);
}

START_TEST(cmyk_colours)
{
    /* Raw (inverted) C, M, Y, K and the RGB Pillow makes of them:
     * R = K' - K' * (255 - C') / 255 (= C' * K' / 255, Pillow's rounding). */
    static const struct {
        uint8_t raw[4];
        int rgb[3];
    } cases[] = {
        {{255, 0, 0, 255}, {255, 0, 0}},
        {{0, 255, 0, 255}, {0, 255, 0}},
        {{255, 255, 255, 128}, {128, 128, 128}},
        {{200, 100, 50, 180}, {141, 71, 35}},
    };
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        for (int ycck = 0; ycck < 2; ycck++) {
            uint8_t *j;
            size_t len;
            make_cmyk(cases[k].raw, 96, 80, ycck, &j, &len);
            for (int di = 0; di < 2; di++)
                for (int pi = 0; pi < 3; pi++) {
                    feeder__transform t = mk(pipelines[pi], decoders[di], 0, 40, 48);
                    t.resize = 60;
                    uint8_t *out = decode_ok(d, &t, j, len, 0);
                    /* +-3: the JPEG round trip of the raw values (+-1, more
                     * for YCCK's colour transform), scaled by K'/255. */
                    assert_solid(out, 40 * 48, cases[k].rgb[0], cases[k].rgb[1],
                                 cases[k].rgb[2], 3, ycck ? "ycck" : "cmyk");
                    free(out);
                }
            free(j);
        }
    feeder__decoder_destroy(d);
}
END_TEST

START_TEST(progressive_same_as_baseline)
{
    /* Progressive scans carry the same quantised coefficients as a baseline
     * encode at the same quality, so the decoded pixels are identical. */
    tjhandle tj = tjInitDecompress();
    uint8_t *j;
    size_t len;
    make_photo(3, 450, 300, 88, TJSAMP_420, &j, &len);
    uint8_t *px = malloc(450 * 300 * 3);
    ck_assert_int_eq(tjDecompress2(tj, j, len, px, 450, 0, 300, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    uint8_t *jb, *jp;
    size_t lb, lp;
    make_raw(px, 450, 300, TJPF_RGB, TJSAMP_420, 88, 0, &jb, &lb);
    make_raw(px, 450, 300, TJPF_RGB, TJSAMP_420, 88, TJFLAG_PROGRESSIVE, &jp, &lp);
    ck_assert(lb != lp || memcmp(jb, jp, lb) != 0);
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            feeder__transform t = mk(pipelines[pi], decoders[di], 0, 224, 224);
            uint8_t *a = decode_ok(d, &t, jb, lb, 5), *b = decode_ok(d, &t, jp, lp, 5);
            ck_assert_msg(memcmp(a, b, 224 * 224 * 3) == 0, "decoder %d pipeline %d",
                          decoders[di], pipelines[pi]);
            free(a);
            free(b);
        }
    /* And a flat colour, progressive. */
    for (size_t i = 0; i < 450 * 300; i++)
        memcpy(px + 3 * i, (uint8_t[3]){10, 180, 250}, 3);
    free(jp);
    make_raw(px, 450, 300, TJPF_RGB, TJSAMP_444, 95, TJFLAG_PROGRESSIVE, &jp, &lp);
    for (int di = 0; di < 2; di++) {
        feeder__transform t = mk(FEEDER_PIPELINE_TRAIN, decoders[di], 0, 224, 224);
        uint8_t *a = decode_ok(d, &t, jp, lp, 1);
        assert_solid(a, 224 * 224, 10, 180, 250, 2, "progressive solid");
        free(a);
    }
    feeder__decoder_destroy(d);
    free(px);
    free(j);
    free(jb);
    free(jp);
}
END_TEST

/* ---------------------------------------------------------------- errors */

/* Offset just past the SOS segment (the first entropy-coded byte), or 0. */
static size_t scan_start(const uint8_t *j, size_t len)
{
    size_t i = 2;
    while (i + 4 <= len && j[i] == 0xFF) {
        unsigned m = j[i + 1], seg = (unsigned)j[i + 2] << 8 | j[i + 3];
        if (m == 0xDA)
            return i + 2 + seg;
        i += 2 + seg;
    }
    return 0;
}

/* Offset of the SOF marker, or 0. */
static size_t find_sof(const uint8_t *j, size_t len)
{
    size_t i = 2;
    while (i + 4 <= len && j[i] == 0xFF) {
        unsigned m = j[i + 1], seg = (unsigned)j[i + 2] << 8 | j[i + 3];
        if (m >= 0xC0 && m <= 0xC2)
            return i;
        i += 2 + seg;
    }
    return 0;
}

/* Decode must fail with `want` and a message, leave no state behind: the
 * next good image decodes to exactly what a fresh decoder gives. */
static void expect_error(feeder__decoder *d, const feeder__transform *t, const uint8_t *bad,
                         size_t blen, int want, const uint8_t *good, size_t glen,
                         const uint8_t *good_out, const char *what)
{
    size_t n = (size_t)t->width * t->height * 3;
    uint8_t *out = malloc(n);
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = feeder__decode_sample(d, t, bad, blen, 1, 0, 0, out, NULL, err, sizeof(err));
    ck_assert_msg(rc == want, "%s (decoder %d, pipeline %d): rc %d (%s), want %d", what,
                  t->decoder, t->pipeline, rc, err, want);
    ck_assert_msg(err[0] != 0 && memchr(err, 0, sizeof(err)), "%s: empty message", what);
    rc = feeder__decode_sample(d, t, good, glen, 1, 0, 0, out, NULL, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s (decoder %d, pipeline %d): next good image: rc %d (%s)", what,
                  t->decoder, t->pipeline, rc, err);
    ck_assert_msg(memcmp(out, good_out, n) == 0, "%s: decoder state left behind", what);
    free(out);
}

START_TEST(errors)
{
    uint8_t *good, *j;
    size_t glen, len;
    make_photo(1, 480, 360, 90, TJSAMP_420, &good, &glen);
    make_photo(4, 500, 400, 90, TJSAMP_420, &j, &len);
    feeder__decoder *fresh, *d;
    ck_assert_int_eq(feeder__decoder_create(&fresh), 0);
    ck_assert_int_eq(feeder__decoder_create(&d), 0);

    static const char text[] = "this is not a JPEG file, just some text bytes.....";
    uint8_t png[64] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    /* Cut right after the header (SOS segment), and halfway. */
    size_t sos = scan_start(j, len);
    ck_assert_uint_gt(sos, 0);
    /* Corrupt entropy data: a restart marker where none belongs, then
     * garbage, a third of the way into the scan. */
    uint8_t *corrupt = malloc(len);
    memcpy(corrupt, j, len);
    size_t at = sos + (len - sos) / 3;
    corrupt[at] = 0xFF;
    corrupt[at + 1] = 0xD3;
    for (size_t i = at + 2; i < at + 200; i++)
        corrupt[i] = (uint8_t)(i * 37);
    /* A header claiming 30000x30000 (the data behind it is a small image). */
    uint8_t *huge = malloc(len);
    memcpy(huge, j, len);
    size_t sof = find_sof(huge, len);
    ck_assert_uint_gt(sof, 0);
    huge[sof + 5] = 30000 >> 8;
    huge[sof + 6] = 30000 & 0xFF;
    huge[sof + 7] = 30000 >> 8;
    huge[sof + 8] = 30000 & 0xFF;

    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            feeder__transform t = mk(pipelines[pi], decoders[di], pi == 1, 224, 224);
            uint8_t *good_out = decode_ok(fresh, &t, good, glen, 0);
            /* decode_ok uses seed 42 epoch 3; expect_error uses 1, 0. */
            free(good_out);
            good_out = malloc(224 * 224 * 3);
            ck_assert_int_eq(feeder__decode_sample(fresh, &t, good, glen, 1, 0, 0, good_out,
                                                   NULL, NULL, 0),
                             0);
            expect_error(d, &t, good, 0, FEEDER_EDECODE, good, glen, good_out, "empty");
            expect_error(d, &t, (const uint8_t *)text, sizeof(text), FEEDER_EDECODE, good, glen,
                         good_out, "text");
            expect_error(d, &t, png, sizeof(png), FEEDER_EDECODE, good, glen, good_out, "png");
            expect_error(d, &t, j, 2, FEEDER_EDECODE, good, glen, good_out, "SOI only");
            expect_error(d, &t, j, sos, FEEDER_EDECODE, good, glen, good_out, "cut after header");
            expect_error(d, &t, j, sos / 2, FEEDER_EDECODE, good, glen, good_out,
                         "cut inside header");
            /* ROI under TRAIN reads only its crop's rows; a crop above the
             * cut is decoded fine. */
            if (!(decoders[di] == FEEDER_DECODER_ROI && pipelines[pi] == FEEDER_PIPELINE_TRAIN)) {
                expect_error(d, &t, j, len / 2, FEEDER_EDECODE, good, glen, good_out, "cut 50%");
                expect_error(d, &t, corrupt, len, FEEDER_EDECODE, good, glen, good_out,
                             "corrupt");
            }
            expect_error(d, &t, huge, len, FEEDER_ETOOBIG, good, glen, good_out, "30000^2");
            /* The limit is checked before any pixel is written. */
            feeder__transform small = t;
            small.max_pixels = 500 * 400 - 1;
            uint8_t *out = malloc(224 * 224 * 3);
            memset(out, 0x5A, 224 * 224 * 3);
            char err[200];
            ck_assert_int_eq(
                feeder__decode_sample(d, &small, j, len, 1, 0, 0, out, NULL, err, sizeof(err)),
                FEEDER_ETOOBIG);
            ck_assert(strstr(err, "500x400") != NULL);
            for (size_t i = 0; i < 224 * 224 * 3; i++)
                REQUIRE(out[i] == 0x5A, "byte %zu written before the size check", i);
            small.max_pixels = 500 * 400;
            ck_assert_int_eq(
                feeder__decode_sample(d, &small, j, len, 1, 0, 0, out, NULL, err, sizeof(err)),
                0);
            free(out);
            free(good_out);
        }
    /* The message is the decoder's own text (a PNG signature goes to libspng). */
    char err[200];
    uint8_t out[8 * 8 * 3];
    feeder__transform t = mk(FEEDER_PIPELINE_RESIZE, FEEDER_DECODER_ROI, 0, 8, 8);
    ck_assert_int_eq(
        feeder__decode_sample(d, &t, png, sizeof(png), 0, 0, 0, out, NULL, err, sizeof(err)),
        FEEDER_EDECODE);
    ck_assert_msg(strstr(err, "PNG: ") != NULL, "%s", err);
    ck_assert_int_eq(feeder__decode_sample(d, &t, j, len / 2, 0, 0, 0, out, NULL, err,
                                           sizeof(err)),
                     FEEDER_EDECODE);
    ck_assert_msg(strstr(err, "Premature end of JPEG file") != NULL, "%s", err);
    t.decoder = FEEDER_DECODER_TURBO;
    ck_assert_int_eq(feeder__decode_sample(d, &t, j, len / 2, 0, 0, 0, out, NULL, err,
                                           sizeof(err)),
                     FEEDER_EDECODE);
    ck_assert_msg(strstr(err, "Premature end of JPEG file") != NULL, "%s", err);
    /* Bad arguments. */
    ck_assert_int_eq(feeder__decode_sample(d, &t, j, len, 0, 0, 0, NULL, NULL, err, sizeof(err)),
                     FEEDER_EINVAL);
    t.decoder = 7;
    ck_assert_int_eq(feeder__decode_sample(d, &t, j, len, 0, 0, 0, out, NULL, err, sizeof(err)),
                     FEEDER_EINVAL);
    feeder__decoder_destroy(NULL);
    feeder__decoder_destroy(d);
    feeder__decoder_destroy(fresh);
    free(corrupt);
    free(huge);
    free(good);
    free(j);
}
END_TEST

/* The ROI decoder's DCT scaling (feeder__roi_scale): the smallest of 1/8,
 * 1/4, 1/2 that keeps the crop box >= 3/4 of the output on both axes. Eval
 * 256 -> 224 takes 0.875 of the short side, so a square side of 384 is the
 * first to decode at 1/2 (box 336 = 2 * 168), 768 at 1/4, 1536 at 1/8. */
START_TEST(roi_scale_choice)
{
    static const struct {
        uint32_t side;
        unsigned m;
    } eval[] = {{224, 8}, {383, 8}, {384, 4}, {400, 4}, {512, 4}, {767, 4},
                {768, 2}, {1535, 2}, {1536, 1}, {4000, 1}};
    feeder__transform t = mk(FEEDER_PIPELINE_EVAL, FEEDER_DECODER_ROI, 0, 224, 224);
    for (size_t i = 0; i < sizeof(eval) / sizeof(eval[0]); i++) {
        feeder__crop c;
        feeder__crop_compute(&t, eval[i].side, eval[i].side, 1, 0, 0, &c);
        unsigned m = feeder__roi_scale(&c, &t);
        REQUIRE(m == eval[i].m, "eval %ux%u: scale %u/8, expected %u/8", eval[i].side,
                eval[i].side, m, eval[i].m);
    }
    /* Any box (train's random ones): both axes must reach 3/4 of the output,
     * here 320 wide x 224 high: 1/2 needs 480 x 336. */
    static const struct {
        double fw, fh;
        unsigned m;
    } boxes[] = {{480, 336, 4}, {479.9, 336, 8}, {480, 335.9, 8}, {2000, 336, 4},
                 {960, 672, 2}, {1920, 1344, 1}, {1920, 1343, 2}, {100, 100, 8}};
    t = mk(FEEDER_PIPELINE_TRAIN, FEEDER_DECODER_ROI, 0, 224, 320);
    for (size_t i = 0; i < sizeof(boxes) / sizeof(boxes[0]); i++) {
        feeder__crop c = {0, 0, 1, 1, 0, 0.0, 0.0, boxes[i].fw, boxes[i].fh};
        unsigned m = feeder__roi_scale(&c, &t);
        REQUIRE(m == boxes[i].m, "box %.1fx%.1f: scale %u/8, expected %u/8", boxes[i].fw,
                boxes[i].fh, m, boxes[i].m);
    }
}
END_TEST

static Suite *decode_suite(void)
{
    Suite *s = suite_create("decode");
    TCase *crop = tcase_create("crop");
    tcase_add_test(crop, round_half_even_as_python);
    tcase_add_test(crop, crop_eval_exact);
    tcase_add_test(crop, crop_resize_whole);
    tcase_add_test(crop, crop_train_properties);
    tcase_add_test(crop, crop_train_fallback);
    tcase_add_test(crop, roi_scale_choice);
    tcase_set_timeout(crop, 30);
    suite_add_tcase(s, crop);
    TCase *px = tcase_create("pixels");
    tcase_add_test(px, resize_vs_reference);
    tcase_add_test(px, solid_colour);
    tcase_add_test(px, flip_and_layout_exact);
    tcase_add_test(px, roi_vs_turbo);
    tcase_add_test(px, roi_restart_intervals_exact);
    tcase_add_test(px, roi_row_index_exact);
    tcase_add_test(px, grayscale_is_rgb);
    tcase_add_test(px, cmyk_colours);
    tcase_add_test(px, progressive_same_as_baseline);
    tcase_set_timeout(px, 120);
    suite_add_tcase(s, px);
    TCase *er = tcase_create("errors");
    tcase_add_test(er, errors);
    tcase_set_timeout(er, 60);
    suite_add_tcase(s, er);
    return s;
}

int main(void)
{
    char err[256];
    if (bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err))) {
        fprintf(stderr, "test_decode: %s\n", err);
        return 1;
    }
    SRunner *sr = srunner_create(decode_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    bu_photos_free(photos);
    return failed ? 1 : 0;
}
