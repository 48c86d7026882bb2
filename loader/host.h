/*
 * loader/'s own header: the loader object and what its files share. Other
 * rooms use loader/loader.h.
 */
#ifndef FEEDER_LOADER_HOST_H
#define FEEDER_LOADER_HOST_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/trace.h"
#include "loader/loader.h"
#include "sampler/sampler.h"

/* Parts a worker may have outstanding. */
#define FEEDER__WORKER_QUEUE 2
/* Entries of the option table (options.c). */
#define FEEDER__NOPTS 49

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_LENT };

typedef struct slot_state {
    int state;
    uint64_t epoch;
    uint64_t batch;
    uint32_t count;
    uint32_t parts_left;
    uint32_t skipped;
    uint32_t dropped; /* FEEDER_ON_ERROR_DROP: samples marked (label -1) to leave out */
    int32_t status;
    char errmsg[FEEDER__ERRMSG_LEN];
    feeder_batch pub;
    feeder_loader *ld;
    feeder_mix *mix; /* batch entries when job.aug mixes batches, made at first use */
    feeder__fields_view fview; /* a fields dataset's lent batch (feeder_batch.fields_) */
    /* A batch dataset's batch: the bytes its worker wrote in the room, and
     * its extra descriptor (taken from the worker's result; -1 none),
     * mapped while the batch is lent. */
    size_t used;
    int extra_fd;
    size_t extra_bytes;
    void *extra_map;
} slot_state;

typedef struct worker {
    pid_t pid;
    int pidfd;
    int chan;
    unsigned outstanding;
    int ready;
    int broken; /* a send failed: take no more tasks; its death is read from the channel */
    /* The parts sent and not yet answered, oldest first: the oldest is the
     * one a dying worker was loading; all are re-sent when it is restarted. */
    feeder__task_msg inflight[FEEDER__WORKER_QUEUE];
} worker;

typedef struct task_queue {
    feeder__task_msg *v;
    size_t cap, head, len;
} task_queue;

/* FEEDER_OPT_SPLIT 0: samples per task the loader aims at. */
#define FEEDER__TASK_SAMPLES 16
/* FEEDER_OPT_GPU_ROOM 0: bytes of slot room per sample for the GPU decoders'
 * encoded files (at least a decoded sample). Shuffled tasks of 16 from an
 * ImageNet-sized set (400-800 px, quality 90-98, 133 KB mean) overflowed a
 * 224x224x3 room for 1.5 % of the files, 192 KiB for 0.3 % (docs/ARCHITECTURE.md). */
#define FEEDER__GPU_ROOM ((int64_t)192 * 1024)
/* num_workers 0: samples whose files the calling thread opens at once. */
#define FEEDER__INLINE_FILES 64u

/* The worker processes (pool.c; start.c sizes them, flow.c reaps deaths'
 * epochs). */
typedef struct loader_pool {
    int nworkers;
    worker *workers;
    int running; /* worker processes are up */
    /* A worker reported it could not start (mapping the slots, its setup,
     * worker_init): that error, for good; workers are not forked again. */
    int workers_failed;
    char workers_why[FEEDER__ERRMSG_LEN + 64];
    feeder__worker_ctx inline_ctx; /* num_workers 0: the calling thread's */
    int inline_ready;
    /* Worker deaths of this epoch, for the error when they pass max_restarts. */
    uint64_t epoch_deaths;
    char deaths[2048];
} loader_pool;

/* The batch slots: one memfd, mapped at start (start.c, map_slots). */
typedef struct loader_shm {
    uint8_t *mem;
    size_t shm_bytes;   /* the memfd: the slots (slots_bytes), then the live page */
    size_t slots_bytes;
    feeder__live *live; /* in mem, after the slots (worker/worker.h) */
    uint32_t nslots;
    slot_state *slots;
} loader_shm;

/* The epochs' flow (flow.c, deliver.c; resume.c reads and sets its resume
 * blob): the order, which batch has which slot, what was delivered. */
typedef struct loader_flow {
    uint32_t parts; /* parts a batch is cut into (start.c decides) */
    int in_epoch;
    int have_epoch; /* an epoch has run: the next default is epoch + 1 */
    uint64_t epoch;
    int next_set;
    uint64_t next_epoch;
    uint64_t *order;
    uint64_t order_len, order_cap;
    uint64_t nbatches;
    /* A batch sampler's epoch (feeder_sampler_create_batches): batch b is
     * order[boff[b] .. boff[b + 1]) and goes to worker bworker[b] (-1: any).
     * NULL for every other sampler, whose batches are BATCH_SIZE long. */
    uint64_t *boff;
    int32_t *bworker;
    uint64_t dispatched; /* next batch number to give a slot (delivered ones are skipped) */
    /* Delivery, kept by mark_delivered() alone: how many batches of the
     * epoch were handed to the user (as a batch or as its error), which ones
     * (bit b = batch b; with in_order 0 they need not be a prefix), and the
     * lowest one not yet delivered (the next in order). The state blob is
     * made from these. */
    uint64_t delivered;
    uint8_t *done_map;
    size_t done_cap;
    uint64_t next_in_order;
    /* A resume blob (feeder_loader_state_load), checked again at start and
     * applied by the first begin_epoch. */
    uint8_t *resume;
    size_t resume_len;
    feeder__state resume_st; /* map points into resume */
    uint64_t epoch_t0;
    int first_seen;
    task_queue q;
    /* The next epoch, begun before the user asks for it (flow.c,
     * run_ahead): once every batch of this epoch has a slot, free slots take
     * the next epoch's first batches, so its first batch is waiting when the
     * user asks and the workers never idle between epochs. Persistent
     * workers and samplers that are pure functions of the epoch only. */
    struct {
        int on;
        uint64_t epoch;
        uint64_t *order;
        uint64_t order_len, order_cap;
        uint64_t nbatches;
        uint64_t dispatched; /* batches of that epoch given a slot */
        int tried;           /* this epoch already tried to begin the next */
    } ahead;
    int64_t status_batch; /* the batch whose error the last host_next returned, or -1 */
    uint8_t *mix_scratch; /* one sample for job.aug's batch mixes, made at first use */
} loader_flow;

/* What start decided beyond the plan and the job, and why (what the user
 * can ask: feeder_loader_io_backend, feeder_loader_decoder). */
typedef struct loader_decided {
    const char *io_backend;
    char io_reason[512];
    char packed_read_why[256]; /* why FEEDER_PACKED_READ_AUTO did not map the file */
    char decoder_reason[512];  /* why job.t.decoder is not the DECODER option */
} loader_decided;

/* The GPU layer's part. */
typedef struct loader_gpu_part {
    /* What the entry points keep here for the GPU layer (api/): loader/
     * stores it and never calls cuda/. layer.gpu is NULL when batches stay
     * on the host. */
    feeder__loader_gpu layer;
    /* The GPU layer's CPU fallback (fallback.c), one decoder per decode
     * thread (a decoder is one thread's), each made on first use. */
    feeder__decoder *fallback_dec[FEEDER__FALLBACK_DECODERS];
    /* FEEDER_OPT_AUGMENT_ON_DEVICE: the GPU layer may run job.aug's steps
     * [aug_first, nsteps) and its mixes (resolve_decoder); once it took them,
     * job.aug keeps only the workers' steps (feeder__host_augment_taken). */
    int aug_device;
    uint32_t aug_first;
} loader_gpu_part;

/* The loader: what the user gave and set (options.c), the plan and job
 * start made of it (start.c), then a part per concern, each written by the
 * files its comment names. */
struct feeder_loader {
    feeder_dataset *ds;
    feeder_sampler *sampler;     /* borrowed, or own_sampler */
    feeder_sampler *own_sampler; /* made from SHUFFLE/SEED when none was given */
    /* The options as set or defaulted, each in the plan field the option
     * table names (options.c alone writes and reads them); start copies
     * them into `plan`. */
    feeder__plan settings;
    uint8_t given[FEEDER__NOPTS]; /* set by the user (a RAW packed file fills the rest of its shape) */
    feeder_worker_init_fn init;
    void *init_user;
    feeder_fork_hooks hooks; /* feeder_loader_set_fork_hooks; zero: none */
    char *trace_path;        /* feeder_loader_set_trace, copied */
    /* The process that created the loader: its workers, channels and slots
     * are that process's, and a process forked from it may not drive them. */
    pid_t owner;

    int started;
    int start_failed; /* a start that failed after allocating: its error, for good */
    /* Written once, by feeder__host_resolve; read-only everywhere else. */
    const feeder__plan plan;
    feeder__job job; /* what the workers inherit */
    loader_decided decided;

    loader_shm shm;
    loader_pool pool;
    loader_flow flow;
    loader_gpu_part gpu;

    feeder__trace *trace; /* made at start when trace_path is set */
    uint64_t prepare_ns;  /* when feeder__host_prepare began (its trace span) */
    int tr_startup;       /* the trace's "loader start-up" track */
    char errmsg[2048];

    pthread_mutex_t stats_lock;
    feeder_stats stats;
    /* Under stats_lock: the first distinct bad samples the error policy set
     * aside (feeder_loader_skipped), in the order their results came. */
    uint64_t bad[FEEDER_SKIPPED_MAX];
    uint32_t nbad;
};

/* ---- options.c, plan.c ---- */

/* The option values set or defaulted at creation (a drawn SEED). */
void feeder__options_init(feeder_loader *ld);
/* The plan the options make now (set or default): every option read
 * once, a RAW packed file's shape taken for what the user did not set. 0,
 * or FEEDER_ESHAPE with the options' own shape in p->pipeline when a shape
 * option the user set disagrees with the file (start names it). Start
 * keeps it (feeder__host_resolve); the resume state describes a loader not
 * yet started with it. */
int feeder__options_resolve(const feeder_loader *ld, feeder__plan *p);
/* A resume blob's seed, taken when the user set none (the run being
 * resumed drew it): as if set, before start. */
void feeder__options_adopt_seed(feeder_loader *ld, uint64_t seed);
/* The transform the plan asks for: what start resolves into job.t (the
 * decoder and the slots' layout then refined) and what the saved state
 * records. */
void feeder__plan_transform(const feeder__plan *p, feeder__transform *t);
/* The sampler SHUFFLE and SEED pick when none was given. */
int feeder__loader_default_sampler(const feeder_loader *ld, const feeder__plan *p,
                                   feeder_sampler **out);

/* ---- pool.c ---- */

/* Add a loader's descriptor to the list every new worker closes (a user
 * dataset's worker closes only these); feeder__pool_close_fd takes it off. */
void feeder__pool_register_fd(int fd);
void feeder__pool_close_fd(int *fd);
int feeder__pool_spawn(feeder_loader *ld);
void feeder__pool_stop(feeder_loader *ld, int hard);
/* In a process forked from the loader's: close this process's copies of the
 * workers' descriptors; no signal, no wait, the slots' states untouched. */
void feeder__pool_forget(feeder_loader *ld);
int feeder__pool_send_task(feeder_loader *ld, worker *w, const feeder__task_msg *t);
/* Wait up to ms for the workers' results and deaths, or until wake_fd
 * (-1: none) is readable; 0 or the error that ends the epoch (a death past
 * max_restarts). */
int feeder__pool_wait(feeder_loader *ld, int ms, int wake_fd);
/* No batch within timeout_ms: name the worker holding the batch waited for
 * (FEEDER_ETIMEDOUT), or with max_restarts kill and restart it as after a
 * death (0: wait again; FEEDER_EWORKER past the limit). */
int feeder__pool_timed_out(feeder_loader *ld, int64_t timeout_ms);
/* Parts being dropped (a settle) that no worker has finished within
 * timeout_ms: every worker still holding one is stalled, killed and handled
 * as a death (restarted under max_restarts, its parts re-queued); 0, or
 * FEEDER_EWORKER past the limit. */
int feeder__pool_settle_timed_out(feeder_loader *ld, int64_t timeout_ms);
/* Account a part's result and mark its slot ready when it was the last. */
void feeder__pool_complete_part(feeder_loader *ld, const feeder__result_msg *r);

/* The sampler's order of `epoch`'s batches: the running epoch's, or the
 * one run ahead. */
static inline const uint64_t *feeder__flow_order(const feeder_loader *ld, uint64_t epoch)
{
    return ld->flow.ahead.on && epoch == ld->flow.ahead.epoch ? ld->flow.ahead.order : ld->flow.order;
}

/* Where batch b of `epoch` begins in its order: BATCH_SIZE apart, or where
 * a batch sampler put it (never run ahead, so always the running epoch). */
static inline uint64_t feeder__flow_batch_first(const feeder_loader *ld, uint64_t b)
{
    return ld->flow.boff ? ld->flow.boff[b] : b * (uint64_t)ld->plan.sampling.batch_size;
}

/* Whether the dataset makes whole batches (feeder_dataset_create_batches). */
static inline int feeder__batch_dataset(const feeder_loader *ld)
{
    return ld->ds->bcb.get != NULL;
}

/* ---- deliver.c ---- */

/* A batch dataset's extra descriptor of the slot's last batch, unmapped and
 * closed (the slot is filled again, or the loader destroyed). */
void feeder__slot_forget_extra(slot_state *ss);
/* Lend the ready slot's batch: 0 and *out, or the batch's error (the slot
 * then to be freed by the caller, which counted the delivery). */
int feeder__deliver_slot(feeder_loader *ld, slot_state *ss, feeder_batch **out);

/* ---- resume.c ---- */

/* The epoch the next begin_epoch starts. */
uint64_t feeder__resume_next_epoch(const feeder_loader *ld);
void feeder__resume_drop(feeder_loader *ld);
/* Decode a blob and compare it with the loader: 0 and *st (st->map points
 * into buf), or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message set. */
int feeder__resume_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st);

#endif
