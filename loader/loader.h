/*
 * loader/: options, the worker pool, epochs, dispatch and delivery order, the
 * resume state. What other rooms and the tools may use of it.
 */
#ifndef FEEDER_LOADER_H
#define FEEDER_LOADER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "loader/state.h"
#include "worker/worker.h"

/* ---- the loader's side of the saved state (state.c is the codec) ---- */

/* Describe the loader in feeder__state terms. `at` NULL: where it stands
 * (the epoch the next feeder_next works in, and which of its batches were
 * delivered; with hold_epoch, the epoch it is in or last ended, for a GPU
 * layer that still holds its end); otherwise epoch *at with nothing
 * delivered. want_hash fills order_hash, which fills the epoch's order when
 * the loader is not in it. st->map may point into the loader: use it before
 * the next call on it. 0, or an error with the loader's message set. */
int feeder__loader_describe(const feeder_loader *ld, const uint64_t *at, int want_hash,
                            int hold_epoch, feeder__state *st);
int feeder__loader_started(const feeder_loader *ld);
/* Keep a blob (copied) to resume from, after checking it against the
 * loader: start checks it again against the final options, the first epoch
 * applies it. 0, or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message. */
int feeder__loader_keep_resume(feeder_loader *ld, const void *buf, size_t len);
/* 0 in the process that created the loader; in any other (a child forked
 * from it), FEEDER_EFORKED with the message set. Every entry point that
 * drives the loader or touches its workers, channels or slots asks first. */
int feeder__loader_forked(const feeder_loader *ld);
/* A call that succeeds leaves no message (feeder_loader_errmsg). */
void feeder__loader_clear_error(feeder_loader *ld);
/* Leave a message in the loader's errmsg and return rc. */
int feeder__loader_fail(const feeder_loader *ld, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- resource limits (limits.c) ---- */

/* Can the machine back `slots` batch slots of `slot_bytes`? 0, or
 * FEEDER_ELIMIT with "batch slots need ..." in msg. */
int feeder__check_slot_memory(uint32_t slots, size_t slot_bytes, char *msg, size_t msglen);
/* The memory this process may still use: MemAvailable, or less where a
 * memory cgroup's limit leaves less room (page cache not counted as used);
 * UINT64_MAX when neither can be read. */
uint64_t feeder__memory_room(void);
/* FEEDER_PACKED_READ_AUTO for a pack of file_bytes: MMAP when it fits in
 * half of `room` or is a shard set, else DIRECT, or URING where the file
 * system takes no O_DIRECT reads. */
int feeder__packed_read_auto(uint64_t file_bytes, uint64_t room, int shards, int direct_ok);
/* Is RLIMIT_NOFILE high enough for `workers` workers reading `ds`, each
 * opening up to `files_per_task` files at once (a tar dataset's readers keep
 * up to FEEDER__TAR_FDS_MAX shards open instead)? 0, or FEEDER_ELIMIT with
 * the message. */
int feeder__check_nofile(const feeder_dataset *ds, int workers, uint32_t files_per_task,
                         char *msg, size_t msglen);

/* ---- the plan: the options, resolved once at start ---- */

/* Every option as a named, typed field. feeder_loader_set writes a value
 * into the field its row of the option table (options.c) names, in the
 * loader's settings; start copies the settings into the plan once
 * (feeder__options_resolve), a RAW packed file's shape filled in. After
 * start code reads the plan, and nothing writes it (the loader holds it
 * const). What start decides from it and the dataset (the decoder in use,
 * the read path, the slots) lives in the job the workers inherit. */
typedef struct feeder__plan {
    /* Which samples make which batch. */
    struct feeder__plan_sampling {
        uint32_t batch_size; /* BATCH_SIZE: the one copy the loader reads */
        int shuffle;         /* the default sampler's (SHUFFLE) */
        uint64_t seed;       /* SEED: order, crops and flips */
        int drop_last;
    } sampling;
    /* The worker processes and how the parent waits for them. */
    struct feeder__plan_workers {
        uint32_t num_workers;     /* 0: the calling thread */
        uint32_t prefetch_factor; /* slots per worker */
        uint32_t split;           /* parts a batch; 0: about 16 samples a part */
        int persistent, in_order;
        int64_t timeout_ms; /* 0: none */
        int poll_ms;
        uint64_t max_restarts;
    } workers;
    /* What a sample goes through: read, decode, transform, its shape. */
    struct feeder__plan_pipeline {
        /* HEIGHT, WIDTH, CHANNELS and LAYOUT, or a RAW packed file's.
         * `layout` is the batches' as asked; the slots' may differ
         * (job.t.layout). */
        uint32_t height, width, channels;
        int layout;
        int pipeline;     /* FEEDER_PIPELINE_* */
        int pipeline_set; /* the user set PIPELINE (a RAW pack takes eval only) */
        int decoder;      /* DECODER as asked; job.t.decoder is the one in use */
        uint32_t resize;
        double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
        uint64_t max_pixels, max_decode_bytes;
        uint32_t max_side;
        uint64_t row_index_bytes; /* FEEDER_OPT_ROW_INDEX_BYTES */
        int error_policy;
        int io;          /* FEEDER_IO_* */
        unsigned queue_depth;
        int packed_read; /* FEEDER_PACKED_READ_*, AUTO still undecided */
        int verify_crc;
        uint64_t batch_room; /* a batch dataset's room a slot, bytes */
    } pipeline;
    /* The GPU layer's settings (device -1: host batches). */
    struct feeder__plan_device {
        int device;
        int pin_mode, gpu_prefetch, dtype, pin_threads, warmup, decode_threads;
        int augment_on_device;
        int64_t gpu_room; /* 0: FEEDER__GPU_ROOM */
        double mean[3], std[3];
    } device;
} feeder__plan;

/* The loader's plan: valid once feeder__host_resolve passed. */
const feeder__plan *feeder__loader_plan(const feeder_loader *ld);

/* ---- start, in the steps the entry points (api/) run ---- */

/* Start's first step: every option read once into the loader's plan (a
 * RAW packed file's shape taken or checked). 0, or FEEDER_ESHAPE (or the
 * error of a start that failed before) with the message set. */
int feeder__host_resolve(feeder_loader *ld);
/* Start's first half: validate the plan and decide what follows from it
 * (read path, decoder in use, slots, tasks), check the limits, start
 * the trace, make and map the slots. `gpu_ok`: device batches can be made
 * (feeder__gpu_probe passed; the float dtypes then need NHWC slots). 0, or
 * an error with the loader's message set. */
int feeder__host_prepare(feeder_loader *ld, int gpu_ok);
/* Start's second half, once the GPU layer is decided: `gpu_decodes` says
 * whether a GPU decoder runs (else the workers decode on the CPU, and
 * `decode_why` says why), `packed_direct` whether RAW records go from the file
 * to the device without the workers. Then the workers start, so their pids
 * exist once feeder_loader_start returns: 0, or the fork's error (the first
 * epoch tries again). */
int feeder__host_commit(feeder_loader *ld, int gpu_decodes, const char *decode_why,
                        int packed_direct);
/* A start that failed after allocating (the GPU layer's): every later start
 * returns rc. */
void feeder__host_start_failed(feeder_loader *ld, int rc);
/* Right after the workers fork: the first epoch's first batches go to them
 * now, begun ahead as a next epoch is (loader/flow.c; the same conditions,
 * bar persistent workers), so the GPU layer's slow start-up steps (slot
 * registrations) overlap the first reads and decodes instead of coming
 * before them. The first feeder_next adopts them; feeder_loader_set_epoch
 * to another epoch, or a state blob, drops them. */
void feeder__host_kick(feeder_loader *ld);

/* ---- the host loader as the entry points and the GPU layer see it ---- */

/* feeder__host_next(try_only = 1): nothing is ready yet (cuda/gpu.h's
 * FEEDER__AGAIN has the same value). Never returned to users. */
#define FEEDER__HOST_AGAIN 100

/* The host loader's feeder_next: lend the next host batch (slot). With
 * try_only, return FEEDER__HOST_AGAIN at once instead of waiting (and, with
 * no workers, instead of loading in the calling thread). Statuses and errors
 * as feeder_next, with the message in the loader's errmsg. */
int feeder__host_next(feeder_loader *ld, feeder_batch **out, int try_only);
/* While the GPU layer's thread waits for its decode threads: hand queued
 * parts to the workers and take in what they finished, for up to ms or
 * until wake_fd (-1: none) is readable (it is not read here), so that the
 * workers and the next host batches do not wait for that wait to end.
 * 0; FEEDER__HOST_AGAIN when there is nothing to serve (no workers, or no
 * epoch running): the caller waits its own way; or an error as
 * feeder__host_next's (a worker's death), with the message in errmsg. */
int feeder__host_serve(feeder_loader *ld, int wake_fd, int ms);
/* Give a host batch's slot back. */
int feeder__host_release(feeder_batch *b);
/* A batch dataset's batch bytes (feeder_batch_payload); FEEDER_EINVAL for
 * another batch. */
int feeder__host_payload(const feeder_batch *b, void **data, size_t *len, void **extra,
                         size_t *extra_len);
/* Why the loader has no resume state (a batch dataset or sampler), or NULL. */
const char *feeder__host_no_resume(const feeder_loader *ld);
/* The loader that lent host batch b (NULL when b is none of its). */
feeder_loader *feeder__host_batch_loader(const feeder_batch *b);
/* feeder_loader_set_epoch's host half: wait for parts in flight, end the epoch. */
int feeder__host_set_epoch(feeder_loader *ld, uint64_t epoch);
/* feeder_loader_destroy's halves: stop and reap the workers (before the GPU
 * layer goes: it may still hold slots), then free the rest. */
void feeder__host_stop(feeder_loader *ld);
void feeder__host_free(feeder_loader *ld);
/* feeder_loader_destroy in a process forked from the loader's, before
 * feeder__host_free: close this process's copies of the workers' channels
 * and pidfds, with no signal and no wait (the workers are the parent's). */
void feeder__host_forget(feeder_loader *ld);
/* Copy the host loader's counters and levels into *st. */
void feeder__host_stats(const feeder_loader *ld, feeder_stats *st);
/* feeder_loader_skipped's entries (at most cap) and total; how many written. */
size_t feeder__host_skipped(const feeder_loader *ld, uint64_t *indices, const char **paths,
                            size_t cap, uint64_t *total);

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
 * feeder__trace_* call takes NULL (common/trace.h). */
struct feeder__trace *feeder__loader_trace(const feeder_loader *ld);
/* HYBRID: the share of each batch (1/1000) the workers decode from the next
 * dispatched batch on. */
void feeder__loader_set_cpu_share(feeder_loader *ld, uint32_t permille);
/* The workers' read + decode + transform time so far (ns, summed over the
 * parts they finished) and, in *workers, how many run (0 before start). */
uint64_t feeder__loader_work_ns(feeder_loader *ld, uint32_t *workers);
/* CPU fallback decoders the GPU layer may use at once (its decode threads,
 * FEEDER_OPT_GPU_DECODE_THREADS at most 4; api/run.c checks the two agree). */
#define FEEDER__FALLBACK_DECODERS 4
/* Decode one sample the way the workers do it (the plan's CPU decoder;
 * errors name index and path): the GPU layer's CPU fallback. `who`: the
 * calling decode thread, 0 .. FEEDER__FALLBACK_DECODERS - 1 (each has a
 * decoder of its own; -EINVAL beyond). */
int feeder__loader_decode_cpu(feeder_loader *ld, unsigned who, const uint8_t *jpeg, size_t len,
                              uint64_t epoch, uint64_t index, uint8_t *dst, char *msg, size_t msglen);
const feeder__job *feeder__loader_job(const feeder_loader *ld);
/* HYBRID's first share of each batch (1/1000) for the workers. */
uint32_t feeder__loader_first_cpu_share(const feeder_loader *ld);
/* FEEDER_OPT_AUGMENT_ON_DEVICE: 1 when the GPU layer is to run the augment
 * plan's steps [*first, nsteps) and its mixes on each device batch (decided
 * at prepare from the option, the plan and gpu_ok), else 0. */
int feeder__loader_augment_device(const feeder_loader *ld, uint32_t *first);
/* The GPU layer took them: from now on (before the workers fork) the host
 * runs only the steps before `first`, and no mix. */
void feeder__host_augment_taken(feeder_loader *ld);

/* What the entry points keep in the loader for the GPU layer: the layer
 * (opaque here: loader/ never calls cuda/), why batches are or are not on
 * the device, and the user's allocators and copy stream. */
struct feeder__gpu;
typedef struct feeder__loader_gpu {
    struct feeder__gpu *gpu;
    char reason[768];
    feeder_allocator dev_alloc, pin_alloc;
    void *copy_stream;
    uint8_t *map;   /* the state's map less what the GPU layer holds back */
    size_t map_cap;
} feeder__loader_gpu;
feeder__loader_gpu *feeder__loader_gpu_part(feeder_loader *ld);
const feeder__loader_gpu *feeder__loader_gpu_view(const feeder_loader *ld);

#endif
