/* loader/: datasets, the read path, the worker pool and the task flow. */
#ifndef FEEDER_LOADER_INTERNAL_H
#define FEEDER_LOADER_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feeder.h"

enum { FEEDER__DS_FOLDER = 1, FEEDER__DS_LIST = 2, FEEDER__DS_USER = 3, FEEDER__DS_PACKED = 4 };

struct feeder__pack; /* packed datasets (loader/pack.h) */

struct feeder_dataset {
    int kind;
    uint64_t n;
    char *paths;        /* all full paths, NUL-separated */
    uint64_t *path_off; /* n offsets into paths */
    int64_t *labels;    /* n labels */
    char **classes;     /* folder datasets: sorted class names */
    uint64_t num_classes;
    feeder_dataset_callbacks cb;
    void *user;
    struct feeder__pack *pack; /* FEEDER__DS_PACKED */
};

/* Longest list-file line accepted (PATH_MAX plus room for a label). */
#define FEEDER__LIST_LINE_MAX 4200

/* Parse a list file held in memory: the parser behind
 * feeder_dataset_open_list2 (and the fuzz target's entry). `name` is the list
 * file's name for messages; `root` is what relative paths are relative to. */
int feeder__list_parse(const char *buf, size_t len, const char *name, const char *root,
                       unsigned flags, feeder_dataset **out, char *err, size_t errlen);

/* snprintf into a fixed buffer, never failing (truncates). */
void feeder__fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- reading (io.c) ---- */

typedef struct feeder__file {
    const char *path; /* borrowed */
    uint8_t *data;    /* into the reader's arena, valid until the next read */
    size_t len;
    int err;          /* 0 or -errno */
    const char *op;   /* the failing operation ("open", "read", ...) */
} feeder__file;

typedef struct feeder__reader feeder__reader;

/* A sample file larger than this fails alone (-EFBIG) before it is read: the
 * reader's arena holds a whole task, and one huge file in a list must not
 * turn into a failed allocation for every sample of its task. No JPEG under
 * the default pixel limit comes near it. */
#define FEEDER__MAX_FILE_BYTES ((uint64_t)1 << 30)
#define FEEDER__FILE_TOO_BIG "size over the 1 GiB limit"

/* Is io_uring usable here with the operations the reader needs? 0, or
 * -errno with a reason in `why`. Run once in the parent at start. */
int feeder__uring_probe(char *why, size_t whylen);

/* mode: FEEDER_IO_URING or FEEDER_IO_PREAD (AUTO resolved by the caller). */
int feeder__reader_create(int mode, unsigned queue_depth, feeder__reader **out, char *why,
                          size_t whylen);
void feeder__reader_destroy(feeder__reader *r);
/* Read every file whole; per-file errors land in files[i].err. Returns 0 or
 * a -errno that is not specific to one file (the ring broke). */
int feeder__reader_read(feeder__reader *r, feeder__file *files, unsigned n);

/* One stretch of an open file to read into memory (packed datasets). */
typedef struct feeder__span {
    uint64_t off;  /* file offset */
    size_t len;    /* bytes asked for */
    uint8_t *dst;
    size_t got;    /* bytes read: less than len only at the end of the file */
    int err;       /* 0 or -errno of the failing read */
} feeder__span;

/* Read every span of `fd` (all queued at once on the ring, or pread one by
 * one); per-span errors land in spans[i].err. Returns 0 or a -errno that is not
 * specific to one span (the ring broke). */
int feeder__reader_read_at(feeder__reader *r, int fd, feeder__span *spans, unsigned n);

/* ---- saved state (state.c) and the loader's side of it (loader.c) ---- */

/* Everything a state blob records: a position in an epoch and every setting
 * that shapes the bytes of its batches. */
typedef struct feeder__state {
    uint64_t seed, epoch, delivered, dataset_size, sampler_len, nbatches, order_hash;
    uint64_t max_pixels;
    uint32_t batch_size, drop_last, shuffle, user_sampler;
    uint32_t pipeline, decoder, layout, height, width, resize, policy;
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    /* (nbatches + 7) / 8 bytes, bit b (LSB first) = batch b delivered; NULL
     * when nothing was. Borrowed. */
    const uint8_t *map;
} feeder__state;

/* A hash of an epoch's order: two loaders with the same one draw the same
 * samples in the same order. */
uint64_t feeder__order_hash(const uint64_t *v, uint64_t n);

/* Describe the loader in feeder__state terms. `at` NULL: where it stands
 * (the epoch the next feeder_next works in, and which of its batches were
 * delivered); otherwise epoch *at with nothing delivered. want_hash fills
 * order_hash, which fills the epoch's order when the loader is not in it.
 * st->map may point into the loader: use it before the next call on it.
 * 0, or an error with the loader's message set. */
int feeder__loader_describe(const feeder_loader *ld, const uint64_t *at, int want_hash,
                            feeder__state *st);
int feeder__loader_started(const feeder_loader *ld);
/* Keep a checked blob (copied) to resume from: start checks it again against
 * the final options, the first epoch applies it. */
int feeder__loader_keep_resume(feeder_loader *ld, const void *buf, size_t len);
/* Leave a message in the loader's errmsg and return rc. */
int feeder__loader_fail(const feeder_loader *ld, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Decode a blob and compare it with the loader: 0 and *st (st->map points
 * into buf), or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message set. */
int feeder__state_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st);

/* ---- resource limits (limits.c) ---- */

/* Can the machine back `slots` batch slots of `slot_bytes`? 0, or
 * FEEDER_ELIMIT with "batch slots need ..." in msg. */
int feeder__check_slot_memory(uint32_t slots, size_t slot_bytes, char *msg, size_t msglen);
/* Is RLIMIT_NOFILE high enough for `workers` workers, each opening up to
 * `files_per_task` files at once? 0, or FEEDER_ELIMIT with the message. */
int feeder__check_nofile(int workers, uint32_t files_per_task, char *msg, size_t msglen);

/* ---- tasks and workers (worker.c) ---- */

#include "collate/slot.h"
#include "decode/decode.h"

/* Everything a worker needs, fixed at start; a forked worker inherits it. */
typedef struct feeder__job {
    const feeder_dataset *ds;
    feeder__transform t;
    feeder__slot_layout layout;
    uint64_t seed;
    int policy;        /* feeder_error_policy */
    int io_mode;       /* FEEDER_IO_URING or FEEDER_IO_PREAD, resolved */
    unsigned queue_depth;
    int memfd;
    size_t shm_bytes;
    /* packed datasets (loader/packed.c) */
    int packed_read;   /* feeder_packed_read */
    int verify_crc;
    int pack_fd;       /* the file, opened with O_DIRECT for FEEDER_PACKED_READ_DIRECT; or -1 */
    int packed_direct; /* RAW records go from the file's registered mapping straight to the
                          device (cuda/prefetch.c); the workers write only the labels */
    unsigned dio_mem_align, dio_off_align;
    struct feeder__trace *trace; /* feeder_loader_set_trace, or NULL; workers inherit its areas */
} feeder__job;

enum { FEEDER__MSG_TASK = 1, FEEDER__MSG_READY = 2, FEEDER__MSG_RESULT = 3 };
#define FEEDER__ERRMSG_LEN 768
/* A bad sample is replaced by the next good one in dataset order; after this
 * many bad ones in a row the sample's batch fails instead. */
#define FEEDER__SKIP_LIMIT 16

/* Main -> worker: fill samples [first, first+count) of `slot`; the dataset
 * indices are already in the slot's index area. With a GPU decoder
 * (NVJPEG, HYBRID) the worker decodes the first cpu_count of them and only
 * reads the rest (collate/slot.h: `encoded`). */
typedef struct feeder__task_msg {
    uint32_t kind;
    uint32_t slot;
    uint32_t first;
    uint32_t count;
    uint64_t epoch;
    uint64_t batch;
    uint32_t cpu_count;
    uint32_t pad_;
} feeder__task_msg;

/* Worker -> main. */
typedef struct feeder__result_msg {
    uint32_t kind;
    uint32_t slot;
    uint32_t first;
    uint32_t count;
    int32_t status;    /* 0 or the first error */
    uint32_t skipped;
    uint64_t batch;
    uint64_t bytes_read;
    uint64_t read_ns;
    uint64_t decode_ns;
    uint64_t transform_ns;
    uint64_t oversize; /* GPU decoders: files larger than a sample, decoded here instead */
    char errmsg[FEEDER__ERRMSG_LEN];
} feeder__result_msg;

typedef struct feeder__worker_ctx {
    const feeder__job *job;
    int id;            /* -1: the calling thread */
    uint8_t *mem;      /* this process's own mapping of the slots */
    feeder__reader *rd;
    feeder__decoder *dec;
    feeder__file *files;
    unsigned files_cap;
    char why[256];     /* reader fallback reason */
    struct feeder__pack_worker *pk; /* packed datasets: bounce buffer, spans */
    feeder__transform cpu_t; /* job->t with a CPU decoder: what this worker decodes with */
    int gpu_dec;             /* job->t.decoder is NVJPEG or HYBRID */
} feeder__worker_ctx;

int feeder__worker_ctx_init(feeder__worker_ctx *w, const feeder__job *job, int id, uint8_t *mem);
void feeder__worker_ctx_free(feeder__worker_ctx *w);
/* Run one task into the slot; never fails as a whole: errors land in `res`. */
void feeder__run_task(feeder__worker_ctx *w, const feeder__task_msg *t, feeder__result_msg *res);

/* The worker process: map the slots, run worker_init, then serve tasks on
 * `chan` until it closes. Never returns. `close_fds` are the parent's
 * descriptors this worker must not hold (other workers' channels). */
_Noreturn void feeder__worker_main(const feeder__job *job, int id, int chan, pid_t parent,
                                   const int *close_fds, int nclose,
                                   feeder_worker_init_fn init, void *init_user);

/* Arm PR_SET_PDEATHSIG (SIGKILL) in a new worker, then check that `parent`
 * (the loader's pid, read before fork) is still its parent: a parent that
 * died between fork and prctl sends no signal. 0, or 1 when the parent is
 * gone (the worker must exit). */
int feeder__worker_watch_parent(pid_t parent);
/* Exit status of a worker whose parent died before it was armed. */
#define FEEDER__EXIT_ORPHAN 3

uint64_t feeder__now_ns(void);

/* ---- what the GPU layer (cuda/) uses of the loader ---- */

/* feeder__host_next(try_only = 1): nothing is ready yet. Never returned to users. */
#define FEEDER__AGAIN 100

/* The host loader's feeder_next: lend the next host batch (slot). With
 * try_only, return FEEDER__AGAIN at once instead of waiting (and, with no
 * workers, instead of loading in the calling thread). Statuses and errors as
 * feeder_next, with the message in the loader's errmsg. */
int feeder__host_next(feeder_loader *ld, feeder_batch **out, int try_only);
/* Give a host batch's slot back. */
int feeder__host_release(feeder_batch *b);
const feeder__slot_layout *feeder__loader_layout(const feeder_loader *ld);
/* The parent's mapping of every slot, and its length. */
uint8_t *feeder__loader_mem(const feeder_loader *ld, size_t *bytes);
uint32_t feeder__loader_nslots(const feeder_loader *ld);
/* The batch number whose error the last feeder__host_next returned, or -1
 * (a status that is no batch's: DONE, a death, a timeout). */
int64_t feeder__loader_status_batch(const feeder_loader *ld);
/* The current (or last) epoch. */
uint64_t feeder__loader_epoch(const feeder_loader *ld);
/* The loader's trace (feeder_loader_set_trace), or NULL: every
 * feeder__trace_* call takes NULL (loader/trace.h). */
struct feeder__trace *feeder__loader_trace(const feeder_loader *ld);
/* Add the GPU counters of `d` (pin_ns, h2d_ns, h2d_bytes, gpu_batches, wait_ns)
 * to the loader's; set its levels pinned_bytes and device_bytes. */
void feeder__loader_stats_add(feeder_loader *ld, const feeder_stats *d);
void feeder__loader_stats_mem(feeder_loader *ld, uint64_t pinned_bytes, uint64_t device_bytes);
/* HYBRID: the share of each batch (1/1000) the workers decode from the next
 * dispatched batch on. */
void feeder__loader_set_cpu_share(feeder_loader *ld, uint32_t permille);
uint32_t feeder__loader_cpu_share(const feeder_loader *ld);
/* Run sample decoding the way the workers do it (errors name index and
 * path); for the GPU layer's CPU fallback. `t` must be a CPU decoder's. */
int feeder__loader_decode_cpu(feeder_loader *ld, const feeder__transform *t, const uint8_t *jpeg,
                              size_t len, uint64_t epoch, uint64_t index, uint8_t *dst,
                              char *msg, size_t msglen);
const feeder__job *feeder__loader_job(const feeder_loader *ld);

#endif
