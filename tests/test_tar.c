/*
 * Tar datasets (WebDataset shards): grouping by key, GNU and pax names (from
 * this file's writer and from GNU tar itself), the index cached beside the
 * shards, batches equal to the same images read from a list file, every bad
 * input under FAIL, SKIP and DROP, the descriptors a start counts for
 * them (RLIMIT_NOFILE), and resume across shard sets. Tars are written
 * in a temporary folder.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "feeder.h"
#include "dataset/dataset.h"
#include "dataset/tar.h"
#include "io/io.h"

static char tmpdir[256];
static bu_photos *photos;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-tar-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char err[256];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
}

static void teardown(void)
{
    bu_photos_free(photos);
    photos = NULL;
    bu_rm_rf(tmpdir);
}

static void path_in(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

/* ---- a tar writer: exact control over every header ---- */

static void tb_file(tu_tar *t, const char *name, const char *text)
{
    tu_tar_member(t, name, '0', text, strlen(text));
}

static void tb_end(tu_tar *t) { tu_tar_grow(t, 1024); }

static void tb_write(tu_tar *t, const char *rel)
{
    char p[512];
    path_in(p, sizeof(p), rel);
    ck_assert_int_eq(bu_write_file(p, t->b, t->len), 0);
    free(t->b);
    memset(t, 0, sizeof(*t));
}

static feeder_dataset *open_tar(const char *rel)
{
    char p[512], err[1024];
    path_in(p, sizeof(p), rel);
    feeder_dataset *ds = NULL;
    const char *paths[] = {p};
    int rc = feeder_dataset_open_tar(paths, 1, &ds, err, sizeof(err));
    ck_assert_msg(rc == 0, "open_tar %s: %s", rel, err);
    return ds;
}

static void assert_sample(const feeder_dataset *ds, uint64_t i, const char *key, int64_t label,
                          int bad)
{
    const char *k = NULL;
    int rc = feeder_dataset_tar_sample(ds, i, NULL, &k, NULL, NULL, NULL);
    ck_assert_int_eq(rc, bad ? FEEDER_EDATASET : 0);
    ck_assert_str_eq(k, key);
    ck_assert_int_eq(feeder_dataset_label(ds, i), label);
}

static uint8_t *jpeg(unsigned photo, size_t *len)
{
    uint8_t *j;
    ck_assert_int_eq(bu_make_jpeg(photos, photo, 48 + photo * 7 % 40, 40 + photo * 13 % 50, 85,
                                  -1, photo, &j, len), 0);
    return j;
}

/* ---- grouping ---- */

START_TEST(test_groups_keys_and_members)
{
    tu_tar t = {0};
    tu_tar_member(&t, "a/", '5', NULL, 0);
    tb_file(&t, "a/000.jpg", "J0");
    tb_file(&t, "a/000.cls", "3");
    tb_file(&t, "a/001.cls", " 7\n"); /* the label first, blanks around it */
    tb_file(&t, "a/001.png", "P1");
    tb_file(&t, "a/001.jpg", "J1"); /* .jpg wins over .png whatever the order */
    tb_file(&t, "notes", "no dot: no sample");
    tb_file(&t, "a/.hidden.jpg", "dot first: no sample");
    tb_file(&t, "a/002.json", "{}");
    tb_file(&t, "./a/002.WEBP", "W2");
    tb_file(&t, "a/002.cls", "0");
    tb_file(&t, "b/x.y.seg.png", "S");  /* key b/x, extension y.seg.png: no image */
    tb_file(&t, "b/x.cls", "1");         /* the same key, after it */
    tb_file(&t, "c/only.json", "{}");    /* neither image nor label: no sample */
    tb_file(&t, "a/000.jpg", "J0again"); /* the key again, later: a sample of its own */
    tb_file(&t, "a/000.cls", "5");
    tb_end(&t);
    tb_write(&t, "g.tar");
    feeder_dataset *ds = open_tar("g.tar");
    ck_assert_uint_eq(feeder_dataset_size(ds), 5);
    assert_sample(ds, 0, "a/000", 3, 0);
    assert_sample(ds, 1, "a/001", 7, 0);
    assert_sample(ds, 2, "a/002", 0, 0);
    assert_sample(ds, 3, "b/x", 1, 1);
    assert_sample(ds, 4, "a/000", 5, 0);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 8);
    ck_assert_ptr_null(feeder_dataset_path(ds, 0));
    /* Offsets and sizes point at the image member's bytes. */
    char p[512];
    path_in(p, sizeof(p), "g.tar");
    uint8_t *file;
    size_t flen;
    ck_assert_int_eq(bu_read_file(p, &file, &flen), 0);
    const char *want[] = {"J0", "J1", "W2", NULL, "J0again"};
    for (int i = 0; i < 5; i++) {
        uint64_t off, size;
        const char *shard;
        const char *problem;
        int rc = feeder_dataset_tar_sample(ds, (uint64_t)i, &shard, NULL, &off, &size, &problem);
        ck_assert_str_eq(shard, p);
        if (!want[i]) {
            ck_assert_int_eq(rc, FEEDER_EDATASET);
            ck_assert_str_eq(problem, "no image member (.jpg, .jpeg, .png or .webp)");
            ck_assert_uint_eq(off + size, 0);
            continue;
        }
        ck_assert_int_eq(rc, 0);
        ck_assert_ptr_null(problem);
        ck_assert_uint_eq(size, strlen(want[i]));
        ck_assert_int_eq(memcmp(file + off, want[i], size), 0);
    }
    free(file);
    feeder_tar_info info;
    ck_assert_int_eq(feeder_dataset_tar_info(ds, &info), 0);
    ck_assert_uint_eq(info.shards, 1);
    ck_assert_uint_eq(info.samples, 5);
    ck_assert_uint_eq(info.bad_samples, 1);
    ck_assert_int_eq(feeder_dataset_tar_sample(ds, 5, NULL, NULL, NULL, NULL, NULL), FEEDER_EINVAL);
    feeder_tar_info none;
    ck_assert_int_eq(feeder_dataset_tar_info(NULL, &none), FEEDER_EINVAL);
    feeder_dataset_destroy(ds);
}
END_TEST

/* GNU long names ('L') and pax 'path' records, from this writer. */
START_TEST(test_long_names_gnu_and_pax)
{
    char longdir[200];
    memset(longdir, 'd', 150);
    longdir[150] = 0;
    char name[256], rec[300];
    tu_tar t = {0};
    snprintf(name, sizeof(name), "%s/000.jpg", longdir);
    tu_tar_member(&t, "././@LongLink", 'L', name, strlen(name) + 1);
    tb_file(&t, "truncated-short-name.jpg", "L0");
    snprintf(name, sizeof(name), "%s/000.cls", longdir);
    tu_tar_member(&t, "././@LongLink", 'L', name, strlen(name) + 1);
    tb_file(&t, "truncated-short-name.cls", "2");
    snprintf(name, sizeof(name), "%s/001.jpg", longdir);
    int base = (int)strlen(name) + 7, n = base + 1; /* "N path=" + name + "\n" */
    while (snprintf(NULL, 0, "%d", n) + base != n)
        n++;
    snprintf(rec, sizeof(rec), "%d path=%s\n", n, name);
    ck_assert_uint_eq(strlen(rec), (size_t)n);
    tu_tar_member(&t, "PaxHeaders/x", 'x', rec, strlen(rec));
    tb_file(&t, "ignored.jpg", "X1");
    tu_tar_member(&t, "pax_global_header", 'g', "9 a=bcd\n", 9);
    snprintf(name, sizeof(name), "%s/001.cls", longdir);
    tb_file(&t, name + 60, "4"); /* under 100 bytes: a plain name */
    tb_end(&t);
    tb_write(&t, "n.tar");
    feeder_dataset *ds = open_tar("n.tar");
    ck_assert_uint_eq(feeder_dataset_size(ds), 3);
    snprintf(name, sizeof(name), "%s/000", longdir);
    assert_sample(ds, 0, name, 2, 0);
    snprintf(name, sizeof(name), "%s/001", longdir);
    assert_sample(ds, 1, name, -1, 1); /* the .cls lies under another (shorter) key */
    snprintf(name, sizeof(name), "%s/001", longdir + 60);
    assert_sample(ds, 2, name, 4, 1);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A pax path far past ustar's and PATH_MAX's lengths is a key like any
 * other; a pax header over the 64 KiB limit ends the walk, named. */
static void pax_record(tu_tar *t, const char *key, const char *value)
{
    size_t base = strlen(key) + strlen(value) + 3, n = base + 1; /* "N key=value\n" */
    while ((size_t)snprintf(NULL, 0, "%zu", n) + base != n)
        n++;
    char *rec = malloc(n + 1);
    snprintf(rec, n + 1, "%zu %s=%s\n", n, key, value);
    ck_assert_uint_eq(strlen(rec), n);
    tu_tar_member(t, "PaxHeaders/p", 'x', rec, n);
    free(rec);
}

START_TEST(test_pax_very_long_and_over_limit)
{
    char *path = malloc(10001);
    memset(path, 'p', 9990);
    memcpy(path + 9990, "/00.jpg", 8);
    tu_tar t = {0};
    pax_record(&t, "path", path);
    tb_file(&t, "short.jpg", "IMG");
    memcpy(path + 9990, "/00.cls", 8);
    pax_record(&t, "path", path);
    tb_file(&t, "short.cls", "6");
    size_t at = t.len;
    char *big = malloc(70001);
    memset(big, 'q', 70000);
    big[70000] = 0;
    pax_record(&t, "comment", big);
    tb_file(&t, "lost.jpg", "L");
    tb_file(&t, "lost.cls", "1");
    tb_end(&t);
    tb_write(&t, "long.tar");
    feeder_dataset *ds = open_tar("long.tar");
    ck_assert_uint_eq(feeder_dataset_size(ds), 2);
    path[9990] = 0;
    strcat(path, "/00");
    assert_sample(ds, 0, path, 6, 0);
    char key[64], want[256];
    snprintf(key, sizeof(key), "(header at offset %zu)", at);
    assert_sample(ds, 1, key, -1, 1);
    const feeder__tar_index *ix = &ds->tar->shards[0].ix;
    snprintf(want, sizeof(want), "the pax header at offset %zu holds 70015 bytes (empty or over "
             "the 65536-byte limit): the members from there on are lost", at);
    ck_assert_str_eq(feeder__tar_detail(ix, 1), want);
    feeder_dataset_destroy(ds);
    free(big);
    free(path);
}
END_TEST

/* The tars GNU tar writes, in its gnu, pax and ustar formats, long names included. */
START_TEST(test_gnu_tar_output)
{
    if (system("tar --version >/dev/null 2>&1") != 0)
        return;
    char dir[512], cmd[2048];
    const char *deep = "src/a-very-long-folder-name-that-goes-on-and-on-well-past-one-hundred-"
                       "bytes-of-ustar-name-field/and-deeper";
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, deep);
    ck_assert_int_eq(bu_mkdirs(dir), 0);
    for (int i = 0; i < 3; i++) {
        char p[700], lab[8];
        snprintf(p, sizeof(p), "%s/sample_%d.cls", dir, i);
        snprintf(lab, sizeof(lab), "%d", 10 + i);
        ck_assert_int_eq(bu_write_file(p, lab, strlen(lab)), 0);
        snprintf(p, sizeof(p), "%s/sample_%d.jpg", dir, i);
        ck_assert_int_eq(bu_write_file(p, "jpegbytes", 5 + (size_t)i), 0);
    }
    const char *formats[] = {"gnu", "pax", "ustar"};
    for (int f = 0; f < 3; f++) {
        snprintf(cmd, sizeof(cmd), "tar -C %s --format=%s --sort=name -cf %s/%s.tar src "
                 "2>/dev/null", tmpdir, formats[f], tmpdir, formats[f]);
        int rc = system(cmd);
        char rel[32];
        snprintf(rel, sizeof(rel), "%s.tar", formats[f]);
        ck_assert_int_eq(rc, 0); /* ustar: the name split into prefix and name */
        feeder_dataset *ds = open_tar(rel);
        ck_assert_uint_eq(feeder_dataset_size(ds), 3);
        for (int i = 0; i < 3; i++) {
            char key[300];
            snprintf(key, sizeof(key), "%s/sample_%d", deep, i);
            assert_sample(ds, (uint64_t)i, key, 10 + i, 0);
            uint64_t size;
            feeder_dataset_tar_sample(ds, (uint64_t)i, NULL, NULL, NULL, &size, NULL);
            ck_assert_uint_eq(size, 5 + (uint64_t)i);
        }
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* ---- batches: the same as the same images from a list file ---- */

/* nshards shards of per samples each, made with GNU tar from files
 * src/s<k>/<nnnnnn>.{jpg,cls}; the list file list.txt names the same files,
 * extracted by tar into ex/, in the same order. */
static void make_shards(int nshards, int per)
{
    char p[700], cmd[2048];
    snprintf(p, sizeof(p), "%s/ex", tmpdir);
    ck_assert_int_eq(bu_mkdirs(p), 0);
    snprintf(p, sizeof(p), "%s/list.txt", tmpdir);
    FILE *list = fopen(p, "w");
    ck_assert_ptr_nonnull(list);
    for (int s = 0; s < nshards; s++) {
        snprintf(p, sizeof(p), "%s/src/s%d", tmpdir, s);
        ck_assert_int_eq(bu_mkdirs(p), 0);
        for (int i = 0; i < per; i++) {
            unsigned n = (unsigned)(s * per + i);
            size_t len;
            uint8_t *j = jpeg(n, &len);
            snprintf(p, sizeof(p), "%s/src/s%d/%06u.jpg", tmpdir, s, n);
            ck_assert_int_eq(bu_write_file(p, j, len), 0);
            free(j);
            char lab[8];
            snprintf(lab, sizeof(lab), "%u", n % 5);
            snprintf(p, sizeof(p), "%s/src/s%d/%06u.cls", tmpdir, s, n);
            ck_assert_int_eq(bu_write_file(p, lab, strlen(lab)), 0);
            fprintf(list, "s%d/%06u.jpg %u\n", s, n, n % 5);
        }
        snprintf(cmd, sizeof(cmd), "tar -C %s/src --sort=name -cf %s/s-%d.tar s%d && "
                 "tar -C %s/ex -xf %s/s-%d.tar", tmpdir, tmpdir, s, s, tmpdir, tmpdir, s);
        ck_assert_int_eq(system(cmd), 0);
    }
    fclose(list);
}

typedef struct capture {
    uint8_t *data;
    int64_t labels[256];
    uint64_t indices[256];
    size_t bytes;
    uint32_t n;
} capture;

static feeder_loader *loader(feeder_dataset *ds, int workers, int policy)
{
    feeder_loader *ld = tu_small_loader(ds, workers, 4);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 11), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, policy), 0);
    return ld;
}

static int capture_io = FEEDER_IO_AUTO; /* the read path run_capture's loaders take */

/* Two epochs of batches, every byte. */
static capture run_capture(feeder_dataset *ds, int workers)
{
    capture c = {0};
    feeder_loader *ld = loader(ds, workers, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, capture_io), 0);
    for (int epoch = 0; epoch < 2; epoch++) {
        ck_assert_int_eq(feeder_loader_set_epoch(ld, (uint64_t)epoch), 0);
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            c.data = realloc(c.data, c.bytes + b->count * b->sample_bytes);
            memcpy(c.data + c.bytes, b->data, b->count * b->sample_bytes);
            c.bytes += b->count * b->sample_bytes;
            for (uint32_t i = 0; i < b->count; i++, c.n++) {
                c.labels[c.n] = b->labels[i];
                c.indices[c.n] = b->indices[i];
            }
            feeder_batch_release(b, NULL);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
    return c;
}

START_TEST(test_batches_equal_list_file)
{
    make_shards(3, 7);
    char pattern[512], list[512], err[1024];
    snprintf(pattern, sizeof(pattern), "%s/s-{0..2}.tar", tmpdir);
    snprintf(list, sizeof(list), "%s/list.txt", tmpdir);
    char root[512];
    path_in(root, sizeof(root), "ex");
    feeder_dataset *tar = NULL, *lst = NULL;
    ck_assert_msg(feeder_dataset_open_tar_pattern(pattern, &tar, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_int_eq(feeder_dataset_open_list(list, root, &lst, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(tar), 21);
    ck_assert_uint_eq(feeder_dataset_num_classes(tar), 5);
    capture want = run_capture(lst, 0);
    ck_assert_uint_eq(want.n, 42);
    /* Any worker count; the ring (where the kernel has one) and pread. */
    int workers[] = {0, 1, 3, 0, 3};
    for (int w = 0; w < 5; w++) {
        capture_io = w < 3 ? FEEDER_IO_AUTO : FEEDER_IO_PREAD;
        capture got = run_capture(tar, workers[w]);
        ck_assert_uint_eq(got.n, want.n);
        ck_assert_uint_eq(got.bytes, want.bytes);
        ck_assert_msg(memcmp(got.data, want.data, want.bytes) == 0, "workers %d io %d",
                      workers[w], capture_io);
        ck_assert_int_eq(memcmp(got.labels, want.labels, sizeof(want.labels)), 0);
        ck_assert_int_eq(memcmp(got.indices, want.indices, sizeof(want.indices)), 0);
        free(got.data);
    }
    capture_io = FEEDER_IO_AUTO;
    free(want.data);
    feeder_dataset_destroy(tar);
    feeder_dataset_destroy(lst);
}
END_TEST

/* ---- the index cached beside the shard ---- */

static feeder_tar_info info_of(const char *rel, feeder_dataset **keep)
{
    feeder_dataset *ds = open_tar(rel);
    feeder_tar_info info;
    ck_assert_int_eq(feeder_dataset_tar_info(ds, &info), 0);
    if (keep)
        *keep = ds;
    else
        feeder_dataset_destroy(ds);
    return info;
}

static void four_samples(const char *rel)
{
    tu_tar t = {0};
    for (int i = 0; i < 4; i++) {
        char n[32], v[8];
        snprintf(n, sizeof(n), "k%d.jpg", i);
        snprintf(v, sizeof(v), "img%d", i);
        tb_file(&t, n, v);
        snprintf(n, sizeof(n), "k%d.cls", i);
        snprintf(v, sizeof(v), "%d", i % 2);
        tb_file(&t, n, v);
    }
    tb_file(&t, "k9.jpg", "no label");
    tb_end(&t);
    tb_write(&t, rel);
}

static void assert_four(feeder_dataset *ds)
{
    ck_assert_uint_eq(feeder_dataset_size(ds), 5);
    for (int i = 0; i < 4; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%d", i);
        assert_sample(ds, (uint64_t)i, k, i % 2, 0);
    }
    assert_sample(ds, 4, "k9", -1, 1);
}

START_TEST(test_index_written_then_used)
{
    four_samples("c.tar");
    char tar[512], idx[512];
    path_in(tar, sizeof(tar), "c.tar");
    path_in(idx, sizeof(idx), "c.tar.idx");
    feeder_dataset *ds;
    feeder_tar_info a = info_of("c.tar", &ds);
    ck_assert_uint_eq(a.indexes_written, 1);
    ck_assert_uint_eq(a.indexes_cached, 0);
    uint64_t fp = ds->fingerprint;
    feeder_dataset_destroy(ds);
    struct stat st;
    ck_assert_int_eq(stat(idx, &st), 0);
    /* Header, 5 entries, "k0\0jpg\0" x 4, "k9\0no .cls member\0". */
    ck_assert_int_eq(st.st_size, 64 + 5 * 32 + 4 * 7 + 3 + 15);
    feeder_tar_info b = info_of("c.tar", &ds);
    ck_assert_uint_eq(b.indexes_cached, 1);
    ck_assert_uint_eq(b.indexes_written, 0);
    assert_four(ds);
    ck_assert_uint_eq(ds->fingerprint, fp);
    /* The cached bad sample keeps its message. */
    feeder_loader *ld = loader(ds, 0, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 1), 0);
    feeder_batch *bt;
    for (int i = 0; i < 4; i++) /* "img0".. are no images */
        ck_assert_int_eq(feeder_next(ld, &bt), FEEDER_EDECODE);
    ck_assert_int_eq(feeder_next(ld, &bt), FEEDER_EDATASET);
    char want[1024];
    snprintf(want, sizeof(want), "batch 4 of epoch 0: sample 4 (%s: key k9): no .cls member: "
             "dataset is empty or malformed", tar);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* A new modification time: walked and written again. */
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = 1000000000, .tv_nsec = 5}};
    ck_assert_int_eq(utimensat(AT_FDCWD, tar, ts, 0), 0);
    feeder_tar_info c = info_of("c.tar", NULL);
    ck_assert_uint_eq(c.indexes_written, 1);
    ck_assert_uint_eq(info_of("c.tar", NULL).indexes_cached, 1);
    /* A damaged index (one bit of a label): refused by its CRC, rebuilt. */
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(bu_read_file(idx, &buf, &len), 0);
    buf[64 + 16] ^= 1;
    ck_assert_int_eq(bu_write_file(idx, buf, len), 0);
    free(buf);
    feeder_tar_info d = info_of("c.tar", &ds);
    ck_assert_uint_eq(d.indexes_written, 1);
    assert_four(ds);
    feeder_dataset_destroy(ds);
    /* A shard whose index cannot be written (a folder where the file would
     * go; or, not as root, a read-only folder): opened all the same. */
    ck_assert_int_eq(unlink(idx), 0);
    ck_assert_int_eq(mkdir(idx, 0755), 0);
    feeder_tar_info e = info_of("c.tar", &ds);
    ck_assert_uint_eq(e.indexes_written, 0);
    ck_assert_uint_eq(e.indexes_cached, 0);
    assert_four(ds);
    feeder_dataset_destroy(ds);
    ck_assert_int_eq(rmdir(idx), 0);
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(tmpdir, 0555), 0);
        feeder_tar_info f = info_of("c.tar", NULL);
        ck_assert_int_eq(chmod(tmpdir, 0755), 0);
        ck_assert_uint_eq(f.indexes_written, 0);
        ck_assert_int_ne(access(idx, F_OK), 0);
    }
    /* No temporary file is left behind. */
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls %s | grep -q tmp", tmpdir);
    ck_assert_int_ne(system(cmd), 0);
}
END_TEST

/* The index parser: every field checked; what it writes it reads back. */
START_TEST(test_index_format_rejects)
{
    four_samples("c.tar");
    feeder_dataset *ds = open_tar("c.tar");
    const feeder__tar_index *ix = &ds->tar->shards[0].ix;
    uint64_t size = ds->tar->shards[0].size;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(feeder__tar_index_encode(ix, size, 77, &buf, &len), 0);
    feeder__tar_index back;
    char err[256];
    ck_assert_int_eq(feeder__tar_index_decode(buf, len, size, 77, &back, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.n, ix->n);
    ck_assert_int_eq(memcmp(back.e, ix->e, ix->n * sizeof(*ix->e)), 0);
    ck_assert_int_eq(memcmp(back.names, ix->names, ix->names_len), 0);
    feeder__tar_index_free(&back);
    struct {
        uint64_t size;
        int64_t mtime;
        size_t len;
        const char *why;
    } cases[] = {
        {size + 1, 77, len, "made for another size or modification time of the shard"},
        {size, 78, len, "made for another size or modification time of the shard"},
        {size, 77, len - 1, "entry count or name bytes do not fit the file"},
        {size, 77, 63, "not a feeder tar index (magic)"},
        /* An entry whose member would lie past a smaller shard: its header
         * is made for that size, so the entry check is what refuses it. */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = feeder__tar_index_decode(buf, cases[i].len, cases[i].size, cases[i].mtime,
                                          &back, err, sizeof(err));
        ck_assert_int_eq(rc, FEEDER_EFORMAT);
        ck_assert_str_eq(err, cases[i].why);
    }
    uint8_t *small;
    size_t slen;
    ck_assert_int_eq(feeder__tar_index_encode(ix, 600, 77, &small, &slen), 0);
    ck_assert_int_eq(feeder__tar_index_decode(small, slen, 600, 77, &back, err, sizeof(err)),
                     FEEDER_EFORMAT);
    ck_assert_str_eq(err, "entry 1 is out of bounds");
    free(small);
    buf[8] = 2;
    ck_assert_int_eq(feeder__tar_index_decode(buf, len, size, 77, &back, err, sizeof(err)),
                     FEEDER_EFORMAT);
    ck_assert_str_eq(err, "another version");
    buf[8] = 1;
    buf[20] ^= 1;
    ck_assert_int_eq(feeder__tar_index_decode(buf, len, size, 77, &back, err, sizeof(err)),
                     FEEDER_EFORMAT);
    ck_assert_str_eq(err, "header checksum mismatch");
    buf[20] ^= 1;
    buf[len - 2] ^= 1;
    ck_assert_int_eq(feeder__tar_index_decode(buf, len, size, 77, &back, err, sizeof(err)),
                     FEEDER_EFORMAT);
    ck_assert_str_eq(err, "body checksum mismatch");
    free(buf);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- bad input ---- */

/* A shard with one of each bad sample between good ones; record i is
 * photo i, label i % 3. */
static void bad_shard(const char *rel)
{
    tu_tar t = {0};
    char n[64], v[16];
    for (int i = 0; i < 9; i++) {
        size_t len;
        uint8_t *j = jpeg((unsigned)i, &len);
        snprintf(n, sizeof(n), "s/%02d.jpg", i);
        if (i == 3)
            tu_tar_member(&t, n, '2', NULL, 0); /* a symbolic link */
        else
            tu_tar_member(&t, n, '0', j, len);
        free(j);
        snprintf(n, sizeof(n), "s/%02d.cls", i);
        snprintf(v, sizeof(v), "%d", i % 3);
        if (i == 1)
            continue; /* no .cls */
        tb_file(&t, n, i == 5 ? "x7" : v);
    }
    tb_end(&t);
    tb_write(&t, rel);
}

START_TEST(test_bad_samples_fail_and_skip)
{
    bad_shard("b.tar");
    char p[512];
    path_in(p, sizeof(p), "b.tar");
    feeder_dataset *ds = open_tar("b.tar");
    ck_assert_uint_eq(feeder_dataset_size(ds), 9);
    const char *what[9] = {NULL, "no .cls member", NULL,
                           "member s/03.jpg is a symbolic link (type '2'), not a regular file",
                           NULL, "member s/05.cls holds 'x7', not a non-negative integer label"};
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_loader *ld = loader(ds, workers, FEEDER_ON_ERROR_FAIL);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 1), 0);
        for (int i = 0; i < 9; i++) {
            feeder_batch *b;
            int rc = feeder_next(ld, &b);
            if (!what[i]) {
                ck_assert_msg(rc == 0, "%d: %s", i, feeder_loader_errmsg(ld));
                ck_assert_int_eq(b->labels[0], i % 3);
                feeder_batch_release(b, NULL);
                continue;
            }
            ck_assert_int_eq(rc, FEEDER_EDATASET);
            char want[1024];
            snprintf(want, sizeof(want), "batch %d of epoch 0: sample %d (%s: key s/%02d): %s: "
                     "dataset is empty or malformed", i, i, p, i, what[i]);
            ck_assert_str_eq(feeder_loader_errmsg(ld), want);
        }
        feeder_loader_destroy(ld);
        /* SKIP: every bad one replaced; the unlabelled ones by the next
         * sample in order, the others within their class. */
        ld = loader(ds, workers, FEEDER_ON_ERROR_SKIP);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 9), 0);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->skipped, 3);
        const uint64_t idx[9] = {0, 2, 2, 6, 4, 6, 6, 7, 8};
        for (int i = 0; i < 9; i++) {
            ck_assert_uint_eq(b->indices[i], idx[i]);
            ck_assert_int_eq(b->labels[i], (int64_t)idx[i] % 3);
        }
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* DROP: the three bad samples of bad_shard are left out, nothing is
 * repeated, and the kept samples' pixels are the ones FAIL delivers for
 * them one by one. */
START_TEST(test_bad_samples_drop)
{
    bad_shard("b.tar");
    feeder_dataset *ds = open_tar("b.tar");
    const uint64_t want[6] = {0, 2, 4, 6, 7, 8};
    /* The reference: each good sample alone, under FAIL. */
    feeder_loader *ref = loader(ds, 0, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ref, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ref, FEEDER_OPT_BATCH_SIZE, 1), 0);
    uint8_t *px[9] = {0};
    size_t sample = 0;
    for (int i = 0; i < 9; i++) {
        feeder_batch *b;
        int rc = feeder_next(ref, &b);
        if (rc == FEEDER_EDATASET)
            continue;
        ck_assert_msg(rc == 0, "%d: %s", i, feeder_loader_errmsg(ref));
        sample = b->sample_bytes;
        px[i] = malloc(sample);
        memcpy(px[i], b->data, sample);
        feeder_batch_release(b, NULL);
    }
    feeder_loader_destroy(ref);
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_loader *ld = loader(ds, workers, FEEDER_ON_ERROR_DROP);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 9), 0);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->count, 6);
        ck_assert_uint_eq(b->skipped, 3);
        for (int i = 0; i < 6; i++) {
            ck_assert_uint_eq(b->indices[i], want[i]);
            ck_assert_int_eq(b->labels[i], (int64_t)want[i] % 3);
            ck_assert_ptr_nonnull(px[want[i]]);
            ck_assert_msg(memcmp(b->data + i * sample, px[want[i]], sample) == 0,
                          "workers %d sample %d", workers, i);
        }
        feeder_batch_release(b, NULL);
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
        feeder_stats st;
        ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
        ck_assert_uint_eq(st.dropped, 3);
        ck_assert_uint_eq(st.samples, 6);
        feeder_loader_destroy(ld);
    }
    for (int i = 0; i < 9; i++)
        free(px[i]);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- descriptors: the shards a reader keeps open ---- */

static uint64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    uint64_t k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        k += e->d_name[0] != '.';
    closedir(d);
    return k - 1;
}

/* n shards t-00.tar ... of one sample each (photo k, label k % 3), opened as
 * one dataset. */
static feeder_dataset *one_per_shard(int n)
{
    char rel[32], name[32], pattern[512], err[1024];
    for (int k = 0; k < n; k++) {
        tu_tar t = {0};
        size_t len;
        uint8_t *j = jpeg((unsigned)k, &len);
        snprintf(name, sizeof(name), "%06d.jpg", k);
        tu_tar_member(&t, name, '0', j, len);
        free(j);
        snprintf(name, sizeof(name), "%06d.cls", k);
        char v[8];
        snprintf(v, sizeof(v), "%d", k % 3);
        tb_file(&t, name, v);
        tb_end(&t);
        snprintf(rel, sizeof(rel), "t-%02d.tar", k);
        tb_write(&t, rel);
    }
    snprintf(pattern, sizeof(pattern), "%s/t-{00..%02d}.tar", tmpdir, n - 1);
    feeder_dataset *ds = NULL;
    ck_assert_msg(feeder_dataset_open_tar_pattern(pattern, &ds, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_uint_eq(feeder_dataset_size(ds), (uint64_t)n);
    return ds;
}

/* Start under RLIMIT_NOFILE `lim`: 0, or the start's error with its message. */
static int start_under(feeder_dataset *ds, int workers, int batch, uint64_t lim, char *msg,
                       size_t msglen)
{
    struct rlimit old, rl;
    getrlimit(RLIMIT_NOFILE, &old);
    rl = old;
    rl.rlim_cur = lim;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    feeder_loader *ld = loader(ds, workers, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    int rc = feeder_loader_start(ld);
    snprintf(msg, msglen, "%s", feeder_loader_errmsg(ld));
    /* A start that passed reads a whole epoch under the limit. */
    feeder_batch *b;
    uint64_t n = 0;
    while (rc == 0 && (rc = feeder_next(ld, &b)) == 0) {
        n += b->count;
        feeder_batch_release(b, NULL);
    }
    if (rc == FEEDER_DONE) {
        rc = n == feeder_dataset_size(ds) ? 0 : -1;
        snprintf(msg, msglen, "%llu samples", (unsigned long long)n);
    } else if (rc != FEEDER_ELIMIT)
        snprintf(msg, msglen, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    setrlimit(RLIMIT_NOFILE, &old);
    return rc;
}

/* The RLIMIT_NOFILE check at start counts the shards a reader keeps open
 * (all of them, up to 32), not the samples of a task: 34 shards need 32
 * descriptors even at batch 1; 3 shards need 3 even at batch 64, and an
 * epoch then runs under the limit the check allowed. */
START_TEST(test_nofile_counts_shards)
{
    feeder_dataset *many = one_per_shard(34);
    uint64_t open_now = count_fds();
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    char msg[1024], want[1024];
    ck_assert_int_eq(start_under(many, 2, 1, open_now + 20, msg, sizeof(msg)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want),
             "RLIMIT_NOFILE is %llu (hard limit %llu), too low: the loader's process needs %llu "
             "descriptors (%llu open + 2 for each of 2 workers + 3) and each worker %llu (%llu "
             "inherited + 3 + 32 tar shards kept open); raise it (ulimit -n, setrlimit)",
             (unsigned long long)(open_now + 20), (unsigned long long)rl.rlim_max,
             (unsigned long long)(open_now + 7), (unsigned long long)open_now,
             (unsigned long long)(open_now + 35), (unsigned long long)open_now);
    ck_assert_str_eq(msg, want);
    ck_assert_int_eq(start_under(many, 0, 1, open_now + 20, msg, sizeof(msg)), FEEDER_ELIMIT);
    snprintf(want, sizeof(want),
             "RLIMIT_NOFILE is %llu (hard limit %llu), too low: reading a batch needs %llu "
             "descriptors (%llu open + 3 + 32 tar shards kept open); raise it (ulimit -n, "
             "setrlimit)",
             (unsigned long long)(open_now + 20), (unsigned long long)rl.rlim_max,
             (unsigned long long)(open_now + 35), (unsigned long long)open_now);
    ck_assert_str_eq(msg, want);
    /* Exactly what the check asks for is enough for a whole epoch. */
    for (int workers = 0; workers <= 1; workers++)
        ck_assert_msg(start_under(many, workers, 1, open_now + 35, msg, sizeof(msg)) == 0,
                      "workers %d: %s", workers, msg);
    feeder_dataset_destroy(many);
    feeder_dataset *few = one_per_shard(3);
    ck_assert_int_eq(count_fds(), open_now);
    for (int workers = 0; workers <= 1; workers++)
        ck_assert_msg(start_under(few, workers, 64, open_now + 8, msg, sizeof(msg)) == 0,
                      "workers %d: %s", workers, msg);
    feeder_dataset_destroy(few);
}
END_TEST

static void expect_bad(const char *rel, uint64_t n, uint64_t bad_at, const char *key,
                       int64_t label, const char *what)
{
    feeder_dataset *ds = open_tar(rel);
    ck_assert_uint_eq(feeder_dataset_size(ds), n);
    feeder_tar_info info;
    feeder_dataset_tar_info(ds, &info);
    ck_assert_uint_eq(info.bad_samples, 1);
    assert_sample(ds, bad_at, key, label, 1);
    feeder_loader *ld = loader(ds, 1, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, (int64_t)n), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EDATASET);
    char p[512], want[1024];
    path_in(p, sizeof(p), rel);
    snprintf(want, sizeof(want), "batch 0 of epoch 0: sample %llu (%s: key %s): %s: dataset "
             "is empty or malformed", (unsigned long long)bad_at, p, key, what);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    ld = loader(ds, 0, FEEDER_ON_ERROR_SKIP);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, (int64_t)n), 0);
    ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(b->skipped, 1);
    ck_assert_uint_eq(b->indices[bad_at], (bad_at + 1) % n);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}

static size_t two_good(tu_tar *t)
{
    for (int i = 0; i < 2; i++) {
        size_t len;
        uint8_t *j = jpeg((unsigned)i, &len);
        char n[32];
        snprintf(n, sizeof(n), "g%d.jpg", i);
        tu_tar_member(t, n, '0', j, len);
        free(j);
        snprintf(n, sizeof(n), "g%d.cls", i);
        tb_file(t, n, "1");
    }
    return t->len;
}

START_TEST(test_truncated_and_bad_checksum)
{
    /* Cut inside the last member's data. */
    tu_tar t = {0};
    two_good(&t);
    tb_file(&t, "g2.cls", "1");
    size_t at = t.len;
    tu_tar_member(&t, "g2.jpg", '0', "0123456789abcdef", 16);
    size_t cut = at + 512 + 10;
    char what[256];
    snprintf(what, sizeof(what), "member g2.jpg: its 16 bytes at offset %zu run past the end of "
             "the shard (%zu bytes): truncated", at + 512, cut);
    t.len = cut;
    tb_write(&t, "t1.tar");
    expect_bad("t1.tar", 3, 2, "g2", 1, what);
    /* Cut inside a header. */
    two_good(&t);
    at = t.len;
    tb_file(&t, "g2.jpg", "x");
    t.len = at + 100;
    tb_write(&t, "t2.tar");
    snprintf(what, sizeof(what), "the shard ends 100 bytes into the header at offset %zu: "
             "truncated", at);
    char key[64];
    snprintf(key, sizeof(key), "(header at offset %zu)", at);
    expect_bad("t2.tar", 3, 2, key, -1, what);
    /* A header's checksum wrong. */
    two_good(&t);
    at = t.len;
    tb_file(&t, "g2.jpg", "x");
    tb_file(&t, "g2.cls", "0");
    tb_end(&t);
    t.b[at + 1] ^= 1;
    unsigned stored = (unsigned)strtoul((char *)t.b + at + 148, NULL, 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += i >= 148 && i < 156 ? ' ' : t.b[at + i];
    tb_write(&t, "t3.tar");
    snprintf(what, sizeof(what), "the header at offset %zu has a bad checksum (stored %u, "
             "computed %u) or size field: the members from there on are lost", at, stored, sum);
    snprintf(key, sizeof(key), "(header at offset %zu)", at);
    expect_bad("t3.tar", 3, 2, key, -1, what);
    /* A member over the 1 GiB limit: its size claimed, the file made sparse. */
    two_good(&t);
    at = tu_tar_member_sized(&t, "g2.jpg", '0', NULL, 0, FEEDER__MAX_FILE_BYTES + 1);
    tb_write(&t, "t4.tar");
    char p[512];
    path_in(p, sizeof(p), "t4.tar");
    int fd = open(p, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)(at + 512 + FEEDER__MAX_FILE_BYTES + 512)), 0);
    tu_tar tail = {0};
    tb_file(&tail, "g2.cls", "1");
    tb_end(&tail);
    ck_assert_int_eq(write(fd, tail.b, tail.len), (ssize_t)tail.len);
    close(fd);
    free(tail.b);
    feeder_dataset *ds = open_tar("t4.tar");
    ck_assert_uint_eq(feeder_dataset_size(ds), 3);
    assert_sample(ds, 2, "g2", 1, 1);
    feeder_loader *ld = loader(ds, 0, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 3), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EDATASET);
    char want[1024];
    snprintf(want, sizeof(want), "batch 0 of epoch 0: sample 2 (%s: key g2): member g2.jpg is "
             "1073741825 bytes, over the 1 GiB limit: dataset is empty or malformed", p);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_open_errors)
{
    char p[512], err[1024];
    feeder_dataset *ds = NULL;
    /* Not a tar at all. */
    path_in(p, sizeof(p), "junk.tar");
    ck_assert_int_eq(bu_write_file(p, "this is not a tar file, only text\n", 34), 0);
    const char *one[] = {p};
    ck_assert_int_eq(feeder_dataset_open_tar(one, 1, &ds, err, sizeof(err)), FEEDER_EDATASET);
    char want[1024];
    snprintf(want, sizeof(want), "%s: not a tar file: its first 512-byte header is cut short or "
             "its checksum or size field is wrong", p);
    ck_assert_str_eq(err, want);
    uint8_t zeros[1024] = {0};
    ck_assert_int_eq(bu_write_file(p, zeros, 1024), 0); /* an empty archive */
    ck_assert_int_eq(feeder_dataset_open_tar(one, 1, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s: no samples (keys with a .jpg, .jpeg, .png or .webp and a "
             ".cls member) in 1 tar shard", p);
    ck_assert_str_eq(err, want);
    /* Missing, a folder. */
    path_in(p, sizeof(p), "missing.tar");
    ck_assert_int_eq(feeder_dataset_open_tar(one, 1, &ds, err, sizeof(err)), -ENOENT);
    snprintf(want, sizeof(want), "%s: cannot open tar shard: No such file or directory", p);
    ck_assert_str_eq(err, want);
    path_in(p, sizeof(p), "");
    ck_assert_int_eq(feeder_dataset_open_tar(one, 1, &ds, err, sizeof(err)), -EISDIR);
    snprintf(want, sizeof(want), "%s: not a tar shard: a folder, not a regular file", p);
    ck_assert_str_eq(err, want);
    /* Arguments. */
    ck_assert_int_eq(feeder_dataset_open_tar(NULL, 1, &ds, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_dataset_open_tar(one, 0, &ds, err, sizeof(err)), FEEDER_EINVAL);
    const char *nul[] = {NULL};
    ck_assert_int_eq(feeder_dataset_open_tar(nul, 1, &ds, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dataset_open_tar: paths[0] is NULL");
    ck_assert_int_eq(feeder_dataset_open_tar_pattern("s-{0..2.tar", &ds, err, sizeof(err)),
                     FEEDER_EINVAL);
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(NULL, &ds, err, sizeof(err)),
                     FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dataset_open_tar_pattern: pattern and out must not be NULL");
    ck_assert_int_eq(feeder_dataset_open_shards("s-0.tar", NULL, NULL, err, sizeof(err)),
                     FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dataset_open_shards: pattern and out must not be NULL");
    /* The second shard of a pattern missing: named. */
    four_samples("p-0.tar");
    snprintf(p, sizeof(p), "%s/p-{0..1}.tar", tmpdir);
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(p, &ds, err, sizeof(err)), -ENOENT);
    snprintf(want, sizeof(want), "%s/p-1.tar: cannot open tar shard: No such file or directory",
             tmpdir);
    ck_assert_str_eq(err, want);
}
END_TEST

/* ---- resume ---- */

static uint8_t *save_state(feeder_loader *ld, size_t *len)
{
    ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, len), 0);
    uint8_t *blob = malloc(*len);
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, *len, len), 0);
    return blob;
}

START_TEST(test_resume_same_set_only)
{
    make_shards(2, 5);
    char pattern[512], err[1024];
    snprintf(pattern, sizeof(pattern), "%s/s-{0..1}.tar", tmpdir);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(pattern, &ds, err, sizeof(err)), 0);
    feeder_loader *ld = loader(ds, 1, FEEDER_ON_ERROR_FAIL);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    size_t len;
    uint8_t *blob = save_state(ld, &len);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    uint64_t want[4];
    memcpy(want, b->indices, sizeof(want));
    uint8_t *pix = malloc(b->sample_bytes * 4);
    memcpy(pix, b->data, b->sample_bytes * 4);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* The same set: the next batch, byte for byte. */
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(pattern, &ds, err, sizeof(err)), 0);
    ld = loader(ds, 1, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), 0);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 1);
    ck_assert_int_eq(memcmp(b->indices, want, sizeof(want)), 0);
    ck_assert_int_eq(memcmp(b->data, pix, b->sample_bytes * 4), 0);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* Another set: shard 1 with one label changed (same size). */
    char cls[512], cmd[1500];
    snprintf(cls, sizeof(cls), "%s/src/s1/000007.cls", tmpdir);
    ck_assert_int_eq(bu_write_file(cls, "4", 1), 0);
    snprintf(cmd, sizeof(cmd), "tar -C %s/src --sort=name -cf %s/s-1.tar s1", tmpdir, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(pattern, &ds, err, sizeof(err)), 0);
    ld = loader(ds, 0, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_EMISMATCH);
    const char *msg = "state blob does not match the loader: the dataset's files differ";
    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), msg, strlen(msg)) == 0, "%s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* One shard fewer. */
    snprintf(pattern, sizeof(pattern), "%s/s-0.tar", tmpdir);
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(pattern, &ds, err, sizeof(err)), 0);
    ld = loader(ds, 0, FEEDER_ON_ERROR_FAIL);
    ck_assert_int_ne(feeder_loader_state_load(ld, blob, len), 0);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(pix);
    free(blob);
}
END_TEST

/* ---- feeder-pack from a tar shard set ---- */

#ifndef FEEDER_PACK_TOOL
#define FEEDER_PACK_TOOL ""
#endif

/* Run feeder-pack with `args`; its exit status, its stderr in `out`. */
static int pack_tool(const char *args, char *out, size_t outlen)
{
    char cmd[2048], errf[512];
    path_in(errf, sizeof(errf), "pack.err");
    snprintf(cmd, sizeof(cmd), "%s %s --quiet 2>%s", FEEDER_PACK_TOOL, args, errf);
    int st = system(cmd);
    uint8_t *e;
    size_t n;
    out[0] = 0;
    if (bu_read_file(errf, &e, &n) == 0) {
        snprintf(out, outlen, "%.*s", (int)n, (const char *)e);
        free(e);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_pack_from_tar)
{
    if (!FEEDER_PACK_TOOL[0])
        return;
    make_shards(2, 6);
    char args[1024], msg[1024], pack[512], err[1024];
    path_in(pack, sizeof(pack), "t.pack");
    snprintf(args, sizeof(args), "--data '%s/s-{0..1}.tar' --out %s --mode jpeg --verify", tmpdir,
             pack);
    ck_assert_msg(pack_tool(args, msg, sizeof(msg)) == 0, "%s", msg);
    feeder_dataset *tar, *pk;
    snprintf(args, sizeof(args), "%s/s-{0..1}.tar", tmpdir);
    ck_assert_int_eq(feeder_dataset_open_tar_pattern(args, &tar, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_dataset_open_packed(pack, &pk, err, sizeof(err)), 0);
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(pk, &info), 0);
    ck_assert_int_eq(info.kind, FEEDER_RECORD_JPEG);
    ck_assert_uint_eq(info.records, 12);
    uint64_t total = 0;
    for (uint64_t i = 0; i < 12; i++) {
        uint64_t size;
        ck_assert_int_eq(feeder_dataset_tar_sample(tar, i, NULL, NULL, NULL, &size, NULL), 0);
        total += size;
        ck_assert_int_eq(feeder_dataset_label(pk, i), feeder_dataset_label(tar, i));
    }
    ck_assert_uint_eq(info.data_bytes, total);
    capture want = run_capture(tar, 1), got = run_capture(pk, 1);
    ck_assert_uint_eq(got.bytes, want.bytes);
    ck_assert_int_eq(memcmp(got.data, want.data, want.bytes), 0);
    ck_assert_int_eq(memcmp(got.labels, want.labels, sizeof(want.labels)), 0);
    free(want.data);
    free(got.data);
    feeder_dataset_destroy(pk);
    feeder_dataset_destroy(tar);
    /* Every bad sample is named, one per line; nothing is written. */
    bad_shard("b.tar");
    path_in(pack, sizeof(pack), "b.pack");
    snprintf(args, sizeof(args), "--data %s/b.tar --out %s --mode jpeg", tmpdir, pack);
    ck_assert_int_eq(pack_tool(args, msg, sizeof(msg)), 1);
    char want_msg[2048];
    snprintf(want_msg, sizeof(want_msg),
             "feeder-pack: %s/b.tar: key s/01: no .cls member\n"
             "feeder-pack: %s/b.tar: key s/03: member s/03.jpg is a symbolic link (type '2'), "
             "not a regular file\n"
             "feeder-pack: %s/b.tar: key s/05: member s/05.cls holds 'x7', not a non-negative "
             "integer label\n"
             "feeder-pack: 3 bad files (listed above): nothing written; --skip-bad packs the "
             "others\n",
             tmpdir, tmpdir, tmpdir);
    ck_assert_str_eq(msg, want_msg);
    ck_assert_int_ne(access(pack, F_OK), 0);
}
END_TEST

static Suite *tar_suite(void)
{
    Suite *s = suite_create("tar");
    TCase *tc = tcase_create("tar");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_groups_keys_and_members);
    tcase_add_test(tc, test_long_names_gnu_and_pax);
    tcase_add_test(tc, test_pax_very_long_and_over_limit);
    tcase_add_test(tc, test_gnu_tar_output);
    tcase_add_test(tc, test_batches_equal_list_file);
    tcase_add_test(tc, test_index_written_then_used);
    tcase_add_test(tc, test_index_format_rejects);
    tcase_add_test(tc, test_bad_samples_fail_and_skip);
    tcase_add_test(tc, test_bad_samples_drop);
    tcase_add_test(tc, test_nofile_counts_shards);
    tcase_add_test(tc, test_truncated_and_bad_checksum);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_resume_same_set_only);
    tcase_add_test(tc, test_pack_from_tar);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tar_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
