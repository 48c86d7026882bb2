/*
 * decode/format.c: the format table and what is derived from it. The
 * extension lists and names that users read (folder and tar messages, the
 * unknown-format error) come out of the table exactly as they read before
 * it existed, and the extension ranks keep WebDataset's first-image rule.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "decode/decode.h"
#include "decode/format.h"
#include "decode/jpeg_header.h"

START_TEST(rows_are_complete)
{
    size_t n;
    const feeder__format *f = feeder__formats(&n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(f[0].name, "JPEG");
    ck_assert_str_eq(f[1].name, "PNG");
    ck_assert_str_eq(f[2].name, "WebP");
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_nonnull(f[i].sniff);
        ck_assert_ptr_nonnull(f[i].extensions);
        ck_assert_ptr_nonnull(f[i].extensions[0]);
        /* exactly one way to decode */
        ck_assert_int_eq(!f[i].decode + !f[i].whole, 1);
    }
}
END_TEST

START_TEST(extension_lists_read_as_before)
{
    char buf[128];
    feeder__format_ext_list(FEEDER__EXT_FOLDER, buf, sizeof(buf));
    ck_assert_str_eq(buf, ".jpg, .jpeg, .jfif, .png or .webp");
    feeder__format_ext_list(FEEDER__EXT_TAR, buf, sizeof(buf));
    ck_assert_str_eq(buf, ".jpg, .jpeg, .png or .webp");
    /* cut short, still terminated */
    char small[8];
    feeder__format_ext_list(FEEDER__EXT_TAR, small, sizeof(small));
    ck_assert_uint_lt(strlen(small), sizeof(small));
}
END_TEST

START_TEST(extension_ranks)
{
    ck_assert_int_eq(feeder__format_ext_rank("jpg", FEEDER__EXT_TAR), 1);
    ck_assert_int_eq(feeder__format_ext_rank("JPEG", FEEDER__EXT_TAR), 2);
    ck_assert_int_eq(feeder__format_ext_rank("png", FEEDER__EXT_TAR), 3);
    ck_assert_int_eq(feeder__format_ext_rank("WebP", FEEDER__EXT_TAR), 4);
    ck_assert_int_eq(feeder__format_ext_rank("jfif", FEEDER__EXT_TAR), 0);
    ck_assert_int_gt(feeder__format_ext_rank("jfif", FEEDER__EXT_FOLDER), 0);
    ck_assert_int_eq(feeder__format_ext_rank("cls", FEEDER__EXT_FOLDER), 0);
    ck_assert_int_eq(feeder__format_ext_rank("gif", FEEDER__EXT_FOLDER), 0);
    ck_assert_int_eq(feeder__format_ext_rank("", FEEDER__EXT_FOLDER), 0);
}
END_TEST

START_TEST(sniff_and_unknown)
{
    static const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0};
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    static const uint8_t webp[] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
    static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a'};
    ck_assert_str_eq(feeder__format_of(jpeg, sizeof(jpeg))->name, "JPEG");
    ck_assert_str_eq(feeder__format_of(png, sizeof(png))->name, "PNG");
    ck_assert_str_eq(feeder__format_of(webp, sizeof(webp))->name, "WebP");
    ck_assert_ptr_null(feeder__format_of(gif, sizeof(gif)));
    ck_assert_ptr_null(feeder__format_of(png, 7));
    char err[256];
    ck_assert_int_eq(feeder__format_unknown(gif, sizeof(gif), err, sizeof(err)), FEEDER_EDECODE);
    ck_assert_str_eq(err, "not a JPEG, PNG or WebP file (starts 47 49 46 38: GIF)");
}
END_TEST

/* The GPU decoders' route of a file's bytes: a PNG or a WebP is a route of
 * its own (FORMAT, "not a JPEG"), not CORRUPT; bytes of no known format
 * stay CORRUPT (the CPU decoder names them); a JPEG goes by its header. */
START_TEST(gpu_route_of_each_format)
{
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13};
    static const uint8_t webp[] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
    static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a'};
    static const uint8_t cut_jpeg[] = {0xff, 0xd8, 0xff};
    ck_assert_int_eq(feeder__decode_route(png, sizeof(png), 0), FEEDER__ROUTE_FORMAT);
    ck_assert_int_eq(feeder__decode_route(webp, sizeof(webp), 0), FEEDER__ROUTE_FORMAT);
    ck_assert_int_eq(feeder__decode_route(gif, sizeof(gif), 0), FEEDER__ROUTE_CORRUPT);
    ck_assert_int_eq(feeder__decode_route(cut_jpeg, sizeof(cut_jpeg), 0), FEEDER__ROUTE_CORRUPT);
    /* counted where the public enum says */
    ck_assert_int_eq(FEEDER__ROUTE_FORMAT - 1, FEEDER_ROUTE_FORMAT);
    ck_assert_int_eq(FEEDER__ROUTE_ROOM - 1, FEEDER_ROUTE_ROOM);
    ck_assert_int_eq(FEEDER__ROUTES - 1, FEEDER_ROUTES);
    ck_assert_str_eq(feeder__jpeg_route_name(FEEDER__ROUTE_FORMAT), "format");

    uint8_t px[16 * 16 * 3];
    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (uint8_t)(i * 7);
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    ck_assert_int_eq(tjCompress2(tj, px, 16, 0, 16, TJPF_RGB, &jpg, &n, TJSAMP_420, 90, 0), 0);
    ck_assert_int_eq(feeder__decode_route(jpg, n, 0), FEEDER__ROUTE_GPU);
    ck_assert_int_eq(feeder__decode_route(jpg, n, 100), FEEDER__ROUTE_SIZE);
    tjFree(jpg);
    tjDestroy(tj);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("format_table");
    TCase *tc = tcase_create("format_table");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, rows_are_complete);
    tcase_add_test(tc, extension_lists_read_as_before);
    tcase_add_test(tc, extension_ranks);
    tcase_add_test(tc, sniff_and_unknown);
    tcase_add_test(tc, gpu_route_of_each_format);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
