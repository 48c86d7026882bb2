/*
 * bench_crc: how fast feeder__crc32c checks packed RAW records (for
 * VERIFY_CRC on the GPU path, where each worker checksums its records where
 * they lie in the file's mapping while the GPU copies them).
 *
 *   bench_crc [--record BYTES] [--cold-mib N] [--threads LIST] [--rounds R]
 *             [--json] [--append-to FILE]
 *
 * Records of BYTES (150,528 = 224x224x3) are checked whole, one call each,
 * from two buffers:
 *   hot   1 MiB per thread (the records that fit), checked over and over:
 *         the function's own speed, data in L2;
 *   cold  N MiB (1024) shared by all threads, larger than any L3, 4 KiB pages
 *         as a file mapping has (MADV_NOHUGEPAGE); each thread visits every
 *         record in its own shuffled order, as a shuffled epoch does.
 * Paths:
 *   crc32c  feeder__crc32c, what the workers call;
 *   table   feeder__crc32c_portable, the byte-wise table (on 1/16 of the
 *           records: it is slow);
 *   read    a plain read of the same bytes (XOR of 16-byte words), about
 *           the bound that memory sets for any checksum on one core.
 * For each thread count of LIST (1), R rounds (5) run; a row's figure is the
 * median round's bytes over its wall time (all threads start together), and
 * per core that divided by the threads. The table and JSON go to stdout;
 * --append-to FILE appends the record (command, machine, table) to FILE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "benchutil.h"
#include "cli.h"
#include "common/common.h"

#define PROG "bench_crc"
#define MAX_ROUNDS 101
#define MAX_THREADS 256
#define HOT_BYTES ((size_t)1 << 20)
#define HOT_PASSES 600  /* passes over the hot records per round */
#define TABLE_SHARE 16  /* the table path checks 1/16 of what the others do */

enum { P_CRC32C, P_TABLE, P_READ, P_COUNT };
static const char *path_names[] = {"crc32c", "table", "read"};

typedef struct opts {
    uint32_t record;
    uint32_t cold_mib;
    uint32_t rounds;
    uint64_t threads[16];
    unsigned nthreads;
    int json;
    const char *append_to;
} opts;

typedef struct row {
    int cold, path;
    unsigned threads;
    double gbps;
} row;

/* One thread's work in a round: `n` records of `len` at base + order[k] * len. */
typedef struct worker {
    pthread_t tid;
    pthread_barrier_t *start;
    const uint8_t *base;
    const uint32_t *order;
    size_t n, len;
    int path;
    unsigned passes;
    uint64_t sink;
} worker;

/* XOR of the bytes as 16-byte words, four in flight (GCC's vector type:
 * SSE2 loads on x86-64, NEON on arm64), so the loads, not the XORs, bound it. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

static inline v2u64 load16(const uint8_t *p)
{
    v2u64 w;
    memcpy(&w, p, 16);
    return w;
}

static uint64_t read_words(const uint8_t *p, size_t len)
{
    v2u64 a = {0, 0}, b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 64 <= len; i += 64) {
        a ^= load16(p + i);
        b ^= load16(p + i + 16);
        c ^= load16(p + i + 32);
        d ^= load16(p + i + 48);
    }
    a ^= b ^ c ^ d;
    uint64_t x = a[0] ^ a[1];
    for (; i < len; i++)
        x ^= p[i];
    return x;
}

static uint64_t check(int path, const uint8_t *p, size_t len)
{
    if (path == P_CRC32C)
        return feeder__crc32c(0, p, len);
    if (path == P_TABLE)
        return feeder__crc32c_portable(0, p, len);
    return read_words(p, len);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    uint64_t s = 0;
    for (unsigned pass = 0; pass < w->passes; pass++)
        for (size_t k = 0; k < w->n; k++)
            s += check(w->path, w->base + (size_t)w->order[k] * w->len, w->len);
    w->sink = s;
    return NULL;
}

/* A random permutation of 0..n-1 (xorshift64*, seeded per thread). */
static uint32_t *shuffled(size_t n, uint64_t seed)
{
    uint32_t *o = malloc(n * sizeof(*o));
    if (!o)
        cli_die(PROG, "out of memory");
    for (size_t i = 0; i < n; i++)
        o[i] = (uint32_t)i;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = n; i > 1; i--) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        size_t j = (size_t)((x * 0x2545F4914F6CDD1Dull) % i);
        uint32_t t = o[i - 1];
        o[i - 1] = o[j];
        o[j] = t;
    }
    return o;
}

static uint8_t *filled(size_t bytes, uint64_t seed, int small_pages)
{
    uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        cli_die(PROG, "cannot map %zu bytes", bytes);
    if (small_pages)
        (void)madvise(p, bytes, MADV_NOHUGEPAGE);
    uint64_t x = seed | 1;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    return p;
}

typedef struct buffers {
    uint8_t *cold, *hot[MAX_THREADS];
    uint32_t *cold_order[MAX_THREADS], *hot_order;
    size_t cold_n, hot_n;
} buffers;

/* What one thread checks in a round: `*n` records, `*passes` times over. */
static void plan(const buffers *b, int cold, int path, size_t *n, unsigned *passes)
{
    *n = cold ? b->cold_n : b->hot_n;
    *passes = cold ? 1 : HOT_PASSES;
    if (path != P_TABLE)
        return;
    if (cold)
        *n /= TABLE_SHARE;
    else
        *passes /= TABLE_SHARE;
}

/* Seconds of one round of `path` over `cold` or hot records in `nt` threads. */
static double one_round(buffers *b, const opts *o, int cold, int path, unsigned nt)
{
    worker w[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, nt + 1);
    for (unsigned t = 0; t < nt; t++) {
        w[t] = (worker){.start = &start, .base = cold ? b->cold : b->hot[t],
                        .order = cold ? b->cold_order[t] : b->hot_order, .len = o->record,
                        .path = path};
        plan(b, cold, path, &w[t].n, &w[t].passes);
        if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]))
            cli_die(PROG, "cannot start thread %u", t);
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = bu_now_ns();
    for (unsigned t = 0; t < nt; t++)
        pthread_join(w[t].tid, NULL);
    double s = (double)(bu_now_ns() - t0) / 1e9;
    pthread_barrier_destroy(&start);
    return s;
}

static double measure(buffers *b, const opts *o, int cold, int path, unsigned nt)
{
    double gbps[MAX_ROUNDS];
    size_t n;
    unsigned passes;
    plan(b, cold, path, &n, &passes);
    double bytes = (double)n * passes * o->record * nt;
    (void)one_round(b, o, cold, path, nt); /* warm the caches and the pages */
    for (unsigned r = 0; r < o->rounds; r++)
        gbps[r] = bytes / one_round(b, o, cold, path, nt) / 1e9;
    return bu_median(gbps, o->rounds);
}

/* The fast path and the table agree on the records, or the figures mean nothing. */
static void cross_check(const buffers *b, const opts *o)
{
    for (size_t k = 0; k < b->hot_n; k++) {
        const uint8_t *p = b->hot[0] + k * o->record;
        uint32_t f = feeder__crc32c(0, p, o->record), t = feeder__crc32c_portable(0, p, o->record);
        if (f != t)
            cli_die(PROG, "record %zu: feeder__crc32c 0x%08x, the table 0x%08x", k, f, t);
    }
}

static void setup(buffers *b, const opts *o, unsigned max_threads)
{
    b->hot_n = HOT_BYTES / o->record;
    b->cold_n = ((size_t)o->cold_mib << 20) / o->record;
    if (!b->hot_n || b->cold_n < TABLE_SHARE)
        cli_die_usage(PROG, "--record %u: 1 MiB must hold one record and --cold-mib %u at "
                            "least %d", o->record, o->cold_mib, TABLE_SHARE);
    b->cold = filled(b->cold_n * o->record, 1, 1);
    b->hot_order = shuffled(b->hot_n, 0);
    for (unsigned t = 0; t < max_threads; t++) {
        b->hot[t] = filled(b->hot_n * o->record, t + 2, 0);
        b->cold_order[t] = shuffled(b->cold_n, t + 1);
    }
}

static void teardown(buffers *b, const opts *o, unsigned max_threads)
{
    munmap(b->cold, b->cold_n * o->record);
    free(b->hot_order);
    for (unsigned t = 0; t < max_threads; t++) {
        munmap(b->hot[t], b->hot_n * o->record);
        free(b->cold_order[t]);
    }
}

static void report(const row *rows, unsigned n, const opts *o, int argc, char **argv)
{
    static const char *head[] = {"buffer", "path", "threads", "GB/s", "GB/s per core",
                                 "µs/record"};
    static const int right[] = {0, 0, 1, 1, 1, 1};
    bu_machine m;
    bu_machine_init(&m, NULL);
    bu_table t;
    bu_table_init(&t, 6, head, right);
    bu_sbuf js = {0}, body = {0}, cmd = {0};
    bu_sb_printf(&js, "{\"machine\": ");
    bu_sb_json_str(&js, m.label);
    bu_sb_printf(&js, ", \"cpu\": ");
    bu_sb_json_str(&js, m.cpu);
    bu_sb_printf(&js, ", \"record_bytes\": %u, \"cold_mib\": %u, \"rounds\": %u, \"rows\": [",
                 o->record, o->cold_mib, o->rounds);
    for (unsigned i = 0; i < n; i++) {
        const row *r = &rows[i];
        double core = r->gbps / r->threads;
        char(*c)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(c[0], BU_TABLE_CELL, "%s", r->cold ? "cold" : "hot");
        snprintf(c[1], BU_TABLE_CELL, "%s", path_names[r->path]);
        snprintf(c[2], BU_TABLE_CELL, "%u", r->threads);
        snprintf(c[3], BU_TABLE_CELL, "%.2f", r->gbps);
        snprintf(c[4], BU_TABLE_CELL, "%.2f", core);
        snprintf(c[5], BU_TABLE_CELL, "%.1f", o->record / core / 1e3);
        bu_sb_printf(&js, "%s{\"buffer\": \"%s\", \"path\": \"%s\", \"threads\": %u, "
                          "\"gbps\": %.3f, \"gbps_per_core\": %.3f}",
                     i ? ", " : "", c[0], c[1], r->threads, r->gbps, core);
    }
    bu_sb_printf(&js, "]}\n");
    bu_sb_printf(&body, "Records of %u bytes, one call each; hot: the records of 1 MiB per "
                        "thread, %d passes a round; cold: %u MiB shared, 4 KiB pages, every "
                        "record once a round in each thread's shuffled order (the table path: "
                        "1/%d of that). Median of %u rounds.\n\n",
                 o->record, HOT_PASSES, o->cold_mib, TABLE_SHARE, o->rounds);
    bu_table_render(&t, &body);
    if (o->json)
        fputs(js.p, stdout);
    else
        printf("%s: %s (%s)\n\n%s", PROG, m.label, m.cpu, body.p);
    if (o->append_to) {
        bu_command_line(&cmd, "build/bench/" PROG, argc, argv);
        bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &m,
                         "CRC32C of packed records, hot and from memory", cmd.p, body.p);
    }
    bu_table_free(&t);
    free(js.p);
    free(body.p);
    free(cmd.p);
}

static void parse_threads(const char *prog, const char *arg, void *dest)
{
    opts *o = dest;
    o->nthreads = cli_parse_list(prog, "--threads", arg, o->threads, 16, 1, MAX_THREADS);
}

int main(int argc, char **argv)
{
    opts o = {.record = 224 * 224 * 3, .cold_mib = 1024, .rounds = 5, .threads = {1},
              .nthreads = 1};
    cli_opt table[] = {
        CLI_UINT("record", "BYTES", o.record, 64, 1 << 20, "bytes of a record (150528)"),
        CLI_UINT("cold-mib", "N", o.cold_mib, 16, 1 << 20, "the cold buffer, MiB (1024)"),
        CLI_FUNC("threads", "LIST", parse_threads, &o, "thread counts to run, e.g. 1,4,15 (1)"),
        CLI_UINT("rounds", "R", o.rounds, 1, MAX_ROUNDS, "timed rounds; the median counts (5)"),
        CLI_FLAG("json", o.json, "JSON on stdout instead of the table"),
        CLI_STRING("append-to", "FILE", o.append_to, "append the record to FILE\n"
                                                     "(docs/BENCHMARKS.md, say)"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = table,
                     .usage = "usage: bench_crc [options]\n"
                              "CRC32C of packed records, hot and from memory.\n"};
    cli_parse(&spec, argc, argv);
    unsigned max_threads = 0;
    for (unsigned i = 0; i < o.nthreads; i++)
        if (o.threads[i] > max_threads)
            max_threads = (unsigned)o.threads[i];
    buffers b = {0};
    setup(&b, &o, max_threads);
    cross_check(&b, &o);
    row rows[2 * P_COUNT * 16];
    unsigned n = 0;
    for (int cold = 0; cold < 2; cold++)
        for (int path = 0; path < P_COUNT; path++)
            for (unsigned i = 0; i < o.nthreads; i++, n++)
                rows[n] = (row){cold, path, (unsigned)o.threads[i],
                                measure(&b, &o, cold, path, (unsigned)o.threads[i])};
    report(rows, n, &o, argc, argv);
    teardown(&b, &o, max_threads);
    return 0;
}
