/*
 * Bad input: a list file streamed with bounded
 * memory, a resume state from other files, a changed label in a packed file,
 * symlink loops, the skip and drop policies' exact replacements, and
 * feeder-pack's own checks. Check forks each test.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "common/common.h"
#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "feeder.h"

/* The state of `ld` after its first batch (whose channel count goes to
 * *channels when not NULL); `ld` is destroyed. */
static uint8_t *save_after_one_batch(feeder_loader *ld, size_t *len, uint32_t *channels)
{
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    if (channels)
        *channels = b->channels;
    feeder_batch_release(b, NULL);
    ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, len), 0);
    uint8_t *blob = malloc(*len);
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, *len, len), 0);
    feeder_loader_destroy(ld);
    return blob;
}

static void reseal(uint8_t *b, size_t len)
{
    memset(b + 12, 0, 4);
    uint32_t c = feeder__crc32c(0, b, len);
    for (int i = 0; i < 4; i++)
        b[12 + i] = (uint8_t)(c >> (8 * i));
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A sparse 2 GiB list file of zeros, or of one endless line: refused at its
 * first line, without reading (or holding) the rest. */
START_TEST(test_list_file_streams_bounded)
{
    char lst[512], want[700], err[1024];
    tu_path(lst, sizeof(lst), "big.txt");
    const off_t size = (off_t)2 << 30;
    int fd = open(lst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, size), 0);
    close(fd);
    long before = max_rss_kib();
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:1: line is longer than the limit of %d bytes", lst,
             FEEDER__LIST_LINE_MAX);
    ck_assert_str_eq(err, want);
    /* 5000 bytes of path and no newline, then the hole. */
    fd = open(lst, O_WRONLY);
    char *a = malloc(5000);
    memset(a, 'a', 5000);
    ck_assert_int_eq(pwrite(fd, "x.jpg 1\n", 8, 0), 8);
    ck_assert_int_eq(pwrite(fd, a, 5000, 8), 5000);
    free(a);
    close(fd);
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:2: line is longer than the limit of %d bytes", lst,
             FEEDER__LIST_LINE_MAX);
    ck_assert_str_eq(err, want);
    ck_assert_msg(max_rss_kib() - before < 32 * 1024, "RSS grew by %ld KiB",
                  max_rss_kib() - before);
    /* Lines split across read chunks parse as whole lines. */
    FILE *f = fopen(lst, "w");
    for (int i = 0; i < 20000; i++)
        fprintf(f, "d/%05d_some_longer_name.jpg %d\n", i, i % 7);
    fclose(f);
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 20000);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 7);
    snprintf(want, sizeof(want), "%s/d/%05d_some_longer_name.jpg", tu_dir, 12345);
    ck_assert_str_eq(feeder_dataset_path(ds, 12345), want);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A file renamed between save and resume (same count): the state names the
 * dataset by a fingerprint and refuses it; a moved root still resumes; a
 * version 1 blob (no fingerprint), or one with the field zeroed, is refused. */
START_TEST(test_resume_checks_dataset_fingerprint)
{
    tu_folder("d", 2, 4);
    char root[512], from[600], to[600], moved[512];
    tu_path(root, sizeof(root), "d");
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    size_t len;
    uint8_t *blob = save_after_one_batch(tu_small_loader(ds, 0, 2), &len, NULL);
    feeder_dataset_destroy(ds);
    /* The same files under another root: accepted. */
    tu_path(moved, sizeof(moved), "moved");
    ck_assert_int_eq(rename(root, moved), 0);
    ds = tu_open_folder(tu_dir, "moved");
    feeder_loader *ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* One file renamed, in the same place of the sorted order. */
    snprintf(from, sizeof(from), "%s/c0/001.jpg", moved);
    snprintf(to, sizeof(to), "%s/c0/001b.jpg", moved);
    ck_assert_int_eq(rename(from, to), 0);
    ds = tu_open_folder(tu_dir, "moved");
    ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_EMISMATCH);
    const char *want = "state blob does not match the loader: the dataset's files differ";
    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), want, strlen(want)) == 0, "%s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    /* The same blob rewritten as version 1 (no fingerprint) or with its
     * fingerprint zeroed: refused, not waved through unchecked. */
    const char *nofp = "state blob does not match the loader: the blob records no dataset "
                       "fingerprint (version 1, or the field is 0)";
    uint8_t *v1 = malloc(len - 24);
    memcpy(v1, blob, 176);
    memcpy(v1 + 176, blob + 200, len - 200);
    v1[4] = 1;
    v1[8] = (uint8_t)(len - 24);
    reseal(v1, len - 24);
    ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, v1, len - 24), FEEDER_EMISMATCH);
    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), nofp, strlen(nofp)) == 0, "%s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    memset(blob + 176, 0, 8);
    reseal(blob, len);
    ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_EMISMATCH);
    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), nofp, strlen(nofp)) == 0, "%s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(v1);
    free(blob);
}
END_TEST

/* A version 4 blob rewritten as version 2 or 3 (their 184-byte header: no
 * decode limits, the map right after the fingerprint), resealed. */
static uint8_t *older_blob(const uint8_t *blob, size_t len, uint8_t version, size_t *out_len)
{
    ck_assert_uint_lt(len - 16, 256);
    uint8_t *v = malloc(len - 16);
    ck_assert_ptr_nonnull(v);
    memcpy(v, blob, 184);
    memcpy(v + 184, blob + 200, len - 200);
    v[4] = version;
    v[8] = (uint8_t)(len - 16);
    reseal(v, len - 16);
    *out_len = len - 16;
    return v;
}

static feeder_loader *channels_loader(feeder_dataset *ds, int channels)
{
    feeder_loader *ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, channels), 0);
    return ld;
}

/* The state records FEEDER_OPT_CHANNELS (blob version 3): a blob of a gray
 * loader does not resume an RGB one, nor the other way round; the same
 * channels resume at the next batch; a version 2 blob (0 in the field)
 * does not say and is not compared. */
START_TEST(test_resume_checks_channels)
{
    tu_folder("d", 2, 4);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    size_t len[2];
    uint8_t *blob[2];
    for (int k = 0; k < 2; k++) {
        uint32_t channels;
        blob[k] = save_after_one_batch(channels_loader(ds, k ? 3 : 1), &len[k], &channels);
        ck_assert_uint_eq(channels, k ? 3 : 1);
        ck_assert_uint_eq(blob[k][4], 4);
        ck_assert_uint_eq(blob[k][116], k ? 3 : 1);
    }
    const char *want[2] = {
        "state blob does not match the loader: channels is 1 in the blob, 3 in the loader",
        "state blob does not match the loader: channels is 3 in the blob, 1 in the loader"};
    for (int k = 0; k < 2; k++) {
        feeder_loader *ld = channels_loader(ds, k ? 1 : 3);
        ck_assert_int_eq(feeder_loader_state_load(ld, blob[k], len[k]), FEEDER_EMISMATCH);
        ck_assert_str_eq(feeder_loader_errmsg(ld), want[k]);
        feeder_loader_destroy(ld);
        ld = channels_loader(ds, k ? 3 : 1);
        ck_assert_msg(feeder_loader_state_load(ld, blob[k], len[k]) == 0, "%s",
                      feeder_loader_errmsg(ld));
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->number, 1);
        ck_assert_uint_eq(b->channels, k ? 3 : 1);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
    }
    /* The gray loader's blob as version 2: the channels unknown, so an RGB
     * loader takes it. */
    size_t l2;
    uint8_t *v2 = older_blob(blob[0], len[0], 2, &l2);
    memset(v2 + 116, 0, 4);
    reseal(v2, l2);
    feeder_loader *ld = channels_loader(ds, 3);
    ck_assert_msg(feeder_loader_state_load(ld, v2, l2) == 0, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(v2);
    free(blob[0]);
    free(blob[1]);
}
END_TEST

static feeder_loader *limits_loader(feeder_dataset *ds, int64_t decode_bytes, int64_t side)
{
    feeder_loader *ld = tu_small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_DECODE_BYTES, decode_bytes), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_SIDE, side), 0);
    return ld;
}

/* The state records the decode limits (blob version 4): a blob saved under
 * one max_decode_bytes or max_side does not resume a loader with another,
 * whose samples could fail where the blob's did not; the same limits resume
 * at the next batch; a version 3 blob does not say and is not compared. */
START_TEST(test_resume_checks_decode_limits)
{
    tu_folder("d", 2, 4);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    size_t len;
    uint8_t *blob = save_after_one_batch(limits_loader(ds, 64 << 20, 4000), &len, NULL);
    feeder_loader *ld;
    feeder_batch *b;
    struct {
        int64_t bytes, side;
        const char *want;
    } cases[] = {
        {32 << 20, 4000, "state blob does not match the loader: max_decode_bytes is 67108864 "
                         "in the blob, 33554432 in the loader"},
        {64 << 20, 0, "state blob does not match the loader: max_side is 4000 in the blob, 0 "
                      "in the loader"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ld = limits_loader(ds, cases[i].bytes, cases[i].side);
        ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_EMISMATCH);
        ck_assert_str_eq(feeder_loader_errmsg(ld), cases[i].want);
        feeder_loader_destroy(ld);
    }
    ld = limits_loader(ds, 64 << 20, 4000);
    ck_assert_msg(feeder_loader_state_load(ld, blob, len) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    size_t l3;
    uint8_t *v3 = older_blob(blob, len, 3, &l3);
    ld = limits_loader(ds, 32 << 20, 0);
    ck_assert_msg(feeder_loader_state_load(ld, v3, l3) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(v3);
    free(blob);
}
END_TEST

/* A label changed in a packed file: from format version 2 the record's CRC
 * covers it, so VERIFY_CRC names the record (every read path); a version 1
 * file's labels are not covered (documented). */
START_TEST(test_pack_label_in_crc)
{
    char path[512], want[1024], err[512];
    tu_path(path, sizeof(path), "lab.pack");
    for (uint32_t version = 1; version <= 2; version++) {
        feeder__pack_header h;
        tu_write_raw_pack(path, 8, 4, 4, version, &h);
        int fd = open(path, O_WRONLY);
        int64_t lab = 3; /* record 5's label is 1 */
        ck_assert_int_eq(pwrite(fd, &lab, 8, (off_t)(h.labels_off + 5 * 8)), 8);
        close(fd);
        feeder_dataset *ds;
        ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
        for (int workers = 0; workers <= 2; workers += 2)
            for (int read = 0; read <= 1; read++) {
                feeder_loader *ld;
                ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PACKED_READ, read), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
                feeder_batch *b;
                int rc = feeder_next(ld, &b);
                if (version == 1) {
                    ck_assert_msg(rc == 0, "%s", feeder_loader_errmsg(ld));
                    ck_assert_int_eq(b->labels[5], 3);
                    feeder_batch_release(b, NULL);
                } else {
                    ck_assert_int_eq(rc, FEEDER_ECHECKSUM);
                    snprintf(want, sizeof(want),
                             "batch 0 of epoch 0: record 5 of %s: crc32c mismatch over its label "
                             "and bytes",
                             path);
                    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), want, strlen(want)) == 0,
                                  "%s", feeder_loader_errmsg(ld));
                }
                feeder_loader_destroy(ld);
            }
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* A symlink loop in a class folder: the error names the link, not the class
 * folder (before: "DIR/c0: Too many levels of symbolic links", found 64
 * levels down). */
START_TEST(test_symlink_loop_named)
{
    tu_folder("d", 2, 1);
    char link[512], want[700], err[1024];
    tu_path(link, sizeof(link), "d/c0/loop");
    ck_assert_int_eq(symlink("..", link), 0);
    feeder_dataset *ds = NULL;
    char root[512];
    tu_path(root, sizeof(root), "d");
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), -ELOOP);
    snprintf(want, sizeof(want), "%s: a symbolic link loop: it leads back to a folder it is in",
             link);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(".", link), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), -ELOOP);
    ck_assert_str_eq(err, want);
}
END_TEST

static void touch_file(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("x", f);
    fclose(f);
}

/* Inside one class folder, 20 levels of folders each holding an image and
 * two links to the next level (lv00/a and lv00/b -> ../lv01, ...): followed
 * naively that is 2^20 paths for 21 files. Each folder is walked once, so
 * each file is listed once, under the first path the sorted walk meets it
 * by, and the 40 links (20 'b's, and lv01..lv20 met beside lv00 after it)
 * are counted. */
START_TEST(test_symlink_fanout_walked_once)
{
    char dir[600], p[700], root[512], err[1024];
    tu_path(root, sizeof(root), "d");
    for (int k = 0; k <= 20; k++) {
        snprintf(dir, sizeof(dir), "%s/c0/lv%02d", root, k);
        ck_assert_int_eq(bu_mkdirs(dir), 0);
        snprintf(p, sizeof(p), "%s/img%02d.jpg", dir, k);
        touch_file(p);
        if (k == 20)
            break;
        char target[16];
        snprintf(target, sizeof(target), "../lv%02d", k + 1);
        snprintf(p, sizeof(p), "%s/a", dir);
        ck_assert_int_eq(symlink(target, p), 0);
        snprintf(p, sizeof(p), "%s/b", dir);
        ck_assert_int_eq(symlink(target, p), 0);
    }
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 21);
    /* lv00's "a" sorts before its image, so the deepest file comes first. */
    for (int k = 0; k <= 20; k++) {
        size_t at = (size_t)snprintf(p, sizeof(p), "%s/c0/lv00", root);
        for (int j = 0; j < 20 - k; j++)
            at += (size_t)snprintf(p + at, sizeof(p) - at, "/a");
        snprintf(p + at, sizeof(p) - at, "/img%02d.jpg", 20 - k);
        ck_assert_str_eq(feeder_dataset_path(ds, (uint64_t)k), p);
    }
    uint64_t left = 9;
    char summary[256];
    ck_assert_int_eq(feeder_dataset_skipped(ds, &left, summary, sizeof(summary)), 0);
    ck_assert_uint_eq(left, 0);
    ck_assert_str_eq(summary, "0 files left out; 40 folders reached again through a link, "
                              "not walked again");
    feeder_dataset_destroy(ds);
}
END_TEST

/* Folders nested past the depth limit fail the open naming the first
 * folder too deep; exactly at the limit they open. */
START_TEST(test_folder_depth_limit)
{
    char dir[1024], root[512], err[1400], want[1400];
    tu_path(root, sizeof(root), "d");
    size_t at = (size_t)snprintf(dir, sizeof(dir), "%s/c0", root);
    for (int k = 0; k < 32; k++)
        at += (size_t)snprintf(dir + at, sizeof(dir) - at, "/a");
    ck_assert_int_eq(bu_mkdirs(dir), 0);
    char p[1100];
    snprintf(p, sizeof(p), "%s/x.jpg", dir);
    touch_file(p);
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 1);
    feeder_dataset_destroy(ds);

    snprintf(dir + at, sizeof(dir) - at, "/a");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want), "%s: more than 32 levels of folders below its class folder; "
             "FEEDER_FOLDER_MAX_DEPTH raises the limit (up to 64)", dir);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(setenv("FEEDER_FOLDER_MAX_DEPTH", "2", 1), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want), "%s/c0/a/a/a: more than 2 levels of folders below its class "
             "folder; FEEDER_FOLDER_MAX_DEPTH raises the limit (up to 64)", root);
    ck_assert_str_eq(err, want);
    unsetenv("FEEDER_FOLDER_MAX_DEPTH");
}
END_TEST

/* The walk stops at the entry limit (every name it lists counts: the class
 * folders, the files, the sub-folders), naming the folder it was listing. */
START_TEST(test_folder_entry_limit)
{
    char root[512], err[1024], want[1100], p[700];
    tu_path(root, sizeof(root), "d");
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 5; i++) {
            snprintf(p, sizeof(p), "%s/c%d", root, c);
            ck_assert_int_eq(bu_mkdirs(p), 0);
            snprintf(p, sizeof(p), "%s/c%d/%d.jpg", root, c, i);
            touch_file(p);
        }
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(setenv("FEEDER_FOLDER_MAX_ENTRIES", "11", 1), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want), "%s/c1: more than 11 files and folders in the dataset; "
             "FEEDER_FOLDER_MAX_ENTRIES raises the limit", root);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(setenv("FEEDER_FOLDER_MAX_ENTRIES", "1", 1), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want), "%s: more than 1 files and folders in the dataset; "
             "FEEDER_FOLDER_MAX_ENTRIES raises the limit", root);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(setenv("FEEDER_FOLDER_MAX_ENTRIES", "12", 1), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 10);
    feeder_dataset_destroy(ds);
    unsetenv("FEEDER_FOLDER_MAX_ENTRIES");
}
END_TEST

static int failing_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                       int64_t *label, char *err, size_t errlen)
{
    (void)u;
    (void)ctx;
    (void)dst;
    (void)bytes;
    (void)label;
    snprintf(err, errlen, "bad");
    return -EIO;
}

static uint64_t len3(void *u)
{
    (void)u;
    return 3;
}

/* Every sample of a 3-sample dataset bad, SKIP: the message counts the 2
 * others, not "the 16 after it". */
START_TEST(test_skip_message_small_dataset)
{
    feeder_dataset_callbacks cb = {.len = len3, .get = failing_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = tu_small_loader(ds, 0, 3);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_SKIP), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), -EIO);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "batch 0 of epoch 0: sample 0: dataset callback returned -5: bad; skip "
                     "policy: no good sample is left for it among the dataset's 2 others");
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

#ifdef FEEDER_PACK_TOOL
/* Run feeder-pack with args; its exit status, its stderr in out. */
static int run_pack(const char *const *args, char *out, size_t outlen)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execv(FEEDER_PACK_TOOL, (char *const *)args);
        _exit(127);
    }
    close(p[1]);
    size_t used = 0;
    ssize_t k;
    while (used + 1 < outlen && (k = read(p[0], out + used, outlen - 1 - used)) > 0)
        used += (size_t)k;
    out[used] = 0;
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* feeder-pack names its own --allow-escape, and refuses a truncated JPEG
 * without --verify (its EOI is missing). */
START_TEST(test_pack_tool_checks)
{
    char lst[512], out[512], msg[2048], want[1024];
    tu_path(lst, sizeof(lst), "esc.txt");
    tu_path(out, sizeof(out), "o.pack");
    ck_assert_int_eq(bu_write_file(lst, "../x.jpg 1\n", 11), 0);
    const char *a1[] = {"feeder-pack", "--data", lst, "--out", out, "--mode", "jpeg", "--quiet",
                        NULL};
    ck_assert_int_eq(run_pack(a1, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want),
             "feeder-pack: %s:1: path '../x.jpg' escapes the root %s ('..' climbs above the "
             "root); --allow-escape allows it\n",
             lst, tu_dir);
    ck_assert_str_eq(msg, want);
    tu_folder("d", 1, 2);
    char good[600], cut[600], dir[512];
    tu_path(dir, sizeof(dir), "d");
    snprintf(good, sizeof(good), "%s/c0/000.jpg", dir);
    snprintf(cut, sizeof(cut), "%s/c0/002.jpg", dir);
    uint8_t *bytes;
    size_t len;
    ck_assert_int_eq(bu_read_file(good, &bytes, &len), 0);
    ck_assert_int_eq(bu_write_file(cut, bytes, len * 3 / 4), 0);
    free(bytes);
    const char *a2[] = {"feeder-pack", "--data", dir, "--out", out, "--mode", "jpeg", "--quiet",
                        NULL};
    ck_assert_int_eq(run_pack(a2, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want),
             "feeder-pack: %s: truncated JPEG: no end-of-image marker (FF D9) after its last "
             "scan (--verify decodes every record)\n"
             "feeder-pack: 1 bad file (listed above): nothing written; --skip-bad packs the "
             "others\n",
             cut);
    ck_assert_str_eq(msg, want);
    ck_assert_int_eq(unlink(cut), 0);
    ck_assert_int_eq(run_pack(a2, msg, sizeof(msg)), 0);
}
END_TEST

/* Several bad files: feeder-pack lists every one (path and reason, one per
 * line, in dataset order) and writes nothing; with --skip-bad it packs the
 * others and lists what it skipped. JPEG mode checks the files itself, RAW
 * mode has the loader decode them. */
START_TEST(test_pack_tool_all_bad)
{
    tu_folder("m", 2, 4);
    char dir[512], out[512], cut[600], text[600], empty[600], good[600], msg[4096],
        want[4096];
    tu_path(dir, sizeof(dir), "m");
    tu_path(out, sizeof(out), "all.pack");
    snprintf(good, sizeof(good), "%s/c0/000.jpg", dir);
    snprintf(cut, sizeof(cut), "%s/c0/002.jpg", dir);
    snprintf(text, sizeof(text), "%s/c1/001.jpg", dir);
    snprintf(empty, sizeof(empty), "%s/c1/003.jpg", dir);
    uint8_t *bytes;
    size_t len;
    ck_assert_int_eq(bu_read_file(good, &bytes, &len), 0);
    ck_assert_int_eq(bu_write_file(cut, bytes, len / 2), 0);
    free(bytes);
    ck_assert_int_eq(bu_write_file(text, "not an image\n", 13), 0);
    ck_assert_int_eq(bu_write_file(empty, "", 0), 0);
    for (int jpeg = 1; jpeg >= 0; jpeg--) {
        const char *mode = jpeg ? "jpeg" : "raw";
        const char *a[] = {"feeder-pack", "--data", dir, "--out", out, "--mode", mode,
                           "--quiet", jpeg ? NULL : "--size", "32", NULL};
        ck_assert_int_eq(run_pack(a, msg, sizeof(msg)), 1);
        ck_assert_int_eq(access(out, F_OK), -1);
        if (jpeg) {
            snprintf(want, sizeof(want),
                     "feeder-pack: %s: truncated JPEG: no end-of-image marker (FF D9) after its "
                     "last scan (--verify decodes every record)\n"
                     "feeder-pack: %s: not a JPEG TurboJPEG can read: Not a JPEG file: starts "
                     "with 0x6e 0x6f\n"
                     "feeder-pack: %s: empty file\n"
                     "feeder-pack: 3 bad files (listed above): nothing written; --skip-bad packs "
                     "the others\n",
                     cut, text, empty);
            ck_assert_str_eq(msg, want);
        } else {
            /* The loader's own reasons, each file once, in dataset order. */
            char *l1 = strstr(msg, cut), *l2 = strstr(msg, text), *l3 = strstr(msg, empty);
            ck_assert_msg(l1 && l2 && l3 && l1 < l2 && l2 < l3, "%s", msg);
            snprintf(want, sizeof(want), "feeder-pack: %s: not a JPEG, PNG or WebP file "
                     "(starts 6E 6F 74 20: unknown)\nfeeder-pack: %s: empty file\n"
                     "feeder-pack: 3 bad files (listed above): nothing written; --skip-bad "
                     "packs the others\n", text, empty);
            ck_assert_str_eq(l2 - strlen("feeder-pack: "), want);
            ck_assert_msg(strncmp(msg, "feeder-pack: ", 13) == 0 && msg + 13 == l1, "%s", msg);
        }
        const char *b[] = {"feeder-pack", "--data", dir, "--out", out, "--mode", mode,
                           "--quiet", "--skip-bad", jpeg ? NULL : "--size", "32", NULL};
        ck_assert_int_eq(run_pack(b, msg, sizeof(msg)), 0);
        ck_assert_msg(strstr(msg, "feeder-pack: skipped 3 bad files (--skip-bad); packed the "
                                  "other 5\n") != NULL, "%s", msg);
        snprintf(want, sizeof(want), "feeder-pack: skipped %s: empty file\n", empty);
        ck_assert_msg(strstr(msg, want) != NULL, "%s", msg);
        feeder_dataset *ds;
        char err[512];
        ck_assert_int_eq(feeder_dataset_open_packed(out, &ds, err, sizeof(err)), 0);
        ck_assert_uint_eq(feeder_dataset_size(ds), 5);
        feeder_dataset_destroy(ds);
        ck_assert_int_eq(unlink(out), 0);
    }
}
END_TEST
#endif

/* c0/001-003 (indices 1-3, a run) and c1/007 (15, the last of its class)
 * corrupt, batch 16 unshuffled. */
static feeder_loader *policy_loader(feeder_dataset **ds, int workers, int policy)
{
    tu_folder("p", 2, 8);
    const char *bad[] = {"p/c0/001.jpg", "p/c0/002.jpg", "p/c0/003.jpg", "p/c1/007.jpg"};
    for (int i = 0; i < 4; i++) {
        char f[512];
        tu_path(f, sizeof(f), bad[i]);
        ck_assert_int_eq(bu_write_file(f, "not a jpeg", 10), 0);
    }
    *ds = tu_open_folder(tu_dir, "p");
    feeder_loader *ld = tu_small_loader(*ds, workers, 16);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, policy), 0);
    return ld;
}

/* SKIP: each bad sample of the run gets its own replacement from its class
 * (as brackets match: 1 -> 6, 2 -> 5, 3 -> 4), and 15 wraps to 8 within its
 * class (before: 1, 2 and 3 all became 4, so 4 arrived 4 times, and 15
 * became 0, of the other class). The same for any num_workers. */
START_TEST(test_skip_replacements_distinct_in_class)
{
    const uint64_t want[16] = {0, 6, 5, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 8};
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_dataset *ds;
        feeder_loader *ld = policy_loader(&ds, workers, FEEDER_ON_ERROR_SKIP);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->count, 16);
        ck_assert_uint_eq(b->skipped, 4);
        for (uint32_t i = 0; i < 16; i++) {
            ck_assert_msg(b->indices[i] == want[i], "workers %d position %u: %llu", workers, i,
                          (unsigned long long)b->indices[i]);
            ck_assert_int_eq(b->labels[i], i < 8 ? 0 : 1);
        }
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* The skipped samples are named: feeder_loader_skipped gives their indices
 * and paths (each once, however many epochs met them) and the total, under
 * SKIP and DROP, for any num_workers; FAIL names none. */
START_TEST(test_loader_skipped_names_files)
{
    const char *bad[] = {"p/c0/001.jpg", "p/c0/002.jpg", "p/c0/003.jpg", "p/c1/007.jpg"};
    const uint64_t want[4] = {1, 2, 3, 15};
    for (int policy = FEEDER_ON_ERROR_SKIP; policy <= FEEDER_ON_ERROR_DROP; policy++)
        for (int workers = 0; workers <= 2; workers += 2) {
            feeder_dataset *ds;
            feeder_loader *ld = policy_loader(&ds, workers, policy);
            uint64_t idx[FEEDER_SKIPPED_MAX], total = 99;
            const char *paths[FEEDER_SKIPPED_MAX];
            ck_assert_int_eq(feeder_loader_skipped(ld, idx, paths, FEEDER_SKIPPED_MAX, &total), 0);
            ck_assert_uint_eq(total, 0);
            for (int epoch = 0; epoch < 2; epoch++) {
                feeder_batch *b;
                int rc;
                while ((rc = feeder_next(ld, &b)) == 0)
                    feeder_batch_release(b, NULL);
                ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
            }
            int n = feeder_loader_skipped(ld, idx, paths, FEEDER_SKIPPED_MAX, &total);
            ck_assert_int_eq(n, 4);
            ck_assert_uint_eq(total, 8); /* two epochs */
            /* In the order the parts' results came: sorted here. */
            for (int k = 1; k < 4; k++)
                for (int j = k; j > 0 && idx[j - 1] > idx[j]; j--) {
                    uint64_t t = idx[j];
                    const char *tp = paths[j];
                    idx[j] = idx[j - 1];
                    paths[j] = paths[j - 1];
                    idx[j - 1] = t;
                    paths[j - 1] = tp;
                }
            for (int k = 0; k < 4; k++) {
                char path[512];
                tu_path(path, sizeof(path), bad[k]);
                ck_assert_uint_eq(idx[k], want[k]);
                ck_assert_str_eq(paths[k], path);
            }
            /* A smaller cap, indices only, and the total alone. */
            ck_assert_int_eq(feeder_loader_skipped(ld, idx, NULL, 2, NULL), 2);
            ck_assert_int_eq(feeder_loader_skipped(ld, NULL, NULL, 0, &total), 0);
            ck_assert_uint_eq(total, 8);
            ck_assert_int_eq(feeder_loader_skipped(ld, NULL, NULL, 4, &total), FEEDER_EINVAL);
            ck_assert_int_eq(feeder_loader_skipped(NULL, idx, paths, 4, &total), FEEDER_EINVAL);
            feeder_loader_destroy(ld);
            feeder_dataset_destroy(ds);
        }
}
END_TEST

/* DROP: the four bad samples are left out, nothing is repeated. */
START_TEST(test_drop_policy_shortens_batch)
{
    const uint64_t want[12] = {0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_dataset *ds;
        feeder_loader *ld = policy_loader(&ds, workers, FEEDER_ON_ERROR_DROP);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->count, 12);
        ck_assert_uint_eq(b->skipped, 4);
        /* The kept samples' pixels moved with them: compare with a clean
         * load of the same index. */
        uint8_t *copy = malloc(b->sample_bytes * 12);
        memcpy(copy, b->data, b->sample_bytes * 12);
        for (uint32_t i = 0; i < 12; i++) {
            ck_assert_uint_eq(b->indices[i], want[i]);
            ck_assert_int_eq(b->labels[i], want[i] < 8 ? 0 : 1);
        }
        feeder_batch_release(b, NULL);
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
        feeder_stats st;
        ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
        ck_assert_uint_eq(st.dropped, 4);
        ck_assert_uint_eq(st.samples, 12);
        feeder_loader_destroy(ld);
        /* FAIL on the good samples alone gives the same pixels. */
        feeder_loader *ref = tu_small_loader(ds, 0, 1);
        ck_assert_int_eq(feeder_loader_set(ref, FEEDER_OPT_SHUFFLE, 0), 0);
        uint32_t k = 0;
        int rc;
        while ((rc = feeder_next(ref, &b)) != FEEDER_DONE) {
            if (rc == 0 && k < 12 && b->indices[0] == want[k]) {
                ck_assert_int_eq(memcmp(b->data, copy + k * b->sample_bytes, b->sample_bytes), 0);
                k++;
            }
            if (rc == 0)
                feeder_batch_release(b, NULL);
        }
        ck_assert_uint_eq(k, 12);
        feeder_loader_destroy(ref);
        free(copy);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

static Suite *badinput_suite(void)
{
    Suite *s = suite_create("badinput");
    TCase *tc = tcase_create("badinput");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_list_file_streams_bounded);
    tcase_add_test(tc, test_resume_checks_dataset_fingerprint);
    tcase_add_test(tc, test_resume_checks_channels);
    tcase_add_test(tc, test_resume_checks_decode_limits);
    tcase_add_test(tc, test_pack_label_in_crc);
    tcase_add_test(tc, test_symlink_loop_named);
    tcase_add_test(tc, test_symlink_fanout_walked_once);
    tcase_add_test(tc, test_folder_depth_limit);
    tcase_add_test(tc, test_folder_entry_limit);
    tcase_add_test(tc, test_skip_message_small_dataset);
    tcase_add_test(tc, test_skip_replacements_distinct_in_class);
    tcase_add_test(tc, test_drop_policy_shortens_batch);
    tcase_add_test(tc, test_loader_skipped_names_files);
#ifdef FEEDER_PACK_TOOL
    tcase_add_test(tc, test_pack_tool_checks);
    tcase_add_test(tc, test_pack_tool_all_bad);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(badinput_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
