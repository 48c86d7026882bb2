/*
 * Files that are no regular files: a FIFO named by a
 * list file, as a packed file or as a list file, and a device as a
 * list file, are refused by their type at once, with a message that says
 * what they are, through every read path and with or without workers.
 * Before, open() blocked forever on a FIFO (and io_uring reported it as a
 * folder), and /dev/zero as a list file was read until memory ran out.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "feeder.h"
#include "testutil.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-ftype-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void) { bu_rm_rf(tmpdir); }

START_TEST(fifo_sample_fails_its_batch)
{
    bu_photos *photos;
    char err[512];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
    tu_make_folder(photos, tmpdir, "imgs", 1, 3, "c", 64, 20, 48, 20);
    bu_photos_free(photos);
    char fifo[600];
    snprintf(fifo, sizeof(fifo), "%s/imgs/c0/001.jpg", tmpdir);
    ck_assert_int_eq(unlink(fifo), 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    /* A list file names it (a folder's walk takes regular files only). */
    char list[600];
    snprintf(list, sizeof(list), "%s/imgs/list.txt", tmpdir);
    FILE *lf = fopen(list, "w");
    ck_assert_ptr_nonnull(lf);
    fputs("c0/000.jpg 0\nc0/001.jpg 0\nc0/002.jpg 0\n", lf);
    fclose(lf);
    static const int ios[] = {FEEDER_IO_PREAD, FEEDER_IO_AUTO};
    for (int v = 0; v < 4; v++) {
        feeder_dataset *ds;
        ck_assert_int_eq(feeder_dataset_open_list(list, NULL, &ds, err, sizeof(err)), 0);
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, v / 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, ios[v % 2]), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 10000), 0);
        feeder_batch *b;
        int ok = 0, failed = 0, rc;
        while ((rc = feeder_next(ld, &b)) != FEEDER_DONE) {
            if (rc == 0) {
                ck_assert_msg(b->indices[0] != 1, "v %d: the FIFO arrived as a batch", v);
                ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
                ok++;
                continue;
            }
            ck_assert_int_eq(rc, -EINVAL);
            char want[700];
            snprintf(want, sizeof(want), "batch 1 of epoch 0: sample 1 (%s): a FIFO, not a regular file: %s", fifo,
                     strerror(EINVAL));
            ck_assert_str_eq(feeder_loader_errmsg(ld), want);
            failed++;
        }
        ck_assert_int_eq(ok, 2);
        ck_assert_int_eq(failed, 1);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

START_TEST(fifo_or_device_as_packed_or_list_file)
{
    char fifo[600], err[700], want[800];
    snprintf(fifo, sizeof(fifo), "%s/pipe", tmpdir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(fifo, &ds, err, sizeof(err)), FEEDER_EFORMAT);
    snprintf(want, sizeof(want), "%s: not a regular file", fifo);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_list(fifo, NULL, &ds, err, sizeof(err)), -EINVAL);
    snprintf(want, sizeof(want), "%s: cannot read list file: a FIFO, not a regular file", fifo);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_list("/dev/zero", NULL, &ds, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "/dev/zero: cannot read list file: a character device, not a regular "
                          "file");
    ck_assert_int_eq(feeder_dataset_open_list(tmpdir, NULL, &ds, err, sizeof(err)), -EISDIR);
    ck_assert_ptr_null(ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("filetypes");
    TCase *tc = tcase_create("filetypes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fifo_sample_fails_its_batch);
    tcase_add_test(tc, fifo_or_device_as_packed_or_list_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
