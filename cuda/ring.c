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
#include "cuda/layer.h"

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

/* Is the entry still the decode thread's (queued, not handed back)? */
static int thread_holds(feeder__gpu *g, const entry *en)
{
    pthread_mutex_lock(&g->lock);
    int queued = en->pin == PIN_QUEUED;
    pthread_mutex_unlock(&g->lock);
    return queued;
}

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
            if (g->decode_thread && thread_holds(g, en))
                continue;
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
                    feeder__cuda_harvest(g, en, &d->h2d_ns);
                    en->timed = 0;
                    feeder__cuda_trace_copies(g, en, 1);
                } else if (q != cudaErrorNotReady) {
                    return feeder__cuda_fail(g, FEEDER_ECUDA, "copy of batch %llu to device %d: %s",
                                               (unsigned long long)en->pub.number, g->cfg.device,
                                               feeder__cuda_errtext(q));
                }
            }
        slot:
            if (!en->hb)
                continue;
            if (g->pin_mode != FEEDER_PIN_COPY)
                done = en->used && !en->timed; /* h2d_ev has passed (checked above) */
            if (done) {
                feeder__cuda_host_release(g, en->hb);
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
                return feeder__cuda_fail(g, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                           (unsigned long long)oldest->pub.number, feeder__cuda_errtext(e));
        }
    }
    return 0;
}

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
            return feeder__cuda_fail(g, FEEDER_ECUDA, "waiting for the copy of batch %llu: %s",
                                       (unsigned long long)en->pub.number, feeder__cuda_errtext(e));
    }
    feeder__cuda_host_release(g, en->hb);
    en->hb = NULL;
    g->held--;
    return 0;
}

/* Lend-to-be: entry `en` takes host batch `hb` (its labels, indices and
 * shape) and its place at the FIFO's tail. */
static item *take_host_batch(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    en->hb = hb;
    g->held++;
    en->count = hb->count;
    en->in_bytes = (size_t)hb->count * g->l->sample_bytes;
    if (hb->labels)
        memcpy(en->labels, hb->labels, hb->count * sizeof(int64_t));
    memcpy(en->indices, hb->indices, hb->count * sizeof(uint64_t));
    feeder_batch *b = &en->pub;
    memset(b, 0, sizeof(*b));
    b->labels = hb->labels ? en->labels : NULL;
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
    b->device_labels = hb->labels ? en->dev_labels : NULL;
    b->dtype = g->cfg.dtype;
    b->device = g->cfg.device;
    b->device_bytes = (size_t)hb->count * g->out_sample_bytes;
    if (g->cfg.fields) {
        en->fview = (feeder__fields_view){g->cfg.fields, en->meta, 0, en->stage, g->cfg.device};
        b->fields_ = &en->fview;
    }
    b->internal_ = en;
    en->state = E_PENDING;
    item *it = &g->fifo[(g->head + g->len++) % (g->depth + 1)];
    it->entry = (int)(en - g->e);
    it->rc = 0;
    return it;
}

/* The entry's last H2D must be over before its pinned buffer is rewritten
 * (invariant 2), and its copy time must be read before the events are
 * recorded again (else the stats keep only the copies that happened to
 * finish before a reap, the short ones). It was enqueued two batches ago, so
 * this rarely waits. */
static int settle_entry(feeder__gpu *g, entry *en)
{
    if (en->timed || (en->used && g->pin_mode == FEEDER_PIN_COPY)) {
        cudaError_t e = cudaEventSynchronize(en->h2d_ev);
        if (e != cudaSuccess)
            return feeder__cuda_fail(g, FEEDER_ECUDA, "waiting for the copy of a batch: %s",
                                     feeder__cuda_errtext(e));
        if (en->timed)
            feeder__cuda_harvest(g, en, &g->h2d_ns);
        feeder__cuda_trace_copies(g, en, en->timed);
        en->timed = 0;
    }
    feeder__cuda_trace_copies(g, en, 0); /* a normalise span still owed: now or never */
    en->tr_norm = 0;
    return 0;
}

/* PIN_COPY: hand the entry to the pin threads; the last of them enqueues. */
static void queue_pin_job(feeder__gpu *g, entry *en, feeder_batch *hb, int id)
{
    pthread_mutex_lock(&g->lock);
    en->src = hb->data;
    en->src_labels = hb->labels;
    en->slot_done = 0;
    en->chunks_taken = en->chunks_done = 0;
    en->err = 0;
    en->pin = PIN_QUEUED;
    g->jobs[(g->jhead + g->jlen++) % (g->depth + 1)] = id;
    pthread_cond_broadcast(&g->cv_work);
    pthread_mutex_unlock(&g->lock);
}

/* Does any sample of the slot wait for nvJPEG (bytes, not pixels)? */
static int has_bitstreams(const feeder__gpu *g, const feeder_batch *hb)
{
    const feeder__slot_layout *l = g->l;
    const uint64_t *enc = feeder__slot_encoded(l, hb->data - l->data_off);
    for (uint32_t i = 0; i < hb->count; i++)
        if (enc[i])
            return 1;
    return 0;
}

/* GPU decoders with the decode thread: take nvJPEG once it is made (here,
 * in the loader's thread: the shares it sets go to the host loader), then
 * hand the batch over. */
static void queue_decode_job(feeder__gpu *g, entry *en, feeder_batch *hb, int id)
{
    if (!g->dec)
        feeder__cuda_decoder_ready(g, has_bitstreams(g, hb));
    pthread_mutex_lock(&g->lock);
    en->err = 0;
    en->pin = PIN_QUEUED;
    g->jobs[(g->jhead + g->jlen++) % (g->depth + 1)] = id;
    pthread_cond_signal(&g->cv_work);
    pthread_mutex_unlock(&g->lock);
}

/* Start moving host batch `hb` into entry `en`, by the layer's one path:
 * the pin threads, the packed file's mapping, the GPU decoder, or a copy of
 * the slot. */
static int start_batch(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    int rc = drop_held(g, en);
    if (rc) {
        feeder__cuda_host_release(g, hb);
        return rc;
    }
    item *it = take_host_batch(g, en, hb);
    if ((rc = settle_entry(g, en)) || (rc = feeder__cuda_augment_draw(g, en, hb)))
        return rc;
    if (g->pin_mode == FEEDER_PIN_COPY) {
        queue_pin_job(g, en, hb, it->entry);
        return 0;
    }
    if (g->decode_thread) {
        queue_decode_job(g, en, hb, it->entry);
        return 0;
    }
    cudaError_t e = g->cfg.fields       ? feeder__cuda_enqueue_fields(g, en, hb)
                    : g->pack_registered ? feeder__cuda_enqueue_direct(g, en, hb)
                                         : feeder__cuda_enqueue(g, en, hb->data, hb->labels);
    if (e != cudaSuccess)
        return feeder__cuda_fail(g, FEEDER_ECUDA, "copying batch %llu of epoch %llu %sto device %d: %s",
                                 (unsigned long long)hb->number, (unsigned long long)hb->epoch,
                                 g->pack_registered ? "from the packed file " : "", g->cfg.device,
                                 feeder__cuda_errtext(e));
    return 0;
}

/* Pull host batches into free entries: without waiting (try), or waiting for
 * one (the FIFO is empty and the user asked for a batch). */
static int prefetch(feeder__gpu *g, int wait)
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
        /* The shares' signal: a free entry found no finished host batch (or
         * had to wait for one), so the workers are behind the GPU side. */
        g->starved = rc == FEEDER__AGAIN || feeder__now_ns() - t0 > 200000;
        if (rc == FEEDER__AGAIN)
            return 0;
        if (rc) {
            push_status(g, rc, g->cfg.host.errmsg(g->cfg.host.ctx));
            return 0;
        }
        if ((rc = start_batch(g, en, hb)))
            return rc;
        wait = 0;
    }
    return 0;
}

static int mark_broken(feeder__gpu *g, int rc, const char *msg)
{
    g->broken = rc;
    feeder__fmt(g->broken_msg, sizeof(g->broken_msg), "%s", msg);
    return rc;
}

/* Have at least one item in the FIFO: pull what is finished, and when
 * nothing is, wait for the host loader. */
static int fill_fifo(feeder__gpu *g, feeder_stats *d)
{
    int rc = reap(g, d, 0);
    if (!rc)
        rc = prefetch(g, 0);
    if (rc || g->len)
        return rc;
    if (!free_entry(g))
        return feeder__cuda_fail(g, FEEDER_EBUSY,
                                 "all %d device buffers are borrowed; release a batch first "
                                 "(gpu_prefetch = %d)", g->depth, g->depth);
    if (!(rc = reap(g, d, 1)))
        rc = prefetch(g, 1);
    if (!rc && g->len == 0)
        rc = feeder__cuda_fail(g, FEEDER_EPROTO,
                               "GPU prefetcher: no batch could be pulled (%d of %u host slots "
                               "in copies)", g->held, g->nslots);
    return rc;
}

/* PIN_COPY: the batch is lent once its copy is on the stream (the event is
 * recorded); the user's stream waits for the copy itself. */
static int wait_pin_enqueued(feeder__gpu *g, entry *en)
{
    pthread_mutex_lock(&g->lock);
    while (en->pin != PIN_ENQUEUED)
        pthread_cond_wait(&g->cv_done, &g->lock);
    int err = en->err;
    char msg[sizeof(en->errmsg)];
    memcpy(msg, en->errmsg, sizeof(msg));
    pthread_mutex_unlock(&g->lock);
    return err ? mark_broken(g, feeder__cuda_fail(g, err, "%s", msg), msg) : 0;
}

/* The decode thread's hand-back of the batch to lend. A sample's error fails
 * the batch where it stands in the FIFO, as a worker's would, and its slot
 * goes back now (the thread waited for the stream); a CUDA error breaks the
 * layer. */
static int wait_decoded(feeder__gpu *g, entry *en)
{
    pthread_mutex_lock(&g->lock);
    while (en->pin == PIN_QUEUED)
        pthread_cond_wait(&g->cv_done, &g->lock);
    en->pin = PIN_IDLE;
    int err = en->err, sample = en->sample_err;
    pthread_mutex_unlock(&g->lock);
    if (!err) {
        feeder__cuda_rebalance(g, en);
        return 0;
    }
    if (!sample)
        return mark_broken(g, feeder__cuda_fail(g, err, "%s", en->errmsg), en->errmsg);
    en->state = E_FREE;
    feeder__cuda_host_release(g, en->hb);
    en->hb = NULL;
    g->held--;
    return feeder__cuda_fail(g, err, "%s", en->errmsg);
}

/* Move the counters gathered since the last call into the layer's stats. */
static void flush_counters(feeder__gpu *g, feeder_stats *d, uint64_t t0)
{
    pthread_mutex_lock(&g->lock);
    d->pin_ns = g->pin_ns;
    d->gpu_decoded = g->gpu_decoded;
    d->gpu_fallback = g->gpu_fallback;
    g->pin_ns = g->gpu_decoded = g->gpu_fallback = 0;
    pthread_mutex_unlock(&g->lock);
    d->h2d_ns += g->h2d_ns;
    g->h2d_ns = 0;
    d->gpu_decode_ns = g->dec_ns;
    g->dec_ns = 0;
    d->wait_ns = feeder__now_ns() - t0;
    feeder__cuda_stats_add(g, d);
}

/* Lend the FIFO's head: a batch, or its status as the call's result. */
static int lend_head(feeder__gpu *g, feeder_stats *d, feeder_batch **out)
{
    item *it = &g->fifo[g->head];
    g->head = (g->head + 1) % (g->depth + 1);
    g->len--;
    if (it->entry < 0) {
        g->paused = 0;
        return feeder__cuda_fail(g, it->rc, "%s", it->msg);
    }
    entry *en = &g->e[it->entry];
    int rc = g->pin_mode == FEEDER_PIN_COPY ? wait_pin_enqueued(g, en)
             : g->decode_thread             ? wait_decoded(g, en)
                                            : 0;
    if (rc)
        return rc;
    en->state = E_LENT;
    d->gpu_batches = 1;
    /* What the copies moved in h2d_ns: pixels and labels. The bitstreams
     * nvJPEG reads from the slot cross PCIe during the decode instead, and
     * are counted in bytes_read. */
    d->h2d_bytes = en->in_bytes + en->count * sizeof(int64_t);
    *out = &en->pub;
    /* Batch k is out; start k+1 now, not at the next call. A failure here
     * is reported by a later call: batch k is valid either way. */
    if ((rc = prefetch(g, 0)))
        mark_broken(g, rc, g->errmsg);
    return 0;
}

int feeder__gpu_next(feeder__gpu *g, feeder_batch **out)
{
    if (g->broken)
        return feeder__cuda_fail(g, g->broken, "%s", g->broken_msg);
    uint64_t t0 = feeder__now_ns();
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    devguard dg;
    cudaError_t ce = feeder__cuda_enter(g, &dg);
    if (ce != cudaSuccess)
        return feeder__cuda_fail(g, FEEDER_ECUDA, "cudaSetDevice(%d): %s", g->cfg.device,
                                 feeder__cuda_errtext(ce));
    int rc = fill_fifo(g, &d);
    if (rc && rc != FEEDER_EBUSY) /* every buffer borrowed: the user's to fix, not sticky */
        rc = mark_broken(g, rc, g->errmsg);
    else if (!rc)
        rc = lend_head(g, &d, out);
    feeder__cuda_leave(&dg);
    flush_counters(g, &d, t0);
    return rc;
}

int feeder__gpu_release(feeder_batch *b, void *stream)
{
    entry *en = b->internal_;
    feeder__gpu *g = en->g;
    if (&en->pub != b)
        return FEEDER_EINVAL;
    if (en->state != E_LENT) /* internal_ stays set: a second release is named */
        return feeder__cuda_fail(g, FEEDER_EINVAL,
                                 "feeder_batch_release: batch %llu of epoch %llu is not lent: "
                                 "released twice?",
                                 (unsigned long long)b->number, (unsigned long long)b->epoch);
    feeder__trace_unhold(g->tr, b, feeder__now_ns());
    devguard dg;
    cudaError_t e = feeder__cuda_enter(g, &dg);
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
    /* Refill the freed buffer now, so its copy overlaps the user's compute. */
    if (!g->broken) {
        feeder_stats d;
        memset(&d, 0, sizeof(d));
        int rc = reap(g, &d, 0);
        if (!rc)
            rc = prefetch(g, 0);
        if (rc)
            mark_broken(g, rc, g->errmsg);
        feeder__cuda_stats_add(g, &d);
    }
    feeder__cuda_leave(&dg);
    return e == cudaSuccess ? 0
                            : feeder__cuda_fail(g, FEEDER_ECUDA,
                                                  "feeder_batch_release: cudaEventRecord: %s",
                                                  feeder__cuda_errtext(e));
}

void feeder__gpu_drop(feeder__gpu *g)
{
    devguard dg;
    if (feeder__cuda_enter(g, &dg) != cudaSuccess)
        return;
    feeder__cuda_pin_quiesce(g);
    cudaStreamSynchronize(g->stream);
    feeder_stats d;
    memset(&d, 0, sizeof(d));
    reap(g, &d, 0);
    feeder__cuda_stats_add(g, &d);
    for (; g->len; g->len--, g->head = (g->head + 1) % (g->depth + 1)) {
        item *it = &g->fifo[g->head];
        if (it->entry >= 0)
            g->e[it->entry].state = E_FREE;
    }
    g->paused = 0;
    feeder__cuda_leave(&dg);
}

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

feeder__gpu *feeder__gpu_of(const feeder_batch *b) { return ((const entry *)b->internal_)->g; }
void *feeder__gpu_host(const feeder__gpu *g) { return g->cfg.host.ctx; }
