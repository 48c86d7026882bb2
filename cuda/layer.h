/*
 * cuda/'s own header: the layer's state and what its files share (mem.c:
 * device selection, memory, errors; enqueue.c: one batch's work on the copy
 * stream; pin.c: the PIN_COPY threads; ring.c: the ring of device buffers,
 * next and release; start.c: start and destroy). Other rooms use cuda/gpu.h.
 */
#ifndef FEEDER_CUDA_LAYER_H
#define FEEDER_CUDA_LAYER_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "common/common.h"
#include "collate/fields.h"
#include "cuda/gpu.h"
#include "cuda/gather.h"
#include "cuda/normalize.h"
#include "cuda/augment.h"
#include "augment/augment.h"
#include "cuda/gpu_decode.h"
#include "feeder_cuda.h"
#include "dataset/pack.h"
#include "common/nvtx.h"
#include "common/trace.h"

#define ENTRY_MAGIC 0xFEEDC0DAu
#define CHUNK_ALIGN 4096
/* HYBRID gives the workers more only while the decode threads are this busy
 * (1/1000 of each one's time, in nvJPEG's calls): the GPU side is the bound. */
#define FEEDER__HYBRID_BUSY_PM 950u
/* ... and while the workers spend less than this share of their time
 * (1/1000 each, smoothed) reading, decoding and transforming: with more,
 * what they take from the engines delays the images only they decode. */
#define FEEDER__HYBRID_WORK_PM 750u
/* FEEDER_OPT_GPU_DECODE_THREADS: the most, and what 0 (automatic) gives. */
#define FEEDER__DEC_LANES_MAX FEEDER__GPU_DECODE_THREADS_MAX
#define FEEDER__DEC_LANES_AUTO 2
/* An nvJPEG call that lasts this long has stopped for good (the hardware
 * backend's hang, docs/RELIABILITY.md): feeder_next fails instead of waiting
 * (FEEDER_NVJPEG_STUCK_MS overrides it), and destroy leaves the thread. */
#define FEEDER__NVJPEG_STUCK_MS 10000u

enum { E_FREE = 0, E_PENDING, E_LENT };
/* How a shuffled RAW packed batch reaches the device (FEEDER_PACKED_GATHER). */
enum { FEEDER__GATHER_KERNEL = 0, FEEDER__GATHER_BATCH, FEEDER__GATHER_COPIES };
/* PIN_COPY progress of an entry, under gpu->lock. */
enum { PIN_IDLE = 0, PIN_QUEUED, PIN_ENQUEUED };

typedef struct ring_entry {
    uint32_t magic; /* first: feeder__gpu_owns() tells entries from host slots */
    feeder__gpu *gpu;
    int state;
    feeder_batch pub;
    feeder_batch *host; /* host batch whose slot this entry still reads, or NULL */
    uint8_t *stage;   /* device uint8 batch (== dev for uint8 output) */
    void *dev;        /* device output batch */
    int64_t *dev_labels;
    uint8_t *pinned;  /* PIN_COPY: data then labels */
    int64_t *labels;  /* host copies lent with the batch */
    uint64_t *gather_host, *gather_dev; /* RAW packed, gather kernel: record offsets */
    uint64_t *indices;
    cudaEvent_t start_ev, h2d_ev, copy_ev, release_ev;
    cudaEvent_t dec_ev; /* GPU decoders: the copies are done, the decode starts */
    int decoded;        /* this batch's timing has a decode part (dec_ev..h2d_ev) */
    int wait_release; /* the copy stream must wait on release_ev first */
    int used;         /* h2d_ev has been recorded */
    int timed;        /* start_ev..h2d_ev not yet added to the stats */
    int tr_norm;      /* trace: the normalise span still waits for copy_ev */
    int64_t tr_epoch, tr_batch; /* trace: the batch the recorded events belong to (pub is
                                   rewritten before they are read at reuse) */
    uint32_t count;
    size_t in_bytes;   /* pixel bytes copied to the device */
    /* PIN_COPY job, under gpu->lock */
    int pin;
    int slot_done;          /* the pin threads are done with the host slot */
    unsigned chunks_taken, chunks_done;
    const uint8_t *src;     /* slot data */
    const int64_t *src_labels;
    int err;                /* a CUDA error of the pin thread that enqueued */
    char errmsg[1024];
    int sample_err;         /* decode thread: err is a sample's (the batch fails, not the layer) */
    int gpu_part;           /* decode thread: nvJPEG decoded some of the batch */
    int lane;               /* decode thread: the lane that took the batch (its trace track) */
    /* Fields datasets: the device copy of the slot is `stage`; `meta` a
     * host copy of its control block, lengths and offsets (slot_bytes, only
     * those parts written); fview the lent batch's fields_. */
    uint8_t *meta;
    feeder__fields_view fview;
    /* The augment kernels' work for this batch (cuda/augment_params.c), drawn
     * in the loader's thread before the batch is enqueued: per device step
     * and sample the parameters (pinned; step k's at [k * count]), per step
     * which positions run (bits 0-3) and which of them sum for contrast
     * (bits 4-7); the mix's draw. mix: batch->mix (count entries). */
    feeder__daug_px *aug_px;
    float *aug_kw; /* blur steps: each sample's kernel, FEEDER__DAUG_KMAX floats */
    uint8_t aug_mask[FEEDER_AUGMENT_MAX_STEPS]; /* a blur step: bit 0, it runs */
    feeder__mix_draw mixd;
    feeder_mix *mix;
} ring_entry;

/* A GPU decoder's decode thread and what only it uses (cuda/decode_thread.c):
 * its nvJPEG decoder, the stream of its batches' copies, decode and resize,
 * the scratch buffers' last-read events, the images of the batch at hand,
 * and its trace tracks. Lane 0's decoder is gpu->dec (made on the start-up
 * thread, taken by the loader's thread); the others make theirs on their
 * own thread once lane 0's is made, and take no batch until then. */
typedef struct dec_lane {
    feeder__gpu *gpu;
    int id;
    feeder__gpu_decoder *dec; /* lanes > 0 */
    feeder__gpu_decoder *dec0; /* lane 0: gpu->dec as it was when the batch was taken */
    cudaStream_t stream;      /* gpu->stream with one lane, else the lane's own */
    cudaEvent_t read_ev[FEEDER__GPU_SCRATCH];
    cudaEvent_t done_ev;      /* own stream: the batch's decode is done (the tail waits) */
    feeder__gpu_image *imgs;
    uint32_t *refused;
    uint8_t *fb;              /* one decoded sample of the CPU fallback */
    int tr_submit, tr_dec;
    char why[300];            /* lanes > 0: why the lane does not decode */
    /* The watchdog's view (any thread): when the lane's nvJPEG call began
     * (0: in none) and its batch; the thread has returned. */
    _Atomic uint64_t call_t0; /* stamped by the decoder (feeder__gpu_decoder_watch) */
    atomic_uint_fast64_t call_batch, call_epoch;
    atomic_int exited;
} dec_lane;

typedef struct item {
    int entry; /* >= 0: a batch; -1: a status */
    int rc;
    int64_t batch;  /* a status: the failed batch, or -1 */
    uint64_t epoch;
    char msg[1024];
} item;

struct feeder__gpu {
    feeder__gpu_config cfg;  /* host.ctx and the slot facts are the loader's, borrowed */
    char errmsg[1024];       /* the last failed call's message (feeder__gpu_errmsg) */
    feeder_stats st;         /* the layer's counters and levels (feeder__gpu_stats) */
    uint32_t cpu_share;      /* HYBRID: the workers' share the layer last set (1/1000) */
    cudaStream_t stream;
    int own_stream;
    const feeder__slot_layout *l; /* cfg.layout */
    /* Slots registered so far, from slot 0 on (cuda/register.c); the thread
     * that registers all but the first. */
    atomic_uint reg_done;
    atomic_int reg_stop;
    /* Threads enqueuing a batch's copies now (feeder__cuda_copies_begin):
     * the registration thread starts no registration meanwhile. */
    atomic_int copying;
    pthread_t reg_thread;
    int reg_thread_live;
    char reg_note[80];
    int pin_mode; /* cfg.pin_mode, or the mode the layer fell back to */
    int depth;    /* cfg.depth, and one buffer more per extra decode lane */
    ring_entry *ring; /* depth device buffers */
    size_t in_bytes, out_bytes, out_sample_bytes;
    int held;      /* host batches held by entries */
    item *fifo;
    int head, len; /* FIFO of depth + 1 items */
    int paused;    /* a status is queued: pull nothing until it is taken */
    int fatal;     /* a CUDA error: every later call fails with it */
    char fatal_msg[512];
    char describe[640];
    int tr_start; /* trace track of the start-up steps and slot registrations */
    int tr_nvstart; /* trace track of the decoders' making (their threads) */
    uint64_t device_bytes, pinned_bytes;
    uint64_t h2d_ns; /* copy times harvested at reuse, not yet in the stats */

    /* GPU decoders (NVJPEG, HYBRID) */
    feeder__gpu_decoder *dec;      /* NULL until make_decoder's is taken (decoder_ready) */
    feeder__gpu_decoder *dec_made; /* made on dec_thread */
    pthread_t dec_thread;
    int dec_thread_live;
    atomic_int dec_state;          /* 0 being made, 1 made, -1 failed */
    int decodes;
    char dec_why[300];
    char dec_err[300];             /* dec_thread's message */
    char pin_note[300], pack_note[300];
    dec_lane lanes[FEEDER__DEC_LANES_MAX];
    int nlanes;           /* decode threads (FEEDER_OPT_GPU_DECODE_THREADS) */
    atomic_int lanes_live; /* of them, those with a decoder (HYBRID's busy share is per lane) */
    int lanes_settled;     /* lanes > 0 whose decoder is made or failed, under lock */
    /* Each batch's tail (labels, events, augment, normalise) goes on the
     * copy stream one batch at a time: the augment buffers are used in
     * stream order. */
    pthread_mutex_t tail_lock;
    /* With several lanes, one batched hardware decode at a time: two at once
     * hung nvJPEG (docs/RELIABILITY.md); the parse and set-up still overlap. */
    pthread_mutex_t engine_lock;
    uint64_t stuck_ns;    /* FEEDER__NVJPEG_STUCK_MS, or FEEDER_NVJPEG_STUCK_MS's */
    int wedged;           /* a lane's call passed stuck_ns: the layer failed for good */
    uint64_t dec_ns;      /* decode times harvested, not yet in the stats */
    uint64_t gpu_decoded, gpu_fallback; /* not yet in the stats */
    int starved;          /* the last pull found no finished host batch, or waited for one */
    /* HYBRID's second signal: the decode threads' time in nvJPEG's batch
     * calls (they add, the loader's thread reads), and the busy share the
     * balance last measured from it (1/1000, smoothed) with its last reading. */
    atomic_uint_fast64_t dec_busy_ns;
    uint64_t bal_busy_ns, bal_ns;
    uint32_t bal_busy_pm;
    /* Its third: the workers' time (host op work_ns) at the last step, and
     * their busy share per worker (1/1000, smoothed). */
    uint64_t bal_work_ns;
    uint32_t bal_work_pm;
    int decode_thread;    /* the GPU decoders' batches go through the decode threads (lanes) */
    /* An eventfd the lanes write when they hand an entry back: the loader's
     * thread, waiting for one, serves the host loader until it is readable
     * (ring.c, wait_decoded); -1 without lanes (or without an eventfd). */
    int wake_fd;
    /* A failure of that serving while a status was already queued (paused):
     * it becomes the next status once that one is taken (prefetch). */
    int serve_rc;
    char serve_msg[512];

    /* RAW packed files: records copied from the file's registered mapping */
    const struct feeder__pack *pack;
    int pack_registered;
    const uint8_t *pack_dev;  /* the device's view of the mapping (gather kernel) */
    int pack_aligned16;       /* every record offset a multiple of 16 */
    int gather_mode;          /* FEEDER__GATHER_* */
    void **run_dst;           /* one batch's runs of records (list_runs) */
    const uint8_t **run_src;
    size_t *run_len;

    /* PIN_COPY threads */
    pthread_t *thr;
    int nthr;
    pthread_mutex_t lock;
    pthread_cond_t cv_work, cv_done;
    int *jobs; /* FIFO of entry ids waiting for or under copy */
    int jhead, jlen;
    int stop;
    uint64_t pin_ns; /* under lock */

    /* FEEDER_OPT_AUGMENT_ON_DEVICE (cuda/augment_params.c): the plan's copy,
     * its device steps [aug_first, aug.nsteps) and mixes; buffers every
     * batch uses in stream order: the parameters, the contrast sums, a
     * copy of the batch the mixes read the partners from, the blur's
     * kernels and float plane. */
    int aug_on;
    feeder__augment_plan aug;
    uint32_t aug_first;
    feeder__daug_px *aug_dev;
    unsigned long long *aug_sums;
    uint8_t *aug_tmp;
    float *aug_kw_dev, *aug_plane; /* blur steps: the kernels; one float plane of the batch */

        /* Trace (loader/trace.h): GPU times are mapped to the host clock through
     * tr_ref, an event known to have passed at host time tr_ref_ns. */
    feeder__trace *tr;
    int tr_copy; /* the copy stream's track */
    cudaEvent_t tr_ref;
    uint64_t tr_ref_ns;
};

typedef struct devguard {
    int prev, changed;
} devguard;

int feeder__cuda_fail(feeder__gpu *gpu, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int feeder__cuda_host_release(feeder__gpu *gpu, feeder_batch *host);
void feeder__cuda_set_cpu_share(feeder__gpu *gpu, uint32_t permille);
void feeder__cuda_stats_add(feeder__gpu *gpu, const feeder_stats *d);
const char *feeder__cuda_errtext(cudaError_t e);
cudaError_t feeder__cuda_enter(const feeder__gpu *gpu, devguard *d);
void feeder__cuda_leave(const devguard *d);
void *feeder__cuda_dev_alloc(feeder__gpu *gpu, size_t bytes, cudaError_t *err);
void feeder__cuda_dev_free(feeder__gpu *gpu, void *p);
void *feeder__cuda_pin_alloc(feeder__gpu *gpu, size_t bytes, cudaError_t *err);
void feeder__cuda_pin_free(feeder__gpu *gpu, void *p);
void feeder__cuda_harvest(feeder__gpu *gpu, ring_entry *entry, uint64_t *h2d_ns);
/* A batch's head (on stream s: the release wait, start_ev) and its tail (on
 * the copy stream: labels, h2d_ev, augment, normalise, copy_ev), in
 * cuda/enqueue.c for every path. */
cudaError_t feeder__cuda_batch_begin(ring_entry *entry, cudaStream_t s);
cudaError_t feeder__cuda_batch_end(feeder__gpu *gpu, ring_entry *entry, const int64_t *labels, int decoded,
                                  int64_t epoch, int64_t batch);
cudaError_t feeder__cuda_enqueue(feeder__gpu *gpu, ring_entry *entry, const uint8_t *src,
                                 const int64_t *labels);
void feeder__cuda_trace_copies(feeder__gpu *gpu, ring_entry *entry, int h2d);
cudaError_t feeder__cuda_enqueue_direct(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host);
/* A fields dataset's batch: each field's used bytes, lengths and offsets. */
cudaError_t feeder__cuda_enqueue_fields(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host);
int feeder__cuda_enqueue_decode(dec_lane *ln, ring_entry *entry, feeder_batch *host, int *sample_err,
                                char *msg, size_t msglen);
void *feeder__cuda_pin_thread(void *arg);
void *feeder__cuda_decode_thread(void *arg);
/* The first decode lane whose nvJPEG call has lasted over `limit_ns` at
 * `now`, or -1. Any thread. */
int feeder__cuda_stuck_lane(const feeder__gpu *gpu, uint64_t now, uint64_t limit_ns);
/* A slice of the watchdog's period: a quarter of stuck_ns, at most 100 ms
 * (stuck_ns is at least 1 ms, start.c, so at least 250 us). */
uint64_t feeder__cuda_slice_ns(const feeder__gpu *gpu);
/* Wait on cv_done (gpu->lock held) for a slice of the watchdog's period. */
void feeder__cuda_wait_done_slice(feeder__gpu *gpu);
/* Destroy: stop the decode lanes and join them; a lane still in an nvJPEG
 * call after max(stuck_ns, 10 s) is left running (detached). 1 when one
 * was: the layer's memory must then stay as it is (it leaks). */
int feeder__cuda_lanes_join(feeder__gpu *gpu);
int feeder__cuda_decoder_ready(feeder__gpu *gpu, int wait);
void feeder__cuda_rebalance(feeder__gpu *gpu, const ring_entry *entry);
int feeder__cuda_setup_fail(feeder__gpu *gpu, char *why, size_t whylen, const char *what, cudaError_t e);
int feeder__cuda_pin_quiesce(feeder__gpu *gpu);
/* PIN_REGISTER: register slot 0 (on failure, fall back to pin copy, or
 * pageable with a GPU decoder, and say why in pin_note); then, once the ring
 * is allocated, the other slots on a thread of their own. cuda/register.c. */
void feeder__cuda_register_first(feeder__gpu *gpu);
/* Around the calls that enqueue a batch's copies. A cudaHostRegister holds
 * the driver for the 20-40 ms it pins a slot, and every CUDA call of any
 * thread waits for it: a batch enqueued with one call per run of samples
 * (17 for a GPU decoder's first batch) waited for one registration after
 * another, 0.5-0.7 s at 15 workers (docs/ARCHITECTURE.md, "The first
 * batch"). Between begin and end no registration starts, so the copies wait
 * for at most the one in flight. */
void feeder__cuda_copies_begin(feeder__gpu *gpu);
void feeder__cuda_copies_end(feeder__gpu *gpu);
void feeder__cuda_register_rest(feeder__gpu *gpu);
/* Stop that thread and unregister every slot registered. */
void feeder__cuda_unregister_slots(feeder__gpu *gpu);
/* FEEDER_OPT_AUGMENT_ON_DEVICE (cuda/augment_params.c). start: copy the
 * plan and allocate what the kernels use (after the ring); free: the
 * reverse, after the stream is idle. draw: in the loader's thread, once the
 * entry is settled, the batch's draws (and batch->mix; without device
 * augment, a copy of the host batch's mix). enqueue: the parameters' copy
 * and the kernels, on the copy stream after the batch's pixels. */
int feeder__cuda_augment_start(feeder__gpu *gpu, char *why, size_t whylen);
void feeder__cuda_augment_free(feeder__gpu *gpu);
int feeder__cuda_augment_draw(feeder__gpu *gpu, ring_entry *entry, const feeder_batch *host);
cudaError_t feeder__cuda_augment_enqueue(feeder__gpu *gpu, ring_entry *entry);

#endif
