/*
 * Packed files of fields (record kind FIELDS, format version 3,
 * docs/FORMAT.md): written from any fields dataset by feeder_pack_fields,
 * and opened by feeder_dataset_open_packed as a fields dataset whose get
 * callback reads one record. A record is its rows header (a u32 per field,
 * padded to 8 bytes) and each field's rows, each padded to 8. Records are
 * read with pread (preadv straight into the fields' rooms in the slot), not
 * from the mapping: a file cut short under the loader is then an error of
 * its record, never a SIGBUS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/pack.h"

#define ULL(x) ((unsigned long long)(x))

static uint64_t field_max_rows(const feeder_field *f) { return f->ndim ? f->shape[0] : 1; }

/* ---- reading: the get callback of an opened FIELDS file ---- */

static uint64_t pk_len(void *user)
{
    return ((const struct feeder__pack *)user)->v.h.count;
}

/* Record i's rows header: rows[k] for each field, checked against the schema
 * and the record's size. 0, or FEEDER_EFORMAT with the reason. */
static int read_rows(const struct feeder__pack *pk, uint64_t i, uint64_t *rows, uint32_t *crc,
                     char *err, size_t errlen)
{
    uint32_t n = pk->v.nfields;
    uint8_t head[4 * FEEDER_FIELDS_MAX + 8];
    size_t hb = (size_t)feeder__pack_pad8(4 * (uint64_t)n);
    ssize_t got = pread(pk->fd, head, hb, (off_t)pk->off[i]);
    if (got != (ssize_t)hb)
        return feeder__fmt(err, errlen, "record %llu of %s: %s", ULL(i), pk->path,
                           got < 0 ? strerror(errno) : "cut short (the file changed?)"),
               got < 0 ? -errno : FEEDER_EFORMAT;
    uint64_t total = hb;
    for (uint32_t k = 0; k < n; k++) {
        const feeder_field *f = &pk->v.fields[k];
        rows[k] = (uint64_t)head[4 * k] | (uint64_t)head[4 * k + 1] << 8 |
                  (uint64_t)head[4 * k + 2] << 16 | (uint64_t)head[4 * k + 3] << 24;
        if (rows[k] > field_max_rows(f) ||
            (f->batching == FEEDER_FIELD_FIXED && rows[k] != field_max_rows(f)))
            return feeder__fmt(err, errlen, "record %llu of %s, field '%s': %llu rows (%s %llu)",
                               ULL(i), pk->path, f->name, ULL(rows[k]),
                               f->batching == FEEDER_FIELD_FIXED ? "fixed at" : "maximum",
                               ULL(field_max_rows(f))),
                   FEEDER_EFORMAT;
        total += feeder__pack_pad8(rows[k] * feeder__pack_row_bytes(f));
    }
    if (total != pk->size[i])
        return feeder__fmt(err, errlen, "record %llu of %s: its rows make %llu bytes, the index "
                           "says %llu", ULL(i), pk->path, ULL(total), ULL(pk->size[i])),
               FEEDER_EFORMAT;
    *crc = feeder__crc32c(0, head, hb);
    return 0;
}

static int pk_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                  size_t errlen)
{
    const struct feeder__pack *pk = user;
    uint64_t i = ctx->index, rows[FEEDER_FIELDS_MAX];
    uint32_t n = pk->v.nfields, crc = 0;
    int rc = read_rows(pk, i, rows, &crc, err, errlen);
    if (rc)
        return rc;
    uint8_t pad[FEEDER_FIELDS_MAX][8];
    struct iovec iov[2 * FEEDER_FIELDS_MAX];
    int niov = 0;
    size_t want = 0;
    for (uint32_t k = 0; k < n; k++) {
        size_t bytes = (size_t)(rows[k] * feeder__pack_row_bytes(&pk->v.fields[k]));
        size_t padded = (size_t)feeder__pack_pad8(bytes);
        iov[niov++] = (struct iovec){out->data[k], bytes};
        if (padded > bytes)
            iov[niov++] = (struct iovec){pad[k], padded - bytes};
        want += padded;
        out->rows[k] = rows[k];
    }
    off_t at = (off_t)(pk->off[i] + feeder__pack_pad8(4 * (uint64_t)n));
    ssize_t got = want ? preadv(pk->fd, iov, niov, at) : 0;
    if (got != (ssize_t)want)
        return feeder__fmt(err, errlen, "record %llu of %s: %s", ULL(i), pk->path,
                           got < 0 ? strerror(errno) : "cut short (the file changed?)"),
               got < 0 ? -errno : FEEDER_EFORMAT;
    for (int v = 0; v < niov; v++)
        crc = feeder__crc32c(crc, iov[v].iov_base, iov[v].iov_len);
    if (crc != pk->crc[i])
        return feeder__fmt(err, errlen, "record %llu of %s: crc32c mismatch (stored 0x%08x, "
                           "computed 0x%08x)", ULL(i), pk->path, pk->crc[i], crc),
               FEEDER_ECHECKSUM;
    return 0;
}

int feeder__pack_open_fields(feeder_dataset *shell, feeder_dataset **out, char *err,
                             size_t errlen)
{
    struct feeder__pack *pk = shell->pack;
    static const feeder_fields_callbacks cb = {pk_len, pk_get, NULL};
    feeder_dataset *ds;
    int rc = feeder__dataset_create_fields(&cb, pk->v.fields, pk->v.nfields, pk, &ds);
    if (rc) {
        feeder__fmt(err, errlen, "%s: out of memory", pk->path);
        return rc;
    }
    /* The shell hands over its pack (freed with the dataset) and its facts. */
    ds->pack = pk;
    ds->labels = shell->labels;
    ds->fingerprint = shell->fingerprint;
    shell->pack = NULL;
    shell->labels = NULL;
    *out = ds;
    return 0;
}

/* ---- writing: feeder_pack_fields ---- */

typedef struct writer {
    const feeder_dataset *ds;
    const char *path;
    int fd;
    uint32_t n;                         /* fields */
    uint8_t *room[FEEDER_FIELDS_MAX];   /* one sample's values, per field */
    size_t cap[FEEDER_FIELDS_MAX];
    uint64_t *off, *size;
    uint32_t *crc;
    uint64_t at;                        /* where the next record goes */
    char *err;
    size_t errlen;
} writer;

static int io_fail(writer *w, const char *what)
{
    int e = errno ? errno : EIO;
    feeder__fmt(w->err, w->errlen, "%s: %s: %s", w->path, what, strerror(e));
    return -e;
}

/* Write all of buf at offset `at`. */
static int put_at(writer *w, const void *buf, size_t len, uint64_t at)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t k = pwrite(w->fd, p, len, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return io_fail(w, "write");
        p += k;
        len -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

/* Sample i from the dataset's get callback, checked as a loader checks it. */
static int take_sample(writer *w, uint64_t i, uint64_t *rows)
{
    const feeder_field *f = w->ds->fields;
    feeder_sample_out o;
    memset(&o, 0, sizeof(o));
    for (uint32_t k = 0; k < w->n; k++)
        rows[k] = f[k].batching == FEEDER_FIELD_FIXED ? field_max_rows(&f[k]) : UINT64_MAX;
    o.nfields = w->n;
    o.data = (void *const *)w->room;
    o.capacity = w->cap;
    o.rows = rows;
    o.fields = f;
    feeder_sample_ctx ctx = {.index = i, .worker_id = -1};
    char uerr[256] = "";
    int rc = w->ds->fcb.get(w->ds->user, &ctx, &o, uerr, sizeof(uerr));
    if (o.put_error) {
        feeder__fmt(w->err, w->errlen, "sample %llu, field %u: feeder_sample_put failed: %s",
                    ULL(i), o.put_field, feeder_strerror(o.put_error));
        return o.put_error;
    }
    if (rc) {
        feeder__fmt(w->err, w->errlen, "sample %llu: dataset callback returned %d%s%s", ULL(i),
                    rc, uerr[0] ? ": " : "", uerr);
        return rc < 0 ? rc : FEEDER_ECALLBACK;
    }
    for (uint32_t k = 0; k < w->n; k++)
        if (rows[k] > field_max_rows(&f[k])) {
            feeder__fmt(w->err, w->errlen, "sample %llu, field '%s': %s", ULL(i), f[k].name,
                        rows[k] == UINT64_MAX ? "the callback set no length"
                                              : "more rows than its maximum");
            return rows[k] == UINT64_MAX ? FEEDER_EINVAL : FEEDER_ERANGE;
        }
    return 0;
}

/* Sample i as a record at w->at: rows header, then each field padded to 8. */
static int write_record(writer *w, uint64_t i)
{
    uint64_t rows[FEEDER_FIELDS_MAX];
    int rc = take_sample(w, i, rows);
    if (rc)
        return rc;
    uint8_t head[4 * FEEDER_FIELDS_MAX + 8] = {0};
    size_t hb = (size_t)feeder__pack_pad8(4 * (uint64_t)w->n);
    for (uint32_t k = 0; k < w->n; k++)
        for (int b = 0; b < 4; b++)
            head[4 * k + b] = (uint8_t)(rows[k] >> (8 * b));
    uint32_t crc = feeder__crc32c(0, head, hb);
    uint64_t at = w->at + hb;
    if ((rc = put_at(w, head, hb, w->at)))
        return rc;
    for (uint32_t k = 0; k < w->n; k++) {
        size_t bytes = (size_t)(rows[k] * feeder__pack_row_bytes(&w->ds->fields[k]));
        size_t padded = (size_t)feeder__pack_pad8(bytes);
        memset(w->room[k] + bytes, 0, padded - bytes); /* rooms are padded too */
        crc = feeder__crc32c(crc, w->room[k], padded);
        if ((rc = put_at(w, w->room[k], padded, at)))
            return rc;
        at += padded;
    }
    w->off[i] = w->at;
    w->size[i] = at - w->at;
    w->crc[i] = crc;
    w->at = at;
    return 0;
}

/* Header, index, zero labels and the schema, once the records are written. */
static int write_front(writer *w, feeder__pack_header *h)
{
    uint64_t n = w->ds->n;
    size_t fb = 8 + (size_t)w->n * FEEDER__PACK_FIELD_BYTES;
    uint8_t *page = calloc(1, FEEDER__PACK_HEADER_BYTES), *sch = calloc(1, fb);
    uint8_t *idx = calloc(n, FEEDER__PACK_ENTRY_BYTES), *lab = calloc(n, 8);
    int rc = page && sch && idx && lab ? 0 : -ENOMEM;
    if (rc)
        feeder__fmt(w->err, w->errlen, "%s: out of memory", w->path);
    for (uint64_t i = 0; !rc && i < n; i++)
        feeder__pack_entry_encode(idx + i * FEEDER__PACK_ENTRY_BYTES, w->off[i], w->size[i],
                                  w->crc[i]);
    if (!rc) {
        feeder__pack_fields_encode(w->ds->fields, w->n, sch);
        feeder__pack_header_encode(h, page);
    }
    if (!rc && !(rc = put_at(w, page, FEEDER__PACK_HEADER_BYTES, 0)) &&
        !(rc = put_at(w, idx, n * FEEDER__PACK_ENTRY_BYTES, h->index_off)) &&
        !(rc = put_at(w, lab, n * 8, h->labels_off)))
        rc = put_at(w, sch, fb, h->fields_off);
    free(page);
    free(sch);
    free(idx);
    free(lab);
    return rc;
}

static int write_all(writer *w)
{
    uint64_t n = w->ds->n;
    feeder__pack_header h = {.version = FEEDER__PACK_VERSION_FIELDS,
                             .header_bytes = FEEDER__PACK_HEADER_BYTES,
                             .kind = FEEDER_RECORD_FIELDS, .dtype = FEEDER__PACK_DTYPE_UINT8,
                             .label_type = FEEDER__PACK_LABEL_INT64, .count = n,
                             .shard_count = 1, .total_records = n};
    size_t fb = 8 + (size_t)w->n * FEEDER__PACK_FIELD_BYTES;
    if (!feeder__pack_layout_fields(&h, fb, 0))
        return feeder__fmt(w->err, w->errlen, "%s: %llu records overflow a file size", w->path,
                           ULL(n)),
               FEEDER_EOVERFLOW;
    w->at = h.records_off;
    int rc = 0;
    for (uint64_t i = 0; !rc && i < n; i++)
        rc = write_record(w, i);
    if (rc)
        return rc;
    uint64_t size = feeder__pack_layout_fields(&h, fb, w->at - h.records_off);
    if ((rc = write_front(w, &h)))
        return rc;
    if (ftruncate(w->fd, (off_t)size) || fsync(w->fd))
        return io_fail(w, "ftruncate/fsync");
    return 0;
}

static void writer_free(writer *w)
{
    for (uint32_t k = 0; k < w->n; k++)
        free(w->room[k]);
    free(w->off);
    free(w->size);
    free(w->crc);
}

/* Rooms for one sample (each padded to 8) and the index arrays. */
static int writer_init(writer *w)
{
    uint64_t n = w->ds->n ? w->ds->n : 1;
    for (uint32_t k = 0; k < w->n; k++) {
        const feeder_field *f = &w->ds->fields[k];
        w->cap[k] = (size_t)(field_max_rows(f) * feeder__pack_row_bytes(f));
        if (!(w->room[k] = calloc(1, (size_t)feeder__pack_pad8(w->cap[k]))))
            return -ENOMEM;
    }
    w->off = malloc(n * sizeof(*w->off));
    w->size = malloc(n * sizeof(*w->size));
    w->crc = malloc(n * sizeof(*w->crc));
    return w->off && w->size && w->crc ? 0 : -ENOMEM;
}

int feeder_pack_fields(const feeder_dataset *ds, const char *path, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!ds || !path || !ds->nfields || !ds->n) {
        feeder__fmt(err, errlen, "feeder_pack_fields: %s", !ds || !path
                    ? "ds and path must not be NULL" : !ds->nfields
                    ? "the dataset has no fields (feeder_dataset_create_fields)"
                    : "the dataset has no samples");
        return FEEDER_EINVAL;
    }
    writer w = {.ds = ds, .path = path, .n = ds->nfields, .err = err, .errlen = errlen};
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    int rc = tmp && !writer_init(&w) ? 0 : -ENOMEM;
    if (rc)
        feeder__fmt(err, errlen, "%s: out of memory", path);
    if (!rc) {
        memcpy(tmp, path, plen);
        memcpy(tmp + plen, ".tmp", 5);
        w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        rc = w.fd < 0 ? io_fail(&w, "cannot create its .tmp") : write_all(&w);
        if (w.fd >= 0 && close(w.fd) && !rc)
            rc = io_fail(&w, "close");
        if (!rc && rename(tmp, path))
            rc = io_fail(&w, "rename");
        if (rc && w.fd >= 0)
            unlink(tmp);
    }
    writer_free(&w);
    free(tmp);
    return rc;
}
