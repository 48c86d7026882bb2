/*
 * feeder/loader.h: the loader: options, start, batches, errors, the resume state, stats and
 * the timeline trace.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_LOADER_H
#define FEEDER_PUBLIC_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "dataset.h"
#include "sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

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
                                          copy, PNG rows, an alpha plane, a progressive
                                          JPEG's coefficients), reckoned from the
                                          header and refused (FEEDER_ETOOBIG) before anything
                                          is allocated; a WebP over it is first tried at the
                                          reduced scale the crop needs. 0 = no limit;
                                          default 256 MiB */
    FEEDER_OPT_MAX_SIDE = 24,          /* largest width or height decoded (FEEDER_ETOOBIG);
                                          0 = no limit; default 65535 (JPEG's own limit) */
    FEEDER_OPT_ROW_INDEX_BYTES = 25,   /* ROI decoder: bytes the workers share for each JPEG's
                                          row index (where each MCU row's entropy data starts,
                                          recorded at its first decode), so later decodes skip
                                          the rows above the crop and the columns right of it;
                                          24 bytes a row of 8-16 pixels, taken as samples are
                                          first decoded, none after it is spent; 0 = off;
                                          default 256 MiB (docs/ARCHITECTURE.md, "The CPU
                                          decode on one core") */
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
    FEEDER_OPT_CHANNELS = 70,          /* output channels: 3 RGB, or 1 grayscale ("Grayscale
                                          output" below); default 3 */
    /* double-valued, set with feeder_loader_set_double(): */
    FEEDER_OPT_SCALE_MIN = 100,        /* train: RandomResizedCrop area share; default 0.08 */
    FEEDER_OPT_SCALE_MAX = 101,        /* default 1.0 */
    FEEDER_OPT_RATIO_MIN = 102,        /* train: aspect ratio; default 3/4 */
    FEEDER_OPT_RATIO_MAX = 103,        /* default 4/3 */
    FEEDER_OPT_FLIP_PROB = 104         /* train: horizontal flip probability; default 0.5 */
} feeder_option;

/* Grayscale output (FEEDER_OPT_CHANNELS 1): every sample is height x width x 1
 * uint8; JPEG decodes its Y channel, other formats convert as Pillow's "L".
 * The whole rule: docs/api/loader.md, "Grayscale output". */

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
/* SKIP's replacement rule: a bad sample is replaced by a later good sample of
 * its label, chosen from the data alone (never timing or num_workers); the
 * whole rule: docs/api/loader.md, "SKIP's replacement rule". */

/* Bounds of an option; FEEDER_EINVAL for an unknown option. Thread-safe. */
FEEDER_API int feeder_option_bounds(feeder_option opt, double *min, double *max);
/* Name of an option ("batch_size"), or NULL. Thread-safe. */
FEEDER_API const char *feeder_option_name(feeder_option opt);

/* The names of an enum-valued option's values (PIPELINE, LAYOUT, DECODER, IO,
 * ERROR_POLICY, PIN_MODE, DTYPE, PACKED_READ), lower case, one table for
 * every program and binding; docs/api/names.md lists them.
 * feeder_option_value_name: the name of `value` ("roi" for FEEDER_OPT_DECODER,
 * FEEDER_DECODER_ROI), or NULL for an option without named values or a value
 * that is not one. Values run from 0 without gaps, so a loop from 0 until
 * NULL lists them in the enum's order. Static storage. Thread-safe. */
FEEDER_API const char *feeder_option_value_name(feeder_option opt, int value);
/* The value named `name` (ASCII case ignored): 0 and *value set, or
 * FEEDER_EINVAL (*value untouched) for an option without named values, an
 * unknown name or a NULL pointer. Thread-safe. */
FEEDER_API int feeder_option_value(feeder_option opt, const char *name, int *value);
/* All of the option's value names joined by `sep` ("turbo, roi, nvjpeg,
 * hybrid" with ", ") into `out`, as snprintf writes: always terminated when
 * len > 0, and returns the length the whole list needs (truncated when that
 * is >= len); FEEDER_EINVAL for an option without named values or a NULL
 * `sep` (or `out` with len > 0). Thread-safe. */
FEEDER_API int feeder_option_value_names(feeder_option opt, const char *sep, char *out,
                                         size_t len);

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

/* Resume from a saved blob: the next feeder_next() delivers exactly the batches
 * the saved loader had not delivered, byte-identical. Only before start
 * (FEEDER_ESTATE after); `buf` is copied. Errors FEEDER_ESTATEBLOB,
 * FEEDER_EMISMATCH (with the field in feeder_loader_errmsg) or the sampler's;
 * the checks, the dataset fingerprint and the versions: docs/api/loader.md,
 * "Resuming from a state blob".
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

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_LOADER_H */
