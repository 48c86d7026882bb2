/*
 * feeder: a data loader for C training loops.
 *
 * feeder turns a dataset (an image folder, a list file, a packed file, tar
 * shards, or C callbacks) into a stream of collated batches. Worker processes
 * read files with io_uring, decode with libjpeg-turbo (PNG with libspng, WebP
 * with libwebp) and write every sample straight into its place in a batch
 * slot in shared memory; the calling thread borrows finished batches with
 * feeder_next() and gives them back with feeder_batch_release().
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *  - Every function that can fail returns an int: 0 is success, a positive
 *    value is a status (FEEDER_DONE), a negative value an error. OS and io_uring
 *    failures pass through as -errno; the library's own codes are the
 *    FEEDER_E* values below, far below any errno. feeder_strerror() names any
 *    of them; feeder_loader_errmsg() gives the detailed text of the last failure.
 *  - Handles are opaque. Create functions hand the handle back through an
 *    out-parameter and change it only on success; destroy functions accept NULL.
 *  - The library never prints, never aborts and installs no signal handler in
 *    the caller's process (its forked workers catch SIGBUS around reads of a
 *    packed file's mapping, to report a file cut under the loader).
 *
 * This header includes no CUDA, libjpeg or liburing header.
 */
#ifndef FEEDER_H
#define FEEDER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FEEDER_STATIC_DEFINE)
#define FEEDER_API
#elif defined(__GNUC__)
#define FEEDER_API __attribute__((visibility("default")))
#else
#define FEEDER_API
#endif

#define FEEDER_VERSION_MAJOR 0
#define FEEDER_VERSION_MINOR 1
#define FEEDER_VERSION_PATCH 0
#define FEEDER_VERSION_NUMBER \
    (FEEDER_VERSION_MAJOR * 10000 + FEEDER_VERSION_MINOR * 100 + FEEDER_VERSION_PATCH)

/* The library's version as FEEDER_VERSION_NUMBER computes it, so a program can
 * compare the header it was built with against the library it runs with.
 * Thread-safe. */
FEEDER_API unsigned feeder_version(void);
/* The version as "MAJOR.MINOR.PATCH". Static storage. Thread-safe. */
FEEDER_API const char *feeder_version_string(void);

/* ------------------------------------------------------------------------ */
/* Results                                                                   */
/* ------------------------------------------------------------------------ */

/* Positive statuses. */
#define FEEDER_OK 0
/* feeder_next(): the epoch has no more batches. */
#define FEEDER_DONE 1

/* Library error codes: X(name, value, text). Values are never renumbered. */
#define FEEDER_ERRNO_MAP(X)                                                        \
    X(EINVAL, -30001, "invalid argument")                                          \
    X(ERANGE, -30002, "option value out of range")                                 \
    X(ESTATE, -30003, "call not allowed in the loader's current state")            \
    X(EDATASET, -30004, "dataset is empty or malformed")                           \
    X(EDECODE, -30005, "image could not be decoded")                               \
    X(ETOOBIG, -30006, "image exceeds the pixel limit")                            \
    X(EWORKER, -30007, "worker process died")                                      \
    X(ETIMEDOUT, -30008, "timed out waiting for a batch")                          \
    X(ECALLBACK, -30009, "user callback failed")                                   \
    X(EBUSY, -30010, "every batch slot is borrowed; release a batch first")        \
    X(EUNSUPPORTED, -30011, "not supported by this build or machine")              \
    X(EPROTO, -30012, "internal protocol error between loader and worker")         \
    X(EOVERFLOW, -30013, "size computation overflows")                             \
    X(ECUDA, -30014, "a CUDA call failed")                                         \
    X(EFORKED, -30015, "loader used in a process forked from its creator")         \
    X(ESTATEBLOB, -30020, "saved loader state is corrupt or from another version") \
    X(EMISMATCH, -30021, "saved loader state does not match this loader")         \
    X(ELIMIT, -30022, "a system limit is too low for this configuration")          \
    X(EPATH, -30023, "a list-file path escapes the dataset root")                  \
    X(EFORMAT, -30030, "not a valid feeder packed file")                           \
    X(ECHECKSUM, -30031, "checksum mismatch")                                      \
    X(ESHAPE, -30032, "loader options do not match the packed file's samples")     \
    X(EREMOTE, -30040, "a transfer from a remote server failed")

typedef enum feeder_errno {
#define FEEDER__ERRENUM(name, value, text) FEEDER_##name = value,
    FEEDER_ERRNO_MAP(FEEDER__ERRENUM)
#undef FEEDER__ERRENUM
} feeder_errno;

/* Static text for any result: 0, a positive status, a FEEDER_E* code or a
 * -errno value. Never NULL. Thread-safe. */
FEEDER_API const char *feeder_strerror(int rc);
/* The symbolic name of a result ("FEEDER_EDECODE", "ENOENT", "FEEDER_DONE"),
 * or "unknown". Static storage. Thread-safe. */
FEEDER_API const char *feeder_err_name(int rc);

/* ------------------------------------------------------------------------ */
/* Deterministic randomness                                                  */
/* ------------------------------------------------------------------------ */

/* The counter-based generator behind every random choice feeder makes
 * (Philox4x32-10). Returns 64 random bits that depend only on
 * (seed, epoch, index, counter): the shuffled order uses index = position,
 * transforms use index = sample index, and each draw for one sample takes the
 * next counter. A user dataset that draws through this function keeps the
 * loader's guarantee that the same seed gives the same batches whatever the
 * number of workers. Counters from 2^63 up are reserved for the samplers
 * (which share the loader's seed); datasets and transforms use small ones.
 * Pure function. Thread-safe. */
FEEDER_API uint64_t feeder_random(uint64_t seed, uint64_t epoch, uint64_t index,
                                  uint64_t counter);
/* feeder_random() mapped to a double in [0, 1) with 53 random bits. */
FEEDER_API double feeder_random_uniform(uint64_t seed, uint64_t epoch, uint64_t index,
                                        uint64_t counter);

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

/* Open a packed file made by feeder-pack (format in docs/FORMAT.md): its
 * header, index, labels and class names are checked before anything is used,
 * so a truncated, corrupt or foreign file fails here with FEEDER_EFORMAT and a
 * message that names the file and says what is wrong (bad magic, unsupported
 * version, a section or record past the end of the file, a RAW record whose
 * size is not height x width x channels, ...); no read ever leaves the file,
 * whatever its header says. -errno when the file cannot be opened or mapped.
 * A shard (name-00003-of-00008.pack) opens as a dataset of its own records.
 * The file is mapped read-only and must not be truncated while the dataset is
 * open (as with any mapping). RAW records are copied straight into the batch
 * slot; a loader over a RAW file adopts the file's height, width and layout
 * unless they were set, and then they must match (FEEDER_ESHAPE at start).
 * JPEG records go through the loader's decode and transform. Labels and class
 * names come from the file. A FIELDS file (feeder_pack_fields) opens as a
 * fields dataset of its stored schema (feeder_dataset_field); its records
 * are checked (rows, size, crc32c) as they are loaded. `path` is copied; `err` (may be NULL) receives
 * the message, errlen bytes at most.
 * `path` may be an http://, https:// or s3:// URL (feeder_dataset_open_shards
 * says how S3 is reached): its header page is read first (its size and
 * ETag), then the whole file through the shard cache, which is mapped;
 * FEEDER_EREMOTE (the URL, the HTTP status or libcurl's text) when a
 * transfer fails after its retries, -ENOSPC or -EFBIG when the cache's disk
 * is full.
 * Lifetime: until feeder_dataset_destroy; loaders hold their own reference
 * (see feeder_dataset_destroy).
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

/* WebDataset tar shards, read in place. Each shard is a POSIX ustar tar
 * (GNU long names and pax 'path'/'size' records taken); its members are
 * grouped as WebDataset groups them: the key is the member's path up to the
 * FIRST dot of its base name, the rest is the extension ("dir/000123.jpg"
 * and "dir/000123.cls" are key "dir/000123", extensions "jpg" and "cls";
 * "a/x.seg.png" is key "a/x", extension "seg.png"), and consecutive members
 * with one key make one sample. Members whose base name starts with a dot
 * or holds none, folders, and extensions other than the ones below are
 * passed over. A sample's image is its first of .jpg, .jpeg, .png, .webp
 * (that order; any case), decoded by the loader's pipeline; its label is its
 * .cls member, an ASCII non-negative integer (blanks around it allowed).
 * Samples are in shard order, then member order; num_classes is the largest
 * label + 1. feeder_dataset_path() is NULL for them (a member is no file).
 *
 * The first open of a shard walks its headers (a 4 KiB pread at each
 * header, jumping over image data) and writes the result beside it as
 * <shard>.idx (docs/FORMAT.md) through a temporary file and a rename; later
 * opens use that file when it is whole and made for the shard's current size
 * and modification time, and walk again otherwise. A folder that is not
 * writable just gets no index file.
 *
 * Bad samples are found at open and fail when loaded, under the loader's
 * error policy (FAIL: the batch fails; SKIP, DROP as for files), with a
 * message naming the shard, the key and what is wrong: no image member, no
 * .cls member or one that is not an integer, an image member over 1 GiB, an
 * image or .cls member that is a link, device or FIFO, a member that runs
 * past the end of the shard (a cut tar), or a header with a bad checksum
 * after the first (the shard's members from there on are lost; the key
 * "(header at offset N)" stands for them). A file whose first header is no
 * tar header fails the open with FEEDER_EDATASET; -errno when a shard
 * cannot be opened or read; FEEDER_EDATASET when the shards hold no sample;
 * FEEDER_EINVAL for NULL arguments or count 0. The message names the shard.
 * Nothing is read past a shard's end. `paths` are copied. Shards must not
 * change while the dataset is open (a member's bytes are read by offset).
 * Lifetime: until feeder_dataset_destroy; loaders hold their own reference
 * (see feeder_dataset_destroy).
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

/* How a shards dataset reaches and keeps its shards. Zero-fill it (or pass
 * NULL) for the defaults. */
typedef struct feeder_shard_options {
    const char *cache_dir;    /* the shard cache; NULL: $FEEDER_CACHE_DIR, else
                                 $XDG_CACHE_HOME/feeder/shards, else
                                 $HOME/.cache/feeder/shards (copied) */
    uint64_t cache_max_bytes; /* evict least recently used shards past this;
                                 0: $FEEDER_CACHE_MAX_BYTES, else no limit */
    uint32_t max_resident;    /* remote shards one process keeps mapped; 0: all */
    uint32_t fetch_ahead;     /* shards a loader's fetch thread downloads ahead of
                                 the sampler; 0: none (workers fetch on demand) */
    uint64_t reserved_[8];    /* zero */
} feeder_shard_options;

/* Open the packed shards that `pattern` names, a brace range of local paths
 * or URLs ("https://host/d/s-{00000..00127}.pack", "s3://bucket/s-{0..7}.pack";
 * S3 through AWS_ENDPOINT_URL(_S3), the AWS_* credentials and region, or
 * ~/.aws/credentials and ~/.aws/config), as one packed dataset: sample i is
 * record i - first(s) of shard s, shards in the pattern's order. Every
 * shard's header, index, labels and class names are read at open (for a URL,
 * with range requests, many in flight: no shard is downloaded whole); each
 * URL's shard is downloaded whole into the shard cache when a process first
 * reads one of its records, or ahead of that by the loader's fetch thread
 * (fetch_ahead), and mapped from there. A shard that changed on the server
 * since open (size or ETag) fails the batch with FEEDER_ECHECKSUM naming the
 * URL; a transfer that still fails after its retries, FEEDER_EREMOTE naming
 * the URL and the HTTP status or libcurl's text. Every shard must hold the
 * same record kind and RAW shape as the first (FEEDER_EFORMAT naming both).
 * A loader over it reads the mappings: packed_read must be
 * FEEDER_PACKED_READ_MMAP (FEEDER_EUNSUPPORTED at start otherwise), and with
 * num_workers 0 the calling thread reads them too. `pattern` and `opt` are copied; `err` (may be NULL) gets
 * the message. feeder_dataset_packed_info describes the whole set
 * (file_bytes: the reserved address range).
 *
 * A pattern whose names all end in ".tar" opens a tar dataset instead (as
 * feeder_dataset_open_tar, with these options' cache_dir and
 * cache_max_bytes, and fetch_ahead as for packs; FEEDER_EINVAL naming both
 * when tars and packs are mixed). A tar shard's URL (feeder_dataset_open_tar takes URLs too) is
 * probed at open (its first 512 bytes: size and ETag) and indexed from, in
 * this order, the cache folder's index file for it, the server's
 * "<url>.idx" (feeder's index format, docs/FORMAT.md, made for a shard of
 * that size; any failure to fetch or parse it means there is none), or a
 * walk of the whole shard downloaded into the cache; the index is kept in
 * the cache folder for the next open. Workers read members from the
 * cache's copy, fetching it when it is not there; a copy that differs from
 * open's size or ETag is FEEDER_ECHECKSUM naming the URL.
 *
 * https servers are checked against the CA certificates in FEEDER_CA_FILE,
 * else CURL_CA_BUNDLE, else libcurl's default bundle; a certificate that
 * does not verify is FEEDER_EREMOTE naming the URL, without retries. With
 * FEEDER_REMOTE_OFFLINE=1 in the environment, URL shards open from the
 * shard cache alone (the size and ETag recorded at their download; a pack's
 * header and index, a tar's index, from the cached copy), without asking
 * the server: a shard with no whole copy there fails with -ENOENT naming
 * the URL. Unset, open always asks the server.
 *
 * Transfers are bounded. A response longer than expected (the range asked
 * for, the shard's size seen at open, FEEDER_REMOTE_MAX_INDEX_BYTES for a
 * server's tar index, default 64 MiB) is stopped there: FEEDER_EREMOTE naming
 * the URL and both sizes. An attempt slower than FEEDER_REMOTE_LOW_SPEED
 * bytes/s (16384) for FEEDER_REMOTE_LOW_SPEED_TIME_S (5) is cut and retried,
 * and no request runs past FEEDER_REMOTE_TIMEOUT_S (600) with its retries.
 * At most 10 redirects, to http or https only; a signed (S3) request is not
 * redirected to another scheme, host or port (FEEDER_EREMOTE naming it), so
 * its credentials reach no other host. A shard whose download failed after
 * its retries is not fetched again through this dataset in this process:
 * later batches fail at once with that failure. The cache folder (made 0700)
 * must belong to the user and not be writable by group or others: -EPERM
 * saying which otherwise; with no FEEDER_CACHE_DIR, XDG_CACHE_HOME or HOME,
 * FEEDER_EINVAL.
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

/* ------------------------------------------------------------------------ */
/* Samplers                                                                  */
/* ------------------------------------------------------------------------ */

/* A sampler yields, for each epoch, a sequence of dataset indices. Every
 * sampler is a pure function of its parameters and the epoch: feeder_sampler_fill
 * gives the same sequence every time it is asked. Create functions return
 * FEEDER_EINVAL for a bad argument (n == 0 for random and weighted samplers,
 * which have nothing to draw from; sequential, subset and distributed samplers
 * of 0 indices yield an empty order) and set *out only on success.
 * Lifetime: a sampler given to a loader is borrowed and must outlive it.
 * Thread-safety: built-in samplers are read-only after create, so len and
 * fill may be called from any thread; a user sampler is as safe as its
 * callbacks. */
typedef struct feeder_sampler feeder_sampler;

/* 0, 1, ..., n-1 every epoch. */
FEEDER_API int feeder_sampler_sequential(uint64_t n, feeder_sampler **out);

/* A random order of 0..n-1 keyed by (seed, epoch). Without replacement
 * (`replacement` 0) it is a permutation, num_samples 0 meaning n, a larger
 * num_samples concatenating further permutations (as PyTorch does); with
 * replacement, num_samples independent uniform draws (0 meaning n). */
FEEDER_API int feeder_sampler_random(uint64_t n, int replacement, uint64_t num_samples,
                                     uint64_t seed, feeder_sampler **out);

/* The given indices (copied), in that order (`shuffle` 0) or in a random
 * order keyed by (seed, epoch) (`shuffle` 1, PyTorch's SubsetRandomSampler). */
FEEDER_API int feeder_sampler_subset(const uint64_t *indices, uint64_t count, int shuffle,
                                     uint64_t seed, feeder_sampler **out);

/* Index i drawn with probability weights[i] / sum(weights) (copied; finite,
 * non-negative, not all zero; num_samples > 0). Note the argument order
 * differs from feeder_sampler_random. With replacement: num_samples independent
 * draws. Without: num_samples (<= number of non-zero weights) distinct
 * indices, in the order of the weighted random keys (Efraimidis-Spirakis). */
FEEDER_API int feeder_sampler_weighted(const double *weights, uint64_t n,
                                       uint64_t num_samples, int replacement,
                                       uint64_t seed, feeder_sampler **out);

/* This rank's share of 0..n-1, like PyTorch's DistributedSampler: the whole
 * order (shuffled by (seed, epoch) or not) is cut to a multiple of world_size
 * (`drop_last` 1) or padded by repeating it from its start (`drop_last` 0),
 * then rank r takes positions r, r + world, r + 2*world, ... Every rank gets
 * the same count, so the same number of batches. */
FEEDER_API int feeder_sampler_distributed(uint64_t n, uint32_t rank, uint32_t world_size,
                                          int shuffle, uint64_t seed, int drop_last,
                                          feeder_sampler **out);

/* Shard-aware order for a shards dataset (feeder_dataset_shard_counts gives
 * `counts`, nshards >= world_size): the shards are shuffled by (seed, epoch)
 * and dealt round-robin to the ranks (rank r takes shuffled shards r, r +
 * world_size, ...: disjoint sets); each rank draws its samples uniformly
 * from a sliding window holding the not-yet-drawn samples of at most
 * `window` of its shards (0: all of them, a full shuffle), a shard leaving
 * the window when its last sample is drawn and the next one entering, so a
 * process needs at most `window` shards resident at once. Every rank yields
 * the same number of samples, total / world_size (`drop_last` 1) or rounded
 * up (`drop_last` 0): a rank whose shards hold more stops early (the rest
 * of its stream is dropped for this epoch), one whose shards hold fewer
 * repeats its stream from its start, as DistributedSampler pads; shards of
 * equal size with nshards a multiple of world_size need neither. A pure
 * function of (counts, rank, world_size, window, seed, epoch): the same
 * order for any number of workers and after resume. `counts` copied.
 * FEEDER_EINVAL for a bad argument, FEEDER_EOVERFLOW, -ENOMEM; fill gives
 * FEEDER_EDATASET when every shard of the rank is empty. */
FEEDER_API int feeder_sampler_shards(const uint64_t *counts, uint32_t nshards, uint32_t rank,
                                     uint32_t world_size, uint32_t window, uint64_t seed,
                                     int drop_last, feeder_sampler **out);

/* A sampler given as callbacks: `len` gives the epoch's length, `fill` writes
 * that many indices. Both must be pure functions of (user, epoch) for the
 * loader's determinism to hold. `cb` copied, `user` borrowed. */
typedef struct feeder_sampler_callbacks {
    uint64_t (*len)(void *user, uint64_t epoch);
    int (*fill)(void *user, uint64_t epoch, uint64_t *out, uint64_t count);
    void (*destroy)(void *user);
} feeder_sampler_callbacks;
FEEDER_API int feeder_sampler_create(const feeder_sampler_callbacks *cb, void *user,
                                     feeder_sampler **out);

FEEDER_API void feeder_sampler_destroy(feeder_sampler *s);

/* Number of indices the sampler yields in `epoch`. */
FEEDER_API uint64_t feeder_sampler_len(const feeder_sampler *s, uint64_t epoch);
/* Write the epoch's indices to out[0 .. count), count == feeder_sampler_len().
 * Returns 0, FEEDER_EINVAL on a count mismatch, -ENOMEM (some samplers need
 * scratch memory of count entries), or a user callback's error (a positive
 * callback result becomes FEEDER_ECALLBACK). */
FEEDER_API int feeder_sampler_fill(const feeder_sampler *s, uint64_t epoch, uint64_t *out,
                                   uint64_t count);
/* The batch sampler: how many batches `len` indices make with batch_size and
 * drop_last (the last, shorter batch is kept unless drop_last). */
FEEDER_API uint64_t feeder_batch_count(uint64_t len, uint32_t batch_size, int drop_last);

/* ------------------------------------------------------------------------ */
/* Distributed jobs                                                          */
/* ------------------------------------------------------------------------ */

/* Where this process stands in a data-parallel job that an existing launcher
 * (mpirun, srun, torchrun) started, one process per GPU. Each rank runs its
 * own loader over its share of the dataset:
 *
 *     feeder_dist d = FEEDER_DIST_INIT;
 *     if (feeder_dist_from_env(&d, err, sizeof(err))) ...
 *     feeder_sampler_distributed(n, d.rank, d.world_size, 1, seed, 1, &s);
 *
 * and the GPU layer picks its device with feeder_dist_device(). A plain value:
 * copy it freely, it holds nothing to release. Thread-safety: as any struct. */
typedef struct feeder_dist {
    int32_t rank;       /* this process, 0 .. world_size-1 */
    int32_t world_size; /* processes in the job, >= 1 */
    int32_t local_rank; /* this process among those on its machine, 0 .. local_size-1 */
    int32_t local_size; /* processes on this machine, 1 .. world_size */
    int32_t device;     /* the GPU wanted, before wrapping onto the visible ones:
                           local_rank unless the caller preset it (see feeder_dist_device) */
    const char *source; /* where rank came from: "explicit" (caller or FEEDER_RANK), "OMPI",
                           "PMI", "torchrun", "SLURM", or "default"; static storage */
    uint32_t reserved_[8];
} feeder_dist;

/* The initialiser that leaves every field to feeder_dist_from_env(). */
#define FEEDER_DIST_INIT {-1, -1, -1, -1, -1, NULL, {0}}

/* Fill rank, world_size, local_rank, local_size, device and source.
 *
 * Each of the four numbers is the first of:
 *  1. the caller's value: a field preset to >= 0 is kept (start from
 *     FEEDER_DIST_INIT, whose -1 means "find it");
 *  2. FEEDER_RANK, FEEDER_WORLD_SIZE, FEEDER_LOCAL_RANK, FEEDER_LOCAL_SIZE;
 *  3. the first launcher found, in this order:
 *       "OMPI"     Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *                  OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE;
 *       "PMI"      MPICH and Intel MPI (Hydra): PMI_RANK, PMI_SIZE,
 *                  MPI_LOCALRANKID, MPI_LOCALNRANKS;
 *       "torchrun" RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE;
 *       "SLURM"    srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local
 *                  size from SLURM_NTASKS_PER_NODE, else this node's entry of
 *                  SLURM_TASKS_PER_NODE ("2(x3),1") picked by SLURM_NODEID;
 *     a launcher is found when its rank or its size variable is set, and then
 *     both must be. The innermost launcher comes first: mpirun or torchrun
 *     started by srun inherit the SLURM_* values of the one Slurm task that
 *     started them, so Slurm's come last; torchrun's names are generic, so
 *     they come after the MPI-specific ones;
 *  4. defaults: rank 0 of world size 1; a local rank and size nobody gave are
 *     the rank and the world size (all ranks on this machine).
 * device is the caller's preset value (>= 0), else local_rank.
 *
 * Values are decimal digits only. A value that is not a number, negative, above
 * INT32_MAX, a size of 0, rank >= world_size, local_rank >= local_size or
 * local_size > world_size fails with FEEDER_EINVAL and a message in `err` (may
 * be NULL) naming the variables and their values, e.g.
 *   feeder_dist_from_env: RANK="-1": negative
 *   feeder_dist_from_env: rank 4 (FEEDER_RANK="4") is not below the world size 4
 *   (OMPI_COMM_WORLD_SIZE="4")
 * A program that Slurm's batch script runs directly, not through srun, sees the
 * batch step's SLURM_PROCID 0 and the whole job's SLURM_NTASKS: start it with
 * srun, or set FEEDER_WORLD_SIZE=1.
 * On failure *d is left unchanged. Lifetime: `source` is static.
 * Thread-safety: reads the environment, so it must not race a setenv or
 * putenv in another thread; otherwise thread-safe. */
FEEDER_API int feeder_dist_from_env(feeder_dist *d, char *err, size_t errlen);

/* The device ordinal for a process that sees `device_count` GPUs: d->device
 * modulo device_count, so ranks of one machine spread over its GPUs, and a
 * launcher that gives each rank one GPU (CUDA_VISIBLE_DEVICES of a single
 * device) yields 0. -1 when d is NULL, d->device < 0 or device_count <= 0
 * (no GPU: the CPU path). The core never includes CUDA: the count comes from
 * cudaGetDeviceCount(), as feeder_dist_cuda_device() in feeder_cuda.h does,
 * and the result is the value for FEEDER_OPT_DEVICE. Pure function.
 * Thread-safe. */
FEEDER_API int feeder_dist_device(const feeder_dist *d, int device_count);

/* ------------------------------------------------------------------------ */
/* Loader                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct feeder_loader feeder_loader;

/* Options, set one by one before the loader starts (zstd-style). Values are
 * numbered and never renumbered. feeder_option_bounds() gives each range. */
typedef enum feeder_option {
    FEEDER_OPT_BATCH_SIZE = 1,         /* samples per batch; default 64 */
    FEEDER_OPT_SHUFFLE = 2,            /* 0/1; random order when no sampler given; default 0 */
    FEEDER_OPT_SEED = 3,               /* seed of every random choice; default: drawn from
                                          the system (feeder_loader_seed) */
    FEEDER_OPT_DROP_LAST = 4,          /* 0/1; drop the last short batch; default 0 */
    FEEDER_OPT_NUM_WORKERS = 5,        /* worker processes, 0 = calling thread; default 0 */
    FEEDER_OPT_PREFETCH_FACTOR = 6,    /* batches in flight per worker; default 2 */
    FEEDER_OPT_PERSISTENT_WORKERS = 7, /* 0/1; keep workers across epochs; default 0 */
    FEEDER_OPT_IN_ORDER = 8,           /* 0/1; deliver in sampler order; default 1 */
    FEEDER_OPT_TIMEOUT_MS = 9,         /* longest feeder_next wait, 0 = none; default 0 */
    FEEDER_OPT_PIPELINE = 10,          /* feeder_pipeline; default FEEDER_PIPELINE_EVAL */
    FEEDER_OPT_HEIGHT = 11,            /* output height; default 224 */
    FEEDER_OPT_WIDTH = 12,             /* output width; default 224 */
    FEEDER_OPT_RESIZE = 13,            /* eval: shorter side before the centre crop; default 256 */
    FEEDER_OPT_LAYOUT = 14,            /* feeder_layout; default FEEDER_LAYOUT_NHWC */
    FEEDER_OPT_DECODER = 15,           /* feeder_decoder; default FEEDER_DECODER_ROI */
    FEEDER_OPT_IO = 16,                /* feeder_io; default FEEDER_IO_AUTO */
    FEEDER_OPT_ERROR_POLICY = 17,      /* feeder_error_policy; default FEEDER_ON_ERROR_FAIL */
    FEEDER_OPT_MAX_PIXELS = 18,        /* largest width*height decoded; default 178956970 (PIL's) */
    FEEDER_OPT_POLL_MS = 19,           /* how often waits check worker health; default 100 */
    FEEDER_OPT_SPLIT = 20,             /* tasks per batch, 0 = automatic: tasks of ~16 samples,
                                          at least one per worker; default 0 */
    FEEDER_OPT_QUEUE_DEPTH = 21,       /* io_uring entries per worker; default 256 */
    FEEDER_OPT_BATCH_ROOM = 22,        /* batch datasets (feeder_dataset_create_batches): bytes
                                          of each slot's room for a batch; pages are backed only
                                          once written, so a large room costs only its address
                                          space; default 64 MiB */
    FEEDER_OPT_MAX_DECODE_BYTES = 23,  /* largest memory one image's decode may take, in bytes:
                                          the decoded pixels and the decoder's own buffers that
                                          grow with the image (a lossless WebP's whole ARGB
                                          copy, PNG rows, an alpha plane), reckoned from the
                                          header and refused (FEEDER_ETOOBIG) before anything
                                          is allocated; a WebP over it is first tried at the
                                          reduced scale the crop needs. 0 = no limit;
                                          default 256 MiB */
    FEEDER_OPT_MAX_SIDE = 24,          /* largest width or height decoded (FEEDER_ETOOBIG);
                                          0 = no limit; default 65535 (JPEG's own limit) */
    /* GPU delivery (feeder_cuda.h; needs a CUDA build and a device): */
    FEEDER_OPT_DEVICE = 30,            /* CUDA device of the batches, -1 = host batches; default -1 */
    FEEDER_OPT_PIN_MODE = 31,          /* feeder_pin_mode; default FEEDER_PIN_REGISTER */
    FEEDER_OPT_GPU_PREFETCH = 32,      /* device buffers in the ring, >= 2; default 2 */
    FEEDER_OPT_DTYPE = 33,             /* feeder_dtype of device batches; default FEEDER_DTYPE_UINT8 */
    FEEDER_OPT_PIN_THREADS = 34,       /* memcpy threads of FEEDER_PIN_COPY; default 4 */
    FEEDER_OPT_GPU_WARMUP = 35,        /* 0/1; GPU decoders: the workers decode every image while
                                          nvJPEG starts (0.5-1 s), so the first batch is not
                                          held back; every task begun after nvJPEG is ready goes
                                          to it; which batches that covers depends on timing
                                          (stats.cpu_shared counts them). 0: every batch waits for
                                          nvJPEG and the decoder of each image depends on its
                                          header alone; default 1 */
    FEEDER_OPT_AUGMENT_ON_DEVICE = 36, /* 0/1; with device batches, the augment pipeline's
                                          trailing colour jitter / random grayscale / Gaussian
                                          blur steps and its mixup / cutmix run as kernels on
                                          the device batch (same draws; bytes within +-1 of
                                          the host's, mixes equal), so a GPU decoder keeps
                                          decoding; default 0: device batches stay
                                          byte-equal to host batches */
    FEEDER_OPT_GPU_ROOM = 37,          /* GPU decoders: bytes of each batch slot per sample for
                                          the encoded files nvJPEG reads (a task's files share
                                          their room, so small ones leave it to large ones; a
                                          file that does not fit is decoded by the worker,
                                          FEEDER_ROUTE_ROOM). Less than a decoded sample means a
                                          sample. 0: the larger of a sample and 192 KiB, which
                                          holds ImageNet-sized files at quality 90+ (256 x 192
                                          KiB = 48 MiB a slot); default 0 */
    FEEDER_OPT_GPU_DECODE_THREADS = 38, /* GPU decoders: threads that each own an nvJPEG decoder
                                          (handle, state, stream) and take whole batches, so the
                                          JPEG engines decode one thread's batch while another
                                          parses its headers (one hardware call at a time); each
                                          thread past the first holds a device buffer more than
                                          GPU_PREFETCH. 1 to 4, 0 = automatic (2); default 0 */
    /* double-valued: per-channel mean and std for the float dtypes, in units
     * of the [0, 1] pixel range: out = (pixel / 255 - mean) / std.
     * Defaults are ImageNet's (0.485, 0.456, 0.406) and (0.229, 0.224, 0.225). */
    FEEDER_OPT_MEAN_R = 40,
    FEEDER_OPT_MEAN_G = 41,
    FEEDER_OPT_MEAN_B = 42,
    FEEDER_OPT_STD_R = 43,
    FEEDER_OPT_STD_G = 44,
    FEEDER_OPT_STD_B = 45,
    /* packed datasets (feeder_dataset_open_packed): */
    FEEDER_OPT_PACKED_READ = 50,       /* feeder_packed_read; default FEEDER_PACKED_READ_AUTO */
    FEEDER_OPT_VERIFY_CRC = 51,        /* 0/1; check every record's crc32c on read; default 0 */
    FEEDER_OPT_MAX_RESTARTS = 60,      /* worker deaths per epoch survived by starting the
                                          worker again and re-running its parts; default 0 */
    FEEDER_OPT_CHANNELS = 70,          /* output channels: 3 RGB, or 1 grayscale (see "Grayscale
                                          output" below); default 3 */
    /* double-valued, set with feeder_loader_set_double(): */
    FEEDER_OPT_SCALE_MIN = 100,        /* train: RandomResizedCrop area share; default 0.08 */
    FEEDER_OPT_SCALE_MAX = 101,        /* default 1.0 */
    FEEDER_OPT_RATIO_MIN = 102,        /* train: aspect ratio; default 3/4 */
    FEEDER_OPT_RATIO_MAX = 103,        /* default 4/3 */
    FEEDER_OPT_FLIP_PROB = 104         /* train: horizontal flip probability; default 0.5 */
} feeder_option;

/* Grayscale output (FEEDER_OPT_CHANNELS 1). Every sample is height x width
 * x 1 uint8 (batch->channels 1, sample_bytes height*width; NHWC and NCHW are
 * the same bytes). JPEG: libjpeg's own gray decode, the Y channel, which
 * skips the chroma work (libjpeg-turbo's, as Pillow's draft("L")); on a web
 * set it equals Pillow's convert("L") of the RGB decode for 99.8 % of pixels
 * and is within 1 for 99.96 % (docs/BENCHMARKS.md). CMYK/YCCK JPEGs, PNG and
 * WebP: the RGB decode, then Pillow's L = (19595 R + 38470 G + 7471 B +
 * 32768) >> 16 (ITU-R 601-2, as torchvision's Grayscale on a PIL image); a
 * gray PNG keeps its levels. The crop and resize are the RGB path's on one
 * channel. RAW packed files hold their channel count: the loader adopts it,
 * or fails at start with FEEDER_ESHAPE when CHANNELS was set otherwise.
 * The augment pipeline runs on the one channel as torchvision's ops run on
 * a 1-channel tensor (saturation, hue and grayscale leave it as it is;
 * contrast blends with the image's mean); the mixes mix it. Device batches:
 * uint8 as on the host; the float dtypes use MEAN_R and STD_R only. The GPU
 * decoders (NVJPEG, HYBRID) decode the Y plane on the GPU (nvJPEG's
 * NVJPEG_OUTPUT_Y, the same definition; bytes close to the CPU's, as for
 * RGB); what their workers keep decodes as above. Values other than 1 and 3
 * fail with FEEDER_ERANGE. */

typedef enum feeder_pipeline {
    FEEDER_PIPELINE_EVAL = 0,  /* resize the shorter side to RESIZE, centre crop HEIGHT x WIDTH */
    FEEDER_PIPELINE_TRAIN = 1, /* RandomResizedCrop to HEIGHT x WIDTH, random horizontal flip */
    FEEDER_PIPELINE_RESIZE = 2 /* resize the whole image to HEIGHT x WIDTH (no crop) */
} feeder_pipeline;

typedef enum feeder_layout { FEEDER_LAYOUT_NHWC = 0, FEEDER_LAYOUT_NCHW = 1 } feeder_layout;

typedef enum feeder_decoder {
    FEEDER_DECODER_TURBO = 0, /* TurboJPEG full decode, then crop and resize */
    FEEDER_DECODER_ROI = 1,   /* libjpeg: decode only the crop's rows and columns, DCT-scaled */
    /* The two GPU decoders need DEVICE >= 0, a usable GPU and a build with
     * nvJPEG; where any is missing the workers decode with ROI instead and
     * feeder_loader_decoder() says why. Output bytes differ slightly from the
     * CPU decoders' (another IDCT, another resampler). */
    FEEDER_DECODER_NVJPEG = 2, /* workers only read the files into the slot; the loader's
                                  thread decodes whole batches on the GPU with nvJPEG's
                                  batched API (the hardware JPEG engine where the GPU has
                                  one), then crops and resizes there into the device batch.
                                  Images nvJPEG cannot decode, and files larger than a
                                  sample, are decoded on the CPU (feeder_stats counts them) */
    FEEDER_DECODER_HYBRID = 3  /* workers decode a share of every batch on the CPU (ROI) and
                                  the GPU decodes the rest as NVJPEG does; the share follows
                                  the measured rates of both sides (feeder_stats) */
} feeder_decoder;

typedef enum feeder_io {
    FEEDER_IO_AUTO = 0,  /* io_uring, or pread when io_uring cannot be set up */
    FEEDER_IO_URING = 1, /* io_uring or fail */
    FEEDER_IO_PREAD = 2  /* open + pread */
} feeder_io;

/* How finished batches reach the GPU (DESIGN invariants 2 and 4). */
typedef enum feeder_pin_mode {
    FEEDER_PIN_NONE = 0,    /* copy straight from the shared slot (pageable, slower) */
    FEEDER_PIN_COPY = 1,    /* PIN_THREADS threads copy each slot into a ring of pinned buffers */
    FEEDER_PIN_REGISTER = 2 /* the slot memory is registered with the driver: no host copy;
                               falls back to FEEDER_PIN_COPY if registration fails */
} feeder_pin_mode;

/* Element type of device batches. The float types are normalised on the GPU
 * with MEAN_* and STD_*; workers always produce uint8. */
typedef enum feeder_dtype {
    FEEDER_DTYPE_UINT8 = 0,
    FEEDER_DTYPE_FLOAT16 = 1,
    FEEDER_DTYPE_BFLOAT16 = 2,
    FEEDER_DTYPE_FLOAT32 = 3
} feeder_dtype;
/* How a packed dataset's records reach the batch slot. A file cut or
 * rewritten in place while a loader reads it fails the batches that meet the
 * change (-EIO, naming the record and the file), never the process: with
 * num_workers 0 MMAP reads with pread (the calling thread never touches the
 * mapping), and a worker catches the fault of a read from the mapping
 * (SIGBUS, a handler in the worker process only). */
typedef enum feeder_packed_read {
    FEEDER_PACKED_READ_MMAP = 0,  /* copy from a shared read-only mapping of the file (workers;
                                     pread with num_workers 0) */
    FEEDER_PACKED_READ_URING = 1, /* read through the page cache with the worker's reader
                                     (io_uring, or pread as FEEDER_OPT_IO decides) */
    FEEDER_PACKED_READ_DIRECT = 2, /* the same with O_DIRECT: no page cache; aligned
                                     stretches land in the slot with no copy */
    FEEDER_PACKED_READ_AUTO = 3   /* the default: MMAP while the file fits in half the memory
                                     this process may use (MemAvailable, and the memory
                                     cgroup's room), so the page cache keeps it between
                                     epochs; DIRECT for a larger file, where the mapping and
                                     the page cache thrash (URING where the file system has no
                                     O_DIRECT); MMAP for shard sets. feeder_loader_io_backend
                                     says which and why */
} feeder_packed_read;

typedef enum feeder_error_policy {
    FEEDER_ON_ERROR_FAIL = 0, /* a bad sample fails its batch with a message */
    FEEDER_ON_ERROR_SKIP = 1, /* a bad sample is counted and replaced by a good sample of
                                 its class (the rule below; deterministic) */
    FEEDER_ON_ERROR_DROP = 2  /* a bad sample is counted and left out: its batch is shorter
                                 (feeder_batch.count; a batch of bad samples only has
                                 count 0); stats.dropped counts them. No sample is ever
                                 repeated */
} feeder_error_policy;
/* SKIP's replacement rule. A bad sample's candidates are the samples of its
 * label (folder, list and packed datasets; all samples for a user dataset,
 * whose labels are known only once loaded) that follow it in dataset order,
 * cyclically. They are loaded one after another, and the replacement is the
 * first candidate at which the good ones catch up with the bad ones counted
 * from the bad sample on (as a closing bracket matches an opening one): an
 * isolated bad sample takes the next good one, and a run of k bad samples
 * takes the k good ones after the run, one each. So a sample replaces at most
 * one bad sample of an epoch: it arrives at most twice (itself and one
 * replacement), never crosses into another class, and the choice depends
 * only on the data, never on timing or num_workers. When 16 candidates do not
 * settle it (a run of more than 8 bad samples), or the class has no other
 * sample, the batch fails with a message saying so. */

/* Bounds of an option; FEEDER_EINVAL for an unknown option. Thread-safe. */
FEEDER_API int feeder_option_bounds(feeder_option opt, double *min, double *max);
/* Name of an option ("batch_size"), or NULL. Thread-safe. */
FEEDER_API const char *feeder_option_name(feeder_option opt);

/* Create a loader over `ds`; the loader takes a reference to it, so the
 * caller may destroy `ds` before the loader (it goes with the last holder).
 * `sampler` is borrowed, must outlive the loader, and may be NULL: then SHUFFLE picks sequential or random order
 * over the whole dataset with SEED. Nothing starts until feeder_loader_start()
 * or the first feeder_next().
 * Processes: a loader belongs to the process that created it (its workers
 * are that process's children, its slots and channels shared with them).
 * In a process forked from that one, every call that drives the loader or
 * its batches (feeder_loader_start, feeder_next, feeder_batch_release,
 * feeder_batch_payload, feeder_batch_pad_field, feeder_loader_set_epoch,
 * the setters, state save and load, stats, skipped, trace flush) returns
 * FEEDER_EFORKED ("this loader belongs to process P; a loader cannot be used
 * in a process forked from the one that created it (make a new loader in the
 * child)") and touches nothing of the parent's; feeder_loader_worker_pid
 * gives -1; feeder_loader_destroy frees only the child's copies. Getters of
 * settings (feeder_loader_get, _seed, _errmsg, _io_backend, _decoder,
 * _gpu_status) still answer. Datasets may be used in the child, by a loader
 * made there. CUDA and PyTorch's DataLoader set the same rule. */
FEEDER_API int feeder_loader_create(feeder_dataset *ds, feeder_sampler *sampler,
                                    feeder_loader **out);

/* Set an integer option. FEEDER_ERANGE (message gives the bounds) when out of
 * range, FEEDER_ESTATE once the loader started, FEEDER_EINVAL for an unknown
 * or double-valued option. */
FEEDER_API int feeder_loader_set(feeder_loader *ld, feeder_option opt, int64_t value);
/* Set a double option (FEEDER_OPT_SCALE_MIN ...). Same errors. */
FEEDER_API int feeder_loader_set_double(feeder_loader *ld, feeder_option opt, double value);
/* Read an option's current value (either kind, as double). */
FEEDER_API int feeder_loader_get(const feeder_loader *ld, feeder_option opt, double *value);
/* The seed of the order and of every random transform. Unless
 * FEEDER_OPT_SEED was set, feeder_loader_create draws one from the system
 * (53 bits, so feeder_loader_get gives it exactly too), as PyTorch does:
 * two runs see different orders unless the program fixes the seed. The
 * seed is saved in the resume state, and a loader whose seed was not set
 * takes the saved one in feeder_loader_state_load. */
FEEDER_API int feeder_loader_seed(const feeder_loader *ld, uint64_t *seed);

/* Called in each worker process right after fork, before any task, with the
 * worker's id (0..num_workers-1); a non-zero return fails the start with
 * FEEDER_ECALLBACK. Not called with num_workers 0. `user` borrowed.
 * Descriptors: a worker of a folder, list or packed dataset closes every
 * descriptor above 2 it inherited except its own (so it keeps no other
 * loader's memory or files alive); a callback that needs a file opens it
 * itself. A user dataset's workers keep the process's descriptors (its
 * callbacks may use them) less the loaders' own. No worker inherits any
 * loader's slot mapping (MADV_DONTFORK). */
typedef int (*feeder_worker_init_fn)(void *user, int worker_id);
FEEDER_API int feeder_loader_set_worker_init(feeder_loader *ld, feeder_worker_init_fn fn,
                                             void *user);

/* Validate the options, allocate the batch slots (one memfd, sized once) and
 * start the workers (their pids exist once this returns; a worker's own
 * start-up, which runs worker_init, reports to the first feeder_next).
 * With the library's sampler, the workers begin the first epoch's batches
 * (the epoch set with feeder_loader_set_epoch, or the next) before this
 * returns; feeder_loader_set_epoch to another epoch, or a state loaded,
 * drops them. Optional: feeder_next() starts a loader that was not.
 * Returns -errno when memory, memfd or fork fail; the message says which. FEEDER_ELIMIT, before
 * anything is allocated, when the slots need more memory than the machine
 * (MemAvailable, the cgroup's limit) can give, or when RLIMIT_NOFILE is too
 * low for the workers' descriptors; the message names the limit, its value
 * and how much was asked. FEEDER_EOVERFLOW when batch x height x width x 3
 * x slots does not fit in a size_t. FEEDER_EFORKED in a process forked from
 * the loader's (feeder_loader_create). */
FEEDER_API int feeder_loader_start(feeder_loader *ld);

/* Choose the epoch the next feeder_next() begins (default: 0, then one after
 * the last). Also ends the current epoch early if one is running: its
 * undelivered batches are dropped and its borrowed batches stay valid until
 * released. */
FEEDER_API int feeder_loader_set_epoch(feeder_loader *ld, uint64_t epoch);

/* Stop the workers, reap them, unmap and close the shared memory. Batches not
 * yet released become invalid. Accepts NULL. Never blocks longer than it takes
 * workers to exit after SIGKILL.
 * Lifetime: the loader and every batch it lent are gone when this returns.
 * Using either afterwards (feeder_next, feeder_batch_release of a batch not
 * yet released, a second destroy) is undefined behaviour, as for any freed
 * handle: release batches first. Debug builds (compiled without NDEBUG, or
 * with the FEEDER_DEBUG CMake option) keep a record of live loaders and the
 * batches they lent and refuse those calls without touching the freed
 * memory: feeder_next and feeder_batch_release return FEEDER_ESTATE, a
 * second destroy does nothing, and feeder_loader_errmsg (of the destroyed
 * pointer, or NULL) gives the message ("feeder_batch_release: batch 0x...
 * was not lent by a live loader (its loader was destroyed?)"). Another
 * loader created meanwhile may reuse the freed addresses, which the record
 * cannot tell apart: it catches the common mistake, not every one.
 * In a process forked from the loader's, destroy frees that process's copy
 * only (memory, mappings, its copies of the descriptors): it never signals,
 * waits for or writes to the parent's workers, never changes a slot, and
 * makes no CUDA call (the GPU layer's host memory is left as it is), so the
 * parent's loader goes on untouched.
 * Thread-safety: as feeder_next; no other call on the loader may run. */
FEEDER_API void feeder_loader_destroy(feeder_loader *ld);

/* A batch lent by feeder_next(). Every pointer in it is valid until
 * feeder_batch_release(). */
typedef struct feeder_batch {
    uint8_t *data;           /* count samples, each height*width*channels uint8 */
    const int64_t *labels;   /* count labels */
    const uint64_t *indices; /* count dataset indices (after skip replacement) */
    uint32_t count;          /* samples in this batch (the last may be short) */
    uint32_t height, width, channels;
    int layout;              /* feeder_layout */
    uint32_t skipped;        /* samples replaced (FEEDER_ON_ERROR_SKIP) or left out
                                (FEEDER_ON_ERROR_DROP) in this batch */
    size_t sample_bytes;     /* height*width*channels */
    uint64_t epoch;          /* epoch this batch belongs to */
    uint64_t number;         /* batch number within the epoch, from 0 */
    /* Device batches (DEVICE >= 0 and the GPU path active, see
     * feeder_loader_gpu_status()); otherwise NULL, -1 and 0. `data` is NULL in
     * a device batch: its host slot was recycled as soon as the copy ended. */
    void *device_data;            /* count samples of dtype, in `layout`, on `device` */
    void *ready_event;            /* cudaEvent_t: device_data and device_labels are
                                     complete once it has passed (feeder_batch_wait) */
    const int64_t *device_labels; /* count labels on the device */
    int32_t dtype;                /* feeder_dtype of device_data (host batches: UINT8) */
    int32_t device;               /* CUDA device of device_data, or -1 */
    size_t device_bytes;          /* bytes of device_data holding the count samples */
    /* Mixed batches (feeder_augment_mixup, feeder_augment_cutmix): count
     * entries, one per sample, or NULL when the batch was not mixed.
     * feeder_batch_soft_labels turns them into soft targets. */
    const struct feeder_mix *mix;
    const void *fields_;          /* loader-private: the batch's fields (feeder_batch_field) */
    uint64_t reserved_[1];
    void *internal_;              /* loader-private */
} feeder_batch;

/* Lend the next batch. Returns 0 and sets *out; FEEDER_DONE when the epoch has
 * no more batches (the next call begins the next epoch); or an error:
 *  - FEEDER_ELIMIT (first call, when it starts the loader): see
 *    feeder_loader_start;
 *  - a sample error (FEEDER_EDECODE, FEEDER_ETOOBIG, -ENOENT, ...) fails only
 *    its batch: the message names the sample index, the path and the
 *    decoder's text, and the next call goes on with the next batch;
 *  - FEEDER_ETIMEDOUT: no batch within TIMEOUT_MS; the message names the
 *    batch waited for and the worker holding it (id, pid); nothing is lost,
 *    call again. With MAX_RESTARTS > 0 such a stalled worker is instead
 *    killed and started again like a dead one (it counts as a death of the
 *    epoch) and its batch redone, and the call waits TIMEOUT_MS again;
 *  - FEEDER_EWORKER: a worker died; the message names it, its pid and its
 *    signal or exit status; the epoch is over and the next call restarts the
 *    workers and begins the next epoch. With MAX_RESTARTS > 0 a death is
 *    survived instead (the worker is started again and its parts re-run, so
 *    no sample is lost and the batch is the same bytes) until the epoch has
 *    seen more than MAX_RESTARTS deaths; the message then lists every death
 *    of the epoch (worker id, pid, signal or exit status, batch);
 *  - a worker that cannot start (mapping the slots fails, its reader or
 *    decoder cannot be made: -errno; worker_init returns non-zero:
 *    FEEDER_ECALLBACK): the message is the worker's reason (worker id, pid);
 *    such workers are not started again, neither by MAX_RESTARTS nor at the
 *    next epoch: every later call returns the same error;
 *  - FEEDER_EBUSY: every slot is borrowed;
 *  - FEEDER_EFORKED: called in a process forked from the one that created
 *    the loader (feeder_loader_create); nothing of the loader changes.
 * Thread-safety: a loader is used by one thread at a time. */
FEEDER_API int feeder_next(feeder_loader *ld, feeder_batch **out);

/* Give a batch back so its slot can be refilled. Batches may be released in
 * any order. For a device batch, `stream` is the cudaStream_t whose work so far
 * must finish before the device buffer is written again (feeder records an
 * event on it and the copy stream waits on that event, so release never
 * blocks); NULL means the legacy default stream. Ignored for host batches.
 * Returns 0, or FEEDER_EINVAL for NULL or a batch that is not lent (released
 * twice: the loader's message names it), or FEEDER_EFORKED in a process
 * forked from the loader's (the batch stays lent in the parent).
 * Lifetime: the batch's loader must still exist; releasing a batch after
 * feeder_loader_destroy is undefined (debug builds: FEEDER_ESTATE, see
 * feeder_loader_destroy).
 * Thread-safety: as feeder_next (the loader's thread). */
FEEDER_API int feeder_batch_release(feeder_batch *batch, void *stream);

/* The detailed message of the loader's last failure: every call on the loader
 * that can fail clears it when it succeeds, so a message is always the last
 * call's ("" after a success). Borrowed until the next call on the loader.
 * NULL gives "" (debug builds: the message of this thread's last call refused
 * for a destroyed loader or batch, as does the destroyed pointer itself; see
 * feeder_loader_destroy). */
FEEDER_API const char *feeder_loader_errmsg(const feeder_loader *ld);

/* Which read path the workers use: "io_uring" or "pread" (packed files:
 * "mmap", or either of those, with "+O_DIRECT" for FEEDER_PACKED_READ_DIRECT),
 * and in *reason (may be NULL) why pread was chosen ("forced by option", or
 * io_uring's setup error), or "". Valid after start. Borrowed. */
FEEDER_API const char *feeder_loader_io_backend(const feeder_loader *ld, const char **reason);

/* The decoder the loader runs (feeder_decoder), which differs from
 * FEEDER_OPT_DECODER when a GPU decoder was asked for and cannot run here;
 * then *reason (may be NULL) says why ("device = -1", "built without nvJPEG",
 * "nvjpegCreateEx: ..."), else "". Before start: the option's value. Borrowed.
 * Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_decoder(const feeder_loader *ld, const char **reason);

/* Pid of worker `id`, or -1 (not started, no such worker, num_workers 0,
 * between epochs without persistent workers, workers that could not start,
 * a process forked from the loader's). Workers exist once
 * feeder_loader_start returns. For monitoring and tests. */
FEEDER_API int feeder_loader_worker_pid(const feeder_loader *ld, int id);

/* ------------------------------------------------------------------------ */
/* Saving and resuming the position in an epoch                              */
/* ------------------------------------------------------------------------ */

/* Save where the loader stands: the epoch the next feeder_next() works in and
 * which of its batches were already delivered (handed out by feeder_next(),
 * as a batch or as a sample error; batches being loaded, or loaded and not
 * yet handed out, are not delivered). The blob is little-endian and
 * versioned, with a CRC32C; it also records every setting that changes a
 * batch's bytes (seed, batch size, drop_last, dataset size, the epoch's
 * sampler length and a hash of its order, pipeline, output size and layout,
 * decoder, crop ranges, error policy, pixel limit) so that loading it into a
 * loader that would produce other batches is refused. num_workers,
 * prefetch_factor, split, io, timeouts and in_order may differ.
 * With buf NULL (or cap too small) *len gets the size needed and the call
 * returns 0 (NULL buf) or -ENOSPC (too small). The size is
 * feeder_loader_state_size() and stays the same for the whole epoch.
 * May be called at any time, before start too (epoch 0, or the epoch set by
 * feeder_loader_set_epoch, with nothing delivered); it fills the epoch's
 * order with the sampler when the loader is not in an epoch.
 * Returns 0, -ENOSPC, -ENOMEM, FEEDER_EINVAL, or the sampler's error.
 * Thread-safety: as feeder_next (one thread at a time per loader). */
FEEDER_API int feeder_loader_state_save(const feeder_loader *ld, void *buf, size_t cap,
                                        size_t *len);

/* The size feeder_loader_state_save() needs now, or 0 on error. */
FEEDER_API size_t feeder_loader_state_size(const feeder_loader *ld);

/* Resume from a saved blob: the next feeder_next() continues the saved epoch
 * and delivers exactly the batches that had not been delivered, each with the
 * same samples, labels, indices and bytes (the same random crops and flips)
 * as the saved loader would have delivered, whatever num_workers. With
 * in_order 1 they come in batch order (feeder_batch.number continues from the
 * saved count); with in_order 0 the promise is the set: every undelivered
 * batch exactly once, byte-identical, in completion order. Then the epochs go
 * on as usual. Only before the loader starts (FEEDER_ESTATE after);
 * `buf` is copied. Options may still be set afterwards; the blob is checked
 * again at start. feeder_loader_set_epoch() after this call drops the resume.
 * Errors: FEEDER_ESTATEBLOB (bad magic, version, length or CRC),
 * FEEDER_EMISMATCH with "state blob does not match the loader: FIELD is X in
 * the blob, Y in the loader" in feeder_loader_errmsg, or the sampler's error.
 * The blob also holds the dataset's fingerprint (each sample's file name, its
 * folder's name and its label, in order; for a packed file its size and
 * index; for tar shards each shard's file name and size and each sample's key
 * and label): a file renamed, added, removed or relabelled since the save is
 * refused with "the dataset's files differ", even when the count is the same.
 * The root is not part of it (a dataset moved elsewhere resumes), nor are the
 * files' bytes. A blob without a fingerprint (version 1, from before it, or
 * one whose field is 0) loads only into a loader whose dataset has none
 * either (user datasets); into one over files it is refused with "the blob
 * records no dataset fingerprint". From version 3
 * the blob holds FEEDER_OPT_CHANNELS too ("channels is 1 in the blob, 3 in
 * the loader"); version 2 blobs load unchecked on it.
 * Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_state_load(feeder_loader *ld, const void *buf, size_t len);

/* Why a GPU decoder's worker decoded an image on the CPU (feeder_stats.cpu_routed). */
typedef enum feeder_route {
    FEEDER_ROUTE_PROGRESSIVE = 0,
    FEEDER_ROUTE_CMYK = 1,
    FEEDER_ROUTE_SUBSAMPLING = 2,
    FEEDER_ROUTE_SIZE = 3,        /* over 2 MP or the pixel limit (the CPU's DCT scaling wins) */
    FEEDER_ROUTE_CORRUPT = 4,
    FEEDER_ROUTE_OTHER = 5,
    FEEDER_ROUTE_ROOM = 6,        /* its task's room in the slot was full (FEEDER_OPT_GPU_ROOM) */
    FEEDER_ROUTE_FORMAT = 7,      /* not a JPEG: another format the CPU decodes (PNG, WebP) */
    FEEDER_ROUTES = 8
} feeder_route;

/* A snapshot of the loader's counters (C: counter, monotonic) and levels (L).
 * Times are summed over workers. Room reserved to grow. */
typedef struct feeder_stats {
    uint64_t batches;          /* C: batches delivered */
    uint64_t samples;          /* C: samples delivered */
    uint64_t skipped;          /* C: samples replaced under the skip policy */
    uint64_t failed_batches;   /* C: batches failed by a sample error */
    uint64_t bytes_read;       /* C: bytes read from files */
    uint64_t read_ns;          /* C: ns in reading (workers, summed) */
    uint64_t decode_ns;        /* C: ns in decoding */
    uint64_t transform_ns;     /* C: ns in crop/resize/flip/layout */
    uint64_t wait_ns;          /* C: ns feeder_next blocked waiting (consumer stall) */
    uint64_t first_batch_ns;   /* L: ns from the start of the last epoch to its first batch */
    uint64_t shm_bytes;        /* L: bytes of shared batch slots */
    uint64_t slots;            /* L: number of batch slots */
    uint64_t worker_restarts;  /* C: workers started again after a death */
    uint64_t pin_ns;           /* C: ns the pin threads spent copying slots to pinned memory */
    uint64_t h2d_ns;           /* C: ns of host-to-device copies, timed on the GPU */
    uint64_t h2d_bytes;        /* C: bytes copied host to device (data and labels) */
    uint64_t gpu_batches;      /* C: batches delivered on the device */
    uint64_t pinned_bytes;     /* L: bytes of pinned buffers (PIN_COPY) or registered slots */
    uint64_t device_bytes;     /* L: bytes of device memory held by the loader */
    uint64_t gpu_decoded;      /* C: images decoded on the GPU (NVJPEG, HYBRID) */
    uint64_t gpu_fallback;     /* C: images sent to the GPU that nvJPEG refused, decoded on
                                  the CPU by the loader's thread instead (cpu_routed counts
                                  those the workers kept by their header) */
    uint64_t gpu_decode_ns;    /* C: ns of GPU decode + resize, timed on the GPU */
    uint64_t hybrid_cpu_permille; /* L: HYBRID: share of each batch the workers decode, in 1/1000 */
    /* C: images of GPU-decoded batches that the workers decoded on the CPU
     * because their header sends them there, by reason (FEEDER_ROUTE_*):
     * progressive, CMYK/YCCK, a sampling the JPEG engine refuses, too large,
     * unreadable header, other (12-bit, arithmetic, lossless), no room left
     * in the slot for the file, not a JPEG (PNG, WebP). */
    uint64_t cpu_routed[FEEDER_ROUTES];
    uint64_t cpu_shared;       /* C: images of GPU-decoded batches the workers decoded as their
                                  share: HYBRID's, and every image while nvJPEG is starting */
    uint64_t dropped;          /* C: samples left out under FEEDER_ON_ERROR_DROP */
    uint64_t batches_ahead;    /* C: batches of an epoch begun before it was asked for (persistent
                                  workers fill free slots with the next epoch's first batches) */
} feeder_stats;

/* Memory the loader asks for, when the user wants to own it (e.g. a caching
 * allocator). alloc returns NULL on failure; free accepts what alloc gave. */
typedef struct feeder_allocator {
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *ptr);
    void *user;
} feeder_allocator;

/* Use `device` (device memory: the batch ring) and `pinned` (page-locked
 * host memory: the PIN_COPY ring) instead of cudaMalloc / cudaHostAlloc.
 * Either may be NULL for the default. Both structs are copied; `user` is
 * borrowed. Before start, else FEEDER_ESTATE. Memory from `pinned` must be
 * page-locked and mapped for the loader's device. */
FEEDER_API int feeder_loader_set_allocators(feeder_loader *ld, const feeder_allocator *device,
                                            const feeder_allocator *pinned);

/* Whether batches are delivered on the device: 1 yes, 0 host batches. In
 * *reason (may be NULL), why not ("device = -1", "... feeder's GPU plugin did
 * not load (libfeeder_cuda.so.0: cannot open shared object file ...)", "no
 * CUDA device: ...") or, when 1, how ("pin register", or why the pin mode
 * fell back). Valid after start; a GPU that cannot be used is not an error:
 * the loader then delivers host batches and says why here. Borrowed. */
FEEDER_API int feeder_loader_gpu_status(const feeder_loader *ld, const char **reason);

/* Fill `out` with the loader's counters. May be called from any thread. */
FEEDER_API int feeder_loader_stats(const feeder_loader *ld, feeder_stats *out);

/* How many bad samples feeder_loader_skipped names at most. */
#define FEEDER_SKIPPED_MAX 64

/* The bad samples the error policy has set aside since the loader was
 * created (replaced under FEEDER_ON_ERROR_SKIP, left out under
 * FEEDER_ON_ERROR_DROP): the first FEEDER_SKIPPED_MAX distinct ones, in the
 * order the loader learned of them, each named once however many epochs
 * met it. Writes up to `cap` of them: each one's dataset index into
 * indices[k] and its file's path into paths[k] (NULL where the dataset has
 * no path per sample: packed files, tar shards, user datasets; the index
 * still names it). Either array may be NULL; both hold `cap` entries. *total
 * (may be NULL) gets every bad sample counted so far, repeats included
 * (stats.skipped + stats.dropped), so a total above the count returned
 * means there were more than were named. Returns the number of entries
 * written (0 under FEEDER_ON_ERROR_FAIL), or FEEDER_EINVAL for a NULL
 * loader, or a non-zero cap with both arrays NULL.
 * Lifetime: the paths are borrowed from the dataset and valid while it is.
 * Thread-safety: may be called from any thread, as feeder_loader_stats. */
FEEDER_API int feeder_loader_skipped(const feeder_loader *ld, uint64_t *indices,
                                     const char **paths, size_t cap, uint64_t *total);

/* ------------------------------------------------------------------------ */
/* Timeline trace                                                            */
/* ------------------------------------------------------------------------ */

/* Record a timeline of the loader and write it to `path` as Chrome Trace Event
 * JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open: one track
 * per worker (read, decode, transform, callback spans, each with its epoch,
 * batch and sample index), the consumer (each feeder_next call, and each
 * batch from feeder_next to feeder_batch_release), and with device batches
 * each pin thread (pin copy) and the copy stream (H2D, normalise; GPU times
 * mapped to the host clock). Times are CLOCK_MONOTONIC. Recording starts at
 * feeder_loader_start; the file is written by feeder_loader_trace_flush and
 * at feeder_loader_destroy (a failure there is not reported: flush first to
 * see it). Memory is bounded: each track keeps its first 262,144 spans and
 * counts the rest in the file's metadata ("feeder_dropped_events").
 * Start writes an empty trace to check the path and fails with its -errno
 * (the message names the file) when it cannot. NULL turns tracing off.
 * Before start only (FEEDER_ESTATE after). `path` is copied.
 * Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_set_trace(feeder_loader *ld, const char *path);

/* Write everything recorded so far to the trace file: PATH.tmp first, then
 * renamed over PATH, so a reader never sees a partial file. Returns 0,
 * FEEDER_ESTATE (no trace set, or the loader has not started), or -errno with
 * feeder_loader_errmsg naming the file and the call that failed. Each flush
 * writes a superset of the one before.
 * Thread-safety: as feeder_next (the loader's threads keep recording
 * meanwhile). */
FEEDER_API int feeder_loader_trace_flush(feeder_loader *ld);

/* ------------------------------------------------------------------------ */
/* Augmentation                                                              */
/* ------------------------------------------------------------------------ */

/* A pipeline of augmentations the user composes, applied by the workers to
 * every sample after the geometric step of FEEDER_OPT_PIPELINE (crop and
 * resize stay as they are: EVAL, TRAIN and RESIZE are presets), on the uint8
 * HEIGHT x WIDTH x 3 sample in its batch slot, in FEEDER_OPT_LAYOUT. Steps
 * run in the order they were added. Each op follows torchvision's
 * definition on uint8 tensors (transforms.functional of torchvision 0.14:
 * the same blend formulas, the same truncation and rounding), and its
 * random parameters are drawn as torchvision draws them, from
 * feeder_random(seed, epoch, index, counter) with the step's own counters:
 * a sample's augmentation depends only on (seed, epoch, index), never on the
 * worker count or on resume. Batch-level steps (mixup, cutmix) draw from
 * (seed, epoch, batch number).
 *
 * Build one with feeder_augment_create, add steps with the
 * feeder_augment_<op> calls (each validates its parameters: FEEDER_ERANGE
 * with the bounds in feeder_augment_errmsg; FEEDER_ERANGE too past
 * FEEDER_AUGMENT_MAX_STEPS steps), and attach it with
 * feeder_loader_set_augment, which copies it.
 * Thread-safety: a feeder_augment is used by one thread at a time;
 * feeder_augment_apply only reads it. */
typedef struct feeder_augment feeder_augment;

#define FEEDER_AUGMENT_MAX_STEPS 16

/* Interpolation of the geometric ops, as torchvision's InterpolationMode. */
typedef enum feeder_interp { FEEDER_INTERP_NEAREST = 0, FEEDER_INTERP_BILINEAR = 1 } feeder_interp;

/* The fill of pixels a geometric op brings in from outside the image:
 * FEEDER_FILL_NONE is torchvision's fill=None (zeros, no mask channel);
 * 0..255 is fill=[v, v, v] (torchvision's mask blend at the border). */
#define FEEDER_FILL_NONE (-1)

/* Create an empty pipeline. 0, FEEDER_EINVAL (out NULL) or -ENOMEM. */
FEEDER_API int feeder_augment_create(feeder_augment **out);
/* Accepts NULL. */
FEEDER_API void feeder_augment_destroy(feeder_augment *aug);
/* The last failed call's message ("" after a success). Borrowed until the
 * next call on `aug`. */
FEEDER_API const char *feeder_augment_errmsg(const feeder_augment *aug);

/* RandomHorizontalFlip (vertical 0) or RandomVerticalFlip (1) with
 * probability p in [0, 1]. */
FEEDER_API int feeder_augment_flip(feeder_augment *aug, int vertical, double p);
/* RandomRotation(degrees=(-max_degrees, max_degrees)): max_degrees in
 * [0, 180]; interp a feeder_interp; fill FEEDER_FILL_NONE or 0..255. */
FEEDER_API int feeder_augment_rotate(feeder_augment *aug, double max_degrees, int interp,
                                     int fill);

/* RandomAffine's parameters (torchvision's names). */
typedef struct feeder_affine {
    double degrees;        /* angle uniform in [-degrees, degrees]; [0, 180] */
    double translate[2];   /* max shift as a share of width, height; [0, 1] */
    double scale[2];       /* scale uniform in [scale[0], scale[1]]; 0 < min <= max <= 10 */
    double shear[4];       /* x shear in [shear[0], shear[1]], y in [shear[2], shear[3]]
                              (degrees, each in [-89, 89]) */
    int interp;            /* feeder_interp */
    int fill;              /* FEEDER_FILL_NONE or 0..255 */
} feeder_affine;
/* RandomAffine. `a` is copied. */
FEEDER_API int feeder_augment_affine(feeder_augment *aug, const feeder_affine *a);

/* ColorJitter(brightness, contrast, saturation, hue): factors uniform in
 * [max(0, 1 - b), 1 + b] (b, c, s in [0, 100]) and hue shift in [-h, h]
 * (h in [0, 0.5]); 0 leaves that adjustment out; the four run in a random
 * order, as torchvision's. */
FEEDER_API int feeder_augment_color_jitter(feeder_augment *aug, double brightness,
                                           double contrast, double saturation, double hue);
/* RandomGrayscale(p): ITU-R 601 luma (0.2989 R + 0.587 G + 0.114 B,
 * truncated) written to the three channels. */
FEEDER_API int feeder_augment_grayscale(feeder_augment *aug, double p);
/* GaussianBlur(kernel_size, sigma=(sigma_min, sigma_max)): kernel_size odd
 * in [1, 63]; 0 < sigma_min <= sigma_max <= 100; reflect padding. */
FEEDER_API int feeder_augment_blur(feeder_augment *aug, uint32_t kernel_size, double sigma_min,
                                   double sigma_max);
/* RandomErasing(p, scale, ratio, value): p in [0, 1]; 0 < scale_min <=
 * scale_max < 1; 0 < ratio_min <= ratio_max <= 100; value 0..255, or -1 for
 * random bytes (torchvision's value='random' draws normal floats, which
 * have no uint8 meaning). */
FEEDER_API int feeder_augment_erase(feeder_augment *aug, double p, double scale_min,
                                    double scale_max, double ratio_min, double ratio_max,
                                    int value);
/* TrivialAugmentWide(num_magnitude_bins): bins in [2, 256]. */
FEEDER_API int feeder_augment_trivial(feeder_augment *aug, uint32_t num_bins, int interp,
                                      int fill);
/* RandAugment(num_ops, magnitude, num_magnitude_bins): num_ops in [1, 16],
 * magnitude in [0, num_bins - 1], num_bins in [2, 256]. */
FEEDER_API int feeder_augment_randaugment(feeder_augment *aug, uint32_t num_ops,
                                          uint32_t magnitude, uint32_t num_bins, int interp,
                                          int fill);
/* Batch-level MixUp and CutMix, as torchvision's reference scripts'
 * RandomMixup / RandomCutmix: with probability p (in [0, 1]) per batch,
 * lambda ~ Beta(alpha, alpha) (alpha in (0, 100]) and each sample mixed
 * with the one before it in the batch (the batch rolled by one). With both
 * set, each batch picks one of the two with equal chance. The images are
 * mixed in the slot; the labels stay the hard ones and batch->mix gives each
 * sample's partner and lambda (feeder_batch_soft_labels). One call each. */
FEEDER_API int feeder_augment_mixup(feeder_augment *aug, double alpha, double p);
FEEDER_API int feeder_augment_cutmix(feeder_augment *aug, double alpha, double p);

/* How a mixed sample was made: lambda of its own image and label, 1 -
 * lambda of those of sample `partner` (a position in the same batch). */
typedef struct feeder_mix {
    uint32_t partner;
    float lambda;
} feeder_mix;

/* Soft targets of a batch (host or device: labels and mix are host
 * memory in both): out[i * num_classes + c], count x
 * num_classes floats, each row summing to 1: lambda on the sample's label
 * and 1 - lambda on its partner's (a one-hot row when the batch was not
 * mixed). FEEDER_ERANGE when a label is not below num_classes. `out` is
 * the caller's. Thread-safe. */
FEEDER_API int feeder_batch_soft_labels(const feeder_batch *b, uint32_t num_classes,
                                        float *out);

/* Attach `aug` (copied; NULL removes the pipeline) to the loader. Before
 * start only: FEEDER_ESTATE after. Per-sample steps need pixels in the
 * slot: with FEEDER_DECODER_NVJPEG / HYBRID the loader then decodes on the
 * CPU (feeder_loader_decoder says why), and packed RAW records are copied
 * through the slots rather than read straight to the device. With device
 * batches and FEEDER_OPT_AUGMENT_ON_DEVICE 1, the plan's trailing colour
 * jitter / random grayscale / Gaussian blur steps and its mixup / cutmix
 * run as kernels on the device batch instead, with the same draws (bytes
 * within +-1 of the host's, equal b->mix); a GPU decoder keeps decoding
 * when every per-sample step runs there. Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_set_augment(feeder_loader *ld, const feeder_augment *aug);

/* Apply the per-sample steps of `aug` to one image (width x height x 3
 * uint8 in `layout`; gray ones: feeder_augment_apply_channels) in place, as a worker would for sample `index` of
 * `epoch` with `seed`. For tests and for users who augment outside a
 * loader. 0, FEEDER_EINVAL, or -ENOMEM. Thread-safe. */
FEEDER_API int feeder_augment_apply(const feeder_augment *aug, uint8_t *img, uint32_t width,
                                    uint32_t height, int layout, uint64_t seed, uint64_t epoch,
                                    uint64_t index);
/* The same for an image of `channels` 3 (as feeder_augment_apply) or 1
 * (width x height gray bytes; NHWC and NCHW are the same bytes): every op
 * runs on the one plane as torchvision's does on a 1-channel tensor (the
 * flips, rotate, affine, brightness, contrast against the image's own
 * mean, blur, sharpness, erasing, posterize, solarize, autocontrast,
 * equalize, the TrivialAugment and RandAugment ops); saturation, hue and
 * grayscale leave it as it is. A gray loader (FEEDER_OPT_CHANNELS 1) gives
 * the same bytes. FEEDER_EINVAL for channels other than 1 and 3. */
FEEDER_API int feeder_augment_apply_channels(const feeder_augment *aug, uint8_t *img,
                                             uint32_t width, uint32_t height, uint32_t channels,
                                             int layout, uint64_t seed, uint64_t epoch,
                                             uint64_t index);

/* ------------------------------------------------------------------------ */
/* Fields: samples beyond one image and one label                            */
/* ------------------------------------------------------------------------ */

/* A dataset may declare its samples as named fields (a token sequence, an
 * image and its boxes, an image and its mask). Each field has an element
 * type and a shape of up to FEEDER_FIELD_MAX_DIMS dimensions whose leading
 * one is fixed or variable up to a maximum. A batch holds each field as one
 * tensor in the shared-memory slot; a variable field is either padded to the
 * batch's longest sample (with a lengths tensor) or ragged (the samples'
 * values one after another, with offsets). Folder, list and packed datasets
 * are the built-in schema of two fixed fields, "image" (uint8 [H, W, 3], or
 * [3, H, W] in NCHW) and "label" (int64, a scalar per sample), laid out in
 * the slot exactly as before. */

#define FEEDER_FIELD_MAX_DIMS 4
/* Longest field name, without its NUL. */
#define FEEDER_FIELD_NAME_MAX 31
/* Most fields in a schema. */
#define FEEDER_FIELDS_MAX 16

/* Element types of fields. Numbered, never renumbered. */
typedef enum feeder_elem {
    FEEDER_ELEM_U8 = 0,
    FEEDER_ELEM_I16 = 1,
    FEEDER_ELEM_I32 = 2,
    FEEDER_ELEM_I64 = 3,
    FEEDER_ELEM_F16 = 4,  /* IEEE binary16, as stored bits */
    FEEDER_ELEM_BF16 = 5, /* bfloat16, as stored bits */
    FEEDER_ELEM_F32 = 6
} feeder_elem;

/* How a field's samples make one batch tensor. */
typedef enum feeder_field_batching {
    FEEDER_FIELD_FIXED = 0,  /* every sample has shape[0] rows: [count, shape...] */
    FEEDER_FIELD_PADDED = 1, /* up to shape[0] rows: [count, longest, shape[1:]...], rows past
                                a sample's length are zero; lengths: count int64 */
    FEEDER_FIELD_RAGGED = 2  /* up to shape[0] rows: values [total, shape[1:]...], sample i's
                                rows offsets[i] .. offsets[i + 1]; offsets: count + 1
                                int64 from 0; lengths: count int64 */
} feeder_field_batching;

/* One field of a schema. A scalar per sample is ndim 0 (FIXED only). For
 * PADDED and RAGGED, shape[0] is the maximum number of rows a sample may
 * have; the other dimensions are fixed. Every dimension is at least 1. */
typedef struct feeder_field {
    const char *name;    /* 1 .. FEEDER_FIELD_NAME_MAX characters, unique in the schema;
                            copied by feeder_dataset_create_fields */
    int32_t elem;        /* feeder_elem */
    int32_t batching;    /* feeder_field_batching */
    uint32_t ndim;       /* 0 .. FEEDER_FIELD_MAX_DIMS */
    uint32_t shape[FEEDER_FIELD_MAX_DIMS];
    uint32_t reserved_[3];
} feeder_field;

/* Bytes of one element of `elem`, or 0 for an unknown type. Thread-safe. */
FEEDER_API size_t feeder_elem_size(int elem);
/* Name of `elem` ("u8", "i16", "i32", "i64", "f16", "bf16", "f32"), or NULL. */
FEEDER_API const char *feeder_elem_name(int elem);

/* Where a fields dataset's get callback writes one sample. Entry k is field
 * k of the schema: data[k] is the field's room for this sample (capacity[k]
 * bytes: shape[0] rows of the field's row size, the maximum for variable
 * fields), and rows[k] is the number of rows written, which the callback
 * sets for every variable field (fixed fields come preset to shape[0], and
 * scalars to 1; leaving a variable field unset fails the sample). The worker
 * checks each rows[k] against the field's maximum before anything reads the
 * sample: a longer sample fails (FEEDER_ERANGE) with a message naming the
 * sample index and the field, under FEEDER_ON_ERROR_FAIL, and is replaced
 * or left out under SKIP and DROP. Values past rows[k] need not be written.
 * feeder_sample_put copies with the checks done first. Lifetime: valid
 * during the get call. */
typedef struct feeder_sample_out {
    uint32_t nfields;
    uint32_t reserved0_;
    void *const *data;
    const size_t *capacity;
    uint64_t *rows;
    const feeder_field *fields; /* the schema, nfields entries */
    /* The first failed feeder_sample_put (the worker fails the sample with
     * it even when the callback ignores the return): */
    int32_t put_error;          /* 0, or the code put returned */
    uint32_t put_field;
    uint64_t put_rows;
    int32_t put_elem;
    uint32_t reserved1_;
    uint64_t reserved_[2];
} feeder_sample_out;

/* Copy `rows` rows of field `field` from `src` (elements of type `elem`,
 * the field's row layout) into the sample and set its rows. Nothing is
 * written, and the sample fails, when the field does not exist
 * (FEEDER_EINVAL), `elem` is not the field's type (FEEDER_EINVAL: "wrong
 * dtype"), or `rows` is more than its maximum, or not shape[0] for a fixed
 * field (FEEDER_ERANGE). Only inside the get callback of `out`. */
FEEDER_API int feeder_sample_put(feeder_sample_out *out, uint32_t field, int elem,
                                 const void *src, uint64_t rows);

/* A dataset of fields given as C callbacks. `get` fills sample ctx->index
 * through `out` and returns 0, or a negative value to fail the sample,
 * optionally leaving a message of at most errlen bytes in `err`; ctx's
 * height, width, channels and layout are 0. It runs where a
 * feeder_dataset_callbacks get runs (worker processes, or the calling thread
 * with num_workers 0) under the same rules. */
typedef struct feeder_fields_callbacks {
    uint64_t (*len)(void *user);
    int (*get)(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
               size_t errlen);
    /* Optional: called once per dataset destroy. */
    void (*destroy)(void *user);
} feeder_fields_callbacks;

/* Wrap callbacks and a schema of `nfields` fields as a dataset. `cb`,
 * `fields` and the names are copied; `user` is borrowed and handed to every
 * callback. Fails with FEEDER_EINVAL when len or get is missing, or when the
 * schema is not valid; `err` (errlen bytes, may be NULL) then names the field
 * and what is wrong ("field 2 ('boxes'): ragged needs ndim >= 1"). Loaders
 * over it take no augment pipeline. With FEEDER_OPT_DEVICE >= 0 every field
 * reaches the device as the dataset wrote it (each field's used bytes,
 * lengths and offsets copied, one ready_event for all); DTYPE must then be
 * FEEDER_DTYPE_UINT8 (the start fails with FEEDER_EINVAL otherwise).
 * Destroy with feeder_dataset_destroy. Thread-safety: any thread. */
FEEDER_API int feeder_dataset_create_fields(const feeder_fields_callbacks *cb,
                                            const feeder_field *fields, uint32_t nfields,
                                            void *user, feeder_dataset **out, char *err,
                                            size_t errlen);

/* The schema of a dataset: its number of fields and, when `out` is not NULL
 * and field < that number, a copy of field `field` (whose name is borrowed
 * from the dataset). Folder, list and packed datasets give the built-in
 * schema: "image" (u8, ndim 3, shape {0, 0, 3}: height and width are the
 * loader's options, unknown here) and "label" (i64, ndim 0). Returns the
 * number of fields, or FEEDER_EINVAL. Thread-safe. */
FEEDER_API int feeder_dataset_field(const feeder_dataset *ds, uint32_t field, feeder_field *out);

/* One field of a batch as a tensor. The batch dimension comes first and
 * counts the batch's samples (feeder_batch.count): FIXED [count, shape...],
 * PADDED [count, padded, shape[1:]...] where padded is the batch's longest
 * sample (or what the collate callback padded it to), RAGGED values
 * [offsets[count], shape[1:]...]. Row-major and contiguous. */
typedef struct feeder_tensor {
    void *data;              /* the values; writable (the slot is the batch's) */
    const char *name;        /* the field's name, borrowed from the dataset */
    int32_t elem;            /* feeder_elem */
    int32_t batching;        /* feeder_field_batching */
    uint32_t ndim;           /* dimensions of shape[] used */
    int32_t device;          /* CUDA device of data, device_lengths and device_offsets;
                                -1: on the host */
    uint64_t shape[FEEDER_FIELD_MAX_DIMS + 1];
    size_t bytes;            /* bytes of data the shape covers */
    int64_t *lengths;        /* PADDED, RAGGED: count rows, one per sample; else NULL.
                                On the host, device batches too */
    int64_t *offsets;        /* RAGGED: count + 1 row offsets from 0; else NULL. On the
                                host, device batches too */
    const int64_t *device_lengths; /* device batches: the same on the device; else NULL */
    const int64_t *device_offsets;
    uint64_t reserved_[2];
} feeder_tensor;

/* Field `field` (by position in the schema) of a batch, or inside a collate
 * callback the batch it is handed. For a device batch, data (and
 * device_lengths, device_offsets) are device memory of `device`, complete
 * once the batch's ready_event has passed, and lengths and offsets host
 * copies; the image schema's fields of a device batch are its device_data
 * and device_labels (their dtype and layout as the batch says). 0, or
 * FEEDER_EINVAL (NULL arguments, no such field, a float device image batch's
 * "image": its element type is no feeder_elem of uint8).
 * Lifetime: the pointers are the batch's, valid until feeder_batch_release.
 * Thread-safety: as the batch. */
FEEDER_API int feeder_batch_field_at(const feeder_batch *b, uint32_t field, feeder_tensor *out);
/* The same by name; FEEDER_EINVAL when the schema has no such field. */
FEEDER_API int feeder_batch_field(const feeder_batch *b, const char *name, feeder_tensor *out);

/* Inside a collate callback: pad PADDED field `field` of the batch to `rows`
 * rows per sample (from the batch's longest up to the field's maximum; the
 * added rows are zero), e.g. to a multiple of 8. FEEDER_ERANGE outside those
 * bounds, FEEDER_EINVAL for another kind of field or outside a collate
 * callback. */
FEEDER_API int feeder_batch_pad_field(feeder_batch *b, uint32_t field, uint64_t rows);

/* A per-batch collate callback: runs once per batch after all its samples
 * are in and after the variable fields are padded or packed (and samples
 * left out by DROP removed), before the batch is lent. It may read and
 * write every field of `batch` (feeder_batch_field), e.g. build an
 * attention mask field, mix labels, pad (feeder_batch_pad_field);
 * batch->count, epoch, number and indices are set, data and labels are NULL.
 * Non-zero fails the batch (FEEDER_ECALLBACK, with `err`'s text).
 * Where it runs: in the worker process that finishes the batch's last part
 * (parts of one batch go to several workers; a count in the slot says which
 * is last), so never on the user's thread when num_workers > 0; with
 * num_workers 0 in the calling thread, inside feeder_next. Its output must
 * depend only on the batch's contents and (seed, epoch, number): then every
 * worker count gives the same bytes. */
typedef int (*feeder_collate_fn)(void *user, feeder_batch *batch, char *err, size_t errlen);

/* Write every sample of fields dataset `ds`, in order, to a packed file
 * (record kind FEEDER_RECORD_FIELDS, format version 3, docs/FORMAT.md) that
 * feeder_dataset_open_packed opens as a fields dataset of the same schema
 * and samples, read by the workers with pread and checked by each record's
 * crc32c. Samples come from the dataset's get callback, in the calling
 * thread (ctx: index, seed 0, epoch 0, worker_id -1), checked as a loader
 * checks them. The file is written as PATH.tmp and renamed over `path` at
 * the end. Returns 0; FEEDER_EINVAL (NULL arguments, a dataset without
 * fields or samples); a sample's error (FEEDER_ERANGE, FEEDER_EINVAL, the
 * callback's code) naming the sample and field; or -errno naming the file,
 * with the message in `err` (errlen bytes, may be NULL); nothing is left
 * at `path` on failure. Thread-safety: as the dataset's get callback. */
FEEDER_API int feeder_pack_fields(const feeder_dataset *ds, const char *path, char *err,
                                  size_t errlen);

/* Set the collate callback (NULL removes it); `user` is borrowed. Fields
 * datasets only: the start fails with FEEDER_EINVAL for another dataset.
 * Before start only (FEEDER_ESTATE after). Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_set_collate(feeder_loader *ld, feeder_collate_fn fn, void *user);

/* Paired transforms, for a fields dataset's get callback: one random crop
 * and flip drawn per sample and applied alike to its image, its mask
 * (nearest neighbour, so classes stay classes) and its boxes (moved, flipped
 * and clipped). Images and masks are row-major [height, width, channels]
 * uint8. */
typedef struct feeder_pair_crop {
    uint32_t x, y, width, height; /* the box taken from the source, in its pixels */
    uint32_t out_width, out_height;
    int32_t flip;                 /* 1: mirrored left to right after the crop */
    uint32_t reserved_[3];
} feeder_pair_crop;

/* Draw sample `index`'s crop of a src_width x src_height source for an
 * out_width x out_height output, as RandomResizedCrop does: an area share in
 * [scale_min, scale_max] and an aspect ratio (log-uniform) in [3/4, 4/3],
 * ten tries, else the centre crop of the output's aspect; flipped with
 * probability flip_p. The draws come from feeder_random(seed, epoch, index,
 * ...) alone (counters 0xFFFE << 32 and up), so the same sample gets the same
 * crop in every worker and after a resume. FEEDER_EINVAL for a zero size,
 * NULL out, or scales outside 0 < min <= max <= 1 or flip_p outside [0, 1].
 * Thread-safe. */
FEEDER_API int feeder_pair_crop_draw(uint64_t seed, uint64_t epoch, uint64_t index,
                                     uint32_t src_width, uint32_t src_height,
                                     uint32_t out_width, uint32_t out_height, double scale_min,
                                     double scale_max, double flip_p, feeder_pair_crop *out);

/* Apply `c` to a src_width x src_height x channels image into `dst`
 * (c->out_height x c->out_width x channels): FEEDER_INTERP_BILINEAR (pixel
 * centres, edges clamped) for images, FEEDER_INTERP_NEAREST for masks.
 * FEEDER_EINVAL when the crop does not lie inside the source or an argument
 * is NULL or 0. Thread-safe. */
FEEDER_API int feeder_pair_crop_image(const feeder_pair_crop *c, const uint8_t *src,
                                      uint32_t src_width, uint32_t src_height, uint32_t channels,
                                      int interp, uint8_t *dst);

/* Apply `c` to n boxes (x0, y0, x1, y1, float, source pixels) in place:
 * moved into the crop, scaled to the output, mirrored when c->flip, clipped
 * to [0, out_width] x [0, out_height]. Boxes left with no area are removed,
 * the rest kept in order; `classes` (n int64, may be NULL) is compacted
 * alike. Returns the number kept. Thread-safe. */
FEEDER_API uint64_t feeder_pair_crop_boxes(const feeder_pair_crop *c, float *boxes,
                                           int64_t *classes, uint64_t n);

/* ------------------------------------------------------------------------ */
/* Batch datasets: the dataset makes whole batches                           */
/* ------------------------------------------------------------------------ */

/* A batch dataset hands each batch whole to one worker, which writes it into
 * the batch's slot in a format of the dataset's own choosing (a language
 * binding's objects, serialised; records of any length). The loader moves
 * the indices to the worker and the bytes back, in order, with its usual
 * guarantees (timeouts, worker deaths named, restarts, nothing leaked).
 * The Python binding's DataLoader runs Python datasets this way. */

/* What a batch dataset's get callback is handed for one batch. */
typedef struct feeder_batch_ctx {
    uint64_t epoch;           /* the epoch */
    uint64_t number;          /* the batch's number within the epoch, from 0 */
    uint64_t seed;            /* the loader's seed */
    const uint64_t *indices;  /* the sampler's count dataset indices; borrowed for the call */
    uint32_t count;           /* may be 0 (a batch sampler's empty batch) */
    int32_t worker_id;        /* -1 in the calling thread (num_workers 0) */
    uint32_t num_workers;
    uint32_t reserved_[5];
} feeder_batch_ctx;

/* Where the callback writes the batch: `data` is the slot's room
 * (`capacity` bytes, FEEDER_OPT_BATCH_ROOM rounded up to pages, page
 * aligned); the callback sets `used` to the bytes it wrote there. A batch
 * larger than the room may put the rest in a descriptor of its own (a
 * memfd, sized with ftruncate): `extra_fd` and `extra_bytes`; the loader
 * takes the descriptor (the worker closes its copy once it is sent) and
 * maps it for the batch's borrower (feeder_batch_payload). */
typedef struct feeder_batch_out {
    void *data;
    size_t capacity;
    size_t used;          /* set by the callback, <= capacity */
    int32_t extra_fd;     /* -1 (preset), or a descriptor the loader takes */
    uint32_t reserved0_;
    size_t extra_bytes;   /* bytes of extra_fd to map, > 0 when extra_fd is set */
    uint64_t reserved_[4];
} feeder_batch_out;

/* A batch dataset's callbacks. `len` gives the number of samples (0 for a
 * dataset with no indices, such as a stream each worker reads on its own:
 * its batch sampler then gives empty batches). `get` makes batch
 * ctx->number from ctx->indices into `out` and returns 0, or a negative
 * value to fail the batch (FEEDER_ECALLBACK for a positive one), leaving a
 * message of at most errlen bytes in `err`; the batch's error names the
 * batch and carries that text. `get` runs in worker processes (forked) or,
 * with num_workers 0, in the calling thread; it must not depend on state
 * changed in the parent after the workers were forked. */
typedef struct feeder_batches_callbacks {
    uint64_t (*len)(void *user);
    int (*get)(void *user, const feeder_batch_ctx *ctx, feeder_batch_out *out, char *err,
               size_t errlen);
    /* Optional: called once per dataset destroy. */
    void (*destroy)(void *user);
} feeder_batches_callbacks;

/* Wrap callbacks as a batch dataset. `cb` is copied; `user` is borrowed and
 * handed to every callback. A loader over it gives each batch to one
 * worker whole (FEEDER_OPT_SPLIT does not apply), gives host batches only
 * (FEEDER_OPT_DEVICE must stay -1) and takes no augment pipeline or collate
 * callback; its batches have `indices` and `count` and no labels, and
 * their bytes come from feeder_batch_payload. The resume state is not
 * available for it (feeder_loader_state_save returns FEEDER_EINVAL).
 * FEEDER_EINVAL when len or get is missing. Destroy with
 * feeder_dataset_destroy. Thread-safety: any thread. */
FEEDER_API int feeder_dataset_create_batches(const feeder_batches_callbacks *cb, void *user,
                                             feeder_dataset **out);

/* A batch dataset's batch: its bytes in the slot (*data, *len: what the
 * callback wrote) and those of its extra descriptor (*extra, *extra_len;
 * NULL and 0 when it set none), both mapped readable and writable. Any out
 * pointer may be NULL. FEEDER_EINVAL for a batch of another dataset, or a
 * NULL batch. Lifetime: valid until feeder_batch_release. Thread-safety: as
 * the batch. */
FEEDER_API int feeder_batch_payload(const feeder_batch *b, void **data, size_t *len,
                                    void **extra, size_t *extra_len);

/* A batch sampler: each epoch is a list of batches of any lengths (each at
 * most FEEDER_OPT_BATCH_SIZE indices, which sizes the slots' index room;
 * empty batches are allowed), and each batch may name the worker that must
 * make it (PyTorch's DataLoader sends batch k to worker k mod num_workers,
 * and a worker that reads a stream of its own must get its own batches).
 * `nbatches` gives the epoch's number of batches and `len` its total number
 * of indices; `fill` writes the indices of every batch one after another
 * (len entries), each batch's length (nbatches entries) and each batch's
 * worker (nbatches entries, -1 for any worker; a worker id >= num_workers
 * fails the epoch), and returns 0 or a negative error. The loader asks once
 * per epoch, when the epoch begins, in the thread that calls feeder_next,
 * and never runs an epoch ahead of time with such a sampler. BATCH_SIZE
 * and DROP_LAST do not cut its batches. `cb` copied, `user` borrowed.
 * feeder_sampler_fill gives the indices alone. The resume state is not
 * available for it. */
typedef struct feeder_batch_sampler_callbacks {
    uint64_t (*nbatches)(void *user, uint64_t epoch);
    uint64_t (*len)(void *user, uint64_t epoch);
    int (*fill)(void *user, uint64_t epoch, uint64_t *indices, uint64_t len, uint32_t *lengths,
                int32_t *workers, uint64_t nbatches);
    void (*destroy)(void *user);
} feeder_batch_sampler_callbacks;
FEEDER_API int feeder_sampler_create_batches(const feeder_batch_sampler_callbacks *cb,
                                             void *user, feeder_sampler **out);

/* Calls around every fork of a worker, for a language runtime that must be
 * in a consistent state when its process is copied (CPython: hold the GIL
 * and call PyOS_BeforeFork, then PyOS_AfterFork_Parent or _Child).
 * `prepare` runs in the thread that forks, before the fork; `parent` in it
 * after the fork (also when the fork failed); `child` in the new worker
 * before anything else, worker_init included. Any may be NULL. Before start
 * only (FEEDER_ESTATE after); `h` is copied, `h->user` borrowed.
 * Thread-safety: as feeder_next. */
typedef struct feeder_fork_hooks {
    void (*prepare)(void *user);
    void (*parent)(void *user);
    void (*child)(void *user);
    void *user;
} feeder_fork_hooks;
FEEDER_API int feeder_loader_set_fork_hooks(feeder_loader *ld, const feeder_fork_hooks *h);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_H */
