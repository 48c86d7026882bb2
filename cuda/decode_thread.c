/*
 * GPU decoders: decode threads ("lanes") submit every batch's work (the
 * copies of the workers' pixels, nvJPEG, the resize kernel, the events).
 * nvJPEG's batched decode on the hardware engine returns only once the
 * engine is done with the batch (in a trace, the "nvJPEG submit" spans are
 * as long as the GPU's decode spans), so in the loader's thread it held
 * back, for the whole decode, the workers' next tasks and the user's
 * feeder_next. The loader's thread hands a batch over (the entry's `pin`
 * goes PIN_QUEUED on the job FIFO that PIN_COPY's threads use; GPU decoders
 * never pin by copy) and goes on; feeder_next waits for the hand-back
 * (PIN_ENQUEUED) only when it lends that batch. Entries a lane holds are
 * the lane's: the loader's thread touches none of their fields or events
 * until then.
 *
 * Several lanes (FEEDER_OPT_GPU_DECODE_THREADS) each own an nvJPEG decoder
 * (handle, state, scratch) and a stream, and take whole batches from the
 * one FIFO: while one parses its batch's headers and sets the batch up on
 * the host, the engines decode the other's (docs/ARCHITECTURE.md, "Decode
 * threads"). Each batch's tail goes on the copy stream, one at a time.
 */
#include <time.h>
#include <unistd.h>

#include "cuda/layer.h"

/* The lane's decoder for the batch at hand (NULL: nvJPEG is not ready or
 * could not start): lane 0's is the one the loader's thread took, read
 * with the job under gpu->lock (lane_run). */
static feeder__gpu_decoder *lane_decoder(const dec_lane *ln)
{
    return ln->id == 0 ? ln->dec0 : ln->dec;
}

/* Copy n decoded samples from src (host) to places [i, i + n) of the device
 * batch, on the lane's stream. */
static cudaError_t copy_pixels(dec_lane *ln, ring_entry *entry, const uint8_t *src, uint32_t i,
                               uint32_t n)
{
    size_t sb = ln->gpu->l->sample_bytes;
    entry->in_bytes += (size_t)n * sb;
    return cudaMemcpyAsync(entry->stage + (size_t)i * sb, src, (size_t)n * sb,
                           cudaMemcpyHostToDevice, ln->stream);
}

/* Each sample of a GPU decoder's batch is at its place in the slot
 * (collate/slot.h): JPEG bytes, listed in ln->imgs for nvJPEG, or pixels the
 * workers decoded, copied in runs that follow each other both in the slot
 * and in the batch. The number of images listed into *nimg. */
static cudaError_t gather_samples(dec_lane *ln, ring_entry *entry, feeder_batch *host, uint32_t *nimg)
{
    const feeder__slot_layout *l = ln->gpu->l;
    uint8_t *data = host->data;
    const uint64_t *enc = feeder__slot_encoded(l, data - l->data_off);
    const uint64_t *place = feeder__slot_place(l, data - l->data_off);
    size_t sb = l->sample_bytes;
    uint32_t n = 0, run = UINT32_MAX;
    cudaError_t e;
    for (uint32_t i = 0; i <= host->count; i++) {
        int pixels = i < host->count && enc[i] == 0;
        int joins = pixels && run != UINT32_MAX && place[i] == place[run] + (i - run) * sb;
        if (run != UINT32_MAX && !joins) {
            if ((e = copy_pixels(ln, entry, data + place[run], run, i - run)) != cudaSuccess)
                return e;
            run = UINT32_MAX;
        }
        if (pixels && run == UINT32_MAX)
            run = i;
        if (i < host->count && enc[i])
            ln->imgs[n++] = (feeder__gpu_image){data + place[i], (size_t)enc[i], host->indices[i], i};
    }
    *nimg = n;
    return cudaSuccess;
}

/* nvJPEG's call for the n listed images. The hardware backend writes its
 * scratch when it is called, not in stream order (docs/RELIABILITY.md, the
 * scratch buffer): the host first waits until the resize that last read the
 * scratch buffer this call takes has run (the lane's read_ev of that
 * buffer: the lane's batch before last, its decoder having two), else a
 * stream held back (by a release on a busy user stream, by other work on
 * the GPU) resizes a later batch's images into an earlier one. 0,
 * FEEDER_ECUDA with *cuda set, or nvJPEG's error with derr set. */
static int nvjpeg_batch(dec_lane *ln, ring_entry *entry, feeder_batch *host, uint32_t n, uint32_t *nref,
                        cudaError_t *cuda, char *derr, size_t derrlen)
{
    feeder__gpu *gpu = ln->gpu;
    feeder__gpu_decoder *dec = lane_decoder(ln);
    uint64_t t0 = feeder__now_ns();
    cudaEvent_t read_ev = ln->read_ev[feeder__gpu_decoder_scratch(dec)];
    if ((*cuda = cudaEventSynchronize(read_ev)) != cudaSuccess)
        return FEEDER_ECUDA;
    feeder__trace_span_e(gpu->tr, ln->tr_submit, "wait: scratch's last resize", t0, feeder__now_ns(),
                         (int64_t)host->epoch, (int64_t)host->number, -1);
    FEEDER_NVTX_PUSH("nvJPEG batch");
    t0 = feeder__now_ns();
    atomic_store(&ln->call_batch, host->number); /* the decoder stamps call_t0 */
    atomic_store(&ln->call_epoch, host->epoch);
    int rc = feeder__gpu_decode(dec, gpu->cfg.transform, gpu->cfg.seed, host->epoch, ln->imgs, n,
                                entry->stage, gpu->l->sample_bytes, ln->stream, ln->refused, nref, derr,
                                derrlen);
    /* Whether nvJPEG's call returns at once or holds the thread for the
     * decode shows here. The hardware backend's call lasts until the engines
     * are done, so this time is the GPU side's busy time (HYBRID's balance). */
    uint64_t t1 = feeder__now_ns();
    atomic_fetch_add(&gpu->dec_busy_ns, t1 - t0);
    feeder__trace_span_e(gpu->tr, ln->tr_submit, "nvJPEG submit", t0, t1, (int64_t)host->epoch,
                         (int64_t)host->number, -1);
    FEEDER_NVTX_POP();
    if ((*cuda = cudaEventRecord(read_ev, ln->stream)) != cudaSuccess)
        return FEEDER_ECUDA;
    return rc;
}

/* The CPU decode of the images nvJPEG refused, from a scratch sample (a
 * pageable copy returns once it has read the scratch, so the next one may
 * reuse it). 0; a CUDA failure (*cuda set); or a sample's error with
 * *sample_err set. */
static int decode_refused(dec_lane *ln, ring_entry *entry, feeder_batch *host, uint32_t nref,
                          int *sample_err, cudaError_t *cuda, char *msg, size_t msglen)
{
    feeder__gpu *gpu = ln->gpu;
    for (uint32_t r = 0; r < nref; r++) {
        const feeder__gpu_image *im = &ln->imgs[ln->refused[r]];
        int rc = gpu->cfg.host.decode_cpu(gpu->cfg.host.ctx, (unsigned)ln->id, im->jpeg, im->len,
                                          host->epoch, im->index, ln->fb, msg, msglen);
        if (rc) {
            *sample_err = 1;
            /* Nothing of this batch may still read the slot when it goes
             * back: the rare path waits. */
            cudaStreamSynchronize(ln->stream);
            return rc;
        }
        if ((*cuda = copy_pixels(ln, entry, ln->fb, im->pos, 1)) != cudaSuccess)
            return FEEDER_ECUDA;
    }
    return 0;
}

/* nvJPEG's decode of the n listed images into the batch, and the CPU decode
 * of what it refuses. 0; a CUDA failure (*cuda set); or a sample's error
 * with *sample_err set. */
static int decode_images(dec_lane *ln, ring_entry *entry, feeder_batch *host, uint32_t n, uint32_t *nref,
                         int *sample_err, cudaError_t *cuda, char *msg, size_t msglen)
{
    feeder__gpu *gpu = ln->gpu;
    char derr[300] = "";
    int rc = 0;
    *nref = 0;
    if (lane_decoder(ln)) { /* lane 0: taken by the loader's thread before the batch was handed over */
        rc = nvjpeg_batch(ln, entry, host, n, nref, cuda, derr, sizeof(derr));
        if (rc == FEEDER_ECUDA && *cuda != cudaSuccess)
            return rc;
    } else {
        for (; *nref < n; (*nref)++) /* nvJPEG could not start: the CPU decodes them */
            ln->refused[*nref] = *nref;
    }
    if (rc) {
        feeder__fmt(msg, msglen, "decoding batch %llu of epoch %llu on device %d: %s",
                    (unsigned long long)host->number, (unsigned long long)host->epoch,
                    gpu->cfg.device, derr);
        return rc;
    }
    return decode_refused(ln, entry, host, *nref, sample_err, cuda, msg, msglen);
}

/* The batch's tail on the copy stream, after the lane's decode (a lane with
 * a stream of its own makes the copy stream wait for it). */
static cudaError_t lane_tail(dec_lane *ln, ring_entry *entry, feeder_batch *host, int decoded)
{
    feeder__gpu *gpu = ln->gpu;
    cudaError_t e = cudaSuccess;
    if (ln->stream != gpu->stream && (e = cudaEventRecord(ln->done_ev, ln->stream)) != cudaSuccess)
        return e;
    pthread_mutex_lock(&gpu->tail_lock);
    if (ln->stream != gpu->stream)
        e = cudaStreamWaitEvent(gpu->stream, ln->done_ev, 0);
    if (e == cudaSuccess)
        e = feeder__cuda_batch_end(gpu, entry, NULL, decoded, (int64_t)host->epoch, (int64_t)host->number);
    pthread_mutex_unlock(&gpu->tail_lock);
    return e;
}

/* The GPU decoders' work for one host batch: copy what the workers decoded,
 * decode the rest with nvJPEG, and decode on the CPU here what nvJPEG
 * refuses. 0; a CUDA failure (FEEDER_ECUDA, fatal for the layer); or a
 * sample's error with *sample_err set and `msg` naming the sample (the batch
 * fails, the layer goes on). */
int feeder__cuda_enqueue_decode(dec_lane *ln, ring_entry *entry, feeder_batch *host, int *sample_err,
                                char *msg, size_t msglen)
{
    feeder__gpu *gpu = ln->gpu;
    cudaError_t e = cudaSuccess;
    uint32_t n = 0, nref = 0;
    *sample_err = 0;
    entry->in_bytes = 0;
    entry->gpu_part = 0;
    entry->lane = ln->id;
    feeder__cuda_copies_begin(gpu);
    if ((e = feeder__cuda_batch_begin(entry, ln->stream)) == cudaSuccess &&
        (e = gather_samples(ln, entry, host, &n)) == cudaSuccess &&
        (e = cudaMemcpyAsync(entry->dev_labels, host->labels, host->count * sizeof(int64_t),
                             cudaMemcpyHostToDevice, ln->stream)) == cudaSuccess)
        e = cudaEventRecord(entry->dec_ev, ln->stream);
    feeder__cuda_copies_end(gpu);
    if (e != cudaSuccess)
        goto cuda_fail;
    int rc = decode_images(ln, entry, host, n, &nref, sample_err, &e, msg, msglen);
    if (rc == FEEDER_ECUDA && e != cudaSuccess)
        goto cuda_fail;
    if (rc)
        return rc;
    pthread_mutex_lock(&gpu->lock); /* flush_counters reads them in the loader's thread */
    gpu->gpu_decoded += n - nref;
    gpu->gpu_fallback += nref;
    pthread_mutex_unlock(&gpu->lock);
    entry->gpu_part = n > nref;
    if ((e = lane_tail(ln, entry, host, n > nref)) != cudaSuccess)
        goto cuda_fail;
    return 0;
cuda_fail:
    feeder__fmt(msg, msglen, "copying batch %llu of epoch %llu to device %d: %s",
                (unsigned long long)host->number, (unsigned long long)host->epoch, gpu->cfg.device,
                feeder__cuda_errtext(e));
    return FEEDER_ECUDA;
}

/* The next queued entry, or NULL once the layer stops. Under gpu->lock. */
static ring_entry *take_job(feeder__gpu *gpu)
{
    while (!gpu->stop && !gpu->jlen)
        pthread_cond_wait(&gpu->cv_work, &gpu->lock);
    if (gpu->stop)
        return NULL;
    ring_entry *entry = &gpu->ring[gpu->jobs[gpu->jhead]];
    gpu->jhead = (gpu->jhead + 1) % (gpu->depth + 1);
    gpu->jlen--;
    return entry;
}

/* Lanes after the first make their own decoder on their thread once lane
 * 0's is made (the start-up thread broadcasts cv_work): two nvJPEG start-ups
 * at once hold the driver longer while the first batches are copied. Then
 * they say they are settled (cv_done: without warm-up the loader's thread
 * waits for every lane). 0, or -1 when the lane is not to decode (the layer
 * stops, nvJPEG failed; ln->why says; the other lanes decode). */
static int lane_start(dec_lane *ln)
{
    feeder__gpu *gpu = ln->gpu;
    pthread_mutex_lock(&gpu->lock);
    while (!gpu->stop && atomic_load(&gpu->dec_state) == 0)
        pthread_cond_wait(&gpu->cv_work, &gpu->lock);
    int go = !gpu->stop && atomic_load(&gpu->dec_state) > 0;
    pthread_mutex_unlock(&gpu->lock);
    uint64_t t0 = feeder__now_ns();
    int rc = go ? feeder__gpu_decoder_create(&ln->dec, ln->why, sizeof(ln->why)) : -1;
    _Static_assert(FEEDER__DEC_LANES_MAX == 4, "one span name per decode thread");
    static const char *const made[FEEDER__DEC_LANES_MAX] = {
        "nvJPEG decoder made (decode thread 0)", "nvJPEG decoder made (decode thread 1)",
        "nvJPEG decoder made (decode thread 2)", "nvJPEG decoder made (decode thread 3)"};
    if (go) /* the trace keeps the name: a static one */
        feeder__trace_span(gpu->cfg.trace, gpu->tr_nvstart, made[ln->id], t0, feeder__now_ns(), -1, -1);
    if (rc == 0) {
        feeder__gpu_decoder_share_engines(ln->dec, &gpu->engine_lock);
        feeder__gpu_decoder_watch(ln->dec, &ln->call_t0);
        atomic_fetch_add(&gpu->lanes_live, 1);
    }
    pthread_mutex_lock(&gpu->lock);
    gpu->lanes_settled++;
    pthread_cond_broadcast(&gpu->cv_done);
    pthread_mutex_unlock(&gpu->lock);
    return rc ? -1 : 0;
}

static void *lane_run(dec_lane *ln)
{
    feeder__gpu *gpu = ln->gpu;
    cudaSetDevice(gpu->cfg.device); /* the runtime's current device is per thread */
    if (ln->id > 0 && lane_start(ln))
        return NULL; /* the other lanes take every batch */
    char msg[sizeof(((ring_entry *)0)->errmsg)];
    pthread_mutex_lock(&gpu->lock);
    ring_entry *entry;
    while ((entry = take_job(gpu))) {
        feeder_batch *host = entry->host;
        ln->dec0 = gpu->dec;
        pthread_mutex_unlock(&gpu->lock);
        int sample_err = 0;
        msg[0] = 0;
        int rc = feeder__cuda_enqueue_decode(ln, entry, host, &sample_err, msg, sizeof(msg));
        pthread_mutex_lock(&gpu->lock);
        entry->err = rc;
        entry->sample_err = sample_err;
        memcpy(entry->errmsg, msg, sizeof(msg));
        entry->pin = PIN_ENQUEUED;
        pthread_cond_broadcast(&gpu->cv_done);
        if (gpu->wake_fd >= 0) {
            uint64_t one = 1; /* a full counter (never: the loader's thread reads it) is still readable */
            (void)!write(gpu->wake_fd, &one, sizeof(one));
        }
    }
    pthread_mutex_unlock(&gpu->lock);
    return NULL;
}

void *feeder__cuda_decode_thread(void *arg)
{
    dec_lane *ln = arg;
    char name[16]; /* for ps, top -H and gdb; nvJPEG's own threads inherit it */
    feeder__fmt(name, sizeof(name), "feeder-dec%d", ln->id);
    pthread_setname_np(pthread_self(), name);
    lane_run(ln);
    atomic_store(&ln->exited, 1);
    return NULL;
}

/* ---- the watchdog ---- */

/* Has the lane been in one nvJPEG call for over limit_ns at `now`? */
static int call_over(const dec_lane *ln, uint64_t now, uint64_t limit_ns)
{
    uint64_t t0 = atomic_load(&ln->call_t0);
    return t0 && now > t0 && now - t0 > limit_ns;
}

int feeder__cuda_stuck_lane(const feeder__gpu *gpu, uint64_t now, uint64_t limit_ns)
{
    for (int k = 0; k < gpu->nlanes; k++)
        if (call_over(&gpu->lanes[k], now, limit_ns))
            return k;
    return -1;
}

uint64_t feeder__cuda_slice_ns(const feeder__gpu *gpu)
{
    return gpu->stuck_ns / 4 < 100000000u ? gpu->stuck_ns / 4 : 100000000u;
}

void feeder__cuda_wait_done_slice(feeder__gpu *gpu)
{
    uint64_t slice = feeder__cuda_slice_ns(gpu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* cv_done's clock */
    uint64_t ns = (uint64_t)ts.tv_nsec + slice;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&gpu->cv_done, &gpu->lock, &ts);
}

int feeder__cuda_lanes_join(feeder__gpu *gpu)
{
    uint64_t limit = gpu->stuck_ns > 10000000000ull ? gpu->stuck_ns : 10000000000ull;
    int left = 0;
    for (int k = 0; k < gpu->nthr; k++) {
        dec_lane *ln = &gpu->lanes[k];
        while (!atomic_load(&ln->exited) && !call_over(ln, feeder__now_ns(), limit)) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        if (atomic_load(&ln->exited)) {
            pthread_join(gpu->thr[k], NULL);
        } else { /* in nvJPEG for good: it keeps what it may touch */
            pthread_detach(gpu->thr[k]);
            left = 1;
        }
    }
    return left;
}
