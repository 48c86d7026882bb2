/*
 * bench_cache_write: how fast this machine's file system takes downloads
 * into the shard cache (docs/BENCHMARKS.md, "Shards over HTTP").
 *
 *   bench_cache_write [--dir DIR] [--mib N] [--threads 1,2,4,8] [--rounds R]
 *                     [--json] [--append-to FILE] [--label TEXT]
 *
 * T threads write N MiB (a multiple of 8) in 8 MiB chunks, chunk i by thread i mod T (as a
 * shard's lanes fetch them, remote/download.c), each chunk in 512 KiB
 * pwrites (the download's stage, remote/fetch.c), into files preallocated
 * with fallocate as the cache's partial copies are. Three rows a thread
 * count:
 *
 *   one file         every thread into one file: one shard's lanes
 *   a file a thread  each thread its chunks into a file of its own: shards
 *                    fetched at once
 *   one mapping      one file through a shared mapping, memcpy into it
 *
 * Each figure is GB/s (1e9 bytes) over the wall time from the threads'
 * start to the last one's end, the median of R rounds, after one untimed
 * round; each round writes fresh files, removed after it. The files go to DIR (default: the shard
 * cache's folder, $FEEDER_CACHE_DIR, else $XDG_CACHE_HOME/feeder/shards,
 * else ~/.cache/feeder/shards), since its file system is what is measured.
 * A file system that takes one file's buffered writes one at a time (ext4
 * holds the inode's lock for each pwrite) shows it as a "one file" column
 * that stops growing with T while "a file a thread" grows.
 *
 * The table (or JSON with --json) goes to stdout; --append-to FILE appends
 * the record (command, machine, table) to FILE, the only way this program
 * writes outside DIR. Exit status: 0 done, 1 a file could not be made or
 * written (the message names it), 2 bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "benchutil.h"
#include "cli.h"
#include "remote/remote.h"

#define PROG "bench_cache_write"
#define CHUNK (8u << 20)  /* FEEDER_REMOTE_PART_BYTES' default */
#define STAGE (512u << 10) /* FEEDER_REMOTE_BUFFER_BYTES' default */
#define MAX_THREADS 64
#define MAX_COUNTS 16

enum { ONE_FILE, FILE_EACH, MAPPING, MODES };
static const char *const mode_names[MODES] = {"one file", "a file a thread", "one mapping"};
static const char *const mode_keys[MODES] = {"one_file", "file_per_thread", "mapping"};

typedef struct opts {
    const char *dir, *threads, *append_to, *label;
    unsigned mib, rounds;
    int json;
    uint64_t counts[MAX_COUNTS];
    unsigned ncounts;
} opts;

typedef struct run {
    int mode;
    unsigned nthreads, nchunks;
    uint64_t total;
    int fd[MAX_THREADS];
    uint8_t *map;
} run;

typedef struct lane {
    const run *r;
    unsigned k;
    int err;      /* errno of a failed write, else 0 */
    uint8_t *buf; /* the stage */
} lane;

static void *lane_main(void *arg)
{
    lane *l = arg;
    const run *r = l->r;
    for (unsigned c = l->k; c < r->nchunks && !l->err; c += r->nthreads) {
        uint64_t at = (uint64_t)c * CHUNK;
        /* a file a thread: the thread's chunks one after another in its file */
        uint64_t off = r->mode == FILE_EACH ? (uint64_t)(c / r->nthreads) * CHUNK : at;
        for (uint32_t d = 0; d < CHUNK && !l->err; d += STAGE) {
            if (r->mode == MAPPING) {
                memcpy(r->map + at + d, l->buf, STAGE);
                continue;
            }
            int fd = r->fd[r->mode == FILE_EACH ? l->k : 0];
            for (size_t done = 0; done < STAGE;) {
                ssize_t w = pwrite(fd, l->buf + done, STAGE - done, (off_t)(off + d + done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0) {
                    l->err = w < 0 ? errno : ENOSPC;
                    break;
                }
                done += (size_t)w;
            }
        }
    }
    return NULL;
}

static void file_name(char *out, size_t len, const opts *o, unsigned k)
{
    snprintf(out, len, "%s/bench-cache-write.%ld.%u", o->dir, (long)getpid(), k);
}

/* One round of `mode` with `t` threads: GB/s. */
static double one_round(const opts *o, int mode, unsigned t)
{
    run r = {.mode = mode, .nthreads = t, .nchunks = o->mib / (CHUNK >> 20)};
    r.total = (uint64_t)r.nchunks * CHUNK;
    unsigned nfiles = mode == FILE_EACH ? t : 1;
    for (unsigned k = 0; k < nfiles; k++) {
        char p[4200];
        file_name(p, sizeof(p), o, k);
        unsigned mine = mode == FILE_EACH ? (r.nchunks - k + t - 1) / t : r.nchunks;
        off_t size = (off_t)mine * CHUNK;
        r.fd[k] = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (r.fd[k] < 0)
            cli_die(PROG, "cannot create %s: %s", p, strerror(errno));
        int e = fallocate(r.fd[k], 0, 0, size) < 0 ? errno : 0;
        if (e == EOPNOTSUPP)
            e = ftruncate(r.fd[k], size) < 0 ? errno : 0;
        if (e) {
            unlink(p);
            cli_die(PROG, "cannot size %s to %lld bytes: %s", p, (long long)size, strerror(e));
        }
    }
    if (mode == MAPPING) {
        r.map = mmap(NULL, r.total, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd[0], 0);
        if (r.map == MAP_FAILED) {
            char p[4200];
            file_name(p, sizeof(p), o, 0);
            cli_die(PROG, "cannot map %s: %s", p, strerror(errno));
        }
    }
    lane ls[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    for (unsigned k = 0; k < t; k++) {
        ls[k] = (lane){.r = &r, .k = k, .buf = malloc(STAGE)};
        if (!ls[k].buf)
            cli_die(PROG, "out of memory");
        memset(ls[k].buf, (int)(k + 1), STAGE); /* touched before the clock starts */
    }
    uint64_t t0 = bu_now_ns();
    for (unsigned k = 0; k < t; k++)
        if ((errno = pthread_create(&th[k], NULL, lane_main, &ls[k])) != 0)
            cli_die(PROG, "cannot start a thread: %s", strerror(errno));
    for (unsigned k = 0; k < t; k++)
        pthread_join(th[k], NULL);
    double s = (double)(bu_now_ns() - t0) / 1e9;
    int err = 0;
    for (unsigned k = 0; k < t; k++) {
        err = err ? err : ls[k].err;
        free(ls[k].buf);
    }
    if (r.map)
        munmap(r.map, r.total);
    for (unsigned k = 0; k < nfiles; k++) {
        char p[4200];
        file_name(p, sizeof(p), o, k);
        close(r.fd[k]);
        unlink(p);
    }
    if (err)
        cli_die(PROG, "writing into %s: %s", o->dir, strerror(err));
    return (double)r.total / 1e9 / s;
}

/* The shard cache's folder, found and made as a loader's cache finds and
 * makes it (remote/cache.c). */
static void default_dir(char *buf, size_t len)
{
    feeder__cache c;
    char err[512];
    if (feeder__cache_open(&c, NULL, 0, err, sizeof(err)) != 0)
        cli_die(PROG, "%s", err);
    snprintf(buf, len, "%s", c.dir);
    feeder__cache_close(&c);
}

static void parse_args(opts *o, int argc, char **argv)
{
    static char dirbuf[4096];
    memset(o, 0, sizeof(*o));
    o->threads = "1,2,4,8";
    o->mib = 1536;
    o->rounds = 3;
    cli_opt table[] = {
        CLI_STRING("dir", "DIR", o->dir, "the folder written in (default: the shard cache's)"),
        CLI_UINT("mib", "N", o->mib, 16, 1u << 20,
                 "MiB written a round, in 8 MiB chunks, a multiple of 8\n(1536)"),
        CLI_STRING("threads", "LIST", o->threads, "thread counts (1,2,4,8)"),
        CLI_UINT("rounds", "R", o->rounds, 1, 100, "rounds a figure, the median kept (3)"),
        BU_CLI_REPORT_OPTIONS(o->json, o->append_to, o->label),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = table};
    cli_parse(&spec, argc, argv);
    o->ncounts = cli_parse_list(PROG, "--threads", o->threads, o->counts, MAX_COUNTS, 1,
                                MAX_THREADS);
    if (o->mib % (CHUNK >> 20))
        cli_die_usage(PROG, "--mib %u: not a multiple of the %u MiB chunk", o->mib, CHUNK >> 20);
    for (unsigned i = 0; i < o->ncounts; i++)
        if (o->counts[i] > o->mib / (CHUNK >> 20))
            cli_die_usage(PROG, "--threads %u: more threads than the %u chunks of --mib %u",
                          (unsigned)o->counts[i], o->mib / (CHUNK >> 20), o->mib);
    if (!o->dir) {
        default_dir(dirbuf, sizeof(dirbuf));
        o->dir = dirbuf;
    }
    int rc = bu_mkdirs(o->dir);
    if (rc)
        cli_die(PROG, "cannot make the folder %s: %s", o->dir, strerror(-rc));
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    bu_sbuf cmd = {0};
    bu_command_line(&cmd, PROG, argc, argv);
    double gbs[MAX_COUNTS][MODES];
    one_round(&o, FILE_EACH, 1); /* untimed: the first files and pages of the run */
    for (unsigned i = 0; i < o.ncounts; i++)
        for (int m = 0; m < MODES; m++) {
            double v[100];
            for (unsigned k = 0; k < o.rounds; k++)
                v[k] = one_round(&o, m, (unsigned)o.counts[i]);
            gbs[i][m] = bu_median(v, o.rounds);
            fprintf(stderr, "%-16s %2u threads: %6.2f GB/s\n", mode_names[m],
                    (unsigned)o.counts[i], gbs[i][m]);
        }
    bu_machine mach;
    bu_machine_init(&mach, o.label);
    bu_report r = {0};
    bu_sb_printf(&r.header, "%u MiB a round in %u MiB chunks of %u KiB pwrites, into %s; "
                 "GB/s, median of %u rounds\n", o.mib, CHUNK >> 20, STAGE >> 10, o.dir,
                 o.rounds);
    static const char *const head[] = {"threads", "one file", "a file a thread", "one mapping"};
    static const int right[] = {1, 1, 1, 1};
    bu_table t;
    bu_table_init(&t, 4, head, right);
    for (unsigned i = 0; i < o.ncounts; i++) {
        char(*row)[BU_TABLE_CELL] = bu_table_row(&t);
        snprintf(row[0], BU_TABLE_CELL, "%u", (unsigned)o.counts[i]);
        for (int m = 0; m < MODES; m++)
            snprintf(row[1 + m], BU_TABLE_CELL, "%.2f", gbs[i][m]);
    }
    bu_table_render(&t, &r.table);
    bu_table_free(&t);
    bu_sb_printf(&r.footer, "one file: every thread into one file (one shard's lanes); a file a "
                 "thread: each into its own (shards fetched at once); one mapping: one file, "
                 "memcpy through a shared mapping\n");
    if (o.json) {
        bu_sb_printf(&r.json, "{\"bench\": \"" PROG "\", \"dir\": ");
        bu_sb_json_str(&r.json, o.dir);
        bu_sb_printf(&r.json, ", \"mib\": %u, \"chunk_bytes\": %u, \"write_bytes\": %u, "
                     "\"rounds\": %u, \"cores\": %ld, \"rows\": [", o.mib, CHUNK, STAGE,
                     o.rounds, mach.cores);
        for (unsigned i = 0; i < o.ncounts; i++) {
            bu_sb_printf(&r.json, "%s{\"threads\": %u", i ? ", " : "", (unsigned)o.counts[i]);
            for (int m = 0; m < MODES; m++)
                bu_sb_printf(&r.json, ", \"%s_gbs\": %.3f", mode_keys[m], gbs[i][m]);
            bu_sb_printf(&r.json, "}");
        }
        bu_sb_printf(&r.json, "]}\n");
    }
    bu_report_finish(&r, o.json, o.append_to, PROG, &mach, PROG ", writes into one file and many",
                     cmd.p);
    free(cmd.p);
    return 0;
}
