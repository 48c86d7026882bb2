/*
 * The loader: options, start, the epoch's task flow, delivery in order and
 * failure handling. Everything here runs in the user's process; the worker
 * side is worker.c.
 *
 * Task flow. A batch takes a free slot; the loader writes the batch's dataset
 * indices into the slot and cuts the batch into `split` parts (default: one
 * per worker) so every worker works on the first batch at once (time to
 * first batch is one part's work, not one batch's). Parts wait in a FIFO and
 * go to whichever worker has fewer than FEEDER__WORKER_QUEUE parts
 * outstanding, so a slow worker never holds the others back. A slot becomes
 * ready when all its parts have reported; delivery follows the sampler's order
 * (in_order) or completion order.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loader/loader.h"
#include "common/nvtx.h"
#include "dataset/pack.h"
#include "common/trace.h"

#define FEEDER__WORKER_QUEUE 2

/* ---- options ---- */

typedef struct opt_desc {
    int opt;
    const char *name;
    int is_double;
    double min, max, def;
} opt_desc;

static const opt_desc OPTS[] = {
    {FEEDER_OPT_BATCH_SIZE, "batch_size", 0, 1, 1 << 20, 64},
    {FEEDER_OPT_SHUFFLE, "shuffle", 0, 0, 1, 0},
    {FEEDER_OPT_SEED, "seed", 0, (double)INT64_MIN, (double)INT64_MAX, 0},
    {FEEDER_OPT_DROP_LAST, "drop_last", 0, 0, 1, 0},
    {FEEDER_OPT_NUM_WORKERS, "num_workers", 0, 0, 1024, 0},
    {FEEDER_OPT_PREFETCH_FACTOR, "prefetch_factor", 0, 1, 64, 2},
    {FEEDER_OPT_PERSISTENT_WORKERS, "persistent_workers", 0, 0, 1, 0},
    {FEEDER_OPT_IN_ORDER, "in_order", 0, 0, 1, 1},
    {FEEDER_OPT_TIMEOUT_MS, "timeout_ms", 0, 0, 86400000.0 * 365, 0},
    {FEEDER_OPT_PIPELINE, "pipeline", 0, 0, 2, FEEDER_PIPELINE_EVAL},
    {FEEDER_OPT_HEIGHT, "height", 0, 1, 65535, 224},
    {FEEDER_OPT_WIDTH, "width", 0, 1, 65535, 224},
    {FEEDER_OPT_RESIZE, "resize", 0, 1, 65535, 256},
    {FEEDER_OPT_LAYOUT, "layout", 0, 0, 1, FEEDER_LAYOUT_NHWC},
    {FEEDER_OPT_DECODER, "decoder", 0, 0, 3, FEEDER_DECODER_ROI},
    {FEEDER_OPT_IO, "io", 0, 0, 2, FEEDER_IO_AUTO},
    {FEEDER_OPT_ERROR_POLICY, "error_policy", 0, 0, 1, FEEDER_ON_ERROR_FAIL},
    {FEEDER_OPT_MAX_PIXELS, "max_pixels", 0, 0, 1e15, 178956970},
    {FEEDER_OPT_POLL_MS, "poll_ms", 0, 1, 60000, 100},
    {FEEDER_OPT_SPLIT, "split", 0, 0, 1 << 20, 0},
    {FEEDER_OPT_QUEUE_DEPTH, "queue_depth", 0, 4, 32768, 256},
    {FEEDER_OPT_DEVICE, "device", 0, -1, 1023, -1},
    {FEEDER_OPT_PIN_MODE, "pin_mode", 0, 0, 2, FEEDER_PIN_REGISTER},
    {FEEDER_OPT_GPU_PREFETCH, "gpu_prefetch", 0, 2, 64, 2},
    {FEEDER_OPT_DTYPE, "dtype", 0, 0, 3, FEEDER_DTYPE_UINT8},
    {FEEDER_OPT_PIN_THREADS, "pin_threads", 0, 1, 64, 4},
    {FEEDER_OPT_MEAN_R, "mean_r", 1, -1e6, 1e6, 0.485},
    {FEEDER_OPT_MEAN_G, "mean_g", 1, -1e6, 1e6, 0.456},
    {FEEDER_OPT_MEAN_B, "mean_b", 1, -1e6, 1e6, 0.406},
    {FEEDER_OPT_STD_R, "std_r", 1, 1e-9, 1e6, 0.229},
    {FEEDER_OPT_STD_G, "std_g", 1, 1e-9, 1e6, 0.224},
    {FEEDER_OPT_STD_B, "std_b", 1, 1e-9, 1e6, 0.225},
    {FEEDER_OPT_PACKED_READ, "packed_read", 0, 0, 2, FEEDER_PACKED_READ_MMAP},
    {FEEDER_OPT_VERIFY_CRC, "verify_crc", 0, 0, 1, 0},
    {FEEDER_OPT_MAX_RESTARTS, "max_restarts", 0, 0, 1000000, 0},
    {FEEDER_OPT_SCALE_MIN, "scale_min", 1, 1e-6, 1, 0.08},
    {FEEDER_OPT_SCALE_MAX, "scale_max", 1, 1e-6, 1, 1.0},
    {FEEDER_OPT_RATIO_MIN, "ratio_min", 1, 1e-3, 1e3, 3.0 / 4.0},
    {FEEDER_OPT_RATIO_MAX, "ratio_max", 1, 1e-3, 1e3, 4.0 / 3.0},
    {FEEDER_OPT_FLIP_PROB, "flip_prob", 1, 0, 1, 0.5},
};
#define NOPTS ((int)(sizeof(OPTS) / sizeof(OPTS[0])))

static int opt_find(int opt)
{
    for (int i = 0; i < NOPTS; i++)
        if (OPTS[i].opt == opt)
            return i;
    return -1;
}

int feeder_option_bounds(feeder_option opt, double *min, double *max)
{
    int i = opt_find(opt);
    if (i < 0)
        return FEEDER_EINVAL;
    if (min)
        *min = OPTS[i].min;
    if (max)
        *max = OPTS[i].max;
    return 0;
}

const char *feeder_option_name(feeder_option opt)
{
    int i = opt_find(opt);
    return i < 0 ? NULL : OPTS[i].name;
}

/* ---- state ---- */

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_LENT };

typedef struct slot_state {
    int state;
    uint64_t epoch;
    uint64_t batch;
    uint32_t count;
    uint32_t parts_left;
    uint32_t skipped;
    int32_t status;
    char errmsg[FEEDER__ERRMSG_LEN];
    feeder_batch pub;
    feeder_loader *ld;
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

struct feeder_loader {
    feeder_dataset *ds;
    feeder_sampler *sampler;     /* borrowed, or own_sampler */
    feeder_sampler *own_sampler; /* made from SHUFFLE/SEED when none was given */
    int64_t ival[sizeof(OPTS) / sizeof(OPTS[0])];
    double dval[sizeof(OPTS) / sizeof(OPTS[0])];
    uint8_t given[sizeof(OPTS) / sizeof(OPTS[0])]; /* set by the user (packed RAW adopts the rest) */
    feeder_worker_init_fn init;
    void *init_user;

    int started;
    feeder__job job;
    uint8_t *mem;
    size_t shm_bytes;
    uint32_t nslots;
    slot_state *slots;
    uint32_t parts;

    int nworkers;
    worker *workers;
    int running; /* worker processes are up */
    feeder__worker_ctx inline_ctx;
    int inline_ready;

    int in_epoch;
    int have_epoch; /* an epoch has run: the next default is epoch + 1 */
    uint64_t epoch;
    int next_set;
    uint64_t next_epoch;
    uint64_t *order;
    uint64_t order_len, order_cap;
    uint64_t nbatches;
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
    /* Worker deaths of this epoch, for the error when they pass max_restarts. */
    uint64_t epoch_deaths;
    char deaths[2048];
    uint64_t epoch_t0;
    int first_seen;
    task_queue q;

    const char *io_backend;
    char io_reason[256];

    /* What the entry points keep here for the GPU layer (api/): loader/
     * stores it and never calls cuda/. g.gpu is NULL when batches stay on
     * the host. */
    feeder__loader_gpu g;
    int64_t status_batch; /* the batch whose error the last host_next returned, or -1 */
    char decoder_reason[512]; /* why job.t.decoder is not the DECODER option */
    uint32_t cpu_permille;    /* GPU decoders: share of each part the workers decode */
    feeder__decoder *fallback_dec; /* the GPU layer's CPU fallback, made on first use */
    int start_failed; /* a start that failed after allocating: its error, for good */
    char *trace_path;     /* feeder_loader_set_trace, copied */
    feeder__trace *trace; /* made at start when trace_path is set */
    char errmsg[2048];

    pthread_mutex_t stats_lock;
    feeder_stats stats;
};

static int state_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st);
static int64_t iopt(const feeder_loader *ld, int opt) { return ld->ival[opt_find(opt)]; }
static double dopt(const feeder_loader *ld, int opt) { return ld->dval[opt_find(opt)]; }

static int fail(feeder_loader *ld, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(feeder_loader *ld, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->errmsg, sizeof(ld->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

int feeder__loader_fail(const feeder_loader *cld, int rc, const char *fmt, ...)
{
    /* The message is the loader's only mutable part a const call touches. */
    feeder_loader *ld = (feeder_loader *)cld;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->errmsg, sizeof(ld->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

int feeder_loader_create(feeder_dataset *ds, feeder_sampler *sampler, feeder_loader **out)
{
    if (!ds || !out)
        return FEEDER_EINVAL;
    feeder_loader *ld = calloc(1, sizeof(*ld));
    if (!ld)
        return -ENOMEM;
    ld->ds = ds;
    ld->sampler = sampler;
    for (int i = 0; i < NOPTS; i++) {
        ld->ival[i] = (int64_t)OPTS[i].def;
        ld->dval[i] = OPTS[i].def;
    }
    ld->io_backend = "";
    ld->job.memfd = -1;
    ld->job.pack_fd = -1;
    pthread_mutex_init(&ld->stats_lock, NULL);
    *out = ld;
    return 0;
}

int feeder_loader_set(feeder_loader *ld, feeder_option opt, int64_t value)
{
    if (!ld)
        return FEEDER_EINVAL;
    int i = opt_find(opt);
    if (i < 0)
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set: unknown option %d", (int)opt);
    if (OPTS[i].is_double)
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set: %s takes a double; use feeder_loader_set_double",
                    OPTS[i].name);
    if (ld->started)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_set: %s cannot change after the loader started",
                    OPTS[i].name);
    if ((double)value < OPTS[i].min || (double)value > OPTS[i].max)
        return fail(ld, FEEDER_ERANGE, "%s = %lld is out of range [%.0f, %.0f]", OPTS[i].name,
                    (long long)value, OPTS[i].min, OPTS[i].max);
    ld->ival[i] = value;
    ld->dval[i] = (double)value;
    ld->given[i] = 1;
    return 0;
}

int feeder_loader_set_double(feeder_loader *ld, feeder_option opt, double value)
{
    if (!ld)
        return FEEDER_EINVAL;
    int i = opt_find(opt);
    if (i < 0)
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set_double: unknown option %d", (int)opt);
    if (!OPTS[i].is_double)
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set_double: %s takes an integer; use feeder_loader_set",
                    OPTS[i].name);
    if (ld->started)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_set_double: %s cannot change after the loader started",
                    OPTS[i].name);
    if (!(value >= OPTS[i].min && value <= OPTS[i].max))
        return fail(ld, FEEDER_ERANGE, "%s = %g is out of range [%g, %g]", OPTS[i].name, value,
                    OPTS[i].min, OPTS[i].max);
    ld->dval[i] = value;
    return 0;
}

int feeder_loader_get(const feeder_loader *ld, feeder_option opt, double *value)
{
    int i = ld ? opt_find(opt) : -1;
    if (i < 0 || !value)
        return FEEDER_EINVAL;
    *value = OPTS[i].is_double ? ld->dval[i] : (double)ld->ival[i];
    return 0;
}

int feeder_loader_set_worker_init(feeder_loader *ld, feeder_worker_init_fn fn, void *user)
{
    if (!ld)
        return FEEDER_EINVAL;
    if (ld->started)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_set_worker_init: the loader started");
    ld->init = fn;
    ld->init_user = user;
    return 0;
}

const char *feeder_loader_errmsg(const feeder_loader *ld) { return ld ? ld->errmsg : ""; }

int feeder_loader_set_trace(feeder_loader *ld, const char *path)
{
    if (!ld)
        return FEEDER_EINVAL;
    if (ld->started)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_set_trace: the loader started");
    if (path && !*path)
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set_trace: empty path");
    char *copy = NULL;
    if (path && !(copy = strdup(path)))
        return fail(ld, -ENOMEM, "feeder_loader_set_trace: out of memory");
    free(ld->trace_path);
    ld->trace_path = copy;
    return 0;
}

int feeder_loader_trace_flush(feeder_loader *ld)
{
    if (!ld)
        return FEEDER_EINVAL;
    if (!ld->trace)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_trace_flush: %s",
                    ld->trace_path ? "the loader has not started" : "no trace was set");
    char err[sizeof(ld->errmsg)];
    int rc = feeder__trace_write(ld->trace, err, sizeof(err));
    return rc ? fail(ld, rc, "%s", err) : 0;
}

feeder__trace *feeder__loader_trace(const feeder_loader *ld) { return ld ? ld->trace : NULL; }

int feeder_loader_set_allocators(feeder_loader *ld, const feeder_allocator *device,
                                 const feeder_allocator *pinned)
{
    if (!ld)
        return FEEDER_EINVAL;
    if (ld->started)
        return fail(ld, FEEDER_ESTATE, "feeder_loader_set_allocators: the loader started");
    if ((device && (!device->alloc || !device->free)) || (pinned && (!pinned->alloc || !pinned->free)))
        return fail(ld, FEEDER_EINVAL, "feeder_loader_set_allocators: an allocator needs both alloc and free");
    ld->g.dev_alloc = device ? *device : (feeder_allocator){0};
    ld->g.pin_alloc = pinned ? *pinned : (feeder_allocator){0};
    return 0;
}

const feeder__slot_layout *feeder__loader_layout(const feeder_loader *ld) { return &ld->job.layout; }

uint8_t *feeder__loader_mem(const feeder_loader *ld, size_t *bytes)
{
    *bytes = ld->shm_bytes;
    return ld->mem;
}

uint32_t feeder__loader_nslots(const feeder_loader *ld) { return ld->nslots; }

int64_t feeder__loader_status_batch(const feeder_loader *ld) { return ld->status_batch; }
uint64_t feeder__loader_epoch(const feeder_loader *ld) { return ld->epoch; }

void feeder__loader_set_cpu_share(feeder_loader *ld, uint32_t permille)
{
    if (permille > 1000)
        permille = 1000;
    ld->cpu_permille = permille;
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.hybrid_cpu_permille = permille;
    pthread_mutex_unlock(&ld->stats_lock);
}

const feeder__job *feeder__loader_job(const feeder_loader *ld) { return &ld->job; }

int feeder__loader_decode_cpu(feeder_loader *ld, const uint8_t *jpeg, size_t len, uint64_t epoch,
                              uint64_t index, uint8_t *dst, char *msg, size_t msglen)
{
    if (!ld->fallback_dec && feeder__decoder_create(&ld->fallback_dec))
        return -ENOMEM;
    feeder__transform t = ld->job.t;
    t.decoder = ld->job.cpu_decoder;
    char derr[512] = "";
    int rc = feeder__decode_sample(ld->fallback_dec, &t, jpeg, len, ld->job.seed, epoch, index,
                                   dst, NULL, derr, sizeof(derr));
    if (rc) {
        const char *path = feeder_dataset_path(ld->ds, index);
        feeder__fmt(msg, msglen, "sample %llu (%s): %s", (unsigned long long)index,
                    path ? path : "?", derr[0] ? derr : feeder_strerror(rc));
    }
    return rc;
}

int64_t feeder__loader_iopt(const feeder_loader *ld, int opt) { return iopt(ld, opt); }
double feeder__loader_dopt(const feeder_loader *ld, int opt) { return dopt(ld, opt); }

int feeder__loader_sequential(const feeder_loader *ld)
{
    return ld->sampler == ld->own_sampler && !iopt(ld, FEEDER_OPT_SHUFFLE);
}

uint32_t feeder__loader_first_cpu_share(const feeder_loader *ld)
{
    return ld->job.t.decoder == FEEDER_DECODER_HYBRID ? 100 : 0;
}

feeder__loader_gpu *feeder__loader_gpu_part(feeder_loader *ld) { return &ld->g; }
const feeder__loader_gpu *feeder__loader_gpu_view(const feeder_loader *ld) { return &ld->g; }


const char *feeder_loader_io_backend(const feeder_loader *ld, const char **reason)
{
    if (reason)
        *reason = ld ? ld->io_reason : "";
    return ld ? ld->io_backend : "";
}

int feeder_loader_decoder(const feeder_loader *ld, const char **reason)
{
    if (reason)
        *reason = "";
    if (!ld)
        return FEEDER_EINVAL;
    if (!ld->started)
        return (int)iopt(ld, FEEDER_OPT_DECODER);
    if (reason)
        *reason = ld->decoder_reason;
    return ld->job.t.decoder;
}

int feeder_loader_worker_pid(const feeder_loader *ld, int id)
{
    if (!ld || !ld->running || id < 0 || id >= ld->nworkers)
        return -1;
    return ld->workers[id].pid;
}

void feeder__host_stats(const feeder_loader *ld, feeder_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&ld->stats_lock);
    *st = ld->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&ld->stats_lock);
}

/* ---- start ---- */

/* The sampler SHUFFLE and SEED pick when none was given. */
static int default_sampler(const feeder_loader *ld, feeder_sampler **out)
{
    int rc = iopt(ld, FEEDER_OPT_SHUFFLE)
                 ? feeder_sampler_random(ld->ds->n, 0, 0, (uint64_t)iopt(ld, FEEDER_OPT_SEED), out)
                 : feeder_sampler_sequential(ld->ds->n, out);
    if (rc)
        return feeder__loader_fail(ld, rc, "cannot make the default sampler: %s",
                                   feeder_strerror(rc));
    return 0;
}

static int validate(feeder_loader *ld)
{
    if (dopt(ld, FEEDER_OPT_SCALE_MIN) > dopt(ld, FEEDER_OPT_SCALE_MAX))
        return fail(ld, FEEDER_ERANGE, "scale_min %g > scale_max %g",
                    dopt(ld, FEEDER_OPT_SCALE_MIN), dopt(ld, FEEDER_OPT_SCALE_MAX));
    if (dopt(ld, FEEDER_OPT_RATIO_MIN) > dopt(ld, FEEDER_OPT_RATIO_MAX))
        return fail(ld, FEEDER_ERANGE, "ratio_min %g > ratio_max %g",
                    dopt(ld, FEEDER_OPT_RATIO_MIN), dopt(ld, FEEDER_OPT_RATIO_MAX));
    if (ld->ds->n == 0)
        return fail(ld, FEEDER_EDATASET, "the dataset has no samples");
    /* RAW records are already cropped: no resize applies to them. */
    if (ld->ds->kind == FEEDER__DS_PACKED && ld->ds->pack->v.h.kind == FEEDER_RECORD_RAW)
        return 0;
    /* The shorter side is resized to RESIZE, and either side may be the
     * shorter one, so the crop fits every image only if RESIZE covers both
     * (torchvision would pad with black; a source box cannot). */
    if (iopt(ld, FEEDER_OPT_PIPELINE) == FEEDER_PIPELINE_EVAL &&
        (iopt(ld, FEEDER_OPT_RESIZE) < iopt(ld, FEEDER_OPT_HEIGHT) ||
         iopt(ld, FEEDER_OPT_RESIZE) < iopt(ld, FEEDER_OPT_WIDTH)))
        return fail(ld, FEEDER_ERANGE,
                    "eval pipeline: resize %lld is smaller than the %lldx%lld crop",
                    (long long)iopt(ld, FEEDER_OPT_RESIZE), (long long)iopt(ld, FEEDER_OPT_HEIGHT),
                    (long long)iopt(ld, FEEDER_OPT_WIDTH));
    return 0;
}

/* Every parent-side descriptor of every loader in this process (channels,
 * pidfds). A new worker closes them all: a worker holding a copy of another
 * worker's channel would keep that channel open after its owner closed it,
 * and the other worker would never see the end of its channel. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int *reg_fds;
static size_t reg_len, reg_cap;

static void reg_add(int fd)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&reg_lock);
    if (reg_len == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 64;
        int *v = realloc(reg_fds, cap * sizeof(*v));
        if (v) {
            reg_fds = v;
            reg_cap = cap;
        }
    }
    if (reg_len < reg_cap)
        reg_fds[reg_len++] = fd;
    pthread_mutex_unlock(&reg_lock);
}

static void close_fd(int *fd)
{
    if (*fd < 0)
        return;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_len; i++) {
        if (reg_fds[i] == *fd) {
            reg_fds[i] = reg_fds[--reg_len];
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    close(*fd);
    *fd = -1;
}

/* Reap one worker that is dead or dying; `how` gets its exit in words. */
static void reap(worker *w, char *how, size_t howlen)
{
    int status = 0;
    pid_t r;
    do
        r = waitpid(w->pid, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r == w->pid && WIFSIGNALED(status))
        feeder__fmt(how, howlen, "was killed by signal %d (%s)", WTERMSIG(status),
                    strsignal(WTERMSIG(status)));
    else if (r == w->pid && WIFEXITED(status))
        feeder__fmt(how, howlen, "exited with status %d", WEXITSTATUS(status));
    else
        feeder__fmt(how, howlen, "ended (%s)", r < 0 ? strerror(errno) : "unknown status");
    close_fd(&w->pidfd);
    close_fd(&w->chan);
    w->pid = -1;
}

/* Stop every worker. `hard`: SIGKILL now (destroy, failure); otherwise close
 * the channels so idle workers exit by themselves, and kill only those that
 * have not after a grace period. Always reaps: no zombie is left. */
static void stop_workers(feeder_loader *ld, int hard)
{
    if (!ld->running)
        return;
    for (int i = 0; i < ld->nworkers; i++) {
        worker *w = &ld->workers[i];
        if (w->pid <= 0)
            continue;
        if (hard)
            kill(w->pid, SIGKILL);
        close_fd(&w->chan);
    }
    for (int i = 0; i < ld->nworkers; i++) {
        worker *w = &ld->workers[i];
        if (w->pid <= 0)
            continue;
        if (!hard && w->pidfd >= 0) {
            struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
            if (poll(&p, 1, 1000) == 0)
                kill(w->pid, SIGKILL);
        } else if (!hard) {
            kill(w->pid, SIGKILL);
        }
        char how[128];
        reap(w, how, sizeof(how));
    }
    ld->running = 0;
    /* Nothing writes to the slots any more; parts in flight are gone. */
    for (uint32_t s = 0; s < ld->nslots; s++)
        if (ld->slots[s].state == SLOT_FILLING || ld->slots[s].state == SLOT_READY)
            ld->slots[s].state = SLOT_FREE;
    ld->q.len = 0;
}

/* Start worker i (at start, or again after its death). */
static int spawn_one(feeder_loader *ld, int i)
{
    worker *w = &ld->workers[i];
    *w = (worker){.pid = -1, .pidfd = -1, .chan = -1};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return fail(ld, -errno, "socketpair for worker %d: %s", i, strerror(errno));
    /* The worker compares its parent with this after arming PDEATHSIG: a
     * parent that died before that sent no signal. */
    pid_t self = getpid();
    /* Held across fork so no other thread's loader changes the registry
     * between the child's copy of it and the fork itself. */
    pthread_mutex_lock(&reg_lock);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        /* The child's copy of the lock is held; it only reads the list. */
        feeder__worker_main(&ld->job, i, sv[1], self, reg_fds, (int)reg_len, ld->init,
                            ld->init_user);
    }
    pthread_mutex_unlock(&reg_lock);
    if (pid < 0) {
        int rc = fail(ld, -errno, "fork of worker %d: %s", i, strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return rc;
    }
    close(sv[1]);
    w->pid = pid;
    w->chan = sv[0];
    /* A pidfd tells us of a death even when the channel is quiet; without
     * one (kernel < 5.3) the channel's EOF still does. */
    w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    reg_add(w->chan);
    reg_add(w->pidfd);
    return 0;
}

static int spawn_workers(feeder_loader *ld)
{
    for (int i = 0; i < ld->nworkers; i++)
        ld->workers[i] = (worker){.pid = -1, .pidfd = -1, .chan = -1};
    int rc = 0;
    for (int i = 0; i < ld->nworkers && rc == 0; i++)
        rc = spawn_one(ld, i);
    ld->running = 1;
    if (rc)
        stop_workers(ld, 1);
    return rc;
}

static const char *const layout_text[] = {"NHWC", "NCHW"};

static int packed_mismatch(feeder_loader *ld)
{
    const struct feeder__pack *pk = ld->ds->pack;
    const feeder__pack_header *h = &pk->v.h;
    return fail(ld, FEEDER_ESHAPE,
                "%s holds %ux%ux%u %s records, but the loader was set to height %lld, width "
                "%lld, layout %s",
                pk->path, h->height, h->width, h->channels, layout_text[h->layout],
                (long long)iopt(ld, FEEDER_OPT_HEIGHT), (long long)iopt(ld, FEEDER_OPT_WIDTH),
                layout_text[iopt(ld, FEEDER_OPT_LAYOUT) ? 1 : 0]);
}

/* A RAW packed file fixes the sample: the loader takes its height, width and
 * layout unless the user set them, and then they must agree. The layout is
 * checked against the slots' once they are decided (check_packed_layout). */
static int adopt_packed_shape(feeder_loader *ld)
{
    const struct feeder__pack *pk = ld->ds->pack;
    const feeder__pack_header *h = &pk->v.h;
    if (h->kind != FEEDER_RECORD_RAW)
        return 0;
    const int opts[3] = {FEEDER_OPT_HEIGHT, FEEDER_OPT_WIDTH, FEEDER_OPT_LAYOUT};
    const int64_t file[3] = {h->height, h->width, h->layout};
    for (int k = 0; k < 2; k++)
        if (ld->given[opt_find(opts[k])] && iopt(ld, opts[k]) != file[k])
            return packed_mismatch(ld);
    int p = opt_find(FEEDER_OPT_PIPELINE);
    if (ld->given[p] && ld->ival[p] != FEEDER_PIPELINE_EVAL)
        return fail(ld, FEEDER_ESHAPE,
                    "%s holds precomputed RAW records: pipeline %s cannot be applied to them "
                    "(pack JPEG records to transform them while loading)",
                    pk->path, ld->ival[p] == FEEDER_PIPELINE_TRAIN ? "train" : "resize");
    for (int k = 0; k < 3; k++) {
        int i = opt_find(opts[k]);
        if (k < 2 || !ld->given[i]) {
            ld->ival[i] = file[k];
            ld->dval[i] = (double)file[k];
        }
    }
    return 0;
}

/* RAW records land in the slots as they are, so the slots' layout must be
 * the file's. It is LAYOUT, except that float batches made on the GPU come
 * from NHWC slots whatever LAYOUT asks of the device batches. */
static int check_packed_layout(feeder_loader *ld, int slot_layout)
{
    const struct feeder__pack *pk = ld->ds->pack;
    if (pk->v.h.kind != FEEDER_RECORD_RAW || (uint32_t)slot_layout == pk->v.h.layout)
        return 0;
    if (slot_layout == (int)iopt(ld, FEEDER_OPT_LAYOUT))
        return packed_mismatch(ld);
    return fail(ld, FEEDER_ESHAPE,
                "%s holds %s records, but float batches are made on the GPU from %s slots: "
                "pack the file with --layout nhwc",
                pk->path, layout_text[pk->v.h.layout], layout_text[slot_layout]);
}

int feeder__host_prepare(feeder_loader *ld, int gpu_ok)
{
    if (ld->start_failed)
        return ld->start_failed;
    ld->errmsg[0] = 0;
    int rc = 0;
    if (ld->ds->kind == FEEDER__DS_PACKED && (rc = adopt_packed_shape(ld)))
        return rc;
    rc = validate(ld);
    if (rc)
        return rc;
    if (!ld->sampler) {
        rc = default_sampler(ld, &ld->own_sampler);
        if (rc)
            return rc;
        ld->sampler = ld->own_sampler;
    }
    feeder__job *job = &ld->job;
    job->ds = ld->ds;
    job->seed = (uint64_t)iopt(ld, FEEDER_OPT_SEED);
    job->policy = (int)iopt(ld, FEEDER_OPT_ERROR_POLICY);
    job->queue_depth = (unsigned)iopt(ld, FEEDER_OPT_QUEUE_DEPTH);
    job->packed_read = (int)iopt(ld, FEEDER_OPT_PACKED_READ);
    job->verify_crc = (int)iopt(ld, FEEDER_OPT_VERIFY_CRC);
    feeder__transform *t = &job->t;
    t->pipeline = (int)iopt(ld, FEEDER_OPT_PIPELINE);
    t->decoder = (int)iopt(ld, FEEDER_OPT_DECODER);
    t->layout = (int)iopt(ld, FEEDER_OPT_LAYOUT);
    t->height = (uint32_t)iopt(ld, FEEDER_OPT_HEIGHT);
    t->width = (uint32_t)iopt(ld, FEEDER_OPT_WIDTH);
    t->resize = (uint32_t)iopt(ld, FEEDER_OPT_RESIZE);
    t->scale_min = dopt(ld, FEEDER_OPT_SCALE_MIN);
    t->scale_max = dopt(ld, FEEDER_OPT_SCALE_MAX);
    t->ratio_min = dopt(ld, FEEDER_OPT_RATIO_MIN);
    t->ratio_max = dopt(ld, FEEDER_OPT_RATIO_MAX);
    t->flip_prob = dopt(ld, FEEDER_OPT_FLIP_PROB);
    t->max_pixels = (uint64_t)iopt(ld, FEEDER_OPT_MAX_PIXELS);

    /* Read path: decided once here so every worker agrees and the user can
     * ask which one runs and why. */
    int io = (int)iopt(ld, FEEDER_OPT_IO);
    int direct = ld->ds->kind == FEEDER__DS_PACKED && job->packed_read == FEEDER_PACKED_READ_DIRECT;
    if (ld->ds->kind == FEEDER__DS_USER) {
        ld->io_backend = "none";
        feeder__fmt(ld->io_reason, sizeof(ld->io_reason), "user dataset: no files to read");
        job->io_mode = FEEDER_IO_PREAD;
    } else if (ld->ds->kind == FEEDER__DS_PACKED && job->packed_read == FEEDER_PACKED_READ_MMAP) {
        ld->io_backend = "mmap";
        feeder__fmt(ld->io_reason, sizeof(ld->io_reason), "%s", "");
        job->io_mode = FEEDER_IO_PREAD;
    } else if (io == FEEDER_IO_PREAD) {
        ld->io_backend = direct ? "pread+O_DIRECT" : "pread";
        feeder__fmt(ld->io_reason, sizeof(ld->io_reason), "forced by option");
        job->io_mode = FEEDER_IO_PREAD;
    } else {
        char why[200];
        rc = feeder__uring_probe(why, sizeof(why));
        if (rc && io == FEEDER_IO_URING)
            return fail(ld, rc, "io = uring was asked for, but %s", why);
        job->io_mode = rc ? FEEDER_IO_PREAD : FEEDER_IO_URING;
        ld->io_backend = direct ? (rc ? "pread+O_DIRECT" : "io_uring+O_DIRECT")
                                : (rc ? "pread" : "io_uring");
        feeder__fmt(ld->io_reason, sizeof(ld->io_reason), "%s", rc ? why : "");
    }

    /* The GPU decoders take JPEG bytes: files, or a packed file's JPEG records. */
    int jpeg_records = ld->ds->kind == FEEDER__DS_PACKED &&
                       ld->ds->pack->v.h.kind == FEEDER_RECORD_JPEG;
    if (feeder__decoder_on_gpu(t->decoder) && ld->ds->kind != FEEDER__DS_FOLDER &&
        ld->ds->kind != FEEDER__DS_LIST && !jpeg_records) {
        feeder__fmt(ld->decoder_reason, sizeof(ld->decoder_reason),
                    "the GPU decoders take JPEG bytes: %s decode on the CPU",
                    ld->ds->kind == FEEDER__DS_PACKED ? "RAW packed records" : "user datasets");
        t->decoder = FEEDER_DECODER_ROI;
    }

    job->cpu_decoder = feeder__decoder_on_gpu(t->decoder) ? FEEDER_DECODER_ROI : t->decoder;

    /* The GPU path is decided before the slots are laid out: the float dtypes
     * are made on the GPU from NHWC uint8 slots. */
    if (gpu_ok && iopt(ld, FEEDER_OPT_DTYPE) != FEEDER_DTYPE_UINT8)
        t->layout = FEEDER_LAYOUT_NHWC;
    if (ld->ds->kind == FEEDER__DS_PACKED &&
        ((rc = check_packed_layout(ld, t->layout)) ||
         (rc = feeder__packed_prepare(ld->ds, job, ld->errmsg, sizeof(ld->errmsg)))))
        return rc;

    uint32_t batch = (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE);
    rc = feeder__slot_layout_init(&job->layout, batch, t->height, t->width, 3, t->layout);
    if (rc)
        return fail(ld, rc, "batch_size %u x %ux%ux3 overflows a size", batch, t->height,
                    t->width);
    ld->nworkers = (int)iopt(ld, FEEDER_OPT_NUM_WORKERS);
    uint64_t nslots = (uint64_t)(ld->nworkers ? ld->nworkers : 1) *
                      (uint64_t)iopt(ld, FEEDER_OPT_PREFETCH_FACTOR);
    if (nslots > 65536 || feeder__slot_total(&job->layout, (uint32_t)nslots, &ld->shm_bytes))
        return fail(ld, FEEDER_EOVERFLOW, "%llu slots of %zu bytes overflow a size",
                    (unsigned long long)nslots, job->layout.slot_bytes);
    ld->nslots = (uint32_t)nslots;
    /* Tasks of about 16 samples by default (at least one per worker): on the
     * H100 machine 4 workers with tasks of 64 (one per worker, batch 256)
     * reached 0.87 of 4x the calling thread's rate, with tasks of 16 1.00
     * (medians of 3; docs/BENCHMARKS.md): a batch no longer waits for the
     * slowest worker's quarter, and each task's files are still in cache
     * when they are decoded. */
    uint64_t split = (uint64_t)iopt(ld, FEEDER_OPT_SPLIT);
    uint64_t autosplit = (batch + FEEDER__TASK_SAMPLES - 1) / FEEDER__TASK_SAMPLES;
    if (autosplit < (uint64_t)ld->nworkers)
        autosplit = (uint64_t)ld->nworkers;
    ld->parts = (uint32_t)(ld->nworkers == 0 ? 1 : split ? split : autosplit);
    if (ld->parts > batch)
        ld->parts = batch;

    /* Limits the configuration would run into later, checked before
     * anything is allocated (limits.c says why these numbers). */
    if ((rc = feeder__check_slot_memory(ld->nslots, job->layout.slot_bytes, ld->errmsg,
                                        sizeof(ld->errmsg))))
        return rc;
    uint32_t files = ld->ds->kind == FEEDER__DS_USER ? 0 : (batch + ld->parts - 1) / ld->parts;
    if ((rc = feeder__check_nofile(ld->nworkers, files, ld->errmsg, sizeof(ld->errmsg))))
        return rc;
    /* A resume blob is checked again against the options as they are now. */
    if (ld->resume && (rc = state_check(ld, ld->resume, ld->resume_len, &ld->resume_st)))
        return rc;
    /* The trace's worker areas must exist before the workers fork. Writing
     * the (still empty) file now finds an unwritable path at start, not at
     * destroy, which cannot report it. */
    feeder__trace_destroy(ld->trace); /* of a start that failed later: sized for then */
    ld->trace = job->trace = NULL;
    if (ld->trace_path) {
        char err[512];
        if (!(ld->trace = feeder__trace_create(ld->trace_path, ld->nworkers, err, sizeof(err))))
            return fail(ld, -ENOMEM, "%s", err);
        if ((rc = feeder__trace_write(ld->trace, err, sizeof(err)))) {
            feeder__trace_destroy(ld->trace);
            ld->trace = NULL;
            return fail(ld, rc, "%s", err);
        }
        job->trace = ld->trace;
    }

    /* One memfd for every slot, sized once (invariant 7). It has no name in
     * /dev/shm, so nothing outlives the last process that maps it. */
    job->memfd = memfd_create("feeder-slots", MFD_CLOEXEC);
    if (job->memfd < 0)
        return fail(ld, -errno, "memfd_create: %s", strerror(errno));
    job->shm_bytes = ld->shm_bytes;
    if (ftruncate(job->memfd, (off_t)ld->shm_bytes) < 0) {
        rc = -errno;
        close_fd(&job->memfd);
        return fail(ld, rc, "cannot size the batch slots to %zu bytes (%u slots): %s",
                    ld->shm_bytes, ld->nslots, strerror(-rc));
    }
    ld->mem = mmap(NULL, ld->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, job->memfd, 0);
    if (ld->mem == MAP_FAILED) {
        rc = -errno;
        ld->mem = NULL;
        close_fd(&job->memfd);
        return fail(ld, rc, "mmap of %zu bytes of batch slots: %s", ld->shm_bytes,
                    strerror(-rc));
    }
    ld->slots = calloc(ld->nslots, sizeof(*ld->slots));
    ld->workers = calloc(ld->nworkers ? (size_t)ld->nworkers : 1, sizeof(*ld->workers));
    ld->q.cap = (size_t)ld->nslots * ld->parts;
    ld->q.v = calloc(ld->q.cap, sizeof(*ld->q.v));
    if (!ld->slots || !ld->workers || !ld->q.v)
        return fail(ld, -ENOMEM, "out of memory");
    for (uint32_t s = 0; s < ld->nslots; s++)
        ld->slots[s].ld = ld;
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.shm_bytes = ld->shm_bytes;
    ld->stats.slots = ld->nslots;
    pthread_mutex_unlock(&ld->stats_lock);
    return 0;
}

void feeder__host_start_failed(feeder_loader *ld, int rc) { ld->start_failed = rc; }

void feeder__host_commit(feeder_loader *ld, int gpu_decodes, const char *decode_why,
                         int packed_direct)
{
    feeder__job *job = &ld->job;
    feeder__transform *t = &job->t;
    /* A GPU decoder with no GPU layer, or one that could not start nvJPEG:
     * the workers decode on the CPU (they fork later, at the first epoch,
     * with this job). With one, the GPU layer has set HYBRID's first share
     * and moves it from what both sides do. */
    if (feeder__decoder_on_gpu(t->decoder) && !gpu_decodes) {
        feeder__fmt(ld->decoder_reason, sizeof(ld->decoder_reason), "%s", decode_why);
        t->decoder = job->cpu_decoder;
        feeder__loader_set_cpu_share(ld, 0);
    }
    /* Before the workers fork (at the first epoch): they inherit it. */
    job->packed_direct = packed_direct;
    ld->started = 1;
}

/* ---- epochs ---- */

/* The epoch the next begin_epoch starts. */
static uint64_t next_epoch(const feeder_loader *ld)
{
    if (ld->resume)
        return ld->resume_st.epoch;
    return ld->next_set ? ld->next_epoch : ld->have_epoch ? ld->epoch + 1 : 0;
}

static void drop_resume(feeder_loader *ld)
{
    free(ld->resume);
    ld->resume = NULL;
    ld->resume_len = 0;
    memset(&ld->resume_st, 0, sizeof(ld->resume_st));
}

static int batch_done(const feeder_loader *ld, uint64_t b)
{
    return (ld->done_map[b / 8] >> (b % 8)) & 1;
}

/* The one place a batch counts as delivered: handed to the user by
 * feeder_next, as a batch or as its error. The state blob, the in-order
 * cursor and the end of the epoch all read what this keeps. (A GPU
 * prefetcher that hands batches out later calls this when it does.) */
static void mark_delivered(feeder_loader *ld, uint64_t b)
{
    if (b >= ld->nbatches || batch_done(ld, b))
        return;
    ld->done_map[b / 8] |= (uint8_t)(1u << (b % 8));
    ld->delivered++;
    while (ld->next_in_order < ld->nbatches && batch_done(ld, ld->next_in_order))
        ld->next_in_order++;
}

/* The next batch number to load, past those already delivered (a resumed
 * epoch), or nbatches. */
static uint64_t take_next_batch(feeder_loader *ld)
{
    while (ld->dispatched < ld->nbatches && batch_done(ld, ld->dispatched))
        ld->dispatched++;
    return ld->dispatched < ld->nbatches ? ld->dispatched++ : ld->nbatches;
}

static int begin_epoch(feeder_loader *ld)
{
    uint64_t epoch = next_epoch(ld);
    ld->next_set = 0;
    uint64_t len = feeder_sampler_len(ld->sampler, epoch);
    if (len > SIZE_MAX / sizeof(uint64_t))
        return fail(ld, FEEDER_EOVERFLOW, "the sampler's %llu indices for epoch %llu overflow a size",
                    (unsigned long long)len, (unsigned long long)epoch);
    if (len > ld->order_cap) {
        uint64_t *o = realloc(ld->order, len * sizeof(*o));
        if (!o)
            return fail(ld, -ENOMEM, "out of memory for the epoch's order (%llu indices)",
                        (unsigned long long)len);
        ld->order = o;
        ld->order_cap = len;
    }
    int rc = feeder_sampler_fill(ld->sampler, epoch, ld->order, len);
    if (rc)
        return fail(ld, rc, "the sampler failed for epoch %llu: %s", (unsigned long long)epoch,
                    feeder_strerror(rc));
    for (uint64_t i = 0; i < len; i++)
        if (ld->order[i] >= ld->ds->n)
            return fail(ld, FEEDER_EINVAL,
                        "the sampler gave index %llu at position %llu; the dataset has %llu samples",
                        (unsigned long long)ld->order[i], (unsigned long long)i,
                        (unsigned long long)ld->ds->n);
    ld->epoch_t0 = feeder__now_ns();
    ld->order_len = len;
    ld->nbatches = feeder_batch_count(len, (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE),
                                      (int)iopt(ld, FEEDER_OPT_DROP_LAST));
    ld->dispatched = ld->delivered = ld->next_in_order = 0;
    ld->epoch_deaths = 0;
    ld->deaths[0] = 0;
    size_t map = (size_t)(ld->nbatches / 8 + 1);
    if (map > ld->done_cap) {
        uint8_t *m = realloc(ld->done_map, map);
        if (!m)
            return fail(ld, -ENOMEM, "out of memory for the epoch's delivery map (%zu bytes)", map);
        ld->done_map = m;
        ld->done_cap = map;
    }
    memset(ld->done_map, 0, map);
    if (ld->resume) {
        /* Checked at start against this sampler; a user sampler that is not
         * a pure function of the epoch could still disagree now. */
        if (ld->resume_st.nbatches != ld->nbatches)
            return fail(ld, FEEDER_EMISMATCH,
                        "state blob does not match the loader: the number of batches is %llu "
                        "in the blob, %llu in the loader",
                        (unsigned long long)ld->resume_st.nbatches,
                        (unsigned long long)ld->nbatches);
        for (uint64_t b = 0; b < ld->nbatches; b++)
            if (ld->resume_st.map && ((ld->resume_st.map[b / 8] >> (b % 8)) & 1))
                mark_delivered(ld, b);
    }
    ld->first_seen = 0;
    ld->q.len = ld->q.head = 0;
    if (ld->nworkers && !ld->running && (rc = spawn_workers(ld)))
        return rc;
    if (!ld->nworkers && !ld->inline_ready) {
        /* The calling thread maps nothing new: it writes through the
         * loader's own mapping. */
        rc = feeder__worker_ctx_init(&ld->inline_ctx, &ld->job, -1, ld->mem);
        if (rc) {
            feeder__worker_ctx_free(&ld->inline_ctx);
            return fail(ld, rc, "cannot set up the reader and decoder: %s", feeder_strerror(rc));
        }
        ld->inline_ready = 1;
    }
    drop_resume(ld);
    ld->epoch = epoch;
    ld->have_epoch = 1;
    ld->in_epoch = 1;
    return 0;
}

static void end_epoch(feeder_loader *ld)
{
    ld->in_epoch = 0;
    if (ld->nworkers && !iopt(ld, FEEDER_OPT_PERSISTENT_WORKERS))
        stop_workers(ld, 0);
}

/* ---- dispatch and collection ---- */

static int send_task(feeder_loader *ld, worker *w, const feeder__task_msg *t)
{
    for (;;) {
        ssize_t n = send(w->chan, t, sizeof(*t), MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof(*t))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -errno : FEEDER_EPROTO;
    }
}

/* Give free slots to the next batches and hand queued parts to workers with
 * room. A send error means the worker is gone; its death is reported by the
 * wait loop that sees its pidfd or channel. */
static void dispatch(feeder_loader *ld)
{
    if (!ld->in_epoch || !ld->running)
        return;
    uint32_t batch = (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE);
    for (uint32_t s = 0; s < ld->nslots && ld->dispatched < ld->nbatches; s++) {
        slot_state *ss = &ld->slots[s];
        if (ss->state != SLOT_FREE)
            continue;
        uint64_t b = take_next_batch(ld);
        if (b >= ld->nbatches)
            break;
        uint64_t first = b * batch;
        uint32_t count = (uint32_t)(ld->order_len - first < batch ? ld->order_len - first : batch);
        ss->state = SLOT_FILLING;
        ss->epoch = ld->epoch;
        ss->batch = b;
        ss->count = count;
        ss->skipped = 0;
        ss->status = 0;
        ss->errmsg[0] = 0;
        memcpy(feeder__slot_indices(&ld->job.layout, feeder__slot_base(&ld->job.layout, ld->mem, s)),
               ld->order + first, count * sizeof(uint64_t));
        uint32_t parts = ld->parts < count ? ld->parts : count;
        ss->parts_left = parts;
        for (uint32_t p = 0; p < parts; p++) {
            uint32_t lo = (uint32_t)((uint64_t)p * count / parts);
            uint32_t hi = (uint32_t)((uint64_t)(p + 1) * count / parts);
            feeder__task_msg *t = &ld->q.v[(ld->q.head + ld->q.len++) % ld->q.cap];
            *t = (feeder__task_msg){FEEDER__MSG_TASK, s, lo, hi - lo, ld->epoch, b,
                                    (uint32_t)(((uint64_t)(hi - lo) * ld->cpu_permille + 500) /
                                               1000), 0};
        }
    }
    /* Least-loaded worker first keeps every worker's queue short and even. */
    while (ld->q.len) {
        worker *best = NULL;
        for (int i = 0; i < ld->nworkers; i++) {
            worker *w = &ld->workers[i];
            if (w->chan >= 0 && !w->broken && w->outstanding < FEEDER__WORKER_QUEUE &&
                (!best || w->outstanding < best->outstanding))
                best = w;
        }
        if (!best)
            break;
        feeder__task_msg *t = &ld->q.v[ld->q.head];
        if (send_task(ld, best, t) != 0) {
            /* What it sent before it went (a failed start's reason) is
             * still in the channel; the wait loop reads it, then the EOF. */
            best->broken = 1;
            continue;
        }
        best->inflight[best->outstanding++] = *t;
        ld->q.head = (ld->q.head + 1) % ld->q.cap;
        ld->q.len--;
    }
}

static void account(feeder_loader *ld, const feeder__result_msg *r)
{
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.bytes_read += r->bytes_read;
    ld->stats.read_ns += r->read_ns;
    ld->stats.decode_ns += r->decode_ns;
    ld->stats.transform_ns += r->transform_ns;
    ld->stats.skipped += r->skipped;
    for (int k = 0; k < FEEDER_ROUTES; k++)
        ld->stats.cpu_routed[k] += r->routed[k];
    pthread_mutex_unlock(&ld->stats_lock);
}

static void complete_part(feeder_loader *ld, const feeder__result_msg *r)
{
    slot_state *ss = &ld->slots[r->slot];
    account(ld, r);
    ss->skipped += r->skipped;
    if (r->status && !ss->status) {
        ss->status = r->status;
        feeder__fmt(ss->errmsg, sizeof(ss->errmsg), "%s", r->errmsg);
    }
    if (--ss->parts_left == 0)
        ss->state = SLOT_READY;
}

/* Put a dead worker's unanswered parts back at the head of the queue, oldest
 * first, with their slots' index ranges as the loader wrote them (under the
 * skip policy the worker may have replaced some), so that re-running them
 * gives the bytes the first run would have. */
static void requeue(feeder_loader *ld, worker *w)
{
    uint32_t bs = (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE);
    for (unsigned k = w->outstanding; k-- > 0;) {
        const feeder__task_msg *t = &w->inflight[k];
        slot_state *ss = &ld->slots[t->slot];
        if (ss->state != SLOT_FILLING || ss->batch != t->batch || ss->epoch != t->epoch)
            continue;
        uint8_t *base = feeder__slot_base(&ld->job.layout, ld->mem, t->slot);
        memcpy(feeder__slot_indices(&ld->job.layout, base) + t->first,
               ld->order + t->batch * bs + t->first, (size_t)t->count * sizeof(uint64_t));
        ld->q.head = (ld->q.head + ld->q.cap - 1) % ld->q.cap;
        ld->q.v[ld->q.head] = *t;
        ld->q.len++;
    }
    w->outstanding = 0;
}

/* A worker is dead (or its channel is). Under max_restarts (deaths of this
 * epoch), and when `transient` (a death, not a protocol error or a failed
 * worker_init), it is started again and its parts re-run: 0. Otherwise the
 * error names it (and every earlier death of the epoch), the rest are
 * stopped and the epoch is over. */
static int worker_died(feeder_loader *ld, int i, const char *extra, int transient)
{
    worker *w = &ld->workers[i];
    pid_t pid = w->pid;
    uint64_t batch = w->inflight[0].batch;
    int busy = w->outstanding > 0;
    if (w->pidfd >= 0) {
        /* The channel can close a moment before the process is gone. */
        struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
        if (poll(&p, 1, 1000) == 0)
            kill(pid, SIGKILL);
    } else {
        kill(pid, SIGKILL);
    }
    char how[128];
    reap(w, how, sizeof(how));
    char ctx[128] = "";
    if (busy)
        feeder__fmt(ctx, sizeof(ctx), " while loading batch %llu of epoch %llu",
                    (unsigned long long)batch, (unsigned long long)ld->epoch);
    char one[512];
    feeder__fmt(one, sizeof(one), "worker %d (pid %d) %s%s%s%s", i, (int)pid, how, ctx,
                extra && *extra ? ": " : "", extra ? extra : "");
    ld->epoch_deaths++;
    size_t used = strlen(ld->deaths);
    feeder__fmt(ld->deaths + used, sizeof(ld->deaths) - used, "%s%s", used ? "; " : "", one);
    uint64_t max = (uint64_t)iopt(ld, FEEDER_OPT_MAX_RESTARTS);
    if (transient && ld->epoch_deaths <= max && ld->in_epoch) {
        requeue(ld, w);
        int rc = spawn_one(ld, i);
        if (rc == 0) {
            pthread_mutex_lock(&ld->stats_lock);
            ld->stats.worker_restarts++;
            pthread_mutex_unlock(&ld->stats_lock);
            ld->errmsg[0] = 0;
            return 0;
        }
        /* Cannot start it again: fail as without restarts, saying why. */
        size_t u = strlen(ld->deaths);
        feeder__fmt(ld->deaths + u, sizeof(ld->deaths) - u, " (restart failed: %s)", ld->errmsg);
    }
    if (ld->epoch_deaths == 1)
        fail(ld, FEEDER_EWORKER, "%s", ld->deaths);
    else
        fail(ld, FEEDER_EWORKER, "%llu worker deaths in epoch %llu, more than max_restarts = %llu: %s",
             (unsigned long long)ld->epoch_deaths, (unsigned long long)ld->epoch,
             (unsigned long long)max, ld->deaths);
    stop_workers(ld, 1);
    ld->in_epoch = 0;
    return FEEDER_EWORKER;
}

/* Read every message waiting on worker i's channel. 0, or an error (death,
 * failed worker start). */
static int drain_channel(feeder_loader *ld, int i)
{
    worker *w = &ld->workers[i];
    int reset_seen = 0;
    for (;;) {
        feeder__result_msg r;
        ssize_t n = recv(w->chan, &r, sizeof(r), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        /* A worker that exits with tasks unread makes the kernel report
         * ECONNRESET once, ahead of the messages it sent before: read on. */
        if (n < 0 && errno == ECONNRESET && !reset_seen) {
            reset_seen = 1;
            continue;
        }
        if (n <= 0)
            return worker_died(ld, i, NULL, 1);
        if ((size_t)n != sizeof(r))
            return worker_died(ld, i, "malformed message", 0);
        if (r.kind == FEEDER__MSG_READY) {
            if (r.status) {
                char msg[FEEDER__ERRMSG_LEN];
                feeder__fmt(msg, sizeof(msg), "%s", r.errmsg);
                worker_died(ld, i, NULL, 0);
                return fail(ld, r.status == FEEDER_ECALLBACK ? FEEDER_ECALLBACK : r.status, "%s",
                            msg);
            }
            w->ready = 1;
            continue;
        }
        if (r.kind != FEEDER__MSG_RESULT || r.slot >= ld->nslots ||
            ld->slots[r.slot].state != SLOT_FILLING)
            return worker_died(ld, i, "result for a slot that is not being filled", 0);
        if (w->outstanding) {
            w->outstanding--;
            memmove(w->inflight, w->inflight + 1, w->outstanding * sizeof(w->inflight[0]));
        }
        complete_part(ld, &r);
    }
}

/* Wait up to `ms` for worker traffic and handle it. */
static int wait_workers(feeder_loader *ld, int ms)
{
    struct pollfd p[2 * 1024 + 2];
    int idx[2 * 1024 + 2];
    int np = 0;
    for (int i = 0; i < ld->nworkers; i++) {
        worker *w = &ld->workers[i];
        if (w->pid <= 0)
            continue;
        if (w->chan < 0)
            return worker_died(ld, i, "its channel broke", 0);
        p[np] = (struct pollfd){.fd = w->chan, .events = POLLIN};
        idx[np++] = i;
        if (w->pidfd >= 0) {
            p[np] = (struct pollfd){.fd = w->pidfd, .events = POLLIN};
            idx[np++] = -1 - i;
        }
    }
    int n = poll(p, (nfds_t)np, ms);
    if (n < 0)
        return errno == EINTR ? 0 : fail(ld, -errno, "poll: %s", strerror(errno));
    /* Messages first: a worker that answered and then died still counts its
     * answer. */
    for (int k = 0; k < np; k++) {
        if (idx[k] >= 0 && p[k].revents) {
            int rc = drain_channel(ld, idx[k]);
            if (rc)
                return rc;
        }
    }
    for (int k = 0; k < np; k++) {
        if (idx[k] < 0 && p[k].revents) {
            int i = -1 - idx[k];
            int rc = drain_channel(ld, i);
            if (rc)
                return rc;
            /* drain_channel may have seen the EOF and restarted it already. */
            if (ld->workers[i].pid > 0 && ld->workers[i].pidfd >= 0) {
                struct pollfd q = {.fd = ld->workers[i].pidfd, .events = POLLIN};
                if (poll(&q, 1, 0) == 0)
                    return 0;
            }
            return worker_died(ld, i, NULL, 1);
        }
    }
    return 0;
}

/* ---- delivery ---- */

static int deliver(feeder_loader *ld, slot_state *ss, feeder_batch **out)
{
    uint32_t s = (uint32_t)(ss - ld->slots);
    mark_delivered(ld, ss->batch);
    if (ss->status) {
        ld->status_batch = (int64_t)ss->batch;
        int rc = fail(ld, ss->status, "batch %llu of epoch %llu: %s",
                      (unsigned long long)ss->batch, (unsigned long long)ss->epoch, ss->errmsg);
        ss->state = SLOT_FREE;
        pthread_mutex_lock(&ld->stats_lock);
        ld->stats.failed_batches++;
        pthread_mutex_unlock(&ld->stats_lock);
        dispatch(ld);
        return rc;
    }
    const feeder__slot_layout *l = &ld->job.layout;
    uint8_t *base = feeder__slot_base(l, ld->mem, s);
    feeder_batch *b = &ss->pub;
    memset(b, 0, sizeof(*b));
    b->data = feeder__slot_sample(l, base, 0);
    b->labels = feeder__slot_labels(l, base);
    b->indices = feeder__slot_indices(l, base);
    b->count = ss->count;
    b->height = l->height;
    b->width = l->width;
    b->channels = l->channels;
    b->layout = l->layout;
    b->skipped = ss->skipped;
    b->sample_bytes = l->sample_bytes;
    b->epoch = ss->epoch;
    b->number = ss->batch;
    b->device = -1;
    b->dtype = FEEDER_DTYPE_UINT8;
    b->internal_ = ss;
    ss->state = SLOT_LENT;
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.batches++;
    ld->stats.samples += ss->count;
    if (!ld->first_seen)
        ld->stats.first_batch_ns = feeder__now_ns() - ld->epoch_t0;
    pthread_mutex_unlock(&ld->stats_lock);
    ld->first_seen = 1;
    *out = b;
    return 0;
}

static slot_state *find_ready(feeder_loader *ld)
{
    slot_state *best = NULL;
    int in_order = (int)iopt(ld, FEEDER_OPT_IN_ORDER);
    for (uint32_t s = 0; s < ld->nslots; s++) {
        slot_state *ss = &ld->slots[s];
        if (ss->state != SLOT_READY || ss->epoch != ld->epoch)
            continue;
        if (in_order ? ss->batch == ld->next_in_order : (!best || ss->batch < best->batch))
            best = ss;
        if (in_order && best)
            break;
    }
    return best;
}

static int any_slot_busy(feeder_loader *ld)
{
    for (uint32_t s = 0; s < ld->nslots; s++)
        if (ld->slots[s].state == SLOT_FILLING || ld->slots[s].state == SLOT_READY ||
            ld->slots[s].state == SLOT_FREE)
            return 1;
    return 0;
}

/* num_workers 0: load the next batch in the calling thread. */
static int next_inline(feeder_loader *ld, feeder_batch **out)
{
    slot_state *ss = NULL;
    for (uint32_t s = 0; s < ld->nslots && !ss; s++)
        if (ld->slots[s].state == SLOT_FREE)
            ss = &ld->slots[s];
    if (!ss)
        return fail(ld, FEEDER_EBUSY, "all %u batch slots are borrowed; release a batch first",
                    ld->nslots);
    uint32_t s = (uint32_t)(ss - ld->slots);
    uint32_t batch = (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE);
    uint64_t b = take_next_batch(ld), first = b * batch;
    uint32_t count = (uint32_t)(ld->order_len - first < batch ? ld->order_len - first : batch);
    ss->epoch = ld->epoch;
    ss->batch = b;
    ss->count = count;
    ss->skipped = 0;
    ss->status = 0;
    ss->parts_left = 1;
    ss->state = SLOT_FILLING;
    memcpy(feeder__slot_indices(&ld->job.layout, feeder__slot_base(&ld->job.layout, ld->mem, s)),
           ld->order + first, count * sizeof(uint64_t));
    feeder__task_msg t = {FEEDER__MSG_TASK, s, 0, count, ld->epoch, b,
                          (uint32_t)(((uint64_t)count * ld->cpu_permille + 500) / 1000), 0};
    static _Thread_local feeder__result_msg r;
    feeder__run_task(&ld->inline_ctx, &t, &r);
    complete_part(ld, &r);
    return deliver(ld, ss, out);
}

int feeder__host_next(feeder_loader *ld, feeder_batch **out, int try_only)
{
    int rc;
    ld->errmsg[0] = 0;
    ld->status_batch = -1;
    if (!ld->in_epoch && (rc = begin_epoch(ld)))
        return rc;
    if (ld->delivered >= ld->nbatches) {
        end_epoch(ld);
        return FEEDER_DONE;
    }
    if (!ld->nworkers)
        return try_only ? FEEDER__HOST_AGAIN : next_inline(ld, out);

    uint64_t t0 = feeder__now_ns();
    int64_t timeout = iopt(ld, FEEDER_OPT_TIMEOUT_MS);
    uint64_t deadline = timeout ? t0 + (uint64_t)timeout * 1000000ull : UINT64_MAX;
    int poll_ms = (int)iopt(ld, FEEDER_OPT_POLL_MS);
    rc = 0;
    int looked = 0;
    for (;;) {
        dispatch(ld);
        slot_state *ss = find_ready(ld);
        if (ss) {
            rc = deliver(ld, ss, out);
            break;
        }
        if (try_only) {
            /* One look at the channels, without waiting; every slot lent
             * (to copies in flight) is "not yet" here, not an error. */
            if (looked || !any_slot_busy(ld)) {
                rc = FEEDER__HOST_AGAIN;
                break;
            }
            looked = 1;
            if ((rc = wait_workers(ld, 0)))
                break;
            continue;
        }
        if (!any_slot_busy(ld)) {
            rc = fail(ld, FEEDER_EBUSY, "all %u batch slots are borrowed; release a batch first",
                      ld->nslots);
            break;
        }
        uint64_t now = feeder__now_ns();
        if (now >= deadline) {
            rc = fail(ld, FEEDER_ETIMEDOUT,
                      "no batch within timeout_ms = %lld (waiting for batch %llu of epoch %llu)",
                      (long long)timeout, (unsigned long long)ld->next_in_order,
                      (unsigned long long)ld->epoch);
            break;
        }
        uint64_t left_ms = deadline == UINT64_MAX ? (uint64_t)poll_ms : (deadline - now + 999999) / 1000000;
        if ((rc = wait_workers(ld, (int)(left_ms < (uint64_t)poll_ms ? left_ms : (uint64_t)poll_ms))))
            break;
    }
    /* With the GPU layer on, its own wait is the consumer's stall. */
    if (!ld->g.gpu) {
        pthread_mutex_lock(&ld->stats_lock);
        ld->stats.wait_ns += feeder__now_ns() - t0;
        pthread_mutex_unlock(&ld->stats_lock);
    }
    return rc;
}

feeder_loader *feeder__host_batch_loader(const feeder_batch *b)
{
    const slot_state *ss = b ? b->internal_ : NULL;
    return ss && &ss->pub == b ? ss->ld : NULL;
}

int feeder__host_release(feeder_batch *batch)
{
    if (!batch || !batch->internal_)
        return FEEDER_EINVAL;
    slot_state *ss = batch->internal_;
    if (ss->state != SLOT_LENT || &ss->pub != batch)
        return FEEDER_EINVAL;
    feeder_loader *ld = ss->ld;
    ss->state = SLOT_FREE;
    batch->internal_ = NULL;
    /* Refill at once so the workers need not wait for the next feeder_next. */
    dispatch(ld);
    return 0;
}

int feeder__host_set_epoch(feeder_loader *ld, uint64_t epoch)
{
    drop_resume(ld);
    if (ld->in_epoch) {
        /* Parts in flight still write their slots: wait for them (or for the
         * workers' deaths) before the slots can be reused. */
        ld->dispatched = ld->nbatches;
        for (;;) {
            /* Queued parts never reach a worker: count them as done (a
             * restarted worker's re-queued parts too). */
            for (; ld->q.len; ld->q.len--, ld->q.head = (ld->q.head + 1) % ld->q.cap) {
                slot_state *ss = &ld->slots[ld->q.v[ld->q.head].slot];
                if (--ss->parts_left == 0)
                    ss->state = SLOT_READY;
            }
            int busy = 0;
            for (uint32_t s = 0; s < ld->nslots; s++)
                busy |= ld->slots[s].state == SLOT_FILLING;
            if (!busy || !ld->running)
                break;
            int rc = wait_workers(ld, (int)iopt(ld, FEEDER_OPT_POLL_MS));
            if (rc)
                break;
        }
        for (uint32_t s = 0; s < ld->nslots; s++)
            if (ld->slots[s].state == SLOT_READY || ld->slots[s].state == SLOT_FILLING)
                ld->slots[s].state = SLOT_FREE;
        end_epoch(ld);
    }
    ld->next_set = 1;
    ld->next_epoch = epoch;
    return 0;
}

void feeder__host_stop(feeder_loader *ld) { stop_workers(ld, 1); }

void feeder__host_free(feeder_loader *ld)
{
    /* Every recorder is gone: workers reaped, pin threads joined, the copy
     * stream's spans harvested. An error here has no caller to go to
     * (feeder_loader_trace_flush reports one). */
    if (ld->trace) {
        char err[512];
        (void)feeder__trace_write(ld->trace, err, sizeof(err));
        feeder__trace_destroy(ld->trace);
    }
    free(ld->trace_path);
    if (ld->inline_ready)
        feeder__worker_ctx_free(&ld->inline_ctx);
    feeder__decoder_destroy(ld->fallback_dec);
    if (ld->mem)
        munmap(ld->mem, ld->shm_bytes);
    close_fd(&ld->job.memfd);
    if (ld->job.pack_fd >= 0)
        close(ld->job.pack_fd);
    feeder_sampler_destroy(ld->own_sampler);
    free(ld->slots);
    free(ld->workers);
    free(ld->q.v);
    free(ld->order);
    free(ld->done_map);
    free(ld->g.map);
    free(ld->resume);
    pthread_mutex_destroy(&ld->stats_lock);
    free(ld);
}

/* ---- the loader's side of the state blob (state.c is the codec) ---- */

/* Decode a blob and compare it with the loader: 0 and *st (st->map points
 * into buf), or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message set. */
static int state_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st)
{
    int rc = feeder__state_decode(buf, len, st, ld->errmsg, sizeof(ld->errmsg));
    if (rc)
        return rc;
    feeder__state mine;
    if ((rc = feeder__loader_describe(ld, &st->epoch, 1, 0, &mine)))
        return rc;
    return feeder__state_compare(st, &mine, ld->errmsg, sizeof(ld->errmsg));
}

int feeder__loader_started(const feeder_loader *ld) { return ld->started; }

int feeder__loader_keep_resume(feeder_loader *ld, const void *buf, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return fail(ld, -ENOMEM, "feeder_loader_state_load: out of memory");
    memcpy(copy, buf, len);
    /* Checked on the copy, so the map points into memory the loader owns. */
    feeder__state st;
    int rc = state_check(ld, copy, len, &st);
    if (rc) {
        free(copy);
        return rc;
    }
    drop_resume(ld);
    ld->resume = copy;
    ld->resume_len = len;
    ld->resume_st = st;
    return 0;
}

int feeder__loader_describe(const feeder_loader *ld, const uint64_t *at, int want_hash,
                            int hold_epoch, feeder__state *st)
{
    memset(st, 0, sizeof(*st));
    st->seed = (uint64_t)iopt(ld, FEEDER_OPT_SEED);
    st->dataset_size = ld->ds->n;
    st->batch_size = (uint32_t)iopt(ld, FEEDER_OPT_BATCH_SIZE);
    st->drop_last = (uint32_t)iopt(ld, FEEDER_OPT_DROP_LAST);
    st->shuffle = (uint32_t)iopt(ld, FEEDER_OPT_SHUFFLE);
    st->user_sampler = ld->sampler && ld->sampler != ld->own_sampler;
    st->pipeline = (uint32_t)iopt(ld, FEEDER_OPT_PIPELINE);
    /* The decoder in use once started (the plan's), the one asked for before. */
    st->decoder = (uint32_t)(ld->started ? ld->job.t.decoder : iopt(ld, FEEDER_OPT_DECODER));
    st->layout = (uint32_t)iopt(ld, FEEDER_OPT_LAYOUT);
    st->height = (uint32_t)iopt(ld, FEEDER_OPT_HEIGHT);
    st->width = (uint32_t)iopt(ld, FEEDER_OPT_WIDTH);
    st->resize = (uint32_t)iopt(ld, FEEDER_OPT_RESIZE);
    st->policy = (uint32_t)iopt(ld, FEEDER_OPT_ERROR_POLICY);
    st->max_pixels = (uint64_t)iopt(ld, FEEDER_OPT_MAX_PIXELS);
    st->scale_min = dopt(ld, FEEDER_OPT_SCALE_MIN);
    st->scale_max = dopt(ld, FEEDER_OPT_SCALE_MAX);
    st->ratio_min = dopt(ld, FEEDER_OPT_RATIO_MIN);
    st->ratio_max = dopt(ld, FEEDER_OPT_RATIO_MAX);
    st->flip_prob = dopt(ld, FEEDER_OPT_FLIP_PROB);
    if (!at && (ld->in_epoch || hold_epoch)) {
        st->epoch = ld->epoch;
        st->sampler_len = ld->order_len;
        st->nbatches = ld->nbatches;
        st->delivered = ld->delivered;
        st->map = ld->done_map;
        if (want_hash)
            st->order_hash = feeder__order_hash(ld->order, ld->order_len);
        return 0;
    }
    st->epoch = at ? *at : next_epoch(ld);
    if (!at && ld->resume) {
        st->delivered = ld->resume_st.delivered;
        st->map = ld->resume_st.map;
    }
    feeder_sampler *tmp = NULL;
    const feeder_sampler *smp = ld->sampler;
    int rc;
    if (!smp) {
        if ((rc = default_sampler(ld, &tmp)))
            return rc;
        smp = tmp;
    }
    uint64_t len = feeder_sampler_len(smp, st->epoch);
    st->sampler_len = len;
    st->nbatches = feeder_batch_count(len, st->batch_size, (int)st->drop_last);
    rc = 0;
    if (want_hash) {
        uint64_t *order = len > SIZE_MAX / sizeof(uint64_t) ? NULL : malloc(len ? len * 8 : 1);
        if (!order)
            rc = feeder__loader_fail(ld, -ENOMEM, "out of memory for the order of epoch %llu",
                                     (unsigned long long)st->epoch);
        else if ((rc = feeder_sampler_fill(smp, st->epoch, order, len)))
            feeder__loader_fail(ld, rc, "the sampler failed for epoch %llu: %s",
                                (unsigned long long)st->epoch, feeder_strerror(rc));
        else
            st->order_hash = feeder__order_hash(order, len);
        free(order);
    }
    feeder_sampler_destroy(tmp);
    return rc;
}
