/*
 * Packed datasets: the format's checks (every rejection and its message), the
 * read paths (mmap, io_uring, O_DIRECT) against each other, round trips
 * through feeder-pack (RAW and JPEG packs give the folder's very batches),
 * shards, checksums and the skip policy, and a pack interrupted by signals.
 * Datasets are small folders cut from bench/tu_photos in a temporary folder.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "feeder.h"
#include "dataset/pack.h"
#include "decode/decode.h"
#include "loader/loader.h"

#ifndef FEEDER_PACK_TOOL
#define FEEDER_PACK_TOOL ""
#endif

/* ---- helpers ---- */

/* /var/tmp is on disk on most systems, where O_DIRECT works; /tmp may be
 * tmpfs. Either way the O_DIRECT tests say what they ran on. */
static void setup(void)
{
    tu_setup_in("/var/tmp");
}

static void make_folder(const char *rel, int classes, int per)
{
    tu_make_folder(tu_photos, tu_dir, rel, classes, per, "k", 96, 120, 80, 140);
}

static feeder_dataset *open_folder(const char *rel) { return tu_open_folder(tu_dir, rel); }

static feeder_dataset *open_pack(const char *rel)
{
    char p[512], err[1024];
    tu_path(p, sizeof(p), rel);
    feeder_dataset *ds = NULL;
    int rc = feeder_dataset_open_packed(p, &ds, err, sizeof(err));
    ck_assert_msg(rc == 0, "open_packed: %s", err);
    return ds;
}

static int file_exists(const char *rel)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    struct stat st;
    return stat(p, &st) == 0;
}

/* Run feeder-pack with `args` (NULL-terminated, without argv[0]); its stderr
 * goes to `errout` (may be NULL). Returns the wait status. */
static int run_tool(const char *const *args, char *errout, size_t errlen)
{
    char log[512];
    tu_path(log, sizeof(log), "tool.log");
    const char *argv[32] = {FEEDER_PACK_TOOL};
    int n = 1;
    for (; args[n - 1]; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        execv(FEEDER_PACK_TOOL, (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (errout) {
        uint8_t *d;
        size_t len;
        ck_assert_int_eq(bu_read_file(log, &d, &len), 0);
        snprintf(errout, errlen, "%.*s", (int)len, (const char *)d);
        free(d);
    }
    return st;
}

static void pack_ok(const char *const *args)
{
    char out[4096];
    int st = run_tool(args, out, sizeof(out));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "feeder-pack failed: %s", out);
}

typedef struct cfg {
    int workers, shuffle, batch, pipeline, layout, read, io, verify, policy, set_shape;
    uint32_t height, width, resize;
    uint64_t seed;
} cfg;

static cfg defaults(void)
{
    return (cfg){.workers = 2, .shuffle = 1, .batch = 5, .pipeline = FEEDER_PIPELINE_EVAL,
                 .layout = FEEDER_LAYOUT_NHWC, .read = FEEDER_PACKED_READ_MMAP,
                 .io = FEEDER_IO_AUTO, .set_shape = 1, .height = 48, .width = 64, .resize = 72,
                 .seed = 7};
}

static feeder_loader *make_loader(feeder_dataset *ds, const cfg *c)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, c->batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, c->workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, c->shuffle), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)c->seed), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PACKED_READ, c->read), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, c->io), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, c->verify), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, c->policy), 0);
    if (c->set_shape) {
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, c->pipeline), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, c->layout), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, c->height), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, c->width), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, c->resize), 0);
    }
    return ld;
}

/* Every batch of `epochs` epochs, kept whole: data, labels, indices. */
typedef struct capture {
    uint8_t *data;
    size_t len, cap;
    uint64_t batches, samples;
} capture;

static void cap_add(capture *c, const void *p, size_t n)
{
    if (c->len + n > c->cap) {
        c->cap = (c->len + n) * 2;
        c->data = realloc(c->data, c->cap);
        ck_assert_ptr_nonnull(c->data);
    }
    memcpy(c->data + c->len, p, n);
    c->len += n;
}

static capture run_capture(feeder_dataset *ds, const cfg *c, int epochs)
{
    feeder_loader *ld = make_loader(ds, c);
    capture cp = {0};
    for (int e = 0; e < epochs; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            uint32_t hdr[4] = {b->count, b->height, b->width, (uint32_t)b->layout};
            cap_add(&cp, hdr, sizeof(hdr));
            cap_add(&cp, b->data, (size_t)b->count * b->sample_bytes);
            cap_add(&cp, b->labels, b->count * sizeof(int64_t));
            cap_add(&cp, b->indices, b->count * sizeof(uint64_t));
            cp.batches++;
            cp.samples += b->count;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "feeder_next: %s: %s", feeder_strerror(rc),
                      feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
    return cp;
}

static void assert_same(const capture *a, const capture *b, const char *what)
{
    ck_assert_msg(a->len == b->len && a->batches == b->batches,
                  "%s: %zu bytes in %llu batches vs %zu in %llu", what, a->len,
                  (unsigned long long)a->batches, b->len, (unsigned long long)b->batches);
    size_t i = 0;
    while (i < a->len && a->data[i] == b->data[i])
        i++;
    ck_assert_msg(i == a->len, "%s: first difference at byte %zu of %zu", what, i, a->len);
}

/* O_DIRECT is not offered by every file system (tmpfs before Linux 6.6). */
static int direct_works(const char *rel)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    int fd = open(p, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

/* ---- CRC32C ---- */

START_TEST(test_crc32c)
{
    /* The check value of CRC-32C (RFC 3720 appendix B.4 test vectors too). */
    ck_assert_uint_eq(feeder__crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(feeder__crc32c_portable(0, "123456789", 9), 0xE3069283u);
    uint8_t z[32] = {0}, f[32], up[32], down[32];
    memset(f, 0xff, sizeof(f));
    for (int i = 0; i < 32; i++) {
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    ck_assert_uint_eq(feeder__crc32c(0, z, 32), 0x8A9136AAu);
    ck_assert_uint_eq(feeder__crc32c(0, f, 32), 0x62A8AB43u);
    ck_assert_uint_eq(feeder__crc32c(0, up, 32), 0x46DD794Eu);
    ck_assert_uint_eq(feeder__crc32c(0, down, 32), 0x113FDB5Cu);
    ck_assert_uint_eq(feeder__crc32c(0, "", 0), 0);
    ck_assert_uint_eq(feeder__crc32c(0x12345678u, "", 0), 0x12345678u);
}
END_TEST

/* ISA-L (feeder__crc32c) against the byte-wise table at every length 0..4096
 * and every alignment 0..15, from 0 and from a chained CRC, and split at
 * every third of the length: ISA-L's register is taken raw, so the
 * inversions around it are ours to get right, and its code changes path at
 * 8, 200, 256 and 3,072 bytes and with the address's alignment. */
START_TEST(test_crc32c_every_length_and_alignment)
{
    enum { MAXLEN = 4096, ALIGNS = 16 };
    uint8_t *mem = malloc(MAXLEN + ALIGNS + 64);
    ck_assert_ptr_nonnull(mem);
    uint8_t *base = (uint8_t *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < MAXLEN + ALIGNS; i++)
        base[i] = (uint8_t)(feeder_random(1, 2, i, 0) >> 7);
    for (size_t off = 0; off < ALIGNS; off++)
        for (size_t len = 0; len <= MAXLEN; len++) {
            const uint8_t *p = base + off;
            uint32_t want = feeder__crc32c_portable(0, p, len);
            uint32_t seed = (uint32_t)feeder_random(3, 4, len, off);
            ck_assert_msg(feeder__crc32c(0, p, len) == want,
                          "offset %zu length %zu: 0x%08x, the table 0x%08x", off, len,
                          feeder__crc32c(0, p, len), want);
            ck_assert_uint_eq(feeder__crc32c(seed, p, len), feeder__crc32c_portable(seed, p, len));
            ck_assert_uint_eq(feeder__crc32c(feeder__crc32c(0, p, len / 3), p + len / 3,
                                             len - len / 3), want);
        }
    free(mem);
}
END_TEST


/* ---- building packs in memory, valid or not ---- */

/* A valid RAW pack of `n` 2x3x3 records, labels i % 3, three class names. */
typedef struct mem_pack {
    feeder__pack_header h;
    uint8_t *buf;
    size_t len;
} mem_pack;

static const char CLASSES[] = "ant\0bee\0cat";

static mem_pack build_raw(uint64_t n)
{
    mem_pack m;
    memset(&m, 0, sizeof(m));
    feeder__pack_header *h = &m.h;
    h->version = 1;
    h->header_bytes = 4096;
    h->kind = FEEDER_RECORD_RAW;
    h->dtype = 1;
    h->layout = FEEDER_LAYOUT_NHWC;
    h->height = 2;
    h->width = 3;
    h->channels = 3;
    h->label_type = 1;
    h->count = n;
    h->record_bytes = 18;
    h->num_classes = 3;
    h->shard_count = 1;
    h->total_records = n;
    m.len = feeder__pack_layout(h, sizeof(CLASSES), n * 18);
    ck_assert_uint_gt(m.len, 0);
    m.buf = calloc(1, m.len);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *rec = m.buf + h->records_off + i * 18;
        for (int k = 0; k < 18; k++)
            rec[k] = (uint8_t)(i * 18 + k);
        feeder__pack_entry_encode(m.buf + h->index_off + i * 24, h->records_off + i * 18, 18,
                                  feeder__crc32c(0, rec, 18));
        int64_t lab = (int64_t)(i % 3);
        memcpy(m.buf + h->labels_off + i * 8, &lab, 8);
    }
    memcpy(m.buf + h->classes_off, CLASSES, sizeof(CLASSES));
    feeder__pack_header_encode(h, m.buf);
    return m;
}

static void write_rel(const char *rel, const void *data, size_t len)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    ck_assert_int_eq(bu_write_file(p, data, len), 0);
}

/* Write buf[0, len) as x.pack and expect open to fail with `rc` and exactly
 * "PATH: " + want. */
static void expect_reject(const uint8_t *buf, size_t len, int want_rc, const char *want)
{
    write_rel("x.pack", buf, len);
    char p[512], err[1024], full[1400];
    tu_path(p, sizeof(p), "x.pack");
    feeder_dataset *ds = (feeder_dataset *)0x1;
    int rc = feeder_dataset_open_packed(p, &ds, err, sizeof(err));
    snprintf(full, sizeof(full), "%s: %s", p, want);
    ck_assert_msg(rc == want_rc, "rc %d (%s), want %d: %s", rc, feeder_strerror(rc), want_rc, err);
    ck_assert_str_eq(err, full);
    ck_assert_ptr_eq(ds, (feeder_dataset *)0x1); /* untouched on failure */
    /* The pure parser says the same about the same bytes. */
    feeder__pack_view v;
    char err2[1024];
    if (want_rc == FEEDER_EFORMAT) {
        ck_assert_int_eq(feeder__pack_parse(buf, len, p, &v, err2, sizeof(err2)), FEEDER_EFORMAT);
        ck_assert_str_eq(err2, full);
    }
}

/* A copy of m with header fields changed by `edit` and the crc redone. */
typedef void (*hedit)(feeder__pack_header *h);
static void expect_header_reject(hedit edit, const char *want)
{
    mem_pack m = build_raw(4);
    edit(&m.h);
    feeder__pack_header_encode(&m.h, m.buf);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, want);
    free(m.buf);
}

static void e_kind(feeder__pack_header *h) { h->kind = 7; }
static void e_dtype(feeder__pack_header *h) { h->dtype = 2; }
static void e_label(feeder__pack_header *h) { h->label_type = 3; }
static void e_hsize(feeder__pack_header *h) { h->header_bytes = 8192; }
static void e_count0(feeder__pack_header *h) { h->count = 0; }
static void e_layout(feeder__pack_header *h) { h->layout = 2; }
static void e_chan(feeder__pack_header *h) { h->channels = 4; h->record_bytes = 24; }
static void e_rbytes(feeder__pack_header *h) { h->record_bytes = 20; }
static void e_shape_ovf(feeder__pack_header *h) { h->height = h->width = 0xffffffffu; }
static void e_shard(feeder__pack_header *h) { h->shard_index = 2; h->shard_count = 2; }
static void e_total(feeder__pack_header *h) { h->shard_first = 1; }
static void e_count_ovf(feeder__pack_header *h) { h->count = UINT64_MAX / 8; h->total_records = h->count; }
static void e_index_eof(feeder__pack_header *h) { h->index_off = 1u << 20; }
static void e_index_hdr(feeder__pack_header *h) { h->index_off = 100; }
static void e_index_wrap(feeder__pack_header *h) { h->index_off = UINT64_MAX - 10; }
static void e_labels_eof(feeder__pack_header *h) { h->labels_off = 20464; }
static void e_rec_align(feeder__pack_header *h) { h->records_off += 8; }
static void e_rec_eof(feeder__pack_header *h) { h->records_bytes = 1u << 20; }
static void e_classes_eof(feeder__pack_header *h) { h->classes_bytes = 1u << 30; }
static void e_classes_many(feeder__pack_header *h) { h->num_classes = 4; }
static void e_classes_few(feeder__pack_header *h) { h->num_classes = 2; }
static void e_rec_small(feeder__pack_header *h) { h->records_bytes = 40; }
static void e_fields_v1(feeder__pack_header *h) { h->kind = FEEDER_RECORD_FIELDS; }
static void e_raw_v3(feeder__pack_header *h) { h->version = 3; }
static void e_schema_raw(feeder__pack_header *h) { h->fields_off = 12288; h->fields_bytes = 80; }

START_TEST(test_reject_header_fields)
{
    /* build_raw(4): index at 4096 (96 bytes), labels at 8192 (32 bytes),
     * classes at 12288 (12 bytes), records at 16384 (72 bytes), 20480 in all. */
    expect_header_reject(e_kind, "unknown record kind 7 (1 = RAW, 2 = JPEG, 3 = FIELDS)");
    expect_header_reject(e_fields_v1, "record kind 3 in a version 1 file (FIELDS files are "
                                      "version 3, RAW and JPEG files versions 1 and 2)");
    expect_header_reject(e_raw_v3, "record kind 1 in a version 3 file (FIELDS files are "
                                   "version 3, RAW and JPEG files versions 1 and 2)");
    expect_header_reject(e_schema_raw, "a schema section in a file of record kind 1");
    expect_header_reject(e_dtype, "unsupported dtype 2 (version 1 stores uint8 = 1)");
    expect_header_reject(e_label, "unsupported label type 3 (version 1 stores int64 = 1)");
    expect_header_reject(e_hsize, "header size 8192 (version 1 headers are 4096 bytes)");
    expect_header_reject(e_count0, "holds no records");
    expect_header_reject(e_layout, "unknown layout 2 (0 = NHWC, 1 = NCHW)");
    expect_header_reject(e_chan, "RAW sample shape 2x3x4 is not supported (height and width > 0, "
                                 "3 or 1 channels)");
    expect_header_reject(e_rbytes, "RAW record size mismatch: the header says 20 bytes per "
                                   "record, 2x3x3 is 18");
    expect_header_reject(e_shape_ovf, "RAW sample shape 4294967295x4294967295x3 overflows a size");
    expect_header_reject(e_shard, "shard 2 of 2 is not a valid shard number");
    expect_header_reject(e_total, "shard holds 4 records from record 1 on, past the 4 records "
                                  "of all shards");
    expect_header_reject(e_count_ovf, "record count 2305843009213693951 is too large for any file");
    expect_header_reject(e_index_eof, "index (offset 1048576, 96 bytes) runs past the end of the "
                                      "file (20480 bytes)");
    expect_header_reject(e_index_hdr, "index (offset 100) overlaps the 4096-byte header");
    expect_header_reject(e_index_wrap, "index (offset 18446744073709551605, 96 bytes) runs past "
                                       "the end of the file (20480 bytes)");
    expect_header_reject(e_labels_eof, "labels (offset 20464, 32 bytes) runs past the end of the "
                                       "file (20480 bytes)");
    expect_header_reject(e_rec_align, "record area offset 16392 is not a multiple of 4096");
    expect_header_reject(e_rec_eof, "record area (offset 16384, 1048576 bytes) runs past the end "
                                    "of the file (20480 bytes)");
    expect_header_reject(e_classes_eof, "class names (offset 12288, 1073741824 bytes) runs past "
                                        "the end of the file (20480 bytes)");
    expect_header_reject(e_classes_many, "class name 3 of 4 does not end within the 12 bytes of "
                                         "class names");
    expect_header_reject(e_classes_few, "label 2 of record 2 is outside [0, 2)");
    expect_header_reject(e_rec_small, "record 2 (offset 16420, 18 bytes) lies outside the record "
                                      "area (offset 16384, 40 bytes)");
}
END_TEST

START_TEST(test_reject_magic_version_truncation)
{
    mem_pack m = build_raw(4);
    char msg[256];
    /* Truncated at several points, from nothing to inside the record area. */
    expect_reject(m.buf, 0, FEEDER_EFORMAT,
                  "not a feeder packed file (0 bytes, shorter than its 8-byte magic)");
    expect_reject(m.buf, 5, FEEDER_EFORMAT,
                  "not a feeder packed file (5 bytes, shorter than its 8-byte magic)");
    expect_reject(m.buf, 10, FEEDER_EFORMAT, "truncated header (10 of 4096 bytes)");
    expect_reject(m.buf, 2000, FEEDER_EFORMAT, "truncated header (2000 of 4096 bytes)");
    expect_reject(m.buf, 4096, FEEDER_EFORMAT,
                  "index (offset 4096, 96 bytes) runs past the end of the file (4096 bytes)");
    expect_reject(m.buf, 8200, FEEDER_EFORMAT,
                  "labels (offset 8192, 32 bytes) runs past the end of the file (8200 bytes)");
    expect_reject(m.buf, 16400, FEEDER_EFORMAT,
                  "record area (offset 16384, 72 bytes) runs past the end of the file (16400 "
                  "bytes)");
    /* The whole file but the padding after the records is enough. */
    feeder__pack_view v;
    ck_assert_int_eq(feeder__pack_parse(m.buf, 16384 + 72, "x", &v, msg, sizeof(msg)), 0);

    /* A foreign file, and a flipped magic byte. */
    const uint8_t png[16] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    expect_reject(png, sizeof(png), FEEDER_EFORMAT,
                  "not a feeder packed file (bad magic 89 50 4e 47 0d 0a 1a 0a; expected "
                  "\"FEEDPACK\")");
    m.buf[3] ^= 0x20;
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "not a feeder packed file (bad magic 46 45 45 64 50 41 43 4b; expected "
                  "\"FEEDPACK\")");
    m.buf[3] ^= 0x20;

    /* Another version is refused before its crc is looked at. */
    m.buf[8] = 4;
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "unsupported format version 4 (this library reads versions 1 to 3)");
    m.buf[8] = 1;

    /* One flipped bit anywhere in the header page. */
    uint32_t stored;
    memcpy(&stored, m.buf + 4092, 4);
    m.buf[3000] ^= 4;
    snprintf(msg, sizeof(msg), "header crc32c mismatch (stored 0x%08x, computed 0x%08x)", stored,
             feeder__crc32c(0, m.buf, 4092));
    ck_assert_uint_ne(stored, feeder__crc32c(0, m.buf, 4092));
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, msg);
    m.buf[3000] ^= 4;

    /* Unchanged, it opens. */
    write_rel("ok.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("ok.pack");
    ck_assert_uint_eq(feeder_dataset_size(ds), 4);
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

/* Index entries: sizes, bounds, order; labels. */
START_TEST(test_reject_index_and_labels)
{
    mem_pack m = build_raw(4);
    const feeder__pack_header *h = &m.h;
    uint8_t save[24];
    uint8_t *e2 = m.buf + h->index_off + 2 * 24;
    memcpy(save, e2, 24);

    feeder__pack_entry_encode(e2, h->records_off + 36, 17, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, "record 2 has 17 bytes; RAW records of 2x3x3 are 18");
    feeder__pack_entry_encode(e2, h->records_off + 36, 0, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, "record 2 is empty (size 0)");
    feeder__pack_entry_encode(e2, 20000, 18, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "record 2 (offset 20000, 18 bytes) lies outside the record area (offset 16384, "
                  "72 bytes)");
    feeder__pack_entry_encode(e2, UINT64_MAX - 4, 18, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "record 2 (offset 18446744073709551611, 18 bytes) lies outside the record area "
                  "(offset 16384, 72 bytes)");
    feeder__pack_entry_encode(e2, 4096, 18, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "record 2 (offset 4096, 18 bytes) lies outside the record area (offset 16384, "
                  "72 bytes)");
    feeder__pack_entry_encode(e2, h->records_off + 30, 18, 0);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT,
                  "record 2 (offset 16414) starts before record 1 ends (offset 16420): records "
                  "must be in index order and must not overlap");
    memcpy(e2, save, 24);

    int64_t bad = -5;
    memcpy(m.buf + h->labels_off + 8, &bad, 8);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, "label -5 of record 1 is outside [0, 3)");
    bad = 3;
    memcpy(m.buf + h->labels_off + 8, &bad, 8);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, "label 3 of record 1 is outside [0, 3)");

    /* Without stored class names a label only has to be non-negative, and
     * the class count is the largest label + 1. */
    m.h.num_classes = 0;
    feeder__pack_header_encode(&m.h, m.buf);
    bad = 40;
    memcpy(m.buf + h->labels_off + 8, &bad, 8);
    write_rel("nc.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("nc.pack");
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 41);
    ck_assert_ptr_null(feeder_dataset_class_name(ds, 0));
    ck_assert_int_eq(feeder_dataset_label(ds, 1), 40);
    feeder_dataset_destroy(ds);
    bad = -1;
    memcpy(m.buf + h->labels_off + 8, &bad, 8);
    expect_reject(m.buf, m.len, FEEDER_EFORMAT, "label -1 of record 1 is negative");
    free(m.buf);
}
END_TEST

START_TEST(test_reject_not_a_file)
{
    char p[512], err[1024], want[1200];
    feeder_dataset *ds;
    tu_path(p, sizeof(p), "missing.pack");
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), -ENOENT);
    snprintf(want, sizeof(want), "%s: cannot open packed file: No such file or directory", p);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_packed(tu_dir, &ds, err, sizeof(err)), -EISDIR);
    snprintf(want, sizeof(want), "%s: is a folder, not a packed file", tu_dir);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_packed("/dev/null", &ds, err, sizeof(err)),
                     FEEDER_EFORMAT);
    ck_assert_str_eq(err, "/dev/null: not a regular file");
    ck_assert_int_eq(feeder_dataset_open_packed(NULL, &ds, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dataset_open_packed: path and out must not be NULL");
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(NULL, &info), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_strerror(FEEDER_EFORMAT), "not a valid feeder packed file");
    ck_assert_str_eq(feeder_err_name(FEEDER_ECHECKSUM), "FEEDER_ECHECKSUM");
    ck_assert_str_eq(feeder_err_name(FEEDER_ESHAPE), "FEEDER_ESHAPE");
}
END_TEST

/* ---- loading what was built in memory ---- */

START_TEST(test_raw_records_labels_and_info)
{
    mem_pack m = build_raw(11);
    write_rel("r.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("r.pack");
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(ds, &info), 0);
    ck_assert_uint_eq(info.version, 1);
    ck_assert_int_eq(info.kind, FEEDER_RECORD_RAW);
    ck_assert_int_eq(info.layout, FEEDER_LAYOUT_NHWC);
    ck_assert_uint_eq(info.height, 2);
    ck_assert_uint_eq(info.width, 3);
    ck_assert_uint_eq(info.channels, 3);
    ck_assert_uint_eq(info.records, 11);
    ck_assert_uint_eq(info.record_bytes, 18);
    ck_assert_uint_eq(info.data_bytes, 198);
    ck_assert_uint_eq(info.file_bytes, m.len);
    ck_assert_uint_eq(info.shard_index, 0);
    ck_assert_uint_eq(info.shard_count, 1);
    ck_assert_uint_eq(info.shard_first, 0);
    ck_assert_uint_eq(info.total_records, 11);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 3);
    ck_assert_str_eq(feeder_dataset_class_name(ds, 0), "ant");
    ck_assert_str_eq(feeder_dataset_class_name(ds, 2), "cat");
    ck_assert_ptr_null(feeder_dataset_class_name(ds, 3));
    ck_assert_ptr_null(feeder_dataset_path(ds, 0));
    ck_assert_int_eq(feeder_dataset_label(ds, 7), 1);

    /* Every read path, any workers, shuffled or not: sample i is bytes
     * 18i .. 18i+17, label i % 3. Batches of 4 with 18-byte records make
     * runs that start and end inside 512-byte blocks (the O_DIRECT bounce
     * path) as well as whole blocks. */
    int direct = direct_works("r.pack");
    for (int read = 0; read <= 3; read++)
        for (int workers = 0; workers <= 2; workers += 2)
            for (int shuffle = 0; shuffle <= 1; shuffle++) {
                if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                    continue;
                cfg c = defaults();
                c.set_shape = 0;
                c.read = read;
                c.workers = workers;
                c.shuffle = shuffle;
                c.batch = 4;
                c.verify = 1;
                feeder_loader *ld = make_loader(ds, &c);
                feeder_batch *b;
                int rc;
                uint64_t seen = 0, bytes = 0;
                while ((rc = feeder_next(ld, &b)) == 0) {
                    ck_assert_uint_eq(b->height, 2);
                    ck_assert_uint_eq(b->width, 3);
                    ck_assert_uint_eq(b->sample_bytes, 18);
                    for (uint32_t k = 0; k < b->count; k++) {
                        uint64_t i = b->indices[k];
                        if (!shuffle)
                            ck_assert_uint_eq(i, seen + k);
                        ck_assert_int_eq(b->labels[k], (int64_t)(i % 3));
                        for (int j = 0; j < 18; j++)
                            ck_assert_uint_eq(b->data[k * 18 + j], (uint8_t)(i * 18 + j));
                    }
                    seen += b->count;
                    feeder_batch_release(b, NULL);
                }
                ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
                ck_assert_uint_eq(seen, 11);
                feeder_stats st;
                feeder_loader_stats(ld, &st);
                bytes = st.bytes_read;
                ck_assert_uint_eq(bytes, 11 * 18);
                const char *be = feeder_loader_io_backend(ld, NULL);
                /* AUTO: a 198-byte file fits in half of any machine's memory */
                if (read == FEEDER_PACKED_READ_MMAP || read == FEEDER_PACKED_READ_AUTO)
                    ck_assert_str_eq(be, workers ? "mmap" : "pread"); /* calling thread: pread */
                else if (read == FEEDER_PACKED_READ_URING)
                    ck_assert_msg(!strcmp(be, "io_uring") || !strcmp(be, "pread"), "%s", be);
                else
                    ck_assert_msg(!strcmp(be, "io_uring+O_DIRECT") ||
                                      !strcmp(be, "pread+O_DIRECT"),
                                  "%s", be);
                feeder_loader_destroy(ld);
            }
    if (!direct)
        fprintf(stderr, "test_raw_records_labels_and_info: %s has no O_DIRECT; skipped that "
                        "read path\n", tu_dir);
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

START_TEST(test_shape_adopted_or_mismatch)
{
    mem_pack m = build_raw(5);
    write_rel("r.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("r.pack");
    char p[512], want[1024];
    tu_path(p, sizeof(p), "r.pack");
    feeder_loader *ld;
    feeder_batch *b;

    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 2), 0); /* agrees */
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->height, 2);
    ck_assert_uint_eq(b->width, 3);
    ck_assert_int_eq(b->layout, FEEDER_LAYOUT_NHWC);
    double v;
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_WIDTH, &v), 0);
    ck_assert_int_eq((int)v, 3);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);

    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 4), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ESHAPE);
    snprintf(want, sizeof(want), "%s holds 2x3x3 NHWC records, but the loader was set to height "
             "224, width 4, channels 3, layout NHWC", p);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);

    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, FEEDER_LAYOUT_NCHW), 0);
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ESHAPE);
    /* Height and width were adopted; only the layout disagrees. */
    snprintf(want, sizeof(want), "%s holds 2x3x3 NHWC records, but the loader was set to height "
             "2, width 3, channels 3, layout NCHW", p);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);

    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ESHAPE);
    snprintf(want, sizeof(want), "%s holds precomputed RAW records: pipeline train cannot be "
             "applied to them (pack JPEG records to transform them while loading)", p);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);

    /* Options 50 and 51 have names and bounds. */
    double lo, hi;
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_PACKED_READ, &lo, &hi), 0);
    ck_assert(lo == 0 && hi == 3);
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_PACKED_READ), "packed_read");
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_VERIFY_CRC), "verify_crc");
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    double dflt = -1;
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_PACKED_READ, &dflt), 0);
    ck_assert(dflt == FEEDER_PACKED_READ_AUTO);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PACKED_READ, 4), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "packed_read = 4 is out of range [0, 3]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 2), FEEDER_ERANGE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

/* FEEDER_PACKED_READ_AUTO's rule: the mapping while the file fits in half
 * the memory the process may use, else O_DIRECT (pread through the page
 * cache where the file system has none); shard sets keep their mappings. */
START_TEST(test_packed_read_auto_rule)
{
    const uint64_t G = 1ull << 30;
    ck_assert_int_eq(feeder__packed_read_auto(G, 4 * G, 0, 1), FEEDER_PACKED_READ_MMAP);
    ck_assert_int_eq(feeder__packed_read_auto(2 * G, 4 * G, 0, 1), FEEDER_PACKED_READ_MMAP);
    ck_assert_int_eq(feeder__packed_read_auto(2 * G + 1, 4 * G, 0, 1), FEEDER_PACKED_READ_DIRECT);
    ck_assert_int_eq(feeder__packed_read_auto(3 * G / 2, G, 0, 1), FEEDER_PACKED_READ_DIRECT);
    ck_assert_int_eq(feeder__packed_read_auto(3 * G / 2, G, 0, 0), FEEDER_PACKED_READ_URING);
    ck_assert_int_eq(feeder__packed_read_auto(100 * G, G, 1, 1), FEEDER_PACKED_READ_MMAP);
    ck_assert_int_eq(feeder__packed_read_auto(G, UINT64_MAX, 0, 1), FEEDER_PACKED_READ_MMAP);
    /* Whatever the machine, some room and no more than it has. */
    uint64_t room = feeder__memory_room();
    ck_assert_uint_gt(room, 0);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0)
        ck_assert_uint_le(room, (uint64_t)pages * (uint64_t)psz);
}
END_TEST

/* The resume state records the shape start resolved: a RAW pack's, taken
 * from the file when the options leave it unset. A blob saved mid-epoch
 * then loads into a new loader before its start, and the new loader gives
 * the batches the first one had not. */
START_TEST(test_resume_takes_file_shape)
{
    mem_pack m = build_raw(11);
    write_rel("r.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("r.pack");
    cfg c = defaults();
    c.set_shape = 0;
    c.workers = 0;
    c.batch = 4;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    uint64_t first[4];
    memcpy(first, b->indices, sizeof(first));
    feeder_batch_release(b, NULL);
    uint8_t blob[512];
    size_t len;
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, sizeof(blob), &len), 0);
    feeder_loader_destroy(ld);

    ld = make_loader(ds, &c);
    int rc = feeder_loader_state_load(ld, blob, len);
    ck_assert_msg(rc == 0, "%s", feeder_loader_errmsg(ld));
    uint64_t seen = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->height, 2);
        ck_assert_uint_eq(b->width, 3);
        for (uint32_t k = 0; k < b->count; k++)
            for (int j = 0; j < 4; j++)
                ck_assert_uint_ne(b->indices[k], first[j]);
        seen += b->count;
        feeder_batch_release(b, NULL);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(seen, 7);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

/* A flipped byte in record 1: found only with VERIFY_CRC; FAIL fails the
 * batch with the record's name, SKIP replaces it by record 2. */
START_TEST(test_crc_mismatch_fail_and_skip)
{
    mem_pack m = build_raw(6);
    m.buf[m.h.records_off + 18 + 5] ^= 0x40;
    uint32_t stored;
    uint64_t off, size;
    feeder__pack_view v;
    char err[512];
    ck_assert_int_eq(feeder__pack_parse(m.buf, m.len, "x", &v, err, sizeof(err)), 0);
    feeder__pack_entry(&v, 1, &off, &size, &stored);
    uint32_t computed = feeder__crc32c(0, m.buf + off, size);
    write_rel("c.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("c.pack");
    char p[512], want[1024];
    tu_path(p, sizeof(p), "c.pack");
    int direct = direct_works("c.pack");
    for (int read = 0; read <= 2; read++)
        for (int workers = 0; workers <= 2; workers += 2) {
            if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                continue;
            cfg c = defaults();
            c.set_shape = 0;
            c.shuffle = 0;
            c.batch = 3;
            c.workers = workers;
            c.read = read;
            feeder_batch *b;
            /* Unverified, the damage passes unseen. */
            feeder_loader *ld = make_loader(ds, &c);
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            ck_assert_uint_eq(b->data[18 + 5], (uint8_t)((18 + 5) ^ 0x40));
            feeder_batch_release(b, NULL);
            feeder_loader_destroy(ld);

            c.verify = 1;
            ld = make_loader(ds, &c);
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ECHECKSUM);
            snprintf(want, sizeof(want), "batch 0 of epoch 0: record 1 of %s: crc32c mismatch "
                     "over its bytes (stored 0x%08x, computed 0x%08x)", p, stored, computed);
            ck_assert_str_eq(feeder_loader_errmsg(ld), want);
            ck_assert_int_eq(feeder_next(ld, &b), 0); /* the next batch is fine */
            ck_assert_uint_eq(b->number, 1);
            ck_assert_uint_eq(b->indices[0], 3);
            feeder_batch_release(b, NULL);
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
            feeder_loader_destroy(ld);

            c.policy = FEEDER_ON_ERROR_SKIP;
            ld = make_loader(ds, &c);
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            ck_assert_uint_eq(b->skipped, 1);
            /* Replaced within its class (labels are i % 3): by 4, not by 2. */
            ck_assert_uint_eq(b->indices[0], 0);
            ck_assert_uint_eq(b->indices[1], 4);
            ck_assert_uint_eq(b->indices[2], 2);
            ck_assert_int_eq(b->labels[1], 1);
            for (int j = 0; j < 18; j++)
                ck_assert_uint_eq(b->data[18 + j], (uint8_t)(4 * 18 + j));
            feeder_batch_release(b, NULL);
            feeder_stats st;
            feeder_loader_stats(ld, &st);
            ck_assert_uint_eq(st.skipped, 1);
            feeder_loader_destroy(ld);
        }
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

/* The file is cut short after it was opened (rewritten in place, say): the
 * records past its new end fail with a message on every read path (no
 * SIGBUS from the mapping), the ones before it, in the same run, load. */
START_TEST(test_file_shrunk_after_open)
{
    mem_pack m = build_raw(40);
    ck_assert_uint_eq(m.h.records_off, 16384);
    write_rel("s.pack", m.buf, m.len);
    feeder_dataset *ds = open_pack("s.pack");
    char p[512], want[1024];
    tu_path(p, sizeof(p), "s.pack");
    ck_assert_int_eq(truncate(p, 16384 + 38 * 18), 0); /* records 0..37 stay whole */
    snprintf(want, sizeof(want), "batch 4 of epoch 0: record 38 of %s: the file is now 17068 "
             "bytes, shorter than when it was opened (20480 bytes)", p);
    int direct = direct_works("s.pack");
    for (int read = 0; read <= 2; read++)
        for (int workers = 0; workers <= 2; workers += 2)
            for (int policy = 0; policy <= 1; policy++) {
                if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                    continue;
                cfg c = defaults();
                c.set_shape = 0;
                c.shuffle = 0;
                c.batch = 8;
                c.workers = workers;
                c.read = read;
                c.policy = policy;
                c.verify = workers == 2;
                feeder_loader *ld = make_loader(ds, &c);
                feeder_batch *b;
                for (int k = 0; k < 4; k++) {
                    ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
                    feeder_batch_release(b, NULL);
                }
                int rc = feeder_next(ld, &b);
                if (policy == FEEDER_ON_ERROR_FAIL) {
                    ck_assert_int_eq(rc, -EIO);
                    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
                } else {
                    ck_assert_msg(rc == 0, "%s", feeder_loader_errmsg(ld));
                    /* 38 and 39 are past the end: replaced within their classes
                     * (labels i % 3), wrapping: 38 by 2, 39 by 0. */
                    const uint64_t idx[8] = {32, 33, 34, 35, 36, 37, 2, 0};
                    for (int k = 0; k < 8; k++) {
                        ck_assert_uint_eq(b->indices[k], idx[k]);
                        for (int j = 0; j < 18; j++)
                            ck_assert_uint_eq(b->data[k * 18 + j], (uint8_t)(idx[k] * 18 + j));
                    }
                    ck_assert_uint_eq(b->skipped, 2);
                    feeder_batch_release(b, NULL);
                }
                ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
                feeder_loader_destroy(ld);
            }
    feeder_dataset_destroy(ds);
    free(m.buf);
}
END_TEST

/* JPEG records built in memory: one is not a JPEG (its crc is right). */
START_TEST(test_jpeg_record_decode_error)
{
    uint8_t *j[3];
    size_t jl[3];
    ck_assert_int_eq(bu_make_jpeg(tu_photos, 0, 120, 90, 85, -1, 1, &j[0], &jl[0]), 0);
    j[1] = (uint8_t *)strdup("this is not a jpeg");
    jl[1] = strlen((char *)j[1]);
    ck_assert_int_eq(bu_make_jpeg(tu_photos, 1, 100, 130, 85, -1, 2, &j[2], &jl[2]), 0);
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    h.version = 1;
    h.header_bytes = 4096;
    h.kind = FEEDER_RECORD_JPEG;
    h.dtype = 1;
    h.label_type = 1;
    h.count = 3;
    h.shard_count = 1;
    h.total_records = 3;
    size_t len = feeder__pack_layout(&h, 0, jl[0] + jl[1] + jl[2]);
    uint8_t *buf = calloc(1, len);
    uint64_t pos = h.records_off;
    for (int i = 0; i < 3; i++) {
        memcpy(buf + pos, j[i], jl[i]);
        feeder__pack_entry_encode(buf + h.index_off + i * 24, pos, jl[i],
                                  feeder__crc32c(0, j[i], jl[i]));
        int64_t lab = 10 + i;
        memcpy(buf + h.labels_off + i * 8, &lab, 8);
        pos += jl[i];
    }
    feeder__pack_header_encode(&h, buf);
    write_rel("j.pack", buf, len);
    feeder_dataset *ds = open_pack("j.pack");
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 13);
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(ds, &info), 0);
    ck_assert_int_eq(info.kind, FEEDER_RECORD_JPEG);
    ck_assert_uint_eq(info.height, 0);
    ck_assert_uint_eq(info.record_bytes, 0);

    /* The decoder's own text for those bytes, as the loader must quote it. */
    feeder__decoder *dec;
    ck_assert_int_eq(feeder__decoder_create(&dec), 0);
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_EVAL, .decoder = FEEDER_DECODER_ROI,
                           .height = 48, .width = 64, .resize = 72, .max_pixels = 178956970};
    uint8_t out[48 * 64 * 3];
    char derr[512];
    int drc = feeder__decode_sample(dec, &t, j[1], jl[1], 7, 0, 1, out, NULL, derr, sizeof(derr));
    ck_assert_int_eq(drc, FEEDER_EDECODE);
    feeder__decoder_destroy(dec);
    char p[512], want[1024];
    tu_path(p, sizeof(p), "j.pack");
    snprintf(want, sizeof(want), "batch 0 of epoch 0: record 1 of %s: %.400s", p, derr);
    int direct = direct_works("j.pack");
    for (int read = 0; read <= 2; read++)
        for (int workers = 0; workers <= 1; workers++) {
            if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                continue;
            cfg c = defaults();
            c.shuffle = 0;
            c.batch = 3;
            c.read = read;
            c.workers = workers;
            c.verify = 1;
            feeder_loader *ld = make_loader(ds, &c);
            feeder_batch *b;
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EDECODE);
            ck_assert_str_eq(feeder_loader_errmsg(ld), want);
            feeder_loader_destroy(ld);
            /* Every label here is its own class: no replacement stays in it. */
            c.policy = FEEDER_ON_ERROR_SKIP;
            ld = make_loader(ds, &c);
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EDATASET);
            char want2[1200];
            snprintf(want2, sizeof(want2), "batch 0 of epoch 0: record 1 of %s failed; skip "
                     "policy: its class's (label 11) samples hold no other to replace it", p);
            ck_assert_str_eq(feeder_loader_errmsg(ld), want2);
            feeder_loader_destroy(ld);
            /* DROP leaves it out: a batch of 2. */
            c.policy = FEEDER_ON_ERROR_DROP;
            ld = make_loader(ds, &c);
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            ck_assert_uint_eq(b->count, 2);
            ck_assert_uint_eq(b->indices[0], 0);
            ck_assert_uint_eq(b->indices[1], 2);
            ck_assert_int_eq(b->labels[1], 12);
            ck_assert_uint_eq(b->skipped, 1);
            feeder_batch_release(b, NULL);
            feeder_loader_destroy(ld);
        }
    feeder_dataset_destroy(ds);
    for (int i = 0; i < 3; i++)
        free(j[i]);
    free(buf);
}
END_TEST

/* ---- round trips through feeder-pack ---- */

static void tool_required(void)
{
    if (!FEEDER_PACK_TOOL[0])
        ck_abort_msg("built without feeder-pack (FEEDER_BUILD_TOOLS=OFF)");
}

/* A RAW pack made with the eval transform gives, with the same seed, the
 * folder's batches byte for byte: data, labels, indices. */
static void raw_round_trip(int layout, const char *size)
{
    tool_required();
    make_folder("img", 3, 7);
    char data[512], out[512];
    tu_path(data, sizeof(data), "img");
    tu_path(out, sizeof(out), "img.pack");
    const char *args[] = {"--data", data, "--out", out, "--size", size, "--resize", "72",
                          "--layout", layout ? "nchw" : "nhwc", "--workers", "2", "--batch", "4",
                          "--verify", "--quiet", NULL};
    pack_ok(args);
    feeder_dataset *folder = open_folder("img");
    feeder_dataset *pack = open_pack("img.pack");
    ck_assert_uint_eq(feeder_dataset_size(pack), 21);
    ck_assert_uint_eq(feeder_dataset_num_classes(pack), 3);
    ck_assert_str_eq(feeder_dataset_class_name(pack, 1), "k1");
    for (uint64_t i = 0; i < 21; i++)
        ck_assert_int_eq(feeder_dataset_label(pack, i), feeder_dataset_label(folder, i));
    int direct = direct_works("img.pack");
    for (int workers = 0; workers <= 2; workers += 2) {
        cfg c = defaults();
        c.workers = workers;
        c.layout = layout;
        c.height = 48;
        c.width = strcmp(size, "48x64") == 0 ? 64 : 48;
        capture want = run_capture(folder, &c, 2);
        for (int read = 0; read <= 2; read++) {
            if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                continue;
            cfg pc = c;
            pc.read = read;
            pc.set_shape = read != 1; /* adopted from the file, or set and agreeing */
            pc.verify = read == 2;
            capture got = run_capture(pack, &pc, 2);
            char what[64];
            snprintf(what, sizeof(what), "workers %d read %d", workers, read);
            assert_same(&want, &got, what);
            free(got.data);
        }
        ck_assert_uint_eq(want.samples, 42);
        free(want.data);
    }
    feeder_dataset_destroy(pack);
    feeder_dataset_destroy(folder);
}

START_TEST(test_round_trip_raw_nhwc) { raw_round_trip(FEEDER_LAYOUT_NHWC, "48x64"); }
END_TEST

START_TEST(test_round_trip_raw_nchw) { raw_round_trip(FEEDER_LAYOUT_NCHW, "48"); }
END_TEST

/* A JPEG pack stores the files' bytes: any pipeline gives the folder's
 * batches, random crops included (they hang on the sample index). */
START_TEST(test_round_trip_jpeg)
{
    tool_required();
    make_folder("img", 2, 9);
    char data[512], out[512];
    tu_path(data, sizeof(data), "img");
    tu_path(out, sizeof(out), "img.pack");
    const char *args[] = {"--data", data, "--out", out, "--mode", "jpeg", "--verify", "--quiet",
                          NULL};
    pack_ok(args);
    feeder_dataset *folder = open_folder("img");
    feeder_dataset *pack = open_pack("img.pack");
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(pack, &info), 0);
    ck_assert_int_eq(info.kind, FEEDER_RECORD_JPEG);
    /* Record i is file i, byte for byte. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < 18; i++) {
        uint8_t *d;
        size_t len;
        ck_assert_int_eq(bu_read_file(feeder_dataset_path(folder, i), &d, &len), 0);
        total += len;
        free(d);
    }
    ck_assert_uint_eq(info.data_bytes, total);
    int direct = direct_works("img.pack");
    for (int pipeline = 0; pipeline <= 1; pipeline++)
        for (int workers = 0; workers <= 2; workers += 2) {
            cfg c = defaults();
            c.pipeline = pipeline;
            c.workers = workers;
            capture want = run_capture(folder, &c, 2);
            for (int read = 0; read <= 2; read++) {
                if (read == FEEDER_PACKED_READ_DIRECT && !direct)
                    continue;
                cfg pc = c;
                pc.read = read;
                pc.verify = 1;
                capture got = run_capture(pack, &pc, 2);
                char what[64];
                snprintf(what, sizeof(what), "pipeline %d workers %d read %d", pipeline, workers,
                         read);
                assert_same(&want, &got, what);
                free(got.data);
            }
            free(want.data);
        }
    feeder_dataset_destroy(pack);
    feeder_dataset_destroy(folder);
}
END_TEST

/* --shard-size: files named F-0000k-of-0000N.pack, each a pack of its own
 * records; together the records of the unsplit pack, in order. */
START_TEST(test_shards)
{
    tool_required();
    make_folder("img", 2, 8);
    char data[512], out[512], sout[512];
    tu_path(data, sizeof(data), "img");
    tu_path(out, sizeof(out), "all.pack");
    tu_path(sout, sizeof(sout), "part.pack");
    const char *a1[] = {"--data", data, "--out", out, "--size", "32", "--resize", "40",
                        "--workers", "1", "--quiet", NULL};
    pack_ok(a1);
    /* 32x32x3 = 3072 bytes a record; a shard of 6 records is 4096 header +
     * 4096 index + 4096 labels + 4096 class names + 20480 records = 36864. */
    const char *a2[] = {"--data", data, "--out", sout, "--size", "32", "--resize", "40",
                        "--workers", "2", "--shard-size", "36K", "--quiet", NULL};
    pack_ok(a2);
    ck_assert(!file_exists("part.pack"));
    ck_assert(file_exists("part-00000-of-00003.pack"));
    ck_assert(file_exists("part-00001-of-00003.pack"));
    ck_assert(file_exists("part-00002-of-00003.pack"));
    ck_assert(!file_exists("part-00003-of-00003.pack"));
    feeder_dataset *all = open_pack("all.pack");
    cfg c = defaults();
    c.set_shape = 0;
    c.shuffle = 0;
    c.workers = 0;
    c.batch = 16;
    capture whole = run_capture(all, &c, 1);
    ck_assert_uint_eq(whole.batches, 1);
    /* Skip the batch header (16 bytes): data, then labels. */
    const uint8_t *wdata = whole.data + 16;
    const int64_t *wlab = (const int64_t *)(wdata + 16 * 3072);
    uint64_t first = 0;
    const uint64_t want_count[3] = {6, 6, 4};
    for (int s = 0; s < 3; s++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "part-%05d-of-00003.pack", s);
        feeder_dataset *ds = open_pack(rel);
        feeder_packed_info info;
        ck_assert_int_eq(feeder_dataset_packed_info(ds, &info), 0);
        ck_assert_uint_eq(info.shard_index, (uint32_t)s);
        ck_assert_uint_eq(info.shard_count, 3);
        ck_assert_uint_eq(info.shard_first, first);
        ck_assert_uint_eq(info.total_records, 16);
        ck_assert_uint_eq(info.records, want_count[s]);
        ck_assert_uint_le(info.file_bytes, 36 * 1024);
        ck_assert_str_eq(feeder_dataset_class_name(ds, 1), "k1");
        capture part = run_capture(ds, &c, 1);
        const uint8_t *pdata = part.data + 16;
        const int64_t *plab = (const int64_t *)(pdata + info.records * 3072);
        ck_assert_int_eq(memcmp(pdata, wdata + first * 3072, info.records * 3072), 0);
        for (uint64_t k = 0; k < info.records; k++)
            ck_assert_int_eq(plab[k], wlab[first + k]);
        first += info.records;
        free(part.data);
        feeder_dataset_destroy(ds);
    }
    free(whole.data);
    feeder_dataset_destroy(all);

    /* A shard too small for one record is refused, and nothing is left. */
    char msg[4096];
    const char *a3[] = {"--data", data, "--out", sout, "--size", "32", "--resize", "40",
                        "--shard-size", "20000", "--quiet", NULL};
    bu_rm_rf(sout);
    int st = run_tool(a3, msg, sizeof(msg));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    ck_assert_str_eq(msg, "feeder-pack: --shard-size 20000 is smaller than a shard holding "
                          "record 0 alone (20480 bytes)\n");
}
END_TEST

/* ---- the pack tool's failures leave nothing ---- */

static int count_with(const char *prefix)
{
    DIR *d = opendir(tu_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* --max-side: files larger than it are re-encoded at it (the other side
 * scaled alike, the subsampling kept, the pixels close to the original
 * resized by the loader); the others keep their bytes; the same input gives
 * the same pack; the option errors name the option. */
static uint8_t *pack_record(const uint8_t *pk, size_t len, uint64_t i, uint64_t *size)
{
    feeder__pack_view v;
    char err[256];
    ck_assert_int_eq(feeder__pack_parse(pk, len, "shrunk.pack", &v, err, sizeof(err)), 0);
    uint64_t off;
    uint32_t crc;
    feeder__pack_entry(&v, i, &off, size, &crc);
    return (uint8_t *)pk + off;
}

/* Mean absolute difference between the loader's RESIZE of `a` and of `b`
 * to w x h (TURBO decoder). */
static double resized_mad(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                          uint32_t w, uint32_t h)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                           .layout = FEEDER_LAYOUT_NHWC, .height = h, .width = w};
    uint8_t *pa = malloc((size_t)w * h * 3), *pb = malloc((size_t)w * h * 3);
    ck_assert_int_eq(feeder__decode_sample(d, &t, a, alen, 0, 0, 0, pa, NULL, NULL, 0), 0);
    ck_assert_int_eq(feeder__decode_sample(d, &t, b, blen, 0, 0, 0, pb, NULL, NULL, 0), 0);
    double sum = 0;
    for (size_t k = 0; k < (size_t)w * h * 3; k++)
        sum += abs((int)pa[k] - (int)pb[k]);
    free(pa);
    free(pb);
    feeder__decoder_destroy(d);
    return sum / ((double)w * h * 3);
}

static void check_shrunk_record(const uint8_t *orig, size_t olen, const uint8_t *rec,
                                uint64_t rlen, const char *path, unsigned *shrunk)
{
    tjhandle tj = tjInitDecompress();
    int w, h, ss, cs, rw, rh, rss, rcs;
    ck_assert_int_eq(tjDecompressHeader3(tj, orig, olen, &w, &h, &ss, &cs), 0);
    ck_assert_int_eq(tjDecompressHeader3(tj, rec, rlen, &rw, &rh, &rss, &rcs), 0);
    tjDestroy(tj);
    if (w <= 150 && h <= 150) {
        ck_assert_msg(rlen == olen && memcmp(rec, orig, olen) == 0, "%s changed", path);
        return;
    }
    int lw = w >= h, ew = lw ? 150 : (int)((w * 300 + h) / (2 * h)),
        eh = lw ? (int)((h * 300 + w) / (2 * w)) : 150;
    ck_assert_msg(rw == ew && rh == eh, "%s: %dx%d became %dx%d, not %dx%d", path, w, h, rw, rh,
                  ew, eh);
    ck_assert_int_eq(rss, ss);
    double mad = resized_mad(orig, olen, rec, rlen, (uint32_t)rw, (uint32_t)rh);
    ck_assert_msg(mad > 0 && mad < 3.0, "%s: mean abs difference %.3f", path, mad);
    (*shrunk)++;
}

START_TEST(test_pack_max_side)
{
    tool_required();
    make_folder("img", 2, 6);
    char data[512], out[512], again[512], big[512], msg[4096];
    tu_path(data, sizeof(data), "img");
    tu_path(big, sizeof(big), "img/k1/100.jpg");
    ck_assert_int_eq(bu_write_jpeg(tu_photos, big, 3, 300, 200, 95, TJSAMP_444, 7), 0);
    tu_path(out, sizeof(out), "shrunk.pack");
    tu_path(again, sizeof(again), "again.pack");
    const char *a1[] = {"--data", data, "--out", out, "--mode", "jpeg", "--max-side", "150",
                        "--quality", "95", "--verify", "--quiet", NULL};
    pack_ok(a1);
    const char *a2[] = {"--data", data, "--out", again, "--mode", "jpeg", "--max-side", "150",
                        "--quality", "95", "--quiet", NULL};
    pack_ok(a2);
    uint8_t *pk, *pk2;
    size_t len, len2;
    ck_assert_int_eq(bu_read_file(out, &pk, &len), 0);
    ck_assert_int_eq(bu_read_file(again, &pk2, &len2), 0);
    ck_assert(len == len2 && memcmp(pk, pk2, len) == 0);
    feeder_dataset *folder = open_folder("img");
    ck_assert_uint_eq(feeder_dataset_size(folder), 13);
    unsigned shrunk = 0;
    for (uint64_t i = 0; i < 13; i++) {
        uint8_t *orig;
        size_t olen;
        uint64_t rlen;
        const char *path = feeder_dataset_path(folder, i);
        ck_assert_int_eq(bu_read_file(path, &orig, &olen), 0);
        const uint8_t *rec = pack_record(pk, len, i, &rlen);
        check_shrunk_record(orig, olen, rec, rlen, path, &shrunk);
        free(orig);
    }
    /* make_folder's sizes (w = 96 + (37c + 53i) % 120, h = 80 + (29c + 71i) % 140):
     * 8 of its 12 have a side over 150; and the 300x200 one. */
    ck_assert_uint_eq(shrunk, 9);
    free(pk);
    free(pk2);
    feeder_dataset_destroy(folder);

    const char *bad[][12] = {
        {"--data", data, "--out", out, "--mode", "jpeg", "--max-side", "150", "--quality", "101",
         NULL},
        {"--data", data, "--out", out, "--mode", "jpeg", "--max-side", "150", "--quality", "0",
         NULL},
        {"--data", data, "--out", out, "--mode", "jpeg", "--max-side", "8", NULL},
        {"--data", data, "--out", out, "--mode", "jpeg", "--quality", "80", NULL},
        {"--data", data, "--out", out, "--max-side", "150", NULL},
    };
    const char *want[] = {
        "--quality '101': expected an integer in [1, 100]",
        "--quality '0': expected an integer in [1, 100]",
        "--max-side '8': expected an integer in [16, 16384]",
        "--quality applies with --max-side only",
        "--max-side applies to --mode jpeg only",
    };
    for (int k = 0; k < 5; k++) {
        int st = run_tool(bad[k], msg, sizeof(msg));
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "case %d: status %d", k, st);
        ck_assert_msg(strstr(msg, want[k]) != NULL, "case %d: %s", k, msg);
    }
}
END_TEST

START_TEST(test_pack_error_leaves_nothing)
{
    tool_required();
    make_folder("img", 2, 6);
    char bad[512];
    tu_path(bad, sizeof(bad), "img/k1/003.jpg");
    ck_assert_int_eq(bu_write_file(bad, "\xff\xd8 broken", 9), 0);
    char data[512], out[512], msg[4096];
    tu_path(data, sizeof(data), "img");
    tu_path(out, sizeof(out), "o.pack");
    for (int jpeg = 0; jpeg <= 1; jpeg++) {
        const char *args[] = {"--data", data, "--out", out, "--mode", jpeg ? "jpeg" : "raw",
                              "--workers", "2", "--batch", "4", "--quiet", NULL};
        int st = run_tool(args, msg, sizeof(msg));
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, msg);
        ck_assert_msg(strstr(msg, bad) != NULL, "%s", msg);
        if (jpeg)
            ck_assert_msg(strstr(msg, ": not a JPEG TurboJPEG can read: ") != NULL, "%s", msg);
        else
            ck_assert_msg(strstr(msg, "feeder-pack: ") == msg && strstr(msg, bad) == msg + 13 &&
                              strstr(msg, "\nfeeder-pack: 1 bad file (listed above): nothing "
                                          "written; --skip-bad packs the others\n"),
                          "%s", msg);
        ck_assert_int_eq(count_with("o.pack"), 0);
    }
    /* Bad arguments: status 2 and a message that names the option. */
    const char *a2[] = {"--data", data, "--out", out, "--mode", "jpeg", "--size", "32", NULL};
    int st = run_tool(a2, msg, sizeof(msg));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    ck_assert_msg(strstr(msg, "--size, --resize and --layout apply to --mode raw only") != NULL,
                  "%s", msg);
    const char *a3[] = {"--data", data, "--out", out, "--size", "64", "--resize", "50", NULL};
    st = run_tool(a3, msg, sizeof(msg));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    ck_assert_msg(strstr(msg, "--resize 50 is smaller than the 64x64 crop") != NULL, "%s", msg);

    /* A list naming an absolute path is refused, as the library refuses it,
     * unless --allow-escape; then it packs. */
    char list[512], good[512];
    tu_path(list, sizeof(list), "abs.txt");
    tu_path(good, sizeof(good), "img/k0/000.jpg");
    FILE *f = fopen(list, "w");
    fprintf(f, "%s 0\nimg/k0/001.jpg 1\n", good);
    fclose(f);
    const char *a4[] = {"--data", list, "--out", out, "--size", "32", "--quiet", NULL};
    st = run_tool(a4, msg, sizeof(msg));
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    ck_assert_msg(strstr(msg, "escapes the root") != NULL, "%s", msg);
    ck_assert_int_eq(count_with("o.pack"), 0);
    const char *a5[] = {"--data", list, "--out", out, "--size", "32", "--allow-escape", "--quiet",
                        NULL};
    st = run_tool(a5, msg, sizeof(msg));
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", msg);
    feeder_dataset *ds = open_pack("o.pack");
    ck_assert_uint_eq(feeder_dataset_size(ds), 2);
    ck_assert_int_eq(feeder_dataset_label(ds, 1), 1);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Killed while packing: a list file whose ninth entry is a sparse file just
 * under the 1 GiB sample limit holds the loader at the third batch while a
 * worker reads it, after the first two were written. (A FIFO held it for
 * good before FIFOs were refused by type.) */
static void interrupted(int sig)
{
    tool_required();
    make_folder("img", 1, 12);
    char big[512], list[512], out[512], tmp[600];
    tu_path(big, sizeof(big), "img/k0/big.jpg");
    int bfd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(bfd, 0);
    ck_assert_int_eq(ftruncate(bfd, (off_t)1000 << 20), 0);
    close(bfd);
    tu_path(list, sizeof(list), "list.txt");
    FILE *f = fopen(list, "w");
    for (int i = 0; i < 12; i++) {
        if (i == 8)
            fprintf(f, "img/k0/big.jpg 0\n");
        else
            fprintf(f, "img/k0/%03d.jpg %d\n", i, i % 2);
    }
    fclose(f);
    tu_path(out, sizeof(out), "o.pack");
    char log[512];
    tu_path(log, sizeof(log), "tool.log");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        execl(FEEDER_PACK_TOOL, FEEDER_PACK_TOOL, "--data", list, "--out", out, "--size", "32",
              "--resize", "40", "--workers", "2", "--batch", "4", "--io", "pread", "--progress",
              (char *)NULL);
        _exit(127);
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", out, (int)pid);
    /* Wait until records are in the temporary file (it is sparse until
     * then), i.e. the tool is mid-way. */
    struct stat st;
    int ready = 0;
    for (int i = 0; i < 1000 && !ready; i++) {
        ready = stat(tmp, &st) == 0 && st.st_blocks > 0 && st.st_size > 0;
        if (!ready) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    ck_assert_msg(ready, "the tool never wrote %s", tmp);
    ck_assert_int_eq(kill(pid, sig), 0);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == sig, "status %d", ws);
    ck_assert(!file_exists("o.pack"));
    if (sig == SIGKILL) {
        /* Promised: no output under the final name. The temporary file is
         * left (nothing runs after SIGKILL); it never looks like output. */
        ck_assert_int_eq(stat(tmp, &st), 0);
        unlink(tmp);
    }
    ck_assert_int_eq(count_with("o.pack"), 0);
}

START_TEST(test_interrupted_sigterm) { interrupted(SIGTERM); }
END_TEST
START_TEST(test_interrupted_sigint) { interrupted(SIGINT); }
END_TEST
START_TEST(test_interrupted_sigkill) { interrupted(SIGKILL); }
END_TEST

typedef struct cutter {
    const char *path;
    const uint8_t *bytes;
    size_t len;
    _Atomic int stop;
    unsigned cuts;
} cutter;

/* Cut the file to its header page and write it whole again, over and over. */
static void *cut_main(void *arg)
{
    cutter *c = arg;
    int fd = open(c->path, O_WRONLY);
    while (fd >= 0 && !c->stop) {
        if (ftruncate(fd, 4096) == 0)
            c->cuts++;
        usleep(200);
        if (pwrite(fd, c->bytes, c->len, 0) != (ssize_t)c->len)
            break;
        usleep(300);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* A file truncated again and again while it is opened: every open either
 * succeeds or fails with a message naming the file, and none dies of
 * SIGBUS (open reads the index with pread, not through the mapping). */
START_TEST(test_open_while_truncated)
{
    char p[300], err[512];
    tu_path(p, sizeof(p), "cut.pack");
    feeder__pack_header h;
    size_t len = tu_write_raw_pack_ch(p, 200000, 1, 1, 1, 2, &h);
    uint8_t *bytes;
    size_t got;
    ck_assert_int_eq(bu_read_file(p, &bytes, &got), 0);
    ck_assert_uint_eq(got, len);
    cutter c = {.path = p, .bytes = bytes, .len = len};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, cut_main, &c), 0);
    int ok = 0, failed = 0;
    uint64_t end = feeder__now_ns() + 2000000000ull;
    while (feeder__now_ns() < end) {
        feeder_dataset *ds = NULL;
        int rc = feeder_dataset_open_packed(p, &ds, err, sizeof(err));
        if (rc == 0) {
            ck_assert_uint_eq(ds->n, 200000);
            ok++;
        } else {
            ck_assert_msg(strstr(err, p) == err, "%d %s", rc, err);
            failed++;
        }
        feeder_dataset_destroy(ds);
    }
    c.stop = 1;
    pthread_join(th, NULL);
    free(bytes);
    ck_assert_uint_gt(c.cuts, 0);
    ck_assert_int_gt(ok + failed, 0);
}
END_TEST

static Suite *packed_suite(void)
{
    Suite *s = suite_create("packed");
    TCase *tc = tcase_create("packed");
    tcase_add_checked_fixture(tc, setup, tu_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_crc32c);
    tcase_add_test(tc, test_crc32c_every_length_and_alignment);
    tcase_add_test(tc, test_reject_header_fields);
    tcase_add_test(tc, test_reject_magic_version_truncation);
    tcase_add_test(tc, test_reject_index_and_labels);
    tcase_add_test(tc, test_reject_not_a_file);
    tcase_add_test(tc, test_raw_records_labels_and_info);
    tcase_add_test(tc, test_packed_read_auto_rule);
    tcase_add_test(tc, test_shape_adopted_or_mismatch);
    tcase_add_test(tc, test_resume_takes_file_shape);
    tcase_add_test(tc, test_crc_mismatch_fail_and_skip);
    tcase_add_test(tc, test_file_shrunk_after_open);
    tcase_add_test(tc, test_open_while_truncated);
    tcase_add_test(tc, test_jpeg_record_decode_error);
    if (FEEDER_PACK_TOOL[0]) {
        tcase_add_test(tc, test_round_trip_raw_nhwc);
        tcase_add_test(tc, test_round_trip_raw_nchw);
        tcase_add_test(tc, test_round_trip_jpeg);
        tcase_add_test(tc, test_shards);
        tcase_add_test(tc, test_pack_error_leaves_nothing);
        tcase_add_test(tc, test_interrupted_sigterm);
        tcase_add_test(tc, test_interrupted_sigint);
        tcase_add_test(tc, test_interrupted_sigkill);
        tcase_add_test(tc, test_pack_max_side);
    }
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(packed_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
