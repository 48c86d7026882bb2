/* Grayscale output (FEEDER_OPT_CHANNELS 1): the 1-channel resizer, every
 * format's gray decode against a reference computed here (Pillow's L of the
 * RGB decode for PNG, WebP and CMYK JPEGs; libjpeg's own gray output, the Y
 * channel, for other JPEGs), both layouts, the loader at every worker count,
 * RAW packs of either channel count, the option's bounds, and the augment
 * ops and mixes on gray samples. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spng.h>
#include <turbojpeg.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include "augment/augment.h"
#include "common/common.h"
#include "dataset/pack.h"
#include "decode/decode.h"
#include "decode/format.h"
#include "feeder.h"
#include "testutil.h"

#define W 64
#define H 48

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* A picture with colour, edges and texture: RGB, W x H. */
static void picture(uint8_t *rgb)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *q = rgb + (y * W + x) * 3;
            q[0] = (uint8_t)(x * 4 + ((x / 8 + y / 8) % 2) * 40);
            q[1] = (uint8_t)(y * 5);
            q[2] = (uint8_t)(128 + ((x * y) % 50));
        }
}

/* Pillow's L (Convert.c, L24), written out here as the reference. */
static void pil_l(const uint8_t *rgb, uint8_t *g, size_t n, int step)
{
    for (size_t i = 0; i < n; i++, rgb += step)
        g[i] = (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

static feeder__transform xf(int decoder, int layout, uint32_t ow, uint32_t oh, int pipeline)
{
    return (feeder__transform){.pipeline = pipeline, .decoder = decoder, .layout = layout,
                               .height = oh, .width = ow, .resize = ow + 8, .scale_min = 0.3,
                               .scale_max = 1.0, .ratio_min = 0.75, .ratio_max = 4.0 / 3.0,
                               .flip_prob = 0.5, .max_pixels = 1u << 20, .channels = 1};
}

/* The gray sample `t` must make of a decoded gray image g (w x h): the crop
 * of (seed 1, epoch 0, index) and the 1-channel resizer. */
static void expected(const feeder__transform *t, const uint8_t *g, uint32_t w, uint32_t h,
                     uint64_t index, uint8_t *out)
{
    feeder__crop c;
    feeder__crop_compute(t, w, h, 1, 0, index, &c);
    feeder__resizer rs = {0};
    ck_assert_int_eq(feeder__resize(&rs, g, w, h, w, 1, c.fx, c.fy, c.fw, c.fh, out, t->width,
                                    t->height, c.flip, t->layout),
                     0);
    feeder__resizer_free(&rs);
}

static void decode_gray(const feeder__transform *t, const blob *b, uint64_t index, uint8_t *out)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    char err[256];
    int rc = feeder__decode_sample(d, t, b->p, b->n, 1, 0, index, out, NULL, err, sizeof(err));
    ck_assert_msg(rc == 0, "decode: %d %s", rc, err);
    feeder__decoder_destroy(d);
}

/* Decode b under t for indices 0..5 and both layouts; each must equal the
 * reference of gray image g. */
static void expect_gray(feeder__transform t, const blob *b, const uint8_t *g, uint32_t w,
                        uint32_t h, const char *what)
{
    size_t n = (size_t)t.width * t.height;
    uint8_t *got = malloc(n), *want = malloc(n);
    for (int layout = 0; layout < 2; layout++)
        for (uint64_t idx = 0; idx < 6; idx++) {
            t.layout = layout;
            memset(got, 0xAA, n);
            decode_gray(&t, b, idx, got);
            expected(&t, g, w, h, idx, want);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(got[i] == want[i], "%s, layout %d, index %llu, byte %zu: %u vs %u",
                              what, layout, (unsigned long long)idx, i, got[i], want[i]);
        }
    free(got);
    free(want);
}

/* ---- the resizer ---- */

/* A gray image resized alone equals channel 0 of the same image as RGB and
 * RGBX (R = G = B) on every code path: the arithmetic is the same. */
START_TEST(resize_gray_matches_rgb)
{
    static uint8_t rgb[W * H * 3], g[W * H], rgbx[W * H * 4];
    picture(rgb);
    pil_l(rgb, g, W * H, 3);
    for (int i = 0; i < W * H; i++) {
        memset(rgbx + 4 * i, g[i], 4);
        memset(rgb + 3 * i, g[i], 3);
    }
    const struct {
        double bx, by, bw, bh;
        uint32_t ow, oh;
    } cases[] = {{0, 0, W, H, 40, 30}, {3.5, 2.25, 41.5, 33.0, 24, 24}, {10, 5, 20, 10, 50, 31},
                 {0, 0, W, H, 7, 5}};
    static const int force[] = {FEEDER__RESIZE_AUTO, FEEDER__RESIZE_SSE2,
                                FEEDER__RESIZE_PORTABLE};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        for (int f = 0; f < 3; f++)
            for (int flip = 0; flip < 2; flip++) {
                uint32_t ow = cases[k].ow, oh = cases[k].oh;
                uint8_t *a = malloc((size_t)ow * oh), *b = malloc((size_t)ow * oh * 3),
                        *c = malloc((size_t)ow * oh * 3);
                feeder__resizer rs = {0};
                rs.force = force[f];
                ck_assert_int_eq(feeder__resize(&rs, g, W, H, W, 1, cases[k].bx, cases[k].by,
                                                cases[k].bw, cases[k].bh, a, ow, oh, flip,
                                                FEEDER_LAYOUT_NCHW),
                                 0);
                ck_assert_int_eq(feeder__resize(&rs, rgbx, W, H, W * 4, 4, cases[k].bx,
                                                cases[k].by, cases[k].bw, cases[k].bh, b, ow, oh,
                                                flip, FEEDER_LAYOUT_NCHW),
                                 0);
                ck_assert_int_eq(feeder__resize(&rs, rgb, W, H, W * 3, 3, cases[k].bx,
                                                cases[k].by, cases[k].bw, cases[k].bh, c, ow, oh,
                                                flip, FEEDER_LAYOUT_NCHW),
                                 0);
                ck_assert_msg(memcmp(a, b, (size_t)ow * oh) == 0, "case %zu force %d flip %d",
                              k, f, flip);
                ck_assert_msg(memcmp(a, c, (size_t)ow * oh) == 0, "case %zu force %d flip %d",
                              k, f, flip);
                /* NHWC and NCHW are the same bytes for one channel */
                ck_assert_int_eq(feeder__resize(&rs, g, W, H, W, 1, cases[k].bx, cases[k].by,
                                                cases[k].bw, cases[k].bh, b, ow, oh, flip,
                                                FEEDER_LAYOUT_NHWC),
                                 0);
                ck_assert_int_eq(memcmp(a, b, (size_t)ow * oh), 0);
                feeder__resizer_free(&rs);
                free(a);
                free(b);
                free(c);
            }
}
END_TEST

/* The fixed-point gray path stays within one level of the double-precision
 * reference, which also takes one channel. */
START_TEST(resize_gray_reference)
{
    static uint8_t rgb[W * H * 3], g[W * H], a[30 * 20], r[30 * 20];
    picture(rgb);
    pil_l(rgb, g, W * H, 3);
    feeder__resizer rs = {0};
    ck_assert_int_eq(feeder__resize(&rs, g, W, H, W, 1, 1.5, 2.0, 60, 44, a, 30, 20, 0, 0), 0);
    ck_assert_int_eq(feeder__resize_reference(g, W, H, W, 1, 1.5, 2.0, 60, 44, r, 30, 20), 0);
    for (size_t i = 0; i < sizeof(a); i++)
        ck_assert_msg(abs(a[i] - r[i]) <= 1, "byte %zu: %u vs %u", i, a[i], r[i]);
    /* 2 channels is no format */
    ck_assert_int_eq(feeder__resize(&rs, g, W / 2, H, W, 2, 0, 0, 10, 10, a, 30, 20, 0, 0),
                     FEEDER_EINVAL);
    feeder__resizer_free(&rs);
}
END_TEST

/* ---- the decoders ---- */

static blob jpeg_of(const uint8_t *px, int pf, int samp, int quality)
{
    tjhandle tj = tjInitCompress();
    unsigned long n = 0;
    uint8_t *p = NULL;
    int pitch = W * tjPixelSize[pf];
    ck_assert_int_eq(tjCompress2(tj, px, W, pitch, H, pf, &p, &n, samp, quality, 0), 0);
    tjDestroy(tj);
    return (blob){p, n};
}

/* libjpeg's gray decode of the whole image: the Y channel. */
static void jpeg_gray_full(const blob *b, uint8_t *g)
{
    tjhandle tj = tjInitDecompress();
    ck_assert_int_eq(tjDecompress2(tj, b->p, b->n, g, W, W, H, TJPF_GRAY, 0), 0);
    tjDestroy(tj);
}

/* A colour JPEG: both decoders give the resize of libjpeg's Y (ROI at DCT
 * scale 1, where its region decode equals the whole decode: no chroma). */
START_TEST(jpeg_colour_is_luma)
{
    static uint8_t rgb[W * H * 3], g[W * H];
    picture(rgb);
    int samps[] = {TJSAMP_420, TJSAMP_444, TJSAMP_422};
    for (int s = 0; s < 3; s++) {
        blob b = jpeg_of(rgb, TJPF_RGB, samps[s], 90);
        jpeg_gray_full(&b, g);
        for (int p = 0; p < 3; p++) {
            expect_gray(xf(FEEDER_DECODER_TURBO, 0, 40, 30, p), &b, g, W, H, "TURBO");
            /* 44 x 33: no crop of the 64 x 48 image reaches 3/2 of it, so
             * ROI decodes at full scale (feeder__roi_scale) and must match
             * exactly; at 40 x 30 the whole image now decodes at 1/2. */
            expect_gray(xf(FEEDER_DECODER_ROI, 0, 44, 33, p), &b, g, W, H, "ROI");
        }
        tjFree(b.p);
    }
}
END_TEST

/* ROI with DCT scaling (here 1/4: the crop at 1/4 is still >= 3/4 of the
 * output) reads a reduced Y; it stays close to the full-size decode's
 * sample. */
START_TEST(jpeg_roi_scaled_close)
{
    static uint8_t rgb[W * H * 3], g[W * H], got[12 * 9], want[12 * 9];
    picture(rgb);
    blob b = jpeg_of(rgb, TJPF_RGB, TJSAMP_420, 90);
    jpeg_gray_full(&b, g);
    feeder__transform t = xf(FEEDER_DECODER_ROI, 0, 12, 9, FEEDER_PIPELINE_RESIZE);
    decode_gray(&t, &b, 0, got);
    expected(&t, g, W, H, 0, want);
    int maxd = 0;
    for (size_t i = 0; i < sizeof(got); i++)
        maxd = abs(got[i] - want[i]) > maxd ? abs(got[i] - want[i]) : maxd;
    ck_assert_msg(maxd <= 12, "ROI 1/4 scale off by %d", maxd);
    tjFree(b.p);
}
END_TEST

/* A grayscale JPEG gives the same bytes with channels 1 as channel 0 of
 * its RGB output (libjpeg replicates Y into R, G and B). */
START_TEST(jpeg_gray_file)
{
    static uint8_t rgb[W * H * 3], g[W * H], c3[40 * 30 * 3], c1[40 * 30];
    picture(rgb);
    pil_l(rgb, g, W * H, 3);
    blob b = jpeg_of(g, TJPF_GRAY, TJSAMP_GRAY, 90);
    for (int dec = 0; dec < 2; dec++) {
        feeder__transform t = xf(dec, FEEDER_LAYOUT_NCHW, 40, 30, FEEDER_PIPELINE_TRAIN);
        decode_gray(&t, &b, 3, c1);
        t.channels = 3;
        decode_gray(&t, &b, 3, c3);
        ck_assert_int_eq(memcmp(c1, c3, sizeof(c1)), 0);
        ck_assert_int_eq(memcmp(c1, c3 + sizeof(c1), sizeof(c1)), 0);
    }
    tjFree(b.p);
}
END_TEST

/* Pillow's CMYK;I -> RGB (MULDIV255), the reference for CMYK JPEGs. */
static void cmyk_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *q = cmyk + 4 * i;
        int nk = q[3];
        for (int c = 0; c < 3; c++) {
            int v = 255 - q[c], tmp = v * nk + 128;
            int r = nk - (((tmp >> 8) + tmp) >> 8);
            rgb[3 * i + c] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
        }
    }
}

/* CMYK/YCCK JPEGs have no gray decode in libjpeg: Pillow's RGB, then L. */
START_TEST(jpeg_cmyk_is_pil_l)
{
    static uint8_t cmyk[W * H * 4], dec[W * H * 4], rgb[W * H * 3], g[W * H];
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 4; c++)
            cmyk[4 * i + c] = (uint8_t)((i * (c + 3) + c * 60) % 256);
    blob b = jpeg_of(cmyk, TJPF_CMYK, TJSAMP_444, 95);
    tjhandle tj = tjInitDecompress();
    ck_assert_int_eq(tjDecompress2(tj, b.p, b.n, dec, W, W * 4, H, TJPF_CMYK, 0), 0);
    tjDestroy(tj);
    cmyk_rgb(dec, rgb, W * H);
    pil_l(rgb, g, W * H, 3);
    expect_gray(xf(FEEDER_DECODER_TURBO, 0, 40, 30, FEEDER_PIPELINE_RESIZE), &b, g, W, H,
                "CMYK TURBO");
    expect_gray(xf(FEEDER_DECODER_ROI, 0, 40, 30, FEEDER_PIPELINE_EVAL), &b, g, W, H, "CMYK ROI");
    tjFree(b.p);
}
END_TEST

static blob png_of(const void *px, size_t n, int ctype)
{
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ih = {.width = W, .height = H, .bit_depth = 8, .color_type = (uint8_t)ctype};
    ck_assert_int_eq(spng_set_ihdr(e, &ih), 0);
    ck_assert_int_eq(spng_encode_image(e, px, n, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
    int rc;
    blob b = {0};
    b.p = spng_get_png_buffer(e, &b.n, &rc);
    ck_assert_ptr_nonnull(b.p);
    spng_ctx_free(e);
    return b;
}

/* PNG and lossless WebP: Pillow's L of the picture, then the resize. A gray
 * PNG keeps its levels. Lossy WebP: L of libwebp's RGB. */
START_TEST(png_webp_are_pil_l)
{
    static uint8_t rgb[W * H * 3], g[W * H], dec[W * H * 3];
    picture(rgb);
    pil_l(rgb, g, W * H, 3);
    for (int p = 0; p < 3; p++) {
        blob b = png_of(rgb, sizeof(rgb), SPNG_COLOR_TYPE_TRUECOLOR);
        expect_gray(xf(FEEDER_DECODER_ROI, 0, 40, 30, p), &b, g, W, H, "RGB PNG");
        free(b.p);
        b = png_of(g, sizeof(g), SPNG_COLOR_TYPE_GRAYSCALE);
        expect_gray(xf(FEEDER_DECODER_TURBO, 0, 40, 30, p), &b, g, W, H, "gray PNG");
        free(b.p);
        b.n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &b.p);
        ck_assert_uint_gt(b.n, 0);
        expect_gray(xf(FEEDER_DECODER_ROI, 0, 40, 30, p), &b, g, W, H, "lossless WebP");
        WebPFree(b.p);
    }
    blob b = {0};
    b.n = WebPEncodeRGB(rgb, W, H, W * 3, 80, &b.p);
    ck_assert_uint_gt(b.n, 0);
    ck_assert_ptr_nonnull(WebPDecodeRGBInto(b.p, b.n, dec, sizeof(dec), W * 3));
    uint8_t lg[W * H];
    pil_l(dec, lg, W * H, 3);
    expect_gray(xf(FEEDER_DECODER_ROI, 0, 40, 30, FEEDER_PIPELINE_TRAIN), &b, lg, W, H,
                "lossy WebP");
    WebPFree(b.p);
}
END_TEST

/* Gray PNGs of every bit depth: channels 1 gives channel 0 of the RGB
 * output (libspng's G8 up to 8 bits, RGB8 then L for 16). */
START_TEST(png_gray_depths)
{
    static uint8_t px[W * H * 2], c1[40 * 30], c3[40 * 30 * 3];
    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (uint8_t)(i * 37 + i / 7);
    for (int bits = 1; bits <= 16; bits *= 2) {
        spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
        spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1);
        struct spng_ihdr ih = {.width = W, .height = H, .bit_depth = (uint8_t)bits,
                               .color_type = SPNG_COLOR_TYPE_GRAYSCALE};
        ck_assert_int_eq(spng_set_ihdr(e, &ih), 0);
        size_t rowb = ((size_t)W * bits + 7) / 8;
        ck_assert_int_eq(spng_encode_image(e, px, rowb * H, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE),
                         0);
        int rc;
        blob b = {0};
        b.p = spng_get_png_buffer(e, &b.n, &rc);
        spng_ctx_free(e);
        feeder__transform t = xf(FEEDER_DECODER_ROI, FEEDER_LAYOUT_NCHW, 40, 30,
                                 FEEDER_PIPELINE_TRAIN);
        decode_gray(&t, &b, 2, c1);
        t.channels = 3;
        decode_gray(&t, &b, 2, c3);
        ck_assert_msg(memcmp(c1, c3, sizeof(c1)) == 0, "%d-bit gray PNG", bits);
        int distinct = 0;
        for (size_t i = 1; i < sizeof(c1); i++)
            distinct += c1[i] != c1[0];
        ck_assert_int_gt(distinct, 0);
        free(b.p);
    }
}
END_TEST

START_TEST(unknown_format_gray)
{
    uint8_t gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00;", out[40 * 30];
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    feeder__transform t = xf(FEEDER_DECODER_ROI, 0, 40, 30, FEEDER_PIPELINE_RESIZE);
    char err[256];
    ck_assert_int_eq(feeder__decode_sample(d, &t, gif, sizeof(gif) - 1, 1, 0, 0, out, NULL, err,
                                           sizeof(err)),
                     FEEDER_EDECODE);
    ck_assert_str_eq(err, "not a JPEG, PNG or WebP file (starts 47 49 46 38: GIF)");
    feeder__decoder_destroy(d);
}
END_TEST

/* ---- the option ---- */

START_TEST(option_bounds)
{
    feeder_dataset *ds;
    tu_folder("f", 1, 2);
    ds = tu_open_folder(tu_dir, "f");
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    double v = 0, lo = 0, hi = 0;
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_CHANNELS, &v), 0);
    ck_assert(v == 3.0);
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_CHANNELS, &lo, &hi), 0);
    ck_assert(lo == 1.0 && hi == 3.0);
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_CHANNELS), "channels");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 0), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "channels = 0 is out of range [1, 3]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 4), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "channels = 4 is out of range [1, 3]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 2), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "channels = 2 is not an image format: 1 (grayscale) or 3 (RGB)");
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_CHANNELS, 1.0), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 1), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 3), FEEDER_ESTATE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- the loader ---- */

/* A folder of every format: class 0 JPEGs (colour and gray), class 1 PNGs
 * (RGB and gray), class 2 WebPs, each of a different picture. */
static void mixed_folder(const char *rel)
{
    char path[512];
    static uint8_t rgb[W * H * 3], g[W * H];
    for (int c = 0; c < 3; c++) {
        tu_path(path, sizeof(path), rel);
        mkdir(path, 0755);
        char sub[600];
        snprintf(sub, sizeof(sub), "%s/c%d", path, c);
        mkdir(sub, 0755);
        for (int i = 0; i < 4; i++) {
            picture(rgb);
            for (size_t k = 0; k < sizeof(rgb); k++)
                rgb[k] = (uint8_t)(rgb[k] + (c * 4 + i) * 23 + (k % 7) * i);
            pil_l(rgb, g, W * H, 3);
            blob b;
            const char *ext[] = {"jpg", "png", "webp"};
            if (c == 0)
                b = i % 2 ? jpeg_of(g, TJPF_GRAY, TJSAMP_GRAY, 90)
                          : jpeg_of(rgb, TJPF_RGB, TJSAMP_420, 90);
            else if (c == 1)
                b = i % 2 ? png_of(g, sizeof(g), SPNG_COLOR_TYPE_GRAYSCALE)
                          : png_of(rgb, sizeof(rgb), SPNG_COLOR_TYPE_TRUECOLOR);
            else
                b.n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &b.p);
            char f[700];
            snprintf(f, sizeof(f), "%s/%03d.%s", sub, i, ext[c]);
            ck_assert_int_eq(bu_write_file(f, b.p, b.n), 0);
            free(b.p); /* tjFree, spng's and WebPFree are free() here */
        }
    }
}

typedef struct batches {
    uint32_t n;
    uint8_t *bytes[16];
    size_t len[16];
    int64_t labels[16][8];
    uint64_t idx[16][8];
    uint32_t count[16];
} batches;

static feeder_loader *gray_loader(feeder_dataset *ds, int workers, int layout, int pipeline,
                                  const feeder_augment *aug)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 30), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 40), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 48), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, layout), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, pipeline), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 1), 0);
    if (aug)
        ck_assert_int_eq(feeder_loader_set_augment(ld, aug), 0);
    return ld;
}

static void collect(feeder_loader *ld, batches *out)
{
    memset(out, 0, sizeof(*out));
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_lt(out->n, 16);
        ck_assert_uint_eq(b->channels, 1);
        ck_assert_uint_eq(b->sample_bytes, (size_t)b->height * b->width);
        uint32_t k = out->n++;
        out->len[k] = (size_t)b->count * b->sample_bytes;
        out->bytes[k] = malloc(out->len[k]);
        memcpy(out->bytes[k], b->data, out->len[k]);
        out->count[k] = b->count;
        memcpy(out->labels[k], b->labels, b->count * sizeof(int64_t));
        memcpy(out->idx[k], b->indices, b->count * sizeof(uint64_t));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_msg(rc == FEEDER_DONE, "feeder_next: %d %s", rc, feeder_loader_errmsg(ld));
}

static void batches_free(batches *b)
{
    for (uint32_t i = 0; i < b->n; i++)
        free(b->bytes[i]);
}

static void same_batches(const batches *a, const batches *b, const char *what)
{
    ck_assert_uint_eq(a->n, b->n);
    for (uint32_t i = 0; i < a->n; i++) {
        ck_assert_uint_eq(a->len[i], b->len[i]);
        ck_assert_msg(memcmp(a->bytes[i], b->bytes[i], a->len[i]) == 0, "%s: batch %u differs",
                      what, i);
        ck_assert_int_eq(memcmp(a->labels[i], b->labels[i], a->count[i] * sizeof(int64_t)), 0);
    }
}

static blob read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    blob b = {NULL, (size_t)ftell(f)};
    fseek(f, 0, SEEK_SET);
    b.p = malloc(b.n);
    ck_assert_uint_eq(fread(b.p, 1, b.n, f), b.n);
    fclose(f);
    return b;
}

/* Every worker count and both layouts give the same bytes, and each sample
 * is the decoder's gray sample of its file. */
START_TEST(loader_every_worker_count)
{
    mixed_folder("m");
    feeder_dataset *ds = tu_open_folder(tu_dir, "m");
    for (int p = 0; p < 2; p++) {
        batches ref;
        feeder_loader *ld = gray_loader(ds, 0, FEEDER_LAYOUT_NHWC, p, NULL);
        collect(ld, &ref);
        feeder_loader_destroy(ld);
        ck_assert_uint_eq(ref.n, 3);
        feeder__transform t = xf(FEEDER_DECODER_ROI, 0, 40, 30, p);
        t.resize = 48;
        t.scale_min = 0.08; /* the loader's defaults */
        t.max_pixels = 178956970;
        uint8_t want[40 * 30];
        for (uint32_t bi = 0; bi < ref.n; bi++)
            for (uint32_t k = 0; k < ref.count[bi]; k++) {
                uint64_t idx = ref.idx[bi][k];
                blob f = read_file(feeder_dataset_path(ds, idx));
                feeder__decoder *d;
                ck_assert_int_eq(feeder__decoder_create(&d), 0);
                ck_assert_int_eq(feeder__decode_sample(d, &t, f.p, f.n, 1, 0, idx, want, NULL,
                                                       NULL, 0),
                                 0);
                feeder__decoder_destroy(d);
                free(f.p);
                ck_assert_msg(memcmp(ref.bytes[bi] + (size_t)k * sizeof(want), want,
                                     sizeof(want)) == 0,
                              "pipeline %d, sample %llu", p, (unsigned long long)idx);
                ck_assert_int_eq(ref.labels[bi][k], (int64_t)(idx / 4));
            }
        for (int workers = 0; workers <= 3; workers++)
            for (int layout = 0; layout < 2; layout++) {
                if (workers == 0 && layout == 0)
                    continue;
                batches got;
                ld = gray_loader(ds, workers, layout, p, NULL);
                collect(ld, &got);
                feeder_loader_destroy(ld);
                char what[64];
                snprintf(what, sizeof(what), "pipeline %d, %d workers, layout %d", p, workers,
                         layout);
                same_batches(&ref, &got, what);
                batches_free(&got);
            }
        batches_free(&ref);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* The augment pipeline and the mixes on gray samples: every worker count
 * the same bytes. */
START_TEST(loader_augment_gray)
{
    mixed_folder("m");
    feeder_dataset *ds = tu_open_folder(tu_dir, "m");
    feeder_augment *aug;
    ck_assert_int_eq(feeder_augment_create(&aug), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(aug, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_rotate(aug, 20, FEEDER_INTERP_BILINEAR, 7), 0);
    ck_assert_int_eq(feeder_augment_blur(aug, 5, 0.5, 1.5), 0);
    ck_assert_int_eq(feeder_augment_trivial(aug, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE), 0);
    ck_assert_int_eq(feeder_augment_erase(aug, 0.5, 0.02, 0.3, 0.3, 3.3, -1), 0);
    ck_assert_int_eq(feeder_augment_mixup(aug, 0.4, 0.5), 0);
    ck_assert_int_eq(feeder_augment_cutmix(aug, 1.0, 0.5), 0);
    batches ref, got;
    feeder_loader *ld = gray_loader(ds, 0, FEEDER_LAYOUT_NCHW, FEEDER_PIPELINE_TRAIN, aug);
    collect(ld, &ref);
    feeder_loader_destroy(ld);
    ld = gray_loader(ds, 2, FEEDER_LAYOUT_NHWC, FEEDER_PIPELINE_TRAIN, aug);
    collect(ld, &got);
    feeder_loader_destroy(ld);
    same_batches(&ref, &got, "augmented, 2 workers");
    batches_free(&got);
    /* without the pipeline the bytes differ: the steps ran */
    ld = gray_loader(ds, 1, FEEDER_LAYOUT_NHWC, FEEDER_PIPELINE_TRAIN, NULL);
    collect(ld, &got);
    feeder_loader_destroy(ld);
    ck_assert_int_ne(memcmp(ref.bytes[0], got.bytes[0], ref.len[0]), 0);
    batches_free(&got);
    batches_free(&ref);
    feeder_augment_destroy(aug);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A GPU decoder asked for with gray output keeps it (nvJPEG decodes the Y
 * plane, test_cuda's test_nvjpeg_gray_close_to_cpu); without a device, as
 * for RGB, the workers decode and the reason is the missing GPU path, and
 * the batches are ROI's gray batches byte for byte. */
START_TEST(gpu_decoder_without_device_decodes_on_cpu)
{
    mixed_folder("m");
    feeder_dataset *ds = tu_open_folder(tu_dir, "m");
    feeder_loader *ld = gray_loader(ds, 0, FEEDER_LAYOUT_NHWC, FEEDER_PIPELINE_EVAL, NULL);
    batches ref;
    collect(ld, &ref);
    feeder_loader_destroy(ld);
    ld = gray_loader(ds, 0, FEEDER_LAYOUT_NHWC, FEEDER_PIPELINE_EVAL, NULL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, FEEDER_DECODER_NVJPEG), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why = NULL;
    ck_assert_int_eq(feeder_loader_decoder(ld, &why), FEEDER_DECODER_ROI);
    ck_assert_str_eq(why, "no GPU path: device = -1: host batches");
    batches got;
    collect(ld, &got);
    ck_assert_uint_eq(got.n, 3);
    same_batches(&ref, &got, "NVJPEG without a device");
    batches_free(&got);
    batches_free(&ref);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A user dataset is told the channel count and handed a gray sample's
 * bytes. */
static uint64_t u_len(void *u) { return (void)u, 7; }
static int u_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                 int64_t *label, char *err, size_t errlen)
{
    (void)u, (void)err, (void)errlen;
    if (ctx->channels != 1 || bytes != (size_t)ctx->height * ctx->width)
        return -1;
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(ctx->index * 11 + i);
    *label = (int64_t)ctx->index;
    return 0;
}

START_TEST(user_dataset_gray)
{
    feeder_dataset_callbacks cb = {u_len, u_get, NULL};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    for (int workers = 0; workers < 3; workers += 2) {
        feeder_loader *ld = gray_loader(ds, workers, FEEDER_LAYOUT_NCHW, FEEDER_PIPELINE_EVAL,
                                        NULL);
        batches got;
        collect(ld, &got);
        feeder_loader_destroy(ld);
        ck_assert_uint_eq(got.n, 2);
        for (uint32_t b = 0; b < got.n; b++)
            for (uint32_t k = 0; k < got.count[b]; k++)
                for (size_t i = 0; i < 40 * 30; i++)
                    ck_assert_uint_eq(got.bytes[b][k * 40 * 30 + i],
                                      (uint8_t)(got.idx[b][k] * 11 + i));
        batches_free(&got);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- RAW packs ---- */

static feeder_loader *pack_loader(const char *path, feeder_dataset **ds, int channels,
                                  int workers)
{
    char err[256];
    ck_assert_int_eq(feeder_dataset_open_packed(path, ds, err, sizeof(err)), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(*ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    if (channels)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, channels), 0);
    return ld;
}

START_TEST(raw_pack_channels)
{
    char p1[512], p3[512];
    tu_path(p1, sizeof(p1), "gray.pack");
    tu_path(p3, sizeof(p3), "rgb.pack");
    feeder__pack_header h; /* record i's byte j: i * 7 + j; label i % 4 */
    tu_write_raw_pack_ch(p1, 10, 6, 5, 1, FEEDER__PACK_VERSION, &h);
    tu_write_raw_pack_ch(p3, 10, 6, 5, 3, FEEDER__PACK_VERSION, &h);
    feeder_dataset *ds;
    /* a gray pack is loaded as it is, channels adopted or given */
    for (int given = 0; given < 2; given++)
        for (int workers = 0; workers < 3; workers += 2) {
            feeder_loader *ld = pack_loader(p1, &ds, given ? 1 : 0, workers);
            feeder_batch *b;
            uint64_t seen = 0;
            while (feeder_next(ld, &b) == 0) {
                ck_assert_uint_eq(b->channels, 1);
                ck_assert_uint_eq(b->sample_bytes, 30);
                for (uint32_t k = 0; k < b->count; k++) {
                    uint64_t i = b->indices[k];
                    for (uint32_t j = 0; j < 30; j++)
                        ck_assert_uint_eq(b->data[k * 30 + j], (uint8_t)(i * 7 + j));
                    ck_assert_int_eq(b->labels[k], (int64_t)(i % 4));
                    seen++;
                }
                feeder_batch_release(b, NULL);
            }
            ck_assert_uint_eq(seen, 10);
            feeder_loader_destroy(ld);
            feeder_dataset_destroy(ds);
        }
    /* channels that disagree with the file's fail at start */
    feeder_loader *ld = pack_loader(p3, &ds, 1, 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ESHAPE);
    char want[1024];
    snprintf(want, sizeof(want),
             "%s holds 6x5x3 NHWC records, but the loader was set to height 224, width 224, "
             "channels 1, layout NHWC",
             p3);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    ld = pack_loader(p1, &ds, 3, 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ESHAPE);
    snprintf(want, sizeof(want),
             "%s holds 6x5x1 NHWC records, but the loader was set to height 224, width 224, "
             "channels 3, layout NHWC",
             p1);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

#ifdef FEEDER_PACK_TOOL
/* feeder-pack with args (NULL-terminated); its exit status, its output in
 * out (may be NULL). */
static int pack_tool(const char *const *args, char *out, size_t outlen)
{
    char log[512];
    tu_path(log, sizeof(log), "tool.log");
    const char *argv[32] = {FEEDER_PACK_TOOL};
    int n = 1;
    for (; args[n - 1]; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execv(FEEDER_PACK_TOOL, (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (out) {
        blob b = read_file(log);
        snprintf(out, outlen, "%.*s", (int)b.n, (const char *)b.p);
        free(b.p);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* feeder-pack --channels 1 writes gray RAW records: the loader's gray
 * samples of the folder, read back as they are. */
START_TEST(pack_tool_gray)
{
    mixed_folder("m");
    char data[512], out[512], msg[1024];
    tu_path(data, sizeof(data), "m");
    tu_path(out, sizeof(out), "g.pack");
    const char *ok[] = {"--data", data, "--out", out, "--mode", "raw", "--size", "30x40",
                        "--resize", "48", "--channels", "1", "--workers", "2", "--quiet", NULL};
    ck_assert_int_eq(pack_tool(ok, msg, sizeof(msg)), 0);
    feeder_dataset *folder = tu_open_folder(tu_dir, "m"), *ds;
    batches ref, got;
    feeder_loader *ld = gray_loader(folder, 0, FEEDER_LAYOUT_NHWC, FEEDER_PIPELINE_EVAL, NULL);
    collect(ld, &ref);
    feeder_loader_destroy(ld);
    ld = pack_loader(out, &ds, 0, 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
    collect(ld, &got);
    feeder_loader_destroy(ld);
    same_batches(&ref, &got, "gray pack");
    batches_free(&ref);
    batches_free(&got);
    feeder_dataset_destroy(ds);
    feeder_dataset_destroy(folder);
    const char *two[] = {"--data", data, "--out", out, "--channels", "2", NULL};
    ck_assert_int_eq(pack_tool(two, msg, sizeof(msg)), 2);
    ck_assert_ptr_nonnull(strstr(msg, "--channels 2: expected 3 (RGB) or 1 (grayscale)"));
    const char *jpeg[] = {"--data", data, "--out", out, "--mode", "jpeg", "--channels", "1",
                          NULL};
    ck_assert_int_eq(pack_tool(jpeg, msg, sizeof(msg)), 2);
    ck_assert_ptr_nonnull(strstr(msg, "--channels applies to --mode raw only"));
}
END_TEST
#endif

/* ---- the augment ops on one channel ---- */

#define AW 37
#define AH 29

typedef void (*op_fn)(feeder__aimg im, void *scratch);
static void o_bright(feeder__aimg im, void *s) { (void)s, feeder__aug_brightness(im, 1.3); }
static void o_poster(feeder__aimg im, void *s) { (void)s, feeder__aug_posterize(im, 3); }
static void o_solar(feeder__aimg im, void *s) { (void)s, feeder__aug_solarize(im, 100.5); }
static void o_autoc(feeder__aimg im, void *s) { (void)s, feeder__aug_autocontrast(im); }
static void o_equal(feeder__aimg im, void *s) { (void)s, feeder__aug_equalize(im); }
static void o_sharp(feeder__aimg im, void *s) { feeder__aug_sharpness(im, 1.8, s); }
static void o_blur(feeder__aimg im, void *s) { feeder__aug_gaussian_blur(im, 5, 1.2, s); }
static void o_hflip(feeder__aimg im, void *s) { (void)s, feeder__aug_flip(im, 0); }
static void o_vflip(feeder__aimg im, void *s) { (void)s, feeder__aug_flip(im, 1); }
static void o_rot(feeder__aimg im, void *s)
{
    feeder__aug_rotate(im, 17.0, FEEDER_INTERP_BILINEAR, 40, s);
}
static void o_affine(feeder__aimg im, void *s)
{
    feeder__aug_affine(im, -8, 3, -2, 1.1, 5, -3, NULL, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE,
                       s);
}

/* A gray sample and the NCHW RGB sample whose three planes are it. */
static void gray_pair(uint8_t *g, uint8_t *rgb)
{
    for (int i = 0; i < AW * AH; i++)
        g[i] = (uint8_t)(40 + (i * 37) % 150 + (i % AW) / 3);
    for (int c = 0; c < 3; c++)
        memcpy(rgb + c * AW * AH, g, AW * AH);
}

/* The channel-wise ops give a gray image what they give each channel of
 * the same image as RGB (torchvision's ops on a 1-channel tensor). */
START_TEST(augment_ops_gray)
{
    static const struct {
        op_fn fn;
        const char *name;
    } ops[] = {{o_bright, "brightness"}, {o_poster, "posterize"}, {o_solar, "solarize"},
               {o_autoc, "autocontrast"}, {o_equal, "equalize"}, {o_sharp, "sharpness"},
               {o_blur, "blur"}, {o_hflip, "hflip"}, {o_vflip, "vflip"}, {o_rot, "rotate"},
               {o_affine, "affine"}};
    void *scratch = malloc(feeder__augment_scratch_bytes(AW, AH));
    static uint8_t g[AW * AH], rgb[AW * AH * 3];
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
        gray_pair(g, rgb);
        ops[k].fn(feeder__aimg_make_ch(g, AW, AH, FEEDER_LAYOUT_NHWC, 1), scratch);
        ops[k].fn(feeder__aimg_make(rgb, AW, AH, FEEDER_LAYOUT_NCHW), scratch);
        ck_assert_msg(memcmp(g, rgb, AW * AH) == 0, "%s differs from its RGB plane",
                      ops[k].name);
        gray_pair(rgb, rgb); /* the op changed something: the test can fail */
        ck_assert_msg(memcmp(g, rgb, AW * AH) != 0, "%s left the image as it was", ops[k].name);
    }
    free(scratch);
}
END_TEST

/* Saturation, hue and grayscale leave a gray image as it is; contrast
 * blends with the image's own mean (torchvision's rgb_to_grayscale of one
 * channel is the channel), in float32, truncated. */
START_TEST(augment_color_gray)
{
    static uint8_t g[AW * AH], orig[AW * AH], rgb[AW * AH * 3];
    gray_pair(g, rgb);
    memcpy(orig, g, sizeof(g));
    feeder__aimg im = feeder__aimg_make_ch(g, AW, AH, FEEDER_LAYOUT_NCHW, 1);
    feeder__aug_saturation(im, 0.2);
    feeder__aug_hue(im, 0.3);
    feeder__aug_grayscale(im);
    ck_assert_int_eq(memcmp(g, orig, sizeof(g)), 0);
    feeder__aug_contrast(im, 1.7);
    uint64_t sum = 0;
    for (int i = 0; i < AW * AH; i++)
        sum += orig[i];
    float mean = (float)((double)sum / (AW * AH)), r = 1.7f, q = (float)(1.0 - 1.7);
    for (int i = 0; i < AW * AH; i++) {
        float v = r * (float)orig[i] + q * mean;
        uint8_t want = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
        ck_assert_msg(g[i] == want, "contrast byte %d: %u vs %u", i, g[i], want);
    }
}
END_TEST

/* The public feeder_augment_apply_channels on a gray image: what
 * feeder_augment_apply gives each plane of the NCHW RGB image whose three
 * planes are it, for a pipeline of the channel-wise ops (the draws are the
 * same: they depend on the step, seed, epoch and index only). The colour
 * ops leave it as it is; channels other than 1 and 3 are refused. */
START_TEST(augment_apply_channels_gray)
{
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    feeder_affine af = {10, {0.1, 0.1}, {0.9, 1.1}, {-5, 5, -5, 5}, FEEDER_INTERP_BILINEAR, 30};
    ck_assert_int_eq(feeder_augment_flip(a, 0, 0.5), 0);
    ck_assert_int_eq(feeder_augment_rotate(a, 20, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE), 0);
    ck_assert_int_eq(feeder_augment_affine(a, &af), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0, 0, 0), 0);
    ck_assert_int_eq(feeder_augment_blur(a, 5, 0.1, 2.0), 0);
    ck_assert_int_eq(feeder_augment_erase(a, 0.5, 0.02, 0.33, 0.3, 3.3, 0), 0);
    static uint8_t g[AW * AH], orig[AW * AH], rgb[AW * AH * 3];
    int changed = 0;
    for (uint64_t idx = 0; idx < 20; idx++) {
        gray_pair(g, rgb);
        memcpy(orig, g, sizeof(g));
        ck_assert_int_eq(feeder_augment_apply_channels(a, g, AW, AH, 1, FEEDER_LAYOUT_NHWC, 9, 1,
                                                       idx),
                         0);
        ck_assert_int_eq(feeder_augment_apply(a, rgb, AW, AH, FEEDER_LAYOUT_NCHW, 9, 1, idx), 0);
        for (int c = 0; c < 3; c++)
            ck_assert_msg(memcmp(g, rgb + c * AW * AH, AW * AH) == 0, "index %llu plane %d",
                          (unsigned long long)idx, c);
        changed += memcmp(g, orig, sizeof(g)) != 0;
    }
    ck_assert_int_eq(changed, 20); /* rotate, affine, jitter and blur always run */
    /* The same bytes in either layout (one plane). */
    static uint8_t h[AW * AH];
    gray_pair(g, rgb);
    memcpy(h, g, sizeof(g));
    ck_assert_int_eq(feeder_augment_apply_channels(a, g, AW, AH, 1, FEEDER_LAYOUT_NHWC, 9, 1, 3), 0);
    ck_assert_int_eq(feeder_augment_apply_channels(a, h, AW, AH, 1, FEEDER_LAYOUT_NCHW, 9, 1, 3), 0);
    ck_assert_int_eq(memcmp(g, h, sizeof(g)), 0);
    feeder_augment_destroy(a);
    /* Saturation, hue and grayscale: the image as it was. */
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0, 0, 0.9, 0.4), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 1.0), 0);
    gray_pair(g, rgb);
    memcpy(orig, g, sizeof(g));
    for (uint64_t idx = 0; idx < 5; idx++)
        ck_assert_int_eq(feeder_augment_apply_channels(a, g, AW, AH, 1, FEEDER_LAYOUT_NCHW, 2, 0,
                                                       idx),
                         0);
    ck_assert_int_eq(memcmp(g, orig, sizeof(g)), 0);
    /* ... where the RGB image changes (the test can fail). */
    for (int i = 0; i < AW * AH; i++)
        rgb[3 * i] = (uint8_t)(rgb[3 * i] / 2);
    memcpy(orig, rgb, sizeof(orig));
    ck_assert_int_eq(feeder_augment_apply_channels(a, rgb, AW, AH, 3, FEEDER_LAYOUT_NHWC, 2, 0, 0),
                     0);
    ck_assert_int_ne(memcmp(rgb, orig, sizeof(orig)), 0);
    ck_assert_int_eq(feeder_augment_apply_channels(a, g, AW, AH, 2, FEEDER_LAYOUT_NHWC, 2, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder_augment_apply_channels(a, g, AW, AH, 0, FEEDER_LAYOUT_NHWC, 2, 0, 0),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder_augment_apply_channels(NULL, g, AW, AH, 1, FEEDER_LAYOUT_NHWC, 2, 0, 0),
                     FEEDER_EINVAL);
    feeder_augment_destroy(a);
}
END_TEST

/* Mixup and cutmix of a gray batch: channel 0 of the RGB batch of the same
 * planes. */
START_TEST(augment_mix_gray)
{
    enum { N = 6 };
    static uint8_t g[N * AW * AH], rgb[N * AW * AH * 3], sg[AW * AH * 3], srgb[AW * AH * 3];
    feeder__augment_plan plan;
    for (int which = 0; which < 2; which++) {
        memset(&plan, 0, sizeof(plan));
        if (which)
            plan.cutmix_alpha = 1.0, plan.cutmix_p = 1.0;
        else
            plan.mixup_alpha = 0.5, plan.mixup_p = 1.0;
        for (int i = 0; i < N; i++) {
            gray_pair(g + i * AW * AH, rgb + i * 3 * AW * AH);
            for (int j = 0; j < AW * AH; j++)
                g[i * AW * AH + j] = (uint8_t)(g[i * AW * AH + j] * (i + 1));
            for (int c = 0; c < 3; c++)
                memcpy(rgb + (i * 3 + c) * AW * AH, g + i * AW * AH, AW * AH);
        }
        feeder_mix m1[N], m3[N];
        ck_assert_int_eq(feeder__augment_mix_ch(&plan, g, N, AW, AH, FEEDER_LAYOUT_NHWC, 1, 4, 0,
                                                2, m1, sg),
                         1);
        ck_assert_int_eq(feeder__augment_mix(&plan, rgb, N, AW, AH, FEEDER_LAYOUT_NCHW, 4, 0, 2,
                                             m3, srgb),
                         1);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(memcmp(g + i * AW * AH, rgb + i * 3 * AW * AH, AW * AH) == 0,
                          "mix %d sample %d", which, i);
            ck_assert_uint_eq(m1[i].partner, m3[i].partner);
            ck_assert(m1[i].lambda == m3[i].lambda);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gray");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, resize_gray_matches_rgb);
    tcase_add_test(tc, resize_gray_reference);
    tcase_add_test(tc, jpeg_colour_is_luma);
    tcase_add_test(tc, jpeg_roi_scaled_close);
    tcase_add_test(tc, jpeg_gray_file);
    tcase_add_test(tc, jpeg_cmyk_is_pil_l);
    tcase_add_test(tc, png_webp_are_pil_l);
    tcase_add_test(tc, png_gray_depths);
    tcase_add_test(tc, unknown_format_gray);
    tcase_add_test(tc, augment_ops_gray);
    tcase_add_test(tc, augment_apply_channels_gray);
    tcase_add_test(tc, augment_color_gray);
    tcase_add_test(tc, augment_mix_gray);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("loader");
    tcase_set_timeout(tl, 120);
    tcase_add_checked_fixture(tl, tu_setup, tu_teardown);
    tcase_add_test(tl, option_bounds);
    tcase_add_test(tl, loader_every_worker_count);
    tcase_add_test(tl, loader_augment_gray);
    tcase_add_test(tl, gpu_decoder_without_device_decodes_on_cpu);
    tcase_add_test(tl, raw_pack_channels);
    tcase_add_test(tl, user_dataset_gray);
#ifdef FEEDER_PACK_TOOL
    tcase_add_test(tl, pack_tool_gray);
#endif
    suite_add_tcase(s, tl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
