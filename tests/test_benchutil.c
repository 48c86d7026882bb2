/*
 * benchutil's report helpers, which every benchmark's record goes through:
 * exact table text (alignment counted in code points), JSON string escaping,
 * shell quoting of the command line, the median, the BENCHMARKS.md record
 * (fresh file and appended), its failure path, and the default dataset's
 * location and maker; the CPU-time readers behind bench_loader's "CPU cores
 * busy", against processes that spin for a known CPU time.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"

#ifndef FEEDER_TEST_PHOTOS
#define FEEDER_TEST_PHOTOS "bench/photos"
#endif

static char *tmpdir_new(void)
{
    char *d = strdup("/tmp/feeder-test-benchutil-XXXXXX");
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static char *slurp(const char *path)
{
    uint8_t *data;
    size_t len;
    ck_assert_int_eq(bu_read_file(path, &data, &len), 0);
    char *s = malloc(len + 1);
    ck_assert_ptr_nonnull(s);
    memcpy(s, data, len);
    s[len] = 0;
    free(data);
    return s;
}

START_TEST(test_sbuf_grows)
{
    bu_sbuf b = {0};
    for (int i = 0; i < 1000; i++)
        bu_sb_printf(&b, "%04d,", i);
    ck_assert_uint_eq(b.len, 5000);
    ck_assert_uint_eq(strlen(b.p), 5000);
    ck_assert(strncmp(b.p, "0000,0001,0002,", 15) == 0);
    ck_assert_str_eq(b.p + 4995, "0999,");
    free(b.p);
}
END_TEST

START_TEST(test_json_str)
{
    bu_sbuf b = {0};
    bu_sb_json_str(&b, "a\"b\\c\nd\x01 µs");
    bu_sb_printf(&b, " ");
    bu_sb_json_str(&b, NULL);
    ck_assert_str_eq(b.p, "\"a\\\"b\\\\c\\u000ad\\u0001 µs\" \"\"");
    free(b.p);
}
END_TEST

START_TEST(test_median)
{
    const double odd[] = {5, 1, 4, 2, 3};
    const double even[] = {10, 2, 8, 4};
    const double one[] = {7.5};
    ck_assert(bu_median(odd, 5) == 3);
    ck_assert(bu_median(even, 4) == 6);
    ck_assert(bu_median(one, 1) == 7.5);
    /* The input is left as it was. */
    ck_assert(odd[0] == 5 && odd[4] == 3);
}
END_TEST

START_TEST(test_table_exact)
{
    const char *head[] = {"name", "µs/img", "GB/s"};
    const int right[] = {0, 1, 1};
    bu_table t;
    bu_table_init(&t, 3, head, right);
    char(*r)[BU_TABLE_CELL] = bu_table_row(&t);
    snprintf(r[0], BU_TABLE_CELL, "pinned");
    snprintf(r[1], BU_TABLE_CELL, "1.5");
    snprintf(r[2], BU_TABLE_CELL, "55.0");
    r = bu_table_row(&t);
    snprintf(r[0], BU_TABLE_CELL, "µ");
    snprintf(r[1], BU_TABLE_CELL, "12345.0");
    /* r[2] left empty */
    bu_sbuf b = {0};
    bu_table_render(&t, &b);
    ck_assert_str_eq(b.p, "| name   |  µs/img | GB/s |\n"
                          "| ------ | ------: | ---: |\n"
                          "| pinned |     1.5 | 55.0 |\n"
                          "| µ      | 12345.0 |      |\n");
    free(b.p);
    bu_table_free(&t);
    ck_assert_ptr_null(t.cell);
    ck_assert_uint_eq(t.nrows, 0);
}
END_TEST

START_TEST(test_table_many_rows)
{
    const char *head[] = {"i"};
    const int right[] = {1};
    bu_table t;
    bu_table_init(&t, 1, head, right);
    for (int i = 0; i < 100; i++)
        snprintf(bu_table_row(&t)[0], BU_TABLE_CELL, "%d", i);
    ck_assert_uint_eq(t.nrows, 100);
    bu_sbuf b = {0};
    bu_table_render(&t, &b);
    /* header + rule + 100 rows, each "| xx |\n" of 7 bytes */
    ck_assert_uint_eq(b.len, 102 * 7);
    ck_assert(strstr(b.p, "|  0 |\n|  1 |\n") != NULL);
    ck_assert_str_eq(b.p + b.len - 7, "| 99 |\n");
    free(b.p);
    bu_table_free(&t);
}
END_TEST

START_TEST(test_command_line_quoting)
{
    char *argv[] = {"/some/path/prog", "--sizes", "64K,1M", "--label", "my box's GPU", "",
                    "a=b:c@d%e+f", NULL};
    bu_sbuf b = {0};
    bu_command_line(&b, "prog", 7, argv);
    ck_assert_str_eq(b.p, "prog --sizes 64K,1M --label 'my box'\\''s GPU' '' a=b:c@d%e+f");
    free(b.p);
}
END_TEST

START_TEST(test_machine_label)
{
    bu_machine m;
    bu_machine_init(&m, "lab box");
    ck_assert_str_eq(m.label, "lab box");
    ck_assert_int_ge(m.cores, 1);
    ck_assert_uint_eq(strlen(m.date), strlen("2026-01-01 00:00 UTC"));
    ck_assert(strcmp(m.date + 16, " UTC") == 0);
    bu_machine_init(&m, NULL);
    char want[64];
    snprintf(want, sizeof(want), "(%ld cores)", m.cores);
    ck_assert(strstr(m.label, want) != NULL);
}
END_TEST

START_TEST(test_append_record)
{
    char *dir = tmpdir_new();
    char path[512];
    snprintf(path, sizeof(path), "%s/sub/B.md", dir);
    bu_machine m;
    memset(&m, 0, sizeof(m));
    snprintf(m.label, sizeof(m.label), "box (2 cores)");
    snprintf(m.date, sizeof(m.date), "2026-01-02 03:04 UTC");
    bu_append_record(path, "/nonexistent", "prog", &m, "prog, first", "prog --a", "body 1\n");
    bu_append_record(path, "/nonexistent", "prog", &m, "prog, second", "prog --b", "body 2\n");
    char *s = slurp(path);
    ck_assert_str_eq(s, "# Benchmarks\n\nRecords appended by the benchmarks in `bench/` "
                        "(`bench_loader`, `bench_transfer`) and `bench/run_figures.sh`, oldest "
                        "first. Each gives the exact command, the date and the machine.\n"
                        "\n## 2026-01-02 03:04 UTC, box (2 cores): prog, first\n\n```\nprog --a\n"
                        "```\n\nbody 1\n"
                        "\n## 2026-01-02 03:04 UTC, box (2 cores): prog, second\n\n```\nprog --b\n"
                        "```\n\nbody 2\n");
    free(s);
    /* path NULL: docs/BENCHMARKS.md under the source folder. */
    bu_append_record(NULL, dir, "prog", &m, "t", "c", "b\n");
    snprintf(path, sizeof(path), "%s/docs/BENCHMARKS.md", dir);
    s = slurp(path);
    ck_assert(strstr(s, "\n## 2026-01-02 03:04 UTC, box (2 cores): t\n\n```\nc\n```\n\nb\n") != NULL);
    free(s);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_append_record_unwritable)
{
    /* A folder where a file stands: the record cannot be written. It warns
     * on stderr and returns; nothing is created. */
    char *dir = tmpdir_new();
    char file[512], path[600];
    snprintf(file, sizeof(file), "%s/plain", dir);
    ck_assert_int_eq(bu_write_file(file, "x", 1), 0);
    snprintf(path, sizeof(path), "%s/B.md", file);
    bu_machine m;
    bu_machine_init(&m, "x");
    bu_append_record(path, NULL, "prog", &m, "t", "c", "b\n");
    struct stat st;
    ck_assert_int_eq(stat(path, &st), -1);
    ck_assert_int_eq(stat(file, &st), 0);
    ck_assert_int_eq(st.st_size, 1);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

/* The report as text, as JSON, and the record: stdout goes to a file (Check
 * runs each test in its own process). */
static char *report_to(const char *dir, const char *name, int as_json, const char *append_to)
{
    char out[512];
    snprintf(out, sizeof(out), "%s/%s", dir, name);
    fflush(stdout);
    int saved = dup(1);
    ck_assert(freopen(out, "w", stdout) != NULL);
    bu_machine m;
    memset(&m, 0, sizeof(m));
    snprintf(m.label, sizeof(m.label), "box (2 cores)");
    snprintf(m.date, sizeof(m.date), "2026-01-02 03:04 UTC");
    bu_report r = {0};
    bu_sb_printf(&r.header, "head\n");
    bu_sb_printf(&r.table, "| a |\n");
    bu_sb_printf(&r.footer, "foot\n");
    if (as_json)
        bu_sb_printf(&r.json, "{}\n");
    bu_report_finish(&r, as_json, append_to, "prog", &m, "prog, t", "prog --x");
    ck_assert_ptr_null(r.header.p);
    ck_assert_ptr_null(r.json.p);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    return slurp(out);
}

START_TEST(test_report_finish)
{
    char *dir = tmpdir_new();
    char rec[512];
    snprintf(rec, sizeof(rec), "%s/R.md", dir);
    char *s = report_to(dir, "text", 0, NULL);
    ck_assert_str_eq(s, "\nhead\n\n| a |\n\nfoot\n");
    free(s);
    s = report_to(dir, "json", 1, rec);
    ck_assert_str_eq(s, "{}\n");
    free(s);
    s = slurp(rec);
    ck_assert(strstr(s, "\n## 2026-01-02 03:04 UTC, box (2 cores): prog, t\n\n```\nprog --x\n"
                        "```\n\nhead\n\n| a |\n\nfoot\n") != NULL);
    free(s);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_stamp)
{
    char *dir = tmpdir_new();
    ck_assert_int_eq(bu_stamp_matches(dir, "a=1\n"), -1);
    ck_assert_int_eq(bu_stamp_write(dir, "a=1\n"), 0);
    ck_assert_int_eq(bu_stamp_matches(dir, "a=1\n"), 1);
    ck_assert_int_eq(bu_stamp_matches(dir, "a=2\n"), 0);
    ck_assert_int_eq(bu_stamp_matches(dir, "a=1\nmore"), 0);
    char p[600];
    snprintf(p, sizeof(p), "%s/.complete", dir);
    char *s = slurp(p);
    ck_assert_str_eq(s, "a=1\n");
    free(s);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(test_default_dataset_dir)
{
    char out[512];
    setenv("FEEDER_DATA", "/data/mine", 1);
    bu_default_dataset_dir(out, sizeof(out), 2000);
    ck_assert_str_eq(out, "/data/mine");
    unsetenv("FEEDER_DATA");
    setenv("HOME", "/home/u", 1);
    bu_default_dataset_dir(out, sizeof(out), 2000);
    ck_assert_str_eq(out, "/home/u/.cache/feeder/default-2000");
    setenv("HOME", "", 1);
    bu_default_dataset_dir(out, sizeof(out), 30);
    ck_assert_str_eq(out, "/tmp/.cache/feeder/default-30");
}
END_TEST

START_TEST(test_ensure_default_dataset)
{
    unsetenv("FEEDER_BENCH_PHOTOS");
    char *dir = tmpdir_new();
    char data[512], err[1024] = "";
    snprintf(data, sizeof(data), "%s/ds", dir);
    /* Missing photos: the error names the folder and what to set. */
    int rc = bu_ensure_default_dataset(data, 10, "/nonexistent/photos", err, sizeof(err));
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_str_eq(err, "loading the seed photos: /nonexistent/photos: No such file or "
                          "directory (set FEEDER_BENCH_PHOTOS to the bench/photos folder, or "
                          "pass --data)");
    /* The environment wins over the argument. */
    setenv("FEEDER_BENCH_PHOTOS", FEEDER_TEST_PHOTOS, 1);
    ck_assert_int_eq(bu_ensure_default_dataset(data, 10, "/nonexistent/photos", err,
                                               sizeof(err)), 0);
    unsetenv("FEEDER_BENCH_PHOTOS");
    char p[600];
    struct stat st;
    for (int c = 0; c < 10; c++) {
        snprintf(p, sizeof(p), "%s/class_%02d/img_00000.jpg", data, c);
        ck_assert_int_eq(stat(p, &st), 0);
        ck_assert_int_gt(st.st_size, 1000);
    }
    snprintf(p, sizeof(p), "%s/.complete", data);
    char *stamp = slurp(p);
    ck_assert_str_eq(stamp, "classes=10 per_class=1 seed=1 v1\n");
    free(stamp);
    /* Made already: no photos needed to say so... */
    ck_assert_int_eq(bu_ensure_default_dataset(data, 10, FEEDER_TEST_PHOTOS, err, sizeof(err)),
                     0);
    /* ...and an unwritable place fails with the folder in the message. */
    snprintf(p, sizeof(p), "%s/ds/class_00/img_00000.jpg/x", dir);
    rc = bu_ensure_default_dataset(p, 10, FEEDER_TEST_PHOTOS, err, sizeof(err));
    ck_assert_int_eq(rc, -ENOTDIR);
    char want[1024];
    snprintf(want, sizeof(want), "making the default dataset in %s: Not a directory (set "
             "FEEDER_DATA to a writable folder, or pass --data)", p);
    ck_assert_str_eq(err, want);
    bu_rm_rf(dir);
    free(dir);
}
END_TEST

/* Spin until this process has used `ms` more CPU milliseconds. */
static void spin_cpu_ms(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    double end = t.tv_sec + t.tv_nsec / 1e9 + ms / 1e3;
    volatile uint64_t x = 0;
    do {
        for (int i = 0; i < 10000; i++)
            x += (uint64_t)i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while (t.tv_sec + t.tv_nsec / 1e9 < end);
}

/* A child spins 300 ms of CPU, then waits: /proc/PID/stat must say ~300 ms
 * while it lives (tick resolution, 10 ms), RUSAGE_CHILDREN must gain as much
 * once it is reaped, and RUSAGE_SELF must see the parent's own 200 ms. */
START_TEST(test_cpu_time_of_busy_loop)
{
    int go[2], done[2];
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(done), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        spin_cpu_ms(300);
        char c = 1;
        if (write(done[1], &c, 1) != 1)
            _exit(1);
        if (read(go[0], &c, 1) != 1) /* stay alive until the parent has looked */
            _exit(1);
        _exit(0);
    }
    char c;
    ck_assert_int_eq(read(done[0], &c, 1), 1);
    int64_t child = bu_proc_cpu_ns(pid);
    ck_assert_int_ge(child, 280 * 1000000ll);
    ck_assert_int_le(child, 400 * 1000000ll);
    uint64_t before = bu_rusage_cpu_ns(1);
    ck_assert_int_eq(write(go[1], &c, 1), 1);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t reaped = bu_rusage_cpu_ns(1) - before;
    ck_assert_uint_ge(reaped, 290 * 1000000ull);
    ck_assert_uint_le(reaped, 420 * 1000000ull);
    /* A reaped process has no /proc entry left. */
    ck_assert_int_eq(bu_proc_cpu_ns(pid), -1);
    ck_assert_int_eq(bu_proc_cpu_ns(-5), -1);

    uint64_t self0 = bu_rusage_cpu_ns(0);
    spin_cpu_ms(200);
    uint64_t self = bu_rusage_cpu_ns(0) - self0;
    ck_assert_uint_ge(self, 199 * 1000000ull);
    ck_assert_uint_le(self, 300 * 1000000ull);
    /* /proc of this very process agrees with getrusage to a few ticks. */
    int64_t mine = bu_proc_cpu_ns(getpid());
    ck_assert_int_ge(mine, 0);
    ck_assert_int_le(llabs(mine - (int64_t)bu_rusage_cpu_ns(0)), 50 * 1000000ll);
    close(go[0]);
    close(go[1]);
    close(done[0]);
    close(done[1]);
}
END_TEST

static Suite *benchutil_suite(void)
{
    Suite *s = suite_create("benchutil");
    TCase *tc = tcase_create("benchutil");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sbuf_grows);
    tcase_add_test(tc, test_json_str);
    tcase_add_test(tc, test_median);
    tcase_add_test(tc, test_table_exact);
    tcase_add_test(tc, test_table_many_rows);
    tcase_add_test(tc, test_command_line_quoting);
    tcase_add_test(tc, test_machine_label);
    tcase_add_test(tc, test_append_record);
    tcase_add_test(tc, test_append_record_unwritable);
    tcase_add_test(tc, test_report_finish);
    tcase_add_test(tc, test_stamp);
    tcase_add_test(tc, test_default_dataset_dir);
    tcase_add_test(tc, test_ensure_default_dataset);
    tcase_add_test(tc, test_cpu_time_of_busy_loop);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(benchutil_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
