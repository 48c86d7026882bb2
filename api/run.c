/*
 * api/run.c: running a loader. The public entry points that drive both the host loader (loader/) and the
 * GPU layer (cuda/): start as a sequence of named steps, next, release,
 * set_epoch, destroy, stats and the GPU status. The only room that calls
 * both; loader/ keeps the GPU layer's pointer for it and never calls cuda/,
 * and cuda/ reaches the host loader only through the callbacks set here.
 */
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "common/nvtx.h"
#include "common/trace.h"
#include "cuda/gpu.h"
#include "loader/loader.h"

/* ---- the host loader as the GPU layer sees it (cuda/gpu.h) ---- */

static int host_next(void *ctx, feeder_batch **out, int try_only)
{
    return feeder__host_next(ctx, out, try_only);
}

static int host_release(void *ctx, feeder_batch *b)
{
    (void)ctx;
    return feeder__host_release(b);
}

static const char *host_errmsg(void *ctx) { return feeder_loader_errmsg(ctx); }
static int64_t host_status_batch(void *ctx) { return feeder__loader_status_batch(ctx); }
static uint64_t host_epoch(void *ctx) { return feeder__loader_epoch(ctx); }

static void host_set_cpu_share(void *ctx, uint32_t permille)
{
    feeder__loader_set_cpu_share(ctx, permille);
}

static uint64_t host_work_ns(void *ctx, uint32_t *workers)
{
    return feeder__loader_work_ns(ctx, workers);
}

static int host_serve(void *ctx, int wake_fd, int ms)
{
    return feeder__host_serve(ctx, wake_fd, ms);
}

static int host_decode_cpu(void *ctx, unsigned who, const uint8_t *jpeg, size_t len, uint64_t epoch,
                           uint64_t index, uint8_t *dst, char *msg, size_t msglen)
{
    return feeder__loader_decode_cpu(ctx, who, jpeg, len, epoch, index, dst, msg, msglen);
}
_Static_assert(FEEDER__GPU_DECODE_THREADS_MAX <= FEEDER__FALLBACK_DECODERS,
               "a CPU fallback decoder for every GPU decode thread");

_Static_assert(FEEDER__AGAIN == FEEDER__HOST_AGAIN, "one 'not yet' for both layers");

/* ---- start ---- */

/* Can batches go to the device? 1 yes, 0 no (gpu_status says why), or an
 * error that fails the start (a bad device ordinal, say). */
static int probe_device(feeder_loader *ld, int *ok)
{
    feeder__loader_gpu *g = feeder__loader_gpu_part(ld);
    int device = feeder__loader_plan(ld)->device.device;
    *ok = 0;
    if (device < 0) {
        snprintf(g->reason, sizeof(g->reason), "device = -1: host batches");
        return 0;
    }
    int rc = feeder__gpu_probe(device, g->reason, sizeof(g->reason));
    if (rc && rc != FEEDER_EUNSUPPORTED)
        return feeder__loader_fail(ld, rc, "%s", g->reason);
    *ok = rc == 0;
    return 0;
}

/* The GPU layer's configuration: options, then the host loader's facts. */
static void gpu_config(feeder_loader *ld, feeder__gpu_config *c)
{
    const feeder__loader_gpu *g = feeder__loader_gpu_view(ld);
    const feeder__job *job = feeder__loader_job(ld);
    const struct feeder__plan_device *d = &feeder__loader_plan(ld)->device;
    memset(c, 0, sizeof(*c));
    c->device = d->device;
    c->pin_mode = d->pin_mode;
    c->depth = d->gpu_prefetch;
    c->dtype = d->dtype;
    c->pin_threads = d->pin_threads;
    c->out_layout = feeder__loader_plan(ld)->pipeline.layout;
    for (int k = 0; k < 3; k++) {
        c->mean[k] = (float)d->mean[k];
        c->std[k] = (float)d->std[k];
    }
    c->dev_alloc = g->dev_alloc;
    c->pin_alloc = g->pin_alloc;
    c->copy_stream = g->copy_stream;
    c->decoder = job->t.decoder;
    c->cpu_share = feeder__loader_first_cpu_share(ld);
    c->warmup = d->warmup;
    c->decode_threads = d->decode_threads;
    c->host = (feeder__host_ops){ld,           host_next,       host_release,      host_errmsg,
                                 host_status_batch, host_epoch, host_set_cpu_share,
                                 host_work_ns,      host_serve,        host_decode_cpu};
    c->layout = feeder__loader_layout(ld);
    c->slot_mem = feeder__loader_mem(ld, &c->slot_mem_bytes);
    c->nslots = feeder__loader_nslots(ld);
    c->transform = &job->t;
    c->seed = job->seed;
    if (job->ds->kind == FEEDER__DS_PACKED) {
        c->pack = job->ds->pack;
        /* An augment pipeline needs the records' pixels in the slots. */
        c->packed_mmap = job->packed_read == FEEDER_PACKED_READ_MMAP &&
                         !feeder__augment_has_sample_steps(&job->aug) &&
                         !feeder__augment_has_mix(&job->aug);
    }
    c->trace = feeder__loader_trace(ld);
    c->fields = job->fields.nfields ? &job->fields : NULL;
    uint32_t first;
    if (feeder__loader_augment_device(ld, &first)) {
        c->aug = &job->aug;
        c->aug_first = first;
    }
}

/* Start the GPU layer; a layer this machine cannot run is no error (host
 * batches, and gpu_status says why). */
static int start_gpu(feeder_loader *ld)
{
    feeder__loader_gpu *g = feeder__loader_gpu_part(ld);
    feeder__gpu_config c;
    gpu_config(ld, &c);
    char why[sizeof(g->reason)];
    int rc = feeder__gpu_start(&c, &g->gpu, why, sizeof(why));
    if (rc && rc != FEEDER_EUNSUPPORTED) {
        feeder__host_start_failed(ld, rc);
        return feeder__loader_fail(ld, rc, "%s", why);
    }
    snprintf(g->reason, sizeof(g->reason), "%s", rc ? why : feeder__gpu_describe(g->gpu));
    if (rc == 0 && c.aug)
        feeder__host_augment_taken(ld); /* the device runs them now */
    return 0;
}

int feeder_loader_start(feeder_loader *ld)
{
    if (!ld)
        return FEEDER_EINVAL;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    if (feeder__loader_started(ld))
        return 0;
    int gpu_ok, rc;
    if ((rc = feeder__host_resolve(ld)) || (rc = probe_device(ld, &gpu_ok)) ||
        (rc = feeder__host_prepare(ld, gpu_ok)))
        return rc;
    if (gpu_ok && (rc = start_gpu(ld)))
        return rc;
    const feeder__loader_gpu *g = feeder__loader_gpu_view(ld);
    char why[sizeof(g->reason) + 32];
    if (g->gpu)
        snprintf(why, sizeof(why), "%s", feeder__gpu_decode_why(g->gpu));
    else
        snprintf(why, sizeof(why), "no GPU path: %s", g->reason);
    if ((rc = feeder__host_commit(ld, feeder__gpu_decodes(g->gpu), why,
                                  feeder__gpu_packed_direct(g->gpu))) || !g->gpu)
        return rc;
    /* The workers read their first tasks while the slots are registered. */
    feeder__gpu_finish_start(g->gpu);
    snprintf(feeder__loader_gpu_part(ld)->reason, sizeof(g->reason), "%s",
             feeder__gpu_describe(g->gpu));
    return 0;
}

/* ---- iteration ---- */

int feeder_next(feeder_loader *ld, feeder_batch **out)
{
    if (!ld || !out)
        return FEEDER_EINVAL;
#if FEEDER__CHECK_HANDLES
    if (!feeder__handle_loader_live(ld))
        return feeder__handle_misuse(FEEDER_ESTATE, "feeder_next: loader %p is not a live "
                                     "loader (destroyed already?)", (void *)ld);
#endif
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    int rc;
    uint64_t t0 = feeder__now_ns();
    if (!feeder__loader_started(ld) && (rc = feeder_loader_start(ld)))
        return rc;
    struct feeder__gpu *gpu = feeder__loader_gpu_view(ld)->gpu;
    FEEDER_NVTX_PUSH("feeder_next");
    if (gpu) {
        rc = feeder__gpu_next(gpu, out);
        if (rc)
            feeder__loader_fail(ld, rc, "%s", feeder__gpu_errmsg(gpu));
        else
            feeder__loader_clear_error(ld);
    } else {
        rc = feeder__host_next(ld, out, 0);
    }
    FEEDER_NVTX_POP();
    feeder__trace *tr = feeder__loader_trace(ld);
    if (tr) {
        /* The whole call: its length is the consumer's stall. */
        uint64_t t1 = feeder__now_ns();
        int64_t epoch = rc == 0 ? (int64_t)(*out)->epoch : -1;
        int64_t batch = rc == 0 ? (int64_t)(*out)->number : -1;
        feeder__trace_span_e(tr, feeder__trace_consumer(tr), "next", t0, t1, epoch, batch, -1);
        if (rc == 0)
            feeder__trace_hold(tr, *out, t1, epoch, batch);
    }
#if FEEDER__CHECK_HANDLES
    if (rc == 0)
        feeder__handle_add_batch(ld, *out);
#endif
    return rc;
}

/* The loader that lent b, host or device batch; NULL when none did. */
static feeder_loader *batch_loader(const feeder_batch *b)
{
    if (feeder__gpu_owns(b))
        return feeder__gpu_host(feeder__gpu_of(b));
    return feeder__host_batch_loader(b);
}

int feeder_batch_release(feeder_batch *batch, void *stream)
{
    if (!batch)
        return FEEDER_EINVAL;
#if FEEDER__CHECK_HANDLES
    if (!feeder__handle_batch_live(batch))
        return feeder__handle_misuse(FEEDER_ESTATE, "feeder_batch_release: batch %p was not "
                                     "lent by a live loader (its loader was destroyed?)",
                                     (void *)batch);
#endif
    if (!batch->internal_)
        return FEEDER_EINVAL;
    /* A forked child's copy of a batch: its slot and device buffer are the
     * parent's, and stay lent there. */
    feeder_loader *lender = batch_loader(batch);
    if (lender && feeder__loader_forked(lender))
        return FEEDER_EFORKED;
    if (feeder__gpu_owns(batch)) {
        feeder__gpu *gpu = feeder__gpu_of(batch);
        int rc = feeder__gpu_release(batch, stream);
        feeder_loader *owner = feeder__gpu_host(gpu);
        if (rc)
            return feeder__loader_fail(owner, rc, "%s", feeder__gpu_errmsg(gpu));
        feeder__loader_clear_error(owner);
        return 0;
    }
    feeder_loader *ld = feeder__host_batch_loader(batch);
    if (!ld)
        return FEEDER_EINVAL;
    feeder__trace_unhold(feeder__loader_trace(ld), batch, feeder__now_ns());
    return feeder__host_release(batch);
}

int feeder_batch_payload(const feeder_batch *b, void **data, size_t *len, void **extra,
                         size_t *extra_len)
{
    if (!b || !b->internal_ || feeder__gpu_owns(b) || !feeder__host_batch_loader(b))
        return FEEDER_EINVAL;
    if (feeder__loader_forked(feeder__host_batch_loader(b)))
        return FEEDER_EFORKED;
    return feeder__host_payload(b, data, len, extra, extra_len);
}

int feeder_loader_set_epoch(feeder_loader *ld, uint64_t epoch)
{
    if (!ld)
        return FEEDER_EINVAL;
    feeder__loader_clear_error(ld);
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    struct feeder__gpu *gpu = feeder__loader_gpu_view(ld)->gpu;
    if (gpu)
        feeder__gpu_drop(gpu);
    return feeder__host_set_epoch(ld, epoch);
}

void feeder_loader_destroy(feeder_loader *ld)
{
    if (!ld)
        return;
#if FEEDER__CHECK_HANDLES
    if (!feeder__handle_loader_live(ld)) {
        feeder__handle_misuse(FEEDER_ESTATE, "feeder_loader_destroy: loader %p is not a live "
                              "loader (destroyed twice?)", (void *)ld);
        return;
    }
    feeder__handle_remove_loader(ld);
#endif
    if (feeder__loader_forked(ld)) {
        /* A process forked from the loader's: the workers, the slots' state
         * and the GPU layer are the parent's (and CUDA cannot be called
         * after fork). Only this process's copies go: memory, mappings,
         * descriptors; the GPU layer's host memory is left as it is. */
        feeder__host_forget(ld);
        feeder__host_free(ld);
        return;
    }
    feeder__host_stop(ld);
    /* Before the slots are unmapped: the GPU layer unregisters them. */
    feeder__gpu_destroy(feeder__loader_gpu_view(ld)->gpu);
    feeder__host_free(ld);
}

/* ---- what the user asks of the GPU side ---- */

int feeder_loader_gpu_status(const feeder_loader *ld, const char **reason)
{
    const feeder__loader_gpu *g = ld ? feeder__loader_gpu_view(ld) : NULL;
    if (reason)
        *reason = g ? g->reason : "";
    return g && g->gpu ? 1 : 0;
}

int feeder_loader_stats(const feeder_loader *ld, feeder_stats *out)
{
    if (!ld || !out)
        return FEEDER_EINVAL;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    feeder__host_stats(ld, out);
    feeder__gpu_stats(feeder__loader_gpu_view(ld)->gpu, out);
    return 0;
}

int feeder_loader_skipped(const feeder_loader *ld, uint64_t *indices, const char **paths,
                          size_t cap, uint64_t *total)
{
    if (!ld || (cap && !indices && !paths))
        return FEEDER_EINVAL;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    return (int)feeder__host_skipped(ld, indices, paths, cap, total);
}

/* feeder_loader_set_copy_stream (feeder_cuda.h) takes a cudaStream_t, a
 * pointer to the runtime's struct CUstream_st: the same type, spelled here
 * without the CUDA headers, so a build without CUDA has it too. */
struct CUstream_st;
FEEDER_API int feeder_loader_set_copy_stream(feeder_loader *ld, struct CUstream_st *stream);
int feeder_loader_set_copy_stream(feeder_loader *ld, struct CUstream_st *stream)
{
    if (!ld)
        return FEEDER_EINVAL;
    feeder__loader_clear_error(ld);
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    if (feeder__loader_started(ld))
        return feeder__loader_fail(ld, FEEDER_ESTATE,
                                   "feeder_loader_set_copy_stream: the loader started");
    feeder__loader_gpu_part(ld)->copy_stream = stream;
    return 0;
}
