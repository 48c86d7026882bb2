/*
 * bench_loader's parts: the options (loader_args.c), one configuration's
 * loader and its timed epochs (loader_run.c), the table, JSON and record
 * (loader_report.c), and main's flow (bench_loader.c). Program code: it
 * prints and exits.
 */
#ifndef FEEDER_BENCH_LOADER_H
#define FEEDER_BENCH_LOADER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "benchutil.h"
#include "cli.h"
#include "decoders.h"
#include "feeder.h"

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif
#ifndef FEEDER_SOURCE_DIR
#define FEEDER_SOURCE_DIR "."
#endif

#define PROG "bench_loader"
#define MAX_SWEEP 64
#define MAX_EPOCHS 1000

#define die_usage(...) cli_die_usage(PROG, __VA_ARGS__)
#define die(...) cli_die(PROG, __VA_ARGS__)

/* ---- options (loader_args.c) ---- */

typedef struct opts {
    const char *data;     /* NULL: the default dataset */
    unsigned fetch_ahead; /* shards datasets (URLs, brace ranges): --fetch-ahead (0: none;
                             FETCH_AHEAD_DEFAULT: not given, the library's default) */
    uint32_t batch;
    unsigned epochs;
    int workers[MAX_SWEEP];
    unsigned nworkers;    /* > 1 only with --threads-sweep */
    int sweep;            /* --threads-sweep given */
    int workers_auto;     /* workers[0] is the usable CPUs: --workers not given */
    int prefetch;
    int pipeline;
    int decoder;
    int io;
    uint64_t seed;
    uint32_t size;
    uint32_t resize;      /* 0: size * 256 / 224 */
    int layout;
    int shuffle;          /* -1: on for train, off for eval */
    int in_order;
    int persistent;
    unsigned make_images; /* size of the default dataset */
    int set;              /* which default set: set_names */
    int64_t timeout_ms;
    int json;
    int checksum;
    const char *append_to;
    const char *label;
    int row_index_mib; /* FEEDER_OPT_ROW_INDEX_BYTES in MiB, 0 = off */
    /* GPU delivery */
    int device;        /* -1: host batches */
    int pin;
    int gpu_prefetch;
    int gpu_room;      /* FEEDER_OPT_GPU_ROOM, 0 = automatic */
    int gpu_decode_threads; /* FEEDER_OPT_GPU_DECODE_THREADS, 0 = automatic */
    int dtype;
    double compute_ms; /* the stand-in training step, per batch */
    /* packed files */
    int packed_read;   /* FEEDER_PACKED_READ_* */
    int verify_crc;
    int shape_given;   /* --size, --resize, --layout or --pipeline was given */
    int drop_cache;    /* evict the dataset's files from the page cache before each epoch */
    int split;         /* tasks per batch, 0 = one per worker */
    int device_given;  /* --device was given (else nvjpeg/hybrid/all pick one) */
    const char *trace; /* --trace FILE: of the last configuration */
    const char *augment; /* --augment LIST, or NULL */
    int augment_on_device; /* --augment-on-device: FEEDER_OPT_AUGMENT_ON_DEVICE */
} opts;

/* --augment LIST as a pipeline (NULL for none); dies naming a bad entry
 * (loader_augment.c). */
feeder_augment *bl_make_augment(const char *list);

extern const char *const set_names[];      /* web imagenet uniform */
extern const size_t dtype_size[];
/* The name of value `v` of the enum option `opt`, as the library's table
 * spells it ("?" for none). */
const char *value_name(feeder_option opt, int v);
/* The names of `o`'s enum settings: value_name's, the decoder's
 * bd_decoder_name's. */
typedef struct opt_names {
    const char *pipeline, *decoder, *io, *layout, *pin, *dtype, *packed_read;
} opt_names;
opt_names opts_names(const opts *o);

/* Parse the command line into `o` (defaults first); exits 2 on a bad one. */
void parse_args(opts *o, int argc, char **argv);

/* ---- one configuration (loader_run.c) ---- */

typedef struct epoch_res {
    uint64_t images, batches, ns, first_ns;
    uint64_t out_bytes; /* delivered sample bytes */
    uint64_t bytes, read_ns, decode_ns, transform_ns, wait_ns, skipped;
    uint64_t gpu_decoded, gpu_fallback, gpu_decode_ns, h2d_ns;
    uint64_t routed[FEEDER_ROUTES];
    uint64_t cpu_shared;     /* images the workers decoded as HYBRID's share */
    uint64_t cpu_permille;   /* HYBRID's share at the epoch's end */
    uint64_t cpu_ns; /* loader process + workers (bd_cpu_end) */
} epoch_res;

typedef struct run_res {
    int workers;
    char io[32];
    char io_reason[256];
    epoch_res ep[MAX_EPOCHS];
    unsigned nep;
    uint64_t checksum;
    uint64_t shm_bytes, slots;
    /* derived */
    double rate[MAX_EPOCHS];
    double med_rate, med_first_ms, mbps, gbps, read_us, decode_us, xform_us, wait_ms, eff;
    double steady_rate;       /* median of the epochs after the first (all of one epoch) */
    double steady_gbps;       /* the same, of delivered GB/s */
    /* GPU runs */
    int gpu;                  /* batches were on the device */
    char gpu_how[800];        /* feeder_loader_gpu_status's reason */
    double stall_ms[MAX_EPOCHS];  /* feeder_next blocked, after the epoch's first batch */
    double busy_ms[MAX_EPOCHS];   /* GPU time of the steps */
    double alone_s[MAX_EPOCHS];   /* the same steps with nothing else running */
    uint64_t h2d_bytes, h2d_ns, pin_ns;
    double med_stall_pct, med_idle_pct, med_vs_alone, h2d_gbps;
    /* decode backends (bench/decoders.c) */
    int na;                   /* the GPU decoder asked for did not run: not measured */
    char na_reason[512];      /* "n/a: why" */
    uint64_t hybrid_permille; /* level at the end */
    uint64_t gpu_decoded, gpu_fallback;
    uint64_t routed[FEEDER_ROUTES]; /* over the epochs: feeder_stats.cpu_routed */
    double cpu_cores, gpu_busy_pct, gpu_decode_us;
} run_res;

/* The dataset is a packed file: what its header says (kind 0 otherwise). */
extern feeder_packed_info g_pack;
#define FETCH_AHEAD_DEFAULT UINT_MAX /* opts.fetch_ahead: --fetch-ahead not given */

/* feeder_shard_options.fetch_ahead for open_dataset's shards datasets:
 * --fetch-ahead, its 0 as FEEDER_FETCH_AHEAD_NONE (not given: 0, the
 * library's default). */
extern uint32_t g_fetch_ahead;

/* Open --data: a folder, a list file or a packed file (sets g_pack); a URL
 * or a brace range of packs opens as a shards dataset. */
feeder_dataset *open_dataset(const char *path);
/* Run --epochs epochs with `workers` workers into `r`; exits on failure. */
void run_config(feeder_dataset *ds, const opts *o, int workers, run_res *r, const char *data);

/* ---- output (loader_report.c) ---- */

typedef struct context {
    bu_machine m;
    char data[4096];
    uint64_t images, classes, jpeg_bytes;
    bu_sbuf cmd;
} context;

/* The steady figure, then what the warm-up epoch measured (first lines). */
void make_headline(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b);
void make_table(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b);
void make_header(const opts *o, const context *cx, bu_sbuf *b);
void make_footer(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b);
void make_json(const opts *o, const context *cx, const run_res *runs, unsigned n, bu_sbuf *b);
/* --decoder all: its header and JSON. */
void all_header(const opts *o, const context *cx, const char *pack,
                const feeder_packed_info *pk, bu_sbuf *b);
void all_json(const opts *o, const context *cx, const char *pack,
              const feeder_packed_info *pk, const bd_row *rows, unsigned n, bu_sbuf *b);

#endif
