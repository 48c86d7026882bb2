/*
 * Start as a sequence of named steps (stream, decoder, trace reference,
 * registrations, the ring, the pin threads), and destroy.
 */
#include <unistd.h>

#include "cuda/layer.h"

static feeder__gpu *layer_new(const feeder__gpu_config *cfg)
{
    feeder__gpu *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
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
    static const size_t esize[] = {1, 2, 2, 4};
    g->in_bytes = (size_t)g->l->batch * g->l->sample_bytes;
    g->out_sample_bytes = g->l->sample_bytes * esize[cfg->dtype];
    g->out_bytes = (size_t)g->l->batch * g->out_sample_bytes;
    if (cfg->fields) {
        /* The fields live anywhere in the slot: its device copy is as large. */
        g->in_bytes = g->out_bytes = g->l->slot_bytes;
        g->out_sample_bytes = 0;
    }
    return g;
}

/* Fields datasets are copied from the slots themselves (per field, only
 * the bytes each batch uses): registered slots, or pageable ones. */
static void fields_pin_mode(feeder__gpu *g)
{
    if (!g->cfg.fields || g->pin_mode != FEEDER_PIN_COPY)
        return;
    g->pin_mode = FEEDER_PIN_REGISTER;
    feeder__fmt(g->pin_note, sizeof(g->pin_note),
                " (pin copy asked for: a fields batch is copied field by field from its slot)");
}

static int start_stream(feeder__gpu *g, char *why, size_t whylen)
{
    if (g->cfg.copy_stream) {
        g->stream = (cudaStream_t)g->cfg.copy_stream;
        return 0;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return feeder__cuda_setup_fail(g, why, whylen, "cudaStreamCreateWithFlags", e);
    g->own_stream = 1;
    return 0;
}

/* nvJPEG's handles take a large part of a second to make
 * (docs/ARCHITECTURE.md): they are made on this thread while the workers
 * decode the first batches on the CPU (a share of 1000, with warm-up), and
 * the share drops when the decoder is ready. */
static void *make_decoder(void *arg)
{
    feeder__gpu *g = arg;
    int rc = cudaSetDevice(g->cfg.device) == cudaSuccess
                 ? feeder__gpu_decoder_create(&g->dec_made, g->dec_err, sizeof(g->dec_err))
                 : FEEDER_EUNSUPPORTED;
    atomic_store(&g->dec_state, rc == 0 ? 1 : -1);
    return NULL;
}

static int start_decoder(feeder__gpu *g, char *why, size_t whylen)
{
    if (!feeder__decoder_on_gpu(g->cfg.decoder))
        return 0;
    if (!feeder__gpu_decoder_built()) {
        feeder__fmt(g->dec_why, sizeof(g->dec_why), "built without nvJPEG");
        return 0;
    }
    g->decodes = 1;
    g->imgs = calloc(g->l->batch, sizeof(*g->imgs));
    g->refused = calloc(g->l->batch, sizeof(*g->refused));
    g->fb = malloc(g->l->sample_bytes);
    if (!g->imgs || !g->refused || !g->fb) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    /* nvJPEG reads the bitstreams from the slots: registered slots (or
     * pageable ones) serve it; pinned copies of whole slots would copy mostly
     * empty space. */
    if (g->pin_mode == FEEDER_PIN_COPY) {
        g->pin_mode = FEEDER_PIN_REGISTER;
        feeder__fmt(g->pin_note, sizeof(g->pin_note),
                    " (pin copy asked for: the GPU decoder reads the slots)");
    }
    feeder__cuda_set_cpu_share(g, g->cfg.warmup ? 1000 : g->cfg.cpu_share);
    /* (without warm-up the first decode waits for the decoder) */
    int err = pthread_create(&g->dec_thread, NULL, make_decoder, g);
    if (err) {
        feeder__fmt(why, whylen, "starting the nvJPEG start-up thread: %s", strerror(err));
        return -err;
    }
    g->dec_thread_live = 1;
    return 0;
}

/* The reference for mapping GPU times to the host clock: an event waited for
 * once, here, with the host time read right after. */
static int start_trace_ref(feeder__gpu *g, char *why, size_t whylen)
{
    if (!(g->tr = g->cfg.trace))
        return 0;
    g->tr_copy = feeder__trace_track(g->tr, "copy stream (GPU)");
    if (g->decodes) {
        g->tr_dec = feeder__trace_track(g->tr, "gpu decode (GPU)");
        g->tr_submit = feeder__trace_track(g->tr, "nvJPEG calls (loader thread)");
    }
    cudaError_t e;
    if ((e = cudaEventCreate(&g->tr_ref)) != cudaSuccess ||
        (e = cudaEventRecord(g->tr_ref, g->stream)) != cudaSuccess ||
        (e = cudaEventSynchronize(g->tr_ref)) != cudaSuccess)
        return feeder__cuda_setup_fail(g, why, whylen, "the trace's reference event", e);
    g->tr_ref_ns = feeder__now_ns();
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
static void register_pack(feeder__gpu *g)
{
    const struct feeder__pack *pk = g->cfg.pack;
    if (!pk || pk->v.h.kind != FEEDER_RECORD_RAW || !g->cfg.packed_mmap ||
        pk->v.h.record_bytes != g->l->sample_bytes)
        return;
    /* Registering pins every page of the file in memory for the loader's
     * life (the page cache can no longer drop them). A file larger than a
     * quarter of this machine's memory stays on the slot path, which reads
     * it as any file is read. */
    uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (pk->map_len > mem / 4) {
        feeder__fmt(g->pack_note, sizeof(g->pack_note),
                    ", records through the slots (the packed file, %zu bytes, is over a quarter "
                    "of this machine's %llu bytes of memory: too much to pin)",
                    pk->map_len, (unsigned long long)mem);
        return;
    }
    size_t nb = g->l->batch;
    g->run_dst = malloc(nb * sizeof(*g->run_dst));
    g->run_src = malloc(nb * sizeof(*g->run_src));
    g->run_len = malloc(nb * sizeof(*g->run_len));
    if (!g->run_dst || !g->run_src || !g->run_len)
        return; /* the slot path needs none of them */
    void *dev = NULL;
    cudaError_t e = cudaHostRegister(pk->map, pk->map_len,
                                     cudaHostRegisterPortable | cudaHostRegisterReadOnly |
                                         cudaHostRegisterMapped);
    if (e == cudaSuccess && (e = cudaHostGetDevicePointer(&dev, pk->map, 0)) != cudaSuccess)
        cudaHostUnregister(pk->map);
    if (e != cudaSuccess) {
        cudaGetLastError();
        feeder__fmt(g->pack_note, sizeof(g->pack_note),
                    ", records through the slots (cudaHostRegister of the packed file failed: %s)",
                    feeder__cuda_errtext(e));
        return;
    }
    g->pack = pk;
    g->pack_dev = dev;
    g->pack_aligned16 = pack_aligned16(pk);
    g->gather_mode = gather_mode();
    g->pack_registered = 1;
    g->pinned_bytes += pk->map_len;
    if (g->pin_mode == FEEDER_PIN_COPY)
        g->pin_mode = FEEDER_PIN_REGISTER; /* the slots hold only labels */
}

/* PIN_REGISTER: the whole slot mapping, so every slot's labels and data are
 * DMA-able; workers keep writing through their own mappings. */
/* Device (and PIN_COPY pinned) buffers and events of ring entry i. */
static int alloc_entry(feeder__gpu *g, int i, char *why, size_t whylen)
{
    entry *en = &g->e[i];
    en->magic = ENTRY_MAGIC;
    en->g = g;
    char what[160];
    cudaError_t e;
    size_t labels = (size_t)g->l->batch * sizeof(int64_t);
    if (!(en->stage = feeder__cuda_dev_alloc(g, g->in_bytes ? g->in_bytes : 1, &e))) {
        feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                    g->in_bytes, i);
        return feeder__cuda_setup_fail(g, why, whylen, what, e);
    }
    if (g->cfg.dtype == FEEDER_DTYPE_UINT8) {
        en->dev = en->stage;
    } else if (!(en->dev = feeder__cuda_dev_alloc(g, g->out_bytes, &e))) {
        feeder__fmt(what, sizeof(what), "allocating %zu bytes of device memory for batch buffer %d",
                    g->out_bytes, i);
        return feeder__cuda_setup_fail(g, why, whylen, what, e);
    }
    if (!(en->dev_labels = feeder__cuda_dev_alloc(g, labels, &e)))
        return feeder__cuda_setup_fail(g, why, whylen, "allocating device labels", e);
    if (g->cfg.fields && !(en->meta = malloc(g->l->slot_bytes))) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if (g->pin_mode == FEEDER_PIN_COPY && !(en->pinned = feeder__cuda_pin_alloc(g, g->in_bytes + labels, &e))) {
        feeder__fmt(what, sizeof(what), "allocating %zu bytes of pinned memory for buffer %d",
                    g->in_bytes + labels, i);
        return feeder__cuda_setup_fail(g, why, whylen, what, e);
    }
    size_t offs = (size_t)g->l->batch * sizeof(uint64_t);
    if (g->pack_registered && g->gather_mode == FEEDER__GATHER_KERNEL &&
        (!(en->gather_host = feeder__cuda_pin_alloc(g, offs, &e)) ||
         !(en->gather_dev = feeder__cuda_dev_alloc(g, offs, &e))))
        return feeder__cuda_setup_fail(g, why, whylen, "allocating the gather offsets", e);
    en->labels = malloc(labels);
    en->indices = malloc((size_t)g->l->batch * sizeof(uint64_t));
    if (!en->labels || !en->indices) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if ((e = cudaEventCreate(&en->start_ev)) != cudaSuccess ||
        (e = cudaEventCreate(&en->h2d_ev)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&en->copy_ev, g->tr ? cudaEventDefault
                                                          : cudaEventDisableTiming)) !=
            cudaSuccess ||
        (e = cudaEventCreateWithFlags(&en->release_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreate(&en->dec_ev)) != cudaSuccess)
        return feeder__cuda_setup_fail(g, why, whylen, "cudaEventCreate", e);
    return 0;
}

static int alloc_ring(feeder__gpu *g, char *why, size_t whylen)
{
    g->e = calloc((size_t)g->depth, sizeof(*g->e));
    g->fifo = calloc((size_t)g->depth + 1, sizeof(*g->fifo));
    g->jobs = calloc((size_t)g->depth + 1, sizeof(*g->jobs));
    if (!g->e || !g->fifo || !g->jobs) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    for (int i = 0; i < g->depth && !rc; i++)
        rc = alloc_entry(g, i, why, whylen);
    return rc;
}

static int start_pin_threads(feeder__gpu *g, char *why, size_t whylen)
{
    g->decode_thread = g->decodes && !g->pack_registered && g->pin_mode != FEEDER_PIN_COPY;
    if (g->pin_mode != FEEDER_PIN_COPY && !g->decode_thread)
        return 0;
    g->nthr = g->decode_thread ? 1 : g->cfg.pin_threads;
    g->thr = calloc((size_t)g->nthr, sizeof(*g->thr));
    if (!g->thr) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < g->nthr; i++) {
        int err = pthread_create(&g->thr[i], NULL,
                                 g->decode_thread ? feeder__cuda_decode_thread
                                                  : feeder__cuda_pin_thread,
                                 g);
        if (err) {
            g->nthr = i;
            feeder__fmt(why, whylen, "starting %s thread %d: %s",
                        g->decode_thread ? "decode" : "pin", i, strerror(err));
            return -err;
        }
    }
    return 0;
}

/* How the layer runs, for feeder_loader_gpu_status. */
static void describe_layer(feeder__gpu *g)
{
    static const char *pins[] = {"none (pageable copies)", "copy", "register"};
    static const char *dtypes[] = {"uint8", "float16", "bfloat16", "float32"};
    const feeder__gpu_config *cfg = &g->cfg;
    char thr[32] = "";
    if (g->pin_mode == FEEDER_PIN_COPY)
        feeder__fmt(thr, sizeof(thr), " (%d thread%s)", g->nthr, g->nthr == 1 ? "" : "s");
    int nchw = cfg->dtype == FEEDER_DTYPE_UINT8 ? g->l->layout == FEEDER_LAYOUT_NCHW
                                                : cfg->out_layout == FEEDER_LAYOUT_NCHW;
    feeder__fmt(g->describe, sizeof(g->describe),
                "device %d, pin %s%s, %d device buffers of %zu bytes, %s %s%s%s%s%s%s",
                cfg->device, pins[g->pin_mode], thr, g->depth, g->out_bytes, dtypes[cfg->dtype],
                nchw ? "NCHW" : "NHWC", g->reg_note, g->pin_note, g->decodes ? ", decoder nvJPEG" : "",
                g->decodes ? " (made while the workers decode the first batches)" : "",
                g->pack_registered ? (g->gather_mode == FEEDER__GATHER_KERNEL
                                          ? ", records straight from the registered packed file "
                                            "(shuffled: gather kernel)"
                                          : g->gather_mode == FEEDER__GATHER_BATCH
                                          ? ", records straight from the registered packed file "
                                            "(shuffled: cudaMemcpyBatchAsync)"
                                          : ", records straight from the registered packed file "
                                            "(shuffled: a copy per record)")
                                   : g->pack_note);
    if (g->aug_on) { /* FEEDER_OPT_AUGMENT_ON_DEVICE */
        size_t n = strlen(g->describe);
        feeder__fmt(g->describe + n, sizeof(g->describe) - n,
                    ", augment on the device (%u of the plan's steps%s)",
                    g->aug.nsteps - g->aug_first,
                    feeder__augment_has_mix(&g->aug) ? " and its mixes" : "");
    }
}

/* Close start-up step k, begun at *t, as a span of the trace. Returns 0. */
static int lap(feeder__gpu *g, int k, uint64_t *t)
{
    static const char *const step[] = {"stream",           "decoder (its thread started)",
                                       "packed file registered", "first slot registered",
                                       "device ring",      "pin or decode threads"};
    uint64_t now = feeder__now_ns();
    feeder__trace_span(g->cfg.trace, g->tr_start, step[k], *t, now, -1, -1);
    *t = now;
    return 0;
}

int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen)
{
    int rc = feeder__gpu_probe(cfg->device, why, whylen);
    if (rc)
        return rc;
    feeder__gpu *g = layer_new(cfg);
    if (!g) {
        feeder__fmt(why, whylen, "out of memory");
        return -ENOMEM;
    }
    devguard dg;
    cudaError_t e = feeder__cuda_enter(g, &dg);
    if (e != cudaSuccess) {
        rc = feeder__cuda_setup_fail(g, why, whylen, "cudaSetDevice", e);
        feeder__gpu_destroy(g);
        return rc;
    }
    g->tr_start = feeder__trace_track(g->cfg.trace, "GPU layer start-up (loader thread)");
    uint64_t t = feeder__now_ns();
    if ((rc = start_stream(g, why, whylen)) || (rc = lap(g, 0, &t)) ||
        (rc = start_decoder(g, why, whylen)) || (rc = start_trace_ref(g, why, whylen)) ||
        (rc = lap(g, 1, &t)))
        goto fail;
    register_pack(g);
    lap(g, 2, &t);
    fields_pin_mode(g);
    feeder__cuda_register_first(g);
    lap(g, 3, &t);
    if ((rc = alloc_ring(g, why, whylen)) || (rc = feeder__cuda_augment_start(g, why, whylen)) ||
        (rc = lap(g, 4, &t)))
        goto fail;
    feeder__cuda_register_rest(g);
    if ((rc = start_pin_threads(g, why, whylen)) || (rc = lap(g, 5, &t)))
        goto fail;
    describe_layer(g);
    g->st.pinned_bytes = g->pinned_bytes;
    g->st.device_bytes = g->device_bytes;
    feeder__cuda_leave(&dg);
    *out = g;
    return 0;
fail:
    feeder__cuda_leave(&dg);
    feeder__gpu_destroy(g);
    return rc;
}

void feeder__gpu_destroy(feeder__gpu *g)
{
    if (!g)
        return;
    devguard dg;
    int entered = feeder__cuda_enter(g, &dg) == cudaSuccess;
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
            feeder__cuda_trace_copies(g, &g->e[i], g->e[i].timed);
    if (g->tr_ref)
        cudaEventDestroy(g->tr_ref);
    for (int i = 0; g->e && i < g->depth; i++) {
        entry *en = &g->e[i];
        if (en->dev != en->stage)
            feeder__cuda_dev_free(g, en->dev);
        feeder__cuda_dev_free(g, en->stage);
        feeder__cuda_dev_free(g, en->dev_labels);
        feeder__cuda_pin_free(g, en->pinned);
        feeder__cuda_pin_free(g, en->gather_host);
        free(en->meta);
        feeder__cuda_dev_free(g, en->gather_dev);
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
    feeder__cuda_augment_free(g);
    if (g->pack_registered)
        cudaHostUnregister(g->pack->map);
    if (g->dec_thread_live) {
        pthread_join(g->dec_thread, NULL);
        if (!g->dec)
            g->dec = g->dec_made;
    }
    feeder__gpu_decoder_destroy(g->dec);
    free(g->imgs);
    free(g->refused);
    free(g->fb);
    feeder__cuda_unregister_slots(g);
    if (g->own_stream)
        cudaStreamDestroy(g->stream);
    if (entered)
        feeder__cuda_leave(&dg);
    free(g->run_dst);
    free(g->run_src);
    free(g->run_len);
    free(g->e);
    free(g->fifo);
    free(g->jobs);
    pthread_cond_destroy(&g->cv_work);
    pthread_cond_destroy(&g->cv_done);
    pthread_mutex_destroy(&g->lock);
    free(g);
}
