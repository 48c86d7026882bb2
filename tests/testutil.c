/* See testutil.h. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "common/common.h"
#include "dataset/pack.h"

char tu_dir[256];
bu_photos *tu_photos;

void tu_setup_in(const char *parent)
{
    snprintf(tu_dir, sizeof(tu_dir), "%s/feeder-%s-XXXXXX", parent,
             program_invocation_short_name);
    if (!mkdtemp(tu_dir)) {
        snprintf(tu_dir, sizeof(tu_dir), "/tmp/feeder-%s-XXXXXX", program_invocation_short_name);
        ck_assert_ptr_nonnull(mkdtemp(tu_dir));
    }
    char err[256];
    ck_assert_msg(bu_photos_load(FEEDER_TEST_PHOTOS, &tu_photos, err, sizeof(err)) == 0,
                  "photos: %s", err);
}

void tu_setup(void)
{
    tu_setup_in("/tmp");
}

void tu_teardown(void)
{
    bu_photos_free(tu_photos);
    tu_photos = NULL;
    bu_rm_rf(tu_dir);
}

void tu_path(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tu_dir, rel);
}

void tu_folder(const char *rel, int classes, int per)
{
    tu_make_folder(tu_photos, tu_dir, rel, classes, per, "c", 160, 140, 120, 160);
}

void tu_make_folder(const bu_photos *photos, const char *dir, const char *rel, int classes,
                    int per, const char *prefix, uint32_t w0, uint32_t wspan, uint32_t h0,
                    uint32_t hspan)
{
    for (int c = 0; c < classes; c++) {
        char cdir[512];
        snprintf(cdir, sizeof(cdir), "%s/%s/%s%d", dir, rel, prefix, c);
        ck_assert_int_eq(bu_mkdirs(cdir), 0);
        for (int i = 0; i < per; i++) {
            char p[600];
            snprintf(p, sizeof(p), "%s/%03d.jpg", cdir, i);
            uint32_t w = w0 + (uint32_t)((c * 37 + i * 53) % (int)wspan);
            uint32_t h = h0 + (uint32_t)((c * 29 + i * 71) % (int)hspan);
            ck_assert_int_eq(bu_write_jpeg(photos, p, (unsigned)(c * per + i), w, h, 85, -1,
                                           (uint64_t)(c * 1000 + i)),
                             0);
        }
    }
}

feeder_dataset *tu_open_folder(const char *dir, const char *rel)
{
    char root[512], err[512];
    snprintf(root, sizeof(root), "%s/%s", dir, rel);
    feeder_dataset *ds = NULL;
    int rc = feeder_dataset_open_folder(root, &ds, err, sizeof(err));
    ck_assert_msg(rc == 0, "open_folder: %s", err);
    return ds;
}

feeder_loader *tu_small_loader(feeder_dataset *ds, int workers, int batch)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 40), 0);
    return ld;
}

size_t tu_write_raw_pack_ch(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                            uint32_t channels, uint32_t version, feeder__pack_header *out)
{
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    h.version = version;
    h.header_bytes = 4096;
    h.kind = FEEDER_RECORD_RAW;
    h.dtype = FEEDER__PACK_DTYPE_UINT8;
    h.layout = FEEDER_LAYOUT_NHWC;
    h.height = hgt;
    h.width = wid;
    h.channels = channels;
    h.label_type = FEEDER__PACK_LABEL_INT64;
    h.count = n;
    h.record_bytes = (uint64_t)hgt * wid * channels;
    h.shard_count = 1;
    h.total_records = n;
    size_t len = (size_t)feeder__pack_layout(&h, 0, n * h.record_bytes);
    ck_assert_uint_gt(len, 0);
    uint8_t *buf = calloc(1, len);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *rec = buf + h.records_off + i * h.record_bytes;
        for (uint64_t j = 0; j < h.record_bytes; j++)
            rec[j] = (uint8_t)(i * 7 + j);
        int64_t lab = (int64_t)(i % 4);
        uint32_t seed = feeder__pack_crc_seed(version, lab);
        feeder__pack_entry_encode(buf + h.index_off + i * 24, h.records_off + i * h.record_bytes,
                                  h.record_bytes, feeder__crc32c(seed, rec, h.record_bytes));
        memcpy(buf + h.labels_off + i * 8, &lab, 8);
    }
    feeder__pack_header_encode(&h, buf);
    ck_assert_int_eq(bu_write_file(path, buf, len), 0);
    free(buf);
    *out = h;
    return len;
}

size_t tu_write_raw_pack(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                         uint32_t version, feeder__pack_header *out)
{
    return tu_write_raw_pack_ch(path, n, hgt, wid, 3, version, out);
}

/* ---- tar archives in memory ---- */

uint8_t *tu_tar_grow(tu_tar *t, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->b = realloc(t->b, t->cap);
        ck_assert_ptr_nonnull(t->b);
    }
    memset(t->b + t->len, 0, n);
    t->len += n;
    return t->b + t->len - n;
}

void tu_tar_checksum(uint8_t *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* One header and its data (`size` may claim more than `len` bytes given). */
size_t tu_tar_member_sized(tu_tar *t, const char *name, char type, const void *data,
                              size_t len, uint64_t size)
{
    size_t at = t->len;
    uint8_t *h = tu_tar_grow(t, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "14000000000", 12);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    tu_tar_checksum(h);
    if (len) {
        uint8_t *d = tu_tar_grow(t, (len + 511) / 512 * 512);
        memcpy(d, data, len);
    }
    return at;
}

size_t tu_tar_member(tu_tar *t, const char *name, char type, const void *data, size_t len)
{
    return tu_tar_member_sized(t, name, type, data, len, len);
}

int tu_threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[300], comm[64] = "";
        snprintf(p, sizeof(p), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(p, "r") : NULL;
        if (!f)
            continue;
        if (fgets(comm, sizeof(comm), f))
            n += strncmp(comm, name, strlen(name)) == 0 && comm[strlen(name)] == '\n';
        fclose(f);
    }
    closedir(d);
    return n;
}
