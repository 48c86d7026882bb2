/*
 * The option value names (feeder_option_value_name, feeder_option_value,
 * feeder_option_value_names): every value of every enum-valued option
 * round-trips value -> name -> value, names ignore case, and unknown options,
 * names and values give NULL or FEEDER_EINVAL as the header says.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"

static const struct {
    feeder_option opt;
    int count; /* values 0 .. count-1 */
} enums[] = {
    {FEEDER_OPT_PIPELINE, 3}, {FEEDER_OPT_LAYOUT, 2},       {FEEDER_OPT_DECODER, 4},
    {FEEDER_OPT_IO, 3},       {FEEDER_OPT_ERROR_POLICY, 3}, {FEEDER_OPT_PIN_MODE, 3},
    {FEEDER_OPT_DTYPE, 4},    {FEEDER_OPT_PACKED_READ, 4},
};
#define NENUMS (sizeof(enums) / sizeof(enums[0]))

START_TEST(round_trip)
{
    for (size_t k = 0; k < NENUMS; k++) {
        double min, max;
        ck_assert_int_eq(feeder_option_bounds(enums[k].opt, &min, &max), 0);
        /* the names cover exactly the option's bounds */
        ck_assert_int_eq((int)min, 0);
        ck_assert_int_eq((int)max, enums[k].count - 1);
        for (int v = 0; v < enums[k].count; v++) {
            const char *name = feeder_option_value_name(enums[k].opt, v);
            ck_assert_ptr_nonnull(name);
            int back = -1;
            ck_assert_int_eq(feeder_option_value(enums[k].opt, name, &back), 0);
            ck_assert_int_eq(back, v);
            ck_assert_str_eq(feeder_option_value_name(enums[k].opt, back), name);
        }
        ck_assert_ptr_null(feeder_option_value_name(enums[k].opt, enums[k].count));
        ck_assert_ptr_null(feeder_option_value_name(enums[k].opt, -1));
    }
}
END_TEST

START_TEST(spelled_as_documented)
{
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_DECODER, FEEDER_DECODER_TURBO), "turbo");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_DECODER, FEEDER_DECODER_HYBRID), "hybrid");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_LAYOUT, FEEDER_LAYOUT_NCHW), "nchw");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_DTYPE, FEEDER_DTYPE_BFLOAT16), "bfloat16");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_PIN_MODE, FEEDER_PIN_REGISTER), "register");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_PACKED_READ, FEEDER_PACKED_READ_AUTO),
                     "auto");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_DROP),
                     "drop");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_RESIZE),
                     "resize");
    ck_assert_str_eq(feeder_option_value_name(FEEDER_OPT_IO, FEEDER_IO_PREAD), "pread");
    int v = -1;
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_LAYOUT, "NCHW", &v), 0);
    ck_assert_int_eq(v, FEEDER_LAYOUT_NCHW);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, "NvJpeg", &v), 0);
    ck_assert_int_eq(v, FEEDER_DECODER_NVJPEG);
}
END_TEST

START_TEST(unknown)
{
    int v = 42;
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, "jpeg", &v), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, "", &v), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, "roi ", &v), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, NULL, &v), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_DECODER, "roi", NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value(FEEDER_OPT_BATCH_SIZE, "roi", &v), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value((feeder_option)9999, "roi", &v), FEEDER_EINVAL);
    ck_assert_int_eq(v, 42);
    ck_assert_ptr_null(feeder_option_value_name(FEEDER_OPT_BATCH_SIZE, 0));
    ck_assert_ptr_null(feeder_option_value_name((feeder_option)9999, 0));
    ck_assert_ptr_null(feeder_option_value_name(FEEDER_OPT_CHANNELS, 1));
}
END_TEST

START_TEST(joined)
{
    char buf[64];
    int n = feeder_option_value_names(FEEDER_OPT_DECODER, ", ", buf, sizeof(buf));
    ck_assert_str_eq(buf, "turbo, roi, nvjpeg, hybrid");
    ck_assert_int_eq(n, (int)strlen(buf));
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_LAYOUT, "|", buf, sizeof(buf)), 9);
    ck_assert_str_eq(buf, "nhwc|nchw");
    /* truncated as snprintf truncates, with the whole length returned */
    char small[6];
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_DECODER, ", ", small, sizeof(small)),
                     26);
    ck_assert_str_eq(small, "turbo");
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_DECODER, ", ", NULL, 0), 26);
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_SEED, ", ", buf, sizeof(buf)),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_DECODER, NULL, buf, sizeof(buf)),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder_option_value_names(FEEDER_OPT_DECODER, ", ", NULL, 4), FEEDER_EINVAL);
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("names");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, spelled_as_documented);
    tcase_add_test(tc, unknown);
    tcase_add_test(tc, joined);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(names_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
