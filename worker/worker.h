/*
 * worker/: a task (read its files, decode and transform every sample into
 * its place in the batch slot), the worker process that serves tasks, and
 * the read of packed records. What the loader (the room above) uses: the job
 * fixed at start, the messages on a worker's channel, the calling thread's
 * worker context (num_workers 0) and the worker process's entry.
 */
#ifndef FEEDER_WORKER_H
#define FEEDER_WORKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "augment/augment.h"
#include "collate/fields.h"
#include "collate/slot.h"
#include "common/common.h"
#include "dataset/dataset.h"
#include "decode/decode.h"
#include "decode/jpeg_header.h"
#include "io/io.h"

/* Everything a worker needs, fixed at start; a forked worker inherits it. */
typedef struct feeder__job {
    const feeder_dataset *ds;
    feeder__transform t;
    int cpu_decoder;   /* the plan's CPU decoder (ROI or TURBO): t.decoder's, or ROI when
                          t.decoder is a GPU one (the workers' share and the fallbacks) */
    feeder__slot_layout layout;
    uint64_t seed;
    int policy;        /* feeder_error_policy */
    uint32_t num_workers;
    int io_mode;       /* FEEDER_IO_URING or FEEDER_IO_PREAD, resolved */
    unsigned queue_depth;
    int memfd;
    size_t shm_bytes;  /* the slots, then the live page at live_off */
    size_t live_off;
    /* packed datasets (worker/packed_read.c) */
    int packed_read;   /* feeder_packed_read */
    int verify_crc;
    int pack_fd;       /* the file, opened with O_DIRECT for FEEDER_PACKED_READ_DIRECT; or -1 */
    int packed_direct; /* RAW records go from the file's registered mapping straight to the
                          device (cuda/); the workers write only the labels */
    unsigned dio_mem_align, dio_off_align;
    struct feeder__trace *trace; /* feeder_loader_set_trace, or NULL; workers inherit its areas */
    /* FEEDER_ON_ERROR_SKIP: the next sample of each sample's label
     * (feeder__dataset_class_next), or NULL: the next sample. Owned by the
     * loader. */
    uint64_t *class_next;
    /* The ROI decoder's shared row index (decode/jpeg_index.h), or NULL.
     * Owned by the loader; a shared mapping the workers inherit. */
    struct feeder__jindex *jindex;
    feeder__augment_plan aug;    /* feeder_loader_set_augment's copy (augment/) */
    /* Fields datasets: the slot's fields (collate/fields.h; nfields 0
     * otherwise) and feeder_loader_set_collate's callback, or NULL. */
    feeder__fields_layout fields;
    feeder_collate_fn collate;
    void *collate_user;
} feeder__job;

/* What the loader changes while the workers run, read by them as it changes:
 * a page of the slot memfd after the last slot (each process reaches it
 * through its own mapping, like the slots). */
typedef struct feeder__live {
    /* GPU decoders: the share of each part the workers decode themselves
     * (1000 while nvJPEG starts; HYBRID's share after). A part reads it when
     * it plans its samples, so the warm-up ends for every part not begun
     * when nvJPEG is ready, not for the slots given after. */
    _Atomic uint32_t cpu_permille;
} feeder__live;
#define FEEDER__LIVE_BYTES ((size_t)4096)

enum { FEEDER__MSG_TASK = 1, FEEDER__MSG_READY = 2, FEEDER__MSG_RESULT = 3 };
#define FEEDER__ERRMSG_LEN 768
/* Bad samples a result names (more are counted, not named). */
#define FEEDER__BAD_NOTED 8
/* Candidates a bad sample's replacement may try (include/feeder.h gives the
 * rule); when they do not settle it the sample's batch fails instead. */
#define FEEDER__SKIP_LIMIT 16

/* Main -> worker: fill samples [first, first+count) of `slot`; the dataset
 * indices are already in the slot's index area. With a GPU decoder
 * (NVJPEG, HYBRID) the worker decodes the first of them, the live share
 * (feeder__live), and only reads the rest (collate/slot.h: `encoded`). */
typedef struct feeder__task_msg {
    uint32_t kind;
    uint32_t slot;
    uint32_t first;
    uint32_t count;
    uint64_t epoch;
    uint64_t batch;
    uint32_t total;    /* samples in the batch (fields datasets: which part is last) */
    int32_t want;      /* the worker a batch sampler gave the batch to, or -1: any */
} feeder__task_msg;

/* Worker -> main. */
typedef struct feeder__result_msg {
    uint32_t kind;
    uint32_t slot;
    uint32_t first;
    uint32_t count;
    int32_t status;    /* 0 or the first error */
    uint32_t skipped;
    uint32_t dropped;  /* FEEDER_ON_ERROR_DROP: samples marked (label -1) to leave out */
    uint32_t nbad;     /* skipped + dropped samples noted in bad[] (at most FEEDER__BAD_NOTED) */
    uint64_t batch;
    uint64_t bytes_read;
    uint64_t read_ns;
    uint64_t decode_ns;
    uint64_t transform_ns;
    /* The dataset indices of the part's first skipped or dropped samples,
     * for feeder_loader_skipped. */
    uint64_t bad[FEEDER__BAD_NOTED];
    /* GPU decoders: images decoded here instead, by route (cpu_routed[r - 1],
     * decode/jpeg_header.h). */
    uint32_t routed[FEEDER_ROUTES];
    uint32_t shared; /* GPU decoders: the task's first samples, decoded here as the CPU's share */
    /* Batch datasets: the bytes written in the room, and the callback's extra
     * descriptor: sent along as SCM_RIGHTS by a worker (extra_fd is then the
     * receiver's copy, or -1), kept as it is by the calling thread. */
    int32_t extra_fd;
    uint32_t pad2_;
    uint64_t used;
    uint64_t extra_bytes;
    char errmsg[FEEDER__ERRMSG_LEN];
} feeder__result_msg;

typedef struct feeder__worker_ctx {
    const feeder__job *job;
    int id;            /* -1: the calling thread */
    uint8_t *mem;      /* this process's own mapping of the slots */
    const feeder__live *live; /* in it, after the slots */
    feeder__reader *rd;
    feeder__decoder *dec;
    feeder__file *files;
    unsigned files_cap;
    char why[256];     /* reader fallback reason */
    struct feeder__pack_worker *pk; /* packed datasets: bounce buffer, spans */
    struct feeder__tar_worker *tar; /* tar datasets: shard descriptors, read buffer */
    feeder__transform cpu_t; /* job->t with a CPU decoder: what this worker decodes with */
    int gpu_dec;             /* job->t.decoder is NVJPEG or HYBRID */
    struct {                 /* a GPU decoder's task plan (feeder__worker_plan_gpu_part) */
        const uint8_t **bytes;
        size_t *len;
        int *gpu;
        uint64_t *off;
        uint32_t cap;
    } part;
    void *aug_scratch;       /* job->aug's per-sample scratch, or NULL without steps */
} feeder__worker_ctx;

int feeder__worker_ctx_init(feeder__worker_ctx *w, const feeder__job *job, int id, uint8_t *mem);
void feeder__worker_ctx_free(feeder__worker_ctx *w);
/* Run one task into the slot; never fails as a whole: errors land in `res`. */
void feeder__run_task(feeder__worker_ctx *w, const feeder__task_msg *t, feeder__result_msg *res);

/* The worker process: map the slots, run worker_init, then serve tasks on
 * `chan` until it closes. Never returns. `close_fds` are the parent's
 * descriptors this worker must not hold (other workers' channels). It
 * lives as long as the loader's process, whichever of that process's threads
 * forked it or ends (feeder__worker_watch_parent). */
_Noreturn void feeder__worker_main(const feeder__job *job, int id, int chan, pid_t parent,
                                   const int *close_fds, int nclose,
                                   feeder_worker_init_fn init, void *init_user);

/* Right after fork: close every descriptor the worker does not use (all but
 * `chan`, the slot memfd and the packed file's), or for a user dataset, whose
 * callbacks may use the process's descriptors, only `close_fds` (the
 * loaders' channels, pidfds and memfds). worker/inherit.c. */
void feeder__worker_close_inherited(const feeder__job *job, int chan, const int *close_fds,
                                    int nclose);

/* Watch the loader's process from a new worker: *pidfd, a pidfd of `parent`
 * (the loader's pid, read before fork) that becomes readable when that
 * process exits, whichever of its threads forked us (-1 on kernels without
 * pidfd_open, which get PR_SET_PDEATHSIG instead); then check that `parent`
 * is still the parent, for one that died before the watch began. 0, or 1
 * when the parent is gone (the worker must exit). */
int feeder__worker_watch_parent(pid_t parent, int *pidfd);
/* Exit status of a worker whose parent died before it was armed. */
#define FEEDER__EXIT_ORPHAN 3

/* Room for a GPU decoder's plan of n samples in w->part. 0 or -ENOMEM. */
int feeder__worker_part_reserve(feeder__worker_ctx *w, uint32_t n);
/* A GPU decoder's task, whose samples' bytes the caller put in
 * w->part.bytes[k] and w->part.len[k] (NULL: it failed to read): route each
 * by its header (the live share's first and the failed ones stay on the
 * CPU), then plan where each lands in the task's share of the data area
 * (collate/slot.h: feeder__slot_plan_part). Sets the slot's encoded[] and
 * place[] of the task and w->part.gpu[k]: sample k goes over as its bytes.
 * Routes other than the GPU are counted in res->routed. */
void feeder__worker_plan_gpu_part(feeder__worker_ctx *w, const feeder__task_msg *t,
                                  uint8_t *slot, feeder__result_msg *res);
/* Where sample i of a slot is written: its place in the batch, or with a GPU
 * decoder the place its task's plan gave it. */
uint8_t *feeder__worker_sample_dst(const feeder__worker_ctx *w, uint8_t *slot, uint32_t i);

/* ---- packed records (packed_read.c) ---- */

/* Loader start: open what the chosen read path needs (the O_DIRECT
 * descriptor) into `job`. 0 or an error with its message in `err`. */
int feeder__packed_prepare(const feeder_dataset *ds, feeder__job *job, char *err,
                           size_t errlen);

int feeder__packed_ctx_init(feeder__worker_ctx *w);
void feeder__packed_ctx_free(feeder__worker_ctx *w);

/* Fill samples [t->first, t->first + t->count) of `slot`. Under the FAIL policy
 * the first bad record's error is returned with its message in res->errmsg;
 * under SKIP bad positions get label -1 (replaced by the caller) and
 * *bad_first the first of them. */
int feeder__packed_fill(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                        feeder__result_msg *res, uint32_t *bad_first);
/* Load record `index` alone into dst (a skip-policy replacement). */
int feeder__packed_load_one(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                            uint8_t *dst, int64_t *label, feeder__result_msg *res, char *msg,
                            size_t msglen);

/* ---- tar shards (tar_read.c) ---- */

/* Read the image members of tar samples index[0..n) into files[0..n) as
 * feeder__reader_read reads files: per-sample failures (a bad sample, a
 * failed open or read) land in files[k].err with the text in files[k].op;
 * files[k].path names the shard and member. Returns 0, -ENOMEM, or a -errno
 * that is not one sample's (the ring broke). The bytes stay valid until the
 * next call. */
int feeder__tar_read(feeder__worker_ctx *w, const uint64_t *index, feeder__file *files,
                     unsigned n);
void feeder__tar_ctx_free(feeder__worker_ctx *w);

#endif
