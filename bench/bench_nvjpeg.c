/*
 * bench_nvjpeg: what the GPU's JPEG engines decode on a set of files with no
 * loader around them: the ceiling the GPU decoders (FEEDER_DECODER_NVJPEG,
 * HYBRID) work under on that set and this machine.
 *
 *   bench_nvjpeg --data DIR
 *   bench_nvjpeg --data DIR --batch 256 --iters 20 --json
 *   bench_nvjpeg --data DIR --append-to /tmp/engine.md
 *
 * Every file of the folder dataset (up to --images) is read into pinned
 * memory and sorted by nvJPEG's own header parse: "engine" (the batched
 * hardware decoder takes it, at most 2 MP: what feeder's workers route to the
 * engine), "large" (taken, over 2 MP: feeder's workers decode those) and
 * "refused" (progressive, CMYK, ...). Then, timed on the host around each
 * nvjpegDecodeBatched call (the hardware backend's call returns once the
 * engines are done with the batch), to full-size interleaved RGB in device
 * memory, with nothing else running:
 *
 *   engine, 1 state       batches of --batch engine files, one after another,
 *                         each preceded by nvjpegJpegStreamParseHeader of its
 *                         files (as feeder's decode thread does);
 *   engine, 2 states      the same on two threads, each with its own handle,
 *                         state, stream and output: do two batches in flight
 *                         use the engines better than one;
 *   large alone           batches of 16 large files;
 *   large within a batch  batches of (--batch - 8) engine files and 8 large
 *                         ones: what a large photo adds to a batch's time,
 *                         against "engine, 1 state".
 *
 * images/s and MP/s are the decoded images and megapixels over the wall
 * time of the timed batches (after two untimed ones). feeder's own figures on
 * the same set (bench_loader --decoder nvjpeg) are bounded by the first rows.
 *
 * Output: a Markdown table on stdout (or JSON with --json) and, with
 * --append-to FILE, the same with the command line, date and machine.
 * Exit status: 0 done, 1 a CUDA or nvJPEG call failed, 2 bad arguments,
 * 77 no CUDA device or no JPEG engine (skipped).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include "benchutil.h"
#include "cli.h"
#include "feeder.h"

#ifndef FEEDER_SOURCE_DIR
#define FEEDER_SOURCE_DIR "."
#endif

#define PROG "bench_nvjpeg"
#define ENGINE_MAX_PIXELS (2048u * 1024u) /* decode/jpeg_header.c's 2 MP */
#define LARGE_BATCH 16u
#define LARGE_IN_BATCH 8u
#define THREADS 2 /* the most a case runs */

#define die(...) cli_die(PROG, __VA_ARGS__)

#define CK(call) ck_cuda((call), #call, __LINE__)
#define NJ(call) ck_nvjpeg((call), #call, __LINE__)
static void ck_cuda(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess)
        die("line %d: %s failed: %s", line, what, cudaGetErrorString(e));
}
static void ck_nvjpeg(nvjpegStatus_t s, const char *what, int line)
{
    if (s != NVJPEG_STATUS_SUCCESS)
        die("line %d: %s failed: nvjpegStatus %d", line, what, (int)s);
}

typedef struct opts {
    const char *data, *append_to, *label;
    unsigned images, batch, iters;
    int device, json;
} opts;

/* One file in pinned memory. */
typedef struct file {
    unsigned char *bytes;
    size_t len;
    unsigned w, h;
} file;

typedef struct pool {
    file *f;
    unsigned n;
    double mp, kb; /* sums */
} pool;

typedef struct set {
    pool engine, large;
    unsigned refused, files;
} set;

/* One decoder: handle, state, stream and an output buffer for a batch. */
typedef struct dec {
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    nvjpegJpegStream_t js;
    cudaStream_t s;
    unsigned char *out;
    size_t out_bytes;
    unsigned size; /* the batch size it was initialised for */
    const unsigned char **data;
    size_t *lens;
    nvjpegImage_t *img;
} dec;

/* A timed case: `small` engine files and `big` large ones a batch. */
typedef struct row {
    const char *name;
    unsigned small, big, batches, threads;
    double wall_s, parse_ms, images, mp;
} row;

static void parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->images = 4000;
    o->batch = 256;
    o->iters = 20;
    cli_opt t[] = {
        CLI_STRING("data", "DIR", o->data, "folder dataset (class folders of JPEGs); required"),
        CLI_UINT("images", "N", o->images, 1, 1u << 24, "files read, at most (4000)"),
        CLI_UINT("batch", "N", o->batch, LARGE_IN_BATCH + 1, 4096, "images a batch (256)"),
        CLI_UINT("iters", "N", o->iters, 1, 100000, "timed batches a case and thread (20)"),
        CLI_INT("device", "N", o->device, 0, 1023, "CUDA device (0)"),
        BU_CLI_REPORT_OPTIONS(o->json, o->append_to, o->label),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = t,
                     .epilog = "Exit status: 0 done, 1 a CUDA or nvJPEG call failed, 2 bad "
                               "arguments,\n77 no CUDA device or no JPEG engine (skipped).\n"};
    cli_parse(&spec, argc, argv);
    if (!o->data)
        cli_die_usage(PROG, "--data DIR is required");
}

static void pool_add(pool *p, unsigned char *bytes, size_t len, unsigned w, unsigned h)
{
    file *f = realloc(p->f, (p->n + 1) * sizeof(*f));
    if (!f)
        die("out of memory");
    p->f = f;
    p->f[p->n++] = (file){bytes, len, w, h};
    p->mp += (double)w * h / 1e6;
    p->kb += (double)len / 1e3;
}

/* Read and sort the files with nvJPEG's header parse on `h`. */
static void load_set(const opts *o, nvjpegHandle_t h, set *s)
{
    char err[512];
    feeder_dataset *ds;
    if (feeder_dataset_open_folder(o->data, &ds, err, sizeof(err)))
        die("--data %s: %s", o->data, err);
    nvjpegJpegStream_t js;
    NJ(nvjpegJpegStreamCreate(h, &js));
    memset(s, 0, sizeof(*s));
    uint64_t n = feeder_dataset_size(ds);
    for (uint64_t i = 0; i < n && s->files < o->images; i++) {
        uint8_t *buf;
        size_t len;
        if (bu_read_file(feeder_dataset_path(ds, i), &buf, &len))
            die("%s: cannot read it", feeder_dataset_path(ds, i));
        s->files++;
        unsigned w = 0, hh = 0;
        int unsupported = 1;
        if (nvjpegJpegStreamParseHeader(h, buf, len, js) != NVJPEG_STATUS_SUCCESS ||
            nvjpegJpegStreamGetFrameDimensions(js, &w, &hh) != NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeBatchedSupported(h, js, &unsupported) != NVJPEG_STATUS_SUCCESS ||
            unsupported) {
            s->refused++;
            free(buf);
            continue;
        }
        unsigned char *pinned;
        CK(cudaMallocHost((void **)&pinned, len));
        memcpy(pinned, buf, len);
        free(buf);
        pool_add((uint64_t)w * hh > ENGINE_MAX_PIXELS ? &s->large : &s->engine, pinned, len, w, hh);
    }
    NJ(nvjpegJpegStreamDestroy(js));
    feeder_dataset_destroy(ds);
}

static size_t max_pixels(const pool *p)
{
    size_t m = 0;
    for (unsigned i = 0; i < p->n; i++)
        if ((size_t)p->f[i].w * p->f[i].h > m)
            m = (size_t)p->f[i].w * p->f[i].h;
    return m;
}

static void dec_open(dec *d, const set *s, unsigned small, unsigned big)
{
    memset(d, 0, sizeof(*d));
    NJ(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &d->h));
    NJ(nvjpegJpegStateCreate(d->h, &d->st));
    NJ(nvjpegJpegStreamCreate(d->h, &d->js));
    CK(cudaStreamCreateWithFlags(&d->s, cudaStreamNonBlocking));
    d->size = small + big;
    d->out_bytes = ((size_t)small * max_pixels(&s->engine) + (size_t)big * max_pixels(&s->large)) * 3;
    CK(cudaMalloc((void **)&d->out, d->out_bytes));
    d->data = calloc(d->size, sizeof(*d->data));
    d->lens = calloc(d->size, sizeof(*d->lens));
    d->img = calloc(d->size, sizeof(*d->img));
    if (!d->data || !d->lens || !d->img)
        die("out of memory");
    NJ(nvjpegDecodeBatchedInitialize(d->h, d->st, (int)d->size, 1, NVJPEG_OUTPUT_RGBI));
}

static void dec_close(dec *d)
{
    free(d->data);
    free(d->lens);
    free(d->img);
    CK(cudaFree(d->out));
    CK(cudaStreamDestroy(d->s));
    nvjpegJpegStreamDestroy(d->js);
    nvjpegJpegStateDestroy(d->st);
    nvjpegDestroy(d->h);
}

/* One batch: `small` engine files from *next_small, `big` large ones from
 * *next_big, each header parsed first; its decoded megapixels into *mp. */
static void decode_one(dec *d, const set *s, unsigned small, unsigned big, unsigned *next_small,
                       unsigned *next_big, double *parse_s, double *mp)
{
    uint64_t t0 = bu_now_ns();
    size_t off = 0;
    for (unsigned k = 0; k < small + big; k++) {
        const file *f = k < small ? &s->engine.f[(*next_small)++ % s->engine.n]
                                  : &s->large.f[(*next_big)++ % s->large.n];
        unsigned w, h;
        NJ(nvjpegJpegStreamParseHeader(d->h, f->bytes, f->len, d->js));
        NJ(nvjpegJpegStreamGetFrameDimensions(d->js, &w, &h));
        d->data[k] = f->bytes;
        d->lens[k] = f->len;
        memset(&d->img[k], 0, sizeof(d->img[k]));
        d->img[k].channel[0] = d->out + off;
        d->img[k].pitch[0] = (size_t)w * 3;
        off += (size_t)w * h * 3;
        *mp += (double)w * h / 1e6;
    }
    *parse_s += (double)(bu_now_ns() - t0) / 1e9;
    NJ(nvjpegDecodeBatched(d->h, d->st, d->data, d->lens, d->img, d->s));
    CK(cudaStreamSynchronize(d->s));
}

typedef struct job {
    const set *s;
    const opts *o;
    unsigned small, big, first;
    int device;
    double wall_s, parse_s, mp;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    CK(cudaSetDevice(j->device));
    dec d;
    dec_open(&d, j->s, j->small, j->big);
    unsigned ns = j->first, nb = j->first;
    double warm_parse = 0, warm_mp = 0;
    for (int w = 0; w < 2; w++)
        decode_one(&d, j->s, j->small, j->big, &ns, &nb, &warm_parse, &warm_mp);
    uint64_t t0 = bu_now_ns();
    for (unsigned i = 0; i < j->o->iters; i++)
        decode_one(&d, j->s, j->small, j->big, &ns, &nb, &j->parse_s, &j->mp);
    j->wall_s = (double)(bu_now_ns() - t0) / 1e9;
    dec_close(&d);
    return NULL;
}

/* A case on `threads` threads started together; wall time is the slowest's. */
static void measure(const opts *o, const set *s, row *r)
{
    job jobs[THREADS];
    pthread_t th[THREADS];
    for (unsigned t = 0; t < r->threads; t++) {
        jobs[t] = (job){s, o, r->small, r->big, t * 7919u, o->device, 0, 0, 0};
        if (pthread_create(&th[t], NULL, run_job, &jobs[t]))
            die("cannot start a thread");
    }
    for (unsigned t = 0; t < r->threads; t++) {
        pthread_join(th[t], NULL);
        r->wall_s = jobs[t].wall_s > r->wall_s ? jobs[t].wall_s : r->wall_s;
        r->parse_ms += jobs[t].parse_s * 1e3;
        r->mp += jobs[t].mp;
    }
    r->batches = r->threads * o->iters;
    r->images = (double)r->batches * (r->small + r->big);
    r->parse_ms /= r->batches;
    fprintf(stderr, "%-22s %8.0f images/s  %7.1f MP/s  %6.2f ms a batch\n", r->name,
            r->images / r->wall_s, r->mp / r->wall_s, r->wall_s * 1e3 / o->iters);
}

static void report(const opts *o, const set *s, const row *rows, unsigned n, const char *gpu,
                   unsigned engines, int argc, char **argv)
{
    bu_machine m;
    bu_machine_init(&m, o->label);
    bu_sbuf cmd = {0}, body = {0};
    bu_sb_printf(&body, "feeder %s " PROG " on %s (%s); GPU %d: %s, %u JPEG engines\n",
                 feeder_version_string(), m.label, m.cpu, o->device, gpu, engines);
    bu_sb_printf(&body, "%s: %u files; engine (<= 2 MP) %u, %.3f MP and %.1f KB mean; large "
                 "(> 2 MP) %u, %.2f MP mean; refused by the engine %u\n\n", o->data, s->files,
                 s->engine.n, s->engine.n ? s->engine.mp / s->engine.n : 0.0,
                 s->engine.n ? s->engine.kb / s->engine.n : 0.0, s->large.n,
                 s->large.n ? s->large.mp / s->large.n : 0.0, s->refused);
    static const char *const head[] = {"case", "images a batch", "images/s", "MP/s",
                                       "ms a batch", "parse ms a batch"};
    static const int right[] = {0, 1, 1, 1, 1, 1};
    bu_table t;
    bu_table_init(&t, 6, head, right);
    for (unsigned i = 0; i < n; i++) {
        const row *r = &rows[i];
        char(*c)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(c[0], BU_TABLE_CELL, "%s", r->name);
        snprintf(c[1], BU_TABLE_CELL, "%u + %u large", r->small, r->big);
        snprintf(c[2], BU_TABLE_CELL, "%.0f", r->images / r->wall_s);
        snprintf(c[3], BU_TABLE_CELL, "%.1f", r->mp / r->wall_s);
        snprintf(c[4], BU_TABLE_CELL, "%.2f", r->wall_s * 1e3 / o->iters);
        snprintf(c[5], BU_TABLE_CELL, "%.2f", r->parse_ms);
    }
    bu_table_render(&t, &body);
    bu_table_free(&t);
    bu_command_line(&cmd, PROG, argc, argv);
    if (o->json) {
        printf("{\n  \"tool\": \"feeder\",\n  \"benchmark\": \"" PROG "\",\n  \"gpu\": ");
        bu_sbuf js = {0};
        bu_sb_json_str(&js, gpu);
        printf("%s,\n  \"engines\": %u,\n  \"files\": %u, \"refused\": %u,\n", js.p, engines,
               s->files, s->refused);
        printf("  \"engine_files\": %u, \"engine_mean_mp\": %.4f, \"large_files\": %u, "
               "\"large_mean_mp\": %.4f,\n  \"results\": [", s->engine.n,
               s->engine.n ? s->engine.mp / s->engine.n : 0.0, s->large.n,
               s->large.n ? s->large.mp / s->large.n : 0.0);
        for (unsigned i = 0; i < n; i++)
            printf("%s\n    {\"case\": \"%s\", \"engine_images\": %u, \"large_images\": %u, "
                   "\"threads\": %u, \"images_per_s\": %.1f, \"mp_per_s\": %.2f, "
                   "\"ms_per_batch\": %.3f, \"parse_ms_per_batch\": %.3f}",
                   i ? "," : "", rows[i].name, rows[i].small, rows[i].big, rows[i].threads,
                   rows[i].images / rows[i].wall_s, rows[i].mp / rows[i].wall_s,
                   rows[i].wall_s * 1e3 / o->iters, rows[i].parse_ms);
        printf("\n  ]\n}\n");
        free(js.p);
    } else {
        printf("\n%s", body.p);
    }
    fflush(stdout);
    if (o->append_to) {
        char title[320];
        snprintf(title, sizeof(title), PROG ", %s", gpu);
        bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &m, title, cmd.p, body.p);
    }
    free(cmd.p);
    free(body.p);
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, PROG ": no CUDA device; nothing to measure (exit 77: skipped)\n");
        return 77;
    }
    if (o.device >= ndev)
        cli_die_usage(PROG, "--device %d: this machine has %d CUDA device%s", o.device, ndev,
                      ndev == 1 ? "" : "s");
    CK(cudaSetDevice(o.device));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, o.device));
    nvjpegHandle_t h;
    unsigned engines = 0, cores = 0;
    if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &h) != NVJPEG_STATUS_SUCCESS ||
        nvjpegGetHardwareDecoderInfo(h, &engines, &cores) != NVJPEG_STATUS_SUCCESS ||
        engines == 0) {
        fprintf(stderr, PROG ": %s has no JPEG engine nvJPEG can use (exit 77: skipped)\n",
                prop.name);
        return 77;
    }
    set s;
    load_set(&o, h, &s);
    nvjpegDestroy(h);
    if (s.engine.n == 0)
        die("--data %s: none of its %u files is one the engine takes at up to 2 MP", o.data,
            s.files);
    row rows[4];
    unsigned n = 0;
    rows[n++] = (row){.name = "engine, 1 state", .small = o.batch, .threads = 1};
    rows[n++] = (row){.name = "engine, 2 states", .small = o.batch, .threads = 2};
    if (s.large.n) {
        rows[n++] = (row){.name = "large alone", .big = LARGE_BATCH, .threads = 1};
        rows[n++] = (row){.name = "large within a batch", .small = o.batch - LARGE_IN_BATCH,
                          .big = LARGE_IN_BATCH, .threads = 1};
    }
    for (unsigned i = 0; i < n; i++)
        measure(&o, &s, &rows[i]);
    report(&o, &s, rows, n, prop.name, engines, argc, argv);
    return 0;
}
