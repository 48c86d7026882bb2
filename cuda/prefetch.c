/*
 * The GPU prefetcher: host batches in, device batches out.
 *
 * A ring of `depth` entries, each a device buffer (plus a uint8 staging
 * buffer when the output is float), device labels, host copies of the labels
 * and indices, and three events: h2d (the slot's bytes are on the device),
 * copy (the batch is complete: copied and normalised; this is the batch's
 * ready_event) and release (recorded on the user's stream by
 * feeder_batch_release).
 *
 * Ordering (DESIGN invariant 2), all enforced on the GPU or by events, so
 * neither feeder_next nor feeder_batch_release blocks on the GPU:
 *  - a device buffer is written again only after the copy stream has waited
 *    on its release event, i.e. after the user's stream passed the release;
 *  - a host slot goes back to the workers only after its h2d event has
 *    passed (register / none), or after the pin threads copied it out (copy);
 *  - a pinned buffer is overwritten only after the h2d copy that read it has
 *    completed (cudaEventSynchronize on its h2d event, on the host, before
 *    the pin threads are given the entry again).
 *
 * Delivery keeps the host loader's order: a FIFO holds prefetched batches and
 * statuses (an error, FEEDER_DONE) in the order the host loader gave them;
 * after a status nothing more is pulled until the user has taken it, so an
 * epoch's end or a failed batch is reported exactly where it belongs.
 *
 * feeder_next returns batch k as soon as its copy is enqueued, and before
 * returning it pulls every host batch that is already finished into free
 * entries, so the copy of k+1 runs while the user computes on k. Releasing a
 * batch does the same, so a freed entry is refilled at once.
 *
 * The PIN_COPY threads (DESIGN: one memcpy thread reaches 9-15 GB/s, PCIe
 * needs more) share each job: every thread copies a chunk, the last one to
 * finish enqueues the H2D and the events. They never touch the host loader.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/common.h"
#include "cuda/gpu.h"
#include "cuda/normalize.h"
#include "decode/gpu_decode.h"
#include "feeder_cuda.h"
#include "dataset/pack.h"
#include "common/nvtx.h"
#include "common/trace.h"

#define ENTRY_MAGIC 0xFEEDC0DAu
#define CHUNK_ALIGN 4096

enum { E_FREE = 0, E_PENDING, E_LENT };
/* PIN_COPY progress of an entry, under g->lock. */
enum { PIN_IDLE = 0, PIN_QUEUED, PIN_ENQUEUED };

typedef struct entry {
    uint32_t magic; /* first: feeder__gpu_owns() tells entries from host slots */
    feeder__gpu *g;
    int state;
    feeder_batch pub;
    feeder_batch *hb; /* host batch whose slot this entry still reads, or NULL */
    uint8_t *stage;   /* device uint8 batch (== dev for uint8 output) */
    void *dev;        /* device output batch */
    int64_t *dev_labels;
    uint8_t *pinned;  /* PIN_COPY: data then labels */
    int64_t *labels;  /* host copies lent with the batch */
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
    size_t in_bytes;
    /* PIN_COPY job, under g->lock */
    int pin;
    int slot_done;          /* the pin threads are done with the host slot */
    unsigned chunks_taken, chunks_done;
    const uint8_t *src;     /* slot data */
    const int64_t *src_labels;
    int err;                /* a CUDA error of the pin thread that enqueued */
    char errmsg[256];
} entry;

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
    const feeder__slot_layout *l;
    uint8_t *mem;
    size_t mem_bytes;
    int registered;
    int pin_mode;
    int depth;
    entry *e;
    size_t in_bytes, out_bytes, out_sample_bytes;
    uint32_t nslots;
    int held;      /* host batches held by entries */
    item *fifo;
    int head, len; /* FIFO of depth + 1 items */
    int paused;    /* a status is queued: pull nothing until it is taken */
    int broken;    /* a CUDA error: every later call fails with it */
    char broken_msg[512];
    char describe[512];
    uint64_t device_bytes, pinned_bytes;
    uint64_t h2d_ns; /* copy times harvested at reuse, not yet in the stats */

    /* GPU decoders (NVJPEG, HYBRID) */
    feeder__gpu_decoder *dec;
    int decodes;
    char dec_why[300];
    feeder__gpu_image *imgs;
    uint32_t *refused;
    uint8_t *fb;          /* one decoded sample of the CPU fallback */
    uint64_t dec_ns;      /* decode times harvested, not yet in the stats */
    uint64_t gpu_decoded, gpu_fallback; /* not yet in the stats */
    int waited;           /* the last host batch was waited for (> 0.2 ms) */

    /* RAW packed files: records copied from the file's registered mapping */
    const struct feeder__pack *pack;
    int pack_registered;

    /* PIN_COPY threads */
    pthread_t *thr;
    int nthr;
    pthread_mutex_t lock;
    pthread_cond_t cv_work, cv_done;
    int *jobs; /* FIFO of entry ids waiting for or under copy */
    int jhead, jlen;
    int stop;
    uint64_t pin_ns; /* under lock */

    /* Trace (loader/trace.h): GPU times are mapped to the host clock through
     * tr_ref, an event known to have passed at host time tr_ref_ns. */
    feeder__trace *tr;
    int tr_copy; /* the copy stream's track */
    int tr_dec;  /* the GPU decoder's track (same stream, its own row) */
    cudaEvent_t tr_ref;
    uint64_t tr_ref_ns;
};

/* Leave a message for feeder__gpu_errmsg and return rc. */
static int layer_fail(feeder__gpu *g, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int layer_fail(feeder__gpu *g, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->errmsg, sizeof(g->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

static int host_release(feeder__gpu *g, feeder_batch *hb)
{
    return g->cfg.host.release(g->cfg.host.ctx, hb);
}

static void set_cpu_share(feeder__gpu *g, uint32_t permille)
{
    g->cpu_share = permille > 1000 ? 1000 : permille;
    g->st.hybrid_cpu_permille = g->cpu_share;
    g->cfg.host.set_cpu_share(g->cfg.host.ctx, g->cpu_share);
}

/* Add one batch's (or drop's) counters to the layer's. */
static void stats_add(feeder__gpu *g, const feeder_stats *d)
{
    g->st.pin_ns += d->pin_ns;
    g->st.h2d_ns += d->h2d_ns;
    g->st.h2d_bytes += d->h2d_bytes;
    g->st.gpu_batches += d->gpu_batches;
    g->st.wait_ns += d->wait_ns;
    g->st.gpu_decoded += d->gpu_decoded;
    g->st.gpu_fallback += d->gpu_fallback;
    g->st.gpu_decode_ns += d->gpu_decode_ns;
}

static const char *cuerr(cudaError_t e) { return cudaGetErrorString(e); }

/* ---- device selection: feeder's calls run on its device and leave the
 * caller's current device as it was ---- */

typedef struct devguard {
    int prev, changed;
} devguard;

static cudaError_t dev_enter(const feeder__gpu *g, devguard *d)
{
    d->changed = 0;
    cudaError_t e = cudaGetDevice(&d->prev);
    if (e != cudaSuccess)
        return e;
    if (d->prev != g->cfg.device) {
        if ((e = cudaSetDevice(g->cfg.device)) != cudaSuccess)
            return e;
        d->changed = 1;
    }
    return cudaSuccess;
}

static void dev_leave(const devguard *d)
{
    if (d->changed)
        cudaSetDevice(d->prev);
}

/* ---- probing ---- */

int feeder__gpu_probe(int device, char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        feeder__fmt(why, whylen, "no CUDA device: cudaGetDeviceCount: %s", cuerr(e));
        cudaGetLastError(); /* not sticky: clear it for the user */
        return FEEDER_EUNSUPPORTED;
    }
    if (n == 0) {
        feeder__fmt(why, whylen, "no CUDA device: cudaGetDeviceCount found none");
        return FEEDER_EUNSUPPORTED;
    }
    if (device >= n) {
        feeder__fmt(why, whylen, "device = %d, but this machine has %d CUDA device%s (0..%d)",
                    device, n, n == 1 ? "" : "s", n - 1);
        return FEEDER_ERANGE;
    }
    return 0;
}

/* ---- memory ---- */

static void *dev_alloc(feeder__gpu *g, size_t bytes, cudaError_t *err)
{
    void *p = NULL;
    if (g->cfg.dev_alloc.alloc) {
        p = g->cfg.dev_alloc.alloc(g->cfg.dev_alloc.user, bytes);
        *err = p ? cudaSuccess : cudaErrorMemoryAllocation;
    } else {
        *err = cudaMalloc(&p, bytes);
        if (*err != cudaSuccess)
            p = NULL;
    }
    if (p)
        g->device_bytes += bytes;
    return p;
}

static void dev_free(feeder__gpu *g, void *p)
{
    if (!p)
        return;
    if (g->cfg.dev_alloc.alloc)
        g->cfg.dev_alloc.free(g->cfg.dev_alloc.user, p);
    else
        cudaFree(p);
}

static void *pin_alloc(feeder__gpu *g, size_t bytes, cudaError_t *err)
{
    void *p = NULL;
    if (g->cfg.pin_alloc.alloc) {
        p = g->cfg.pin_alloc.alloc(g->cfg.pin_alloc.user, bytes);
        *err = p ? cudaSuccess : cudaErrorMemoryAllocation;
    } else {
        *err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        if (*err != cudaSuccess)
            p = NULL;
    }
    if (p)
        g->pinned_bytes += bytes;
    return p;
}

static void pin_free(feeder__gpu *g, void *p)
{
    if (!p)
        return;
    if (g->cfg.pin_alloc.alloc)
        g->cfg.pin_alloc.free(g->cfg.pin_alloc.user, p);
    else
        cudaFreeHost(p);
}

/* ---- the CUDA work of one batch, on the copy stream ---- */

/* Add an entry's finished copy (and decode) times to the counters; its
 * h2d_ev has passed. */
static void harvest(feeder__gpu *g, entry *en, uint64_t *h2d_ns)
{
    float ms = 0;
    if (!en->decoded) {
        if (cudaEventElapsedTime(&ms, en->start_ev, en->h2d_ev) == cudaSuccess)
            *h2d_ns += (uint64_t)(ms * 1e6);
        return;
    }
    if (cudaEventElapsedTime(&ms, en->start_ev, en->dec_ev) == cudaSuccess)
        *h2d_ns += (uint64_t)(ms * 1e6);
    if (cudaEventElapsedTime(&ms, en->dec_ev, en->h2d_ev) == cudaSuccess) {
        g->dec_ns += (uint64_t)(ms * 1e6);
    }
}

/* Enqueue: wait for the buffer's release, copy data and labels from `src`,
 * normalise, record the events. Returns a cudaError_t. */
static cudaError_t enqueue_copies(feeder__gpu *g, entry *en, const uint8_t *src,
                                  const int64_t *labels, cudaStream_t s)
{
    cudaError_t e = cudaSuccess;
    if (en->wait_release && (e = cudaStreamWaitEvent(s, en->release_ev, 0)) != cudaSuccess)
        return e;
    en->wait_release = 0;
    if ((e = cudaEventRecord(en->start_ev, s)) != cudaSuccess)
        return e;
    if ((e = cudaMemcpyAsync(en->stage, src, en->in_bytes, cudaMemcpyHostToDevice, s)) != cudaSuccess)
        return e;
    if ((e = cudaMemcpyAsync(en->dev_labels, labels, en->count * sizeof(int64_t),
                             cudaMemcpyHostToDevice, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(en->h2d_ev, s)) != cudaSuccess)
        return e;
    if (g->cfg.dtype != FEEDER_DTYPE_UINT8) {
        e = (cudaError_t)feeder__normalize_launch(en->stage, en->dev, en->count, g->l->height,
                                                  g->l->width, g->cfg.out_layout, g->cfg.dtype,
                                                  g->cfg.mean, g->cfg.std, s);
        if (e != cudaSuccess)
            return e;
    }
    if ((e = cudaEventRecord(en->copy_ev, s)) != cudaSuccess)
        return e;
    en->used = 1;
    en->timed = 1;
    en->decoded = 0;
    en->tr_epoch = (int64_t)en->pub.epoch;
    en->tr_batch = (int64_t)en->pub.number;
    return cudaSuccess;
}

static cudaError_t enqueue(feeder__gpu *g, entry *en, const uint8_t *src, const int64_t *labels)
{
    FEEDER_NVTX_PUSH("enqueue copies");
    cudaError_t e = enqueue_copies(g, en, src, labels, g->stream);
    FEEDER_NVTX_POP();
    return e;
}

/* ---- trace ---- */

void feeder__gpu_trace_events(feeder__gpu *g, int track, const char *name, void *ev0, void *ev1,
                              int64_t epoch, int64_t batch)
{
    float a = 0, d = 0;
    if (!g->tr || cudaEventElapsedTime(&a, g->tr_ref, (cudaEvent_t)ev0) != cudaSuccess ||
        cudaEventElapsedTime(&d, (cudaEvent_t)ev0, (cudaEvent_t)ev1) != cudaSuccess) {
        cudaGetLastError(); /* not ready, or not timed: not sticky */
        return;
    }
    /* Start from the reference (float ms: ~8 us steps after 100 s), length
     * from the pair itself (exact to the event resolution). */
    uint64_t t0 = g->tr_ref_ns + (uint64_t)((double)a * 1e6);
    feeder__trace_span_e(g->tr, track, name, t0, t0 + (uint64_t)((double)d * 1e6), epoch, batch,
                         -1);
}

/* The copy-stream spans of an entry whose h2d_ev has passed: H2D now, the
 * normalise kernel once copy_ev has passed too (never waited for). */
static void trace_copies(feeder__gpu *g, entry *en, int h2d)
{
    if (!g->tr)
        return;
    int64_t ep = en->tr_epoch, b = en->tr_batch;
    if (h2d && en->decoded) {
        /* GPU decoders: the copies of the workers' pixels and the labels,
         * then nvJPEG + the resize kernel (+ any CPU fallback's copies). */
        feeder__gpu_trace_events(g, g->tr_copy, "H2D", en->start_ev, en->dec_ev, ep, b);
        feeder__gpu_trace_events(g, g->tr_dec, "nvJPEG decode + resize", en->dec_ev, en->h2d_ev,
                                 ep, b);
        en->tr_norm = g->cfg.dtype != FEEDER_DTYPE_UINT8;
    } else if (h2d) {
        feeder__gpu_trace_events(g, g->tr_copy, "H2D", en->start_ev, en->h2d_ev, ep, b);
        en->tr_norm = g->cfg.dtype != FEEDER_DTYPE_UINT8;
    }
    if (en->tr_norm && cudaEventQuery(en->copy_ev) == cudaSuccess) {
        feeder__gpu_trace_events(g, g->tr_copy, "normalise", en->h2d_ev, en->copy_ev, ep, b);
        en->tr_norm = 0;
    }
}

/* Copy n decoded samples from src (host) to places [i, i + n) of the device
 * batch. */
static cudaError_t copy_pixels(feeder__gpu *g, entry *en, const uint8_t *src, uint32_t i,
                               uint32_t n)
{
    size_t sb = g->l->sample_bytes;
    en->in_bytes += (size_t)n * sb;
    return cudaMemcpyAsync(en->stage + (size_t)i * sb, src, (size_t)n * sb,
                           cudaMemcpyHostToDevice, g->stream);
}

/* HYBRID: move the workers' share of each batch towards the point where
 * neither side waits for the other. A host batch that was already finished
 * when the GPU side asked for it means the workers are ahead: give them more;
 * one the GPU side had to wait for means they are behind: give them less.
 * A model from per-image costs was tried first; its numbers gave the
 * workers ~40% of each batch on the H100 machine where their measured rate
 * allows under 30% (their decode time leaves out reading, scheduling and the
 * cores the loader's thread and the driver take), so the split follows what
 * the pipeline does, not what it should do. A step shows only in batches
 * dispatched after it, which arrive behind every slot already in flight, so
 * the step is small against that lag: all the slots together move the share
 * by at most 6%, and it does not swing from one side to the other. */
static void rebalance(feeder__gpu *g)
{
    uint32_t step = 60 / g->nslots ? 60 / g->nslots : 1;
    uint32_t pm = g->cpu_share;
    pm = g->waited ? (pm > 20 + step ? pm - step : 20) : (pm + step < 980 ? pm + step : 980);
    set_cpu_share(g, pm);
}

/* A RAW packed file's batch: every record straight from the registered file
 * mapping to its place in the device batch, one copy per run of records that
 * follow each other in the file (one for the whole batch in sequential
 * order); only the labels come from the slot. */
static cudaError_t direct_enqueue(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    const struct feeder__pack *pk = g->pack;
    size_t sb = g->l->sample_bytes;
    cudaStream_t s = g->stream;
    cudaError_t e;
    if (en->wait_release && (e = cudaStreamWaitEvent(s, en->release_ev, 0)) != cudaSuccess)
        return e;
    en->wait_release = 0;
    if ((e = cudaEventRecord(en->start_ev, s)) != cudaSuccess)
        return e;
    for (uint32_t i = 0; i < hb->count;) {
        uint32_t j = i + 1;
        while (j < hb->count && pk->off[hb->indices[j]] == pk->off[hb->indices[j - 1]] + sb)
            j++;
        if ((e = cudaMemcpyAsync(en->stage + (size_t)i * sb, pk->map + pk->off[hb->indices[i]],
                                 (size_t)(j - i) * sb, cudaMemcpyHostToDevice, s)) != cudaSuccess)
            return e;
        i = j;
    }
    if ((e = cudaMemcpyAsync(en->dev_labels, hb->labels, hb->count * sizeof(int64_t),
                             cudaMemcpyHostToDevice, s)) != cudaSuccess ||
        (e = cudaEventRecord(en->h2d_ev, s)) != cudaSuccess)
        return e;
    if (g->cfg.dtype != FEEDER_DTYPE_UINT8 &&
        (e = (cudaError_t)feeder__normalize_launch(en->stage, en->dev, en->count, g->l->height,
                                                   g->l->width, g->cfg.out_layout, g->cfg.dtype,
                                                   g->cfg.mean, g->cfg.std, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(en->copy_ev, s)) != cudaSuccess)
        return e;
    en->in_bytes = (size_t)hb->count * sb;
    en->used = 1;
    en->timed = 1;
    en->decoded = 0;
    en->tr_epoch = (int64_t)hb->epoch;
    en->tr_batch = (int64_t)hb->number;
    return cudaSuccess;
}

/* The GPU decoders' work for one host batch: copy what the workers decoded,
 * decode the rest with nvJPEG, and decode on the CPU here what nvJPEG
 * refuses. 0; a CUDA failure (FEEDER_ECUDA, the layer is broken); or a
 * sample's error with *sample_err set and `msg` naming the sample (the batch
 * fails, the layer goes on). */
static int decode_enqueue(feeder__gpu *g, entry *en, feeder_batch *hb, int *sample_err,
                          char *msg, size_t msglen)
{
    const feeder__slot_layout *l = g->l;
    uint8_t *data = hb->data;
    uint64_t *enc = feeder__slot_encoded(l, data - l->data_off);
    const uint64_t *place = feeder__slot_place(l, data - l->data_off);
    size_t sb = l->sample_bytes;
    cudaStream_t s = g->stream;
    cudaError_t e;
    *sample_err = 0;
    en->in_bytes = 0;
    if (en->wait_release && (e = cudaStreamWaitEvent(s, en->release_ev, 0)) != cudaSuccess)
        goto cuda_fail;
    en->wait_release = 0;
    if ((e = cudaEventRecord(en->start_ev, s)) != cudaSuccess)
        goto cuda_fail;
    /* Each sample is at its place in the slot (collate/slot.h): JPEG bytes
     * for nvJPEG, or pixels the workers decoded, copied in runs that follow
     * each other both in the slot and in the batch. */
    uint32_t n = 0, run = UINT32_MAX;
    for (uint32_t i = 0; i <= hb->count; i++) {
        int pixels = i < hb->count && enc[i] == 0;
        int joins = pixels && run != UINT32_MAX && place[i] == place[run] + (i - run) * sb;
        if (run != UINT32_MAX && !joins) {
            if ((e = copy_pixels(g, en, data + place[run], run, i - run)) != cudaSuccess)
                goto cuda_fail;
            run = UINT32_MAX;
        }
        if (pixels && run == UINT32_MAX)
            run = i;
        if (i < hb->count && enc[i])
            g->imgs[n++] = (feeder__gpu_image){data + place[i], (size_t)enc[i], hb->indices[i], i};
    }
    if ((e = cudaMemcpyAsync(en->dev_labels, hb->labels, hb->count * sizeof(int64_t),
                             cudaMemcpyHostToDevice, s)) != cudaSuccess ||
        (e = cudaEventRecord(en->dec_ev, s)) != cudaSuccess)
        goto cuda_fail;
    uint32_t nref = 0;
    char derr[300] = "";
    FEEDER_NVTX_PUSH("nvJPEG batch");
    int rc = feeder__gpu_decode(g->dec, g->cfg.transform, g->cfg.seed, hb->epoch, g->imgs, n, en->stage, sb, s,
                                g->refused, &nref, derr, sizeof(derr));
    FEEDER_NVTX_POP();
    if (rc) {
        feeder__fmt(msg, msglen, "decoding batch %llu of epoch %llu on device %d: %s",
                    (unsigned long long)hb->number, (unsigned long long)hb->epoch,
                    g->cfg.device, derr);
        return rc;
    }
    /* What nvJPEG refused: decoded here into a scratch sample and copied
     * from there (a pageable copy: the call returns once it has read the
     * scratch, so the next one may reuse it). */
    for (uint32_t r = 0; r < nref; r++) {
        const feeder__gpu_image *im = &g->imgs[g->refused[r]];
        rc = g->cfg.host.decode_cpu(g->cfg.host.ctx, im->jpeg, im->len, hb->epoch, im->index,
                                    g->fb, msg, msglen);
        if (rc) {
            *sample_err = 1;
            /* Nothing of this batch may still read the slot when it goes
             * back: the rare path waits. */
            cudaStreamSynchronize(s);
            return rc;
        }
        if ((e = copy_pixels(g, en, g->fb, im->pos, 1)) != cudaSuccess)
            goto cuda_fail;
    }
    g->gpu_decoded += n - nref;
    g->gpu_fallback += nref;
    if ((e = cudaEventRecord(en->h2d_ev, s)) != cudaSuccess)
        goto cuda_fail;
    if (g->cfg.dtype != FEEDER_DTYPE_UINT8 &&
        (e = (cudaError_t)feeder__normalize_launch(en->stage, en->dev, en->count, l->height,
                                                   l->width, g->cfg.out_layout, g->cfg.dtype,
                                                   g->cfg.mean, g->cfg.std, s)) != cudaSuccess)
        goto cuda_fail;
    if ((e = cudaEventRecord(en->copy_ev, s)) != cudaSuccess)
        goto cuda_fail;
    en->used = 1;
    en->timed = 1;
    en->decoded = n - nref;
    en->tr_epoch = (int64_t)hb->epoch;
    en->tr_batch = (int64_t)hb->number;
    if (g->cfg.decoder == FEEDER_DECODER_HYBRID && n > nref)
        rebalance(g);
    return 0;
cuda_fail:
    feeder__fmt(msg, msglen, "copying batch %llu of epoch %llu to device %d: %s",
                (unsigned long long)hb->number, (unsigned long long)hb->epoch, g->cfg.device,
                cuerr(e));
    return FEEDER_ECUDA;
}

/* ---- PIN_COPY threads ---- */

static void *pin_thread(void *arg)
{
    feeder__gpu *g = arg;
    /* The runtime's current device is per thread. */
    cudaSetDevice(g->cfg.device);
    int track = feeder__trace_track_next(g->tr, "pin thread");
    pthread_mutex_lock(&g->lock);
    for (;;) {
        entry *en = NULL;
        unsigned chunk = 0;
        while (!g->stop) {
            if (g->jlen) {
                en = &g->e[g->jobs[g->jhead]];
                if (en->chunks_taken < (unsigned)g->nthr)
                    break;
            }
            en = NULL;
            pthread_cond_wait(&g->cv_work, &g->lock);
        }
        if (g->stop)
            break;
        chunk = en->chunks_taken++;
        /* Once every chunk is taken the next job may start: the head moves. */
        if (en->chunks_taken == (unsigned)g->nthr) {
            g->jhead = (g->jhead + 1) % (g->depth + 1);
            g->jlen--;
            if (g->jlen)
                pthread_cond_broadcast(&g->cv_work);
        }
        pthread_mutex_unlock(&g->lock);

        /* Chunks are page multiples so threads never share a page. */
        size_t per = (en->in_bytes + (size_t)g->nthr - 1) / (size_t)g->nthr;
        per = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
        size_t lo = (size_t)chunk * per, hi = lo + per;
        if (hi > en->in_bytes)
            hi = en->in_bytes;
        uint64_t t0 = feeder__now_ns();
        FEEDER_NVTX_PUSH("pin copy");
        if (lo < hi)
            memcpy(en->pinned + lo, en->src + lo, hi - lo);
        if (chunk == 0)
            memcpy(en->pinned + g->in_bytes, en->src_labels, en->count * sizeof(int64_t));
        FEEDER_NVTX_POP();
        uint64_t t1 = feeder__now_ns(), dt = t1 - t0;
        feeder__trace_span_e(g->tr, track, "pin copy", t0, t1, (int64_t)en->pub.epoch,
                             (int64_t)en->pub.number, -1);

        pthread_mutex_lock(&g->lock);
        g->pin_ns += dt;
        if (++en->chunks_done == (unsigned)g->nthr) {
            en->slot_done = 1;
            /* The last one enqueues, under the lock: the stream is shared by
             * the pin threads. Two jobs may reach the stream out of order;
             * that is harmless, each batch has its own events. */
            cudaError_t e = enqueue(g, en, en->pinned, (const int64_t *)(en->pinned + g->in_bytes));
            if (e != cudaSuccess) {
                en->err = FEEDER_ECUDA;
                feeder__fmt(en->errmsg, sizeof(en->errmsg), "copying batch %llu to device %d: %s",
                            (unsigned long long)en->pub.number, g->cfg.device, cuerr(e));
            }
            en->pin = PIN_ENQUEUED;
            pthread_cond_broadcast(&g->cv_done);
        }
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* ---- start and stop ---- */

static int setup_fail(feeder__gpu *g, char *why, size_t whylen, const char *what, cudaError_t e)
{
    feeder__fmt(why, whylen, "GPU path on device %d: %s: %s", g->cfg.device, what, cuerr(e));
    return FEEDER_ECUDA;
}

int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen)
{
    int rc = feeder__gpu_probe(cfg->device, why, whylen);
    if (rc)
        return rc;
    feeder__gpu *g = calloc(1, sizeof(*g));
    if (!g) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    g->cfg = *cfg;
    g->l = cfg->layout;
    g->mem = cfg->slot_mem;
    g->mem_bytes = cfg->slot_mem_bytes;
    g->nslots = cfg->nslots;
    g->depth = cfg->depth;
    g->pin_mode = cfg->pin_mode;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv_work, NULL);
    pthread_cond_init(&g->cv_done, NULL);

    devguard dg;
    cudaError_t e = dev_enter(g, &dg);
    if (e != cudaSuccess) {
        rc = setup_fail(g, why, whylen, "cudaSetDevice", e);
        feeder__gpu_destroy(g);
        return rc;
    }

    static const size_t esize[] = {1, 2, 2, 4};
    g->in_bytes = (size_t)g->l->batch * g->l->sample_bytes;
    g->out_sample_bytes = g->l->sample_bytes * esize[cfg->dtype];
    g->out_bytes = (size_t)g->l->batch * g->out_sample_bytes;

    const char *pin_note = "";
    char note[300] = "";
    char pack_note[300] = "";
    if (cfg->copy_stream) {
        g->stream = (cudaStream_t)cfg->copy_stream;
    } else if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = setup_fail(g, why, whylen, "cudaStreamCreateWithFlags", e);
        goto fail;
    } else {
        g->own_stream = 1;
    }
    if (cfg->decoder == FEEDER_DECODER_NVJPEG || cfg->decoder == FEEDER_DECODER_HYBRID) {
        rc = feeder__gpu_decoder_create(&g->dec, g->dec_why, sizeof(g->dec_why));
        if (rc == 0) {
            g->decodes = 1;
            g->imgs = calloc(g->l->batch, sizeof(*g->imgs));
            g->refused = calloc(g->l->batch, sizeof(*g->refused));
            g->fb = malloc(g->l->sample_bytes);
            if (!g->imgs || !g->refused || !g->fb) {
                feeder__fmt(why, whylen, "out of memory");
                rc = -ENOMEM;
                goto fail;
            }
            /* nvJPEG reads the bitstreams from the slots: registered slots
             * (or pageable ones) serve it; pinned copies of whole slots
             * would copy mostly empty space. */
            if (g->pin_mode == FEEDER_PIN_COPY) {
                g->pin_mode = FEEDER_PIN_REGISTER;
                pin_note = " (pin copy asked for: the GPU decoder reads the slots)";
            }
        } else if (rc != FEEDER_EUNSUPPORTED) {
            feeder__fmt(why, whylen, "GPU decoder: %s", g->dec_why);
            goto fail;
        }
        rc = 0;
    }
    if ((g->tr = cfg->trace)) {
        /* The reference for mapping GPU times to the host clock: an event
         * waited for once, here, with the host time read right after. */
        g->tr_copy = feeder__trace_track(g->tr, "copy stream (GPU)");
        if (g->decodes)
            g->tr_dec = feeder__trace_track(g->tr, "gpu decode (GPU)");
        if ((e = cudaEventCreate(&g->tr_ref)) != cudaSuccess ||
            (e = cudaEventRecord(g->tr_ref, g->stream)) != cudaSuccess ||
            (e = cudaEventSynchronize(g->tr_ref)) != cudaSuccess) {
            rc = setup_fail(g, why, whylen, "the trace's reference event", e);
            goto fail;
        }
        g->tr_ref_ns = feeder__now_ns();
    }
    {
        /* A RAW packed file read through the mapping in sequential order,
         * records unchecked: the copy engine reads each batch's records, one
         * stretch of the file, from the file's pages (registered read-only),
         * so no worker copies them into a slot first; that copy out of the
         * page cache held packed batches at 36.7 GB/s, this path reaches
         * 41-50 (H100 machine, docs/BENCHMARKS.md run 14). A shuffled order
         * would need one copy per record, and 150 KB copies one at a time
         * reached only 24.9 GB/s there: shuffled batches go through the slots,
         * where the workers' copies run in parallel. */
        const struct feeder__pack *pk = cfg->pack;
        if (pk && pk->v.h.kind == FEEDER_RECORD_RAW && cfg->packed_mmap_no_crc &&
            cfg->sequential && pk->v.h.record_bytes == g->l->sample_bytes) {
            e = cudaHostRegister(pk->map, pk->map_len,
                                 cudaHostRegisterPortable | cudaHostRegisterReadOnly);
            if (e == cudaSuccess) {
                g->pack = pk;
                g->pack_registered = 1;
                g->pinned_bytes += pk->map_len;
                if (g->pin_mode == FEEDER_PIN_COPY)
                    g->pin_mode = FEEDER_PIN_REGISTER; /* the slots hold only labels */
            } else {
                cudaGetLastError();
                feeder__fmt(pack_note, sizeof(pack_note),
                            ", records through the slots (cudaHostRegister of the packed file "
                            "failed: %s)", cuerr(e));
            }
        }
    }
    if (g->pin_mode == FEEDER_PIN_REGISTER) {
        /* The whole slot mapping, so every slot's labels and data are
         * DMA-able; workers keep writing through their own mappings. */
        e = cudaHostRegister(g->mem, g->mem_bytes, cudaHostRegisterPortable);
        if (e == cudaSuccess) {
            g->registered = 1;
            g->pinned_bytes += g->mem_bytes;
        } else {
            cudaGetLastError();
            feeder__fmt(note, sizeof(note), " (cudaHostRegister of %zu bytes of slots failed: %s)",
                        g->mem_bytes, cuerr(e));
            pin_note = note;
            g->pin_mode = g->decodes ? FEEDER_PIN_NONE : FEEDER_PIN_COPY;
        }
    }

    g->e = calloc((size_t)g->depth, sizeof(*g->e));
    g->fifo = calloc((size_t)g->depth + 1, sizeof(*g->fifo));
    g->jobs = calloc((size_t)g->depth + 1, sizeof(*g->jobs));
    if (!g->e || !g->fifo || !g->jobs) {
        feeder__fmt(why, whylen, "out of memory");
        rc = -ENOMEM;
        goto fail;
    }
    for (int i = 0; i < g->depth; i++) {
        entry *en = &g->e[i];
        en->magic = ENTRY_MAGIC;
        en->g = g;
        char what[160];
        en->stage = dev_alloc(g, g->in_bytes ? g->in_bytes : 1, &e);
        if (!en->stage) {
            feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                        g->in_bytes, i);
            rc = setup_fail(g, why, whylen, what, e);
            goto fail;
        }
        if (cfg->dtype == FEEDER_DTYPE_UINT8) {
            en->dev = en->stage;
        } else if (!(en->dev = dev_alloc(g, g->out_bytes, &e))) {
            feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                        g->out_bytes, i);
            rc = setup_fail(g, why, whylen, what, e);
            goto fail;
        }
        if (!(en->dev_labels = dev_alloc(g, (size_t)g->l->batch * sizeof(int64_t), &e))) {
            rc = setup_fail(g, why, whylen, "allocating device labels", e);
            goto fail;
        }
        if (g->pin_mode == FEEDER_PIN_COPY &&
            !(en->pinned = pin_alloc(g, g->in_bytes + (size_t)g->l->batch * sizeof(int64_t), &e))) {
            feeder__fmt(what, sizeof(what), "allocating %zu bytes of pinned memory for buffer %d",
                        g->in_bytes + (size_t)g->l->batch * sizeof(int64_t), i);
            rc = setup_fail(g, why, whylen, what, e);
            goto fail;
        }
        en->labels = malloc((size_t)g->l->batch * sizeof(int64_t));
        en->indices = malloc((size_t)g->l->batch * sizeof(uint64_t));
        if (!en->labels || !en->indices) {
            feeder__fmt(why, whylen, "out of memory");
            rc = -ENOMEM;
            goto fail;
        }
        if ((e = cudaEventCreate(&en->start_ev)) != cudaSuccess ||
            (e = cudaEventCreate(&en->h2d_ev)) != cudaSuccess ||
            (e = cudaEventCreateWithFlags(&en->copy_ev, g->tr ? cudaEventDefault
                                                              : cudaEventDisableTiming)) !=
                cudaSuccess ||
            (e = cudaEventCreateWithFlags(&en->release_ev, cudaEventDisableTiming)) != cudaSuccess ||
            (e = cudaEventCreate(&en->dec_ev)) != cudaSuccess) {
            rc = setup_fail(g, why, whylen, "cudaEventCreate", e);
            goto fail;
        }
    }
    if (g->pin_mode == FEEDER_PIN_COPY) {
        g->nthr = cfg->pin_threads;
        g->thr = calloc((size_t)g->nthr, sizeof(*g->thr));
        if (!g->thr) {
            feeder__fmt(why, whylen, "out of memory");
            rc = -ENOMEM;
            goto fail;
        }
        for (int i = 0; i < g->nthr; i++) {
            int err = pthread_create(&g->thr[i], NULL, pin_thread, g);
            if (err) {
                g->nthr = i;
                feeder__fmt(why, whylen, "starting pin thread %d: %s", i, strerror(err));
                rc = -err;
                goto fail;
            }
        }
    }
    static const char *pins[] = {"none (pageable copies)", "copy", "register"};
    static const char *dtypes[] = {"uint8", "float16", "bfloat16", "float32"};
    char thr[32] = "";
    if (g->pin_mode == FEEDER_PIN_COPY)
        feeder__fmt(thr, sizeof(thr), " (%d thread%s)", g->nthr, g->nthr == 1 ? "" : "s");
    feeder__fmt(g->describe, sizeof(g->describe),
                "device %d, pin %s%s, %d device buffers of %zu bytes, %s %s", cfg->device,
                pins[g->pin_mode], thr, g->depth, g->out_bytes, dtypes[cfg->dtype],
                cfg->dtype == FEEDER_DTYPE_UINT8 && g->l->layout == FEEDER_LAYOUT_NCHW ? "NCHW"
                : cfg->dtype != FEEDER_DTYPE_UINT8 && cfg->out_layout == FEEDER_LAYOUT_NCHW ? "NCHW"
                                                                                           : "NHWC");
    if (*pin_note) {
        size_t n = strlen(g->describe);
        feeder__fmt(g->describe + n, sizeof(g->describe) - n, "%s", pin_note);
    }
    if (g->decodes) {
        size_t n = strlen(g->describe);
        feeder__fmt(g->describe + n, sizeof(g->describe) - n, ", decoder %s",
                    feeder__gpu_decoder_name(g->dec));
    }
    if (g->pack_registered || pack_note[0]) {
        size_t n = strlen(g->describe);
        feeder__fmt(g->describe + n, sizeof(g->describe) - n, "%s",
                    g->pack_registered ? ", records straight from the registered packed file"
                                       : pack_note);
    }
    g->st.pinned_bytes = g->pinned_bytes;
    g->st.device_bytes = g->device_bytes;
    if (g->decodes)
        set_cpu_share(g, cfg->cpu_share);
    dev_leave(&dg);
    *out = g;
    return 0;
fail:
    dev_leave(&dg);
    feeder__gpu_destroy(g);
    return rc;
}

const char *feeder__gpu_describe(const feeder__gpu *g) { return g ? g->describe : ""; }

int feeder__gpu_decodes(const feeder__gpu *g) { return g && g->decodes; }

int feeder__gpu_packed_direct(const feeder__gpu *g) { return g && g->pack_registered; }

const char *feeder__gpu_decode_why(const feeder__gpu *g) { return g ? g->dec_why : ""; }

int feeder__gpu_pending(const feeder__gpu *g, uint64_t epoch, uint64_t *out, int cap, int *open)
{
    int n = 0;
    *open = 0;
    for (int k = 0; k < g->len && n < cap; k++) {
        const item *it = &g->fifo[(g->head + k) % (g->depth + 1)];
        if (it->entry >= 0 && g->e[it->entry].pub.epoch == epoch) {
            out[n++] = g->e[it->entry].pub.number;
            *open = 1;
        } else if (it->entry < 0 && it->epoch == epoch) {
            if (it->batch >= 0)
                out[n++] = (uint64_t)it->batch;
            *open = 1; /* even FEEDER_DONE: the user has not seen the epoch end */
        }
    }
    return n;
}

int feeder__gpu_owns(const feeder_batch *b)
{
    return b && b->internal_ && *(const uint32_t *)b->internal_ == ENTRY_MAGIC;
}

/* ---- host slots back ---- */

/* Give back the host slot of every entry that is done with it. `block`:
 * wait for the oldest such copy when no slot could be freed otherwise. */
static int reap(feeder__gpu *g, feeder_stats *d, int block)
{
    for (int pass = 0; pass < 2; pass++) {
        int freed = 0;
        entry *oldest = NULL;
        for (int i = 0; i < g->depth; i++) {
            entry *en = &g->e[i];
            int done = 0;
            if (g->pin_mode == FEEDER_PIN_COPY) {
                /* The pin threads own an entry's events until it is enqueued. */
                pthread_mutex_lock(&g->lock);
                int enq = en->pin == PIN_ENQUEUED || en->pin == PIN_IDLE;
                done = en->slot_done;
                pthread_mutex_unlock(&g->lock);
                if (!enq && !en->hb)
                    continue;
                if (!enq)
                    goto slot;
            }
            if (en->timed) {
                cudaError_t q = cudaEventQuery(en->h2d_ev);
                if (q == cudaSuccess) {
                    harvest(g, en, &d->h2d_ns);
                    en->timed = 0;
                    trace_copies(g, en, 1);
                } else if (q != cudaErrorNotReady) {
                    return layer_fail(g, FEEDER_ECUDA, "copy of batch %llu to device %d: %s",
                                               (unsigned long long)en->pub.number, g->cfg.device,
                                               cuerr(q));
                }
            }
        slot:
            if (!en->hb)
                continue;
            if (g->pin_mode != FEEDER_PIN_COPY)
                done = en->used && !en->timed; /* h2d_ev has passed (checked above) */
            if (done) {
                host_release(g, en->hb);
                en->hb = NULL;
                g->held--;
                freed = 1;
            } else if (!oldest || en->pub.number < oldest->pub.number) {
                oldest = en;
            }
        }
        if (freed || !block || !oldest || g->held < (int)g->nslots)
            return 0;
        /* Every host slot is in a copy: wait for the oldest. */
        if (g->pin_mode == FEEDER_PIN_COPY) {
            pthread_mutex_lock(&g->lock);
            while (!oldest->slot_done)
                pthread_cond_wait(&g->cv_done, &g->lock);
            pthread_mutex_unlock(&g->lock);
        } else {
            cudaError_t e = cudaEventSynchronize(oldest->h2d_ev);
            if (e != cudaSuccess)
                return layer_fail(g, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                           (unsigned long long)oldest->pub.number, cuerr(e));
        }
    }
    return 0;
}

/* ---- pulling host batches into entries ---- */

static entry *free_entry(feeder__gpu *g)
{
    for (int i = 0; i < g->depth; i++)
        if (g->e[i].state == E_FREE)
            return &g->e[i];
    return NULL;
}

static void push_status(feeder__gpu *g, int rc, const char *msg)
{
    item *it = &g->fifo[(g->head + g->len++) % (g->depth + 1)];
    it->entry = -1;
    it->rc = rc;
    it->batch = g->cfg.host.status_batch(g->cfg.host.ctx);
    it->epoch = g->cfg.host.epoch(g->cfg.host.ctx);
    feeder__fmt(it->msg, sizeof(it->msg), "%s", msg);
    g->paused = 1;
}

/* Give back the host batch an entry still holds, waiting for its copy:
 * an entry freed by the user may be refilled before a reap saw its copy
 * end, and its old slot must not be lost. */
static int drop_held(feeder__gpu *g, entry *en)
{
    if (!en->hb)
        return 0;
    if (g->pin_mode == FEEDER_PIN_COPY) {
        pthread_mutex_lock(&g->lock);
        while (!en->slot_done && !g->stop)
            pthread_cond_wait(&g->cv_done, &g->lock);
        pthread_mutex_unlock(&g->lock);
    } else {
        cudaError_t e = cudaEventSynchronize(en->h2d_ev);
        if (e != cudaSuccess)
            return layer_fail(g, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                       (unsigned long long)en->pub.number, cuerr(e));
    }
    host_release(g, en->hb);
    en->hb = NULL;
    g->held--;
    return 0;
}

/* Start moving host batch `hb` into entry `en`. */
static int submit(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    const feeder__slot_layout *l = g->l;
    int rc = drop_held(g, en);
    if (rc) {
        host_release(g, hb);
        return rc;
    }
    en->hb = hb;
    g->held++;
    en->count = hb->count;
    en->in_bytes = (size_t)hb->count * l->sample_bytes;
    memcpy(en->labels, hb->labels, hb->count * sizeof(int64_t));
    memcpy(en->indices, hb->indices, hb->count * sizeof(uint64_t));
    feeder_batch *b = &en->pub;
    memset(b, 0, sizeof(*b));
    b->data = NULL;
    b->labels = en->labels;
    b->indices = en->indices;
    b->count = hb->count;
    b->height = hb->height;
    b->width = hb->width;
    b->channels = hb->channels;
    b->layout = g->cfg.dtype == FEEDER_DTYPE_UINT8 ? hb->layout : g->cfg.out_layout;
    b->skipped = hb->skipped;
    b->sample_bytes = g->out_sample_bytes;
    b->epoch = hb->epoch;
    b->number = hb->number;
    b->device_data = en->dev;
    b->ready_event = (void *)en->copy_ev;
    b->device_labels = en->dev_labels;
    b->dtype = g->cfg.dtype;
    b->device = g->cfg.device;
    b->device_bytes = (size_t)hb->count * g->out_sample_bytes;
    b->internal_ = en;
    en->state = E_PENDING;
    item *it = &g->fifo[(g->head + g->len++) % (g->depth + 1)];
    it->entry = (int)(en - g->e);
    it->rc = 0;

    /* The entry's last H2D must be over before its pinned buffer is
     * rewritten (invariant 2), and its copy time must be read before the
     * events are recorded again (else the stats keep only the copies that
     * happened to finish before a reap, the short ones). It was enqueued
     * two batches ago, so this rarely waits. */
    if (en->timed || (en->used && g->pin_mode == FEEDER_PIN_COPY)) {
        cudaError_t e = cudaEventSynchronize(en->h2d_ev);
        if (e != cudaSuccess)
            return layer_fail(g, FEEDER_ECUDA, "waiting for the copy of a batch: %s",
                                       cuerr(e));
        if (en->timed)
            harvest(g, en, &g->h2d_ns);
        trace_copies(g, en, en->timed);
        en->timed = 0;
    }
    trace_copies(g, en, 0); /* a normalise span still owed: now or never */
    en->tr_norm = 0;
    if (g->pin_mode == FEEDER_PIN_COPY) {
        pthread_mutex_lock(&g->lock);
        en->src = hb->data;
        en->src_labels = hb->labels;
        en->slot_done = 0;
        en->chunks_taken = en->chunks_done = 0;
        en->err = 0;
        en->pin = PIN_QUEUED;
        g->jobs[(g->jhead + g->jlen++) % (g->depth + 1)] = it->entry;
        pthread_cond_broadcast(&g->cv_work);
        pthread_mutex_unlock(&g->lock);
        return 0;
    }
    if (g->pack_registered) {
        cudaError_t e = direct_enqueue(g, en, hb);
        if (e != cudaSuccess)
            return layer_fail(g, FEEDER_ECUDA,
                                       "copying batch %llu of epoch %llu from the packed file to "
                                       "device %d: %s", (unsigned long long)hb->number,
                                       (unsigned long long)hb->epoch, g->cfg.device, cuerr(e));
        return 0;
    }
    if (g->decodes) {
        char msg[1024];
        int sample_err = 0;
        rc = decode_enqueue(g, en, hb, &sample_err, msg, sizeof(msg));
        if (rc && !sample_err)
            return layer_fail(g, rc, "%s", msg);
        if (rc) {
            /* The batch fails where it stands in the FIFO, as a worker's
             * sample error would; its slot goes back now. */
            it->entry = -1;
            it->rc = rc;
            it->batch = (int64_t)hb->number;
            it->epoch = hb->epoch;
            feeder__fmt(it->msg, sizeof(it->msg), "%s", msg);
            g->paused = 1;
            en->state = E_FREE;
            en->hb = NULL;
            g->held--;
            host_release(g, hb);
        }
        return 0;
    }
    cudaError_t e = enqueue(g, en, hb->data, hb->labels);
    if (e != cudaSuccess)
        return layer_fail(g, FEEDER_ECUDA, "copying batch %llu of epoch %llu to device %d: %s",
                                   (unsigned long long)hb->number, (unsigned long long)hb->epoch,
                                   g->cfg.device, cuerr(e));
    return 0;
}

/* Pull host batches into free entries: without waiting (try), or waiting for
 * one (the FIFO is empty and the user asked for a batch). */
static int pull(feeder__gpu *g, int wait)
{
    while (!g->paused) {
        entry *en = free_entry(g);
        if (!en)
            return 0;
        int rc = drop_held(g, en);
        if (rc)
            return rc;
        if (g->held >= (int)g->nslots)
            return 0; /* every slot is in a copy; reap frees them */
        feeder_batch *hb = NULL;
        uint64_t t0 = feeder__now_ns();
        rc = g->cfg.host.next(g->cfg.host.ctx, &hb, !wait);
        /* HYBRID: did the GPU side have to wait for the workers? */
        g->waited = feeder__now_ns() - t0 > 200000;
        if (rc == FEEDER__AGAIN)
            return 0;
        if (rc) {
            push_status(g, rc, g->cfg.host.errmsg(g->cfg.host.ctx));
            return 0;
        }
        if ((rc = submit(g, en, hb)))
            return rc;
        wait = 0;
    }
    return 0;
}

static int broken(feeder__gpu *g, int rc, const char *msg)
{
    g->broken = rc;
    feeder__fmt(g->broken_msg, sizeof(g->broken_msg), "%s", msg);
    return rc;
}

int feeder__gpu_next(feeder__gpu *g, feeder_batch **out)
{
    if (g->broken)
        return layer_fail(g, g->broken, "%s", g->broken_msg);
    uint64_t t0 = feeder__now_ns();
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    devguard dg;
    cudaError_t ce = dev_enter(g, &dg);
    if (ce != cudaSuccess)
        return layer_fail(g, FEEDER_ECUDA, "cudaSetDevice(%d): %s", g->cfg.device, cuerr(ce));
    int rc = reap(g, &d, 0);
    if (!rc)
        rc = pull(g, 0);
    if (!rc && g->len == 0) {
        if (!free_entry(g)) {
            rc = layer_fail(g, FEEDER_EBUSY,
                                     "all %d device buffers are borrowed; release a batch first "
                                     "(gpu_prefetch = %d)", g->depth, g->depth);
            goto out;
        }
        if (!(rc = reap(g, &d, 1)))
            rc = pull(g, 1);
        if (!rc && g->len == 0)
            rc = layer_fail(g, FEEDER_EPROTO,
                                     "GPU prefetcher: no batch could be pulled (%d of %u host slots "
                                     "in copies)", g->held, g->nslots);
    }
    if (rc) {
        rc = broken(g, rc, g->errmsg);
        goto out;
    }
    item *it = &g->fifo[g->head];
    g->head = (g->head + 1) % (g->depth + 1);
    g->len--;
    if (it->entry < 0) {
        g->paused = 0;
        rc = layer_fail(g, it->rc, "%s", it->msg);
        goto out;
    }
    entry *en = &g->e[it->entry];
    if (g->pin_mode == FEEDER_PIN_COPY) {
        /* The batch is lent once its copy is on the stream (the event is
         * recorded); the user's stream waits for the copy itself. */
        pthread_mutex_lock(&g->lock);
        while (en->pin != PIN_ENQUEUED)
            pthread_cond_wait(&g->cv_done, &g->lock);
        int err = en->err;
        char msg[sizeof(en->errmsg)];
        memcpy(msg, en->errmsg, sizeof(msg));
        pthread_mutex_unlock(&g->lock);
        if (err) {
            rc = broken(g, layer_fail(g, err, "%s", msg), msg);
            goto out;
        }
    }
    en->state = E_LENT;
    d.gpu_batches = 1;
    d.h2d_bytes = en->in_bytes + en->count * sizeof(int64_t);
    *out = &en->pub;
    /* Batch k is out; start k+1 now, not at the next call. */
    rc = pull(g, 0);
    if (rc)
        rc = broken(g, rc, g->errmsg);
    rc = 0; /* batch k is valid either way; a later call reports the failure */
out:
    dev_leave(&dg);
    pthread_mutex_lock(&g->lock);
    d.pin_ns = g->pin_ns;
    g->pin_ns = 0;
    pthread_mutex_unlock(&g->lock);
    d.h2d_ns += g->h2d_ns;
    g->h2d_ns = 0;
    d.gpu_decode_ns = g->dec_ns;
    d.gpu_decoded = g->gpu_decoded;
    d.gpu_fallback = g->gpu_fallback;
    g->dec_ns = g->gpu_decoded = g->gpu_fallback = 0;
    d.wait_ns = feeder__now_ns() - t0;
    stats_add(g, &d);
    return rc;
}

int feeder__gpu_release(feeder_batch *b, void *stream)
{
    entry *en = b->internal_;
    feeder__gpu *g = en->g;
    if (en->state != E_LENT || &en->pub != b)
        return FEEDER_EINVAL;
    feeder__trace_unhold(g->tr, b, feeder__now_ns());
    devguard dg;
    cudaError_t e = dev_enter(g, &dg);
    if (e == cudaSuccess)
        e = cudaEventRecord(en->release_ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        /* Without the event the buffer's readers are unknown: wait for the
         * whole device rather than risk overwriting what they read. */
        cudaDeviceSynchronize();
        en->wait_release = 0;
    } else {
        en->wait_release = 1;
    }
    en->state = E_FREE;
    b->internal_ = NULL;
    /* Refill the freed buffer now, so its copy overlaps the user's compute. */
    if (!g->broken) {
        feeder_stats d;
        memset(&d, 0, sizeof(d));
        int rc = reap(g, &d, 0);
        if (!rc)
            rc = pull(g, 0);
        if (rc)
            broken(g, rc, g->errmsg);
        stats_add(g, &d);
    }
    dev_leave(&dg);
    return e == cudaSuccess ? 0
                            : layer_fail(g, FEEDER_ECUDA,
                                                  "feeder_batch_release: cudaEventRecord: %s",
                                                  cuerr(e));
}

/* Wait until the pin threads are done with every queued entry. */
static void pin_quiesce(feeder__gpu *g)
{
    if (g->pin_mode != FEEDER_PIN_COPY)
        return;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->depth; i++)
        while (g->e[i].pin == PIN_QUEUED && !g->stop)
            pthread_cond_wait(&g->cv_done, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void feeder__gpu_drop(feeder__gpu *g)
{
    devguard dg;
    if (dev_enter(g, &dg) != cudaSuccess)
        return;
    pin_quiesce(g);
    cudaStreamSynchronize(g->stream);
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    reap(g, &d, 0);
    stats_add(g, &d);
    for (; g->len; g->len--, g->head = (g->head + 1) % (g->depth + 1)) {
        item *it = &g->fifo[g->head];
        if (it->entry >= 0)
            g->e[it->entry].state = E_FREE;
    }
    g->paused = 0;
    dev_leave(&dg);
}

void feeder__gpu_destroy(feeder__gpu *g)
{
    if (!g)
        return;
    devguard dg;
    int entered = dev_enter(g, &dg) == cudaSuccess;
    if (g->thr) {
        pthread_mutex_lock(&g->lock);
        g->stop = 1;
        pthread_cond_broadcast(&g->cv_work);
        pthread_cond_broadcast(&g->cv_done);
        pthread_mutex_unlock(&g->lock);
        for (int i = 0; i < g->nthr; i++)
            pthread_join(g->thr[i], NULL);
        free(g->thr);
    }
    if (entered && g->stream)
        cudaStreamSynchronize(g->stream);
    for (int i = 0; entered && g->tr && g->e && i < g->depth; i++)
        if (g->e[i].start_ev)
            trace_copies(g, &g->e[i], g->e[i].timed);
    if (g->tr_ref)
        cudaEventDestroy(g->tr_ref);
    for (int i = 0; g->e && i < g->depth; i++) {
        entry *en = &g->e[i];
        if (en->dev != en->stage)
            dev_free(g, en->dev);
        dev_free(g, en->stage);
        dev_free(g, en->dev_labels);
        pin_free(g, en->pinned);
        free(en->labels);
        free(en->indices);
        if (en->start_ev)
            cudaEventDestroy(en->start_ev);
        if (en->h2d_ev)
            cudaEventDestroy(en->h2d_ev);
        if (en->copy_ev)
            cudaEventDestroy(en->copy_ev);
        if (en->release_ev)
            cudaEventDestroy(en->release_ev);
        if (en->dec_ev)
            cudaEventDestroy(en->dec_ev);
    }
    if (g->pack_registered)
        cudaHostUnregister(g->pack->map);
    feeder__gpu_decoder_destroy(g->dec);
    free(g->imgs);
    free(g->refused);
    free(g->fb);
    if (g->registered)
        cudaHostUnregister(g->mem);
    if (g->own_stream)
        cudaStreamDestroy(g->stream);
    if (entered)
        dev_leave(&dg);
    free(g->e);
    free(g->fifo);
    free(g->jobs);
    pthread_cond_destroy(&g->cv_work);
    pthread_cond_destroy(&g->cv_done);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* feeder_cuda.h */

const char *feeder__gpu_errmsg(const feeder__gpu *g) { return g ? g->errmsg : ""; }

void feeder__gpu_stats(const feeder__gpu *g, feeder_stats *st)
{
    if (!g)
        return;
    st->pin_ns += g->st.pin_ns;
    st->h2d_ns += g->st.h2d_ns;
    st->h2d_bytes += g->st.h2d_bytes;
    st->gpu_batches += g->st.gpu_batches;
    st->wait_ns += g->st.wait_ns;
    st->gpu_decoded += g->st.gpu_decoded;
    st->gpu_fallback += g->st.gpu_fallback;
    st->gpu_decode_ns += g->st.gpu_decode_ns;
    st->pinned_bytes = g->st.pinned_bytes;
    st->device_bytes = g->st.device_bytes;
    if (g->decodes)
        st->hybrid_cpu_permille = g->st.hybrid_cpu_permille;
}
