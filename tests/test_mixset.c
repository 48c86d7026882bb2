/*
 * bench/mixset.c, the realistic image sets: every file is the kind its plan
 * says (read back from its headers with the library's own JPEG probe), the
 * same arguments give the same bytes with any number of processes, and the
 * loader reads the whole mix.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "decode/jpeg_header.h"
#include "feeder.h"
#include "mixset.h"

#define N 60

static bu_photos *photos;

static char *tmpdir_new(void)
{
    char *d = strdup("/tmp/feeder-mixset-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

/* Every kind forced to a share large enough to appear in 60 images, small
 * sides so the test is quick, and a few large ones. */
static void forced_mix(bm_mix *m)
{
    ck_assert_int_eq(bm_preset("web", m), 0);
    m->short_min = 48;
    m->short_max = 96;
    m->large = 0.05;
    m->large_min = 400;
    m->large_max = 480;
    m->share[BM_422] = 0.1;
    m->share[BM_444] = 0.1;
    m->share[BM_PROGRESSIVE] = 0.15;
    m->share[BM_GRAY] = 0.15;
    m->share[BM_CMYK] = 0.15;
    m->share[BM_YCCK] = 0.1;
    m->share[BM_PNG] = 0.1;
    m->restart = 0.3;
    m->exif = 0.3;
    m->icc = 0.3;
}

static uint64_t hash_set(const char *dir, const bm_mix *m, uint64_t seed)
{
    uint64_t h = 0;
    for (uint64_t k = 0; k < N; k++) {
        bm_image im;
        bm_plan(m, seed, k, &im);
        char path[600];
        bm_path(path, sizeof(path), dir, k, im.kind);
        uint8_t *b;
        size_t len;
        ck_assert_int_eq(bu_read_file(path, &b, &len), 0);
        h = bu_hash64(h, b, len);
        free(b);
    }
    return h;
}

/* The Exif orientation value our segment carries, 0 when there is none. */
static int exif_orientation(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i + 32 < len && i < 4096; i++)
        if (memcmp(b + i, "Exif\0\0II", 8) == 0)
            return b[i + 6 + 18];
    return 0;
}

static void check_kind(const bm_image *im, const feeder__jpeg_info *j)
{
    static const uint8_t sof[BM_KINDS] = {0xC0, 0xC0, 0xC0, 0xC2, 0xC0, 0xC0, 0xC0, 0};
    static const uint8_t comps[BM_KINDS] = {3, 3, 3, 3, 1, 4, 4, 0};
    static const int8_t adobe[BM_KINDS] = {-1, -1, -1, -1, -1, 0, 2, 0};
    ck_assert_uint_eq(j->sof, sof[im->kind]);
    ck_assert_uint_eq(j->components, comps[im->kind]);
    ck_assert_int_eq(j->adobe_transform, adobe[im->kind]);
    ck_assert_uint_eq(j->width, im->w);
    ck_assert_uint_eq(j->height, im->h);
    /* Luma's sampling factors (chroma is 1x1 throughout). */
    int hv[BM_KINDS][2] = {{2, 2}, {2, 1}, {1, 1}, {2, 2}, {1, 1}, {1, 1}, {2, 2}, {0, 0}};
    ck_assert_uint_eq(j->h[0], hv[im->kind][0]);
    ck_assert_uint_eq(j->v[0], hv[im->kind][1]);
    if (j->components > 1)
        ck_assert_uint_eq(j->h[1] * 10 + j->v[1], 11);
    ck_assert_uint_eq(j->restart_interval, im->restart);
    ck_assert_uint_eq(j->has_exif, im->orientation != 0);
    ck_assert_uint_eq(j->has_icc, im->icc);
}

START_TEST(test_kinds_are_what_they_claim)
{
    char *dir = tmpdir_new();
    bm_mix m;
    forced_mix(&m);
    bm_report r;
    ck_assert_int_eq(bm_make_set(photos, &m, dir, N, 7, 2, 0, &r), 0);
    ck_assert_uint_eq(r.images, N);
    for (int k = 0; k < BM_KINDS; k++)
        ck_assert_msg(r.count[k] > 0, "no %s image among %d", bm_kind_names[k], N);
    ck_assert_uint_gt(r.large, 0);
    ck_assert_uint_gt(r.restart * r.exif * r.icc, 0);
    for (uint64_t k = 0; k < N; k++) {
        bm_image im;
        bm_plan(&m, 7, k, &im);
        char path[600];
        bm_path(path, sizeof(path), dir, k, im.kind);
        uint8_t *b;
        size_t len;
        ck_assert_int_eq(bu_read_file(path, &b, &len), 0);
        feeder__jpeg_info j;
        if (im.kind == BM_PNG) {
            ck_assert_int_eq(memcmp(b, "\x89PNG\r\n\x1a\n", 8), 0);
            ck_assert_str_eq(path + strlen(path) - 5, ".JPEG");
            ck_assert_int_eq(feeder__jpeg_probe(b, len, &j), -1);
        } else {
            ck_assert_int_eq(feeder__jpeg_probe(b, len, &j), 0);
            check_kind(&im, &j);
            ck_assert_int_eq(exif_orientation(b, len), im.orientation);
        }
        ck_assert_uint_eq(im.large, im.w >= 400 && im.h >= 400);
        free(b);
    }
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_same_seed_same_bytes)
{
    char *a = tmpdir_new(), *b = tmpdir_new(), *c = tmpdir_new();
    bm_mix m;
    forced_mix(&m);
    /* Two processes against one: the bytes do not depend on who made them. */
    ck_assert_int_eq(bm_make_set(photos, &m, a, N, 7, 2, 0, NULL), 0);
    ck_assert_int_eq(bm_make_set(photos, &m, b, N, 7, 1, 0, NULL), 0);
    ck_assert_int_eq(bm_make_set(photos, &m, c, N, 8, 2, 0, NULL), 0);
    uint64_t ha = hash_set(a, &m, 7);
    ck_assert_uint_eq(ha, hash_set(b, &m, 7));
    ck_assert_uint_ne(ha, hash_set(c, &m, 8));
    /* A set already made is reused, not remade. */
    bm_report r;
    ck_assert_int_eq(bm_make_set(photos, &m, a, N, 7, 2, 0, &r), 0);
    ck_assert(r.seconds == 0);
    ck_assert_uint_eq(ha, hash_set(a, &m, 7));
    const char *dirs[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        bu_rm_rf(dirs[i]);
        free((void *)dirs[i]);
    }
}
END_TEST

/* The loader reads every kind: CMYK, YCCK, gray, progressive and the PNG. */
START_TEST(test_loader_reads_the_mix)
{
    char *dir = tmpdir_new();
    bm_mix m;
    forced_mix(&m);
    ck_assert_int_eq(bm_make_set(photos, &m, dir, N, 7, 2, 0, NULL), 0);
    char err[512];
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_folder(dir, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(feeder_dataset_size(ds), N);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 16), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 36), 0);
    feeder_batch *bt;
    int rc;
    uint64_t seen = 0;
    while ((rc = feeder_next(ld, &bt)) == 0) {
        seen += bt->count;
        feeder_batch_release(bt, NULL);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(seen, N);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_presets)
{
    bm_mix m;
    ck_assert_int_eq(bm_preset("web", &m), 0);
    ck_assert_uint_eq(m.short_min, 200);
    ck_assert_uint_eq(m.short_max, 800);
    ck_assert_int_eq(m.q_min, 70);
    ck_assert_int_eq(m.q_max, 95);
    ck_assert_int_eq(bm_preset("imagenet", &m), 0);
    ck_assert(m.share[BM_444] == 0.70);
    ck_assert_int_eq(bm_preset("nope", &m), -EINVAL);
    /* The web mix of 2,000 holds every JPEG kind and a large tail. */
    ck_assert_int_eq(bm_preset("web", &m), 0);
    uint64_t count[BM_KINDS] = {0}, large = 0;
    for (uint64_t k = 0; k < 2000; k++) {
        bm_image im;
        bm_plan(&m, 1, k, &im);
        count[im.kind]++;
        large += im.large;
        ck_assert(im.quality >= 70 && im.quality <= 95);
    }
    for (int k = 0; k < BM_PNG; k++)
        ck_assert_msg(count[k] > 0, "web-2000 has no %s", bm_kind_names[k]);
    ck_assert(large > 20 && large < 120);
}
END_TEST

int main(void)
{
    char err[512];
    if (bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    Suite *s = suite_create("mixset");
    TCase *tc = tcase_create("mixset");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kinds_are_what_they_claim);
    tcase_add_test(tc, test_same_seed_same_bytes);
    tcase_add_test(tc, test_loader_reads_the_mix);
    tcase_add_test(tc, test_presets);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    bu_photos_free(photos);
    return failed ? 1 : 0;
}
