/*
 * bench_resize: which resizer should decode/ use? Speed (images/s, one core)
 * and quality (against a double-precision antialiased triangle filter, the
 * Pillow BILINEAR / torchvision antialias=True reference) of each candidate on
 * real photos at ImageNet-like sizes.
 *
 *   bench_resize [seconds per cell, default 0.3]
 *
 * A second table gives the whole per-sample path (feeder__decode_sample:
 * decode + crop + resize + layout) for both decoders and the three
 * pipelines on ImageNet-like JPEGs (short side 256-512, aspect 3:4-4:3,
 * quality 75-95, 4:2:0, made from the photos as bu_make_dataset does).
 *
 * Every candidate resizes the same whole (sub)image to the output size and
 * produces interleaved RGB, the format a batch slot wants, so conversions a
 * candidate needs (RGBX -> RGB, plane split/merge) are inside its time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "benchutil.h"
#include "cli.h"
#include "decode/decode.h"
/* libyuv is measured when the build found it (FEEDER_HAVE_YUV); the
 * library itself does not use it (see decode/resize.c for why). */
#ifdef FEEDER_HAVE_YUV
#include "libyuv.h"
#include "libyuv/scale_rgb.h"
#endif

/* stb_image_resize is header-only (libstb-dev); measured when present. */
#if defined(__has_include)
#if __has_include(<stb/stb_image_resize.h>)
#define HAVE_STB 1
#endif
#endif
#ifdef HAVE_STB
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wshadow"
#endif
#include <stb/stb_image_resize.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

/* One input: the same pixels as RGB and as RGBX. */
typedef struct img {
    uint8_t *rgb, *rgbx;
    uint32_t w, h;
} img;

/* Scratch shared by the candidates (allocated once, as a worker would). */
typedef struct scratch {
    feeder__resizer rs;
    uint8_t *tmp4;     /* out_w*out_h*4 */
    uint8_t *planes;   /* 3 * (src plane + dst plane) */
    size_t planes_cap;
} scratch;

typedef int (*resize_fn)(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh);

static int ours(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh, int force)
{
    s->rs.force = force;
    int rc = feeder__resize(&s->rs, in->rgbx, in->w, in->h, (size_t)in->w * 4, 4, 0, 0, in->w,
                            in->h, out, ow, oh, 0, FEEDER_LAYOUT_NHWC);
    s->rs.force = FEEDER__RESIZE_AUTO;
    return rc;
}

static int c_ours(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return ours(s, in, out, ow, oh, FEEDER__RESIZE_AUTO);
}

static int c_ours_sse2(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return ours(s, in, out, ow, oh, FEEDER__RESIZE_SSE2);
}

static int c_ours_portable(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return ours(s, in, out, ow, oh, FEEDER__RESIZE_PORTABLE);
}

#ifdef FEEDER_HAVE_YUV
static int yuv_argb(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh,
                    enum FilterMode f)
{
    if (ARGBScale(in->rgbx, (int)in->w * 4, (int)in->w, (int)in->h, s->tmp4, (int)ow * 4,
                  (int)ow, (int)oh, f))
        return -1;
    /* libyuv's "ARGB" is 4 bytes in memory order B,G,R,A; RGB24 is B,G,R:
     * the conversion drops byte 3 and keeps the order, so RGBX -> RGB. */
    return ARGBToRGB24(s->tmp4, (int)ow * 4, out, (int)ow * 3, (int)ow, (int)oh);
}

static int c_yuv_box(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return yuv_argb(s, in, out, ow, oh, kFilterBox);
}

static int c_yuv_bilinear(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return yuv_argb(s, in, out, ow, oh, kFilterBilinear);
}

static int c_yuv_rgb_box(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return RGBScale(in->rgb, (int)in->w * 3, (int)in->w, (int)in->h, out, (int)ow * 3, (int)ow,
                    (int)oh, kFilterBox);
}

/* Planar: split, scale each plane with libyuv's real box filter, merge. */
static int c_yuv_planar_box(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    size_t sp = (size_t)in->w * in->h, dp = (size_t)ow * oh, need = 3 * (sp + dp);
    if (need > s->planes_cap) {
        free(s->planes);
        s->planes = malloc(need);
        s->planes_cap = need;
    }
    uint8_t *r = s->planes, *g = r + sp, *b = g + sp, *R = b + sp, *G = R + dp, *B = G + dp;
    SplitRGBPlane(in->rgb, (int)in->w * 3, r, (int)in->w, g, (int)in->w, b, (int)in->w,
                  (int)in->w, (int)in->h);
    ScalePlane(r, (int)in->w, (int)in->w, (int)in->h, R, (int)ow, (int)ow, (int)oh, kFilterBox);
    ScalePlane(g, (int)in->w, (int)in->w, (int)in->h, G, (int)ow, (int)ow, (int)oh, kFilterBox);
    ScalePlane(b, (int)in->w, (int)in->w, (int)in->h, B, (int)ow, (int)ow, (int)oh, kFilterBox);
    MergeRGBPlane(R, (int)ow, G, (int)ow, B, (int)ow, out, (int)ow * 3, (int)ow, (int)oh);
    return 0;
}

#endif

#ifdef HAVE_STB
static int c_stb_triangle(scratch *s, const img *in, uint8_t *out, uint32_t ow, uint32_t oh)
{
    return stbir_resize_uint8_generic(in->rgb, (int)in->w, (int)in->h, (int)in->w * 3, out,
                                      (int)ow, (int)oh, (int)ow * 3, 3,
                                      STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP,
                                      STBIR_FILTER_TRIANGLE, STBIR_COLORSPACE_LINEAR, NULL)
               ? 0
               : -1;
}
#endif

static const struct {
    const char *name;
    resize_fn fn;
} candidates[] = {
    {"feeder triangle, AVX2 if any (kept)", c_ours},
    {"feeder triangle, SSE2", c_ours_sse2},
    {"feeder triangle, portable C", c_ours_portable},
#ifdef FEEDER_HAVE_YUV
    {"libyuv ARGBScale kFilterBox", c_yuv_box},
    {"libyuv ARGBScale kFilterBilinear", c_yuv_bilinear},
    {"libyuv RGBScale kFilterBox", c_yuv_rgb_box},
    {"libyuv split+ScalePlane box+merge", c_yuv_planar_box},
#endif
#ifdef HAVE_STB
    {"stb_image_resize triangle (float)", c_stb_triangle},
#endif
};
#define NCAND (sizeof(candidates) / sizeof(candidates[0]))

/* A case: photos decoded at src_w x src_h, an optional integer crop of them,
 * resized to ow x oh. */
typedef struct rcase {
    const char *name;
    uint32_t src_w, src_h;
    uint32_t cx, cy, cw, ch; /* crop; cw 0 = whole image */
    uint32_t ow, oh;
} rcase;

static const rcase cases[] = {
    {"500x375 -> 224x224 (whole)", 500, 375, 0, 0, 0, 0, 224, 224},
    {"500x375 -> 341x256 (Resize 256)", 500, 375, 0, 0, 0, 0, 341, 256},
    {"500x375 crop 328x329 -> 224 (eval)", 500, 375, 85, 23, 328, 329, 224, 224},
    {"1411x1411 -> 224x224 (6.3x down)", 1411, 1411, 0, 0, 0, 0, 224, 224},
    {"500x375 crop 150x120 -> 224 (up)", 500, 375, 200, 100, 150, 120, 224, 224},
};
#define NCASE (sizeof(cases) / sizeof(cases[0]))
#define NPHOTO 6

static void decode_to(tjhandle tj, const uint8_t *jpeg, size_t len, uint32_t w, uint32_t h,
                      img *out)
{
    out->w = w;
    out->h = h;
    out->rgb = malloc((size_t)w * h * 3);
    out->rgbx = malloc((size_t)w * h * 4);
    tjDecompress2(tj, jpeg, len, out->rgb, (int)w, 0, (int)h, TJPF_RGB, 0);
    tjDecompress2(tj, jpeg, len, out->rgbx, (int)w, 0, (int)h, TJPF_RGBX, 0);
}

/* Copy a crop out so every candidate sees a plain, whole image. */
static void crop_img(img *im, uint32_t x, uint32_t y, uint32_t w, uint32_t h)
{
    img c = {malloc((size_t)w * h * 3), malloc((size_t)w * h * 4), w, h};
    for (uint32_t r = 0; r < h; r++) {
        memcpy(c.rgb + (size_t)r * w * 3, im->rgb + ((size_t)(y + r) * im->w + x) * 3,
               (size_t)w * 3);
        memcpy(c.rgbx + (size_t)r * w * 4, im->rgbx + ((size_t)(y + r) * im->w + x) * 4,
               (size_t)w * 4);
    }
    free(im->rgb);
    free(im->rgbx);
    *im = c;
}

#define NJPEG 64

static void bench_decode(const bu_photos *ph, double secs)
{
    uint8_t *jpeg[NJPEG];
    size_t len[NJPEG], total = 0;
    for (unsigned k = 0; k < NJPEG; k++) {
        uint32_t s = 256 + (uint32_t)(feeder_random(5, 1, k, 0) % 257);
        double ar = 0.75 + (4.0 / 3.0 - 0.75) * feeder_random_uniform(5, 1, k, 1);
        uint32_t w = s, h = s;
        if (ar >= 1)
            w = (uint32_t)(s * ar);
        else
            h = (uint32_t)(s / ar);
        int q = 75 + (int)(feeder_random(5, 1, k, 2) % 21);
        if (bu_make_jpeg(ph, k, w, h, q, -1, feeder_random(5, 1, k, 3), &jpeg[k], &len[k])) {
            fprintf(stderr, "bench_resize: bu_make_jpeg failed\n");
            exit(1);
        }
        total += len[k];
    }
    printf("decode + transform to 224x224 NHWC, one core, %d ImageNet-like JPEGs "
           "(short side 256-512, mean %zu bytes)\n",
           NJPEG, total / NJPEG);
    printf("  %-8s %-7s %10s %12s %14s\n", "pipeline", "decoder", "images/s", "decode us/img",
           "transform us/img");
    static const char *pname[] = {"eval", "train", "resize"};
    static const char *dname[] = {"turbo", "roi"};
    uint8_t *out = malloc(224 * 224 * 3);
    feeder__decoder *d;
    if (feeder__decoder_create(&d))
        exit(1);
    /* Best of three rounds, each round visiting every configuration once, so
     * a slow stretch of a shared machine does not favour one of them. */
    double best[3][2] = {{0}}, dus[3][2], tus[3][2];
    for (int round = 0; round < 3; round++)
        for (int p = 0; p < 3; p++)
            for (int dec = 0; dec < 2; dec++) {
                feeder__transform t = {p, dec, FEEDER_LAYOUT_NHWC, 224, 224, 256, 0.08, 1.0,
                                       3.0 / 4.0, 4.0 / 3.0, 0.5, 178956970, 3, 0, 0};
                uint64_t dns = 0, tns = 0, n = 0, t0 = bu_now_ns(), now;
                char err[256];
                do {
                    for (unsigned k = 0; k < NJPEG; k++, n++) {
                        feeder__decode_times tm;
                        if (feeder__decode_sample(d, &t, jpeg[k], len[k], 1, 0, n, out, &tm,
                                                  err, sizeof(err))) {
                            fprintf(stderr, "bench_resize: %s\n", err);
                            exit(1);
                        }
                        dns += tm.decode_ns;
                        tns += tm.transform_ns;
                    }
                    now = bu_now_ns();
                } while (now - t0 < (uint64_t)(secs * 1e9));
                double rate = n / ((now - t0) / 1e9);
                if (rate > best[p][dec]) {
                    best[p][dec] = rate;
                    dus[p][dec] = dns / 1e3 / n;
                    tus[p][dec] = tns / 1e3 / n;
                }
            }
    for (int p = 0; p < 3; p++)
        for (int dec = 0; dec < 2; dec++)
            printf("  %-8s %-7s %10.0f %12.0f %14.0f\n", pname[p], dname[dec], best[p][dec],
                   dus[p][dec], tus[p][dec]);
    feeder__decoder_destroy(d);
    free(out);
    for (unsigned k = 0; k < NJPEG; k++)
        free(jpeg[k]);
}

/* The case's photos decoded (and cropped) into in[], and the reference
 * resize of each into ref[]. */
static void prepare_case(const bu_photos *ph, tjhandle tj, const rcase *c, img *in,
                         uint8_t **ref)
{
    for (unsigned p = 0; p < NPHOTO; p++) {
        uint8_t *jpeg;
        size_t len;
        if (bu_make_jpeg(ph, p, c->src_w, c->src_h, 90, TJSAMP_444, 7 + p, &jpeg, &len))
            cli_die("bench_resize", "bu_make_jpeg failed");
        decode_to(tj, jpeg, len, c->src_w, c->src_h, &in[p]);
        free(jpeg);
        if (c->cw)
            crop_img(&in[p], c->cx, c->cy, c->cw, c->ch);
        ref[p] = malloc((size_t)c->ow * c->oh * 3);
        feeder__resize_reference(in[p].rgb, in[p].w, in[p].h, (size_t)in[p].w * 3, 3, 0, 0,
                                 in[p].w, in[p].h, ref[p], c->ow, c->oh);
    }
}

/* One candidate on one case: its error against the reference over every
 * photo, then its speed (cycling through the photos; the best of three runs
 * of secs / 3, as the machine may be shared). */
static void measure(scratch *s, const rcase *c, size_t k, img *in, uint8_t **ref,
                    uint8_t *out, double secs)
{
    double se = 0, sum = 0;
    int maxe = 0;
    size_t n = 0;
    for (unsigned p = 0; p < NPHOTO; p++) {
        memset(out, 0, (size_t)c->ow * c->oh * 3);
        if (candidates[k].fn(s, &in[p], out, c->ow, c->oh))
            cli_die("bench_resize", "%s failed", candidates[k].name);
        for (size_t i = 0; i < (size_t)c->ow * c->oh * 3; i++, n++) {
            int d = abs((int)out[i] - (int)ref[p][i]);
            se += (double)d * d;
            sum += d;
            if (d > maxe)
                maxe = d;
        }
    }
    double mse = se / n;
    double psnr = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : INFINITY;
    double best = 0;
    for (int round = 0; round < 3; round++) {
        uint64_t t0 = bu_now_ns(), t;
        unsigned iters = 0;
        do {
            for (unsigned p = 0; p < NPHOTO; p++)
                candidates[k].fn(s, &in[p], out, c->ow, c->oh);
            iters += NPHOTO;
            t = bu_now_ns();
        } while (t - t0 < (uint64_t)(secs / 3 * 1e9));
        double rate = iters / ((t - t0) / 1e9);
        if (rate > best)
            best = rate;
    }
    printf("  %-36s %10.0f %9.2f %8d %8.3f\n", candidates[k].name, best, psnr, maxe, sum / n);
}

static void run_case(const bu_photos *ph, tjhandle tj, scratch *s, const rcase *c, double secs)
{
    img in[NPHOTO];
    uint8_t *ref[NPHOTO];
    prepare_case(ph, tj, c, in, ref);
    printf("%s\n", c->name);
    printf("  %-36s %10s %9s %8s %8s\n", "candidate", "images/s", "PSNR dB", "max err",
           "mean err");
    uint8_t *out = malloc((size_t)c->ow * c->oh * 3);
    for (size_t k = 0; k < NCAND; k++)
        measure(s, c, k, in, ref, out, secs);
    printf("\n");
    free(out);
    for (unsigned p = 0; p < NPHOTO; p++) {
        free(in[p].rgb);
        free(in[p].rgbx);
        free(ref[p]);
    }
}

int main(int argc, char **argv)
{
    cli_opt opts[] = {CLI_END};
    cli_spec spec = {.prog = "bench_resize", .opts = opts, .max_args = 1,
                     .usage = "usage: bench_resize [SECONDS]\n"
                              "Resize candidates against a reference, then JPEG decoders; "
                              "SECONDS per speed figure (0.3).\n"};
    int first = cli_parse(&spec, argc, argv);
    double secs = first < argc ? atof(argv[first]) : 0.3;
    if (secs <= 0)
        secs = 0.3;
    char err[512];
    bu_photos *ph;
    if (bu_photos_load(FEEDER_BENCH_PHOTOS, &ph, err, sizeof(err)))
        cli_die("bench_resize", "%s", err);
    tjhandle tj = tjInitDecompress();
    scratch s = {0};
    s.tmp4 = malloc(1024 * 1024 * 4);
    printf("bench_resize: one core, %d real photos per case, quality vs a double-precision\n"
           "antialiased triangle filter (Pillow BILINEAR / torchvision antialias=True)\n\n",
           NPHOTO);
    for (size_t ci = 0; ci < NCASE; ci++)
        run_case(ph, tj, &s, &cases[ci], secs);
    bench_decode(ph, secs);
    feeder__resizer_free(&s.rs);
    free(s.tmp4);
    free(s.planes);
    tjDestroy(tj);
    bu_photos_free(ph);
    return 0;
}
