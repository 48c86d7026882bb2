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
#include <unistd.h>

#include "cuda/layer.h"

const char *feeder__gpu_describe(const feeder__gpu *gpu) { return gpu ? gpu->describe : ""; }

int feeder__gpu_decodes(const feeder__gpu *gpu) { return gpu && gpu->decodes; }

int feeder__gpu_packed_direct(const feeder__gpu *gpu) { return gpu && gpu->pack_registered; }

const char *feeder__gpu_decode_why(const feeder__gpu *gpu) { return gpu ? gpu->dec_why : ""; }

int feeder__gpu_pending(const feeder__gpu *gpu, uint64_t epoch, uint64_t *out, int cap, int *open)
{
    int n = 0;
    *open = 0;
    for (int k = 0; k < gpu->len && n < cap; k++) {
        const item *it = &gpu->fifo[(gpu->head + k) % (gpu->depth + 1)];
        if (it->entry >= 0 && gpu->ring[it->entry].pub.epoch == epoch) {
            out[n++] = gpu->ring[it->entry].pub.number;
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

/* Is the entry still a decode thread's (queued, not handed back)? */
static int thread_holds(feeder__gpu *gpu, const ring_entry *entry)
{
    pthread_mutex_lock(&gpu->lock);
    int queued = entry->pin == PIN_QUEUED;
    pthread_mutex_unlock(&gpu->lock);
    return queued;
}

/* Give back the host slot of every entry that is done with it. `block`:
 * wait for the oldest such copy when no slot could be freed otherwise. */
static int reap(feeder__gpu *gpu, feeder_stats *d, int block)
{
    for (int pass = 0; pass < 2; pass++) {
        int freed = 0;
        ring_entry *oldest = NULL;
        for (int i = 0; i < gpu->depth; i++) {
            ring_entry *entry = &gpu->ring[i];
            int done = 0;
            if (gpu->decode_thread && thread_holds(gpu, entry))
                continue;
            if (gpu->pin_mode == FEEDER_PIN_COPY) {
                /* The pin threads own an entry's events until it is enqueued. */
                pthread_mutex_lock(&gpu->lock);
                int enq = entry->pin == PIN_ENQUEUED || entry->pin == PIN_IDLE;
                done = entry->slot_done;
                pthread_mutex_unlock(&gpu->lock);
                if (!enq && !entry->host)
                    continue;
                if (!enq)
                    goto slot;
            }
            if (entry->timed) {
                cudaError_t q = cudaEventQuery(entry->h2d_ev);
                if (q == cudaSuccess) {
                    feeder__cuda_harvest(gpu, entry, &d->h2d_ns);
                    entry->timed = 0;
                    feeder__cuda_trace_copies(gpu, entry, 1);
                } else if (q != cudaErrorNotReady) {
                    return feeder__cuda_fail(gpu, FEEDER_ECUDA, "copy of batch %llu to device %d: %s",
                                               (unsigned long long)entry->pub.number, gpu->cfg.device,
                                               feeder__cuda_errtext(q));
                }
            }
        slot:
            if (!entry->host)
                continue;
            if (gpu->pin_mode != FEEDER_PIN_COPY)
                done = entry->used && !entry->timed; /* h2d_ev has passed (checked above) */
            if (done) {
                feeder__cuda_host_release(gpu, entry->host);
                entry->host = NULL;
                gpu->held--;
                freed = 1;
            } else if (!oldest || entry->pub.number < oldest->pub.number) {
                oldest = entry;
            }
        }
        if (freed || !block || !oldest || gpu->held < (int)gpu->cfg.nslots)
            return 0;
        /* Every host slot is in a copy: wait for the oldest. */
        if (gpu->pin_mode == FEEDER_PIN_COPY) {
            pthread_mutex_lock(&gpu->lock);
            while (!oldest->slot_done)
                pthread_cond_wait(&gpu->cv_done, &gpu->lock);
            pthread_mutex_unlock(&gpu->lock);
        } else {
            cudaError_t e = cudaEventSynchronize(oldest->h2d_ev);
            if (e != cudaSuccess)
                return feeder__cuda_fail(gpu, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                           (unsigned long long)oldest->pub.number, feeder__cuda_errtext(e));
        }
    }
    return 0;
}

static ring_entry *free_entry(feeder__gpu *gpu)
{
    for (int i = 0; i < gpu->depth; i++)
        if (gpu->ring[i].state == E_FREE)
            return &gpu->ring[i];
    return NULL;
}

static void push_status(feeder__gpu *gpu, int rc, const char *msg)
{
    item *it = &gpu->fifo[(gpu->head + gpu->len++) % (gpu->depth + 1)];
    it->entry = -1;
    it->rc = rc;
    it->batch = gpu->cfg.host.status_batch(gpu->cfg.host.ctx);
    it->epoch = gpu->cfg.host.epoch(gpu->cfg.host.ctx);
    feeder__fmt(it->msg, sizeof(it->msg), "%s", msg);
    gpu->paused = 1;
}

/* Give back the host batch an entry still holds, waiting for its copy:
 * an entry freed by the user may be refilled before a reap saw its copy
 * end, and its old slot must not be lost. */
static int drop_held(feeder__gpu *gpu, ring_entry *entry)
{
    if (!entry->host)
        return 0;
    if (gpu->pin_mode == FEEDER_PIN_COPY) {
        pthread_mutex_lock(&gpu->lock);
        while (!entry->slot_done && !gpu->stop)
            pthread_cond_wait(&gpu->cv_done, &gpu->lock);
        pthread_mutex_unlock(&gpu->lock);
    } else {
        cudaError_t e = cudaEventSynchronize(entry->h2d_ev);
        if (e != cudaSuccess)
            return feeder__cuda_fail(gpu, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                       (unsigned long long)entry->pub.number, feeder__cuda_errtext(e));
    }
    feeder__cuda_host_release(gpu, entry->host);
    entry->host = NULL;
    gpu->held--;
    return 0;
}

/* Lend-to-be: `entry` takes the host batch `host` (its labels, indices and
 * shape) and its place at the FIFO's tail. */
static item *take_host_batch(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host)
{
    entry->host = host;
    gpu->held++;
    entry->count = host->count;
    entry->in_bytes = (size_t)host->count * gpu->l->sample_bytes;
    if (host->labels)
        memcpy(entry->labels, host->labels, host->count * sizeof(int64_t));
    memcpy(entry->indices, host->indices, host->count * sizeof(uint64_t));
    feeder_batch *b = &entry->pub;
    memset(b, 0, sizeof(*b));
    b->labels = host->labels ? entry->labels : NULL;
    b->indices = entry->indices;
    b->count = host->count;
    b->height = host->height;
    b->width = host->width;
    b->channels = host->channels;
    b->layout = gpu->cfg.dtype == FEEDER_DTYPE_UINT8 ? host->layout : gpu->cfg.out_layout;
    b->skipped = host->skipped;
    b->sample_bytes = gpu->out_sample_bytes;
    b->epoch = host->epoch;
    b->number = host->number;
    b->device_data = entry->dev;
    b->ready_event = (void *)entry->copy_ev;
    b->device_labels = host->labels ? entry->dev_labels : NULL;
    b->dtype = gpu->cfg.dtype;
    b->device = gpu->cfg.device;
    b->device_bytes = (size_t)host->count * gpu->out_sample_bytes;
    if (gpu->cfg.fields) {
        entry->fview = (feeder__fields_view){gpu->cfg.fields, entry->meta, 0, entry->stage, gpu->cfg.device};
        b->fields_ = &entry->fview;
    }
    b->internal_ = entry;
    entry->state = E_PENDING;
    item *it = &gpu->fifo[(gpu->head + gpu->len++) % (gpu->depth + 1)];
    it->entry = (int)(entry - gpu->ring);
    it->rc = 0;
    return it;
}

/* The entry's last H2D must be over before its pinned buffer is rewritten
 * (invariant 2), and its copy time must be read before the events are
 * recorded again (else the stats keep only the copies that happened to
 * finish before a reap, the short ones). It was enqueued two batches ago, so
 * this rarely waits. */
static int settle_entry(feeder__gpu *gpu, ring_entry *entry)
{
    if (entry->timed || (entry->used && gpu->pin_mode == FEEDER_PIN_COPY)) {
        cudaError_t e = cudaEventSynchronize(entry->h2d_ev);
        if (e != cudaSuccess)
            return feeder__cuda_fail(gpu, FEEDER_ECUDA, "waiting for the copy of a batch: %s",
                                     feeder__cuda_errtext(e));
        if (entry->timed)
            feeder__cuda_harvest(gpu, entry, &gpu->h2d_ns);
        feeder__cuda_trace_copies(gpu, entry, entry->timed);
        entry->timed = 0;
    }
    feeder__cuda_trace_copies(gpu, entry, 0); /* a normalise span still owed: now or never */
    entry->tr_norm = 0;
    return 0;
}

/* PIN_COPY: hand the entry to the pin threads; the last of them enqueues. */
static void queue_pin_job(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host, int id)
{
    pthread_mutex_lock(&gpu->lock);
    entry->src = host->data;
    entry->src_labels = host->labels;
    entry->slot_done = 0;
    entry->chunks_taken = entry->chunks_done = 0;
    entry->err = 0;
    entry->pin = PIN_QUEUED;
    gpu->jobs[(gpu->jhead + gpu->jlen++) % (gpu->depth + 1)] = id;
    pthread_cond_broadcast(&gpu->cv_work);
    pthread_mutex_unlock(&gpu->lock);
}

/* Does any sample of the slot wait for nvJPEG (bytes, not pixels)? */
static int has_bitstreams(const feeder__gpu *gpu, const feeder_batch *host)
{
    const feeder__slot_layout *l = gpu->l;
    const uint64_t *enc = feeder__slot_encoded(l, host->data - l->data_off);
    for (uint32_t i = 0; i < host->count; i++)
        if (enc[i])
            return 1;
    return 0;
}

/* GPU decoders with decode threads: take nvJPEG once it is made (here,
 * in the loader's thread: the shares it sets go to the host loader), then
 * hand the batch over. */
static void queue_decode_job(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host, int id)
{
    if (!gpu->dec)
        feeder__cuda_decoder_ready(gpu, has_bitstreams(gpu, host));
    pthread_mutex_lock(&gpu->lock);
    entry->err = 0;
    entry->pin = PIN_QUEUED;
    gpu->jobs[(gpu->jhead + gpu->jlen++) % (gpu->depth + 1)] = id;
    /* every lane: one still waiting for its decoder also waits on cv_work */
    pthread_cond_broadcast(&gpu->cv_work);
    pthread_mutex_unlock(&gpu->lock);
}

/* Start moving the host batch `host` into `entry`, by the layer's one path:
 * the pin threads, the packed file's mapping, the GPU decoder, or a copy of
 * the slot. */
static int start_batch(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host)
{
    int rc = drop_held(gpu, entry);
    if (rc) {
        feeder__cuda_host_release(gpu, host);
        return rc;
    }
    item *it = take_host_batch(gpu, entry, host);
    if ((rc = settle_entry(gpu, entry)) || (rc = feeder__cuda_augment_draw(gpu, entry, host)))
        return rc;
    if (gpu->pin_mode == FEEDER_PIN_COPY) {
        queue_pin_job(gpu, entry, host, it->entry);
        return 0;
    }
    if (gpu->decode_thread) {
        queue_decode_job(gpu, entry, host, it->entry);
        return 0;
    }
    feeder__cuda_copies_begin(gpu);
    cudaError_t e = gpu->cfg.fields       ? feeder__cuda_enqueue_fields(gpu, entry, host)
                    : gpu->pack_registered ? feeder__cuda_enqueue_direct(gpu, entry, host)
                                         : feeder__cuda_enqueue(gpu, entry, host->data, host->labels);
    feeder__cuda_copies_end(gpu);
    if (e != cudaSuccess)
        return feeder__cuda_fail(gpu, FEEDER_ECUDA, "copying batch %llu of epoch %llu %sto device %d: %s",
                                 (unsigned long long)host->number, (unsigned long long)host->epoch,
                                 gpu->pack_registered ? "from the packed file " : "", gpu->cfg.device,
                                 feeder__cuda_errtext(e));
    return 0;
}

/* Pull host batches into free entries: without waiting (try), or waiting for
 * one (the FIFO is empty and the user asked for a batch). */
static int prefetch(feeder__gpu *gpu, int wait)
{
    while (!gpu->paused) {
        if (gpu->serve_rc) { /* the host loader failed while the last status waited */
            push_status(gpu, gpu->serve_rc, gpu->serve_msg);
            gpu->serve_rc = 0;
            return 0;
        }
        ring_entry *entry = free_entry(gpu);
        if (!entry)
            return 0;
        int rc = drop_held(gpu, entry);
        if (rc)
            return rc;
        if (gpu->held >= (int)gpu->cfg.nslots)
            return 0; /* every slot is in a copy; reap frees them */
        feeder_batch *host = NULL;
        uint64_t t0 = feeder__now_ns();
        rc = gpu->cfg.host.next(gpu->cfg.host.ctx, &host, !wait);
        /* The shares' signal: a free entry found no finished host batch (or
         * had to wait for one), so the workers are behind the GPU side. */
        gpu->starved = rc == FEEDER__AGAIN || feeder__now_ns() - t0 > 200000;
        if (rc == FEEDER__AGAIN)
            return 0;
        if (rc) {
            push_status(gpu, rc, gpu->cfg.host.errmsg(gpu->cfg.host.ctx));
            return 0;
        }
        if ((rc = start_batch(gpu, entry, host)))
            return rc;
        wait = 0;
    }
    return 0;
}

static int mark_fatal(feeder__gpu *gpu, int rc, const char *msg)
{
    gpu->fatal = rc;
    feeder__fmt(gpu->fatal_msg, sizeof(gpu->fatal_msg), "%s", msg);
    return rc;
}

/* Have at least one item in the FIFO: pull what is finished, and when
 * nothing is, wait for the host loader. */
static int fill_fifo(feeder__gpu *gpu, feeder_stats *d)
{
    int rc = reap(gpu, d, 0);
    if (!rc)
        rc = prefetch(gpu, 0);
    if (rc || gpu->len)
        return rc;
    if (!free_entry(gpu))
        return feeder__cuda_fail(gpu, FEEDER_EBUSY,
                                 "all %d device buffers are borrowed; release a batch first "
                                 "(gpu_prefetch = %d)", gpu->depth, gpu->cfg.depth);
    if (!(rc = reap(gpu, d, 1)))
        rc = prefetch(gpu, 1);
    if (!rc && gpu->len == 0)
        rc = feeder__cuda_fail(gpu, FEEDER_EPROTO,
                               "GPU prefetcher: no batch could be pulled (%d of %u host slots "
                               "in copies)", gpu->held, gpu->cfg.nslots);
    return rc;
}

/* PIN_COPY: the batch is lent once its copy is on the stream (the event is
 * recorded); the user's stream waits for the copy itself. */
static int wait_pin_enqueued(feeder__gpu *gpu, ring_entry *entry)
{
    pthread_mutex_lock(&gpu->lock);
    while (entry->pin != PIN_ENQUEUED)
        pthread_cond_wait(&gpu->cv_done, &gpu->lock);
    int err = entry->err;
    char msg[sizeof(entry->errmsg)];
    memcpy(msg, entry->errmsg, sizeof(msg));
    pthread_mutex_unlock(&gpu->lock);
    return err ? mark_fatal(gpu, feeder__cuda_fail(gpu, err, "%s", msg), msg) : 0;
}

/* A decode thread's hand-back of the batch to lend. A sample's error fails
 * the batch where it stands in the FIFO, as a worker's would, and its slot
 * goes back now (the thread waited for the stream); a CUDA error breaks the
 * layer. */
/* A decode lane's nvJPEG call has not returned in stuck_ns: the engines
 * stopped answering (docs/RELIABILITY.md). The layer fails for good. */
static int decoder_wedged(feeder__gpu *gpu, int k)
{
    const dec_lane *ln = &gpu->lanes[k];
    gpu->wedged = 1;
    int rc = feeder__cuda_fail(gpu, FEEDER_ETIMEDOUT,
                               "nvJPEG's hardware decode of batch %llu of epoch %llu on device %d has "
                               "not returned in %llu ms (decode thread %d): the JPEG engines stopped "
                               "answering, and the GPU decoders cannot go on in this process "
                               "(docs/RELIABILITY.md)",
                               (unsigned long long)atomic_load(&ln->call_batch),
                               (unsigned long long)atomic_load(&ln->call_epoch), gpu->cfg.device,
                               (unsigned long long)(gpu->stuck_ns / 1000000u), k);
    return mark_fatal(gpu, rc, gpu->errmsg);
}

/* One turn of the host loader while the loader's thread waits for a lane
 * (the lock not held): the workers get their next parts and their results
 * are taken in, until a lane hands an entry back (wake_fd) or a slice of the
 * watchdog passes; then finished host batches go to free entries. Without
 * this the thread served no one while it waited, a batch's decode long: the
 * workers ran out of parts, and a host batch finished meanwhile waited with
 * a lane idle (docs/ARCHITECTURE.md, decode threads). 1 to go on serving;
 * 0 when there is nothing to serve or it failed (the failure is queued as
 * the FIFO's next status, right after one already queued once that is
 * taken, or breaks the layer, as prefetch's). */
static int serve_host(feeder__gpu *gpu)
{
    uint64_t slice_ms = feeder__cuda_slice_ns(gpu) / 1000000u;
    int rc = gpu->cfg.host.serve(gpu->cfg.host.ctx, gpu->wake_fd, slice_ms ? (int)slice_ms : 1);
    uint64_t v;
    (void)!read(gpu->wake_fd, &v, sizeof(v)); /* non-blocking; the entries say what is done */
    if (rc == FEEDER__AGAIN)
        return 0;
    if (rc) {
        const char *msg = gpu->cfg.host.errmsg(gpu->cfg.host.ctx);
        if (!gpu->paused) {
            push_status(gpu, rc, msg);
        } else if (!gpu->serve_rc) { /* after the status queued (a run-ahead's death) */
            gpu->serve_rc = rc;
            feeder__fmt(gpu->serve_msg, sizeof(gpu->serve_msg), "%s", msg);
        }
        return 0;
    }
    if (!gpu->fatal && (rc = prefetch(gpu, 0)) != 0) {
        mark_fatal(gpu, rc, gpu->errmsg);
        return 0;
    }
    return !gpu->fatal;
}

/* Wait until a decode thread has handed the entry back, or a lane's
 * nvJPEG call is stuck (the watchdog), serving the host loader meanwhile. */
static int wait_decoded(feeder__gpu *gpu, ring_entry *entry)
{
    pthread_mutex_lock(&gpu->lock);
    int stuck = -1, serving = gpu->wake_fd >= 0;
    while (entry->pin == PIN_QUEUED &&
           (stuck = feeder__cuda_stuck_lane(gpu, feeder__now_ns(), gpu->stuck_ns)) < 0) {
        if (!serving) {
            feeder__cuda_wait_done_slice(gpu);
            continue;
        }
        pthread_mutex_unlock(&gpu->lock);
        serving = serve_host(gpu);
        pthread_mutex_lock(&gpu->lock);
    }
    if (entry->pin == PIN_QUEUED) {
        pthread_mutex_unlock(&gpu->lock);
        return decoder_wedged(gpu, stuck);
    }
    entry->pin = PIN_IDLE;
    int err = entry->err, sample = entry->sample_err;
    pthread_mutex_unlock(&gpu->lock);
    if (!err) {
        feeder__cuda_rebalance(gpu, entry);
        return 0;
    }
    if (!sample)
        return mark_fatal(gpu, feeder__cuda_fail(gpu, err, "%s", entry->errmsg), entry->errmsg);
    entry->state = E_FREE;
    feeder__cuda_host_release(gpu, entry->host);
    entry->host = NULL;
    gpu->held--;
    return feeder__cuda_fail(gpu, err, "%s", entry->errmsg);
}

/* Move the counters gathered since the last call into the layer's stats. */
static void flush_counters(feeder__gpu *gpu, feeder_stats *d, uint64_t t0)
{
    pthread_mutex_lock(&gpu->lock);
    d->pin_ns = gpu->pin_ns;
    d->gpu_decoded = gpu->gpu_decoded;
    d->gpu_fallback = gpu->gpu_fallback;
    gpu->pin_ns = gpu->gpu_decoded = gpu->gpu_fallback = 0;
    pthread_mutex_unlock(&gpu->lock);
    d->h2d_ns += gpu->h2d_ns;
    gpu->h2d_ns = 0;
    d->gpu_decode_ns = gpu->dec_ns;
    gpu->dec_ns = 0;
    d->wait_ns = feeder__now_ns() - t0;
    feeder__cuda_stats_add(gpu, d);
}

/* Lend the FIFO's head: a batch, or its status as the call's result. */
static int lend_head(feeder__gpu *gpu, feeder_stats *d, feeder_batch **out)
{
    item *it = &gpu->fifo[gpu->head];
    gpu->head = (gpu->head + 1) % (gpu->depth + 1);
    gpu->len--;
    if (it->entry < 0) {
        gpu->paused = 0;
        return feeder__cuda_fail(gpu, it->rc, "%s", it->msg);
    }
    ring_entry *entry = &gpu->ring[it->entry];
    int rc = gpu->pin_mode == FEEDER_PIN_COPY ? wait_pin_enqueued(gpu, entry)
             : gpu->decode_thread             ? wait_decoded(gpu, entry)
                                            : 0;
    if (rc)
        return rc;
    entry->state = E_LENT;
    d->gpu_batches = 1;
    /* What the copies moved in h2d_ns: pixels and labels. The bitstreams
     * nvJPEG reads from the slot cross PCIe during the decode instead, and
     * are counted in bytes_read. */
    d->h2d_bytes = entry->in_bytes + entry->count * sizeof(int64_t);
    *out = &entry->pub;
    /* Batch k is out; start k+1 now, not at the next call. A failure here
     * is reported by a later call: batch k is valid either way. */
    if ((rc = prefetch(gpu, 0)))
        mark_fatal(gpu, rc, gpu->errmsg);
    return 0;
}

int feeder__gpu_next(feeder__gpu *gpu, feeder_batch **out)
{
    if (gpu->fatal)
        return feeder__cuda_fail(gpu, gpu->fatal, "%s", gpu->fatal_msg);
    uint64_t t0 = feeder__now_ns();
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    devguard dg;
    cudaError_t ce = feeder__cuda_enter(gpu, &dg);
    if (ce != cudaSuccess)
        return feeder__cuda_fail(gpu, FEEDER_ECUDA, "cudaSetDevice(%d): %s", gpu->cfg.device,
                                 feeder__cuda_errtext(ce));
    int rc = fill_fifo(gpu, &d);
    if (rc && rc != FEEDER_EBUSY) /* every buffer borrowed: the user's to fix, not sticky */
        rc = mark_fatal(gpu, rc, gpu->errmsg);
    else if (!rc)
        rc = lend_head(gpu, &d, out);
    feeder__cuda_leave(&dg);
    flush_counters(gpu, &d, t0);
    return rc;
}

int feeder__gpu_release(feeder_batch *b, void *stream)
{
    ring_entry *entry = b->internal_;
    feeder__gpu *gpu = entry->gpu;
    if (&entry->pub != b)
        return FEEDER_EINVAL;
    if (entry->state != E_LENT) /* internal_ stays set: a second release is named */
        return feeder__cuda_fail(gpu, FEEDER_EINVAL,
                                 "feeder_batch_release: batch %llu of epoch %llu is not lent: "
                                 "released twice?",
                                 (unsigned long long)b->number, (unsigned long long)b->epoch);
    feeder__trace_unhold(gpu->tr, b, feeder__now_ns());
    devguard dg;
    cudaError_t e = feeder__cuda_enter(gpu, &dg);
    if (e == cudaSuccess)
        e = cudaEventRecord(entry->release_ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        /* Without the event the buffer's readers are unknown: wait for the
         * whole device rather than risk overwriting what they read. */
        cudaDeviceSynchronize();
        entry->wait_release = 0;
    } else {
        entry->wait_release = 1;
    }
    entry->state = E_FREE;
    /* Refill the freed buffer now, so its copy overlaps the user's compute. */
    if (!gpu->fatal) {
        feeder_stats d;
        memset(&d, 0, sizeof(d));
        int rc = reap(gpu, &d, 0);
        if (!rc)
            rc = prefetch(gpu, 0);
        if (rc)
            mark_fatal(gpu, rc, gpu->errmsg);
        feeder__cuda_stats_add(gpu, &d);
    }
    feeder__cuda_leave(&dg);
    return e == cudaSuccess ? 0
                            : feeder__cuda_fail(gpu, FEEDER_ECUDA,
                                                  "feeder_batch_release: cudaEventRecord: %s",
                                                  feeder__cuda_errtext(e));
}

void feeder__gpu_drop(feeder__gpu *gpu)
{
    devguard dg;
    if (feeder__cuda_enter(gpu, &dg) != cudaSuccess)
        return;
    int stuck = feeder__cuda_pin_quiesce(gpu);
    if (stuck >= 0 && !gpu->wedged)
        decoder_wedged(gpu, stuck);
    if (!gpu->wedged)
        cudaStreamSynchronize(gpu->stream);
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    reap(gpu, &d, 0);
    feeder__cuda_stats_add(gpu, &d);
    for (; gpu->len; gpu->len--, gpu->head = (gpu->head + 1) % (gpu->depth + 1)) {
        item *it = &gpu->fifo[gpu->head];
        if (it->entry >= 0)
            gpu->ring[it->entry].state = E_FREE;
    }
    gpu->paused = 0;
    feeder__cuda_leave(&dg);
}

const char *feeder__gpu_errmsg(const feeder__gpu *gpu) { return gpu ? gpu->errmsg : ""; }

void feeder__gpu_stats(const feeder__gpu *gpu, feeder_stats *st)
{
    if (!gpu)
        return;
    st->pin_ns += gpu->st.pin_ns;
    st->h2d_ns += gpu->st.h2d_ns;
    st->h2d_bytes += gpu->st.h2d_bytes;
    st->gpu_batches += gpu->st.gpu_batches;
    st->wait_ns += gpu->st.wait_ns;
    st->gpu_decoded += gpu->st.gpu_decoded;
    st->gpu_fallback += gpu->st.gpu_fallback;
    st->gpu_decode_ns += gpu->st.gpu_decode_ns;
    st->pinned_bytes = gpu->st.pinned_bytes;
    st->device_bytes = gpu->st.device_bytes;
    if (gpu->decodes)
        st->hybrid_cpu_permille = gpu->st.hybrid_cpu_permille;
}

feeder__gpu *feeder__gpu_of(const feeder_batch *b) { return ((const ring_entry *)b->internal_)->gpu; }
void *feeder__gpu_host(const feeder__gpu *gpu) { return gpu->cfg.host.ctx; }
