/* Formats read from their bytes: PNG (every colour type), WebP, JPEG by any
 * name, unknown files, bombs, corrupt files, and the folder dataset's count of
 * the files it left out. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spng.h>
#include <sys/resource.h>
#include <zlib.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include "decode/decode.h"
#include "decode/format.h"
#include "feeder.h"

#define W 64
#define H 48
#define OW 32
#define OH 24

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* A smooth picture with some texture: RGB, W x H. */
static void picture(uint8_t *rgb)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *q = rgb + (y * W + x) * 3;
            q[0] = (uint8_t)(x * 4);
            q[1] = (uint8_t)(y * 5);
            q[2] = (uint8_t)(128 + ((x * y) % 50));
        }
}

static blob png_encode(const void *px, size_t n, int bits, int ctype, const struct spng_plte *pl)
{
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    ck_assert_ptr_nonnull(e);
    spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ih = {.width = W, .height = H, .bit_depth = (uint8_t)bits,
                           .color_type = (uint8_t)ctype};
    ck_assert_int_eq(spng_set_ihdr(e, &ih), 0);
    if (pl)
        ck_assert_int_eq(spng_set_plte(e, (struct spng_plte *)pl), 0);
    int rc = spng_encode_image(e, px, n, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    ck_assert_msg(rc == 0, "spng_encode_image: %s", spng_strerror(rc));
    blob b = {0};
    b.p = spng_get_png_buffer(e, &b.n, &rc);
    ck_assert_ptr_nonnull(b.p);
    spng_ctx_free(e);
    return b;
}

static feeder__transform xf(void)
{
    return (feeder__transform){.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                               .layout = FEEDER_LAYOUT_NHWC, .height = OH, .width = OW,
                               .max_pixels = 1u << 20};
}

static int decode(const blob *b, uint8_t *out, char *err)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    feeder__transform t = xf();
    int rc = feeder__decode_sample(d, &t, b->p, b->n, 1, 0, 0, out, NULL, err, 256);
    feeder__decoder_destroy(d);
    return rc;
}

static void decode_ok(const blob *b, uint8_t *out)
{
    char err[256];
    int rc = decode(b, out, err);
    ck_assert_msg(rc == 0, "decode: %d %s", rc, err);
}

/* Sample of an 8-bit RGB PNG of these pixels: what every variant must match. */
static void reference(const uint8_t *rgb, uint8_t *out)
{
    blob b = png_encode(rgb, W * H * 3, 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL);
    decode_ok(&b, out);
    free(b.p);
}

static void expect_same(const blob *b, const uint8_t *ref, const char *what)
{
    uint8_t out[OW * OH * 3];
    decode_ok(b, out);
    ck_assert_msg(memcmp(out, ref, sizeof(out)) == 0, "%s differs from the RGB8 PNG", what);
}

START_TEST(png_variants)
{
    static uint8_t rgb[W * H * 3], rgba[W * H * 4], rgb16[W * H * 6], ref[OW * OH * 3];
    picture(rgb);
    reference(rgb, ref);
    for (int i = 0; i < W * H; i++) {
        memcpy(rgba + 4 * i, rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)(i * 7); /* dropped, never composited */
        for (int c = 0; c < 3; c++) /* v * 257: the same bytes in either endianness */
            rgb16[6 * i + 2 * c] = rgb16[6 * i + 2 * c + 1] = rgb[3 * i + c];
    }
    blob b = png_encode(rgba, sizeof(rgba), 8, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, NULL);
    expect_same(&b, ref, "RGBA8");
    free(b.p);
    b = png_encode(rgb16, sizeof(rgb16), 16, SPNG_COLOR_TYPE_TRUECOLOR, NULL);
    expect_same(&b, ref, "RGB16");
    free(b.p);
}
END_TEST

START_TEST(png_gray_and_palette)
{
    static uint8_t g[W * H], ga[W * H * 2], g16[W * H * 2], idx[W * H], rgb[W * H * 3],
        ref[OW * OH * 3];
    struct spng_plte pl = {.n_entries = 256};
    for (int i = 0; i < 256; i++)
        pl.entries[i] = (struct spng_plte_entry){(uint8_t)i, (uint8_t)(255 - i),
                                                 (uint8_t)(i * 3), 255};
    for (int i = 0; i < W * H; i++) {
        g[i] = (uint8_t)((i % W) * 3 + (i / W));
        ga[2 * i] = g[i];
        ga[2 * i + 1] = (uint8_t)i;
        g16[2 * i] = g16[2 * i + 1] = g[i];
        memset(rgb + 3 * i, g[i], 3);
    }
    reference(rgb, ref);
    blob b = png_encode(g, sizeof(g), 8, SPNG_COLOR_TYPE_GRAYSCALE, NULL);
    expect_same(&b, ref, "gray8");
    free(b.p);
    b = png_encode(ga, sizeof(ga), 8, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, NULL);
    expect_same(&b, ref, "gray+alpha");
    free(b.p);
    b = png_encode(g16, sizeof(g16), 16, SPNG_COLOR_TYPE_GRAYSCALE, NULL);
    expect_same(&b, ref, "gray16");
    free(b.p);
    for (int i = 0; i < W * H; i++) {
        idx[i] = g[i];
        struct spng_plte_entry e = pl.entries[g[i]];
        rgb[3 * i] = e.red, rgb[3 * i + 1] = e.green, rgb[3 * i + 2] = e.blue;
    }
    reference(rgb, ref);
    b = png_encode(idx, sizeof(idx), 8, SPNG_COLOR_TYPE_INDEXED, &pl);
    expect_same(&b, ref, "palette");
    free(b.p);
}
END_TEST

START_TEST(webp_and_jpeg_match_png)
{
    static uint8_t rgb[W * H * 3], ref[OW * OH * 3], out[OW * OH * 3];
    picture(rgb);
    reference(rgb, ref);
    blob b = {0};
    b.n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &b.p);
    ck_assert_uint_gt(b.n, 0);
    expect_same(&b, ref, "lossless WebP");
    WebPFree(b.p);
    b.n = WebPEncodeRGB(rgb, W, H, W * 3, 90, &b.p);
    ck_assert_uint_gt(b.n, 0);
    decode_ok(&b, out);
    int maxd = 0;
    for (size_t i = 0; i < sizeof(out); i++)
        maxd = abs(out[i] - ref[i]) > maxd ? abs(out[i] - ref[i]) : maxd;
    ck_assert_msg(maxd <= 40, "lossy WebP off by %d", maxd);
    WebPFree(b.p);
    tjhandle tj = tjInitCompress();
    unsigned long jn = 0;
    uint8_t *jp = NULL;
    ck_assert_int_eq(tjCompress2(tj, rgb, W, W * 3, H, TJPF_RGB, &jp, &jn, TJSAMP_444, 95, 0), 0);
    b = (blob){jp, jn};
    decode_ok(&b, out);
    maxd = 0;
    for (size_t i = 0; i < sizeof(out); i++)
        maxd = abs(out[i] - ref[i]) > maxd ? abs(out[i] - ref[i]) : maxd;
    ck_assert_msg(maxd <= 16, "JPEG q95 off by %d", maxd);
    tjFree(jp);
    tjDestroy(tj);
}
END_TEST

START_TEST(unknown_format)
{
    uint8_t gif[] = "GIF89a\x01\x00\x01\x00\x00\x00\x00;";
    blob b = {gif, sizeof(gif) - 1};
    uint8_t out[OW * OH * 3];
    char err[256];
    ck_assert_int_eq(decode(&b, out, err), FEEDER_EDECODE);
    ck_assert_str_eq(err, "not a JPEG, PNG or WebP file (starts 47 49 46 38: GIF)");
}
END_TEST

/* CRC of a PNG chunk's type and data. */
static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

START_TEST(png_huge_ihdr)
{
    /* Signature and an IHDR of 100000 x 100000 RGB, nothing else. */
    uint8_t f[8 + 25] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    put32(f + 8, 13);
    memcpy(f + 12, "IHDR", 4);
    put32(f + 16, 100000);
    put32(f + 20, 100000);
    f[24] = 8, f[25] = 2;
    put32(f + 29, crc32_png(f + 12, 17));
    blob b = {f, sizeof(f)};
    uint8_t out[OW * OH * 3];
    char err[256];
    int rc = decode(&b, out, err);
    /* libspng's own image limit (set to max_pixels per side) or our pixel
     * check: both refuse it from the header. */
    ck_assert_msg(rc == FEEDER_ETOOBIG || (rc == FEEDER_EDECODE && strstr(err, "limit")),
                  "rc %d: %s", rc, err);
}
END_TEST

START_TEST(png_corrupt)
{
    static uint8_t rgb[W * H * 3];
    picture(rgb);
    blob good = png_encode(rgb, sizeof(rgb), 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL);
    uint8_t out[OW * OH * 3];
    char err[256];
    /* Corrupt: flip a byte inside the IDAT data (CRC check fails). */
    blob bad = {malloc(good.n), good.n};
    memcpy(bad.p, good.p, good.n);
    bad.p[good.n - 20] ^= 0x55;
    ck_assert_int_eq(decode(&bad, out, err), FEEDER_EDECODE);
    ck_assert_msg(strstr(err, "PNG: ") != NULL, "%s", err);
    /* Truncated anywhere before IEND (the last 12 bytes, which libspng does
     * not need once the image is whole): never a crash, always an error. */
    for (size_t n = 1; n < good.n - 12; n += 7) {
        blob t = {good.p, n};
        int rc = decode(&t, out, err);
        ck_assert_msg(rc == FEEDER_EDECODE && err[0], "cut at %zu: rc %d", n, rc);
    }
    free(bad.p);
    free(good.p);
}
END_TEST

/* `n` zero bytes deflated as a zlib stream (about n / 1000 bytes). */
static blob zeros_deflated(size_t n)
{
    static uint8_t zero[1 << 16];
    z_stream z = {0};
    ck_assert_int_eq(deflateInit(&z, 9), Z_OK);
    blob b = {malloc(n / 500 + 4096), 0};
    size_t cap = n / 500 + 4096;
    z.next_out = b.p;
    z.avail_out = (uInt)cap;
    for (size_t left = n; ; ) {
        size_t k = left < sizeof(zero) ? left : sizeof(zero);
        z.next_in = zero;
        z.avail_in = (uInt)k;
        left -= k;
        int rc = deflate(&z, left ? Z_NO_FLUSH : Z_FINISH);
        if (!left && rc == Z_STREAM_END)
            break;
        ck_assert(z.avail_out > 0);
    }
    b.n = cap - z.avail_out;
    deflateEnd(&z);
    return b;
}

static size_t put_chunk(uint8_t *at, const char *type, const uint8_t *data, size_t n)
{
    put32(at, (uint32_t)n);
    memcpy(at + 4, type, 4);
    if (n)
        memcpy(at + 8, data, n);
    put32(at + 8 + n, crc32_png(at + 4, n + 4));
    return n + 12;
}

/* A 64x48 gray PNG whose one chunk `type` holds (prefix, then) a deflate
 * stream of 512 MiB of zeros. */
static blob bomb_png(const char *type, const uint8_t *prefix, size_t plen)
{
    blob z = zeros_deflated((size_t)512 << 20);
    blob b = {malloc(z.n + plen + 256), 0};
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    memcpy(b.p, sig, 8);
    b.n = 8;
    uint8_t ih[13] = {0};
    put32(ih, W);
    put32(ih + 4, H);
    ih[8] = 8; /* 8-bit gray */
    b.n += put_chunk(b.p + b.n, "IHDR", ih, 13);
    uint8_t *data = malloc(plen + z.n);
    if (plen)
        memcpy(data, prefix, plen);
    memcpy(data + plen, z.p, z.n);
    b.n += put_chunk(b.p + b.n, type, data, plen + z.n);
    if (strcmp(type, "IDAT") != 0) {
        blob img = zeros_deflated((size_t)(W + 1) * H);
        b.n += put_chunk(b.p + b.n, "IDAT", img.p, img.n);
        free(img.p);
    }
    b.n += put_chunk(b.p + b.n, "IEND", NULL, 0);
    free(data);
    free(z.p);
    return b;
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

START_TEST(png_zlib_bomb)
{
    /* Small files that inflate to 512 MiB: in IDAT (libspng inflates only as
     * far as the image needs) and in zTXt and iCCP (the chunk limits). Each
     * decodes or fails with a PNG error, and memory stays bounded. */
    static const uint8_t ztxt[] = "Comment\0\0", iccp[] = "icc\0\0";
    struct {
        const char *type;
        const uint8_t *prefix;
        size_t plen;
    } cases[] = {{"IDAT", NULL, 0}, {"zTXt", ztxt, 9}, {"iCCP", iccp, 5}};
    for (size_t i = 0; i < 3; i++) {
        blob b = bomb_png(cases[i].type, cases[i].prefix, cases[i].plen);
        long before = maxrss_kb();
        uint8_t out[OW * OH * 3];
        char err[256] = "";
        int rc = decode(&b, out, err);
        ck_assert_msg(rc == 0 || (rc == FEEDER_EDECODE && strstr(err, "PNG: ")),
                      "%s bomb (%zu bytes): rc %d %s", cases[i].type, b.n, rc, err);
        ck_assert_msg(maxrss_kb() - before < 64 * 1024, "%s bomb grew memory by %ld KiB",
                      cases[i].type, maxrss_kb() - before);
        free(b.p);
    }
}
END_TEST

START_TEST(webp_corrupt)
{
    static uint8_t rgb[W * H * 3];
    picture(rgb);
    blob b = {0};
    b.n = WebPEncodeRGB(rgb, W, H, W * 3, 80, &b.p);
    uint8_t out[OW * OH * 3];
    char err[256];
    blob t = {b.p, b.n / 2};
    ck_assert_int_eq(decode(&t, out, err), FEEDER_EDECODE);
    ck_assert_msg(strstr(err, "WebP: ") && strstr(err, "VP8_STATUS"), "%s", err);
    WebPFree(b.p);
}
END_TEST

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

START_TEST(folder_mixed_formats)
{
    char root[] = "/tmp/feeder-formats-XXXXXX", p[512];
    ck_assert_ptr_nonnull(mkdtemp(root));
    static uint8_t rgb[W * H * 3];
    picture(rgb);
    blob png = png_encode(rgb, sizeof(rgb), 8, SPNG_COLOR_TYPE_TRUECOLOR, NULL);
    blob webp = {0};
    webp.n = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &webp.p);
    tjhandle tj = tjInitCompress();
    unsigned long jn = 0;
    uint8_t *jp = NULL;
    ck_assert_int_eq(tjCompress2(tj, rgb, W, W * 3, H, TJPF_RGB, &jp, &jn, TJSAMP_420, 90, 0), 0);
    const char *cls[] = {"a", "b"};
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof(p), "%s/%s", root, cls[c]);
        mkdir(p, 0755);
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof(p), "%s/%s/j%d.png", root, cls[c], i); /* a JPEG named .png */
            write_file(p, jp, jn);
            snprintf(p, sizeof(p), "%s/%s/p%d.PNG", root, cls[c], i);
            write_file(p, png.p, png.n);
            snprintf(p, sizeof(p), "%s/%s/w%d.webp", root, cls[c], i);
            write_file(p, webp.p, webp.n);
        }
        snprintf(p, sizeof(p), "%s/%s/notes.txt", root, cls[c]);
        write_file(p, "x", 1);
    }
    snprintf(p, sizeof(p), "%s/a/anim.gif", root);
    write_file(p, "GIF89a", 6);
    feeder_dataset *ds;
    char err[256];
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 18);
    uint64_t nskip = 0;
    char sum[128];
    ck_assert_int_eq(feeder_dataset_skipped(ds, &nskip, sum, sizeof(sum)), 0);
    ck_assert_uint_eq(nskip, 3);
    ck_assert_str_eq(sum, "3 files left out: 2 .txt, 1 .gif");

    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, OH), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, OW), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, OW), 0);
    uint64_t seen = 0, per[2] = {0, 0};
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t i = 0; i < b->count; i++) {
            ck_assert_int_eq(b->labels[i], feeder_dataset_label(ds, b->indices[i]));
            per[b->labels[i]]++;
        }
        seen += b->count;
        feeder_batch_release(b, NULL);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    ck_assert_uint_eq(seen, 18);
    ck_assert_uint_eq(per[0], 9);
    ck_assert_uint_eq(per[1], 9);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    tjFree(jp);
    tjDestroy(tj);
    free(png.p);
    WebPFree(webp.p);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("formats");
    TCase *tc = tcase_create("formats");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, png_variants);
    tcase_add_test(tc, png_gray_and_palette);
    tcase_add_test(tc, webp_and_jpeg_match_png);
    tcase_add_test(tc, unknown_format);
    tcase_add_test(tc, png_huge_ihdr);
    tcase_add_test(tc, png_corrupt);
    tcase_add_test(tc, png_zlib_bomb);
    tcase_add_test(tc, webp_corrupt);
    tcase_add_test(tc, folder_mixed_formats);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
