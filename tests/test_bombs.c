/*
 * Image bombs: small files that say huge images. A lossless WebP of one
 * colour (34 bytes, every pixel coded in no bits), PNGs of 178956970 x 1
 * and 16384 x 10922 pixels (a few hundred KB of deflated zeros) and a
 * progressive JPEG of 12000 x 12000 (a few hundred bytes), each under the
 * pixel limit, loaded by one worker: the batch fails with the exact
 * message (SKIP replaces the sample), the worker's peak RSS stays small, and
 * the next epoch arrives whole. A worker that met a large image it may
 * decode gives the memory back. The WebP decoder's reduced-scale decode is
 * checked against the whole decode. Check forks each test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <turbojpeg.h>
#include <webp/encode.h>
#include <zlib.h>

#include "benchutil.h"
#include "decode/decode.h"
#include "feeder.h"
#include "testutil.h"

static void write_file(const char *rel, const void *p, size_t n)
{
    char path[512];
    tu_path(path, sizeof(path), rel);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* LSB-first bit writer, as VP8L reads. */
typedef struct bits {
    uint8_t *p;
    size_t bit;
} bits;

static void put_bits(bits *b, uint32_t v, int n)
{
    for (int i = 0; i < n; i++, b->bit++)
        if (v >> i & 1)
            b->p[b->bit / 8] |= (uint8_t)(1u << (b->bit % 8));
}

/* A lossless WebP of w x h pixels of one colour: no transform, no colour
 * cache, five prefix codes of one symbol each, so the pixels take no bits
 * at all and the file is the same size whatever w and h say. Returns its
 * length (into f, 64 bytes). */
static size_t vp8l_one_colour(uint8_t *f, uint32_t w, uint32_t h, uint8_t r, uint8_t g,
                              uint8_t b)
{
    memset(f, 0, 64);
    uint8_t *d = f + 20;
    d[0] = 0x2f;
    bits bw = {d + 1, 0};
    put_bits(&bw, w - 1, 14);
    put_bits(&bw, h - 1, 14);
    put_bits(&bw, 0, 1); /* alpha unused */
    put_bits(&bw, 0, 3); /* version */
    put_bits(&bw, 0, 1); /* no transform */
    put_bits(&bw, 0, 1); /* no colour cache */
    put_bits(&bw, 0, 1); /* no meta prefix codes */
    const uint32_t sym[5] = {g, r, b, 255, 0}; /* green, red, blue, alpha, distance */
    for (int i = 0; i < 5; i++) {
        put_bits(&bw, 1, 1); /* simple code */
        put_bits(&bw, 0, 1); /* one symbol */
        put_bits(&bw, 1, 1); /* of 8 bits */
        put_bits(&bw, sym[i], 8);
    }
    size_t n = 1 + (bw.bit + 7) / 8, padded = n + (n & 1);
    memcpy(f, "RIFF", 4);
    uint32_t riff = (uint32_t)(4 + 8 + padded);
    memcpy(f + 4, &riff, 4);
    memcpy(f + 8, "WEBPVP8L", 8);
    uint32_t cl = (uint32_t)n;
    memcpy(f + 16, &cl, 4);
    return 20 + padded;
}

static void put32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static void chunk(FILE *f, const char *type, const uint8_t *d, uint32_t n)
{
    uint8_t h[8];
    put32be(h, n);
    memcpy(h + 4, type, 4);
    uint32_t crc = (uint32_t)crc32(crc32(0, (const Bytef *)type, 4), d, n);
    uint8_t c[4];
    put32be(c, crc);
    ck_assert_uint_eq(fwrite(h, 1, 8, f), 8);
    if (n)
        ck_assert_uint_eq(fwrite(d, 1, n, f), n);
    ck_assert_uint_eq(fwrite(c, 1, 4, f), 4);
}

/* An 8-bit grey PNG of w x h pixels of level `v`, its rows deflated as they
 * are made (1 MiB at a time), so the test never holds the image. */
static void png_gray(const char *rel, uint32_t w, uint32_t h, uint8_t v)
{
    char path[512];
    tu_path(path, sizeof(path), rel);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    ck_assert_uint_eq(fwrite(sig, 1, 8, f), 8);
    uint8_t ihdr[13] = {0};
    put32be(ihdr, w);
    put32be(ihdr + 4, h);
    ihdr[8] = 8; /* depth; colour type 0, grey */
    chunk(f, "IHDR", ihdr, 13);
    z_stream z;
    memset(&z, 0, sizeof(z));
    ck_assert_int_eq(deflateInit(&z, 6), Z_OK);
    enum { IN = 1 << 20, OUT = 1 << 18 };
    uint8_t *in = malloc(IN), *out = malloc(OUT);
    uint64_t left = ((uint64_t)w + 1) * h, pos = 0; /* a filter byte (0) before each row */
    while (left) {
        size_t n = left < IN ? (size_t)left : IN;
        for (size_t i = 0; i < n; i++)
            in[i] = (pos + i) % ((uint64_t)w + 1) == 0 ? 0 : v;
        pos += n;
        left -= n;
        z.next_in = in;
        z.avail_in = (uInt)n;
        do {
            z.next_out = out;
            z.avail_out = OUT;
            int rc = deflate(&z, left ? Z_NO_FLUSH : Z_FINISH);
            ck_assert(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR);
            if (OUT - z.avail_out)
                chunk(f, "IDAT", out, (uint32_t)(OUT - z.avail_out));
        } while (z.avail_out == 0);
    }
    deflateEnd(&z);
    chunk(f, "IEND", NULL, 0);
    free(in);
    free(out);
    ck_assert_int_eq(fclose(f), 0);
}

/* A field of /proc/PID/status, in kB. */
static long status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            v = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    ck_assert_int_ge(v, 0);
    return v;
}

/* The hand-made stream is what it says: a 5 x 3 image of (200, 100, 50). */
START_TEST(test_one_colour_webp_decodes)
{
    uint8_t f[64], out[5 * 3 * 3];
    size_t n = vp8l_one_colour(f, 5, 3, 200, 100, 50);
    ck_assert_uint_le(n, 34);
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                           .layout = FEEDER_LAYOUT_NHWC, .height = 3, .width = 5};
    char err[512];
    ck_assert_int_eq(feeder__decode_sample(d, &t, f, n, 1, 0, 0, out, NULL, err, sizeof(err)),
                     0);
    for (int i = 0; i < 15; i++) {
        ck_assert_uint_eq(out[3 * i], 200);
        ck_assert_uint_eq(out[3 * i + 1], 100);
        ck_assert_uint_eq(out[3 * i + 2], 50);
    }
    feeder__decoder_destroy(d);
}
END_TEST

typedef struct bomb {
    const char *name; /* in d/c0, after the four JPEGs 000..003 */
    const char *text; /* the message after the path */
} bomb;

/* A progressive JPEG whose frame header says w x h: a 16 x 16 image coded
 * with its SOF2 sizes rewritten. libjpeg would allocate (and zero) the
 * coefficients of the whole image before reading a row. */
static void progressive_jpeg(const char *rel, uint16_t w, uint16_t h)
{
    uint8_t px[16 * 16 * 3];
    for (int i = 0; i < 16 * 16 * 3; i++)
        px[i] = (uint8_t)(i * 7);
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long n = 0;
    ck_assert_int_eq(tjCompress2(tj, px, 16, 0, 16, TJPF_RGB, &out, &n, TJSAMP_420, 90,
                                 TJFLAG_PROGRESSIVE),
                     0);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n && !sof; i++)
        if (out[i] == 0xff && out[i + 1] == 0xc2)
            sof = i;
    ck_assert_uint_gt(sof, 0);
    out[sof + 5] = (uint8_t)(h >> 8), out[sof + 6] = (uint8_t)h;
    out[sof + 7] = (uint8_t)(w >> 8), out[sof + 8] = (uint8_t)w;
    write_file(rel, out, n);
    tjFree(out);
    tjDestroy(tj);
}

static void make_bomb(int which, const char *rel)
{
    if (which == 3) {
        progressive_jpeg(rel, 12000, 12000);
    } else if (which == 0) {
        uint8_t f[64];
        size_t n = vp8l_one_colour(f, 16383, 10923, 10, 20, 30);
        write_file(rel, f, n);
    } else if (which == 1) {
        png_gray(rel, 178956970, 1, 7);
    } else {
        png_gray(rel, 16384, 10922, 7);
    }
}

static const bomb bombs[4] = {
    {"zz.webp", "WebP: image is 16383x10923: decoding it takes 716948880 bytes (lossless: "
                "libwebp's ARGB copy of the whole image and the RGB output, at the reduced "
                "scale the crop allows), over the limit of 268435456 "
                "(FEEDER_OPT_MAX_DECODE_BYTES raises it)"},
    {"zz.png", "image is 178956970x1, over the limit of 65535 pixels a side "
               "(FEEDER_OPT_MAX_SIDE raises it)"},
    {"zz.png", "image is 16384x10922: decoding it takes 536870914 bytes (the decoded pixels "
               "and two rows of the file's samples), over the limit of 268435456 "
               "(FEEDER_OPT_MAX_DECODE_BYTES raises it)"},
    /* 1500 x 1500 luma blocks and 2 x 750 x 750 chroma blocks of 128 bytes. */
    {"zz.jpg", "image is 12000x12000: decoding it takes 432000000 bytes (a progressive or "
               "multi-scan JPEG's coefficients, kept for the whole image), over the limit of "
               "268435456 (FEEDER_OPT_MAX_DECODE_BYTES raises it)"},
};

static feeder_loader *one_worker(feeder_dataset *ds, int policy)
{
    feeder_loader *ld = tu_small_loader(ds, 1, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, policy), 0);
    return ld;
}

/* Four JPEGs and the bomb (sample 4, alone in batch 2), one persistent
 * worker, two epochs. FAIL: batch 2 fails with the message each epoch, and
 * batches 0 and 1 arrive byte-equal in both; SKIP: batch 2 holds sample 0 in
 * the bomb's place. The worker lives on, its peak RSS under 200 MB. */
START_TEST(test_bombs_refused_worker_small)
{
    int which = _i;
    tu_folder("d", 1, 4);
    char rel[64], path[512], want[1024];
    snprintf(rel, sizeof(rel), "d/c0/%s", bombs[which].name);
    make_bomb(which, rel);
    tu_path(path, sizeof(path), rel);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    ck_assert_uint_eq(feeder_dataset_size(ds), 5);
    for (int policy = FEEDER_ON_ERROR_FAIL; policy <= FEEDER_ON_ERROR_SKIP; policy++) {
        feeder_loader *ld = one_worker(ds, policy);
        ck_assert_int_eq(feeder_loader_start(ld), 0);
        pid_t pid = feeder_loader_worker_pid(ld, 0);
        ck_assert_int_gt(pid, 0);
        size_t bytes = 32 * 32 * 3 * 2;
        uint8_t *first[2] = {malloc(bytes), malloc(bytes)};
        for (int epoch = 0; epoch < 2; epoch++) {
            feeder_batch *b;
            for (int k = 0; k < 2; k++) {
                ck_assert_int_eq(feeder_next(ld, &b), 0);
                ck_assert_uint_eq(b->epoch, (uint64_t)epoch);
                ck_assert_uint_eq(b->number, (uint64_t)k);
                if (epoch == 0)
                    memcpy(first[k], b->data, bytes);
                else
                    ck_assert_int_eq(memcmp(first[k], b->data, bytes), 0);
                feeder_batch_release(b, NULL);
            }
            int rc = feeder_next(ld, &b);
            long hwm = status_kb(pid, "VmHWM");
            printf("bomb %s (%s): worker peak RSS %ld kB\n", bombs[which].name,
                   policy ? "skip" : "fail", hwm);
            fflush(stdout);
            if (policy == FEEDER_ON_ERROR_FAIL) {
                ck_assert_int_eq(rc, FEEDER_ETOOBIG);
                snprintf(want, sizeof(want), "batch 2 of epoch %d: sample 4 (%s): %s", epoch,
                         path, bombs[which].text);
                ck_assert_str_eq(feeder_loader_errmsg(ld), want);
            } else {
                ck_assert_int_eq(rc, 0);
                ck_assert_uint_eq(b->count, 1);
                ck_assert_uint_eq(b->indices[0], 0);
                ck_assert_int_eq(memcmp(first[0], b->data, 32 * 32 * 3), 0);
                feeder_batch_release(b, NULL);
            }
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
            ck_assert_int_eq(feeder_loader_worker_pid(ld, 0), pid);
            ck_assert_int_lt(hwm, 200 * 1024);
        }
        free(first[0]);
        free(first[1]);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* A 6000 x 6000 PNG (108 MB decoded, under the limits) as the last of five
 * samples, batches of one, one persistent worker: once its batch arrives the
 * worker has let the decode's memory go: its RSS is within 24 MB of what it
 * was before that image, though its peak shows the image was decoded. */
START_TEST(test_large_image_memory_returned)
{
    tu_folder("d", 1, 4);
    png_gray("d/c0/big.png", 6000, 6000, 99);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    feeder_loader *ld = tu_small_loader(ds, 1, 1);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 1), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    pid_t pid = feeder_loader_worker_pid(ld, 0);
    long before = 0;
    for (int k = 0; k < 5; k++) {
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->indices[0], (uint64_t)k);
        if (k == 4)
            for (int i = 0; i < 32 * 32 * 3; i++)
                ck_assert_uint_eq(b->data[i], 99);
        feeder_batch_release(b, NULL);
        if (k == 3)
            before = status_kb(pid, "VmRSS");
    }
    long after = status_kb(pid, "VmRSS"), hwm = status_kb(pid, "VmHWM");
    printf("large image: worker RSS %ld kB before, %ld kB after, peak %ld kB\n", before, after,
           hwm);
    ck_assert_int_gt(hwm, before + 100 * 1024);
    ck_assert_int_lt(after, before + 24 * 1024);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A whole progressive JPEG of 6000 x 6000 of one colour (a few hundred KB:
 * its scans code every block, in few bits), the last of five samples, one
 * worker, under a 64 MiB decode limit: its 108,000,000 bytes of
 * coefficients are refused from the header, for both CPU decoders, and the
 * worker never touches them (peak RSS under 64 MB; without the check the
 * decode fills them and the worker's peak passes 120 MB). */
START_TEST(test_progressive_coefficients_bounded)
{
    int decoder = _i ? FEEDER_DECODER_TURBO : FEEDER_DECODER_ROI;
    tu_folder("d", 1, 4);
    enum { S = 6000 };
    uint8_t *px = malloc((size_t)S * S * 3);
    memset(px, 120, (size_t)S * S * 3);
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long n = 0;
    ck_assert_int_eq(tjCompress2(tj, px, S, 0, S, TJPF_RGB, &out, &n, TJSAMP_420, 90,
                                 TJFLAG_PROGRESSIVE),
                     0);
    free(px);
    write_file("d/c0/zz.jpg", out, n);
    tjFree(out);
    tjDestroy(tj);
    char path[512], want[1024];
    tu_path(path, sizeof(path), "d/c0/zz.jpg");
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    feeder_loader *ld = one_worker(ds, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, decoder), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_DECODE_BYTES, 64 << 20), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    pid_t pid = feeder_loader_worker_pid(ld, 0);
    feeder_batch *b;
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ETOOBIG);
    long hwm = status_kb(pid, "VmHWM");
    printf("progressive %ux%u (%lu bytes, %s): worker peak RSS %ld kB\n", S, S, n,
           _i ? "turbo" : "roi", hwm);
    snprintf(want, sizeof(want),
             "batch 2 of epoch 0: sample 4 (%s): image is 6000x6000: decoding it takes %s "
             "bytes (%s), over the limit of 67108864 (FEEDER_OPT_MAX_DECODE_BYTES raises it)",
             path, _i ? "252000000" : "108000000",
             _i ? "the whole decoded image, and a progressive or multi-scan JPEG's "
                  "coefficients, kept for the whole image"
                : "a progressive or multi-scan JPEG's coefficients, kept for the whole image");
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    ck_assert_int_lt(hwm, 64 * 1024);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A photo as a lossy WebP of w x h. */
static uint8_t *photo_webp(unsigned photo, uint32_t w, uint32_t h, size_t *len)
{
    uint8_t *j;
    size_t jn;
    ck_assert_int_eq(bu_make_jpeg(tu_photos, photo, w, h, 95, -1, photo, &j, &jn), 0);
    uint8_t *rgb = malloc((size_t)w * h * 3);
    tjhandle tj = tjInitDecompress();
    ck_assert_int_eq(tjDecompress2(tj, j, (unsigned long)jn, rgb, (int)w, 0, (int)h, TJPF_RGB, 0),
                     0);
    tjDestroy(tj);
    free(j);
    uint8_t *wp = NULL;
    *len = WebPEncodeRGB(rgb, (int)w, (int)h, (int)w * 3, 90, &wp);
    ck_assert_uint_gt(*len, 0);
    free(rgb);
    uint8_t *out = malloc(*len);
    memcpy(out, wp, *len);
    WebPFree(wp);
    return out;
}

/*
 * The reduced-scale WebP decode against the whole decode, per output image
 * (224 x 224): mean abs diff <= 2.0 and max <= 64, the JPEG decoder's DCT
 * scaling's bounds (test_decode's roi_vs_turbo). The limit is set under the
 * whole decode's size, so every decode here that succeeds went through the
 * reduced scale (a whole decode would be refused). The worst are printed.
 */
START_TEST(test_webp_scaled_matches_whole)
{
    static const struct {
        uint32_t w, h;
    } sizes[] = {{2000, 1500}, {1500, 2000}, {1601, 1203}};
    static const int pipelines[] = {FEEDER_PIPELINE_EVAL, FEEDER_PIPELINE_TRAIN,
                                    FEEDER_PIPELINE_RESIZE};
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    size_t n = 224 * 224 * 3;
    uint8_t *a = malloc(n), *b = malloc(n);
    double worst_mean = 0;
    int worst_max = 0, count = 0;
    char err[512];
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t len;
        uint8_t *wp = photo_webp((unsigned)si, sizes[si].w, sizes[si].h, &len);
        for (int pi = 0; pi < 3; pi++)
            for (uint64_t idx = 0; idx < (pipelines[pi] == FEEDER_PIPELINE_TRAIN ? 4u : 1u);
                 idx++) {
                feeder__transform t = {.pipeline = pipelines[pi],
                                       .decoder = FEEDER_DECODER_TURBO,
                                       .layout = FEEDER_LAYOUT_NHWC, .height = 224, .width = 224,
                                       .resize = 256, .scale_min = 0.5, .scale_max = 1.0,
                                       .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3,
                                       .flip_prob = 0.5};
                ck_assert_int_eq(feeder__decode_sample(d, &t, wp, len, 42, 3, idx, a, NULL, err,
                                                       sizeof(err)),
                                 0);
                t.max_decode_bytes = (uint64_t)sizes[si].w * sizes[si].h * 3 / 2;
                int rc = feeder__decode_sample(d, &t, wp, len, 42, 3, idx, b, NULL, err,
                                               sizeof(err));
                ck_assert_msg(rc == 0, "%ux%u pipeline %d idx %llu: %s", sizes[si].w,
                              sizes[si].h, pipelines[pi], (unsigned long long)idx, err);
                double sum = 0;
                int mx = 0;
                for (size_t i = 0; i < n; i++) {
                    int dd = abs((int)a[i] - (int)b[i]);
                    sum += dd;
                    mx = dd > mx ? dd : mx;
                }
                double mean = sum / (double)n;
                worst_mean = mean > worst_mean ? mean : worst_mean;
                worst_max = mx > worst_max ? mx : worst_max;
                count++;
                ck_assert_msg(mean <= 2.0 && mx <= 64, "%ux%u pipeline %d idx %llu: mean %.3f "
                              "max %d", sizes[si].w, sizes[si].h, pipelines[pi],
                              (unsigned long long)idx, mean, mx);
            }
        free(wp);
    }
    printf("webp scaled vs whole: %d images: worst mean %.4f max %d\n", count, worst_mean,
           worst_max);
    /* A crop too small to scale: refused, naming the reduced scale. */
    size_t len;
    uint8_t *wp = photo_webp(3, 1000, 800, &len);
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                           .layout = FEEDER_LAYOUT_NHWC, .height = 600, .width = 600,
                           .max_decode_bytes = 1000000};
    uint8_t *big = malloc(600 * 600 * 3);
    ck_assert_int_eq(feeder__decode_sample(d, &t, wp, len, 1, 0, 0, big, NULL, err, sizeof(err)),
                     FEEDER_ETOOBIG);
    ck_assert_str_eq(err, "WebP: image is 1000x800: decoding it takes 2464000 bytes (lossy: the "
                          "RGB output and libwebp's rows), over the limit of 1000000 "
                          "(FEEDER_OPT_MAX_DECODE_BYTES raises it)");
    free(big);
    free(wp);
    free(a);
    free(b);
    feeder__decoder_destroy(d);
}
END_TEST

static Suite *bombs_suite(void)
{
    Suite *s = suite_create("bombs");
    TCase *tc = tcase_create("bombs");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_one_colour_webp_decodes);
    tcase_add_loop_test(tc, test_bombs_refused_worker_small, 0, 4);
    tcase_add_test(tc, test_large_image_memory_returned);
    tcase_add_loop_test(tc, test_progressive_coefficients_bounded, 0, 2);
    tcase_add_test(tc, test_webp_scaled_matches_whole);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    (void)argc;
#ifdef __SANITIZE_ADDRESS__
    /* test_large_image_memory_returned measures a worker's RSS after a large
     * image, and ASan's quarantine keeps freed blocks mapped by design: run
     * again without it (the runtime reads ASAN_OPTIONS only at start). */
    const char *o = getenv("ASAN_OPTIONS");
    if (!o || !strstr(o, "quarantine_size_mb=0")) {
        char opts[1024];
        snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0",
                 o ? o : "", o && *o ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        execv("/proc/self/exe", argv);
    }
#else
    (void)argv;
#endif
    SRunner *sr = srunner_create(bombs_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
