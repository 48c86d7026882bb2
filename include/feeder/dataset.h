/*
 * feeder/dataset.h: datasets: image folders, list files, packed files, tar shards, local or
 * remote shard sets, and datasets made of C callbacks.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_DATASET_H
#define FEEDER_PUBLIC_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Datasets                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct feeder_dataset feeder_dataset;

/* Open an image folder: every sub-folder of `root` is a class, its label the
 * position of its name among the sorted names (byte order, as torchvision's
 * ImageFolder does); every regular file with a .jpg, .jpeg, .jfif, .png or
 * .webp extension (any case) in it, recursively, is a sample (the format,
 * JPEG, PNG or WebP, is read from the bytes, not the name; the files left out
 * are counted by feeder_dataset_skipped). Samples are ordered by class, then
 * by path. Symbolic links are followed, and each folder is walked once per
 * open: a later link to a folder walked already (in any class) is not
 * followed again, so no file is listed twice (feeder_dataset_skipped counts
 * those links). `root` is copied. Fails with FEEDER_EDATASET when no class or
 * no image is found, -ELOOP for a link to a folder it is in, FEEDER_ELIMIT
 * when folders nest more than 32 levels below a class folder (the
 * environment variable FEEDER_FOLDER_MAX_DEPTH sets 1 to 64) or the walk
 * meets more than 100,000,000 files and folders (FEEDER_FOLDER_MAX_ENTRIES),
 * naming the path and the limit, or -errno when `root` cannot be read; the
 * message is left in `err` (may be NULL) of `errlen` bytes.
 * Lifetime: until feeder_dataset_destroy; a loader holds its own reference,
 * so the dataset may be destroyed before the loaders that use it.
 * Thread-safety: a dataset is read-only after open and may be shared. */
FEEDER_API int feeder_dataset_open_folder(const char *root, feeder_dataset **out,
                                          char *err, size_t errlen);

/* Open a list file: one sample per line, "relative/path label", the label a
 * non-negative integer after the last run of blanks (so paths may hold spaces);
 * paths are relative to `root` (NULL: the list file's folder). Empty lines and
 * lines starting with '#' are skipped. A malformed line fails with
 * FEEDER_EDATASET and a message naming the list file and line number; an
 * absolute path, or one whose ".." climbs above the root, fails with
 * FEEDER_EPATH (feeder_dataset_open_list2 can allow them).
 * Both strings are copied. Lifetime and thread-safety as for folders. */
FEEDER_API int feeder_dataset_open_list(const char *list_path, const char *root,
                                        feeder_dataset **out, char *err, size_t errlen);

/* Flags of feeder_dataset_open_list2(). */
/* Accept paths that leave the root: absolute paths, and relative paths whose
 * ".." components climb above it. Without this flag such a line fails the
 * open with FEEDER_EPATH and a message naming the list file and line. The
 * check is lexical: a symlink inside the root that points outside it is
 * followed either way. */
#define FEEDER_LIST_ALLOW_ESCAPE 1u

/* feeder_dataset_open_list() with `flags` (FEEDER_LIST_*; 0 is what
 * feeder_dataset_open_list does). Besides its errors: FEEDER_EPATH for a path
 * that escapes the root, and FEEDER_EDATASET for a line longer than 4200
 * bytes or a label over INT64_MAX, each with "list:line: ..." in `err`;
 * FEEDER_EINVAL for an unknown flag. Both strings are copied. Lifetime and
 * thread-safety as for folders. */
FEEDER_API int feeder_dataset_open_list2(const char *list_path, const char *root,
                                         unsigned flags, feeder_dataset **out, char *err,
                                         size_t errlen);

/* Record kinds of a packed file (docs/FORMAT.md). */
typedef enum feeder_record_kind {
    FEEDER_RECORD_RAW = 1,   /* fixed-shape uint8 tensors, already transformed */
    FEEDER_RECORD_JPEG = 2,  /* the original JPEG bytes, decoded by the normal pipeline */
    FEEDER_RECORD_FIELDS = 3 /* a fields dataset's samples (feeder_pack_fields): the file
                                opens as a fields dataset of the stored schema */
} feeder_record_kind;

/* Open a packed file made by feeder-pack (docs/FORMAT.md), or an http(s):// or
 * s3:// URL of one; everything is checked before use (FEEDER_EFORMAT naming the
 * file and the fault; -errno when it cannot be opened). `path` is copied; `err`
 * (may be NULL) gets the message. RAW, JPEG and FIELDS records, remote files:
 * docs/api/dataset.md, "Packed files".
 * Lifetime: until feeder_dataset_destroy; loaders hold their own reference.
 * Thread-safety: read-only after open; may be shared. */
FEEDER_API int feeder_dataset_open_packed(const char *path, feeder_dataset **out, char *err,
                                          size_t errlen);

/* What a packed file holds, from its header. */
typedef struct feeder_packed_info {
    uint32_t version;       /* format version */
    int kind;               /* feeder_record_kind */
    int layout;             /* RAW: feeder_layout of every record */
    uint32_t height, width, channels; /* RAW: the sample shape; 0 for JPEG */
    uint64_t records;       /* records in this file */
    uint64_t record_bytes;  /* RAW: height * width * channels; 0 for JPEG */
    uint64_t data_bytes;    /* bytes of the record area */
    uint64_t file_bytes;    /* size of the file */
    uint32_t shard_index;   /* 0 .. shard_count-1 */
    uint32_t shard_count;   /* 1 when the pack was not split */
    uint64_t shard_first;   /* index, across all shards, of this file's first record */
    uint64_t total_records; /* records across all shards */
    uint64_t reserved_[8];
} feeder_packed_info;

/* Fill `out` from a dataset opened with feeder_dataset_open_packed; FEEDER_EINVAL
 * for NULL arguments or another kind of dataset. Thread-safe. */
FEEDER_API int feeder_dataset_packed_info(const feeder_dataset *ds, feeder_packed_info *out);

/* WebDataset tar shards, read in place: members grouped by WebDataset's key
 * rule, the image the first .jpg/.jpeg/.png/.webp, the label the .cls member.
 * A <shard>.idx beside each shard caches its walk. Bad samples fail when
 * loaded, under the error policy. `paths` are copied. Grouping, the index
 * file, the errors: docs/api/dataset.md, "Tar shards".
 * Lifetime: until feeder_dataset_destroy; loaders hold their own reference.
 * Thread-safety: read-only after open; may be shared. */
FEEDER_API int feeder_dataset_open_tar(const char *const *paths, size_t count,
                                       feeder_dataset **out, char *err, size_t errlen);

/* feeder_dataset_open_tar over the names a brace pattern stands for
 * ("shards/s-{000000..000127}.tar", "{train,extra}.tar"; a pattern without
 * braces is one shard). A malformed pattern fails with FEEDER_EINVAL and a
 * message giving its offset. Otherwise as feeder_dataset_open_tar. */
FEEDER_API int feeder_dataset_open_tar_pattern(const char *pattern, feeder_dataset **out,
                                               char *err, size_t errlen);

/* What a tar dataset's open found. */
typedef struct feeder_tar_info {
    uint32_t shards;
    uint32_t indexes_cached;  /* shards whose index came from <shard>.idx */
    uint32_t indexes_written; /* shards walked by this open whose <shard>.idx it wrote */
    uint32_t reserved0_;
    uint64_t samples;
    uint64_t bad_samples;     /* samples that fail when loaded (see above) */
    uint64_t reserved_[4];
} feeder_tar_info;

/* Fill `out` for a dataset opened with feeder_dataset_open_tar*;
 * FEEDER_EINVAL for NULL arguments or another kind of dataset. Thread-safe. */
FEEDER_API int feeder_dataset_tar_info(const feeder_dataset *ds, feeder_tar_info *out);

/* Where sample `index` of a tar dataset lies: its shard's path, its key, and
 * its image member's data offset and size in the shard; `problem` gets what
 * is wrong with a bad sample, NULL for a good one (each out pointer may be
 * NULL; strings borrowed from the dataset). 0; FEEDER_EDATASET for a bad
 * sample (shard, key and problem are set; offset and size are 0);
 * FEEDER_EINVAL for another kind of dataset or an index out of range.
 * Thread-safe. */
FEEDER_API int feeder_dataset_tar_sample(const feeder_dataset *ds, uint64_t index,
                                         const char **shard, const char **key,
                                         uint64_t *offset, uint64_t *size,
                                         const char **problem);

/* ------------------------------------------------------------------------ */
/* Shards, local or remote (http://, https://, s3://)                        */
/* ------------------------------------------------------------------------ */

/* feeder_shard_options.fetch_ahead for no fetching ahead: each URL shard is
 * downloaded by the worker (or calling thread) that first reads it. */
#define FEEDER_FETCH_AHEAD_NONE UINT32_MAX

/* How a shards dataset reaches and keeps its shards. Zero-fill it (or pass
 * NULL) for the defaults. */
typedef struct feeder_shard_options {
    const char *cache_dir;    /* the shard cache; NULL: $FEEDER_CACHE_DIR, else
                                 $XDG_CACHE_HOME/feeder/shards, else
                                 $HOME/.cache/feeder/shards (copied) */
    uint64_t cache_max_bytes; /* evict least recently used shards past this;
                                 0: $FEEDER_CACHE_MAX_BYTES, else no limit */
    uint32_t max_resident;    /* remote shards one process keeps mapped; 0: all */
    uint32_t fetch_ahead;     /* URL shards a loader's fetch threads download
                                 ahead of the sampler (min(N, 4) threads);
                                 0: the default, half the online CPUs,
                                 1 to 4 (1 with a cache byte limit);
                                 FEEDER_FETCH_AHEAD_NONE:
                                 none (workers fetch on demand). Local shards
                                 are never fetched: no thread */
    uint64_t reserved_[8];    /* zero */
} feeder_shard_options;

/* Open the packed shards (or tar shards) that `pattern` names, a brace range
 * of local paths or http(s):// / s3:// URLs ("s3://bucket/s-{0..7}.pack"), as one
 * dataset, shards in the pattern's order. Remote shards are read through the
 * bounded shard cache; a loader over packs needs FEEDER_PACKED_READ_MMAP.
 * `pattern` and `opt` are copied; `err` (may be NULL) gets the message. S3,
 * caching, tar indexes, TLS, offline mode and transfer bounds:
 * docs/api/dataset.md, "Shard sets".
 * Lifetime: as feeder_dataset_open_packed. Thread-safety: as
 * feeder_dataset_open_packed. */
FEEDER_API int feeder_dataset_open_shards(const char *pattern, const feeder_shard_options *opt,
                                          feeder_dataset **out, char *err, size_t errlen);

/* Records in each shard of a shards dataset: counts[s] for s < *n (at most
 * `cap` written; *n is the number of shards). FEEDER_EINVAL for another kind
 * of dataset. Thread-safe. */
FEEDER_API int feeder_dataset_shard_counts(const feeder_dataset *ds, uint64_t *counts,
                                           uint32_t cap, uint32_t *n);

/* What a user dataset's get callback is handed for one sample. */
typedef struct feeder_sample_ctx {
    uint64_t index;   /* the dataset index */
    uint64_t seed;    /* the loader's seed */
    uint64_t epoch;   /* the current epoch */
    uint32_t height;  /* output height */
    uint32_t width;   /* output width */
    uint32_t channels;/* output channels (FEEDER_OPT_CHANNELS: 3 or 1) */
    int layout;       /* FEEDER_LAYOUT_NHWC or FEEDER_LAYOUT_NCHW */
    int worker_id;    /* -1 in the calling thread (num_workers 0) */
    uint32_t reserved_[5];
} feeder_sample_ctx;

/* A dataset given as C callbacks. `get` writes sample ctx->index into `dst`
 * (dst_bytes = height * width * channels bytes in the loader's layout) and its
 * label into `*label`; it returns 0, or a negative value to fail the sample,
 * optionally leaving a message of at most errlen bytes in `err`. `get` runs in
 * worker processes (forked) or, with num_workers 0, in the calling thread; it
 * must not depend on state changed in the parent after the loader started. */
typedef struct feeder_dataset_callbacks {
    uint64_t (*len)(void *user);
    int (*get)(void *user, const feeder_sample_ctx *ctx, uint8_t *dst, size_t dst_bytes,
               int64_t *label, char *err, size_t errlen);
    /* Optional: called once per dataset destroy. */
    void (*destroy)(void *user);
} feeder_dataset_callbacks;

/* Wrap callbacks as a dataset. `cb` is copied; `user` is borrowed and handed
 * to every callback. Fails with FEEDER_EINVAL when len or get is missing. */
FEEDER_API int feeder_dataset_create(const feeder_dataset_callbacks *cb, void *user,
                                     feeder_dataset **out);

/* Release the caller's hold on a dataset. Accepts NULL. Loaders hold it too
 * (feeder_loader_create takes a reference): destroyed while a loader uses it,
 * the dataset lives on until its last loader is destroyed. Call it once per
 * dataset. Thread-safety: any thread, once. */
FEEDER_API void feeder_dataset_destroy(feeder_dataset *ds);

/* Number of samples. Thread-safe. */
FEEDER_API uint64_t feeder_dataset_size(const feeder_dataset *ds);
/* Path of sample `index` (folder and list datasets), NULL otherwise or out of
 * range. Borrowed from the dataset. Thread-safe. */
FEEDER_API const char *feeder_dataset_path(const feeder_dataset *ds, uint64_t index);
/* Label of sample `index`, or -1 (user datasets, out of range). Thread-safe. */
FEEDER_API int64_t feeder_dataset_label(const feeder_dataset *ds, uint64_t index);
/* Number of classes (folder datasets: sub-folders; list datasets: largest label + 1;
 * packed datasets: the stored class names, else largest label + 1). */
FEEDER_API uint64_t feeder_dataset_num_classes(const feeder_dataset *ds);

/* Files a folder dataset left out because their names end in none of the
 * image extensions it takes (.jpg, .jpeg, .jfif, .png, .webp, any case; the
 * format itself is read from the bytes). Writes the count to *count (may be
 * NULL) and a one-line summary to summary (len bytes, truncated to fit; may be
 * NULL), largest count first: "3 files left out: 2 .txt, 1 .gif", or
 * "0 files left out". Names without an extension show as "(no extension)";
 * past 16 distinct extensions the rest count as "other". Folders reached
 * again through a symbolic link (walked once, see feeder_dataset_open_folder)
 * end the summary: "0 files left out; 40 folders reached again through a
 * link, not walked again"; they are not in *count. Other dataset kinds
 * report 0. Returns 0, or FEEDER_EINVAL for a NULL dataset.
 * Lifetime: the figures are fixed when the dataset is opened.
 * Thread-safety: thread-safe. */
FEEDER_API int feeder_dataset_skipped(const feeder_dataset *ds, uint64_t *count, char *summary,
                                      size_t len);
/* Name of class `label` (folder datasets, packed files that store names), NULL
 * otherwise. Borrowed. */
FEEDER_API const char *feeder_dataset_class_name(const feeder_dataset *ds, uint64_t label);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_DATASET_H */
