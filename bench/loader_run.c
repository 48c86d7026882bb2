/* bench_loader: one configuration's loader and its timed epochs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_step.h"
#include "loader.h"

feeder_packed_info g_pack;
uint32_t g_fetch_ahead;

/* URLs and brace ranges of packs: a shards dataset (the URL's shards come
 * through the shard cache as the epochs need them). */
static feeder_dataset *open_shards(const char *path)
{
    feeder_shard_options so = {.fetch_ahead = g_fetch_ahead};
    feeder_dataset *ds;
    char err[1024] = "";
    int rc = feeder_dataset_open_shards(path, &so, &ds, err, sizeof(err));
    if (rc != 0)
        die("opening shards %s: %s (%s): %s", path, feeder_strerror(rc), feeder_err_name(rc),
            err[0] ? err : "no detail");
    feeder_dataset_packed_info(ds, &g_pack);
    return ds;
}

/* A tar shard set: a brace pattern ("s-{000..127}.tar") or one shard, local
 * or URLs (the shard cache and --fetch-ahead as for packs). */
static feeder_dataset *open_tar(const char *path)
{
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    feeder_shard_options so = {.fetch_ahead = g_fetch_ahead};
    uint64_t t0 = bu_now_ns();
    int rc = feeder_dataset_open_shards(path, &so, &ds, err, sizeof(err));
    double ms = (bu_now_ns() - t0) / 1e6;
    if (rc != 0)
        die("opening tar shards %s: %s (%s): %s", path, feeder_strerror(rc), feeder_err_name(rc),
            err[0] ? err : "no detail");
    feeder_tar_info ti;
    if (feeder_dataset_tar_info(ds, &ti) == 0)
        fprintf(stderr, "bench_loader: %s: %u shard%s, %llu samples (%llu bad), opened in "
                "%.2f ms; %u index%s read from .idx files, %u written\n", path, ti.shards,
                ti.shards == 1 ? "" : "s", (unsigned long long)ti.samples,
                (unsigned long long)ti.bad_samples, ms, ti.indexes_cached,
                ti.indexes_cached == 1 ? "" : "es", ti.indexes_written);
    return ds;
}

feeder_dataset *open_dataset(const char *path)
{
    size_t len = strlen(path);
    int tar = len >= 4 && !strcmp(path + len - 4, ".tar");
    if (tar)
        return open_tar(path); /* one shard or a brace range of them, local or URLs */
    if (strstr(path, "://") || strchr(path, '{'))
        return open_shards(path); /* packs: URLs, or a brace range */
    struct stat st;
    if (stat(path, &st) != 0)
        die_usage("--data '%s': %s", path, strerror(errno));
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc;
    char magic[8] = "";
    if (S_ISREG(st.st_mode)) {
        FILE *f = fopen(path, "rb");
        if (f) {
            if (fread(magic, 1, sizeof(magic), f) != sizeof(magic))
                memset(magic, 0, sizeof(magic));
            fclose(f);
        }
    }
    if (S_ISDIR(st.st_mode))
        rc = feeder_dataset_open_folder(path, &ds, err, sizeof(err));
    else if (S_ISREG(st.st_mode) && memcmp(magic, "FEEDPACK", 8) == 0) {
        rc = feeder_dataset_open_packed(path, &ds, err, sizeof(err));
        if (rc == 0)
            feeder_dataset_packed_info(ds, &g_pack);
    } else if (S_ISREG(st.st_mode) && bd_is_tar(path))
        return open_tar(path);
    else if (S_ISREG(st.st_mode))
        rc = feeder_dataset_open_list(path, NULL, &ds, err, sizeof(err));
    else
        die_usage("--data '%s': neither a folder, a list file, a tar shard nor a packed file",
                  path);
    if (rc != 0)
        die("opening dataset %s: %s (%s): %s", path, feeder_strerror(rc), feeder_err_name(rc),
            err[0] ? err : "no detail");
    uint64_t skipped = 0;
    char what[256];
    if (feeder_dataset_skipped(ds, &skipped, what, sizeof(what)) == 0 && skipped)
        fprintf(stderr, "bench_loader: %s: %s (not images this build reads)\n", path, what);
    return ds;
}

static void die_loader(feeder_loader *ld, int rc, const char *what, int workers, unsigned epoch)
{
    die("%s (workers %d, epoch %u): %s (%s): %s", what, workers, epoch, feeder_strerror(rc),
        feeder_err_name(rc), ld ? feeder_loader_errmsg(ld) : "");
}

/* Set an option; the library's own range check becomes an argument error
 * that names the command-line option. */
static void set_opt(feeder_loader *ld, feeder_option opt, int64_t v, const char *arg)
{
    int rc = feeder_loader_set(ld, opt, v);
    if (rc == 0)
        return;
    if (rc == FEEDER_ERANGE || rc == FEEDER_EINVAL) {
        fprintf(stderr, PROG ": %s %lld: %s: %s\n", arg, (long long)v, feeder_strerror(rc),
                feeder_loader_errmsg(ld));
        exit(2);
    }
    die("setting %s (%s) to %lld: %s (%s): %s", feeder_option_name(opt) ? feeder_option_name(opt)
                                                                         : "?",
        arg, (long long)v, feeder_strerror(rc), feeder_err_name(rc), feeder_loader_errmsg(ld));
}

/* Evict one file's pages (clean pages only; pages still mapped by a live
 * process stay) and return how many of its bytes are still cached. */
static uint64_t drop_file(const char *path, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *size = 0;
    if (fd < 0)
        return 0;
    struct stat st;
    uint64_t left = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        *size = (uint64_t)st.st_size;
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        long page = sysconf(_SC_PAGESIZE);
        size_t pages = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page;
        unsigned char *vec = m != MAP_FAILED ? malloc(pages) : NULL;
        if (vec && mincore(m, (size_t)st.st_size, vec) == 0)
            for (size_t i = 0; i < pages; i++)
                left += (vec[i] & 1) ? (uint64_t)page : 0;
        free(vec);
        if (m != MAP_FAILED)
            munmap(m, (size_t)st.st_size);
    }
    close(fd);
    return left;
}

/* --drop-cache: every file of the dataset, or the packed file. Prints what
 * the kernel kept: pages a live process maps stay (persistent workers, or
 * workers 0 reading a packed file through its mapping). */
static void drop_cache(const opts *o, const feeder_dataset *ds, const char *data)
{
    uint64_t total = 0, left = 0, size;
    if (g_pack.kind) {
        left = drop_file(data, &size);
        total = size;
    } else {
        const char *last = NULL; /* tar shards: each once (a shard's samples are together) */
        for (uint64_t i = 0; i < feeder_dataset_size(ds); i++) {
            const char *p = feeder_dataset_path(ds, i);
            if (!p && feeder_dataset_tar_sample(ds, i, &p, NULL, NULL, NULL, NULL) == FEEDER_EINVAL)
                p = NULL;
            if (p && p != last) {
                left += drop_file(p, &size);
                total += size;
            }
            last = p;
        }
    }
    fprintf(stderr, "dropped the page cache of %.1f MB; %.1f MB stayed cached%s\n", total / 1e6,
            left / 1e6, left && o->persistent ? " (persistent workers still map them)" : "");
}

/* The --decoder all figures of a measured run (medians over its epochs). */
static void backend_figures(run_res *r)
{
    double cores[MAX_EPOCHS], busy[MAX_EPOCHS];
    uint64_t images = 0, gdec = 0;
    for (unsigned e = 0; e < r->nep; e++) {
        const epoch_res *ep = &r->ep[e];
        cores[e] = ep->ns ? (double)ep->cpu_ns / ep->ns : 0;
        busy[e] = ep->ns ? 100.0 * (ep->h2d_ns + ep->gpu_decode_ns) / ep->ns : 0;
        images += ep->images;
        gdec += ep->gpu_decode_ns;
        r->gpu_decoded += ep->gpu_decoded;
        r->gpu_fallback += ep->gpu_fallback;
        for (int k = 0; k < FEEDER_ROUTES; k++)
            r->routed[k] += ep->routed[k];
    }
    r->cpu_cores = bu_median(cores, r->nep);
    r->gpu_busy_pct = r->gpu ? bu_median(busy, r->nep) : -1;
    r->gpu_decode_us = images ? gdec / 1e3 / images : 0;
}

/* What one configuration's epochs share. */
typedef struct run_state {
    const opts *o;
    run_res *r;
    int workers, raw;
    feeder_loader *ld;
    bg_ctx *gpu;
    uint8_t *hostbuf; /* --checksum of device batches */
    uint64_t hash, expect, nclasses;
    int warned;
} run_state;

/* Every option of the command line onto the loader. */
static void configure(run_state *st)
{
    const opts *o = st->o;
    feeder_loader *ld = st->ld;
    set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch, "--batch");
    set_opt(ld, FEEDER_OPT_SHUFFLE, o->shuffle, "--shuffle");
    set_opt(ld, FEEDER_OPT_SEED, (int64_t)o->seed, "--seed");
    set_opt(ld, FEEDER_OPT_NUM_WORKERS, st->workers, o->sweep ? "--threads-sweep" : "--workers");
    /* PyTorch rejects a prefetch factor without workers; it means nothing then. */
    if (st->workers > 0)
        set_opt(ld, FEEDER_OPT_PREFETCH_FACTOR, o->prefetch, "--prefetch");
    set_opt(ld, FEEDER_OPT_PERSISTENT_WORKERS, o->persistent, "--persistent");
    set_opt(ld, FEEDER_OPT_IN_ORDER, o->in_order, "--in-order");
    set_opt(ld, FEEDER_OPT_TIMEOUT_MS, o->timeout_ms, "--timeout-ms");
    /* A RAW pack brings its own shape: the loader adopts it unless asked.
     * (With --dtype, --layout is the device batches' and is always passed.) */
    if (!st->raw || o->shape_given) {
        set_opt(ld, FEEDER_OPT_PIPELINE, o->pipeline, "--pipeline");
        set_opt(ld, FEEDER_OPT_HEIGHT, o->size, "--size");
        set_opt(ld, FEEDER_OPT_WIDTH, o->size, "--size");
        if (o->pipeline == FEEDER_PIPELINE_EVAL)
            set_opt(ld, FEEDER_OPT_RESIZE, o->resize, "--resize");
    }
    if (!st->raw || o->shape_given || o->dtype != FEEDER_DTYPE_UINT8)
        set_opt(ld, FEEDER_OPT_LAYOUT, o->layout, "--layout");
    /* raw reads a pack: the decoder option does not apply there. */
    set_opt(ld, FEEDER_OPT_SPLIT, o->split, "--split");
    set_opt(ld, FEEDER_OPT_DECODER, o->decoder < BD_RAW ? o->decoder : FEEDER_DECODER_ROI,
            "--decoder");
    set_opt(ld, FEEDER_OPT_IO, o->io, "--io");
    set_opt(ld, FEEDER_OPT_PACKED_READ, o->packed_read, "--packed-read");
    set_opt(ld, FEEDER_OPT_VERIFY_CRC, o->verify_crc, "--verify-crc");
    set_opt(ld, FEEDER_OPT_DEVICE, o->device, "--device");
    set_opt(ld, FEEDER_OPT_PIN_MODE, o->pin, "--pin");
    set_opt(ld, FEEDER_OPT_GPU_PREFETCH, o->gpu_prefetch, "--gpu-prefetch");
    set_opt(ld, FEEDER_OPT_ROW_INDEX_BYTES, (int64_t)o->row_index_mib << 20, "--row-index");
    set_opt(ld, FEEDER_OPT_GPU_ROOM, o->gpu_room, "--gpu-room");
    set_opt(ld, FEEDER_OPT_GPU_DECODE_THREADS, o->gpu_decode_threads, "--gpu-decode-threads");
    set_opt(ld, FEEDER_OPT_DTYPE, o->dtype, "--dtype");
    set_opt(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, o->augment_on_device, "--augment-on-device");
    feeder_augment *aug = bl_make_augment(o->augment);
    if (aug && feeder_loader_set_augment(ld, aug))
        die("--augment: %s", feeder_loader_errmsg(ld));
    feeder_augment_destroy(aug);
}

static int traced(const run_state *st)
{
    return st->o->trace && st->workers == st->o->workers[st->o->nworkers - 1];
}

/* Start the loader (timed with epoch 0, as iter(loader) is in PyTorch: it
 * forks) and record what it resolved. 1 when the GPU decoder asked for fell
 * back: the configuration is then not measured. */
static int start(run_state *st)
{
    run_res *r = st->r;
    int rc = feeder_loader_start(st->ld);
    if (rc)
        die_loader(st->ld, rc, "feeder_loader_start", st->workers, 0);
    const char *why = NULL;
    const char *be = feeder_loader_io_backend(st->ld, &why);
    snprintf(r->io, sizeof(r->io), "%s", be ? be : "?");
    snprintf(r->io_reason, sizeof(r->io_reason), "%s", why ? why : "");
    r->gpu = feeder_loader_gpu_status(st->ld, &why);
    snprintf(r->gpu_how, sizeof(r->gpu_how), "%s", why ? why : "");
    if (st->o->device >= 0 && !r->gpu)
        die("--device %d: the loader delivers host batches: %s", st->o->device, r->gpu_how);
    /* Never a fallback's figure under the GPU decoder's name. */
    r->na = bd_decoder_fell_back(st->ld, st->o->decoder, r->na_reason, sizeof(r->na_reason));
    if (r->na)
        fprintf(stderr, "workers %2d  %s: %s\n", st->workers, bd_decoder_name(st->o->decoder),
                r->na_reason);
    return r->na;
}

/* A device batch's stand-in training step, and its bytes for --checksum. */
static const uint8_t *gpu_batch(run_state *st, const feeder_batch *b, unsigned step)
{
    const opts *o = st->o;
    char gerr[512];
    /* Like a loop that reads its loss every step: the host waits for step
     * k-1 before it asks for batch k+1, so at most one step is queued ahead
     * and feeder_next's blocking is real. */
    if (o->compute_ms > 0 &&
        (bg_step(st->gpu, step, b->ready_event, b->device_data, b->device_bytes, o->compute_ms,
                 gerr, sizeof(gerr)) ||
         (step > 0 && bg_wait_step(st->gpu, step - 1, gerr, sizeof(gerr)))))
        die("compute step: %s", gerr);
    if (!o->checksum)
        return b->data;
    if (!st->hostbuf && !(st->hostbuf = malloc((size_t)o->batch * b->sample_bytes)))
        die("out of memory");
    if (bg_to_host(st->gpu, b->ready_event, st->hostbuf, b->device_data, b->device_bytes, gerr,
                   sizeof(gerr)))
        die("copying a batch back: %s", gerr);
    return st->hostbuf;
}

/* One delivered batch: counted, hashed, its labels checked. */
static void consume(run_state *st, const feeder_batch *b, epoch_res *ep)
{
    unsigned step = (unsigned)ep->batches;
    ep->batches++;
    ep->images += b->count;
    ep->out_bytes += (uint64_t)b->count * b->sample_bytes;
    const uint8_t *px = st->r->gpu ? gpu_batch(st, b, step) : b->data;
    /* Sample by sample (pixels, then label), so the checksum does not
     * depend on the batch size either. */
    for (uint32_t i = 0; st->o->checksum && i < b->count; i++) {
        st->hash = bu_hash64(st->hash, px + (size_t)i * b->sample_bytes, b->sample_bytes);
        st->hash = bu_hash64(st->hash, &b->labels[i], sizeof(int64_t));
    }
    /* A cheap sanity check, so a fast but wrong loader does not go unnoticed
     * in a benchmark. */
    for (uint32_t i = 0; i < b->count && !st->warned; i++)
        if (b->labels[i] < 0 || (st->nclasses && (uint64_t)b->labels[i] >= st->nclasses)) {
            fprintf(stderr, PROG ": warning: batch %llu sample %u has label %lld, "
                    "outside [0, %llu)\n", (unsigned long long)b->number, i,
                    (long long)b->labels[i], (unsigned long long)st->nclasses);
            st->warned = 1;
        }
}

/* Every batch of epoch e, from t0 (the epoch's first request). */
static void drain(run_state *st, unsigned e, uint64_t t0)
{
    epoch_res *ep = &st->r->ep[e];
    for (;;) {
        feeder_batch *b;
        uint64_t tn = bu_now_ns();
        int rc = feeder_next(st->ld, &b);
        if (rc == FEEDER_DONE)
            break;
        if (rc != 0)
            die_loader(st->ld, rc, "feeder_next", st->workers, e);
        if (ep->batches == 0)
            ep->first_ns = bu_now_ns() - t0;
        else
            st->r->stall_ms[e] += (bu_now_ns() - tn) / 1e6;
        consume(st, b, ep);
        if ((rc = feeder_batch_release(b, st->gpu ? bg_stream(st->gpu) : NULL)))
            die_loader(st->ld, rc, "feeder_batch_release", st->workers, e);
    }
}

/* The loader's counters over epoch e (s1 - s0). */
static void epoch_stats(run_res *r, epoch_res *ep, const feeder_stats *s0,
                        const feeder_stats *s1)
{
    ep->bytes = s1->bytes_read - s0->bytes_read;
    ep->read_ns = s1->read_ns - s0->read_ns;
    ep->decode_ns = s1->decode_ns - s0->decode_ns;
    ep->transform_ns = s1->transform_ns - s0->transform_ns;
    ep->wait_ns = s1->wait_ns - s0->wait_ns;
    ep->skipped = s1->skipped - s0->skipped;
    r->shm_bytes = s1->shm_bytes;
    r->slots = s1->slots;
    r->h2d_bytes += s1->h2d_bytes - s0->h2d_bytes;
    r->h2d_ns += s1->h2d_ns - s0->h2d_ns;
    r->pin_ns += s1->pin_ns - s0->pin_ns;
    ep->h2d_ns = s1->h2d_ns - s0->h2d_ns;
    ep->gpu_decoded = s1->gpu_decoded - s0->gpu_decoded;
    ep->gpu_fallback = s1->gpu_fallback - s0->gpu_fallback;
    for (int k = 0; k < FEEDER_ROUTES; k++)
        ep->routed[k] = s1->cpu_routed[k] - s0->cpu_routed[k];
    ep->gpu_decode_ns = s1->gpu_decode_ns - s0->gpu_decode_ns;
    ep->cpu_shared = s1->cpu_shared - s0->cpu_shared;
    ep->cpu_permille = s1->hybrid_cpu_permille;
    r->hybrid_permille = s1->hybrid_cpu_permille;
}

/* With --compute-ms: the epoch's steps run alone, for comparison. */
static void gpu_epoch_times(run_state *st, unsigned e)
{
    const opts *o = st->o;
    run_res *r = st->r;
    char gerr[512];
    if (!st->gpu || o->compute_ms <= 0)
        return;
    unsigned batches = (unsigned)r->ep[e].batches;
    size_t sample = st->raw ? g_pack.record_bytes : (size_t)o->size * o->size * 3;
    if (bg_compute_alone(st->gpu, (size_t)o->batch * sample * dtype_size[o->dtype],
                         o->compute_ms, batches, &r->alone_s[e], gerr, sizeof(gerr)))
        die("compute alone: %s", gerr);
}

/* Epoch e, timed from its first request to FEEDER_DONE (and, with a
 * stand-in step, until the GPU has finished its last step). 1 when the
 * configuration is not measured (a GPU decoder fell back). */
static int run_epoch(run_state *st, feeder_dataset *ds, const char *data, unsigned e)
{
    static bd_cpu cpu; /* 12 KB: off the stack */
    run_res *r = st->r;
    epoch_res *ep = &r->ep[e];
    feeder_stats s0, s1;
    int rc;
    if (st->o->drop_cache)
        drop_cache(st->o, ds, data);
    if ((rc = feeder_loader_stats(st->ld, &s0)))
        die_loader(st->ld, rc, "feeder_loader_stats", st->workers, e);
    bd_cpu_begin(&cpu, st->ld, st->workers);
    uint64_t t0 = bu_now_ns();
    if (e == 0 && start(st))
        return 1;
    drain(st, e, t0);
    if (st->gpu && st->o->compute_ms > 0) {
        char gerr[512];
        if (bg_busy_ms(st->gpu, (unsigned)ep->batches, &r->busy_ms[e], gerr, sizeof(gerr)))
            die("timing the steps: %s", gerr);
    }
    ep->ns = bu_now_ns() - t0;
    ep->cpu_ns = bd_cpu_end(&cpu, st->ld, st->workers);
    if ((rc = feeder_loader_stats(st->ld, &s1)))
        die_loader(st->ld, rc, "feeder_loader_stats", st->workers, e);
    epoch_stats(r, ep, &s0, &s1);
    gpu_epoch_times(st, e);
    if (ep->images != st->expect)
        fprintf(stderr, PROG ": warning: epoch %u delivered %llu images, the dataset has %llu\n",
                e, (unsigned long long)ep->images, (unsigned long long)st->expect);
    r->rate[e] = ep->ns ? ep->images * 1e9 / ep->ns : 0;
    r->nep = e + 1;
    fprintf(stderr, "workers %2d  epoch %u/%u  %8.0f images/s  first batch %7.1f ms  %s\n",
            st->workers, e + 1, st->o->epochs, r->rate[e], ep->first_ns / 1e6, r->io);
    return 0;
}

/* Device batches: consumer stall, GPU idle share, epoch over compute alone. */
static void gpu_figures(const opts *o, run_res *r)
{
    double stall[MAX_EPOCHS], idle[MAX_EPOCHS], vs[MAX_EPOCHS];
    for (unsigned e = 0; e < r->nep; e++) {
        double after_first = (r->ep[e].ns - r->ep[e].first_ns) / 1e6;
        stall[e] = after_first > 0 ? 100.0 * r->stall_ms[e] / after_first : 0;
        idle[e] = r->ep[e].ns ? 100.0 * (1 - r->busy_ms[e] / (r->ep[e].ns / 1e6)) : 0;
        vs[e] = r->alone_s[e] > 0 ? r->ep[e].ns / 1e9 / r->alone_s[e] : 0;
    }
    r->med_stall_pct = bu_median(stall, r->nep);
    r->med_idle_pct = o->compute_ms > 0 ? bu_median(idle, r->nep) : -1;
    r->med_vs_alone = o->compute_ms > 0 ? bu_median(vs, r->nep) : -1;
    r->h2d_gbps = r->h2d_ns ? (double)r->h2d_bytes / r->h2d_ns : 0;
}

/* The medians and per-image figures of a measured configuration. */
static void summarize(const opts *o, run_res *r)
{
    double first[MAX_EPOCHS], mbps[MAX_EPOCHS], gbps[MAX_EPOCHS];
    uint64_t images = 0, rd = 0, dec = 0, xf = 0, wait = 0;
    for (unsigned e = 0; e < r->nep; e++) {
        first[e] = r->ep[e].first_ns / 1e6;
        mbps[e] = r->ep[e].ns ? r->ep[e].bytes * 1e3 / r->ep[e].ns : 0;
        gbps[e] = r->ep[e].ns ? (double)r->ep[e].out_bytes / r->ep[e].ns : 0;
        images += r->ep[e].images;
        rd += r->ep[e].read_ns;
        dec += r->ep[e].decode_ns;
        xf += r->ep[e].transform_ns;
        wait += r->ep[e].wait_ns;
    }
    r->med_rate = bu_median(r->rate, r->nep);
    /* The first epoch pays start-up (fork, CUDA, nvJPEG) and a cold page cache:
     * the steady figure leaves it out, and the table shows it apart. */
    r->steady_rate = r->nep > 1 ? bu_median(r->rate + 1, r->nep - 1) : r->rate[0];
    r->steady_gbps = r->nep > 1 ? bu_median(gbps + 1, r->nep - 1) : gbps[0];
    r->med_first_ms = bu_median(first, r->nep);
    r->mbps = bu_median(mbps, r->nep);
    r->gbps = bu_median(gbps, r->nep);
    r->read_us = images ? rd / 1e3 / images : 0;
    r->decode_us = images ? dec / 1e3 / images : 0;
    r->xform_us = images ? xf / 1e3 / images : 0;
    r->wait_ms = wait / 1e6 / r->nep;
    r->eff = -1;
    backend_figures(r);
    if (r->gpu)
        gpu_figures(o, r);
}

void run_config(feeder_dataset *ds, const opts *o, int workers, run_res *r, const char *data)
{
    memset(r, 0, sizeof(*r));
    r->workers = workers;
    run_state st = {.o = o, .r = r, .workers = workers, .raw = g_pack.kind == FEEDER_RECORD_RAW,
                    .expect = feeder_dataset_size(ds),
                    .nclasses = feeder_dataset_num_classes(ds)};
    int rc = feeder_loader_create(ds, NULL, &st.ld);
    if (rc)
        die_loader(NULL, rc, "feeder_loader_create", workers, 0);
    configure(&st);
    /* The trace is written by feeder_loader_destroy, after the timed epochs. */
    if (traced(&st) && (rc = feeder_loader_set_trace(st.ld, o->trace)))
        die_loader(st.ld, rc, "--trace", workers, 0);
    char gerr[512];
    if (o->device >= 0 && bg_create(o->device, &st.gpu, gerr, sizeof(gerr)))
        die("--device %d: %s", o->device, gerr);
    for (unsigned e = 0; e < o->epochs; e++)
        if (run_epoch(&st, ds, data, e))
            break;
    r->checksum = st.hash;
    if (traced(&st) && (rc = feeder_loader_trace_flush(st.ld)))
        die_loader(st.ld, rc, "--trace", workers, 0);
    feeder_loader_destroy(st.ld);
    bg_destroy(st.gpu);
    free(st.hostbuf);
    if (!r->na)
        summarize(o, r);
}
