/*
 * Packed datasets: the file format (pack_format.c, a pure parser over a
 * buffer so a fuzzer can drive it) and the dataset over a mapped file
 * (packed.c); the worker's record reader is worker/packed_read.c. The format is
 * documented byte by byte in docs/FORMAT.md; keep the two in step.
 */
#ifndef FEEDER_DATASET_PACK_H
#define FEEDER_DATASET_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "dataset/dataset.h"

/* ---- the format (pack_format.c) ---- */

#define FEEDER__PACK_MAGIC "FEEDPACK"
/* Written: 2 for RAW and JPEG files, whose record CRCs cover the record's
 * label and bytes; 3 for FIELDS files (a schema section, records of several
 * fields of varying length). Read: 1 (CRCs over the bytes alone: labels
 * unchecked) to 3. */
#define FEEDER__PACK_VERSION 2
#define FEEDER__PACK_VERSION_FIELDS 3
#define FEEDER__PACK_VERSION_MIN 1
#define FEEDER__PACK_VERSION_MAX 3
/* The schema section of a FIELDS file: nfields u32, reserved u32, then one
 * entry of FEEDER__PACK_FIELD_BYTES per field (docs/FORMAT.md). */
#define FEEDER__PACK_FIELD_BYTES 72u
#define FEEDER__PACK_HEADER_BYTES 4096u
#define FEEDER__PACK_ALIGN 4096u /* sections and the record area start on this */
#define FEEDER__PACK_ENTRY_BYTES 24u
#define FEEDER__PACK_CRC_OFF 4092u /* header crc32c covers bytes [0, 4092) */
enum { FEEDER__PACK_DTYPE_UINT8 = 1 };
enum { FEEDER__PACK_LABEL_INT64 = 1 };

/* The header, decoded (docs/FORMAT.md gives every field's offset). */
typedef struct feeder__pack_header {
    uint32_t version;
    uint32_t header_bytes;
    uint32_t kind;       /* feeder_record_kind */
    uint32_t dtype;
    uint32_t layout;
    uint32_t height, width, channels;
    uint32_t label_type;
    uint32_t flags;
    uint64_t count;
    uint64_t record_bytes;
    uint64_t index_off;
    uint64_t labels_off;
    uint64_t classes_off;
    uint64_t classes_bytes;
    uint64_t num_classes;
    uint64_t records_off;
    uint64_t records_bytes;
    uint32_t shard_index, shard_count;
    uint64_t shard_first;
    uint64_t total_records;
    uint64_t fields_off;   /* FIELDS (version 3): the schema section; else 0 */
    uint64_t fields_bytes;
} feeder__pack_header;

/* A parsed file: the header and where the sections are in the buffer. Every
 * offset and size in it has been checked against the buffer's length. */
typedef struct feeder__pack_view {
    feeder__pack_header h;
    const uint8_t *buf;
    size_t len;
    const uint8_t *index;   /* count entries of 24 bytes */
    const uint8_t *labels;  /* count little-endian int64 */
    const uint8_t *classes; /* num_classes NUL-terminated names, or NULL */
    uint64_t num_classes;   /* stored, or largest label + 1 when none are stored */
    /* FIELDS: the checked schema (names point into the buffer) */
    uint32_t nfields;
    feeder_field fields[FEEDER_FIELDS_MAX];
} feeder__pack_view;

/* Check a whole packed file held in buf[0, len) (a mapping or a fuzzer's
 * input) and describe it in *out. Reads nothing outside the buffer whatever
 * it holds. 0, or FEEDER_EFORMAT with a message naming `name` (the file) in
 * `err`. Pure: no allocation, no I/O. */
int feeder__pack_parse(const uint8_t *buf, size_t len, const char *name, feeder__pack_view *out,
                       char *err, size_t errlen);

/* The header page alone (buf[0, len), len >= 4096): magic, version, CRC and
 * the header's own claims, as feeder__pack_parse checks them; nothing about
 * the sections. For shards read over the network, whose record area is not
 * there yet. 0 or FEEDER_EFORMAT naming `name`. Pure. */
int feeder__pack_peek(const uint8_t *buf, size_t len, const char *name, feeder__pack_header *h,
                      char *err, size_t errlen);

/* Entry i of a parsed index (i < count). */
void feeder__pack_entry(const feeder__pack_view *v, uint64_t i, uint64_t *off, uint64_t *size,
                        uint32_t *crc);
int64_t feeder__pack_label(const feeder__pack_view *v, uint64_t i);
/* Where a record's crc32c starts (chain the record's bytes onto it): from
 * version 2 the CRC of its label's 8 little-endian bytes, so a changed label
 * fails VERIFY_CRC; 0 in version 1. */
uint32_t feeder__pack_crc_seed(uint32_t version, int64_t label);

/* Writing (the pack tool, tests): encode the header into a 4096-byte page
 * (crc32c included) and one index entry into 24 bytes. */
void feeder__pack_header_encode(const feeder__pack_header *h, uint8_t *page);
/* A FIELDS file's schema section (8 + n x FEEDER__PACK_FIELD_BYTES bytes). */
void feeder__pack_fields_encode(const feeder_field *f, uint32_t n, uint8_t *out);
/* A FIELDS record: its rows header (a u32 per field, padded to 8 bytes)
 * then each field's rows x row bytes, each padded to 8. The header's and
 * one field's padded sizes: */
static inline uint64_t feeder__pack_pad8(uint64_t v) { return (v + 7) & ~(uint64_t)7; }
/* Bytes of one row of field f (a scalar: one element). */
size_t feeder__pack_row_bytes(const feeder_field *f);
void feeder__pack_entry_encode(uint8_t *out, uint64_t off, uint64_t size, uint32_t crc);
/* Lay out a file of h->count records, `classes_bytes` of class names and
 * `data_bytes` of record area: sets the section offsets in *h and returns the
 * file size (a multiple of 4096), or 0 when a size overflows. */
uint64_t feeder__pack_layout(feeder__pack_header *h, uint64_t classes_bytes, uint64_t data_bytes);
/* The same for a FIELDS file, with a schema section of `fields_bytes`
 * between the labels and the record area. */
uint64_t feeder__pack_layout_fields(feeder__pack_header *h, uint64_t fields_bytes,
                                    uint64_t data_bytes);

/* ---- the dataset (packed.c) ---- */

struct feeder__pack {
    char *path;
    int fd;             /* O_RDONLY, page-cache reads */
    uint8_t *map;       /* the whole file, read-only, shared */
    size_t map_len;
    feeder__pack_view v;
    uint64_t *off;      /* record offsets, sizes and crcs, decoded from the index */
    uint64_t *size;
    uint32_t *crc;
    int lock_fd;        /* a URL's pack: the shard cache's shared flock, held while mapped */
    struct feeder__shards *shards; /* a shards dataset (shards.c): fd is -1, map a reservation */
    /* How shards.c frees them (with the reservation): set beside `shards`. */
    void (*shards_free)(struct feeder__shards *sh, uint8_t *map, size_t map_len);
};

/* ---- shards (shards.c): many packs as one ---- */

/* A shards dataset is one packed dataset whose "file" is an address range
 * reserved at open with every shard at its own page-aligned place in it:
 * the index, labels, record offsets (already shifted into the range) and
 * class names are copied at open, from the local files or, for URLs, from
 * range requests of each shard's header and index. A local shard is mapped
 * at open; a URL's shard is mapped into the range by the process that first
 * reads one of its records (feeder__shards_ensure), from the shard cache.
 * The per-process arrays (resident, lock_fd, used) are each forked worker's
 * own copy, like its mappings. */
struct feeder__shards {
    uint32_t n;
    char **names;        /* paths or URLs, as expanded */
    uint64_t *first;     /* n + 1: each shard's first record, across shards */
    uint64_t *base;      /* each shard's offset in the reservation */
    uint64_t *bytes;     /* each shard's file size */
    void *meta;          /* feeder__remote_meta[n] (remote/remote.h): what open saw */
    uint8_t *remote;     /* 1: a URL */
    uint8_t *resident;   /* mapped in this process */
    int *lock_fd;        /* this process's shared lock on the cached copy, or -1 */
    void **stream;       /* feeder__shard * of a copy still arriving (mapped, read as it
                            comes: feeder__shard_wait), or NULL */
    uint64_t *used;      /* this process's tick of the last ensure, for unmapping */
    uint64_t tick;
    uint32_t max_resident; /* URL shards one process keeps mapped; 0: no limit */
    uint32_t fetch_ahead;  /* shards fetched ahead (feeder__ahead_shards): 0 for none */
    uint32_t nurl;         /* URL shards of the set */
    void *cache;         /* feeder__cache (remote/remote.h) */
    struct feeder__ahead *fetch; /* the fetch-ahead threads (parent only), or NULL */
};

/* Shard s of a record index (binary search). */
uint32_t feeder__shards_of(const struct feeder__shards *sh, uint64_t index);

/* Map, in this process, every not-yet-mapped shard that holds one of the
 * n records idx[]: the shard cache's copy, checked against the size and
 * ETag seen at open, or, while it is being downloaded (by this process, on
 * a thread of the cache's, or by another), its partial copy; then wait
 * until each of the n records has arrived. Unmaps least recently used URL shards
 * past max_resident (never one of idx[]'s). 0, or the cache's error with
 * its message (naming the URL) in msg. Not thread-safe: one reader per
 * process (a worker, or the calling thread of a loader without workers). */
int feeder__shards_ensure(struct feeder__pack *pk, const uint64_t *idx, uint32_t n, char *msg,
                          size_t msglen);
void feeder__shards_free(struct feeder__shards *sh, uint8_t *map, size_t map_len);

/* Fetch ahead (the loader's hooks, parent process only; the threads are
 * remote/ahead.c's, shared with tar sets): plan gives the
 * epoch's order (copied as the URL shards in the order they are first
 * needed; NULL/0 stops fetching) and starts the fetch threads the first
 * time (min(fetch_ahead, 4) of them: downloads in flight); progress says the
 * loader has handed out positions below `pos`. The threads download each
 * planned shard into the cache (and let it go: the workers map it) while it
 * is at most fetch_ahead shards past the shard holding position `pos`. A failed download is left for the worker that
 * needs the shard to retry and report. No-ops without URL shards or with
 * fetch_ahead 0. Thread-safe with respect to the fetch thread. */
void feeder__shards_plan(struct feeder__pack *pk, const uint64_t *order, uint64_t len);
void feeder__shards_progress(struct feeder__pack *pk, uint64_t pos);
/* Whether the set's fetching ahead is done for good (feeder__ahead_settled):
 * every URL shard landed once, in a cache that evicts none. */
int feeder__shards_settled(const struct feeder__pack *pk);

void feeder__pack_free(struct feeder__pack *pk);
/* A packed (or shards, or fields pack) dataset's `release`: its pack. */
void feeder__pack_release(feeder_dataset *ds);
/* A FIELDS file opened by feeder_dataset_open_packed: the fields dataset
 * that takes over `shell`'s pack (the shell is then the caller's to free).
 * pack_fields.c. */
int feeder__pack_open_fields(feeder_dataset *shell, feeder_dataset **out, char *err,
                             size_t errlen);

#endif
