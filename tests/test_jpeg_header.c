/*
 * decode/jpeg_header.c: the header walk and the route of every kind of JPEG
 * a real dataset holds, each written here with the libjpeg API so the file is
 * what its name says (progressive, CMYK, YCCK, 4:1:1, 12 restart MCUs, EXIF,
 * ICC), and every malformed input the walk must refuse without reading past
 * the buffer.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "decode/jpeg_header.h"
#include "worker/worker.h"

typedef struct spec {
    unsigned w, h;
    int comps;            /* 1, 3 or 4 */
    J_COLOR_SPACE out_cs; /* JCS_GRAYSCALE, JCS_YCbCr, JCS_CMYK, JCS_YCCK */
    int h0, v0;           /* luma sampling (chroma 1x1) */
    int progressive;
    int arithmetic;
    unsigned restart;     /* MCUs */
    int exif, icc;
} spec;

/* A JPEG of a smooth gradient written to spec; caller frees. */
static uint8_t *make(const spec *s, unsigned long *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    *len = 0;
    jpeg_mem_dest(&c, &out, len);
    c.image_width = s->w;
    c.image_height = s->h;
    c.input_components = s->comps;
    c.in_color_space = s->comps == 1 ? JCS_GRAYSCALE : s->comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, s->out_cs);
    if (s->comps == 3) {
        c.comp_info[0].h_samp_factor = s->h0;
        c.comp_info[0].v_samp_factor = s->v0;
        c.comp_info[1].h_samp_factor = c.comp_info[1].v_samp_factor = 1;
        c.comp_info[2].h_samp_factor = c.comp_info[2].v_samp_factor = 1;
    }
    jpeg_set_quality(&c, 90, TRUE);
    if (s->progressive)
        jpeg_simple_progression(&c);
    c.arith_code = s->arithmetic ? TRUE : FALSE;
    c.restart_interval = s->restart;
    jpeg_start_compress(&c, TRUE);
    if (s->exif) {
        static const uint8_t exif[] = "Exif\0\0MM\0*\0\0\0\x08\0\0";
        jpeg_write_marker(&c, JPEG_APP0 + 1, exif, sizeof(exif));
    }
    if (s->icc) {
        uint8_t icc[128] = {0};
        jpeg_write_icc_profile(&c, icc, sizeof(icc));
    }
    size_t stride = (size_t)s->w * s->comps;
    uint8_t *row = malloc(stride);
    for (unsigned y = 0; y < s->h; y++) {
        for (size_t x = 0; x < stride; x++)
            row[x] = (uint8_t)((x * 7 + y * 3) & 255);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return out;
}

static int route_of(const spec *s, feeder__jpeg_info *info)
{
    unsigned long len;
    uint8_t *j = make(s, &len);
    int rc = feeder__jpeg_probe(j, len, info);
    ck_assert_int_eq(rc, 0);
    free(j);
    return feeder__jpeg_route(info, 178956970);
}

START_TEST(baseline_subsamplings_go_to_the_engine)
{
    static const int hv[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};
    for (unsigned k = 0; k < 4; k++) {
        spec s = {.w = 333, .h = 250, .comps = 3, .out_cs = JCS_YCbCr, .h0 = hv[k][0],
                  .v0 = hv[k][1]};
        feeder__jpeg_info in;
        ck_assert_int_eq(route_of(&s, &in), FEEDER__ROUTE_GPU);
        ck_assert_uint_eq(in.width, 333);
        ck_assert_uint_eq(in.height, 250);
        ck_assert_uint_eq(in.sof, 0xC0);
        ck_assert_uint_eq(in.precision, 8);
        ck_assert_uint_eq(in.components, 3);
        ck_assert_uint_eq(in.h[0], hv[k][0]);
        ck_assert_uint_eq(in.v[0], hv[k][1]);
        ck_assert_uint_eq(in.h[1], 1);
        ck_assert_uint_eq(in.v[2], 1);
        ck_assert_int_eq(in.adobe_transform, -1);
    }
}
END_TEST

START_TEST(gray_goes_to_the_engine)
{
    spec s = {.w = 64, .h = 48, .comps = 1, .out_cs = JCS_GRAYSCALE};
    feeder__jpeg_info in;
    ck_assert_int_eq(route_of(&s, &in), FEEDER__ROUTE_GPU);
    ck_assert_uint_eq(in.components, 1);
}
END_TEST

START_TEST(progressive_cmyk_ycck_subsampling_other)
{
    feeder__jpeg_info in;
    spec p = {.w = 200, .h = 120, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 2, .v0 = 2,
              .progressive = 1};
    ck_assert_int_eq(route_of(&p, &in), FEEDER__ROUTE_PROGRESSIVE);
    ck_assert_uint_eq(in.sof, 0xC2);

    spec cmyk = {.w = 90, .h = 70, .comps = 4, .out_cs = JCS_CMYK};
    ck_assert_int_eq(route_of(&cmyk, &in), FEEDER__ROUTE_CMYK);
    ck_assert_int_eq(in.adobe_transform, 0);
    ck_assert_uint_eq(in.components, 4);

    spec ycck = {.w = 90, .h = 70, .comps = 4, .out_cs = JCS_YCCK};
    ck_assert_int_eq(route_of(&ycck, &in), FEEDER__ROUTE_CMYK);
    ck_assert_int_eq(in.adobe_transform, 2);

    spec s411 = {.w = 256, .h = 64, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 4, .v0 = 1};
    ck_assert_int_eq(route_of(&s411, &in), FEEDER__ROUTE_SUBSAMPLING);
    ck_assert_uint_eq(in.h[0], 4);

    spec arith = {.w = 64, .h = 64, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 2, .v0 = 2,
                  .arithmetic = 1};
    ck_assert_int_eq(route_of(&arith, &in), FEEDER__ROUTE_OTHER);
    ck_assert_uint_eq(in.sof, 0xC9);
}
END_TEST

START_TEST(markers_restart_exif_icc)
{
    spec s = {.w = 160, .h = 160, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 2, .v0 = 2,
              .restart = 12, .exif = 1, .icc = 1};
    feeder__jpeg_info in;
    ck_assert_int_eq(route_of(&s, &in), FEEDER__ROUTE_GPU);
    ck_assert_uint_eq(in.restart_interval, 12);
    ck_assert_uint_eq(in.has_exif, 1);
    ck_assert_uint_eq(in.has_icc, 1);
}
END_TEST

START_TEST(size_limits)
{
    feeder__jpeg_info in = {.width = 2048, .height = 1024, .sof = 0xC0, .precision = 8,
                            .components = 3, .h = {2, 1, 1}, .v = {2, 1, 1}};
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_GPU);
    ck_assert_int_eq(feeder__jpeg_route(&in, 2048 * 1024), FEEDER__ROUTE_GPU);
    ck_assert_int_eq(feeder__jpeg_route(&in, 2048 * 1024 - 1), FEEDER__ROUTE_SIZE);
    in.height = 1025; /* past 2 MP: the CPU's DCT scaling decodes it for less */
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_SIZE);
    in.height = 1024;
    in.width = 16385;
    in.height = 10;
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_SIZE);
    in.precision = 12;
    in.width = 100;
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_OTHER);
    ck_assert_int_eq(feeder__jpeg_route(NULL, 0), FEEDER__ROUTE_CORRUPT);
    in.width = 0;
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_CORRUPT);
}
END_TEST

/* Every prefix of a real file either parses to the same header (it holds
 * the whole frame header and the SOS marker) or is refused; nothing is read
 * past the prefix (ASan runs this suite). */
START_TEST(truncated_and_garbage)
{
    spec s = {.w = 100, .h = 80, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 2, .v0 = 1,
              .restart = 3, .exif = 1, .icc = 1};
    unsigned long len;
    uint8_t *j = make(&s, &len);
    feeder__jpeg_info full, in;
    ck_assert_int_eq(feeder__jpeg_probe(j, len, &full), 0);
    size_t first_ok = 0;
    for (size_t n = 0; n < 2048 && n <= len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, j, n);
        int rc = feeder__jpeg_probe(copy, n, &in);
        if (rc == 0) {
            if (!first_ok)
                first_ok = n;
            ck_assert_uint_eq(in.width, full.width);
            ck_assert_uint_eq(in.h[0], full.h[0]);
        } else {
            ck_assert_msg(!first_ok, "prefix %zu refused after %zu parsed", n, first_ok);
        }
        free(copy);
    }
    ck_assert_uint_gt(first_ok, 0);
    /* Not a JPEG, a lying segment length, EOI first, a second frame header. */
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', 13, 10, 26, 10};
    ck_assert_int_eq(feeder__jpeg_probe(png, sizeof(png), &in), -1);
    static const uint8_t lie[] = {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xF0, 0, 0};
    ck_assert_int_eq(feeder__jpeg_probe(lie, sizeof(lie), &in), -1);
    static const uint8_t eoi[] = {0xFF, 0xD8, 0xFF, 0xD9};
    ck_assert_int_eq(feeder__jpeg_probe(eoi, sizeof(eoi), &in), -1);
    static const uint8_t two[] = {0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0,
                                  0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0,
                                  0xFF, 0xDA, 0, 2};
    ck_assert_int_eq(feeder__jpeg_probe(two, sizeof(two), &in), -1);
    static const uint8_t zero_hv[] = {0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x00, 0,
                                      0xFF, 0xDA, 0, 2};
    ck_assert_int_eq(feeder__jpeg_probe(zero_hv, sizeof(zero_hv), &in), -1);
    static const uint8_t ok[] = {0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 9, 1, 1, 0x11, 0,
                                 0xFF, 0xDA, 0, 2};
    ck_assert_int_eq(feeder__jpeg_probe(ok, sizeof(ok), &in), 0);
    ck_assert_uint_eq(in.width, 9);
    ck_assert_uint_eq(in.height, 8);
    ck_assert_int_eq(feeder__jpeg_route(&in, 0), FEEDER__ROUTE_GPU);
    ck_assert_int_eq(feeder__jpeg_probe(NULL, 0, &in), -1);
    free(j);
}
END_TEST

START_TEST(route_names)
{
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_GPU), "gpu");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_PROGRESSIVE), "progressive");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_CMYK), "cmyk");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_SUBSAMPLING), "subsampling");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_SIZE), "size");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_CORRUPT), "corrupt");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_OTHER), "other");
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTES), "unknown");
    ck_assert_str_eq(feeder__jpeg_route_name(-1), "unknown");
}
END_TEST

/* A GPU decoder's part plan reads the live share when it runs, not when the
 * part was queued: the first share of the part stays on the CPU (as does a
 * file that failed to read, and one the engine cannot take); the others go
 * over as their bytes, packed in the part's room. */
START_TEST(part_plan_takes_the_live_share)
{
    feeder__job job;
    memset(&job, 0, sizeof(job));
    job.t.max_pixels = 178956970;
    ck_assert_int_eq(feeder__slot_layout_init(&job.layout, 4, 16, 16, 3, 0), 0);
    ck_assert_int_eq(feeder__slot_layout_room(&job.layout, 4096), 0);
    job.live_off = job.layout.slot_bytes;
    uint8_t *mem = calloc(1, job.live_off + FEEDER__LIVE_BYTES);
    feeder__live *live = (feeder__live *)(mem + job.live_off);
    feeder__worker_ctx w;
    memset(&w, 0, sizeof(w));
    w.job = &job;
    w.mem = mem;
    w.live = live;
    ck_assert_int_eq(feeder__worker_part_reserve(&w, 4), 0);
    spec base = {.w = 16, .h = 16, .comps = 3, .out_cs = JCS_YCbCr, .h0 = 2, .v0 = 2};
    spec prog = base;
    prog.progressive = 1;
    unsigned long len[4];
    uint8_t *jpg[4] = {make(&base, &len[0]), make(&base, &len[1]), make(&prog, &len[2]),
                       make(&base, &len[3])};
    /* share (permille) -> samples on the CPU's share, and which go over */
    static const struct { uint32_t permille, shared; int gpu[4]; } want[] = {
        {0, 0, {1, 1, 0, 1}}, {500, 2, {0, 0, 0, 1}}, {1000, 4, {0, 0, 0, 0}}, {250, 1, {0, 1, 0, 1}},
    };
    feeder__task_msg t = {FEEDER__MSG_TASK, 0, 0, 4, 0, 0, 4, 0};
    for (unsigned c = 0; c < sizeof(want) / sizeof(want[0]); c++) {
        atomic_store(&live->cpu_permille, want[c].permille);
        for (unsigned k = 0; k < 4; k++) {
            w.part.bytes[k] = jpg[k];
            w.part.len[k] = len[k];
        }
        feeder__result_msg res;
        memset(&res, 0, sizeof(res));
        feeder__worker_plan_gpu_part(&w, &t, mem, &res);
        ck_assert_uint_eq(res.shared, want[c].shared);
        const uint64_t *enc = feeder__slot_encoded(&job.layout, mem);
        for (unsigned k = 0; k < 4; k++) {
            ck_assert_int_eq(w.part.gpu[k], want[c].gpu[k]);
            ck_assert_uint_eq(enc[k], want[c].gpu[k] ? len[k] : 0);
        }
        /* the progressive file is counted as routed only when the share left it to the engine */
        ck_assert_uint_eq(res.routed[FEEDER__ROUTE_PROGRESSIVE - 1], want[c].shared < 3);
    }
    /* A file that failed to read stays on the CPU, counted nowhere. */
    atomic_store(&live->cpu_permille, 0);
    w.part.bytes[1] = NULL;
    feeder__result_msg res;
    memset(&res, 0, sizeof(res));
    feeder__worker_plan_gpu_part(&w, &t, mem, &res);
    ck_assert_int_eq(w.part.gpu[1], 0);
    ck_assert_uint_eq(res.shared, 0);
    for (unsigned k = 0; k < 4; k++)
        free(jpg[k]);
    free(w.part.bytes);
    free(w.part.len);
    free(w.part.gpu);
    free(w.part.off);
    free(mem);
}
END_TEST

static Suite *header_suite(void)
{
    Suite *s = suite_create("jpeg_header");
    TCase *tc = tcase_create("route");
    tcase_add_test(tc, baseline_subsamplings_go_to_the_engine);
    tcase_add_test(tc, gray_goes_to_the_engine);
    tcase_add_test(tc, progressive_cmyk_ycck_subsampling_other);
    tcase_add_test(tc, markers_restart_exif_icc);
    tcase_add_test(tc, size_limits);
    tcase_add_test(tc, truncated_and_garbage);
    tcase_add_test(tc, route_names);
    tcase_add_test(tc, part_plan_takes_the_live_share);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(header_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
