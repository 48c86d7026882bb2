/*
 * bench_transfer: host<->device copy bandwidth on this machine, the table
 * NVIDIA's bandwidthTest and the classic pinned-vs-pageable comparisons print.
 *
 *   bench_transfer
 *   bench_transfer --sizes 64K,1M,64M,256M --reps 20 --json
 *   bench_transfer --device 1 --append-to /tmp/transfer.md
 *
 * Three kinds of host memory:
 *   pageable    malloc, every page touched before timing;
 *   pinned      cudaHostAlloc;
 *   registered  a memfd MAP_SHARED mapping page-locked with cudaHostRegister,
 *               which is what feeder's FEEDER_PIN_REGISTER does with its batch
 *               slots (the memfd is fresh, so registering also faults its
 *               pages in, as at a loader's start).
 * For each kind and size: host to device, device to host, and both at once
 * (H2D on one stream, D2H on another, issued alternately so neither waits for
 * the other to be queued); both-at-once reports each direction and the sum,
 * which is all bytes moved over the time until the later stream finished.
 * The "alloc/register ms" column times malloc + touch, cudaHostAlloc or
 * cudaHostRegister of one buffer of that size.
 *
 * A timing is a pair of cudaEvents around --reps back-to-back copies on one
 * stream, after an untimed warm-up; each figure is the median of --repeats
 * timings, in GB/s of 1e9 bytes. Before timing, every (kind, size) copies a
 * pattern up and back and compares it, so a fast but wrong path is caught.
 *
 * The headline is pinned H2D at 64 MiB and 256 MiB: feeder's own pinned path
 * must reach 90% of it.
 *
 * Output: a Markdown table on stdout (or JSON with --json) and, with
 * --append-to FILE, the same table with the command line, date and machine
 * appended to FILE. Progress lines go to stderr.
 * Exit status: 0 done, 1 a CUDA call or a copy check failed, 2 bad arguments,
 * 77 no CUDA device (skipped).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "benchutil.h"
#include "benchutil_cuda.h"
#include "cli.h"
#include "feeder.h"

#ifndef FEEDER_SOURCE_DIR
#define FEEDER_SOURCE_DIR "."
#endif

#define PROG "bench_transfer"
#define MAX_SIZES 32
#define MAX_REPEATS 101
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
/* Auto --reps: enough copies that one timing moves about this much. */
#define AUTO_BYTES (256 * MIB)
#define AUTO_REPS_MIN 10u
#define AUTO_REPS_MAX 1000u

#define die(...) cli_die(PROG, __VA_ARGS__)
#define die_usage(...) cli_die_usage(PROG, __VA_ARGS__)

/* Every CUDA call goes through this: a failure names the call, where it was
 * made and the runtime's own text, then exits 1. */
#define CK(call) BU_CK(PROG, call)

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct opts {
    int device;
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    unsigned reps;    /* 0: auto, per size */
    unsigned repeats;
    int json;
    const char *append_to;
    const char *label;
} opts;

/* An unsigned number with an optional K/M/G (binary) suffix, in [min, max]. */
static uint64_t parse_num(const char *opt, const char *s, int suffix, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        goto bad;
    uint64_t mul = 1;
    if (suffix && *end) {
        switch (*end) {
        case 'k': case 'K': mul = KIB; break;
        case 'm': case 'M': mul = MIB; break;
        case 'g': case 'G': mul = GIB; break;
        default: goto bad;
        }
        end++;
    }
    if (*end || v > max / mul || v * mul < min || v * mul > max)
        goto bad;
    return v * mul;
bad:
    die_usage("%s '%s': expected %s in [%llu, %llu]", opt, s,
              suffix ? "a size (bytes, or with K, M, G)" : "an integer",
              (unsigned long long)min, (unsigned long long)max);
}

static void parse_sizes(const char *prog, const char *s, void *dest)
{
    opts *o = dest;
    (void)prog;
    char buf[1024];
    if (strlen(s) >= sizeof(buf))
        die_usage("--sizes: list too long");
    strcpy(buf, s);
    o->nsizes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES)
            die_usage("--sizes: at most %d sizes", MAX_SIZES);
        o->sizes[o->nsizes++] = (size_t)parse_num("--sizes", t, 1, 1, 8 * GIB);
    }
    if (o->nsizes == 0)
        die_usage("--sizes '%s': expected a comma-separated list such as 64K,1M,256M", s);
}

static void parse_args(opts *o, int argc, char **argv)
{
    static const size_t defaults[] = {64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB,
                                      16 * MIB, 64 * MIB, 256 * MIB};
    memset(o, 0, sizeof(*o));
    o->nsizes = sizeof(defaults) / sizeof(defaults[0]);
    memcpy(o->sizes, defaults, sizeof(defaults));
    o->repeats = 5;
    int no_append = 0;
    cli_opt t[] = {
        CLI_UINT("device", "N", o->device, 0, 1023, "CUDA device (0)"),
        CLI_FUNC("sizes", "LIST", parse_sizes, o,
                 "copy sizes, bytes or with K, M, G (KiB, MiB, GiB), e.g.\n"
                 "64K,1M,256M (64K,256K,1M,4M,16M,64M,256M)"),
        CLI_UINT("reps", "N", o->reps, 1, 1000000,
                 "copies per timing (default: enough to move ~256 MiB,\nbetween 10 and 1000)"),
        CLI_UINT("repeats", "N", o->repeats, 1, MAX_REPEATS,
                 "timings per figure; the median is reported (5)"),
        BU_CLI_REPORT_OPTIONS(o->json, o->append_to, o->label),
        CLI_FLAG("no-append", no_append, "the default (kept so older command lines run)"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = t,
                     .epilog = "Exit status: 0 done, 1 a CUDA call or a copy check failed, 2 "
                               "bad arguments,\n77 no CUDA device (skipped).\n"};
    cli_parse(&spec, argc, argv);
}

static unsigned reps_for(const opts *o, size_t bytes)
{
    if (o->reps)
        return o->reps;
    size_t r = AUTO_BYTES / bytes;
    return r < AUTO_REPS_MIN ? AUTO_REPS_MIN : r > AUTO_REPS_MAX ? AUTO_REPS_MAX : (unsigned)r;
}

static void fmt_size(char *out, size_t len, size_t bytes)
{
    if (bytes % GIB == 0)
        snprintf(out, len, "%zu GiB", bytes / GIB);
    else if (bytes % MIB == 0)
        snprintf(out, len, "%zu MiB", bytes / MIB);
    else if (bytes % KIB == 0)
        snprintf(out, len, "%zu KiB", bytes / KIB);
    else
        snprintf(out, len, "%zu B", bytes);
}

/* ------------------------------------------------------------------------ */
/* Host memory                                                               */
/* ------------------------------------------------------------------------ */

typedef enum mem_kind { MEM_PAGEABLE, MEM_PINNED, MEM_REGISTERED, MEM_KINDS } mem_kind;
static const char *const mem_names[] = {"pageable", "pinned", "registered"};

typedef struct hostbuf {
    mem_kind kind;
    uint8_t *p;
    size_t bytes;
    int fd;            /* registered: the memfd */
    double setup_ms;   /* malloc + touch, cudaHostAlloc, or cudaHostRegister */
} hostbuf;

/* Returns 0, or (registered only) the cudaHostRegister error, with nothing
 * left allocated: a machine that cannot register still measures the rest. */
static cudaError_t hostbuf_alloc(hostbuf *h, mem_kind kind, size_t bytes)
{
    memset(h, 0, sizeof(*h));
    h->kind = kind;
    h->bytes = bytes;
    h->fd = -1;
    uint64_t t0 = bu_now_ns();
    switch (kind) {
    case MEM_PAGEABLE:
        h->p = malloc(bytes);
        if (!h->p)
            die("malloc(%zu): out of memory", bytes);
        /* Touched, so the timing does not include first-touch page faults. */
        memset(h->p, 0x5a, bytes);
        h->setup_ms = (bu_now_ns() - t0) / 1e6;
        break;
    case MEM_PINNED: {
        void *p;
        CK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
        h->p = p;
        h->setup_ms = (bu_now_ns() - t0) / 1e6;
        break;
    }
    case MEM_REGISTERED: {
        h->fd = memfd_create(PROG, MFD_CLOEXEC);
        if (h->fd < 0)
            die("memfd_create: %s", strerror(errno));
        if (ftruncate(h->fd, (off_t)bytes) < 0)
            die("ftruncate(memfd, %zu): %s", bytes, strerror(errno));
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, 0);
        if (p == MAP_FAILED)
            die("mmap(memfd, %zu): %s", bytes, strerror(errno));
        h->p = p;
        t0 = bu_now_ns();
        cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
        h->setup_ms = (bu_now_ns() - t0) / 1e6;
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky; clear it for the next call */
            munmap(p, bytes);
            close(h->fd);
            h->p = NULL;
            h->fd = -1;
            return e;
        }
        break;
    }
    default:
        die("unknown memory kind %d", kind);
    }
    return cudaSuccess;
}

static void hostbuf_free(hostbuf *h)
{
    if (!h->p)
        return;
    switch (h->kind) {
    case MEM_PAGEABLE:
        free(h->p);
        break;
    case MEM_PINNED:
        CK(cudaFreeHost(h->p));
        break;
    case MEM_REGISTERED:
        CK(cudaHostUnregister(h->p));
        if (munmap(h->p, h->bytes) < 0)
            die("munmap: %s", strerror(errno));
        close(h->fd);
        break;
    default:
        break;
    }
    h->p = NULL;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct gpu {
    cudaStream_t s[2];
    cudaEvent_t start, end[2];
    uint8_t *dev[2]; /* two device buffers of the largest size */
} gpu;

/* `reps` copies on one stream between two events; seconds on the GPU. */
static double time_one_way(gpu *g, void *dst, const void *src, size_t bytes,
                           enum cudaMemcpyKind kind, unsigned reps)
{
    CK(cudaEventRecord(g->start, g->s[0]));
    for (unsigned i = 0; i < reps; i++)
        CK(cudaMemcpyAsync(dst, src, bytes, kind, g->s[0]));
    CK(cudaEventRecord(g->end[0], g->s[0]));
    CK(cudaEventSynchronize(g->end[0]));
    float ms;
    CK(cudaEventElapsedTime(&ms, g->start, g->end[0]));
    return ms / 1e3;
}

/* `reps` H2D copies on stream 0 and `reps` D2H copies on stream 1, both
 * starting at one event. Seconds until each stream is done. */
static void time_both(gpu *g, const hostbuf *src, hostbuf *dst, size_t bytes, unsigned reps,
                      double *t_h2d, double *t_d2h)
{
    CK(cudaEventRecord(g->start, g->s[0]));
    CK(cudaStreamWaitEvent(g->s[1], g->start, 0));
    /* Alternated: a pageable copy blocks the host until it is staged, so
     * queueing all H2D copies first would serialise the directions. */
    for (unsigned i = 0; i < reps; i++) {
        CK(cudaMemcpyAsync(g->dev[0], src->p, bytes, cudaMemcpyHostToDevice, g->s[0]));
        CK(cudaMemcpyAsync(dst->p, g->dev[1], bytes, cudaMemcpyDeviceToHost, g->s[1]));
    }
    CK(cudaEventRecord(g->end[0], g->s[0]));
    CK(cudaEventRecord(g->end[1], g->s[1]));
    CK(cudaEventSynchronize(g->end[0]));
    CK(cudaEventSynchronize(g->end[1]));
    float a, b;
    CK(cudaEventElapsedTime(&a, g->start, g->end[0]));
    CK(cudaEventElapsedTime(&b, g->start, g->end[1]));
    *t_h2d = a / 1e3;
    *t_d2h = b / 1e3;
}

/* Copy a pattern up and back through device buffer 0 and compare. */
static void check_copy(gpu *g, hostbuf *src, hostbuf *dst, size_t bytes, uint64_t salt)
{
    for (size_t i = 0; i < bytes; i++)
        src->p[i] = (uint8_t)((i * 131 + salt * 7 + (i >> 12)) & 0xff);
    memset(dst->p, 0, bytes);
    CK(cudaMemsetAsync(g->dev[0], 0xee, bytes, g->s[0]));
    CK(cudaMemcpyAsync(g->dev[0], src->p, bytes, cudaMemcpyHostToDevice, g->s[0]));
    CK(cudaMemcpyAsync(dst->p, g->dev[0], bytes, cudaMemcpyDeviceToHost, g->s[0]));
    /* Never read a device-to-host copy before a synchronisation. */
    CK(cudaStreamSynchronize(g->s[0]));
    if (memcmp(src->p, dst->p, bytes) != 0) {
        size_t i = 0;
        while (src->p[i] == dst->p[i])
            i++;
        char sz[32];
        fmt_size(sz, sizeof(sz), bytes);
        die("copy check failed: %s memory, %s: byte %zu came back as 0x%02x, sent 0x%02x",
            mem_names[src->kind], sz, i, dst->p[i], src->p[i]);
    }
}

typedef struct row {
    mem_kind kind;
    size_t bytes;
    unsigned reps;
    char skipped[256]; /* why this row has no figures, or "" */
    double setup_ms;
    /* GB/s, one per repeat, then the median */
    double h2d[MAX_REPEATS], d2h[MAX_REPEATS], bh2d[MAX_REPEATS], bd2h[MAX_REPEATS],
        bsum[MAX_REPEATS];
    double m_h2d, m_d2h, m_bh2d, m_bd2h, m_bsum;
} row;

static void measure(gpu *g, const opts *o, mem_kind kind, size_t bytes, row *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->bytes = bytes;
    r->reps = reps_for(o, bytes);
    hostbuf src, dst;
    cudaError_t e = hostbuf_alloc(&src, kind, bytes);
    if (e == cudaSuccess && (e = hostbuf_alloc(&dst, kind, bytes)) != cudaSuccess)
        hostbuf_free(&src);
    if (e != cudaSuccess) {
        snprintf(r->skipped, sizeof(r->skipped), "cudaHostRegister failed: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        return;
    }
    r->setup_ms = src.setup_ms;
    check_copy(g, &src, &dst, bytes, bytes + kind);

    const unsigned warm = r->reps / 4 + 1;
    const double gb = (double)bytes * r->reps / 1e9;
    double th, td;
    time_one_way(g, g->dev[0], src.p, bytes, cudaMemcpyHostToDevice, warm);
    for (unsigned i = 0; i < o->repeats; i++)
        r->h2d[i] = gb / time_one_way(g, g->dev[0], src.p, bytes, cudaMemcpyHostToDevice,
                                      r->reps);
    time_one_way(g, dst.p, g->dev[1], bytes, cudaMemcpyDeviceToHost, warm);
    for (unsigned i = 0; i < o->repeats; i++)
        r->d2h[i] = gb / time_one_way(g, dst.p, g->dev[1], bytes, cudaMemcpyDeviceToHost,
                                      r->reps);
    time_both(g, &src, &dst, bytes, warm, &th, &td);
    for (unsigned i = 0; i < o->repeats; i++) {
        time_both(g, &src, &dst, bytes, r->reps, &th, &td);
        r->bh2d[i] = gb / th;
        r->bd2h[i] = gb / td;
        r->bsum[i] = 2 * gb / (th > td ? th : td);
    }
    r->m_h2d = bu_median(r->h2d, o->repeats);
    r->m_d2h = bu_median(r->d2h, o->repeats);
    r->m_bh2d = bu_median(r->bh2d, o->repeats);
    r->m_bd2h = bu_median(r->bd2h, o->repeats);
    r->m_bsum = bu_median(r->bsum, o->repeats);
    hostbuf_free(&src);
    hostbuf_free(&dst);
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct context {
    bu_machine m;
    bu_sbuf cmd;
    int device;
    char gpu_name[256];
    int cc_major, cc_minor;
    size_t gpu_mem;
    char pci[32];
    int copy_engines;
    int driver, runtime;
} context;

static void fmt_cuda_version(char *out, size_t len, int v)
{
    snprintf(out, len, "%d.%d", v / 1000, v % 1000 / 10);
}

static void make_header(const opts *o, const context *cx, bu_sbuf *b)
{
    char drv[16], rt[16];
    fmt_cuda_version(drv, sizeof(drv), cx->driver);
    fmt_cuda_version(rt, sizeof(rt), cx->runtime);
    bu_sb_printf(b, "feeder %s " PROG " on %s (%s)\n", feeder_version_string(), cx->m.label,
                 cx->m.cpu);
    bu_sb_printf(b, "GPU %d: %s (sm_%d%d, %.1f GiB, PCI %s, %d copy engine%s); CUDA driver %s, "
                 "runtime %s\n", cx->device, cx->gpu_name, cx->cc_major, cx->cc_minor,
                 cx->gpu_mem / (double)GIB, cx->pci, cx->copy_engines,
                 cx->copy_engines == 1 ? "" : "s", drv, rt);
    if (o->reps)
        bu_sb_printf(b, "%u copies per timing", o->reps);
    else
        bu_sb_printf(b, "copies per timing: enough to move ~%zu MiB (%u..%u)", AUTO_BYTES / MIB,
                     AUTO_REPS_MIN, AUTO_REPS_MAX);
    bu_sb_printf(b, ", median of %u timings, GB/s = 1e9 bytes/s\n", o->repeats);
}

static void make_table(const row *rows, unsigned n, bu_sbuf *b)
{
    const char *heads[] = {"memory", "size", "copies", "alloc/register ms", "H2D GB/s",
                           "D2H GB/s", "both: H2D GB/s", "both: D2H GB/s", "both: sum GB/s"};
    const int right[] = {0, 1, 1, 1, 1, 1, 1, 1, 1};
    bu_table t;
    bu_table_init(&t, 9, heads, right);
    for (unsigned i = 0; i < n; i++) {
        const row *r = &rows[i];
        char(*c)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(c[0], BU_TABLE_CELL, "%s", mem_names[r->kind]);
        fmt_size(c[1], BU_TABLE_CELL, r->bytes);
        snprintf(c[2], BU_TABLE_CELL, "%u", r->reps);
        if (r->skipped[0]) {
            bu_cells_dash(c, 3, 9);
            continue;
        }
        snprintf(c[3], BU_TABLE_CELL, "%.2f", r->setup_ms);
        snprintf(c[4], BU_TABLE_CELL, "%.1f", r->m_h2d);
        snprintf(c[5], BU_TABLE_CELL, "%.1f", r->m_d2h);
        snprintf(c[6], BU_TABLE_CELL, "%.1f", r->m_bh2d);
        snprintf(c[7], BU_TABLE_CELL, "%.1f", r->m_bd2h);
        snprintf(c[8], BU_TABLE_CELL, "%.1f", r->m_bsum);
    }
    bu_table_render(&t, b);
    bu_table_free(&t);
}

static const row *find_row(const row *rows, unsigned n, mem_kind kind, size_t bytes)
{
    for (unsigned i = 0; i < n; i++)
        if (rows[i].kind == kind && rows[i].bytes == bytes && !rows[i].skipped[0])
            return &rows[i];
    return NULL;
}

static void make_footer(const row *rows, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "alloc/register ms: malloc + touching every page (pageable), cudaHostAlloc "
                 "(pinned), cudaHostRegister of a fresh memfd mapping (registered), for one "
                 "buffer of that size. both: H2D and D2H at once on two streams; the sum is "
                 "all bytes over the time until the later direction finished.\n");
    for (unsigned i = 0; i < n; i++)
        if (rows[i].skipped[0]) {
            bu_sb_printf(b, "%s memory was not measured: %s\n", mem_names[rows[i].kind],
                         rows[i].skipped);
            break;
        }
    static const size_t head_sizes[] = {64 * MIB, 256 * MIB};
    bu_sb_printf(b, "Headline: pinned H2D");
    for (unsigned k = 0; k < 2; k++) {
        const row *p = find_row(rows, n, MEM_PINNED, head_sizes[k]);
        char sz[32];
        fmt_size(sz, sizeof(sz), head_sizes[k]);
        if (p)
            bu_sb_printf(b, "%s %s: %.1f GB/s (90%%: %.1f GB/s)", k ? ";" : "", sz, p->m_h2d,
                         0.9 * p->m_h2d);
        else
            bu_sb_printf(b, "%s %s: not measured (not in --sizes)", k ? ";" : "", sz);
    }
    bu_sb_printf(b, ". feeder's own pinned path must reach 90%% of it.\n");
    /* How the other kinds compare with pinned at the same size. */
    const row *p64 = find_row(rows, n, MEM_PINNED, 64 * MIB);
    if (p64) {
        const row *g = find_row(rows, n, MEM_PAGEABLE, 64 * MIB);
        const row *r = find_row(rows, n, MEM_REGISTERED, 64 * MIB);
        bu_sb_printf(b, "At 64 MiB, H2D relative to pinned:");
        if (g)
            bu_sb_printf(b, " pageable %.0f%%", 100 * g->m_h2d / p64->m_h2d);
        if (r)
            bu_sb_printf(b, "%s registered %.0f%%", g ? "," : "", 100 * r->m_h2d / p64->m_h2d);
        bu_sb_printf(b, ".\n");
    }
}

static void json_array(bu_sbuf *b, const char *name, const double *v, unsigned n)
{
    bu_sb_printf(b, "\"%s\": [", name);
    for (unsigned i = 0; i < n; i++)
        bu_sb_printf(b, "%s%.3f", i ? ", " : "", v[i]);
    bu_sb_printf(b, "]");
}

static void make_json(const opts *o, const context *cx, const row *rows, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "{\n  \"tool\": \"feeder\",\n  \"benchmark\": \"" PROG "\",\n  \"version\": ");
    bu_sb_json_str(b, feeder_version_string());
    bu_sb_printf(b, ",\n  \"label\": ");
    bu_sb_json_str(b, cx->m.label);
    bu_sb_printf(b, ",\n  \"cpu\": ");
    bu_sb_json_str(b, cx->m.cpu);
    bu_sb_printf(b, ",\n  \"cores\": %ld,\n  \"date\": ", cx->m.cores);
    bu_sb_json_str(b, cx->m.date);
    bu_sb_printf(b, ",\n  \"command\": ");
    bu_sb_json_str(b, cx->cmd.p);
    bu_sb_printf(b, ",\n  \"gpu\": {\"device\": %d, \"name\": ", cx->device);
    bu_sb_json_str(b, cx->gpu_name);
    bu_sb_printf(b, ", \"compute_capability\": \"%d.%d\", \"memory_bytes\": %zu, \"pci\": ",
                 cx->cc_major, cx->cc_minor, cx->gpu_mem);
    bu_sb_json_str(b, cx->pci);
    bu_sb_printf(b, ", \"copy_engines\": %d, \"cuda_driver\": %d, \"cuda_runtime\": %d},\n",
                 cx->copy_engines, cx->driver, cx->runtime);
    bu_sb_printf(b, "  \"config\": {\"reps\": %u, \"auto_reps_bytes\": %zu, \"repeats\": %u, "
                 "\"sizes\": [", o->reps, o->reps ? (size_t)0 : AUTO_BYTES, o->repeats);
    for (unsigned i = 0; i < o->nsizes; i++)
        bu_sb_printf(b, "%s%zu", i ? ", " : "", o->sizes[i]);
    bu_sb_printf(b, "]},\n  \"results\": [");
    for (unsigned i = 0; i < n; i++) {
        const row *r = &rows[i];
        bu_sb_printf(b, "%s\n    {\"memory\": \"%s\", \"bytes\": %zu, \"copies\": %u, ",
                     i ? "," : "", mem_names[r->kind], r->bytes, r->reps);
        if (r->skipped[0]) {
            bu_sb_printf(b, "\"skipped\": ");
            bu_sb_json_str(b, r->skipped);
            bu_sb_printf(b, "}");
            continue;
        }
        bu_sb_printf(b, "\"setup_ms\": %.3f,\n     \"h2d_gbps\": %.3f, \"d2h_gbps\": %.3f, "
                     "\"both_h2d_gbps\": %.3f, \"both_d2h_gbps\": %.3f, "
                     "\"both_sum_gbps\": %.3f,\n     ",
                     r->setup_ms, r->m_h2d, r->m_d2h, r->m_bh2d, r->m_bd2h, r->m_bsum);
        json_array(b, "h2d_each", r->h2d, o->repeats);
        bu_sb_printf(b, ", ");
        json_array(b, "d2h_each", r->d2h, o->repeats);
        bu_sb_printf(b, ",\n     ");
        json_array(b, "both_h2d_each", r->bh2d, o->repeats);
        bu_sb_printf(b, ", ");
        json_array(b, "both_d2h_each", r->bd2h, o->repeats);
        bu_sb_printf(b, "}");
    }
    bu_sb_printf(b, "\n  ],\n  \"headline\": {");
    static const size_t head_sizes[] = {64 * MIB, 256 * MIB};
    for (unsigned k = 0; k < 2; k++) {
        const row *p = find_row(rows, n, MEM_PINNED, head_sizes[k]);
        bu_sb_printf(b, "%s\"pinned_h2d_%zumib_gbps\": ", k ? ", " : "", head_sizes[k] / MIB);
        if (p)
            bu_sb_printf(b, "%.3f", p->m_h2d);
        else
            bu_sb_printf(b, "null");
    }
    bu_sb_printf(b, "}\n}\n");
}

/* ------------------------------------------------------------------------ */

/* The device's name, capability, memory, PCI address, copy engines and versions. */
static void device_info(context *cx, int device)
{
    cx->device = device;
    CK(cudaSetDevice(device));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, device));
    snprintf(cx->gpu_name, sizeof(cx->gpu_name), "%s", prop.name);
    cx->cc_major = prop.major;
    cx->cc_minor = prop.minor;
    cx->gpu_mem = prop.totalGlobalMem;
    snprintf(cx->pci, sizeof(cx->pci), "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
             prop.pciDeviceID);
    cx->copy_engines = prop.asyncEngineCount;
    CK(cudaDriverGetVersion(&cx->driver));
    CK(cudaRuntimeGetVersion(&cx->runtime));
}

/* Two streams, their events and a device buffer each, as large as the largest size. */
static void gpu_open(gpu *g, const opts *o)
{
    size_t maxb = 0;
    for (unsigned i = 0; i < o->nsizes; i++)
        maxb = o->sizes[i] > maxb ? o->sizes[i] : maxb;
    memset(g, 0, sizeof(*g));
    for (int i = 0; i < 2; i++) {
        CK(cudaStreamCreateWithFlags(&g->s[i], cudaStreamNonBlocking));
        CK(cudaEventCreate(&g->end[i]));
        void *d;
        CK(cudaMalloc(&d, maxb));
        g->dev[i] = d;
        CK(cudaMemset(g->dev[i], i ? 0x3c : 0xc3, maxb));
    }
    CK(cudaEventCreate(&g->start));
}

static void gpu_close(gpu *g)
{
    for (int i = 0; i < 2; i++) {
        CK(cudaStreamDestroy(g->s[i]));
        CK(cudaEventDestroy(g->end[i]));
        CK(cudaFree(g->dev[i]));
    }
    CK(cudaEventDestroy(g->start));
}

/* Every (kind, size), with a progress line each. */
static row *measure_all(gpu *g, const opts *o, unsigned *nrows)
{
    *nrows = MEM_KINDS * o->nsizes;
    row *rows = calloc(*nrows, sizeof(row));
    if (!rows)
        die("out of memory");
    unsigned k = 0;
    for (int kind = 0; kind < MEM_KINDS; kind++)
        for (unsigned i = 0; i < o->nsizes; i++, k++) {
            row *r = &rows[k];
            measure(g, o, (mem_kind)kind, o->sizes[i], r);
            char sz[32];
            fmt_size(sz, sizeof(sz), r->bytes);
            if (r->skipped[0])
                fprintf(stderr, "%-10s %8s  skipped: %s\n", mem_names[kind], sz, r->skipped);
            else
                fprintf(stderr, "%-10s %8s  H2D %6.1f  D2H %6.1f  both %6.1f + %6.1f = %6.1f "
                        "GB/s  (%u copies, setup %.2f ms)\n", mem_names[kind], sz, r->m_h2d,
                        r->m_d2h, r->m_bh2d, r->m_bd2h, r->m_bsum, r->reps, r->setup_ms);
        }
    return rows;
}

/* The table (or JSON) on stdout, and the record with --append-to. */
static void report(const opts *o, context *cx, const row *rows, unsigned nrows)
{
    bu_machine_init(&cx->m, o->label);
    bu_report r = {0};
    make_header(o, cx, &r.header);
    make_table(rows, nrows, &r.table);
    make_footer(rows, nrows, &r.footer);
    if (o->json)
        make_json(o, cx, rows, nrows, &r.json);
    char title[320];
    snprintf(title, sizeof(title), PROG ", %s", cx->gpu_name);
    bu_report_finish(&r, o->json, o->append_to, PROG, &cx->m, title,
                     cx->cmd.p);
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        fprintf(stderr, PROG ": no CUDA device: %s; nothing to measure (exit 77: skipped)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
        return 77;
    }
    if (o.device >= ndev)
        die_usage("--device %d: this machine has %d CUDA device%s (0..%d)", o.device, ndev,
                  ndev == 1 ? "" : "s", ndev - 1);
    context cx;
    memset(&cx, 0, sizeof(cx));
    bu_command_line(&cx.cmd, PROG, argc, argv);
    device_info(&cx, o.device);
    gpu g;
    gpu_open(&g, &o);
    unsigned nrows;
    row *rows = measure_all(&g, &o, &nrows);
    gpu_close(&g);
    report(&o, &cx, rows, nrows);
    free(cx.cmd.p);
    free(rows);
    return 0;
}
