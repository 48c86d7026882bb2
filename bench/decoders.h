/*
 * bench_loader's decode backends side by side (--decoder turbo|roi|nvjpeg|
 * hybrid|raw|all): the cached RAW pack, CPU-time accounting of the loader and
 * its workers, the GPU decoders' fallback check, and the --decoder all table
 * and JSON. Kept apart from bench_loader.c, which only glues these in.
 */
#ifndef FEEDER_BENCH_DECODERS_H
#define FEEDER_BENCH_DECODERS_H

#include <stddef.h>
#include <stdint.h>

#include "benchutil.h"
#include "feeder.h"

/* --decoder values: the first four are feeder_decoder's, named by the
 * library's table (FEEDER_OPT_DECODER); raw and all are bench_loader's own,
 * after them. BD_NROWS: the --decoder all table's rows, every backend once
 * and raw twice (shuffled, then sequential). */
enum { BD_RAW = 4, BD_ALL = 5, BD_NROWS = 6 };
extern const char *const bd_decoder_extras[];   /* raw all, NULL */
extern const int bd_decoder_extra_values[];     /* BD_RAW BD_ALL */
/* A --decoder value's name: the library's, or raw / all. */
const char *bd_decoder_name(int decoder);

/* ---- the RAW pack of --decoder raw ---- */

/* 1 when --data names WebDataset tar shards: a brace pattern
 * ("s-{000..127}.tar") or a file whose first 512 bytes are a ustar header. */
int bd_is_tar(const char *data);

/* Where the RAW pack of dataset `data` (folder, list file or tar shards) is
 * cached: beside it, "<data>-<size>.pack" for the default resize
 * (size*256/224) and NHWC, else "<data>-<size>-r<resize>-<layout>.pack"; a
 * brace pattern's braces are left out and its commas become '+'. */
void bd_raw_pack_path(char *out, size_t len, const char *data, uint32_t size, uint32_t resize,
                      int layout);

/* Make `pack` from `data` with feeder-pack's packer (tools/packer.c: RAW,
 * EVAL pipeline: resize the shorter side to `resize`, centre crop size x
 * size) unless it exists and is not older than the dataset (the newest
 * mtime of `data`, every sample file and the folders holding them; of tar
 * shards, the shards'). Says on
 * stderr what it did. Returns 0 when it made the pack, 1 when it reused it;
 * exits on failure (the packer's behaviour). */
int bd_ensure_raw_pack(const char *prog, const char *data, const char *pack, uint32_t size,
                       uint32_t resize, int layout, int workers, int io);

/* ---- CPU time of the loader process and its workers ---- */

#define BD_MAX_WORKERS 1024
typedef struct bd_cpu {
    uint64_t self, children;
    int n;
    int pid[BD_MAX_WORKERS];
    int64_t ns[BD_MAX_WORKERS];
} bd_cpu;

/* Snapshot at the start of a timed span: this process's CPU time (every
 * thread), its reaped children's, and each live worker's (/proc/PID/stat,
 * pids from feeder_loader_worker_pid). */
void bd_cpu_begin(bd_cpu *c, const feeder_loader *ld, int workers);
/* CPU ns spent since bd_cpu_begin by this process and its workers. A worker
 * alive at both ends counts its /proc delta; one started in between counts
 * whole; one that ended and was reaped (non-persistent workers at the end of
 * the epoch, a restarted worker) is in RUSAGE_CHILDREN. */
uint64_t bd_cpu_end(const bd_cpu *c, const feeder_loader *ld, int workers);

/* After start: 1 when `asked` is a GPU decoder and the loader runs another
 * one, with "n/a: <feeder_loader_decoder's reason>" in `why`; else 0. */
int bd_decoder_fell_back(const feeder_loader *ld, int asked, char *why, size_t len);

/* ---- --decoder all ---- */

#define BD_MAX_EPOCHS 1000
typedef struct bd_row {
    int decoder;            /* the --decoder value measured; bd_decoder_name names it */
    int shuffled;           /* the sampler's order: 1 shuffled, 0 sequential (file order) */
    int na;                 /* not measured: the GPU decoder fell back */
    char reason[512];       /* "n/a: ..." */
    int gpu;                /* device batches */
    unsigned nep;
    double rate[BD_MAX_EPOCHS];
    double images_per_s;    /* median epoch */
    double mb_per_s;        /* median epoch: bytes read (JPEG, or packed records) / s */
    double cpu_cores;       /* median epoch: CPU ns of loader + workers / wall ns */
    double gpu_busy_pct;    /* median epoch: (H2D ns + GPU decode ns) / wall; -1 host batches */
    double stall_ms;        /* consumer wait (feeder_stats.wait_ns) per epoch */
    double read_us, decode_us, xform_us, gpu_decode_us; /* per delivered image */
    uint64_t gpu_decoded, gpu_fallback;                 /* over the timed epochs */
    uint64_t routed[FEEDER_ROUTES]; /* over the timed epochs: feeder_stats.cpu_routed */
    double cpu_share_pct;   /* HYBRID: workers' share of each batch; -1 otherwise */
} bd_row;

/* A GPU decoder's images the workers kept by their header, by reason:
 * "progressive/cmyk/subsampling/size/corrupt/other/room/format" counts,
 * "294/113/0/12/0/0/0/0". */
void bd_routes_cell(char *cell, size_t cap, const uint64_t *routed);
/* `, "cpu_routed": {"progressive": N, ...}` */
void bd_routes_json(bu_sbuf *b, const uint64_t *routed);

/* "shuffled" or "sequential", as the table and JSON say a row's order. */
const char *bd_order_name(int shuffled);
/* The Markdown table of `n` rows and the notes that say what each column
 * is; `raw_pack` names the pack the raw row read (NULL: none). */
void bd_table(const bd_row *rows, unsigned n, bu_sbuf *b);
void bd_notes(const bd_row *rows, unsigned n, const char *raw_pack, bu_sbuf *b);
/* The rows as a JSON array, one object per row ("backend", "order":
 * "shuffled" or "sequential", ...), numbers as numbers (null where a figure
 * does not apply). */
void bd_json_rows(const bd_row *rows, unsigned n, bu_sbuf *b);

#endif
