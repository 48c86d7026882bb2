/*
 * Start as a sequence of named steps (stream, decoder, trace reference,
 * registrations, the ring, the pin threads), and destroy.
 */
#include <sys/eventfd.h>
#include <unistd.h>

#include "cuda/layer.h"

/* The watchdog's limit: FEEDER__NVJPEG_STUCK_MS, or FEEDER_NVJPEG_STUCK_MS
 * (1 .. 3,600,000 ms; tests make it short to see the path a real hang
 * takes: the wait ends, the call still returns). */
static uint64_t stuck_ms(void)
{
    const char *v = getenv("FEEDER_NVJPEG_STUCK_MS");
    char *end;
    unsigned long long ms = v ? strtoull(v, &end, 10) : 0;
    return v && *v && !*end && ms >= 1 && ms <= 3600000 ? ms : FEEDER__NVJPEG_STUCK_MS;
}

static feeder__gpu *layer_new(const feeder__gpu_config *cfg)
{
    feeder__gpu *gpu = calloc(1, sizeof(*gpu));
    if (!gpu)
        return NULL;
    gpu->cfg = *cfg;
    gpu->l = cfg->layout;
    gpu->depth = cfg->depth;
    gpu->pin_mode = cfg->pin_mode;
    gpu->wake_fd = -1;
    pthread_mutex_init(&gpu->lock, NULL);
    pthread_mutex_init(&gpu->tail_lock, NULL);
    pthread_mutex_init(&gpu->engine_lock, NULL);
    gpu->stuck_ns = stuck_ms() * 1000000ull;
    pthread_cond_init(&gpu->cv_work, NULL);
    pthread_cond_init(&gpu->cv_done, NULL);
    static const size_t esize[] = {1, 2, 2, 4};
    gpu->in_bytes = (size_t)gpu->l->batch * gpu->l->sample_bytes;
    gpu->out_sample_bytes = gpu->l->sample_bytes * esize[cfg->dtype];
    gpu->out_bytes = (size_t)gpu->l->batch * gpu->out_sample_bytes;
    if (cfg->fields) {
        /* The fields live anywhere in the slot: its device copy is as large. */
        gpu->in_bytes = gpu->out_bytes = gpu->l->slot_bytes;
        gpu->out_sample_bytes = 0;
    }
    return gpu;
}

/* Fields datasets are copied from the slots themselves (per field, only
 * the bytes each batch uses): registered slots, or pageable ones. */
static void fields_pin_mode(feeder__gpu *gpu)
{
    if (!gpu->cfg.fields || gpu->pin_mode != FEEDER_PIN_COPY)
        return;
    gpu->pin_mode = FEEDER_PIN_REGISTER;
    feeder__fmt(gpu->pin_note, sizeof(gpu->pin_note),
                " (pin copy asked for: a fields batch is copied field by field from its slot)");
}

static int start_stream(feeder__gpu *gpu, char *why, size_t whylen)
{
    if (gpu->cfg.copy_stream) {
        gpu->stream = (cudaStream_t)gpu->cfg.copy_stream;
        return 0;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&gpu->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return feeder__cuda_setup_fail(gpu, why, whylen, "cudaStreamCreateWithFlags", e);
    gpu->own_stream = 1;
    return 0;
}

/* nvJPEG's handles take a large part of a second to make
 * (docs/ARCHITECTURE.md): they are made on this thread while the workers
 * decode the first batches on the CPU (a share of 1000, with warm-up), and
 * the share drops when the decoder is ready. The other decode lanes make
 * theirs on their own threads after it. */
static void *make_decoder(void *arg)
{
    feeder__gpu *gpu = arg;
    /* for ps, top -H and gdb; nvJPEG's own threads inherit it */
    pthread_setname_np(pthread_self(), "feeder-nvmake");
    uint64_t t0 = feeder__now_ns();
    int rc = cudaSetDevice(gpu->cfg.device) == cudaSuccess
                 ? feeder__gpu_decoder_create(&gpu->dec_made, gpu->dec_err, sizeof(gpu->dec_err))
                 : FEEDER_EUNSUPPORTED;
    feeder__trace_span(gpu->cfg.trace, gpu->tr_nvstart, "nvJPEG decoder made (decode thread 0)", t0,
                       feeder__now_ns(), -1, -1);
    pthread_mutex_lock(&gpu->lock); /* the other lanes wait for it (cv_work) */
    atomic_store(&gpu->dec_state, rc == 0 ? 1 : -1);
    pthread_cond_broadcast(&gpu->cv_work);
    pthread_mutex_unlock(&gpu->lock);
    return NULL;
}

/* What decode lane k uses alone: its image lists, fallback sample, events
 * and, with more than one lane, its own stream. */
static int start_lane(feeder__gpu *gpu, int k, char *why, size_t whylen)
{
    dec_lane *ln = &gpu->lanes[k];
    ln->gpu = gpu;
    ln->id = k;
    ln->imgs = calloc(gpu->l->batch, sizeof(*ln->imgs));
    ln->refused = calloc(gpu->l->batch, sizeof(*ln->refused));
    ln->fb = malloc(gpu->l->sample_bytes);
    if (!ln->imgs || !ln->refused || !ln->fb) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    /* Its wait may last a user's training step: the thread sleeps, not spins. */
    cudaError_t e = cudaSuccess;
    for (unsigned j = 0; j < FEEDER__GPU_SCRATCH && e == cudaSuccess; j++)
        e = cudaEventCreateWithFlags(&ln->read_ev[j], cudaEventDisableTiming | cudaEventBlockingSync);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&ln->done_ev, cudaEventDisableTiming);
    ln->stream = gpu->stream;
    if (e == cudaSuccess && gpu->nlanes > 1)
        e = cudaStreamCreateWithFlags(&ln->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        ln->stream = gpu->stream;
        return feeder__cuda_setup_fail(gpu, why, whylen, "a GPU decode thread's events and stream", e);
    }
    return 0;
}

static void free_lane(dec_lane *ln)
{
    feeder__gpu_decoder_destroy(ln->dec);
    for (unsigned j = 0; j < FEEDER__GPU_SCRATCH; j++)
        if (ln->read_ev[j])
            cudaEventDestroy(ln->read_ev[j]);
    if (ln->done_ev)
        cudaEventDestroy(ln->done_ev);
    if (ln->stream && ln->gpu && ln->stream != ln->gpu->stream)
        cudaStreamDestroy(ln->stream);
    free(ln->imgs);
    free(ln->refused);
    free(ln->fb);
}

/* The GPU decoders' lanes (FEEDER_OPT_GPU_DECODE_THREADS; each holds a
 * batch of its own, so the ring gets a buffer more per lane after the
 * first) and the thread that makes lane 0's decoder. */
static int start_decoder(feeder__gpu *gpu, char *why, size_t whylen)
{
    if (!feeder__decoder_on_gpu(gpu->cfg.decoder))
        return 0;
    if (!feeder__gpu_decoder_built()) {
        feeder__fmt(gpu->dec_why, sizeof(gpu->dec_why), "built without nvJPEG");
        return 0;
    }
    gpu->decodes = 1;
    int n = gpu->cfg.decode_threads;
    gpu->nlanes = n <= 0 ? FEEDER__DEC_LANES_AUTO : n > FEEDER__DEC_LANES_MAX ? FEEDER__DEC_LANES_MAX : n;
    gpu->depth += gpu->nlanes - 1;
    for (int k = 0; k < gpu->nlanes; k++) {
        int rc = start_lane(gpu, k, why, whylen);
        if (rc)
            return rc;
    }
    /* nvJPEG reads the bitstreams from the slots: registered slots (or
     * pageable ones) serve it; pinned copies of whole slots would copy mostly
     * empty space. */
    if (gpu->pin_mode == FEEDER_PIN_COPY) {
        gpu->pin_mode = FEEDER_PIN_REGISTER;
        feeder__fmt(gpu->pin_note, sizeof(gpu->pin_note),
                    " (pin copy asked for: the GPU decoder reads the slots)");
    }
    feeder__cuda_set_cpu_share(gpu, gpu->cfg.warmup ? 1000 : gpu->cfg.cpu_share);
    gpu->tr_nvstart = feeder__trace_track(gpu->cfg.trace, "nvJPEG start-up (its threads)");
    /* (without warm-up the first decode waits for the decoder) */
    int err = pthread_create(&gpu->dec_thread, NULL, make_decoder, gpu);
    if (err) {
        feeder__fmt(why, whylen, "starting the nvJPEG start-up thread: %s", strerror(err));
        return -err;
    }
    gpu->dec_thread_live = 1;
    return 0;
}

/* The reference for mapping GPU times to the host clock: an event waited for
 * once, here, with the host time read right after. */
static int start_trace_ref(feeder__gpu *gpu, char *why, size_t whylen)
{
    if (!(gpu->tr = gpu->cfg.trace))
        return 0;
    gpu->tr_copy = feeder__trace_track(gpu->tr, "copy stream (GPU)");
    for (int k = 0; gpu->decodes && k < gpu->nlanes; k++) {
        char dec[64] = "gpu decode (GPU)", sub[64] = "nvJPEG calls (decode thread)";
        if (gpu->nlanes > 1) {
            feeder__fmt(dec, sizeof(dec), "gpu decode (GPU, decode thread %d)", k);
            feeder__fmt(sub, sizeof(sub), "nvJPEG calls (decode thread %d)", k);
        }
        gpu->lanes[k].tr_dec = feeder__trace_track(gpu->tr, dec);
        gpu->lanes[k].tr_submit = feeder__trace_track(gpu->tr, sub);
    }
    cudaError_t e;
    if ((e = cudaEventCreate(&gpu->tr_ref)) != cudaSuccess ||
        (e = cudaEventRecord(gpu->tr_ref, gpu->stream)) != cudaSuccess ||
        (e = cudaEventSynchronize(gpu->tr_ref)) != cudaSuccess)
        return feeder__cuda_setup_fail(gpu, why, whylen, "the trace's reference event", e);
    gpu->tr_ref_ns = feeder__now_ns();
    return 0;
}

/* How shuffled batches of a registered pack reach the device: the gather
 * kernel unless FEEDER_PACKED_GATHER names another way ("batch":
 * cudaMemcpyBatchAsync, "copies": one cudaMemcpyAsync per record), kept so
 * the benchmarks can set them side by side (docs/ARCHITECTURE.md). */
static int gather_mode(void)
{
    const char *v = getenv("FEEDER_PACKED_GATHER");
    if (v && !strcmp(v, "batch"))
        return FEEDER__GATHER_BATCH;
    if (v && !strcmp(v, "copies"))
        return FEEDER__GATHER_COPIES;
    return FEEDER__GATHER_KERNEL;
}

static int pack_aligned16(const struct feeder__pack *pk)
{
    if ((uintptr_t)pk->map % 16 || pk->v.h.record_bytes % 16)
        return 0;
    for (uint64_t i = 0; i < pk->v.h.count; i++)
        if (pk->off[i] % 16)
            return 0;
    return 1;
}

/* A RAW packed file read through the mapping: the batches' records go from
 * the file's pages (registered read-only and mapped) to the device, in any
 * order, so no worker copies them into a slot first (with VERIFY_CRC the
 * workers only check them where they lie). */
static void register_pack(feeder__gpu *gpu)
{
    const struct feeder__pack *pk = gpu->cfg.pack;
    if (!pk || pk->v.h.kind != FEEDER_RECORD_RAW || !gpu->cfg.packed_mmap ||
        pk->v.h.record_bytes != gpu->l->sample_bytes)
        return;
    /* Registering pins every page of the file in memory for the loader's
     * life (the page cache can no longer drop them). A file larger than a
     * quarter of this machine's memory stays on the slot path, which reads
     * it as any file is read. */
    uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (pk->map_len > mem / 4) {
        feeder__fmt(gpu->pack_note, sizeof(gpu->pack_note),
                    ", records through the slots (the packed file, %zu bytes, is over a quarter "
                    "of this machine's %llu bytes of memory: too much to pin)",
                    pk->map_len, (unsigned long long)mem);
        return;
    }
    size_t nb = gpu->l->batch;
    gpu->run_dst = malloc(nb * sizeof(*gpu->run_dst));
    gpu->run_src = malloc(nb * sizeof(*gpu->run_src));
    gpu->run_len = malloc(nb * sizeof(*gpu->run_len));
    if (!gpu->run_dst || !gpu->run_src || !gpu->run_len)
        return; /* the slot path needs none of them */
    void *dev = NULL;
    cudaError_t e = cudaHostRegister(pk->map, pk->map_len,
                                     cudaHostRegisterPortable | cudaHostRegisterReadOnly |
                                         cudaHostRegisterMapped);
    if (e == cudaSuccess && (e = cudaHostGetDevicePointer(&dev, pk->map, 0)) != cudaSuccess)
        cudaHostUnregister(pk->map);
    if (e != cudaSuccess) {
        cudaGetLastError();
        feeder__fmt(gpu->pack_note, sizeof(gpu->pack_note),
                    ", records through the slots (cudaHostRegister of the packed file failed: %s)",
                    feeder__cuda_errtext(e));
        return;
    }
    gpu->pack = pk;
    gpu->pack_dev = dev;
    gpu->pack_aligned16 = pack_aligned16(pk);
    gpu->gather_mode = gather_mode();
    gpu->pack_registered = 1;
    gpu->pinned_bytes += pk->map_len;
    if (gpu->pin_mode == FEEDER_PIN_COPY)
        gpu->pin_mode = FEEDER_PIN_REGISTER; /* the slots hold only labels */
}

/* PIN_COPY: entry i's pinned buffer, which the pin threads copy a slot into. */
static int alloc_pinned(feeder__gpu *gpu, int i, char *why, size_t whylen)
{
    size_t bytes = gpu->in_bytes + (size_t)gpu->l->batch * sizeof(int64_t);
    cudaError_t e;
    if ((gpu->ring[i].pinned = feeder__cuda_pin_alloc(gpu, bytes, &e)))
        return 0;
    char what[160];
    feeder__fmt(what, sizeof(what), "allocating %zu bytes of pinned memory for buffer %d", bytes, i);
    return feeder__cuda_setup_fail(gpu, why, whylen, what, e);
}

/* Device (and PIN_COPY pinned) buffers and events of ring entry i. */
static int alloc_entry(feeder__gpu *gpu, int i, char *why, size_t whylen)
{
    ring_entry *entry = &gpu->ring[i];
    entry->magic = ENTRY_MAGIC;
    entry->gpu = gpu;
    char what[160];
    cudaError_t e;
    int rc;
    size_t labels = (size_t)gpu->l->batch * sizeof(int64_t);
    if (!(entry->stage = feeder__cuda_dev_alloc(gpu, gpu->in_bytes ? gpu->in_bytes : 1, &e))) {
        feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                    gpu->in_bytes, i);
        return feeder__cuda_setup_fail(gpu, why, whylen, what, e);
    }
    if (gpu->cfg.dtype == FEEDER_DTYPE_UINT8) {
        entry->dev = entry->stage;
    } else if (!(entry->dev = feeder__cuda_dev_alloc(gpu, gpu->out_bytes, &e))) {
        feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                    gpu->out_bytes, i);
        return feeder__cuda_setup_fail(gpu, why, whylen, what, e);
    }
    if (!(entry->dev_labels = feeder__cuda_dev_alloc(gpu, labels, &e)))
        return feeder__cuda_setup_fail(gpu, why, whylen, "allocating device labels", e);
    if (gpu->cfg.fields && !(entry->meta = malloc(gpu->l->slot_bytes))) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if (gpu->pin_mode == FEEDER_PIN_COPY && (rc = alloc_pinned(gpu, i, why, whylen)))
        return rc;
    size_t offs = (size_t)gpu->l->batch * sizeof(uint64_t);
    if (gpu->pack_registered && gpu->gather_mode == FEEDER__GATHER_KERNEL &&
        (!(entry->gather_host = feeder__cuda_pin_alloc(gpu, offs, &e)) ||
         !(entry->gather_dev = feeder__cuda_dev_alloc(gpu, offs, &e))))
        return feeder__cuda_setup_fail(gpu, why, whylen, "allocating the gather offsets", e);
    entry->labels = malloc(labels);
    entry->indices = malloc((size_t)gpu->l->batch * sizeof(uint64_t));
    if (!entry->labels || !entry->indices) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if ((e = cudaEventCreate(&entry->start_ev)) != cudaSuccess ||
        (e = cudaEventCreate(&entry->h2d_ev)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&entry->copy_ev, gpu->tr ? cudaEventDefault
                                                          : cudaEventDisableTiming)) !=
            cudaSuccess ||
        (e = cudaEventCreateWithFlags(&entry->release_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreate(&entry->dec_ev)) != cudaSuccess)
        return feeder__cuda_setup_fail(gpu, why, whylen, "cudaEventCreate", e);
    return 0;
}

static int alloc_ring(feeder__gpu *gpu, char *why, size_t whylen)
{
    gpu->ring = calloc((size_t)gpu->depth, sizeof(*gpu->ring));
    gpu->fifo = calloc((size_t)gpu->depth + 1, sizeof(*gpu->fifo));
    gpu->jobs = calloc((size_t)gpu->depth + 1, sizeof(*gpu->jobs));
    if (!gpu->ring || !gpu->fifo || !gpu->jobs) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    for (int i = 0; i < gpu->depth && !rc; i++)
        rc = alloc_entry(gpu, i, why, whylen);
    return rc;
}

static int start_pin_threads(feeder__gpu *gpu, char *why, size_t whylen)
{
    gpu->decode_thread = gpu->decodes && !gpu->pack_registered && gpu->pin_mode != FEEDER_PIN_COPY;
    if (gpu->pin_mode != FEEDER_PIN_COPY && !gpu->decode_thread)
        return 0;
    gpu->nthr = gpu->decode_thread ? gpu->nlanes : gpu->cfg.pin_threads;
    /* Without it the loader's thread waits for the lanes as before, serving
     * no one meanwhile (ring.c, wait_decoded): slower, not wrong. */
    if (gpu->decode_thread)
        gpu->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    gpu->thr = calloc((size_t)gpu->nthr, sizeof(*gpu->thr));
    if (!gpu->thr) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < gpu->nthr; i++) {
        int err = gpu->decode_thread
                      ? pthread_create(&gpu->thr[i], NULL, feeder__cuda_decode_thread, &gpu->lanes[i])
                      : pthread_create(&gpu->thr[i], NULL, feeder__cuda_pin_thread, gpu);
        if (err) {
            gpu->nthr = i;
            feeder__fmt(why, whylen, "starting %s thread %d: %s",
                        gpu->decode_thread ? "decode" : "pin", i, strerror(err));
            return -err;
        }
    }
    return 0;
}

/* How the layer runs, for feeder_loader_gpu_status. */
static void describe_layer(feeder__gpu *gpu)
{
    static const char *pins[] = {"none (pageable copies)", "copy", "register"};
    static const char *dtypes[] = {"uint8", "float16", "bfloat16", "float32"};
    const feeder__gpu_config *cfg = &gpu->cfg;
    char thr[32] = "", dec[96] = "";
    if (gpu->pin_mode == FEEDER_PIN_COPY)
        feeder__fmt(thr, sizeof(thr), " (%d thread%s)", gpu->nthr, gpu->nthr == 1 ? "" : "s");
    if (gpu->decodes)
        feeder__fmt(dec, sizeof(dec), ", decoder nvJPEG (%d decode thread%s, made while the workers "
                    "decode the first batches)", gpu->nlanes, gpu->nlanes == 1 ? "" : "s");
    int nchw = cfg->dtype == FEEDER_DTYPE_UINT8 ? gpu->l->layout == FEEDER_LAYOUT_NCHW
                                                : cfg->out_layout == FEEDER_LAYOUT_NCHW;
    feeder__fmt(gpu->describe, sizeof(gpu->describe),
                "device %d, pin %s%s, %d device buffers of %zu bytes, %s %s%s%s%s%s",
                cfg->device, pins[gpu->pin_mode], thr, gpu->depth, gpu->out_bytes, dtypes[cfg->dtype],
                nchw ? "NCHW" : "NHWC", gpu->reg_note, gpu->pin_note, dec,
                gpu->pack_registered ? (gpu->gather_mode == FEEDER__GATHER_KERNEL
                                          ? ", records straight from the registered packed file "
                                            "(shuffled: gather kernel)"
                                          : gpu->gather_mode == FEEDER__GATHER_BATCH
                                          ? ", records straight from the registered packed file "
                                            "(shuffled: cudaMemcpyBatchAsync)"
                                          : ", records straight from the registered packed file "
                                            "(shuffled: a copy per record)")
                                   : gpu->pack_note);
    if (gpu->aug_on) { /* FEEDER_OPT_AUGMENT_ON_DEVICE */
        size_t n = strlen(gpu->describe);
        feeder__fmt(gpu->describe + n, sizeof(gpu->describe) - n,
                    ", augment on the device (%u of the plan's steps%s)",
                    gpu->aug.nsteps - gpu->aug_first,
                    feeder__augment_has_mix(&gpu->aug) ? " and its mixes" : "");
    }
}

/* Close start-up step k, begun at *t, as a span of the trace. Returns 0. */
static int lap(feeder__gpu *gpu, int k, uint64_t *t)
{
    static const char *const step[] = {"stream",           "decoder (its thread started)",
                                       "packed file registered", "device ring",
                                       "pin or decode threads", "first slot registered",
                                       "pin copy set up (registration failed)"};
    uint64_t now = feeder__now_ns();
    feeder__trace_span(gpu->cfg.trace, gpu->tr_start, step[k], *t, now, -1, -1);
    *t = now;
    return 0;
}

int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen)
{
    int rc = feeder__gpu_probe(cfg->device, why, whylen);
    if (rc)
        return rc;
    feeder__gpu *gpu = layer_new(cfg);
    if (!gpu) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    devguard dg;
    cudaError_t e = feeder__cuda_enter(gpu, &dg);
    if (e != cudaSuccess) {
        rc = feeder__cuda_setup_fail(gpu, why, whylen, "cudaSetDevice", e);
        feeder__gpu_destroy(gpu);
        return rc;
    }
    gpu->tr_start = feeder__trace_track(gpu->cfg.trace, "GPU layer start-up (loader thread)");
    uint64_t t = feeder__now_ns();
    if ((rc = start_stream(gpu, why, whylen)) || (rc = lap(gpu, 0, &t)) ||
        (rc = start_decoder(gpu, why, whylen)) || (rc = start_trace_ref(gpu, why, whylen)) ||
        (rc = lap(gpu, 1, &t)))
        goto fail;
    register_pack(gpu);
    lap(gpu, 2, &t);
    fields_pin_mode(gpu);
    if ((rc = alloc_ring(gpu, why, whylen)) || (rc = feeder__cuda_augment_start(gpu, why, whylen)) ||
        (rc = lap(gpu, 3, &t)))
        goto fail;
    if ((rc = start_pin_threads(gpu, why, whylen)) || (rc = lap(gpu, 4, &t)))
        goto fail;
    describe_layer(gpu);
    gpu->st.pinned_bytes = gpu->pinned_bytes;
    gpu->st.device_bytes = gpu->device_bytes;
    feeder__cuda_leave(&dg);
    *out = gpu;
    return 0;
fail:
    feeder__cuda_leave(&dg);
    feeder__gpu_destroy(gpu);
    return rc;
}

/* The first slot's registration failed without a GPU decoder: the layer
 * copies through pinned buffers, which start did not make (it expected
 * registered slots); pageable copies if they cannot be had either. */
static void pin_copy_late(feeder__gpu *gpu)
{
    char why[256];
    int rc = 0;
    for (int i = 0; i < gpu->depth && !rc; i++)
        rc = alloc_pinned(gpu, i, why, sizeof(why));
    if (!rc)
        rc = start_pin_threads(gpu, why, sizeof(why));
    if (rc) {
        size_t n = strlen(gpu->pin_note);
        feeder__fmt(gpu->pin_note + n, sizeof(gpu->pin_note) - n, "; no pin copy either (%s)", why);
        gpu->pin_mode = FEEDER_PIN_NONE;
    }
}

void feeder__gpu_finish_start(feeder__gpu *gpu)
{
    devguard dg;
    if (feeder__cuda_enter(gpu, &dg) != cudaSuccess)
        return; /* the slots stay pageable: the same bytes, slower copies */
    uint64_t t = feeder__now_ns();
    if (gpu->pin_mode == FEEDER_PIN_REGISTER) {
        feeder__cuda_register_first(gpu);
        lap(gpu, 5, &t);
        if (gpu->pin_mode == FEEDER_PIN_COPY) { /* it failed, with no GPU decoder */
            pin_copy_late(gpu);
            lap(gpu, 6, &t);
        }
    }
    feeder__cuda_register_rest(gpu);
    describe_layer(gpu);
    gpu->st.pinned_bytes = gpu->pinned_bytes;
    feeder__cuda_leave(&dg);
}

void feeder__gpu_destroy(feeder__gpu *gpu)
{
    if (!gpu)
        return;
    devguard dg;
    int entered = feeder__cuda_enter(gpu, &dg) == cudaSuccess;
    if (gpu->thr) {
        pthread_mutex_lock(&gpu->lock);
        gpu->stop = 1;
        pthread_cond_broadcast(&gpu->cv_work);
        pthread_cond_broadcast(&gpu->cv_done);
        pthread_mutex_unlock(&gpu->lock);
        if (gpu->decode_thread && feeder__cuda_lanes_join(gpu)) {
            /* A thread stays in nvJPEG for good: everything of the layer
             * it may touch stays too (docs/RELIABILITY.md). */
            if (entered)
                feeder__cuda_leave(&dg);
            return;
        }
        for (int i = 0; !gpu->decode_thread && i < gpu->nthr; i++)
            pthread_join(gpu->thr[i], NULL);
        free(gpu->thr);
    }
    if (entered && gpu->stream)
        cudaStreamSynchronize(gpu->stream);
    for (int k = 0; entered && k < gpu->nlanes; k++)
        if (gpu->lanes[k].stream)
            cudaStreamSynchronize(gpu->lanes[k].stream);
    for (int i = 0; entered && gpu->tr && gpu->ring && i < gpu->depth; i++)
        if (gpu->ring[i].start_ev)
            feeder__cuda_trace_copies(gpu, &gpu->ring[i], gpu->ring[i].timed);
    if (gpu->tr_ref)
        cudaEventDestroy(gpu->tr_ref);
    for (int i = 0; gpu->ring && i < gpu->depth; i++) {
        ring_entry *entry = &gpu->ring[i];
        if (entry->dev != entry->stage)
            feeder__cuda_dev_free(gpu, entry->dev);
        feeder__cuda_dev_free(gpu, entry->stage);
        feeder__cuda_dev_free(gpu, entry->dev_labels);
        feeder__cuda_pin_free(gpu, entry->pinned);
        feeder__cuda_pin_free(gpu, entry->gather_host);
        free(entry->meta);
        feeder__cuda_dev_free(gpu, entry->gather_dev);
        free(entry->labels);
        free(entry->indices);
        if (entry->start_ev)
            cudaEventDestroy(entry->start_ev);
        if (entry->h2d_ev)
            cudaEventDestroy(entry->h2d_ev);
        if (entry->copy_ev)
            cudaEventDestroy(entry->copy_ev);
        if (entry->release_ev)
            cudaEventDestroy(entry->release_ev);
        if (entry->dec_ev)
            cudaEventDestroy(entry->dec_ev);
    }
    feeder__cuda_augment_free(gpu);
    if (gpu->pack_registered)
        cudaHostUnregister(gpu->pack->map);
    if (gpu->dec_thread_live) {
        pthread_join(gpu->dec_thread, NULL);
        if (!gpu->dec)
            gpu->dec = gpu->dec_made;
    }
    feeder__gpu_decoder_destroy(gpu->dec);
    for (int k = 0; k < gpu->nlanes; k++)
        free_lane(&gpu->lanes[k]);
    feeder__cuda_unregister_slots(gpu);
    if (gpu->own_stream)
        cudaStreamDestroy(gpu->stream);
    if (entered)
        feeder__cuda_leave(&dg);
    free(gpu->run_dst);
    free(gpu->run_src);
    free(gpu->run_len);
    free(gpu->ring);
    free(gpu->fifo);
    free(gpu->jobs);
    if (gpu->wake_fd >= 0)
        close(gpu->wake_fd);
    pthread_cond_destroy(&gpu->cv_work);
    pthread_cond_destroy(&gpu->cv_done);
    pthread_mutex_destroy(&gpu->lock);
    pthread_mutex_destroy(&gpu->tail_lock);
    pthread_mutex_destroy(&gpu->engine_lock);
    free(gpu);
}
