/*
 * augment/: each op against torchvision 0.14's output on the same uint8
 * image (tests/fixtures/augment/, made by make.py there: keep its case
 * table and this one in step), within one level per pixel; determinism of
 * the draws; parameter bounds; the pipeline through a loader with 0, 1 and
 * 3 workers; mixup and cutmix soft labels.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "testutil.h"

enum { FW = 40, FH = 30, FBYTES = FW * FH * 3 };

static void load_fixture(const char *name, uint8_t *out)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.rgb", FEEDER_AUGMENT_FIXTURES, name);
    uint8_t *data;
    size_t len;
    ck_assert_msg(bu_read_file(p, &data, &len) == 0, "read %s", p);
    ck_assert_uint_eq(len, FBYTES);
    memcpy(out, data, FBYTES);
    free(data);
}

/* HWC to CHW (NCHW's sample), and back. */
static void to_chw(const uint8_t *hwc, uint8_t *chw)
{
    for (int i = 0; i < FW * FH; i++)
        for (int c = 0; c < 3; c++)
            chw[c * FW * FH + i] = hwc[i * 3 + c];
}
static void to_hwc(const uint8_t *chw, uint8_t *hwc)
{
    for (int i = 0; i < FW * FH; i++)
        for (int c = 0; c < 3; c++)
            hwc[i * 3 + c] = chw[c * FW * FH + i];
}

typedef void (*op_fn)(feeder__aimg im, void *scratch);

#define OP(name, call)                                                                         \
    static void name(feeder__aimg im, void *scratch)                                           \
    {                                                                                          \
        (void)scratch;                                                                         \
        call;                                                                                  \
    }
OP(op_bright06, feeder__aug_brightness(im, 0.6))
OP(op_bright17, feeder__aug_brightness(im, 1.7))
OP(op_contr05, feeder__aug_contrast(im, 0.5))
OP(op_contr18, feeder__aug_contrast(im, 1.8))
OP(op_sat03, feeder__aug_saturation(im, 0.3))
OP(op_sat19, feeder__aug_saturation(im, 1.9))
OP(op_hue_m03, feeder__aug_hue(im, -0.3))
OP(op_hue02, feeder__aug_hue(im, 0.2))
OP(op_gray, feeder__aug_grayscale(im))
OP(op_post3, feeder__aug_posterize(im, 3))
OP(op_sol100, feeder__aug_solarize(im, 100.0))
OP(op_autoc, feeder__aug_autocontrast(im))
OP(op_equal, feeder__aug_equalize(im))
OP(op_sharp03, feeder__aug_sharpness(im, 0.3, scratch))
OP(op_sharp18, feeder__aug_sharpness(im, 1.8, scratch))
OP(op_blur5, feeder__aug_gaussian_blur(im, 5, 1.3, scratch))
OP(op_blur7, feeder__aug_gaussian_blur(im, 7, 2.0, scratch))
OP(op_hflip, feeder__aug_flip(im, 0))
OP(op_vflip, feeder__aug_flip(im, 1))
OP(op_rot30n, feeder__aug_rotate(im, 30.0, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE, scratch))
OP(op_rotm17b, feeder__aug_rotate(im, -17.0, FEEDER_INTERP_BILINEAR, 128, scratch))
OP(op_rot30b, feeder__aug_rotate(im, 30.0, FEEDER_INTERP_BILINEAR, FEEDER_FILL_NONE, scratch))
OP(op_affb, feeder__aug_affine(im, 10, 3, -2, 1.1, 5, -8, NULL, FEEDER_INTERP_BILINEAR,
                               FEEDER_FILL_NONE, scratch))
OP(op_affn, feeder__aug_affine(im, 10, 3, -2, 1.1, 5, -8, NULL, FEEDER_INTERP_NEAREST, 50,
                               scratch))
OP(op_shearx, feeder__aug_auto_op(im, 1, 0.3, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE, scratch))
OP(op_sheary, feeder__aug_auto_op(im, 2, -0.5, FEEDER_INTERP_BILINEAR, FEEDER_FILL_NONE, scratch))

/* name, op, input fixture, share of pixels allowed past +-1 (nearest
 * sampling at a rounding edge picks the neighbouring pixel) */
static const struct {
    const char *name;
    op_fn fn;
    const char *input;
    double allow;
} cases[] = {
    {"brightness_0.6", op_bright06, "input", 0},
    {"brightness_1.7", op_bright17, "input", 0},
    {"contrast_0.5", op_contr05, "input", 0},
    {"contrast_1.8", op_contr18, "input", 0},
    {"saturation_0.3", op_sat03, "input", 0},
    {"saturation_1.9", op_sat19, "input", 0},
    {"hue_-0.3", op_hue_m03, "input", 0},
    {"hue_0.2", op_hue02, "input", 0},
    {"grayscale", op_gray, "input", 0},
    {"posterize_3", op_post3, "input", 0},
    {"solarize_100", op_sol100, "input", 0},
    {"autocontrast", op_autoc, "low", 0},
    {"equalize", op_equal, "input", 0},
    {"sharpness_0.3", op_sharp03, "input", 0},
    {"sharpness_1.8", op_sharp18, "input", 0},
    {"blur_5_1.3", op_blur5, "input", 0},
    {"blur_7_2.0", op_blur7, "input", 0},
    {"hflip", op_hflip, "input", 0},
    {"vflip", op_vflip, "input", 0},
    {"rotate_30_nearest", op_rot30n, "input", 0.005},
    {"rotate_-17_bilinear_fill128", op_rotm17b, "input", 0},
    {"rotate_30_bilinear", op_rot30b, "input", 0},
    {"affine_bilinear", op_affb, "input", 0},
    {"affine_nearest_fill50", op_affn, "input", 0.005},
    {"shearx_0.3_nearest", op_shearx, "input", 0.005},
    {"sheary_-0.5_bilinear", op_sheary, "input", 0},
};
enum { NCASES = sizeof(cases) / sizeof(cases[0]) };

static void check_case(int k, int layout)
{
    static uint8_t in[FBYTES], want[FBYTES], got[FBYTES], img[FBYTES];
    load_fixture(cases[k].input, in);
    load_fixture(cases[k].name, want);
    void *scratch = malloc(feeder__augment_scratch_bytes(FW, FH));
    if (layout == FEEDER_LAYOUT_NCHW)
        to_chw(in, img);
    else
        memcpy(img, in, FBYTES);
    cases[k].fn(feeder__aimg_make(img, FW, FH, layout), scratch);
    if (layout == FEEDER_LAYOUT_NCHW)
        to_hwc(img, got);
    else
        memcpy(got, img, FBYTES);
    free(scratch);
    int worst = 0, over = 0, first = -1;
    for (int i = 0; i < FBYTES; i++) {
        int d = abs((int)got[i] - (int)want[i]);
        if (d > 1) {
            over++;
            if (first < 0)
                first = i;
        }
        worst = d > worst ? d : worst;
    }
    int limit = (int)(cases[k].allow * FBYTES);
    ck_assert_msg(over <= limit,
                  "%s (%s): %d values differ by more than 1 (allowed %d), worst %d; first at "
                  "byte %d: %d, torchvision %d",
                  cases[k].name, layout ? "NCHW" : "NHWC", over, limit, worst, first,
                  first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
}

START_TEST(ops_match_torchvision_nhwc) { check_case(_i, FEEDER_LAYOUT_NHWC); }
END_TEST

START_TEST(ops_match_torchvision_nchw) { check_case(_i, FEEDER_LAYOUT_NCHW); }
END_TEST

/* ---- determinism ---- */

static feeder_augment *full_pipeline(void)
{
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_flip(a, 0, 0.5), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_int_eq(feeder_augment_rotate(a, 20, FEEDER_INTERP_BILINEAR, 0), 0);
    ck_assert_int_eq(feeder_augment_blur(a, 5, 0.1, 2.0), 0);
    ck_assert_int_eq(feeder_augment_trivial(a, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE), 0);
    ck_assert_int_eq(feeder_augment_randaugment(a, 2, 9, 31, FEEDER_INTERP_NEAREST, 0), 0);
    ck_assert_int_eq(feeder_augment_erase(a, 0.5, 0.02, 0.33, 0.3, 3.3, -1), 0);
    return a;
}

START_TEST(same_draws_same_bytes)
{
    feeder_augment *a = full_pipeline();
    static uint8_t in[FBYTES], x[FBYTES], y[FBYTES];
    load_fixture("input", in);
    int differ = 0;
    for (uint64_t idx = 0; idx < 40; idx++) {
        memcpy(x, in, FBYTES);
        memcpy(y, in, FBYTES);
        ck_assert_int_eq(feeder_augment_apply(a, x, FW, FH, FEEDER_LAYOUT_NHWC, 7, 3, idx), 0);
        ck_assert_int_eq(feeder_augment_apply(a, y, FW, FH, FEEDER_LAYOUT_NHWC, 7, 3, idx), 0);
        ck_assert(memcmp(x, y, FBYTES) == 0);
        memcpy(y, in, FBYTES);
        ck_assert_int_eq(feeder_augment_apply(a, y, FW, FH, FEEDER_LAYOUT_NHWC, 7, 3, idx + 1000),
                         0);
        differ += memcmp(x, y, FBYTES) != 0;
    }
    ck_assert_int_ge(differ, 38); /* another index, other parameters */
    /* NCHW gives the same pixels in the other order. */
    memcpy(x, in, FBYTES);
    to_chw(in, y);
    feeder_augment_apply(a, x, FW, FH, FEEDER_LAYOUT_NHWC, 1, 0, 5);
    feeder_augment_apply(a, y, FW, FH, FEEDER_LAYOUT_NCHW, 1, 0, 5);
    static uint8_t back[FBYTES];
    to_hwc(y, back);
    ck_assert(memcmp(x, back, FBYTES) == 0);
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(trivial_augment_draws_every_op)
{
    /* Over many indices TrivialAugment picks all 14 ops: the image changes
     * for most of them, and the op/bin draws are spread. */
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_trivial(a, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE), 0);
    static uint8_t in[FBYTES], x[FBYTES];
    load_fixture("input", in);
    int seen[14] = {0}, changed = 0;
    for (uint64_t idx = 0; idx < 400; idx++) {
        seen[feeder_random(3, 0, idx, FEEDER__AUG_COUNTER(0, 0)) % 14]++;
        memcpy(x, in, FBYTES);
        feeder_augment_apply(a, x, FW, FH, FEEDER_LAYOUT_NHWC, 3, 0, idx);
        changed += memcmp(x, in, FBYTES) != 0;
    }
    for (int k = 0; k < 14; k++)
        ck_assert_int_gt(seen[k], 5);
    ck_assert_int_gt(changed, 300);
    feeder_augment_destroy(a);
}
END_TEST

/* ---- bounds ---- */

START_TEST(bad_parameters_give_erange_with_bounds)
{
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_flip(a, 0, 1.5), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_augment_errmsg(a), "feeder_augment_flip: p is 1.5, outside [0, 1]");
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.2, 0.2, 0.2, 0.7), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "hue is 0.7, outside [0, 0.5]"));
    ck_assert_int_eq(feeder_augment_blur(a, 4, 1, 2), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "not odd"));
    ck_assert_int_eq(feeder_augment_blur(a, 5, 2, 1), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "sigma_max is 1, outside [2, 100]"));
    ck_assert_int_eq(feeder_augment_randaugment(a, 2, 31, 31, 0, -1), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "magnitude is 31, outside [0, 30]"));
    ck_assert_int_eq(feeder_augment_rotate(a, 10, 2, -1), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_augment_rotate(a, 10, 0, 256), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_augment_erase(a, 0.5, 0.5, 0.1, 0.3, 3.3, 0), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_augment_mixup(a, 0, 1), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_augment_cutmix(a, 1, NAN), FEEDER_ERANGE);
    feeder_affine af = {10, {0.1, 0.1}, {1.2, 0.9}, {0, 0, 0, 0}, 0, -1};
    ck_assert_int_eq(feeder_augment_affine(a, &af), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "scale[1] is 0.9, outside [1.2, 10]"));
    /* nothing was added; then a full plan refuses the 17th step */
    ck_assert_int_eq(a->plan.nsteps, 0);
    for (int i = 0; i < FEEDER_AUGMENT_MAX_STEPS; i++)
        ck_assert_int_eq(feeder_augment_grayscale(a, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.1), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_augment_errmsg(a), "has 16 steps"));
    feeder_augment_destroy(a);
}
END_TEST

/* ---- mixes ---- */

static void check_soft_labels(const feeder_batch *b, uint32_t nc)
{
    float *soft = malloc((size_t)b->count * nc * sizeof(float));
    ck_assert_int_eq(feeder_batch_soft_labels(b, nc, soft), 0);
    for (uint32_t i = 0; i < b->count; i++) {
        double s = 0;
        for (uint32_t c = 0; c < nc; c++) {
            ck_assert(soft[i * nc + c] >= 0.0f);
            s += soft[i * nc + c];
        }
        ck_assert_msg(fabs(s - 1.0) < 1e-5, "row %u sums to %g", i, s);
    }
    free(soft);
}

START_TEST(mix_lambdas_and_soft_labels)
{
    enum { N = 8 };
    static uint8_t data[N * FBYTES], orig[N * FBYTES], scratch[FBYTES];
    load_fixture("input", orig);
    for (int i = 1; i < N; i++)
        for (int j = 0; j < FBYTES; j++)
            orig[i * FBYTES + j] = (uint8_t)(orig[j] + 31 * i);
    int64_t labels[N] = {0, 1, 2, 3, 4, 0, 1, 2};
    for (int cut = 0; cut < 2; cut++) {
        feeder__augment_plan p;
        memset(&p, 0, sizeof(p));
        if (cut) {
            p.cutmix_alpha = 1.0;
            p.cutmix_p = 1.0;
        } else {
            p.mixup_alpha = 0.2;
            p.mixup_p = 1.0;
        }
        int mixed = 0;
        for (uint64_t batch = 0; batch < 20; batch++) {
            feeder_mix mix[N], again[N];
            memcpy(data, orig, sizeof(data));
            int m = feeder__augment_mix(&p, data, N, FW, FH, FEEDER_LAYOUT_NHWC, 9, 1, batch,
                                        mix, scratch);
            ck_assert_int_eq(m, 1);
            mixed++;
            for (int i = 0; i < N; i++) {
                ck_assert_uint_eq(mix[i].partner, (uint32_t)((i + N - 1) % N));
                ck_assert(mix[i].lambda >= 0.0f && mix[i].lambda <= 1.0f);
            }
            /* same (seed, epoch, batch): same mix */
            static uint8_t data2[N * FBYTES];
            memcpy(data2, orig, sizeof(data2));
            feeder__augment_mix(&p, data2, N, FW, FH, FEEDER_LAYOUT_NHWC, 9, 1, batch, again,
                                scratch);
            ck_assert(memcmp(data, data2, sizeof(data)) == 0);
            ck_assert(mix[0].lambda == again[0].lambda);
            feeder_batch b;
            memset(&b, 0, sizeof(b));
            b.count = N;
            b.labels = labels;
            b.mix = mix;
            check_soft_labels(&b, 5);
            if (cut) { /* cutmix: lambda is the share of the image left */
                int kept = 0;
                for (int j = 0; j < FBYTES; j += 3)
                    kept += data[FBYTES + j] == orig[FBYTES + j];
                ck_assert(fabs(kept / (double)(FW * FH) - mix[1].lambda) < 0.02);
            }
        }
        ck_assert_int_eq(mixed, 20);
    }
    feeder_batch b;
    memset(&b, 0, sizeof(b));
    b.count = N;
    b.labels = labels;
    check_soft_labels(&b, 5); /* unmixed: one-hot */
    float soft[N * 4];
    ck_assert_int_eq(feeder_batch_soft_labels(&b, 4, soft), FEEDER_ERANGE);
}
END_TEST

START_TEST(beta_draws_have_the_right_mean)
{
    double s = 0, s2 = 0;
    for (uint64_t b = 0; b < 4000; b++) {
        double x = feeder__aug_beta(0.4, 1, 0, b, 16);
        ck_assert(x >= 0 && x <= 1);
        s += x;
        s2 += x * x;
    }
    double mean = s / 4000, var = s2 / 4000 - mean * mean;
    ck_assert(fabs(mean - 0.5) < 0.03);
    /* Beta(a, a): variance 1 / (4 (2a + 1)) = 0.1389 at a = 0.4 */
    ck_assert(fabs(var - 1.0 / (4 * 1.8)) < 0.02);
}
END_TEST

/* ---- through a loader ---- */

/* FEEDER_OPT_AUGMENT_ON_DEVICE of the next run_loader. */
static int aug_on_device;

static uint64_t run_loader(feeder_dataset *ds, const feeder_augment *aug, int workers, int layout,
                           int check_mix)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, aug_on_device), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 11), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 6), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 64), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 80), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, layout), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set_augment(ld, aug), 0);
    uint64_t h = BU_HASH_INIT;
    int mixed = 0;
    for (int e = 0; e < 2; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            h = bu_hash(h, b->data, (size_t)b->count * b->sample_bytes);
            h = bu_hash(h, b->labels, b->count * sizeof(int64_t));
            if (b->mix) {
                h = bu_hash(h, b->mix, b->count * sizeof(*b->mix));
                mixed++;
            }
            if (check_mix)
                check_soft_labels(b, (uint32_t)feeder_dataset_num_classes(ds));
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "feeder_next: %s: %s", feeder_strerror(rc),
                      feeder_loader_errmsg(ld));
    }
    ck_assert_int_eq(feeder_loader_set_augment(ld, aug), FEEDER_ESTATE);
    feeder_loader_destroy(ld);
    if (check_mix)
        ck_assert_int_gt(mixed, 0);
    return h;
}

START_TEST(loader_output_same_for_any_worker_count)
{
    tu_make_folder(tu_photos, tu_dir, "ds", 3, 7, "c", 100, 80, 90, 60);
    feeder_dataset *ds = tu_open_folder(tu_dir, "ds");
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_trivial(a, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE), 0);
    ck_assert_int_eq(feeder_augment_erase(a, 0.7, 0.02, 0.33, 0.3, 3.3, 0), 0);
    int layout = _i;
    uint64_t plain = run_loader(ds, NULL, 0, layout, 0);
    uint64_t h0 = run_loader(ds, a, 0, layout, 0);
    uint64_t h1 = run_loader(ds, a, 1, layout, 0);
    uint64_t h3 = run_loader(ds, a, 3, layout, 0);
    ck_assert_uint_ne(plain, h0);
    ck_assert_uint_eq(h0, h1);
    ck_assert_uint_eq(h0, h3);
    /* with the batch mixes, still the same */
    ck_assert_int_eq(feeder_augment_mixup(a, 0.2, 0.8), 0);
    ck_assert_int_eq(feeder_augment_cutmix(a, 1.0, 0.8), 0);
    uint64_t m0 = run_loader(ds, a, 0, layout, 1);
    uint64_t m3 = run_loader(ds, a, 3, layout, 1);
    ck_assert_uint_ne(m0, h0);
    ck_assert_uint_eq(m0, m3);
    feeder_augment_destroy(a);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- what the GPU layer shares with the CPU ops (augment/draw.c) ---- */

START_TEST(device_first_is_the_trailing_photometric_run)
{
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 0); /* no steps */
    ck_assert_int_eq(feeder_augment_flip(a, 0, 0.5), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 1);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 1);
    ck_assert_int_eq(feeder_augment_blur(a, 3, 0.1, 2.0), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 1);
    ck_assert_int_eq(feeder_augment_erase(a, 0.5, 0.02, 0.33, 0.3, 3.3, 0), 0); /* CPU only */
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 5);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 5);
    feeder_augment_destroy(a);
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0, 0, 0), 0);
    ck_assert_uint_eq(feeder__augment_device_first(&a->plan), 0); /* all of it */
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(jitter_draws_are_the_ops_applied)
{
    /* The jitter step through feeder_augment_apply is exactly its draws
     * applied op by op in their order: the draws the device gets are the
     * CPU's. Different indices give different orders. */
    enum { W = 24, H = 16 };
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.5, 0.5, 0.5, 0.2), 0);
    uint8_t img[W * H * 3], ref[W * H * 3];
    int orders = 0, last = -1;
    for (uint64_t index = 0; index < 12; index++) {
        for (size_t i = 0; i < sizeof(img); i++)
            img[i] = (uint8_t)(i * 37 + index * 11);
        memcpy(ref, img, sizeof(img));
        ck_assert_int_eq(feeder_augment_apply(a, img, W, H, FEEDER_LAYOUT_NHWC, 5, 2, index), 0);
        feeder__jitter_draw j;
        feeder__aug_jitter_draw(&a->plan.step[0], 5, 2, index, 0, &j);
        feeder__aimg im = feeder__aimg_make(ref, W, H, FEEDER_LAYOUT_NHWC);
        for (int k = 0; k < 4; k++) {
            int f = j.order[k];
            ck_assert(j.on[f]);
            if (f == 0)
                feeder__aug_brightness(im, j.value[f]);
            else if (f == 1)
                feeder__aug_contrast(im, j.value[f]);
            else if (f == 2)
                feeder__aug_saturation(im, j.value[f]);
            else
                feeder__aug_hue(im, j.value[f]);
        }
        ck_assert(j.value[3] >= -0.2 && j.value[3] <= 0.2);
        ck_assert(j.value[0] >= 0.5 && j.value[0] <= 1.5);
        ck_assert_mem_eq(img, ref, sizeof(img));
        int code = j.order[0] * 64 + j.order[1] * 16 + j.order[2] * 4 + j.order[3];
        orders += code != last;
        last = code;
    }
    ck_assert_int_gt(orders, 1);
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(mix_draw_is_the_batch_mix)
{
    /* feeder__augment_mix is the mix draw applied: mixup's fixed-point
     * weights on every byte against the rolled batch, the same entries. */
    enum { W = 6, H = 4, N = 3, SB = W * H * 3 };
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    uint8_t data[N * SB], orig[N * SB], scratch[SB];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = orig[i] = (uint8_t)(i * 29 + 7);
    feeder_mix mix[N], want[N];
    ck_assert_int_eq(feeder__augment_mix(&a->plan, data, N, W, H, FEEDER_LAYOUT_NHWC, 9, 1, 4,
                                         mix, scratch),
                     1);
    feeder__mix_draw m;
    ck_assert_int_eq(feeder__aug_mix_draw(&a->plan, N, W, H, 9, 1, 4, &m), FEEDER__MIX_MIXUP);
    ck_assert_uint_eq(m.A + m.B, 65536);
    feeder__aug_mix_entries(&m, N, want);
    ck_assert_mem_eq(mix, want, sizeof(mix));
    ck_assert_uint_eq(mix[0].partner, N - 1);
    for (size_t i = 0; i < sizeof(data); i++) {
        size_t n = i / SB, p = (n ? n - 1 : N - 1) * SB + i % SB;
        ck_assert_uint_eq(data[i], (m.A * orig[i] + m.B * orig[p] + 32768u) >> 16);
    }
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(augment_on_device_option_without_a_device)
{
    /* Host batches (device -1): the option changes nothing, and it is 0/1. */
    tu_make_folder(tu_photos, tu_dir, "ds", 3, 4, "c", 100, 80, 90, 60);
    feeder_dataset *ds = tu_open_folder(tu_dir, "ds");
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    double v = -1;
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, &v), 0);
    ck_assert(v == 0.0); /* default off */
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, 2), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, -1), FEEDER_ERANGE);
    feeder_loader_destroy(ld);
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.3), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    aug_on_device = 0;
    uint64_t off = run_loader(ds, a, 1, FEEDER_LAYOUT_NHWC, 1);
    aug_on_device = 1;
    uint64_t on = run_loader(ds, a, 1, FEEDER_LAYOUT_NHWC, 1);
    aug_on_device = 0;
    ck_assert_uint_eq(off, on);
    feeder_augment_destroy(a);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- the colour ops' bytes against the scalar float formulas ----
 *
 * augment/color.c computes the luma, saturation and hue ops in vectorised
 * chunks (an AVX2 clone where the CPU has it); these are the scalar
 * formulas it replaced, which match torchvision's float32 arithmetic
 * (the fixtures above). Every byte must equal theirs: on an image holding
 * every one of the 2^24 colours, and on an odd size whose pixel count is
 * no multiple of the chunk or the vector width. */

static uint8_t ref_trunc(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

static uint8_t ref_luma(uint8_t r, uint8_t g, uint8_t b)
{
    float l = 0.2989f * (float)r;
    l += 0.587f * (float)g;
    l += 0.114f * (float)b;
    return ref_trunc(l);
}

static void ref_hue_pixel(float *rgb, float shift)
{
    float r = rgb[0], g = rgb[1], b = rgb[2];
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    int eqc = maxc == minc;
    float cr = maxc - minc;
    float s = cr / (eqc ? 1.0f : maxc);
    float crd = eqc ? 1.0f : cr;
    float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
    float h;
    if (maxc == r)
        h = bc - gc;
    else if (maxc == g)
        h = 2.0f + rc - bc;
    else
        h = 4.0f + gc - rc;
    h = fmodf(h / 6.0f + 1.0f, 1.0f);
    h = h + shift;
    h = h - floorf(h);
    float v = maxc;
    float i = floorf(h * 6.0f), f = h * 6.0f - i;
    int ii = ((int)i % 6 + 6) % 6;
    float p = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
    float q = fminf(fmaxf(v * (1.0f - s * f), 0.0f), 1.0f);
    float t = fminf(fmaxf(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    static const uint8_t sel[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0},
                                      {0, 1, 2}};
    float vals[4] = {v, p, q, t};
    for (int c = 0; c < 3; c++)
        rgb[c] = vals[sel[ii][c]];
}

/* The reference ops on n interleaved RGB pixels. */
enum {
    REF_GRAY,
    REF_SAT13,
    REF_SAT03,
    REF_HUE01,
    REF_HUEM03,
    REF_CONTRAST13,
    REF_SAT5E6,
    REF_AUTOCONTRAST,
    NREF
};

/* autocontrast as torchvision computes it: per channel, (v - min) * (255 /
 * (max - min)) in float32, truncated; a flat channel as it is. */
static void ref_autocontrast(uint8_t *px, size_t n)
{
    for (int c = 0; c < 3; c++) {
        int lo = 255, hi = 0;
        for (size_t i = 0; i < n; i++) {
            lo = px[3 * i + c] < lo ? px[3 * i + c] : lo;
            hi = px[3 * i + c] > hi ? px[3 * i + c] : hi;
        }
        if (hi <= lo)
            continue;
        float mn = (float)lo, scale = 255.0f / ((float)hi - (float)lo);
        for (size_t i = 0; i < n; i++)
            px[3 * i + c] = ref_trunc(((float)px[3 * i + c] - mn) * scale);
    }
}

static void ref_op(int op, uint8_t *px, size_t n)
{
    if (op == REF_AUTOCONTRAST) {
        ref_autocontrast(px, n);
        return;
    }
    if (op == REF_CONTRAST13) {
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += ref_luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
        float mean = (float)((double)sum / (double)n), r = 1.3f, q = (float)(1.0 - 1.3);
        for (size_t i = 0; i < 3 * n; i++)
            px[i] = ref_trunc(r * (float)px[i] + q * mean);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = px + 3 * i, l = ref_luma(p[0], p[1], p[2]);
        if (op == REF_GRAY) {
            p[0] = p[1] = p[2] = l;
        } else if (op == REF_SAT13 || op == REF_SAT03 || op == REF_SAT5E6) {
            double f = op == REF_SAT13 ? 1.3 : op == REF_SAT03 ? 0.3 : 5e6;
            float a = (float)f, b = (float)(1.0 - f), g = b * (float)l;
            for (int c = 0; c < 3; c++)
                p[c] = ref_trunc(a * (float)p[c] + g);
        } else {
            float rgb[3] = {(float)p[0] / 255.0f, (float)p[1] / 255.0f, (float)p[2] / 255.0f};
            ref_hue_pixel(rgb, op == REF_HUE01 ? 0.1f : -0.3f);
            for (int c = 0; c < 3; c++)
                p[c] = ref_trunc(rgb[c] * 255.0f);
        }
    }
}

static void our_op(int op, feeder__aimg im)
{
    switch (op) {
    case REF_GRAY: feeder__aug_grayscale(im); break;
    case REF_SAT13: feeder__aug_saturation(im, 1.3); break;
    case REF_SAT03: feeder__aug_saturation(im, 0.3); break;
    case REF_HUE01: feeder__aug_hue(im, 0.1); break;
    case REF_HUEM03: feeder__aug_hue(im, -0.3); break;
    case REF_SAT5E6: feeder__aug_saturation(im, 5e6); break; /* the float clamp */
    case REF_AUTOCONTRAST: feeder__aug_autocontrast(im); break;
    default: feeder__aug_contrast(im, 1.3); break;
    }
}

/* Our op in both layouts against the reference on the same w x h pixels. */
static void check_exact(int op, const uint8_t *px, uint32_t w, uint32_t h)
{
    size_t n = (size_t)w * h;
    uint8_t *want = malloc(3 * n), *img = malloc(3 * n);
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(img);
    memcpy(want, px, 3 * n);
    ref_op(op, want, n);
    for (int layout = 0; layout < 2; layout++) {
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < 3; c++)
                img[layout ? c * n + i : 3 * i + c] = px[3 * i + c];
        our_op(op, feeder__aimg_make(img, w, h,
                                     layout ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC));
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < 3; c++) {
                uint8_t got = img[layout ? c * n + i : 3 * i + c];
                if (got != want[3 * i + c])
                    ck_abort_msg("op %d, %s, %ux%u: pixel %zu (%u, %u, %u) channel %d is %u, "
                                 "the float formula gives %u",
                                 op, layout ? "NCHW" : "NHWC", w, h, i, px[3 * i],
                                 px[3 * i + 1], px[3 * i + 2], c, got, want[3 * i + c]);
            }
    }
    free(want);
    free(img);
}

START_TEST(color_ops_exact_on_every_colour)
{
    enum { SIDE = 4096 }; /* 4096^2 = 2^24 pixels: (r, g, b) = the index's bytes */
    uint8_t *px = malloc((size_t)3 * SIDE * SIDE);
    ck_assert_ptr_nonnull(px);
    for (size_t i = 0; i < (size_t)SIDE * SIDE; i++) {
        px[3 * i] = (uint8_t)(i >> 16);
        px[3 * i + 1] = (uint8_t)(i >> 8);
        px[3 * i + 2] = (uint8_t)i;
    }
    check_exact(_i, px, SIDE, SIDE);
    free(px);
}
END_TEST

START_TEST(color_ops_exact_on_odd_sizes)
{
    /* 1031 x 3: three chunks of 1024 and 21 left; 37 x 29; 1 x 1 */
    static const uint32_t sizes[][2] = {{1031, 3}, {37, 29}, {1, 1}, {7, 1}};
    for (int k = 0; k < 4; k++) {
        uint32_t w = sizes[k][0], h = sizes[k][1];
        uint8_t *px = malloc((size_t)3 * w * h);
        ck_assert_ptr_nonnull(px);
        for (size_t i = 0; i < (size_t)3 * w * h; i++)
            px[i] = (uint8_t)(feeder_random(11, (uint64_t)k, i, 0) >> 24);
        if (_i == REF_AUTOCONTRAST) /* a range per channel short of 0..255 */
            for (size_t i = 0; i < (size_t)3 * w * h; i++)
                px[i] = (uint8_t)(20 + (i % 3) * 10 + px[i] % (120 + i % 3));
        check_exact(_i, px, w, h);
        free(px);
    }
}
END_TEST

/* Whether img (w x h, NHWC or NCHW) is px (NHWC) flipped end for end. */
static void check_hflip(const uint8_t *px, const uint8_t *img, uint32_t w, uint32_t h,
                        int layout, const char *path)
{
    size_t n = (size_t)w * h;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                size_t i = (size_t)y * w + x, j = (size_t)y * w + (w - 1 - x);
                ck_assert_msg(img[layout ? c * n + i : 3 * i + c] == px[3 * j + c],
                              "hflip %s %s, width %u: (%u, %u) channel %d",
                              layout ? "NCHW" : "NHWC", path, w, x, y, c);
            }
}

enum { HF_H = 3, HF_MAXW = 260 };

static void hflip_source(uint8_t *px, uint32_t w)
{
    for (size_t i = 0; i < 3 * (size_t)w * HF_H; i++)
        px[i] = (uint8_t)(feeder_random(12, w, i, 0) >> 24);
}

/* hflip's vectorised row reversal, every width from 1 to 260 (odd ones,
 * and tails past the 16- and 32-byte vectors and the 64-pixel groups),
 * both layouts, in place, exact. */
START_TEST(hflip_exact_on_every_width)
{
    static uint8_t px[3 * HF_MAXW * HF_H], img[3 * HF_MAXW * HF_H];
    for (uint32_t w = 1; w <= HF_MAXW; w++) {
        size_t n = (size_t)w * HF_H;
        hflip_source(px, w);
        for (int layout = 0; layout < 2; layout++) {
            for (size_t i = 0; i < n; i++)
                for (int c = 0; c < 3; c++)
                    img[layout ? c * n + i : 3 * i + c] = px[3 * i + c];
            feeder__aug_flip(feeder__aimg_make(img, w, HF_H,
                                               layout ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC),
                             0);
            check_hflip(px, img, w, HF_H, layout, "feeder__aug_flip");
        }
    }
}
END_TEST

#if FEEDER__AUG_X86
/* Each x86 NHWC flip the CPU can run, called directly (feeder__aug_flip
 * picks only the best), on every width from 1 to 260, in place, exact. */
START_TEST(hflip_x86_paths_exact)
{
    static uint8_t px[3 * HF_MAXW * HF_H], img[3 * HF_MAXW * HF_H];
    const struct {
        const char *name;
        int (*have)(void);
        void (*flip)(uint8_t *, uint32_t, size_t);
    } paths[] = {{"ssse3", feeder__aug_have_ssse3, feeder__aug_hflip3_ssse3},
                 {"vbmi", feeder__aug_have_vbmi, feeder__aug_hflip3_vbmi}};
    for (size_t k = 0; k < sizeof(paths) / sizeof(paths[0]); k++) {
        if (!paths[k].have())
            continue;
        for (uint32_t w = 1; w <= HF_MAXW; w++) {
            hflip_source(px, w);
            memcpy(img, px, 3 * (size_t)w * HF_H);
            paths[k].flip(img, w, HF_H);
            check_hflip(px, img, w, HF_H, 0, paths[k].name);
        }
    }
}
END_TEST
#endif

/* The warp's reference: geometry.c's scalar formulas (torchvision's
 * affine on uint8, float32 grid), written again plainly, per pixel. */
static void ref_theta(double angle, double tx, double ty, double scale, double shx, double shy,
                      uint32_t w, uint32_t h, float t[6])
{
    double rot = angle * M_PI / 180.0, sx = shx * M_PI / 180.0, sy = shy * M_PI / 180.0;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    double m[6] = {d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
    m[2] += m[0] * -tx + m[1] * -ty;
    m[5] += m[3] * -tx + m[4] * -ty;
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    for (int k = 0; k < 6; k++)
        t[k] = (float)m[k] / (k < 3 ? hw : hh);
}

static uint8_t ref_round(float v)
{
    v = nearbyintf(v);
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

/* Output pixel (x, y) channel c of a w x h x nc image `src` (NHWC). */
static uint8_t ref_warp_px(const uint8_t *src, uint32_t w, uint32_t h, int nc, const float t[6],
                           int interp, int fill, uint32_t x, uint32_t y, int c)
{
    float fw = (float)w, fh = (float)h;
    float yc = -fh * 0.5f + 0.5f + (float)y, xc = -fw * 0.5f + 0.5f + (float)x;
    float gx = xc * t[0] + yc * t[1] + t[2], gy = xc * t[3] + yc * t[4] + t[5];
    float ix = ((gx + 1.0f) * fw - 1.0f) / 2.0f, iy = ((gy + 1.0f) * fh - 1.0f) / 2.0f;
    if (interp == FEEDER_INTERP_NEAREST) {
        float rx = nearbyintf(ix), ry = nearbyintf(iy);
        if (!(rx >= 0.0f && ry >= 0.0f && rx < fw && ry < fh))
            return (uint8_t)(fill < 0 ? 0 : fill);
        return src[((size_t)ry * w + (size_t)rx) * nc + c];
    }
    float x0 = floorf(ix), y0 = floorf(iy), acc = 0.0f, mask = 0.0f;
    float wx[2] = {(x0 + 1.0f) - ix, ix - x0}, wy[2] = {(y0 + 1.0f) - iy, iy - y0};
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            float sx = x0 + (float)dx, sy = y0 + (float)dy;
            if (sx < 0.0f || sy < 0.0f || sx >= fw || sy >= fh)
                continue;
            float wgt = wx[dx] * wy[dy];
            acc += wgt * src[((size_t)sy * w + (size_t)sx) * nc + c];
            mask += wgt;
        }
    if (fill >= 0)
        acc = acc * mask + (1.0f - mask) * (float)fill;
    return ref_round(acc);
}

/* Rotate and affine (whose rows the x86 build runs 8 pixels at a time with
 * AVX2, the rest scalar) against the reference, exact: widths 1 to 21 and
 * 67, NHWC, NCHW and gray, nearest and bilinear, with and without a fill. */
START_TEST(warp_exact_on_odd_sizes)
{
    enum { MAXW = 67, MAXH = 13 };
    static uint8_t px[3 * MAXW * MAXH], img[3 * MAXW * MAXH];
    void *scratch = malloc(feeder__augment_scratch_bytes(MAXW, MAXH));
    static const uint32_t widths[] = {1, 2, 5, 7, 8, 9, 15, 16, 17, 21, 67};
    for (size_t k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
        uint32_t w = widths[k], h = k % 2 ? MAXH : 6;
        size_t n = (size_t)w * h;
        for (size_t i = 0; i < 3 * n; i++)
            px[i] = (uint8_t)(feeder_random(13, w, i, 0) >> 24);
        for (int v = 0; v < 8; v++) {
            int interp = v & 1, fill = v & 2 ? 77 : FEEDER_FILL_NONE;
            double angle = v & 4 ? 33.0 + k : -71.5 - k, sc = v & 4 ? 0.8 : 1.3;
            float t[6];
            ref_theta(angle, 1.0, -2.0, sc, 7.0, -4.0, w, h, t);
            for (int form = 0; form < 3; form++) { /* NHWC, NCHW, gray */
                int nc = form == 2 ? 1 : 3;
                for (size_t i = 0; i < n; i++)
                    for (int c = 0; c < nc; c++)
                        img[form == 1 ? c * n + i : nc * i + c] = px[nc * i + c];
                feeder__aimg im = feeder__aimg_make_ch(img, w, h, form == 1, nc);
                feeder__aug_affine(im, angle, 1.0, -2.0, sc, 7.0, -4.0, NULL, interp, fill,
                                   scratch);
                for (uint32_t y = 0; y < h; y++)
                    for (uint32_t x = 0; x < w; x++)
                        for (int c = 0; c < nc; c++) {
                            size_t i = (size_t)y * w + x;
                            uint8_t want = ref_warp_px(px, w, h, nc, t, interp, fill, x, y, c);
                            ck_assert_msg(img[form == 1 ? c * n + i : nc * i + c] == want,
                                          "form %d, %ux%u, variant %d: (%u, %u) channel %d is "
                                          "%u, the reference %u",
                                          form, w, h, v, x, y, c,
                                          img[form == 1 ? c * n + i : nc * i + c], want);
                        }
            }
        }
    }
    free(scratch);
}
END_TEST

/* Grayscale's AVX2 steps (32 NHWC pixels, 16 NCHW) and the scalar pixels
 * after them: every pixel count 1 to 100 as one row and as 3 rows, both
 * layouts, against the float formula, and the 64 bytes past the image
 * (which a step's 16-byte loads come near) left as they were. */
START_TEST(grayscale_exact_on_every_width)
{
    enum { MAXW = 100, GUARD = 64 };
    static uint8_t px[3 * MAXW * 3], img[3 * MAXW * 3 + GUARD];
    for (uint32_t w = 1; w <= MAXW; w++)
        for (uint32_t h = 1; h <= 3; h += 2) {
            size_t n = (size_t)w * h;
            for (size_t i = 0; i < 3 * n; i++)
                px[i] = (uint8_t)(feeder_random(14, w * 4 + h, i, 0) >> 24);
            for (int layout = 0; layout < 2; layout++) {
                for (size_t i = 0; i < n; i++)
                    for (int c = 0; c < 3; c++)
                        img[layout ? c * n + i : 3 * i + c] = px[3 * i + c];
                memset(img + 3 * n, 0xA5, GUARD);
                feeder__aug_grayscale(feeder__aimg_make(
                    img, w, h, layout ? FEEDER_LAYOUT_NCHW : FEEDER_LAYOUT_NHWC));
                for (size_t i = 0; i < n; i++) {
                    uint8_t want = ref_luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
                    for (int c = 0; c < 3; c++)
                        ck_assert_msg(img[layout ? c * n + i : 3 * i + c] == want,
                                      "%s %ux%u: pixel %zu channel %d is %u, the formula %u",
                                      layout ? "NCHW" : "NHWC", w, h, i, c,
                                      img[layout ? c * n + i : 3 * i + c], want);
                }
                for (size_t i = 0; i < GUARD; i++)
                    ck_assert_msg(img[3 * n + i] == 0xA5, "%ux%u: byte %zu past the image",
                                  w, h, i);
            }
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, ops_match_torchvision_nhwc, 0, NCASES);
    tcase_add_loop_test(tc, ops_match_torchvision_nchw, 0, NCASES);
    tcase_add_test(tc, same_draws_same_bytes);
    tcase_add_test(tc, trivial_augment_draws_every_op);
    tcase_add_test(tc, bad_parameters_give_erange_with_bounds);
    tcase_add_test(tc, mix_lambdas_and_soft_labels);
    tcase_add_test(tc, beta_draws_have_the_right_mean);
    tcase_add_test(tc, device_first_is_the_trailing_photometric_run);
    tcase_add_test(tc, jitter_draws_are_the_ops_applied);
    tcase_add_test(tc, mix_draw_is_the_batch_mix);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("exact");
    tcase_set_timeout(te, 60);
    tcase_add_loop_test(te, color_ops_exact_on_every_colour, 0, NREF);
    tcase_add_loop_test(te, color_ops_exact_on_odd_sizes, 0, NREF);
    tcase_add_test(te, hflip_exact_on_every_width);
#if FEEDER__AUG_X86
    tcase_add_test(te, hflip_x86_paths_exact);
#endif
    tcase_add_test(te, warp_exact_on_odd_sizes);
    tcase_add_test(te, grayscale_exact_on_every_width);
    suite_add_tcase(s, te);
    TCase *tl = tcase_create("loader");
    tcase_set_timeout(tl, 120);
    tcase_add_checked_fixture(tl, tu_setup, tu_teardown);
    tcase_add_loop_test(tl, loader_output_same_for_any_worker_count, 0, 2);
    tcase_add_test(tl, augment_on_device_option_without_a_device);
    suite_add_tcase(s, tl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
