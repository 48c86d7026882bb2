/*
 * One batch's work on the copy stream: the copies of a slot (or of a packed
 * file's records, or what the GPU decoder needs), the normalise kernel and
 * the events that order every reuse; their times for the stats and trace.
 */
#include "cuda/layer.h"

/* Add an entry's finished copy (and decode) times to the counters; its
 * h2d_ev has passed. */
void feeder__cuda_harvest(feeder__gpu *g, entry *en, uint64_t *h2d_ns)
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

/* Every batch's head on the copy stream: wait until the user's stream has
 * passed the entry's last release, then mark the start. */
static cudaError_t batch_begin(entry *en, cudaStream_t s)
{
    cudaError_t e;
    if (en->wait_release && (e = cudaStreamWaitEvent(s, en->release_ev, 0)) != cudaSuccess)
        return e;
    en->wait_release = 0;
    return cudaEventRecord(en->start_ev, s);
}

/* Every batch's tail: the labels, the H2D event (the slot may go back to
 * the workers once it passes), the device augment (cuda/augment_params.c),
 * the normalise kernel for float output, the
 * batch's ready event, and the entry's bookkeeping. `decoded`: the batch's
 * time has a GPU decode part (dec_ev..h2d_ev). */
static cudaError_t batch_end(feeder__gpu *g, entry *en, const int64_t *labels, int decoded,
                             int64_t epoch, int64_t batch)
{
    cudaStream_t s = g->stream;
    cudaError_t e;
    if (labels && (e = cudaMemcpyAsync(en->dev_labels, labels, en->count * sizeof(int64_t),
                                       cudaMemcpyHostToDevice, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(en->h2d_ev, s)) != cudaSuccess ||
        (e = feeder__cuda_augment_enqueue(g, en)) != cudaSuccess)
        return e;
    if (g->cfg.dtype != FEEDER_DTYPE_UINT8 &&
        (e = (cudaError_t)feeder__normalize_launch(en->stage, en->dev, en->count, g->l->height,
                                                   g->l->width, (int)g->l->channels,
                                                   g->cfg.out_layout, g->cfg.dtype, g->cfg.mean,
                                                   g->cfg.std, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(en->copy_ev, s)) != cudaSuccess)
        return e;
    en->used = 1;
    en->timed = 1;
    en->decoded = decoded;
    en->tr_epoch = epoch;
    en->tr_batch = batch;
    return cudaSuccess;
}

/* A slot's (or pinned buffer's) batch: data and labels from `src`. */
static cudaError_t enqueue_copies(feeder__gpu *g, entry *en, const uint8_t *src,
                                  const int64_t *labels)
{
    cudaError_t e;
    if ((e = batch_begin(en, g->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(en->stage, src, en->in_bytes, cudaMemcpyHostToDevice, g->stream)) !=
            cudaSuccess)
        return e;
    return batch_end(g, en, labels, 0, (int64_t)en->pub.epoch, (int64_t)en->pub.number);
}

cudaError_t feeder__cuda_enqueue(feeder__gpu *g, entry *en, const uint8_t *src, const int64_t *labels)
{
    FEEDER_NVTX_PUSH("enqueue copies");
    cudaError_t e = enqueue_copies(g, en, src, labels);
    FEEDER_NVTX_POP();
    return e;
}

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
void feeder__cuda_trace_copies(feeder__gpu *g, entry *en, int h2d)
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
        en->tr_norm = g->cfg.dtype != FEEDER_DTYPE_UINT8 || g->aug_on;
    } else if (h2d) {
        feeder__gpu_trace_events(g, g->tr_copy, "H2D", en->start_ev, en->h2d_ev, ep, b);
        en->tr_norm = g->cfg.dtype != FEEDER_DTYPE_UINT8 || g->aug_on;
    }
    if (en->tr_norm && cudaEventQuery(en->copy_ev) == cudaSuccess) {
        /* the kernels between h2d_ev and copy_ev */
        const char *what = !g->aug_on ? "normalise"
                           : g->cfg.dtype != FEEDER_DTYPE_UINT8 ? "augment + normalise"
                                                                : "augment";
        feeder__gpu_trace_events(g, g->tr_copy, what, en->h2d_ev, en->copy_ev, ep, b);
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
 * when a free entry asked for it means the workers are ahead: give them more;
 * none finished (or one waited for) means they are behind: give them less.
 * The split follows what the pipeline does rather than a cost model, whose
 * per-image decode times leave out reading, scheduling and the cores the
 * loader's thread and the driver take (docs/ARCHITECTURE.md). A step shows only in batches
 * dispatched after it, which arrive behind every slot already in flight, so
 * the step is small against that lag: all the slots together move the share
 * by at most 6%, and it does not swing from one side to the other. */
static void rebalance(feeder__gpu *g)
{
    uint32_t step = 60 / g->nslots ? 60 / g->nslots : 1;
    uint32_t pm = g->cpu_share;
    pm = g->starved ? (pm > 20 + step ? pm - step : 20) : (pm + step < 980 ? pm + step : 980);
    feeder__cuda_set_cpu_share(g, pm);
}

/* The runs of a RAW packed batch: records that follow each other both in
 * the file and in the batch, one run for a whole batch in file order. Into
 * g->run_*; their count. */
static uint32_t list_runs(feeder__gpu *g, entry *en, const feeder_batch *hb)
{
    const struct feeder__pack *pk = g->pack;
    size_t sb = g->l->sample_bytes;
    uint32_t nr = 0;
    for (uint32_t i = 0; i < hb->count;) {
        uint32_t j = i + 1;
        while (j < hb->count && pk->off[hb->indices[j]] == pk->off[hb->indices[j - 1]] + sb)
            j++;
        g->run_dst[nr] = en->stage + (size_t)i * sb;
        g->run_src[nr] = pk->map + pk->off[hb->indices[i]];
        g->run_len[nr] = (size_t)(j - i) * sb;
        nr++;
        i = j;
    }
    return nr;
}

/* The shuffled batch through the gather kernel: the record offsets go to the
 * device first (from the entry's pinned array, rewritten only after the
 * entry's last batch passed h2d_ev), then the SMs read the records from the
 * mapped file. */
static cudaError_t gather_records(feeder__gpu *g, entry *en, const feeder_batch *hb)
{
    const struct feeder__pack *pk = g->pack;
    for (uint32_t i = 0; i < hb->count; i++)
        en->gather_host[i] = pk->off[hb->indices[i]];
    cudaError_t e = cudaMemcpyAsync(en->gather_dev, en->gather_host, hb->count * sizeof(uint64_t),
                                    cudaMemcpyHostToDevice, g->stream);
    if (e != cudaSuccess)
        return e;
    return (cudaError_t)feeder__gather_launch(g->pack_dev, en->gather_dev, en->stage,
                                              g->l->sample_bytes, hb->count, g->pack_aligned16,
                                              g->stream);
}

/* The runs by the copy engine: one call for them all (cudaMemcpyBatchAsync),
 * or one cudaMemcpyAsync each. */
static cudaError_t copy_runs(feeder__gpu *g, uint32_t nr)
{
    cudaError_t e = cudaSuccess;
    if (g->gather_mode == FEEDER__GATHER_BATCH && nr > 1) {
        struct cudaMemcpyAttributes at;
        memset(&at, 0, sizeof(at));
        at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t at_idx = 0;
        return cudaMemcpyBatchAsync(g->run_dst, (const void *const *)g->run_src, g->run_len, nr,
                                    &at, &at_idx, 1, g->stream);
    }
    for (uint32_t r = 0; r < nr && e == cudaSuccess; r++)
        e = cudaMemcpyAsync(g->run_dst[r], g->run_src[r], g->run_len[r], cudaMemcpyHostToDevice,
                            g->stream);
    return e;
}

/* A RAW packed file's batch: every record straight from the registered file
 * mapping to its place in the device batch; only the labels come from the
 * slot. A batch in file order is one copy; a shuffled one goes by
 * g->gather_mode (docs/ARCHITECTURE.md has what each reaches). */
cudaError_t feeder__cuda_enqueue_direct(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    cudaError_t e;
    if ((e = batch_begin(en, g->stream)) != cudaSuccess)
        return e;
    uint32_t nr = list_runs(g, en, hb);
    if (g->gather_mode == FEEDER__GATHER_KERNEL && nr > 1)
        e = gather_records(g, en, hb);
    else
        e = copy_runs(g, nr);
    if (e != cudaSuccess)
        return e;
    en->in_bytes = (size_t)hb->count * g->l->sample_bytes;
    return batch_end(g, en, hb->labels, 0, (int64_t)hb->epoch, (int64_t)hb->number);
}

/* After a decoded batch, in the loader's thread (the share goes to the host
 * loader): HYBRID moves the workers' share. */
void feeder__cuda_rebalance(feeder__gpu *g, const entry *en)
{
    if (g->cfg.decoder == FEEDER_DECODER_HYBRID && en->gpu_part)
        rebalance(g);
}

/* Take the decoder made on its thread once it is ready (wait: block until
 * it is); 1 when the layer decodes on the GPU from now on. */
int feeder__cuda_decoder_ready(feeder__gpu *g, int wait)
{
    if (g->dec)
        return 1;
    if (!g->dec_thread_live || (!wait && atomic_load(&g->dec_state) == 0))
        return 0;
    pthread_join(g->dec_thread, NULL);
    g->dec_thread_live = 0;
    if (atomic_load(&g->dec_state) < 0) {
        /* The workers keep decoding everything; dec_why says why. */
        feeder__fmt(g->dec_why, sizeof(g->dec_why), "nvJPEG could not start: %s", g->dec_err);
        return 0;
    }
    g->dec = g->dec_made;
    feeder__cuda_set_cpu_share(g, g->cfg.cpu_share);
    return 1;
}

/* The GPU decoders' work for one host batch: copy what the workers decoded,
 * decode the rest with nvJPEG, and decode on the CPU here what nvJPEG
 * refuses. 0; a CUDA failure (FEEDER_ECUDA, the layer is broken); or a
 * sample's error with *sample_err set and `msg` naming the sample (the batch
 * fails, the layer goes on). */
/* Each sample of a GPU decoder's batch is at its place in the slot
 * (collate/slot.h): JPEG bytes, listed in g->imgs for nvJPEG, or pixels the
 * workers decoded, copied in runs that follow each other both in the slot
 * and in the batch. The number of images listed, or a cudaError_t < 0. */
static cudaError_t gather_samples(feeder__gpu *g, entry *en, feeder_batch *hb, uint32_t *nimg)
{
    const feeder__slot_layout *l = g->l;
    uint8_t *data = hb->data;
    const uint64_t *enc = feeder__slot_encoded(l, data - l->data_off);
    const uint64_t *place = feeder__slot_place(l, data - l->data_off);
    size_t sb = l->sample_bytes;
    uint32_t n = 0, run = UINT32_MAX;
    cudaError_t e;
    for (uint32_t i = 0; i <= hb->count; i++) {
        int pixels = i < hb->count && enc[i] == 0;
        int joins = pixels && run != UINT32_MAX && place[i] == place[run] + (i - run) * sb;
        if (run != UINT32_MAX && !joins) {
            if ((e = copy_pixels(g, en, data + place[run], run, i - run)) != cudaSuccess)
                return e;
            run = UINT32_MAX;
        }
        if (pixels && run == UINT32_MAX)
            run = i;
        if (i < hb->count && enc[i])
            g->imgs[n++] = (feeder__gpu_image){data + place[i], (size_t)enc[i], hb->indices[i], i};
    }
    *nimg = n;
    return cudaSuccess;
}

/* nvJPEG's decode of the n listed images into the batch, and the CPU decode
 * of what it refuses (from a scratch sample: a pageable copy returns once it
 * has read the scratch, so the next one may reuse it). 0; a CUDA failure
 * (*cuda set); or a sample's error with *sample_err set. */
static int decode_images(feeder__gpu *g, entry *en, feeder_batch *hb, uint32_t n, uint32_t *nref,
                         int *sample_err, cudaError_t *cuda, char *msg, size_t msglen)
{
    char derr[300] = "";
    int rc = 0;
    *nref = 0;
    if (g->dec) { /* taken by the loader's thread before the batch was handed over */
        FEEDER_NVTX_PUSH("nvJPEG batch");
        uint64_t t0 = feeder__now_ns();
        rc = feeder__gpu_decode(g->dec, g->cfg.transform, g->cfg.seed, hb->epoch, g->imgs, n,
                                en->stage, g->l->sample_bytes, g->stream, g->refused, nref, derr,
                                sizeof(derr));
        /* Whether nvJPEG's call returns at once or holds the loader's
         * thread for the decode shows here. */
        feeder__trace_span_e(g->tr, g->tr_submit, "nvJPEG submit", t0, feeder__now_ns(),
                             (int64_t)hb->epoch, (int64_t)hb->number, -1);
        FEEDER_NVTX_POP();
    } else {
        for (; *nref < n; (*nref)++) /* nvJPEG could not start: the CPU decodes them */
            g->refused[*nref] = *nref;
    }
    if (rc) {
        feeder__fmt(msg, msglen, "decoding batch %llu of epoch %llu on device %d: %s",
                    (unsigned long long)hb->number, (unsigned long long)hb->epoch,
                    g->cfg.device, derr);
        return rc;
    }
    for (uint32_t r = 0; r < *nref; r++) {
        const feeder__gpu_image *im = &g->imgs[g->refused[r]];
        rc = g->cfg.host.decode_cpu(g->cfg.host.ctx, im->jpeg, im->len, hb->epoch, im->index,
                                    g->fb, msg, msglen);
        if (rc) {
            *sample_err = 1;
            /* Nothing of this batch may still read the slot when it goes
             * back: the rare path waits. */
            cudaStreamSynchronize(g->stream);
            return rc;
        }
        if ((*cuda = copy_pixels(g, en, g->fb, im->pos, 1)) != cudaSuccess)
            return FEEDER_ECUDA;
    }
    return 0;
}

int feeder__cuda_enqueue_decode(feeder__gpu *g, entry *en, feeder_batch *hb, int *sample_err,
                                char *msg, size_t msglen)
{
    cudaError_t e = cudaSuccess;
    uint32_t n = 0, nref = 0;
    *sample_err = 0;
    en->in_bytes = 0;
    en->gpu_part = 0;
    if ((e = batch_begin(en, g->stream)) != cudaSuccess ||
        (e = gather_samples(g, en, hb, &n)) != cudaSuccess ||
        (e = cudaMemcpyAsync(en->dev_labels, hb->labels, hb->count * sizeof(int64_t),
                             cudaMemcpyHostToDevice, g->stream)) != cudaSuccess ||
        (e = cudaEventRecord(en->dec_ev, g->stream)) != cudaSuccess)
        goto cuda_fail;
    int rc = decode_images(g, en, hb, n, &nref, sample_err, &e, msg, msglen);
    if (rc == FEEDER_ECUDA && e != cudaSuccess)
        goto cuda_fail;
    if (rc)
        return rc;
    pthread_mutex_lock(&g->lock); /* flush_counters reads them in the loader's thread */
    g->gpu_decoded += n - nref;
    g->gpu_fallback += nref;
    pthread_mutex_unlock(&g->lock);
    en->gpu_part = n > nref;
    if ((e = batch_end(g, en, NULL, n > nref, (int64_t)hb->epoch, (int64_t)hb->number)) !=
        cudaSuccess)
        goto cuda_fail;
    return 0;
cuda_fail:
    feeder__fmt(msg, msglen, "copying batch %llu of epoch %llu to device %d: %s",
                (unsigned long long)hb->number, (unsigned long long)hb->epoch, g->cfg.device,
                feeder__cuda_errtext(e));
    return FEEDER_ECUDA;
}


/* Copy `len` bytes at `p` (inside the host slot) to the same offset of the
 * device copy, and, for lengths and offsets, of the host snapshot. */
static cudaError_t copy_part(feeder__gpu *g, entry *en, const uint8_t *slot, const void *p,
                             size_t len, int snapshot)
{
    size_t off = (size_t)((const uint8_t *)p - slot);
    if (snapshot)
        memcpy(en->meta + off, p, len);
    en->in_bytes += len;
    return len ? cudaMemcpyAsync(en->stage + off, p, len, cudaMemcpyHostToDevice, g->stream)
               : cudaSuccess;
}

cudaError_t feeder__cuda_enqueue_fields(feeder__gpu *g, entry *en, feeder_batch *hb)
{
    const feeder__fields_view *hv = hb->fields_;
    const feeder__fields_layout *fl = g->cfg.fields;
    const uint8_t *slot = hv->slot;
    en->in_bytes = 0;
    /* The control block says how far each padded field was padded. */
    memcpy(en->meta + fl->ctrl_off, slot + fl->ctrl_off, sizeof(feeder__batch_ctrl));
    cudaError_t e = batch_begin(en, g->stream);
    for (uint32_t k = 0; k < fl->nfields && e == cudaSuccess; k++) {
        feeder_tensor t;
        feeder__fields_tensor(hv, hb->count, k, &t);
        e = copy_part(g, en, slot, t.data, t.bytes, 0);
        if (e == cudaSuccess && t.lengths)
            e = copy_part(g, en, slot, t.lengths, (size_t)hb->count * sizeof(int64_t), 1);
        if (e == cudaSuccess && t.offsets)
            e = copy_part(g, en, slot, t.offsets, ((size_t)hb->count + 1) * sizeof(int64_t), 1);
    }
    en->pub.device_bytes = en->in_bytes;
    if (e != cudaSuccess)
        return e;
    return batch_end(g, en, hb->labels, 0, (int64_t)en->pub.epoch, (int64_t)en->pub.number);
}
