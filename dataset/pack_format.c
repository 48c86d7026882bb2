/*
 * The packed file format (docs/FORMAT.md): decoding and checking a whole file
 * held in memory, and encoding the header and index entries for writers.
 *
 * feeder__pack_parse is a pure function of (buffer, length) so a fuzzer can
 * drive it. It decides everything from the buffer's length, never from what
 * the header claims: every offset + size is added with an overflow check and
 * compared with the length before a byte of that section is read. Numbers
 * are little-endian in the file and decoded byte by byte, so neither the
 * host's byte order nor the buffer's alignment matters.
 */
#include <stdio.h>
#include <string.h>

#include "dataset/pack.h"

/* Field offsets in the header page; docs/FORMAT.md has the same table. */
enum {
    H_MAGIC = 0, H_VERSION = 8, H_HEADER_BYTES = 12, H_KIND = 16, H_DTYPE = 20, H_LAYOUT = 24,
    H_HEIGHT = 28, H_WIDTH = 32, H_CHANNELS = 36, H_LABEL_TYPE = 40, H_FLAGS = 44, H_COUNT = 48,
    H_RECORD_BYTES = 56, H_INDEX_OFF = 64, H_LABELS_OFF = 72, H_CLASSES_OFF = 80,
    H_CLASSES_BYTES = 88, H_NUM_CLASSES = 96, H_RECORDS_OFF = 104, H_RECORDS_BYTES = 112,
    H_SHARD_INDEX = 120, H_SHARD_COUNT = 124, H_SHARD_FIRST = 128, H_TOTAL_RECORDS = 136,
    H_FIELDS_OFF = 144, H_FIELDS_BYTES = 152, H_END = 160
};

/* A schema entry's fields (FIELDS files). */
enum { F_NAME = 0, F_ELEM = 32, F_BATCHING = 36, F_NDIM = 40, F_SHAPE = 44, F_END = 72 };

void feeder__pack_header_encode(const feeder__pack_header *h, uint8_t *page)
{
    memset(page, 0, FEEDER__PACK_HEADER_BYTES);
    memcpy(page + H_MAGIC, FEEDER__PACK_MAGIC, 8);
    feeder__put_le32(page + H_VERSION, h->version);
    feeder__put_le32(page + H_HEADER_BYTES, h->header_bytes);
    feeder__put_le32(page + H_KIND, h->kind);
    feeder__put_le32(page + H_DTYPE, h->dtype);
    feeder__put_le32(page + H_LAYOUT, h->layout);
    feeder__put_le32(page + H_HEIGHT, h->height);
    feeder__put_le32(page + H_WIDTH, h->width);
    feeder__put_le32(page + H_CHANNELS, h->channels);
    feeder__put_le32(page + H_LABEL_TYPE, h->label_type);
    feeder__put_le32(page + H_FLAGS, h->flags);
    feeder__put_le64(page + H_COUNT, h->count);
    feeder__put_le64(page + H_RECORD_BYTES, h->record_bytes);
    feeder__put_le64(page + H_INDEX_OFF, h->index_off);
    feeder__put_le64(page + H_LABELS_OFF, h->labels_off);
    feeder__put_le64(page + H_CLASSES_OFF, h->classes_off);
    feeder__put_le64(page + H_CLASSES_BYTES, h->classes_bytes);
    feeder__put_le64(page + H_NUM_CLASSES, h->num_classes);
    feeder__put_le64(page + H_RECORDS_OFF, h->records_off);
    feeder__put_le64(page + H_RECORDS_BYTES, h->records_bytes);
    feeder__put_le32(page + H_SHARD_INDEX, h->shard_index);
    feeder__put_le32(page + H_SHARD_COUNT, h->shard_count);
    feeder__put_le64(page + H_SHARD_FIRST, h->shard_first);
    feeder__put_le64(page + H_TOTAL_RECORDS, h->total_records);
    feeder__put_le64(page + H_FIELDS_OFF, h->fields_off);
    feeder__put_le64(page + H_FIELDS_BYTES, h->fields_bytes);
    feeder__put_le32(page + FEEDER__PACK_CRC_OFF, feeder__crc32c(0, page, FEEDER__PACK_CRC_OFF));
}

void feeder__pack_fields_encode(const feeder_field *f, uint32_t n, uint8_t *out)
{
    memset(out, 0, 8 + (size_t)n * FEEDER__PACK_FIELD_BYTES);
    feeder__put_le32(out, n);
    for (uint32_t k = 0; k < n; k++) {
        uint8_t *e = out + 8 + (size_t)k * FEEDER__PACK_FIELD_BYTES;
        memcpy(e + F_NAME, f[k].name, strnlen(f[k].name, FEEDER_FIELD_NAME_MAX));
        feeder__put_le32(e + F_ELEM, (uint32_t)f[k].elem);
        feeder__put_le32(e + F_BATCHING, (uint32_t)f[k].batching);
        feeder__put_le32(e + F_NDIM, f[k].ndim);
        for (uint32_t d = 0; d < FEEDER_FIELD_MAX_DIMS; d++)
            feeder__put_le32(e + F_SHAPE + 4 * d, f[k].shape[d]);
    }
}

size_t feeder__pack_row_bytes(const feeder_field *f)
{
    size_t row = feeder_elem_size(f->elem);
    for (uint32_t d = 1; d < f->ndim; d++)
        row *= f->shape[d];
    return row;
}

void feeder__pack_entry_encode(uint8_t *out, uint64_t off, uint64_t size, uint32_t crc)
{
    feeder__put_le64(out, off);
    feeder__put_le64(out + 8, size);
    feeder__put_le32(out + 16, crc);
    feeder__put_le32(out + 20, 0);
}

static uint64_t align_up(uint64_t v, uint64_t a, int *ovf)
{
    uint64_t r;
    if (__builtin_add_overflow(v, a - 1, &r))
        *ovf = 1;
    return r / a * a;
}

uint64_t feeder__pack_layout(feeder__pack_header *h, uint64_t classes_bytes, uint64_t data_bytes)
{
    int ovf = 0;
    uint64_t index_bytes, label_bytes, end;
    ovf |= __builtin_mul_overflow(h->count, (uint64_t)FEEDER__PACK_ENTRY_BYTES, &index_bytes);
    ovf |= __builtin_mul_overflow(h->count, (uint64_t)8, &label_bytes);
    h->index_off = FEEDER__PACK_HEADER_BYTES;
    ovf |= __builtin_add_overflow(h->index_off, index_bytes, &end);
    h->labels_off = align_up(end, FEEDER__PACK_ALIGN, &ovf);
    ovf |= __builtin_add_overflow(h->labels_off, label_bytes, &end);
    h->classes_bytes = classes_bytes;
    h->classes_off = 0;
    if (classes_bytes) {
        h->classes_off = align_up(end, FEEDER__PACK_ALIGN, &ovf);
        ovf |= __builtin_add_overflow(h->classes_off, classes_bytes, &end);
    }
    h->records_off = align_up(end, FEEDER__PACK_ALIGN, &ovf);
    h->records_bytes = data_bytes;
    ovf |= __builtin_add_overflow(h->records_off, data_bytes, &end);
    uint64_t size = align_up(end, FEEDER__PACK_ALIGN, &ovf);
    return ovf ? 0 : size;
}

uint64_t feeder__pack_layout_fields(feeder__pack_header *h, uint64_t fields_bytes,
                                    uint64_t data_bytes)
{
    /* The schema takes the class names' place: a FIELDS file stores none. */
    uint64_t size = feeder__pack_layout(h, fields_bytes, data_bytes);
    h->fields_off = h->classes_off;
    h->fields_bytes = fields_bytes;
    h->classes_off = h->classes_bytes = 0;
    return size;
}

void feeder__pack_entry(const feeder__pack_view *v, uint64_t i, uint64_t *off, uint64_t *size,
                        uint32_t *crc)
{
    const uint8_t *e = v->index + i * FEEDER__PACK_ENTRY_BYTES;
    *off = feeder__get_le64(e);
    *size = feeder__get_le64(e + 8);
    *crc = feeder__get_le32(e + 16);
}

int64_t feeder__pack_label(const feeder__pack_view *v, uint64_t i)
{
    return (int64_t)feeder__get_le64(v->labels + i * 8);
}

#define ULL(x) ((unsigned long long)(x))

/* A section of `bytes` bytes at `off` lies after the header and inside the file. */
static int check_section(const char *name, size_t len, const char *what, uint64_t off,
                         uint64_t bytes, char *err, size_t errlen)
{
    uint64_t end;
    if (off < FEEDER__PACK_HEADER_BYTES)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: %s (offset %llu) overlaps the %u-byte header", name, what,
                            ULL(off), FEEDER__PACK_HEADER_BYTES);
    if (__builtin_add_overflow(off, bytes, &end) || end > len)
        return feeder__fail(
            err, errlen, FEEDER_EFORMAT,
            "%s: %s (offset %llu, %llu bytes) runs past the end of the file (%llu bytes)", name,
            what, ULL(off), ULL(bytes), ULL(len));
    return 0;
}

/* The fixed part of the header: magic, version (first: a later version may
 * lay out the rest differently), length and CRC. */
static int parse_magic(const uint8_t *buf, size_t len, const char *name, char *err,
                       size_t errlen)
{
    if (len < 8)
        return feeder__fail(
            err, errlen, FEEDER_EFORMAT,
            "%s: not a feeder packed file (%llu bytes, shorter than its 8-byte magic)", name,
            ULL(len));
    if (memcmp(buf, FEEDER__PACK_MAGIC, 8) != 0)
        return feeder__fail(
            err, errlen, FEEDER_EFORMAT,
            "%s: not a feeder packed file (bad magic %02x %02x %02x %02x %02x %02x %02x "
            "%02x; expected \"" FEEDER__PACK_MAGIC "\")",
            name, buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7]);
    if (len < H_VERSION + 4)
        return feeder__fail(err, errlen, FEEDER_EFORMAT, "%s: truncated header (%llu of %u bytes)",
                            name, ULL(len), FEEDER__PACK_HEADER_BYTES);
    /* The version first: a later version may lay out the rest differently. */
    uint32_t version = feeder__get_le32(buf + H_VERSION);
    if (version < FEEDER__PACK_VERSION_MIN || version > FEEDER__PACK_VERSION_MAX)
        return feeder__fail(
            err, errlen, FEEDER_EFORMAT,
            "%s: unsupported format version %u (this library reads versions %u to %u)", name,
            version, FEEDER__PACK_VERSION_MIN, FEEDER__PACK_VERSION_MAX);
    if (len < FEEDER__PACK_HEADER_BYTES)
        return feeder__fail(err, errlen, FEEDER_EFORMAT, "%s: truncated header (%llu of %u bytes)",
                            name, ULL(len), FEEDER__PACK_HEADER_BYTES);
    uint32_t stored = feeder__get_le32(buf + FEEDER__PACK_CRC_OFF);
    uint32_t computed = feeder__crc32c(0, buf, FEEDER__PACK_CRC_OFF);
    if (stored != computed)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: header crc32c mismatch (stored 0x%08x, computed 0x%08x)", name,
                            stored, computed);
    return 0;
}

uint32_t feeder__pack_crc_seed(uint32_t version, int64_t label)
{
    if (version < 2)
        return 0;
    uint8_t le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (uint8_t)((uint64_t)label >> (8 * k));
    return feeder__crc32c(0, le, sizeof(le));
}

static void read_header(const uint8_t *buf, feeder__pack_header *h)
{
    h->version = feeder__get_le32(buf + H_VERSION);
    h->header_bytes = feeder__get_le32(buf + H_HEADER_BYTES);
    h->kind = feeder__get_le32(buf + H_KIND);
    h->dtype = feeder__get_le32(buf + H_DTYPE);
    h->layout = feeder__get_le32(buf + H_LAYOUT);
    h->height = feeder__get_le32(buf + H_HEIGHT);
    h->width = feeder__get_le32(buf + H_WIDTH);
    h->channels = feeder__get_le32(buf + H_CHANNELS);
    h->label_type = feeder__get_le32(buf + H_LABEL_TYPE);
    h->flags = feeder__get_le32(buf + H_FLAGS);
    h->count = feeder__get_le64(buf + H_COUNT);
    h->record_bytes = feeder__get_le64(buf + H_RECORD_BYTES);
    h->index_off = feeder__get_le64(buf + H_INDEX_OFF);
    h->labels_off = feeder__get_le64(buf + H_LABELS_OFF);
    h->classes_off = feeder__get_le64(buf + H_CLASSES_OFF);
    h->classes_bytes = feeder__get_le64(buf + H_CLASSES_BYTES);
    h->num_classes = feeder__get_le64(buf + H_NUM_CLASSES);
    h->records_off = feeder__get_le64(buf + H_RECORDS_OFF);
    h->records_bytes = feeder__get_le64(buf + H_RECORDS_BYTES);
    h->shard_index = feeder__get_le32(buf + H_SHARD_INDEX);
    h->shard_count = feeder__get_le32(buf + H_SHARD_COUNT);
    h->shard_first = feeder__get_le64(buf + H_SHARD_FIRST);
    h->total_records = feeder__get_le64(buf + H_TOTAL_RECORDS);
    h->fields_off = feeder__get_le64(buf + H_FIELDS_OFF);
    h->fields_bytes = feeder__get_le64(buf + H_FIELDS_BYTES);
}

/* The header's own claims: sizes, kind, dtype, labels, shape, shards. */
static int check_header(const feeder__pack_header *h, const char *name, char *err, size_t errlen)
{
    uint32_t version = h->version;
    if (h->header_bytes != FEEDER__PACK_HEADER_BYTES)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: header size %u (version %u headers are %u bytes)", name,
                            h->header_bytes, version, FEEDER__PACK_HEADER_BYTES);
    if (h->kind != FEEDER_RECORD_RAW && h->kind != FEEDER_RECORD_JPEG &&
        h->kind != FEEDER_RECORD_FIELDS)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: unknown record kind %u (1 = RAW, 2 = JPEG, 3 = FIELDS)", name,
                            h->kind);
    if ((h->kind == FEEDER_RECORD_FIELDS) != (version >= FEEDER__PACK_VERSION_FIELDS))
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: record kind %u in a version %u file (FIELDS files are "
                            "version %u, RAW and JPEG files versions 1 and 2)",
                            name, h->kind, version, FEEDER__PACK_VERSION_FIELDS);
    if (h->dtype != FEEDER__PACK_DTYPE_UINT8)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: unsupported dtype %u (version %u stores uint8 = 1)", name,
                            h->dtype, version);
    if (h->label_type != FEEDER__PACK_LABEL_INT64)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: unsupported label type %u (version %u stores int64 = 1)", name,
                            h->label_type, version);
    if (h->count == 0)
        return feeder__fail(err, errlen, FEEDER_EFORMAT, "%s: holds no records", name);
    if (h->kind == FEEDER_RECORD_RAW) {
        if (h->layout > FEEDER_LAYOUT_NCHW)
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: unknown layout %u (0 = NHWC, 1 = NCHW)", name, h->layout);
        if (h->height == 0 || h->width == 0 || (h->channels != 3 && h->channels != 1))
            return feeder__fail(
                err, errlen, FEEDER_EFORMAT,
                "%s: RAW sample shape %ux%ux%u is not supported (height and width > 0, "
                "3 or 1 channels)",
                name, h->height, h->width, h->channels);
        uint64_t p;
        if (__builtin_mul_overflow((uint64_t)h->height * h->width, (uint64_t)h->channels, &p))
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: RAW sample shape %ux%ux%u overflows a size", name, h->height,
                                h->width, h->channels);
        if (h->record_bytes != p)
            return feeder__fail(
                err, errlen, FEEDER_EFORMAT,
                "%s: RAW record size mismatch: the header says %llu bytes per record, "
                "%ux%ux%u is %llu",
                name, ULL(h->record_bytes), h->height, h->width, h->channels, ULL(p));
    }
    uint64_t last;
    if (h->shard_count == 0 || h->shard_index >= h->shard_count)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: shard %u of %u is not a valid shard number", name, h->shard_index,
                            h->shard_count);
    if (__builtin_add_overflow(h->shard_first, h->count, &last) || last > h->total_records)
        return feeder__fail(
            err, errlen, FEEDER_EFORMAT,
            "%s: shard holds %llu records from record %llu on, past the %llu records of "
            "all shards",
            name, ULL(h->count), ULL(h->shard_first), ULL(h->total_records));
    return 0;
}

/* A FIELDS file's schema section: inside the file, every entry's name
 * ending within its 32 bytes, and the schema valid by the rules of user
 * fields datasets (dataset/schema.c). */
static int check_fields(const uint8_t *buf, size_t len, const char *name,
                        feeder__pack_view *out, char *err, size_t errlen)
{
    const feeder__pack_header *h = &out->h;
    if (h->kind != FEEDER_RECORD_FIELDS) {
        if (h->fields_off || h->fields_bytes)
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: a schema section in a file of record kind %u", name, h->kind);
        return 0;
    }
    int rc = check_section(name, len, "schema", h->fields_off, h->fields_bytes, err, errlen);
    if (rc)
        return rc;
    const uint8_t *s = buf + h->fields_off;
    uint32_t n = h->fields_bytes >= 8 ? feeder__get_le32(s) : 0;
    if (n == 0 || n > FEEDER_FIELDS_MAX || h->fields_bytes != 8 + (uint64_t)n * F_END)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: schema section of %llu bytes for %u fields (1 to %d fields "
                            "of %u bytes after 8)",
                            name, ULL(h->fields_bytes), n, FEEDER_FIELDS_MAX, (unsigned)F_END);
    for (uint32_t k = 0; k < n; k++) {
        const uint8_t *e = s + 8 + (size_t)k * F_END;
        if (!memchr(e + F_NAME, 0, FEEDER_FIELD_NAME_MAX + 1))
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: field %u's name does not end within its %d bytes", name, k,
                                FEEDER_FIELD_NAME_MAX + 1);
        feeder_field *f = &out->fields[k];
        f->name = (const char *)(e + F_NAME);
        f->elem = (int32_t)feeder__get_le32(e + F_ELEM);
        f->batching = (int32_t)feeder__get_le32(e + F_BATCHING);
        f->ndim = feeder__get_le32(e + F_NDIM);
        for (uint32_t d = 0; d < FEEDER_FIELD_MAX_DIMS; d++)
            f->shape[d] = feeder__get_le32(e + F_SHAPE + 4 * d);
    }
    char why[256];
    if (feeder__fields_check(out->fields, n, why, sizeof(why)))
        return feeder__fail(err, errlen, FEEDER_EFORMAT, "%s: schema: %s", name, why);
    out->nfields = n;
    return 0;
}

/* The index, labels, record area and class names lie inside the file. */
static int check_sections(const uint8_t *buf, size_t len, const char *name,
                          feeder__pack_view *out, char *err, size_t errlen)
{
    const feeder__pack_header *h = &out->h;
    uint64_t index_bytes, label_bytes;
    if (__builtin_mul_overflow(h->count, (uint64_t)FEEDER__PACK_ENTRY_BYTES, &index_bytes) ||
        __builtin_mul_overflow(h->count, (uint64_t)8, &label_bytes))
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: record count %llu is too large for any file", name, ULL(h->count));
    int rc;
    if ((rc = check_section(name, len, "index", h->index_off, index_bytes, err, errlen)) ||
        (rc = check_section(name, len, "labels", h->labels_off, label_bytes, err, errlen)))
        return rc;
    if (h->records_off % FEEDER__PACK_ALIGN)
        return feeder__fail(err, errlen, FEEDER_EFORMAT,
                            "%s: record area offset %llu is not a multiple of %u", name,
                            ULL(h->records_off), FEEDER__PACK_ALIGN);
    if ((rc = check_section(name, len, "record area", h->records_off, h->records_bytes, err,
                            errlen)))
        return rc;
    out->buf = buf;
    out->len = len;
    out->index = buf + h->index_off;
    out->labels = buf + h->labels_off;
    if (h->num_classes) {
        if ((rc = check_section(name, len, "class names", h->classes_off, h->classes_bytes, err,
                                errlen)))
            return rc;
        const uint8_t *c = buf + h->classes_off;
        uint64_t pos = 0;
        /* Each name takes at least its NUL, so this ends within classes_bytes
         * steps however large num_classes claims to be. */
        for (uint64_t k = 0; k < h->num_classes; k++) {
            const uint8_t *nul = pos < h->classes_bytes
                                     ? memchr(c + pos, 0, (size_t)(h->classes_bytes - pos))
                                     : NULL;
            if (!nul)
                return feeder__fail(
                    err, errlen, FEEDER_EFORMAT,
                    "%s: class name %llu of %llu does not end within the %llu bytes of "
                    "class names",
                    name, ULL(k), ULL(h->num_classes), ULL(h->classes_bytes));
            pos = (uint64_t)(nul - c) + 1;
        }
        out->classes = c;
    }
    return 0;
}

/* Every label is in [0, num_classes) (or non-negative without names). */
static int check_labels(const char *name, feeder__pack_view *out, char *err, size_t errlen)
{
    const feeder__pack_header *h = &out->h;
    int64_t maxlab = -1;
    for (uint64_t i = 0; i < h->count; i++) {
        int64_t l = feeder__pack_label(out, i);
        if (l < 0 || (h->num_classes && (uint64_t)l >= h->num_classes)) {
            if (h->num_classes)
                return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                    "%s: label %lld of record %llu is outside [0, %llu)", name,
                                    (long long)l, ULL(i), ULL(h->num_classes));
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: label %lld of record %llu is negative", name, (long long)l,
                                ULL(i));
        }
        if (l > maxlab)
            maxlab = l;
    }
    out->num_classes = h->num_classes ? h->num_classes : (uint64_t)maxlab + 1;
    return 0;
}

/* Records lie in the record area, in index order, without overlap: each
 * byte of the area belongs to at most one record. */
static int check_records(const char *name, const feeder__pack_view *out, char *err,
                         size_t errlen)
{
    const feeder__pack_header *h = &out->h;
    uint64_t area_end = h->records_off + h->records_bytes, prev_end = h->records_off;
    for (uint64_t i = 0; i < h->count; i++) {
        uint64_t off, size, end;
        uint32_t crc;
        feeder__pack_entry(out, i, &off, &size, &crc);
        if (size == 0)
            return feeder__fail(err, errlen, FEEDER_EFORMAT, "%s: record %llu is empty (size 0)",
                                name, ULL(i));
        if (h->kind == FEEDER_RECORD_RAW && size != h->record_bytes)
            return feeder__fail(err, errlen, FEEDER_EFORMAT,
                                "%s: record %llu has %llu bytes; RAW records of %ux%ux%u are %llu",
                                name, ULL(i), ULL(size), h->height, h->width, h->channels,
                                ULL(h->record_bytes));
        if (off < h->records_off || __builtin_add_overflow(off, size, &end) || end > area_end)
            return feeder__fail(
                err, errlen, FEEDER_EFORMAT,
                "%s: record %llu (offset %llu, %llu bytes) lies outside the record area "
                "(offset %llu, %llu bytes)",
                name, ULL(i), ULL(off), ULL(size), ULL(h->records_off), ULL(h->records_bytes));
        if (off < prev_end)
            return feeder__fail(
                err, errlen, FEEDER_EFORMAT,
                "%s: record %llu (offset %llu) starts before record %llu ends (offset "
                "%llu): records must be in index order and must not overlap",
                name, ULL(i), ULL(off), ULL(i - 1), ULL(prev_end));
        prev_end = end;
    }
    return 0;
}

int feeder__pack_parse(const uint8_t *buf, size_t len, const char *name, feeder__pack_view *out,
                       char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!name)
        name = "(packed file)";
    memset(out, 0, sizeof(*out));
    int rc = parse_magic(buf, len, name, err, errlen);
    if (rc)
        return rc;
    read_header(buf, &out->h);
    if ((rc = check_header(&out->h, name, err, errlen)) ||
        (rc = check_sections(buf, len, name, out, err, errlen)) ||
        (rc = check_fields(buf, len, name, out, err, errlen)) ||
        (rc = check_labels(name, out, err, errlen)))
        return rc;
    return check_records(name, out, err, errlen);
}

int feeder__pack_peek(const uint8_t *buf, size_t len, const char *name, feeder__pack_header *h,
                      char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    memset(h, 0, sizeof(*h));
    int rc = parse_magic(buf, len, name, err, errlen);
    if (rc)
        return rc;
    read_header(buf, h);
    return check_header(h, name, err, errlen);
}
