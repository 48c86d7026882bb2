/*
 * Packed datasets: a packed file (docs/FORMAT.md) opened as a feeder dataset.
 * Open maps the whole file read-only and shared, checks it with the pure
 * parser (pack_format.c) and copies the index, labels and class names into
 * the dataset, so nothing later depends on the header's word. Forked workers
 * inherit the mapping and the descriptor; their read of the records is
 * worker/packed_read.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "remote/remote.h"

#define ULL(x) ((unsigned long long)(x))

/* ------------------------------------------------------------------------ */
/* The dataset                                                               */
/* ------------------------------------------------------------------------ */

void feeder__pack_free(struct feeder__pack *pk)
{
    if (!pk)
        return;
    if (pk->shards_free)
        pk->shards_free(pk->shards, pk->map, pk->map_len);
    if (pk->map)
        munmap(pk->map, pk->map_len);
    if (pk->fd >= 0)
        close(pk->fd);
    if (pk->lock_fd >= 0)
        close(pk->lock_fd);
    free(pk->off);
    free(pk->size);
    free(pk->crc);
    free(pk->path);
    free(pk);
}

void feeder__pack_release(feeder_dataset *ds) { feeder__pack_free(ds->pack); }

/* A packed dataset that failed to open, freed here rather than through
 * feeder_dataset_destroy (dataset.c), which calls this file: the room's
 * files call one way. */
/* A resume state's check of the file: its size, every record's size, CRC
 * and label (the index, not the bytes), as two CRC32Cs of different seeds. */
static uint64_t pack_fingerprint(const struct feeder__pack *pk, const int64_t *labels, uint64_t n)
{
    uint32_t a = feeder__crc32c(0, &pk->map_len, sizeof(pk->map_len)), b = ~a;
    a = feeder__crc32c(a, pk->size, n * sizeof(*pk->size));
    a = feeder__crc32c(a, pk->crc, n * sizeof(*pk->crc));
    a = feeder__crc32c(a, labels, n * sizeof(*labels));
    b = feeder__crc32c(b, labels, n * sizeof(*labels));
    b = feeder__crc32c(b, pk->crc, n * sizeof(*pk->crc));
    uint64_t h = (uint64_t)a << 32 | b;
    return h ? h : 1;
}

static void packed_discard(feeder_dataset *ds)
{
    for (uint64_t i = 0; ds->classes && i < ds->num_classes; i++)
        free(ds->classes[i]);
    free(ds->classes);
    free(ds->labels);
    feeder__pack_free(ds->pack);
    free(ds);
}

/* A URL's pack: its header page (one range request, which also says the
 * object's size and ETag; an answer without a size is no pack), then the
 * whole file through the shard cache, checked against that size and ETag;
 * the cached copy is what gets mapped, and the cache's shared lock is held
 * while it is. */
static int fetch_remote(struct feeder__pack *pk, const char *url, char *err, size_t errlen)
{
    feeder__cache c;
    int rc = feeder__cache_open(&c, NULL, 0, err, errlen);
    if (rc)
        return rc;
    feeder__target t;
    uint8_t page[FEEDER__PACK_HEADER_BYTES];
    if ((rc = feeder__target_resolve(url, &t, err, errlen)) != 0) {
        feeder__cache_close(&c);
        return rc;
    }
    feeder__request r = {.target = &t, .first = 0, .last = sizeof(page) - 1, .fd = -1,
                         .buf = page, .cap = sizeof(page)};
    rc = feeder__remote_run(&c.cfg, &r, 1, err, errlen);
    /* The whole GET is bounded by the size this answer gives (Content-Range):
     * without one, or with less than a header page, there is no pack to
     * fetch, and nothing would stop an endless body. */
    if (!rc && (r.len != sizeof(page) || r.meta.size < sizeof(page))) {
        feeder__fmt(err, errlen, "%s: not a packed file (%llu bytes)", url,
                    (unsigned long long)r.meta.size);
        rc = FEEDER_EFORMAT;
    }
    feeder__shard sh;
    /* A copy that does not begin with the header page just fetched is
     * dropped and fetched once more. */
    for (int round = 0; !rc && round < 2; round++) {
        if ((rc = feeder__cache_get(&c, url, &r.meta, &sh, err, errlen)) != 0)
            break;
        rc = feeder__shard_verify(&sh, url, page, r.len, err, errlen);
        if (!rc) {
            pk->fd = sh.fd;
            pk->lock_fd = sh.lock_fd;
        }
        if (rc != FEEDER_ECHECKSUM)
            break;
        if (round == 0)
            rc = 0;
    }
    feeder__target_free(&t);
    feeder__cache_close(&c);
    return rc;
}

/* Open the file (a URL: through the shard cache) and map it whole: a
 * regular file that fits the address space (a FIFO must not block the
 * open: O_NONBLOCK). */
static int map_file(struct feeder__pack *pk, const char *path, char *err, size_t errlen)
{
    if (feeder__url_kind(path) != FEEDER__URL_LOCAL) {
        int rc = fetch_remote(pk, path, err, errlen);
        if (rc)
            return rc;
    } else if ((pk->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: cannot open packed file: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(pk->fd, &st) < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: fstat: %s", path, strerror(e));
        return -e;
    }
    if (S_ISDIR(st.st_mode)) {
        feeder__fmt(err, errlen, "%s: is a folder, not a packed file", path);
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        feeder__fmt(err, errlen, "%s: not a regular file", path);
        return FEEDER_EFORMAT;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        feeder__fmt(err, errlen, "%s: %llu bytes do not fit this address space", path,
                    ULL(st.st_size));
        return FEEDER_EOVERFLOW;
    }
    if (st.st_size == 0)
        return 0;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, pk->fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: mmap of %llu bytes: %s", path, ULL(st.st_size),
                    strerror(e));
        return -e;
    }
    pk->map = m;
    pk->map_len = (size_t)st.st_size;
    return 0;
}

/* ---- the sections open reads, copied with pread ---- */

/* Bytes [off, off + len) of the file into the copy at the same offset; a
 * short read means the file shrank after it was mapped. */
static int copy_range(const struct feeder__pack *pk, uint8_t *copy, uint64_t off, uint64_t len,
                      const char *path, char *err, size_t errlen)
{
    long got = feeder__pread_full(pk->fd, off, copy + off, (size_t)len);
    if (got < 0) {
        feeder__fmt(err, errlen, "%s: read: %s", path, strerror((int)-got));
        return (int)got;
    }
    if ((uint64_t)got < len) {
        feeder__fmt(err, errlen, "%s: the file shrank while it was opened: %ld of the %llu "
                    "bytes at offset %llu could be read (it was %zu bytes when mapped)", path, got,
                    ULL(len), ULL(off), pk->map_len);
        return -EIO;
    }
    return 0;
}

/* Open parses the header, index, labels, class names and schema from a copy
 * read with pread, not from the file's mapping: a file truncated meanwhile
 * is then an error, not a SIGBUS in the caller's process (the library
 * installs no handler). The copy is an anonymous mapping as long as the
 * file with each section at its own offset (pages never written cost
 * nothing), so feeder__pack_parse reads it unchanged; sections the header
 * places outside the file are left for the parse to refuse. */
static int read_sections(const struct feeder__pack *pk, const char *path, uint8_t **copy,
                         char *err, size_t errlen)
{
    *copy = NULL;
    if (!pk->map_len)
        return 0;
    void *m = mmap(NULL, pk->map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: reserving %zu bytes to read its index into: %s", path,
                    pk->map_len, strerror(e));
        return -e;
    }
    *copy = m;
    size_t head = pk->map_len < FEEDER__PACK_HEADER_BYTES ? pk->map_len
                                                          : FEEDER__PACK_HEADER_BYTES;
    int rc = copy_range(pk, *copy, 0, head, path, err, errlen);
    feeder__pack_header h;
    char why[256];
    if (rc || head < FEEDER__PACK_HEADER_BYTES ||
        feeder__pack_peek(*copy, head, path, &h, why, sizeof(why)))
        return rc; /* the parse says what is wrong with the header */
    uint64_t ext[4][2] = {{h.index_off, 0}, {h.labels_off, 0}, {h.classes_off, h.classes_bytes},
                          {h.fields_off, h.fields_bytes}};
    int ok = !__builtin_mul_overflow(h.count, (uint64_t)FEEDER__PACK_ENTRY_BYTES, &ext[0][1]) &&
             !__builtin_mul_overflow(h.count, (uint64_t)8, &ext[1][1]);
    for (int k = 0; ok && k < 4 && !rc; k++) {
        uint64_t end;
        if (ext[k][1] && !__builtin_add_overflow(ext[k][0], ext[k][1], &end) &&
            end <= pk->map_len)
            rc = copy_range(pk, *copy, ext[k][0], ext[k][1], path, err, errlen);
    }
    return rc;
}

/* The view's pointers moved from the copy onto the file's mapping (the same
 * offsets), and the copy unmapped. */
static void leave_copy(struct feeder__pack *pk, uint8_t *copy)
{
    if (!copy)
        return;
#define MOVE(p) ((p) ? pk->map + ((const uint8_t *)(p) - copy) : NULL)
    feeder__pack_view *v = &pk->v;
    if (v->buf == copy) {
        v->buf = pk->map;
        v->index = MOVE(v->index);
        v->labels = MOVE(v->labels);
        v->classes = MOVE(v->classes);
        for (uint32_t k = 0; k < v->nfields; k++)
            v->fields[k].name = (const char *)MOVE(v->fields[k].name);
    }
#undef MOVE
    munmap(copy, pk->map_len);
}

/* The parsed index as arrays: offsets, sizes, CRCs and labels. */
static int load_index(feeder_dataset *ds, const char *path, char *err, size_t errlen)
{
    struct feeder__pack *pk = ds->pack;
    uint64_t n = pk->v.h.count; /* n * 24 <= file size: these cannot overflow */
    pk->off = malloc(n * sizeof(*pk->off));
    pk->size = malloc(n * sizeof(*pk->size));
    pk->crc = malloc(n * sizeof(*pk->crc));
    ds->labels = malloc(n * sizeof(*ds->labels));
    if (!pk->off || !pk->size || !pk->crc || !ds->labels) {
        feeder__fmt(err, errlen, "%s: out of memory for the index of %llu records", path,
                    ULL(n));
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n; i++) {
        feeder__pack_entry(&pk->v, i, &pk->off[i], &pk->size[i], &pk->crc[i]);
        ds->labels[i] = feeder__pack_label(&pk->v, i);
    }
    ds->n = n;
    ds->num_classes = pk->v.num_classes;
    ds->fingerprint = pack_fingerprint(pk, ds->labels, n);
    return 0;
}

/* The class names, when the file has them (a partial list is freed by
 * packed_discard: calloc'd). */
static int load_classes(feeder_dataset *ds)
{
    const struct feeder__pack *pk = ds->pack;
    if (!pk->v.classes)
        return 0;
    uint64_t nc = pk->v.h.num_classes;
    if (!(ds->classes = calloc((size_t)nc, sizeof(char *))))
        return -ENOMEM;
    const char *c = (const char *)pk->v.classes;
    for (uint64_t k = 0; k < nc; k++) {
        if (!(ds->classes[k] = strdup(c)))
            return -ENOMEM;
        c += strlen(c) + 1;
    }
    return 0;
}

int feeder_dataset_open_packed(const char *path, feeder_dataset **out, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!path || !out) {
        feeder__fmt(err, errlen, "feeder_dataset_open_packed: path and out must not be NULL");
        return FEEDER_EINVAL;
    }
    struct feeder__pack *pk = calloc(1, sizeof(*pk));
    feeder_dataset *ds = calloc(1, sizeof(*ds));
    if (!pk || !ds || !(pk->path = strdup(path))) {
        free(pk ? pk->path : NULL);
        free(pk);
        free(ds);
        return -ENOMEM;
    }
    ds->kind = FEEDER__DS_PACKED;
    atomic_init(&ds->refs, 1);
    ds->pack = pk;
    ds->release = feeder__pack_release;
    pk->fd = -1;
    pk->lock_fd = -1;
    static const uint8_t empty[1];
    uint8_t *copy = NULL;
    int rc = map_file(pk, path, err, errlen);
    if (!rc)
        rc = read_sections(pk, path, &copy, err, errlen);
    if (!rc)
        rc = feeder__pack_parse(copy ? copy : empty, pk->map_len, path, &pk->v, err, errlen);
    if (!rc)
        rc = load_index(ds, path, err, errlen);
    if (!rc)
        rc = load_classes(ds);
    if (!rc && pk->v.h.kind == FEEDER_RECORD_FIELDS) {
        feeder_dataset *fields;
        rc = feeder__pack_open_fields(ds, &fields, err, errlen);
        leave_copy(pk, copy);
        packed_discard(ds); /* the shell; its pack went to `fields` */
        if (!rc) {
            fields->release = feeder__pack_release;
            *out = fields;
        }
        return rc;
    }
    leave_copy(pk, copy);
    if (rc) {
        packed_discard(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

int feeder_dataset_packed_info(const feeder_dataset *ds, feeder_packed_info *out)
{
    if (!ds || !out || !ds->pack) /* packed, or a FIELDS file's fields dataset */
        return FEEDER_EINVAL;
    const feeder__pack_header *h = &ds->pack->v.h;
    memset(out, 0, sizeof(*out));
    out->version = h->version;
    out->kind = (int)h->kind;
    if (h->kind == FEEDER_RECORD_RAW) {
        out->layout = (int)h->layout;
        out->height = h->height;
        out->width = h->width;
        out->channels = h->channels;
        out->record_bytes = h->record_bytes;
    }
    out->records = h->count;
    out->data_bytes = h->records_bytes;
    out->file_bytes = ds->pack->map_len;
    out->shard_index = h->shard_index;
    out->shard_count = h->shard_count;
    out->shard_first = h->shard_first;
    out->total_records = h->total_records;
    return 0;
}

