/*
 * common/brace.c: shard-set patterns expand to exactly the names bash would
 * give, in order, and every malformed pattern fails naming where.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/brace.h"
#include "feeder.h"

/* Expand `pattern` and compare with the `n` names of `want`. */
static void expect(const char *pattern, const char *const *want, size_t n)
{
    char **names = NULL, err[256] = "";
    size_t count = 0;
    ck_assert_int_eq(feeder__brace_expand(pattern, &names, &count, err, sizeof err), 0);
    ck_assert_uint_eq(count, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_str_eq(names[i], want[i]);
    feeder__brace_free(names, count);
}

/* Expect a failure whose message holds `what`. */
static void refuse(const char *pattern, const char *what)
{
    char **names = (char **)1, err[256] = "";
    size_t count = 7;
    ck_assert_int_eq(feeder__brace_expand(pattern, &names, &count, err, sizeof err),
                     FEEDER_EINVAL);
    ck_assert_msg(strstr(err, what) != NULL, "\"%s\": message \"%s\" lacks \"%s\"", pattern,
                  err, what);
    ck_assert_ptr_eq(names, (char **)1);
    ck_assert_uint_eq(count, 7);
}

START_TEST(plain_name_is_itself)
{
    const char *want[] = {"data/train.tar"};
    expect("data/train.tar", want, 1);
    const char *empty[] = {""};
    expect("", empty, 1);
}
END_TEST

START_TEST(padded_range)
{
    const char *want[] = {"s-00008.tar", "s-00009.tar", "s-00010.tar", "s-00011.tar"};
    expect("s-{00008..00011}.tar", want, 4);
    const char *mixed[] = {"x98", "x99", "x100"};
    expect("x{98..100}", mixed, 3);
    const char *pad2[] = {"x098", "x099", "x100"};
    expect("x{098..100}", pad2, 3);
}
END_TEST

START_TEST(descending_and_single)
{
    const char *want[] = {"3", "2", "1"};
    expect("{3..1}", want, 3);
    const char *one[] = {"a5b"};
    expect("a{5..5}b", one, 1);
}
END_TEST

START_TEST(lists_and_products)
{
    const char *want[] = {"train-0.pack", "train-1.pack", "val-0.pack", "val-1.pack"};
    expect("{train,val}-{0..1}.pack", want, 4);
    const char *opt[] = {"a", "a.idx"};
    expect("a{,.idx}", opt, 2);
    const char *url[] = {"http://h:8/s-1.tar", "http://h:8/s-2.tar"};
    expect("http://h:8/s-{1..2}.tar", url, 2);
}
END_TEST

START_TEST(malformed_patterns_fail_naming_where)
{
    refuse("s-{0..3.tar", "'{' never closed at byte 2");
    refuse("s-0..3}.tar", "'}' without '{' at byte 6");
    refuse("s-{0,{1,2}}", "nested '{' at byte 2");
    refuse("s-{abc}", "neither a range");
    refuse("s-{}", "neither a range");
    refuse("s-{1..x}", "neither a range");
    refuse("s-{0..1234567890123456789}", "neither a range");
    refuse("{0..999}{0..9999}", "more than 1000000 names");
}
END_TEST

START_TEST(null_arguments)
{
    char **names;
    size_t count;
    char err[64] = "";
    ck_assert_int_eq(feeder__brace_expand(NULL, &names, &count, err, sizeof err), FEEDER_EINVAL);
    ck_assert_int_eq(feeder__brace_expand("a", NULL, &count, NULL, 0), FEEDER_EINVAL);
    feeder__brace_free(NULL, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("brace");
    TCase *tc = tcase_create("expand");
    tcase_add_test(tc, plain_name_is_itself);
    tcase_add_test(tc, padded_range);
    tcase_add_test(tc, descending_and_single);
    tcase_add_test(tc, lists_and_products);
    tcase_add_test(tc, malformed_patterns_fail_naming_where);
    tcase_add_test(tc, null_arguments);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
