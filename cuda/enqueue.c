/*
 * One batch's work on the copy stream: the copies of a slot (or of a packed
 * file's records, or what the GPU decoder needs), the normalise kernel and
 * the events that order every reuse; their times for the stats and trace.
 */
#include "cuda/layer.h"

/* Add an entry's finished copy (and decode) times to the counters; its
 * h2d_ev has passed. */
void feeder__cuda_harvest(feeder__gpu *gpu, ring_entry *entry, uint64_t *h2d_ns)
{
    float ms = 0;
    if (!entry->decoded) {
        if (cudaEventElapsedTime(&ms, entry->start_ev, entry->h2d_ev) == cudaSuccess)
            *h2d_ns += (uint64_t)(ms * 1e6);
        return;
    }
    if (cudaEventElapsedTime(&ms, entry->start_ev, entry->dec_ev) == cudaSuccess)
        *h2d_ns += (uint64_t)(ms * 1e6);
    if (cudaEventElapsedTime(&ms, entry->dec_ev, entry->h2d_ev) == cudaSuccess) {
        gpu->dec_ns += (uint64_t)(ms * 1e6);
    }
}

/* Every batch's head on stream s (the copy stream, or a decode lane's): wait
 * until the user's stream has passed the entry's last release, then mark
 * the start. */
cudaError_t feeder__cuda_batch_begin(ring_entry *entry, cudaStream_t s)
{
    cudaError_t e;
    if (entry->wait_release && (e = cudaStreamWaitEvent(s, entry->release_ev, 0)) != cudaSuccess)
        return e;
    entry->wait_release = 0;
    return cudaEventRecord(entry->start_ev, s);
}

/* Every batch's tail, on the copy stream: the labels, the H2D event (the slot may go back to
 * the workers once it passes), the device augment (cuda/augment_params.c),
 * the normalise kernel for float output, the
 * batch's ready event, and the entry's bookkeeping. `decoded`: the batch's
 * time has a GPU decode part (dec_ev..h2d_ev). */
cudaError_t feeder__cuda_batch_end(feeder__gpu *gpu, ring_entry *entry, const int64_t *labels, int decoded,
                                  int64_t epoch, int64_t batch)
{
    cudaStream_t s = gpu->stream;
    cudaError_t e;
    if (labels && (e = cudaMemcpyAsync(entry->dev_labels, labels, entry->count * sizeof(int64_t),
                                       cudaMemcpyHostToDevice, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(entry->h2d_ev, s)) != cudaSuccess ||
        (e = feeder__cuda_augment_enqueue(gpu, entry)) != cudaSuccess)
        return e;
    if (gpu->cfg.dtype != FEEDER_DTYPE_UINT8 &&
        (e = (cudaError_t)feeder__normalize_launch(entry->stage, entry->dev, entry->count, gpu->l->height,
                                                   gpu->l->width, (int)gpu->l->channels,
                                                   gpu->cfg.out_layout, gpu->cfg.dtype, gpu->cfg.mean,
                                                   gpu->cfg.std, s)) != cudaSuccess)
        return e;
    if ((e = cudaEventRecord(entry->copy_ev, s)) != cudaSuccess)
        return e;
    entry->used = 1;
    entry->timed = 1;
    entry->decoded = decoded;
    entry->tr_epoch = epoch;
    entry->tr_batch = batch;
    return cudaSuccess;
}

/* A slot's (or pinned buffer's) batch: data and labels from `src`. */
static cudaError_t enqueue_copies(feeder__gpu *gpu, ring_entry *entry, const uint8_t *src,
                                  const int64_t *labels)
{
    cudaError_t e;
    if ((e = feeder__cuda_batch_begin(entry, gpu->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(entry->stage, src, entry->in_bytes, cudaMemcpyHostToDevice, gpu->stream)) !=
            cudaSuccess)
        return e;
    return feeder__cuda_batch_end(gpu, entry, labels, 0, (int64_t)entry->pub.epoch, (int64_t)entry->pub.number);
}

cudaError_t feeder__cuda_enqueue(feeder__gpu *gpu, ring_entry *entry, const uint8_t *src,
                                 const int64_t *labels)
{
    FEEDER_NVTX_PUSH("enqueue copies");
    cudaError_t e = enqueue_copies(gpu, entry, src, labels);
    FEEDER_NVTX_POP();
    return e;
}

void feeder__gpu_trace_events(feeder__gpu *gpu, int track, const char *name, void *ev0, void *ev1,
                              int64_t epoch, int64_t batch)
{
    float a = 0, d = 0;
    if (!gpu->tr || cudaEventElapsedTime(&a, gpu->tr_ref, (cudaEvent_t)ev0) != cudaSuccess ||
        cudaEventElapsedTime(&d, (cudaEvent_t)ev0, (cudaEvent_t)ev1) != cudaSuccess) {
        cudaGetLastError(); /* not ready, or not timed: not sticky */
        return;
    }
    /* Start from the reference (float ms: ~8 us steps after 100 s), length
     * from the pair itself (exact to the event resolution). */
    uint64_t t0 = gpu->tr_ref_ns + (uint64_t)((double)a * 1e6);
    feeder__trace_span_e(gpu->tr, track, name, t0, t0 + (uint64_t)((double)d * 1e6), epoch, batch,
                         -1);
}

/* The copy-stream spans of an entry whose h2d_ev has passed: H2D now, the
 * normalise kernel once copy_ev has passed too (never waited for). */
void feeder__cuda_trace_copies(feeder__gpu *gpu, ring_entry *entry, int h2d)
{
    if (!gpu->tr)
        return;
    int64_t ep = entry->tr_epoch, b = entry->tr_batch;
    if (h2d && entry->decoded) {
        /* GPU decoders: the copies of the workers' pixels and the labels,
         * then nvJPEG + the resize kernel (+ any CPU fallback's copies). */
        feeder__gpu_trace_events(gpu, gpu->tr_copy, "H2D", entry->start_ev, entry->dec_ev, ep, b);
        feeder__gpu_trace_events(gpu, gpu->lanes[entry->lane].tr_dec, "nvJPEG decode + resize", entry->dec_ev, entry->h2d_ev,
                                 ep, b);
        entry->tr_norm = gpu->cfg.dtype != FEEDER_DTYPE_UINT8 || gpu->aug_on;
    } else if (h2d) {
        feeder__gpu_trace_events(gpu, gpu->tr_copy, "H2D", entry->start_ev, entry->h2d_ev, ep, b);
        entry->tr_norm = gpu->cfg.dtype != FEEDER_DTYPE_UINT8 || gpu->aug_on;
    }
    if (entry->tr_norm && cudaEventQuery(entry->copy_ev) == cudaSuccess) {
        /* the kernels between h2d_ev and copy_ev */
        const char *what = !gpu->aug_on ? "normalise"
                           : gpu->cfg.dtype != FEEDER_DTYPE_UINT8 ? "augment + normalise"
                                                                : "augment";
        feeder__gpu_trace_events(gpu, gpu->tr_copy, what, entry->h2d_ev, entry->copy_ev, ep, b);
        entry->tr_norm = 0;
    }
}

/* HYBRID: move the workers' share of each batch towards the point where
 * neither side waits for the other. A host batch that was already finished
 * when a free entry asked for it means the workers are ahead; none finished
 * (or one waited for) means they are behind: give them less. Ahead, they get
 * more only while
 * - the GPU side is near its limit (each decode thread busy
 *   FEEDER__HYBRID_BUSY_PM of the time in nvJPEG's calls): with the engines
 *   idle part of the time, images the workers take from them cost CPU that
 *   reads and routes the rest, and on the web mix at 15 workers the pull
 *   alone settled at 154 permille with the engines 64 % busy, 10 % under
 *   NVJPEG alone;
 * - and the workers have time to spare (under FEEDER__HYBRID_WORK_PM of it
 *   in reading, decoding and transforming): "ahead" only says a batch was
 *   ready, and four workers 56-85 % busy under NVJPEG alone were ahead often
 *   enough to take up to 210 permille, which ran HYBRID 2-9 % under NVJPEG.
 * (docs/ARCHITECTURE.md, the GPU decoders, has both measurements.)
 * The split follows what the pipeline does rather than a cost model, whose
 * per-image decode times leave out reading, scheduling and the cores the
 * loader's thread and the driver take. A step shows only in batches
 * dispatched after it, which arrive behind every slot already in flight, so
 * the step is small against that lag: all the slots together move the share
 * by at most 6%, and it does not swing from one side to the other. The
 * workers' time arrives with each finished part, so its share is smoothed
 * over about eight batches. */
/* `avg` moved 1/k of the way to the share (1/1000, at most 1000) of `n`
 * threads' time that `spent` ns took in the `dt` ns since the last step. */
static uint32_t smooth_pm(uint32_t avg, uint64_t spent, uint64_t dt, uint64_t n, uint32_t k)
{
    uint64_t pm = spent * 1000 / (dt * n);
    pm = pm > 1000 ? 1000 : pm;
    return (uint32_t)(((k - 1) * (uint64_t)avg + pm) / k);
}

static void rebalance(feeder__gpu *gpu)
{
    uint64_t now = feeder__now_ns(), busy = atomic_load(&gpu->dec_busy_ns);
    uint64_t live = (uint64_t)atomic_load(&gpu->lanes_live);
    uint32_t nw = 0;
    uint64_t work = gpu->cfg.host.work_ns(gpu->cfg.host.ctx, &nw);
    if (gpu->bal_ns && now > gpu->bal_ns) {
        uint64_t dt = now - gpu->bal_ns;
        gpu->bal_busy_pm = smooth_pm(gpu->bal_busy_pm, busy - gpu->bal_busy_ns, dt, live ? live : 1, 4);
        /* Between two epochs of workers that do not persist none run,
         * while their last parts' time still arrives: no reading then. */
        if (nw)
            gpu->bal_work_pm = smooth_pm(gpu->bal_work_pm, work - gpu->bal_work_ns, dt, nw, 8);
    }
    gpu->bal_ns = now;
    gpu->bal_busy_ns = busy;
    gpu->bal_work_ns = work;
    uint32_t step = 60 / gpu->cfg.nslots ? 60 / gpu->cfg.nslots : 1;
    uint32_t pm = gpu->cpu_share;
    int more = !gpu->starved && gpu->bal_busy_pm >= FEEDER__HYBRID_BUSY_PM &&
               gpu->bal_work_pm < FEEDER__HYBRID_WORK_PM;
    /* Down to none: where the workers are the bound, any share they keep
     * is their time taken from the images only they can decode. */
    pm = more ? (pm + step < 980 ? pm + step : 980) : (pm > step ? pm - step : 0);
    feeder__cuda_set_cpu_share(gpu, pm);
}

/* The runs of a RAW packed batch: records that follow each other both in
 * the file and in the batch, one run for a whole batch in file order. Into
 * gpu->run_*; their count. */
static uint32_t list_runs(feeder__gpu *gpu, ring_entry *entry, const feeder_batch *host)
{
    const struct feeder__pack *pk = gpu->pack;
    size_t sb = gpu->l->sample_bytes;
    uint32_t nr = 0;
    for (uint32_t i = 0; i < host->count;) {
        uint32_t j = i + 1;
        while (j < host->count && pk->off[host->indices[j]] == pk->off[host->indices[j - 1]] + sb)
            j++;
        gpu->run_dst[nr] = entry->stage + (size_t)i * sb;
        gpu->run_src[nr] = pk->map + pk->off[host->indices[i]];
        gpu->run_len[nr] = (size_t)(j - i) * sb;
        nr++;
        i = j;
    }
    return nr;
}

/* The shuffled batch through the gather kernel: the record offsets go to the
 * device first (from the entry's pinned array, rewritten only after the
 * entry's last batch passed h2d_ev), then the SMs read the records from the
 * mapped file. */
static cudaError_t gather_records(feeder__gpu *gpu, ring_entry *entry, const feeder_batch *host)
{
    const struct feeder__pack *pk = gpu->pack;
    for (uint32_t i = 0; i < host->count; i++)
        entry->gather_host[i] = pk->off[host->indices[i]];
    cudaError_t e = cudaMemcpyAsync(entry->gather_dev, entry->gather_host, host->count * sizeof(uint64_t),
                                    cudaMemcpyHostToDevice, gpu->stream);
    if (e != cudaSuccess)
        return e;
    return (cudaError_t)feeder__gather_launch(gpu->pack_dev, entry->gather_dev, entry->stage,
                                              gpu->l->sample_bytes, host->count, gpu->pack_aligned16,
                                              gpu->stream);
}

/* The runs by the copy engine: one call for them all (cudaMemcpyBatchAsync),
 * or one cudaMemcpyAsync each. */
static cudaError_t copy_runs(feeder__gpu *gpu, uint32_t nr)
{
    cudaError_t e = cudaSuccess;
    if (gpu->gather_mode == FEEDER__GATHER_BATCH && nr > 1) {
        struct cudaMemcpyAttributes at;
        memset(&at, 0, sizeof(at));
        at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t at_idx = 0;
        return cudaMemcpyBatchAsync(gpu->run_dst, (const void *const *)gpu->run_src, gpu->run_len, nr,
                                    &at, &at_idx, 1, gpu->stream);
    }
    for (uint32_t r = 0; r < nr && e == cudaSuccess; r++)
        e = cudaMemcpyAsync(gpu->run_dst[r], gpu->run_src[r], gpu->run_len[r], cudaMemcpyHostToDevice,
                            gpu->stream);
    return e;
}

/* A RAW packed file's batch: every record straight from the registered file
 * mapping to its place in the device batch; only the labels come from the
 * slot. A batch in file order is one copy; a shuffled one goes by
 * gpu->gather_mode (docs/ARCHITECTURE.md has what each reaches). */
cudaError_t feeder__cuda_enqueue_direct(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host)
{
    cudaError_t e;
    if ((e = feeder__cuda_batch_begin(entry, gpu->stream)) != cudaSuccess)
        return e;
    uint32_t nr = list_runs(gpu, entry, host);
    if (gpu->gather_mode == FEEDER__GATHER_KERNEL && nr > 1)
        e = gather_records(gpu, entry, host);
    else
        e = copy_runs(gpu, nr);
    if (e != cudaSuccess)
        return e;
    entry->in_bytes = (size_t)host->count * gpu->l->sample_bytes;
    return feeder__cuda_batch_end(gpu, entry, host->labels, 0, (int64_t)host->epoch, (int64_t)host->number);
}

/* After a decoded batch, in the loader's thread (the share goes to the host
 * loader): HYBRID moves the workers' share. */
void feeder__cuda_rebalance(feeder__gpu *gpu, const ring_entry *entry)
{
    if (gpu->cfg.decoder == FEEDER_DECODER_HYBRID && entry->gpu_part)
        rebalance(gpu);
}

/* Take the decoder made on its thread once it is ready (wait: block until
 * it is); 1 when the layer decodes on the GPU from now on. */
int feeder__cuda_decoder_ready(feeder__gpu *gpu, int wait)
{
    if (gpu->dec)
        return 1;
    if (!gpu->dec_thread_live || (!wait && atomic_load(&gpu->dec_state) == 0))
        return 0;
    pthread_join(gpu->dec_thread, NULL);
    gpu->dec_thread_live = 0;
    if (atomic_load(&gpu->dec_state) < 0) {
        /* The workers keep decoding everything; dec_why says why. */
        feeder__fmt(gpu->dec_why, sizeof(gpu->dec_why), "nvJPEG could not start: %s", gpu->dec_err);
        return 0;
    }
    if (gpu->nlanes > 1)
        feeder__gpu_decoder_share_engines(gpu->dec_made, &gpu->engine_lock);
    feeder__gpu_decoder_watch(gpu->dec_made, &gpu->lanes[0].call_t0);
    pthread_mutex_lock(&gpu->lock); /* lane 0 reads it with each job */
    gpu->dec = gpu->dec_made;
    pthread_mutex_unlock(&gpu->lock);
    atomic_fetch_add(&gpu->lanes_live, 1);
    if (!gpu->cfg.warmup) { /* every batch waits for nvJPEG: for every lane's */
        pthread_mutex_lock(&gpu->lock);
        while (gpu->decode_thread && gpu->lanes_settled < gpu->nlanes - 1)
            pthread_cond_wait(&gpu->cv_done, &gpu->lock);
        pthread_mutex_unlock(&gpu->lock);
    }
    feeder__cuda_set_cpu_share(gpu, gpu->cfg.cpu_share);
    return 1;
}

/* Copy `len` bytes at `p` (inside the host slot) to the same offset of the
 * device copy, and, for lengths and offsets, of the host snapshot. */
static cudaError_t copy_part(feeder__gpu *gpu, ring_entry *entry, const uint8_t *slot, const void *p,
                             size_t len, int snapshot)
{
    size_t off = (size_t)((const uint8_t *)p - slot);
    if (snapshot)
        memcpy(entry->meta + off, p, len);
    entry->in_bytes += len;
    return len ? cudaMemcpyAsync(entry->stage + off, p, len, cudaMemcpyHostToDevice, gpu->stream)
               : cudaSuccess;
}

cudaError_t feeder__cuda_enqueue_fields(feeder__gpu *gpu, ring_entry *entry, feeder_batch *host)
{
    const feeder__fields_view *hv = host->fields_;
    const feeder__fields_layout *fl = gpu->cfg.fields;
    const uint8_t *slot = hv->slot;
    entry->in_bytes = 0;
    /* The control block says how far each padded field was padded. */
    memcpy(entry->meta + fl->ctrl_off, slot + fl->ctrl_off, sizeof(feeder__batch_ctrl));
    cudaError_t e = feeder__cuda_batch_begin(entry, gpu->stream);
    for (uint32_t k = 0; k < fl->nfields && e == cudaSuccess; k++) {
        feeder_tensor t;
        feeder__fields_tensor(hv, host->count, k, &t);
        e = copy_part(gpu, entry, slot, t.data, t.bytes, 0);
        if (e == cudaSuccess && t.lengths)
            e = copy_part(gpu, entry, slot, t.lengths, (size_t)host->count * sizeof(int64_t), 1);
        if (e == cudaSuccess && t.offsets)
            e = copy_part(gpu, entry, slot, t.offsets, ((size_t)host->count + 1) * sizeof(int64_t), 1);
    }
    entry->pub.device_bytes = entry->in_bytes;
    if (e != cudaSuccess)
        return e;
    return feeder__cuda_batch_end(gpu, entry, host->labels, 0, (int64_t)entry->pub.epoch, (int64_t)entry->pub.number);
}
