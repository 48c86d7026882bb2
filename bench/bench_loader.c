/*
 * bench_loader: how many images per second feeder delivers, and where the
 * time goes.
 *
 *   bench_loader --workers 4 --prefetch 2
 *   bench_loader --threads-sweep 0,1,2,4,8,15 --pipeline train --json
 *   bench_loader --data /data/imagenet/val --batch 256 --epochs 5 --checksum
 *   bench_loader --data val-224.pack --threads-sweep 1,2,4,8 --packed-read uring
 *
 * --data may name a packed file (feeder-pack; recognised by its magic). A RAW
 * pack sets the sample shape: --size, --resize, --layout and --pipeline are
 * passed on only when given (and must then agree with the file). Every table
 * reports GB/s of delivered samples (count x height x width x 3 per second)
 * beside images/s, the figure that matters for packed tensors.
 *
 * With no --data it first makes the default dataset (2,000 images in 10 class
 * folders cut from bench/photos: the web-like mix of bench/mixset.h, or
 * --set imagenet|uniform) under $FEEDER_DATA or ~/.cache/feeder/SET-2000,
 * and reuses it on later runs.
 *
 * Each configuration (one worker count) gets its own loader and runs
 * --epochs epochs. Every epoch is timed from the moment the consumer asks for
 * its first batch (for epoch 0 that includes feeder_loader_start, i.e. the
 * fork) to the moment it holds FEEDER_DONE, just as compare_torch.py times
 * PyTorch from iter(loader) to the end of the loop. The first epoch pays page
 * cache and fork costs, so every epoch is reported and the median is the
 * headline figure.
 *
 * The result is a Markdown table on stdout (or JSON with --json) and, with
 * --append-to FILE, the same table with the command line, date and machine
 * appended to FILE; nothing under the checkout changes unless asked.
 * Progress lines go to stderr.
 *
 * --checksum hashes every delivered sample (pixels, then label) in delivery
 * order with XXH64; with in-order delivery it must not change with --workers,
 * --prefetch or --batch, and a sweep that finds it changing exits with 3.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpu_step.h"
#include "benchutil.h"
#include "decoders.h"
#include "mixset.h"
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

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct opts {
    const char *data;     /* NULL: the default dataset */
    uint32_t batch;
    unsigned epochs;
    int workers[MAX_SWEEP];
    unsigned nworkers;    /* > 1 only with --threads-sweep */
    int sweep;            /* --threads-sweep given */
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
    int append;
    const char *append_to;
    const char *label;
    /* GPU delivery */
    int device;        /* -1: host batches */
    int pin;
    int gpu_prefetch;
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
} opts;

static const char *const set_names[] = {"web", "imagenet", "uniform", NULL};
static const char *const pipeline_names[] = {"eval", "train", "resize", NULL};
/* turbo roi nvjpeg hybrid raw all (bench/decoders.c) */
static const char *const *const decoder_names = bd_decoder_names;
static const char *const io_names[] = {"auto", "uring", "pread", NULL};
static const int io_values[] = {FEEDER_IO_AUTO, FEEDER_IO_URING, FEEDER_IO_PREAD};
static const char *const layout_names[] = {"nhwc", "nchw", NULL};
static const char *const pin_names[] = {"none", "copy", "register", NULL};
static const char *const dtype_names[] = {"uint8", "fp16", "bf16", "fp32", NULL};
static const size_t dtype_size[] = {1, 2, 2, 4};
static const char *const packed_read_names[] = {"mmap", "uring", "direct", NULL};

/* The dataset is a packed file: what its header says (kind 0 otherwise). */
static feeder_packed_info g_pack;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options]\n"
            "  --data DIR|LIST      image folder (one sub-folder per class) or list file of\n"
            "                       'path label' lines; default: make 2,000 images of --set\n"
            "                       under $FEEDER_DATA or ~/.cache/feeder/web-2000\n"
            "  --images N           size of the dataset made when --data is not given (2000;\n"
            "                       made in SET-N)\n"
            "  --set web|imagenet|uniform  the set made when --data is not given: a web-like\n"
            "                       JPEG mix (web, the default), ImageNet-like files, or\n"
            "                       uniform baseline 4:2:0 JPEGs (in default-N); bench/make_set\n"
            "                       makes them too\n"
            "  --batch N            samples per batch (256)\n"
            "  --epochs N           epochs per configuration; each is reported, and the median (3)\n"
            "  --workers N          worker processes, 0 = the calling thread (4)\n"
            "  --prefetch N         batches in flight per worker (2)\n"
            "  --split N            tasks per batch, 0 = one per worker (FEEDER_OPT_SPLIT; 0)\n"
            "  --threads-sweep LIST run each worker count in turn, e.g. 0,1,2,4,8,15\n"
            "                       (0 is added when missing: it is the scaling baseline)\n"
            "  --pipeline eval|train|resize  (eval: resize 256 + centre crop 224;\n"
            "                       train: RandomResizedCrop 224 + flip)\n"
            "  --decoder turbo|roi|nvjpeg|hybrid|raw|all  full TurboJPEG decode, cropped\n"
            "                       DCT-scaled decode (roi, the default), nvJPEG batches on the\n"
            "                       GPU, CPU and GPU together (hybrid), the same images as a\n"
            "                       cached RAW pack of uint8 tensors beside the dataset (raw:\n"
            "                       DATA-SIZE.pack, made with feeder-pack's packer, remade when\n"
            "                       older than the dataset), or each of them on the same files\n"
            "                       in one table (all). nvjpeg, hybrid and all use --device 0\n"
            "                       when a GPU is present and --device is not given; a GPU\n"
            "                       decoder that cannot run is reported as n/a, not measured\n"
            "  --io auto|uring|pread  read path (auto)\n"
            "  --seed N             seed of the order and the random crops (0)\n"
            "  --size N             output side (224)\n"
            "  --resize N           eval: shorter side before the crop (size*256/224)\n"
            "  --layout nhwc|nchw   output layout (nhwc)\n"
            "  --shuffle 0|1        random order (default: 1 for train, 0 otherwise)\n"
            "  --in-order 0|1       deliver in sampler order (1)\n"
            "  --persistent         keep the workers across epochs\n"
            "  --timeout-ms N       fail when no batch comes within N ms, 0 = never (120000)\n"
            "  --checksum           hash every delivered pixel and label, in delivery order\n"
            "  --json               JSON on stdout instead of the table\n"
            "  --append-to FILE     append the record (table, command, date, machine) to\n"
            "                       FILE; without it nothing is written but stdout\n"
            "  --no-append          the default (kept so older command lines run)\n"
            "  --label TEXT         machine name for the record (default: hostname + cores)\n"
            "  --device N           deliver batches on CUDA device N (-1: host batches)\n"
            "  --pin none|copy|register  how slots reach the GPU (register)\n"
            "  --gpu-prefetch N     device buffers in the ring (2)\n"
            "  --dtype uint8|fp16|bf16|fp32  device batch type; floats are normalised on\n"
            "                       the GPU (uint8)\n"
            "  --compute-ms X       per batch, a kernel on the user's stream reads every byte\n"
            "                       of the batch and spins X ms (a stand-in training step);\n"
            "                       reports consumer stall and GPU idle share (0)\n"
            "  --packed-read mmap|uring|direct  how a packed file's records are read (mmap)\n"
            "  --verify-crc         check every packed record's crc32c while loading\n"
            "  --drop-cache         evict the dataset's files from the page cache before every\n"
            "                       epoch (cold-cache figures; untimed; reports what stayed)\n"
            "  --trace FILE         write a timeline of the run (workers, consumer, pin threads,\n"
            "                       copy stream) to FILE as Chrome/Perfetto JSON; with\n"
            "                       --threads-sweep, of the last configuration only\n"
            "  -h, --help           this text\n"
            "Exit status: 0 done, 1 the loader failed, 2 bad arguments, 3 --checksum differs\n"
            "between worker counts with in-order delivery (a determinism bug).\n");
}

#define die_usage(...) bu_die_usage(PROG, __VA_ARGS__)

#define die(...) bu_die(PROG, __VA_ARGS__)

#define parse_uint(opt, s, min, max) bu_parse_uint(PROG, opt, s, min, max)

#define parse_enum(opt, s, names) bu_parse_enum(PROG, opt, s, names)

static void parse_sweep(opts *o, const char *s)
{
    char buf[1024];
    if (strlen(s) >= sizeof(buf))
        die_usage("--threads-sweep: list too long");
    strcpy(buf, s);
    o->nworkers = 0;
    int have0 = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nworkers == MAX_SWEEP - 1)
            die_usage("--threads-sweep: at most %d worker counts", MAX_SWEEP - 1);
        int w = (int)parse_uint("--threads-sweep", t, 0, 1024);
        for (unsigned i = 0; i < o->nworkers; i++)
            if (o->workers[i] == w)
                die_usage("--threads-sweep '%s': %d appears twice", s, w);
        have0 |= w == 0;
        o->workers[o->nworkers++] = w;
    }
    if (o->nworkers == 0)
        die_usage("--threads-sweep '%s': expected a comma-separated list such as 0,1,2,4", s);
    /* The single-process rate is the baseline of the scaling efficiency. */
    if (!have0) {
        memmove(o->workers + 1, o->workers, o->nworkers * sizeof(int));
        o->workers[0] = 0;
        o->nworkers++;
    }
    o->sweep = 1;
}

enum {
    OPT_DATA = 256, OPT_BATCH, OPT_EPOCHS, OPT_WORKERS, OPT_PREFETCH, OPT_PIPELINE,
    OPT_DECODER, OPT_IO, OPT_SEED, OPT_SIZE, OPT_RESIZE, OPT_LAYOUT, OPT_SWEEP, OPT_JSON,
    OPT_CHECKSUM, OPT_NO_APPEND, OPT_APPEND_TO, OPT_LABEL, OPT_SHUFFLE, OPT_IN_ORDER,
    OPT_PERSISTENT, OPT_TIMEOUT, OPT_IMAGES, OPT_DEVICE, OPT_PIN, OPT_GPU_PREFETCH, OPT_DTYPE,
    OPT_COMPUTE_MS, OPT_PACKED_READ, OPT_VERIFY_CRC, OPT_DROP_CACHE, OPT_TRACE, OPT_SPLIT, OPT_SET
};

static void parse_args(opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"data", required_argument, 0, OPT_DATA},
        {"batch", required_argument, 0, OPT_BATCH},
        {"epochs", required_argument, 0, OPT_EPOCHS},
        {"workers", required_argument, 0, OPT_WORKERS},
        {"prefetch", required_argument, 0, OPT_PREFETCH},
        {"pipeline", required_argument, 0, OPT_PIPELINE},
        {"decoder", required_argument, 0, OPT_DECODER},
        {"io", required_argument, 0, OPT_IO},
        {"seed", required_argument, 0, OPT_SEED},
        {"size", required_argument, 0, OPT_SIZE},
        {"resize", required_argument, 0, OPT_RESIZE},
        {"layout", required_argument, 0, OPT_LAYOUT},
        {"threads-sweep", required_argument, 0, OPT_SWEEP},
        {"json", no_argument, 0, OPT_JSON},
        {"checksum", no_argument, 0, OPT_CHECKSUM},
        {"no-append", no_argument, 0, OPT_NO_APPEND},
        {"append-to", required_argument, 0, OPT_APPEND_TO},
        {"label", required_argument, 0, OPT_LABEL},
        {"shuffle", required_argument, 0, OPT_SHUFFLE},
        {"in-order", required_argument, 0, OPT_IN_ORDER},
        {"persistent", no_argument, 0, OPT_PERSISTENT},
        {"timeout-ms", required_argument, 0, OPT_TIMEOUT},
        {"images", required_argument, 0, OPT_IMAGES},
        {"device", required_argument, 0, OPT_DEVICE},
        {"pin", required_argument, 0, OPT_PIN},
        {"gpu-prefetch", required_argument, 0, OPT_GPU_PREFETCH},
        {"dtype", required_argument, 0, OPT_DTYPE},
        {"compute-ms", required_argument, 0, OPT_COMPUTE_MS},
        {"packed-read", required_argument, 0, OPT_PACKED_READ},
        {"verify-crc", no_argument, 0, OPT_VERIFY_CRC},
        {"drop-cache", no_argument, 0, OPT_DROP_CACHE},
        {"split", required_argument, 0, OPT_SPLIT},
        {"trace", required_argument, 0, OPT_TRACE},
        {"set", required_argument, 0, OPT_SET},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof(*o));
    o->batch = 256;
    o->epochs = 3;
    o->workers[0] = 4;
    o->nworkers = 1;
    o->prefetch = 2;
    o->pipeline = FEEDER_PIPELINE_EVAL;
    o->decoder = FEEDER_DECODER_ROI;
    o->io = FEEDER_IO_AUTO;
    o->size = 224;
    o->layout = FEEDER_LAYOUT_NHWC;
    o->shuffle = -1;
    o->in_order = 1;
    o->timeout_ms = 120000;
    o->make_images = 2000;
    o->append = 0; /* the checkout changes only when asked (--append-to) */
    o->device = -1;
    o->pin = FEEDER_PIN_REGISTER;
    o->gpu_prefetch = 2;
    o->dtype = FEEDER_DTYPE_UINT8;
    int workers_given = 0;

    opterr = 0; /* our own messages name the option */
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
        /* getopt_long takes "--data --epochs" as a data path: refuse a
         * value that is itself an option. */
        if (optarg && strncmp(optarg, "--", 2) == 0 && c != '?' && c != ':' && li >= 0)
            die_usage("--%s needs a value, got the option '%s'", longopts[li].name, optarg);
        li = -1;
        switch (c) {
        case OPT_DATA:
            o->data = optarg;
            break;
        case OPT_BATCH:
            o->batch = (uint32_t)parse_uint("--batch", optarg, 1, 1u << 20);
            break;
        case OPT_EPOCHS:
            o->epochs = (unsigned)parse_uint("--epochs", optarg, 1, MAX_EPOCHS);
            break;
        case OPT_WORKERS:
            o->workers[0] = (int)parse_uint("--workers", optarg, 0, 1024);
            workers_given = 1;
            break;
        case OPT_PREFETCH:
            o->prefetch = (int)parse_uint("--prefetch", optarg, 1, 1024);
            break;
        case OPT_PIPELINE:
            o->pipeline = parse_enum("--pipeline", optarg, pipeline_names);
            o->shape_given = 1;
            break;
        case OPT_DECODER:
            o->decoder = parse_enum("--decoder", optarg, decoder_names);
            break;
        case OPT_IO:
            o->io = io_values[parse_enum("--io", optarg, io_names)];
            break;
        case OPT_SEED:
            o->seed = parse_uint("--seed", optarg, 0, UINT64_MAX);
            break;
        case OPT_SIZE:
            o->size = (uint32_t)parse_uint("--size", optarg, 1, 65535);
            o->shape_given = 1;
            break;
        case OPT_RESIZE:
            o->resize = (uint32_t)parse_uint("--resize", optarg, 1, 65535);
            o->shape_given = 1;
            break;
        case OPT_LAYOUT:
            o->layout = parse_enum("--layout", optarg, layout_names);
            o->shape_given = 1;
            break;
        case OPT_SWEEP:
            parse_sweep(o, optarg);
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_CHECKSUM:
            o->checksum = 1;
            break;
        case OPT_NO_APPEND: /* the default now; kept so older command lines run */
            o->append = 0;
            break;
        case OPT_APPEND_TO:
            o->append_to = optarg;
            o->append = 1;
            break;
        case OPT_LABEL:
            o->label = optarg;
            break;
        case OPT_SHUFFLE:
            o->shuffle = (int)parse_uint("--shuffle", optarg, 0, 1);
            break;
        case OPT_IN_ORDER:
            o->in_order = (int)parse_uint("--in-order", optarg, 0, 1);
            break;
        case OPT_PERSISTENT:
            o->persistent = 1;
            break;
        case OPT_TIMEOUT:
            o->timeout_ms = (int64_t)parse_uint("--timeout-ms", optarg, 0, 86400000);
            break;
        case OPT_IMAGES:
            /* 10 classes of equal size. */
            o->make_images = (unsigned)parse_uint("--images", optarg, 10, 10000000) / 10 * 10;
            break;
        case OPT_DEVICE:
            o->device = strcmp(optarg, "-1") == 0 ? -1 : (int)parse_uint("--device", optarg, 0, 1023);
            o->device_given = 1;
            break;
        case OPT_PIN:
            o->pin = parse_enum("--pin", optarg, pin_names);
            break;
        case OPT_GPU_PREFETCH:
            o->gpu_prefetch = (int)parse_uint("--gpu-prefetch", optarg, 2, 64);
            break;
        case OPT_DTYPE:
            o->dtype = parse_enum("--dtype", optarg, dtype_names);
            break;
        case OPT_COMPUTE_MS: {
            char *end;
            errno = 0;
            o->compute_ms = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(o->compute_ms >= 0 && o->compute_ms <= 60000))
                die_usage("--compute-ms '%s': expected milliseconds in [0, 60000]", optarg);
            break;
        }
        case OPT_PACKED_READ:
            o->packed_read = parse_enum("--packed-read", optarg, packed_read_names);
            break;
        case OPT_VERIFY_CRC:
            o->verify_crc = 1;
            break;
        case OPT_DROP_CACHE:
            o->drop_cache = 1;
            break;
        case OPT_SPLIT:
            o->split = (int)parse_uint("--split", optarg, 0, 1 << 20);
            break;
        case OPT_TRACE:
            o->trace = optarg;
            break;
        case OPT_SET:
            o->set = parse_enum("--set", optarg, set_names);
            break;
        case 'h':
            /* One write, so a reader that stops early (grep -q) cannot
             * cut it with SIGPIPE. */
            setvbuf(stdout, NULL, _IOFBF, 1 << 16);
            usage(stdout);
            exit(0);
        case ':':
            die_usage("%s needs a value", argv[optind - 1]);
        default:
            die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_usage("unexpected argument '%s' (options start with --)", argv[optind]);
    if (o->sweep && workers_given)
        die_usage("--workers and --threads-sweep exclude each other");
    if (o->sweep && o->decoder == BD_ALL)
        die_usage("--decoder all and --threads-sweep exclude each other (all runs every backend "
                  "at one worker count)");
    if (o->shuffle < 0)
        o->shuffle = o->pipeline == FEEDER_PIPELINE_TRAIN;
    if (!o->resize)
        o->resize = (uint32_t)(((uint64_t)o->size * 256 + 112) / 224);
    if (o->device < 0 && (o->compute_ms > 0 || o->dtype != FEEDER_DTYPE_UINT8))
        die_usage("--compute-ms and --dtype need --device");
    if (o->pipeline == FEEDER_PIPELINE_EVAL && o->resize < o->size)
        die_usage("--resize %u is smaller than --size %u: the centre crop would not fit",
                  o->resize, o->size);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* The dataset                                                               */
/* ------------------------------------------------------------------------ */

static feeder_dataset *open_dataset(const char *path)
{
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
    } else if (S_ISREG(st.st_mode))
        rc = feeder_dataset_open_list(path, NULL, &ds, err, sizeof(err));
    else
        die_usage("--data '%s': neither a folder, a list file nor a packed file", path);
    if (rc != 0)
        die("opening dataset %s: %s (%s): %s", path, feeder_strerror(rc), feeder_err_name(rc),
            err[0] ? err : "no detail");
    uint64_t skipped = 0;
    char what[256];
    if (feeder_dataset_skipped(ds, &skipped, what, sizeof(what)) == 0 && skipped)
        fprintf(stderr, "bench_loader: %s: %s (not images this build reads)\n", path, what);
    return ds;
}

/* ------------------------------------------------------------------------ */
/* One configuration                                                         */
/* ------------------------------------------------------------------------ */

typedef struct epoch_res {
    uint64_t images, batches, ns, first_ns;
    uint64_t out_bytes; /* delivered sample bytes */
    uint64_t bytes, read_ns, decode_ns, transform_ns, wait_ns, skipped;
    uint64_t gpu_decoded, gpu_fallback, gpu_decode_ns, h2d_ns;
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
    /* GPU runs */
    int gpu;                  /* batches were on the device */
    char gpu_how[512];        /* feeder_loader_gpu_status's reason */
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
    double cpu_cores, gpu_busy_pct, gpu_decode_us;
} run_res;

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
        for (uint64_t i = 0; i < feeder_dataset_size(ds); i++) {
            const char *p = feeder_dataset_path(ds, i);
            if (p) {
                left += drop_file(p, &size);
                total += size;
            }
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
    }
    r->cpu_cores = bu_median(cores, r->nep);
    r->gpu_busy_pct = r->gpu ? bu_median(busy, r->nep) : -1;
    r->gpu_decode_us = images ? gdec / 1e3 / images : 0;
}

static void run_config(feeder_dataset *ds, const opts *o, int workers, run_res *r,
                       const char *data)
{
    memset(r, 0, sizeof(*r));
    r->workers = workers;
    feeder_loader *ld = NULL;
    int rc = feeder_loader_create(ds, NULL, &ld);
    if (rc)
        die_loader(NULL, rc, "feeder_loader_create", workers, 0);
    set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch, "--batch");
    set_opt(ld, FEEDER_OPT_SHUFFLE, o->shuffle, "--shuffle");
    set_opt(ld, FEEDER_OPT_SEED, (int64_t)o->seed, "--seed");
    set_opt(ld, FEEDER_OPT_NUM_WORKERS, workers, o->sweep ? "--threads-sweep" : "--workers");
    /* PyTorch rejects a prefetch factor without workers; it means nothing then. */
    if (workers > 0)
        set_opt(ld, FEEDER_OPT_PREFETCH_FACTOR, o->prefetch, "--prefetch");
    set_opt(ld, FEEDER_OPT_PERSISTENT_WORKERS, o->persistent, "--persistent");
    set_opt(ld, FEEDER_OPT_IN_ORDER, o->in_order, "--in-order");
    set_opt(ld, FEEDER_OPT_TIMEOUT_MS, o->timeout_ms, "--timeout-ms");
    /* A RAW pack brings its own shape: the loader adopts it unless asked.
     * (With --dtype, --layout is the device batches' and is always passed.) */
    int raw = g_pack.kind == FEEDER_RECORD_RAW;
    if (!raw || o->shape_given) {
        set_opt(ld, FEEDER_OPT_PIPELINE, o->pipeline, "--pipeline");
        set_opt(ld, FEEDER_OPT_HEIGHT, o->size, "--size");
        set_opt(ld, FEEDER_OPT_WIDTH, o->size, "--size");
        if (o->pipeline == FEEDER_PIPELINE_EVAL)
            set_opt(ld, FEEDER_OPT_RESIZE, o->resize, "--resize");
    }
    if (!raw || o->shape_given || o->dtype != FEEDER_DTYPE_UINT8)
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
    set_opt(ld, FEEDER_OPT_DTYPE, o->dtype, "--dtype");
    /* The trace is written by feeder_loader_destroy, after the timed epochs. */
    if (o->trace && workers == o->workers[o->nworkers - 1] &&
        (rc = feeder_loader_set_trace(ld, o->trace)))
        die_loader(ld, rc, "--trace", workers, 0);
    bg_ctx *gpu = NULL;
    char gerr[512];
    uint8_t *hostbuf = NULL; /* --checksum of device batches */
    if (o->device >= 0 && bg_create(o->device, &gpu, gerr, sizeof(gerr)))
        die("--device %d: %s", o->device, gerr);

    const uint64_t expect = feeder_dataset_size(ds);
    const uint64_t nclasses = feeder_dataset_num_classes(ds);
    uint64_t h = 0;
    int warned = 0;
    for (unsigned e = 0; e < o->epochs; e++) {
        epoch_res *ep = &r->ep[e];
        feeder_stats s0, s1;
        if (o->drop_cache)
            drop_cache(o, ds, data);
        if ((rc = feeder_loader_stats(ld, &s0)))
            die_loader(ld, rc, "feeder_loader_stats", workers, e);
        static bd_cpu cpu; /* 12 KB: off the stack */
        bd_cpu_begin(&cpu, ld, workers);
        uint64_t t0 = bu_now_ns();
        if (e == 0) {
            /* Timed with epoch 0, as iter(loader) is in PyTorch: it forks. */
            if ((rc = feeder_loader_start(ld)))
                die_loader(ld, rc, "feeder_loader_start", workers, e);
            const char *why = NULL;
            const char *be = feeder_loader_io_backend(ld, &why);
            snprintf(r->io, sizeof(r->io), "%s", be ? be : "?");
            snprintf(r->io_reason, sizeof(r->io_reason), "%s", why ? why : "");
            r->gpu = feeder_loader_gpu_status(ld, &why);
            snprintf(r->gpu_how, sizeof(r->gpu_how), "%s", why ? why : "");
            if (o->device >= 0 && !r->gpu)
                die("--device %d: the loader delivers host batches: %s", o->device, r->gpu_how);
            /* Never a fallback's figure under the GPU decoder's name. */
            if ((r->na = bd_decoder_fell_back(ld, o->decoder, r->na_reason,
                                              sizeof(r->na_reason)))) {
                fprintf(stderr, "workers %2d  %s: %s\n", workers, decoder_names[o->decoder],
                        r->na_reason);
                break;
            }
        }
        for (;;) {
            feeder_batch *b;
            uint64_t tn = bu_now_ns();
            rc = feeder_next(ld, &b);
            if (rc == FEEDER_DONE)
                break;
            if (rc != 0)
                die_loader(ld, rc, "feeder_next", workers, e);
            if (ep->batches == 0)
                ep->first_ns = bu_now_ns() - t0;
            else
                r->stall_ms[e] += (bu_now_ns() - tn) / 1e6;
            unsigned step = (unsigned)ep->batches;
            ep->batches++;
            ep->images += b->count;
            ep->out_bytes += (uint64_t)b->count * b->sample_bytes;
            const uint8_t *px = b->data;
            if (r->gpu) {
                /* Like a loop that reads its loss every step: the host waits
                 * for step k-1 before it asks for batch k+1, so at most one
                 * step is queued ahead and feeder_next's blocking is real. */
                if (o->compute_ms > 0 &&
                    (bg_step(gpu, step, b->ready_event, b->device_data, b->device_bytes,
                             o->compute_ms, gerr, sizeof(gerr)) ||
                     (step > 0 && bg_wait_step(gpu, step - 1, gerr, sizeof(gerr)))))
                    die("compute step: %s", gerr);
                if (o->checksum) {
                    if (!hostbuf && !(hostbuf = malloc((size_t)o->batch * b->sample_bytes)))
                        die("out of memory");
                    if (bg_to_host(gpu, b->ready_event, hostbuf, b->device_data, b->device_bytes,
                                   gerr, sizeof(gerr)))
                        die("copying a batch back: %s", gerr);
                    px = hostbuf;
                }
            }
            /* Sample by sample (pixels, then label), so the checksum does
             * not depend on the batch size either. */
            for (uint32_t i = 0; o->checksum && i < b->count; i++) {
                h = bu_hash64(h, px + (size_t)i * b->sample_bytes, b->sample_bytes);
                h = bu_hash64(h, &b->labels[i], sizeof(int64_t));
            }
            /* A cheap sanity check, so a fast but wrong loader does not go
             * unnoticed in a benchmark. */
            for (uint32_t i = 0; i < b->count && !warned; i++)
                if (b->labels[i] < 0 || (nclasses && (uint64_t)b->labels[i] >= nclasses)) {
                    fprintf(stderr, PROG ": warning: batch %llu sample %u has label %lld, "
                            "outside [0, %llu)\n", (unsigned long long)b->number, i,
                            (long long)b->labels[i], (unsigned long long)nclasses);
                    warned = 1;
                }
            if ((rc = feeder_batch_release(b, gpu ? bg_stream(gpu) : NULL)))
                die_loader(ld, rc, "feeder_batch_release", workers, e);
        }
        /* The epoch ends when the GPU has finished its last step. */
        if (gpu && o->compute_ms > 0 &&
            bg_busy_ms(gpu, (unsigned)ep->batches, &r->busy_ms[e], gerr, sizeof(gerr)))
            die("timing the steps: %s", gerr);
        ep->ns = bu_now_ns() - t0;
        ep->cpu_ns = bd_cpu_end(&cpu, ld, workers);
        if ((rc = feeder_loader_stats(ld, &s1)))
            die_loader(ld, rc, "feeder_loader_stats", workers, e);
        ep->bytes = s1.bytes_read - s0.bytes_read;
        ep->read_ns = s1.read_ns - s0.read_ns;
        ep->decode_ns = s1.decode_ns - s0.decode_ns;
        ep->transform_ns = s1.transform_ns - s0.transform_ns;
        ep->wait_ns = s1.wait_ns - s0.wait_ns;
        ep->skipped = s1.skipped - s0.skipped;
        r->shm_bytes = s1.shm_bytes;
        r->slots = s1.slots;
        r->h2d_bytes += s1.h2d_bytes - s0.h2d_bytes;
        r->h2d_ns += s1.h2d_ns - s0.h2d_ns;
        r->pin_ns += s1.pin_ns - s0.pin_ns;
        ep->h2d_ns = s1.h2d_ns - s0.h2d_ns;
        ep->gpu_decoded = s1.gpu_decoded - s0.gpu_decoded;
        ep->gpu_fallback = s1.gpu_fallback - s0.gpu_fallback;
        ep->gpu_decode_ns = s1.gpu_decode_ns - s0.gpu_decode_ns;
        r->hybrid_permille = s1.hybrid_cpu_permille;
        if (gpu && o->compute_ms > 0 &&
            bg_compute_alone(gpu, (size_t)o->batch * (raw ? g_pack.record_bytes
                                                          : (size_t)o->size * o->size * 3) *
                                      dtype_size[o->dtype],
                             o->compute_ms, (unsigned)ep->batches, &r->alone_s[e], gerr,
                             sizeof(gerr)))
            die("compute alone: %s", gerr);
        if (ep->images != expect)
            fprintf(stderr, PROG ": warning: epoch %u delivered %llu images, the dataset has %llu\n",
                    e, (unsigned long long)ep->images, (unsigned long long)expect);
        r->rate[e] = ep->ns ? ep->images * 1e9 / ep->ns : 0;
        r->nep = e + 1;
        fprintf(stderr, "workers %2d  epoch %u/%u  %8.0f images/s  first batch %7.1f ms  %s\n",
                workers, e + 1, o->epochs, r->rate[e], ep->first_ns / 1e6, r->io);
    }
    r->checksum = h;
    if (o->trace && workers == o->workers[o->nworkers - 1] &&
        (rc = feeder_loader_trace_flush(ld)))
        die_loader(ld, rc, "--trace", workers, 0);
    feeder_loader_destroy(ld);
    bg_destroy(gpu);
    free(hostbuf);
    if (r->na)
        return;

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
    r->med_first_ms = bu_median(first, r->nep);
    r->mbps = bu_median(mbps, r->nep);
    r->gbps = bu_median(gbps, r->nep);
    r->read_us = images ? rd / 1e3 / images : 0;
    r->decode_us = images ? dec / 1e3 / images : 0;
    r->xform_us = images ? xf / 1e3 / images : 0;
    r->wait_ms = wait / 1e6 / r->nep;
    r->eff = -1;
    backend_figures(r);
    if (r->gpu) {
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
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct context {
    bu_machine m;
    char data[4096];
    uint64_t images, classes, jpeg_bytes;
    bu_sbuf cmd;
} context;

static void make_table(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b)
{
    bu_table tab, *t = &tab;
    bu_table_init(t, 0, NULL, NULL);
    const char *heads[] = {"workers", "pipeline", "decoder", "io", "images/s per epoch",
                           "images/s (steady)", "GB/s", "MB/s read", "first batch ms",
                           "read µs/img", "decode µs/img", "transform µs/img", "wait ms/epoch",
                           "scaling eff.", "checksum"};
    const int right[] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    unsigned ncols = o->checksum ? 15 : 14;
    int raw = g_pack.kind == FEEDER_RECORD_RAW;
    for (unsigned c = 0; c < ncols; c++) {
        t->head[c] = heads[c];
        t->right[c] = right[c];
    }
    const char *gheads[] = {"pin", "dtype", "H2D GB/s", "stall % after 1st", "GPU idle %",
                            "epoch / compute alone"};
    const int gright[] = {0, 0, 1, 1, 1, 1};
    unsigned gcol = ncols;
    if (o->device >= 0) {
        for (unsigned c = 0; c < 6; c++) {
            t->head[ncols + c] = gheads[c];
            t->right[ncols + c] = gright[c];
        }
        ncols += 6;
    }
    /* The GPU decoders' own columns (bench/decoders.c says what they are). */
    unsigned dcol = ncols;
    int gdec = o->decoder == FEEDER_DECODER_NVJPEG || o->decoder == FEEDER_DECODER_HYBRID;
    if (gdec) {
        t->head[ncols] = "GPU decode µs/img";
        t->head[ncols + 1] = "GPU fallback";
        t->head[ncols + 2] = "CPU share %";
        t->right[ncols] = t->right[ncols + 1] = t->right[ncols + 2] = 1;
        ncols += o->decoder == FEEDER_DECODER_HYBRID ? 3 : 2;
    }
    t->ncols = ncols;
    for (unsigned i = 0; i < n; i++) {
        const run_res *r = &runs[i];
        char(*row)[BU_TABLE_CELL] = bu_table_row(t);
        snprintf(row[0], 160, "%d", r->workers);
        snprintf(row[1], 160, "%s", raw ? "raw pack" : pipeline_names[o->pipeline]);
        snprintf(row[2], 160, "%s", raw ? "-" : decoder_names[o->decoder]);
        snprintf(row[3], 160, "%s", r->io);
        if (r->na) {
            snprintf(row[4], 160, "%s", r->na_reason);
            for (unsigned c = 5; c < ncols; c++)
                snprintf(row[c], 160, "-");
            continue;
        }
        if (gdec) {
            snprintf(row[dcol], 160, "%.1f", r->gpu_decode_us);
            snprintf(row[dcol + 1], 160, "%llu", (unsigned long long)r->gpu_fallback);
            if (o->decoder == FEEDER_DECODER_HYBRID)
                snprintf(row[dcol + 2], 160, "%.1f", r->hybrid_permille / 10.0);
        }
        size_t off = 0;
        for (unsigned e = 0; e < r->nep && off < 150; e++)
            off += (size_t)snprintf(row[4] + off, 160 - off, "%s%.0f", e ? " / " : "", r->rate[e]);
        snprintf(row[5], 160, "%.0f", r->steady_rate);
        snprintf(row[6], 160, "%.2f", r->gbps);
        snprintf(row[7], 160, "%.1f", r->mbps);
        snprintf(row[8], 160, "%.1f", r->med_first_ms);
        snprintf(row[9], 160, "%.1f", r->read_us);
        snprintf(row[10], 160, "%.1f", r->decode_us);
        snprintf(row[11], 160, "%.1f", r->xform_us);
        snprintf(row[12], 160, "%.1f", r->wait_ms);
        if (r->eff >= 0)
            snprintf(row[13], 160, "%.2f", r->eff);
        else
            snprintf(row[13], 160, "-");
        if (o->checksum)
            snprintf(row[14], 160, "%016llx", (unsigned long long)r->checksum);
        if (o->device >= 0) {
            snprintf(row[gcol], 160, "%s", pin_names[o->pin]);
            snprintf(row[gcol + 1], 160, "%s", dtype_names[o->dtype]);
            snprintf(row[gcol + 2], 160, "%.1f", r->h2d_gbps);
            snprintf(row[gcol + 3], 160, "%.2f", r->med_stall_pct);
            if (r->med_idle_pct >= 0)
                snprintf(row[gcol + 4], 160, "%.1f", r->med_idle_pct);
            else
                snprintf(row[gcol + 4], 160, "-");
            if (r->med_vs_alone >= 0)
                snprintf(row[gcol + 5], 160, "%.3f", r->med_vs_alone);
            else
                snprintf(row[gcol + 5], 160, "-");
        }
    }
    bu_table_render(t, b);
    bu_table_free(t);
}

static void make_header(const opts *o, const context *cx, bu_sbuf *b)
{
    if (g_pack.kind) {
        char shape[96] = "";
        if (g_pack.kind == FEEDER_RECORD_RAW)
            snprintf(shape, sizeof(shape), "RAW %ux%ux%u %s", g_pack.height, g_pack.width,
                     g_pack.channels, layout_names[g_pack.layout]);
        bu_sb_printf(b, "feeder %s on %s (%s); packed %s, read by %s%s, batch %u, prefetch %d, "
                     "%s order%s%s\n",
                     feeder_version_string(), cx->m.label, cx->m.cpu,
                     g_pack.kind == FEEDER_RECORD_RAW ? shape : "JPEG",
                     packed_read_names[o->packed_read],
                     o->verify_crc ? " with crc32c checks" : "", o->batch, o->prefetch,
                     o->shuffle ? "shuffled" : "sequential", o->in_order ? "" : ", in_order 0",
                     o->persistent ? ", persistent workers" : "");
        if (g_pack.kind == FEEDER_RECORD_JPEG)
            bu_sb_printf(b, "decoded with the %s pipeline, %s decoder, %ux%u %s\n",
                         pipeline_names[o->pipeline], decoder_names[o->decoder], o->size, o->size,
                         layout_names[o->layout]);
        if (o->device >= 0)
            bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, compute %.2f ms per batch\n",
                         o->device, pin_names[o->pin], o->gpu_prefetch, o->compute_ms);
        bu_sb_printf(b, "dataset %s: %llu records, %llu classes, %.1f MB of records (shard %u "
                     "of %u)\n",
                     cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
                     g_pack.data_bytes / 1e6, g_pack.shard_index + 1, g_pack.shard_count);
        return;
    }
    bu_sb_printf(b, "feeder %s on %s (%s); %s, %s decoder, batch %u, prefetch %d, %ux%u %s, "
              "%s order%s%s\n",
              feeder_version_string(), cx->m.label, cx->m.cpu, pipeline_names[o->pipeline],
              decoder_names[o->decoder], o->batch, o->prefetch, o->size, o->size,
              layout_names[o->layout], o->shuffle ? "shuffled" : "sequential",
              o->in_order ? "" : ", in_order 0", o->persistent ? ", persistent workers" : "");
    if (o->device >= 0)
        bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, compute %.2f ms per batch\n", o->device,
                  pin_names[o->pin], o->gpu_prefetch, o->compute_ms);
    bu_sb_printf(b, "dataset %s: %llu images, %llu classes, %.1f MB of JPEG (%.1f KB average)\n",
              cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
              cx->jpeg_bytes / 1e6, cx->images ? cx->jpeg_bytes / 1e3 / cx->images : 0.0);
}

static void make_footer(const opts *o, const run_res *runs, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "Steady = the median of the epochs after the first; the first epoch (start-up: "
              "fork, CUDA, nvJPEG, and the page cache as it was) is the first figure of "
              "\"images/s per epoch\". Epochs are timed from the first request (epoch 0 includes the "
              "start and its fork) to the end of the epoch; per-image stage times are summed "
              "over workers.");
    if (o->sweep)
        bu_sb_printf(b, " Scaling efficiency = images/s / (workers × images/s at workers 0).");
    if (o->checksum)
        bu_sb_printf(b, " With --checksum the rates include hashing every sample in the consumer "
                  "thread (XXH64 over pixels, then label, sample by sample).");
    if (o->device >= 0)
        bu_sb_printf(b, " GPU columns: H2D GB/s = bytes copied / copy time on the copy stream "
                  "(events); stall = time feeder_next blocked after the epoch's first batch, "
                  "as a share of the rest of the epoch; GPU idle = 1 - (time of the step "
                  "kernels on the user's stream) / epoch time; epoch / compute alone = epoch "
                  "time / the same steps run back to back on a resident buffer.");
    bu_sb_printf(b, "\n");
    if (o->device >= 0 && n > 0)
        bu_sb_printf(b, "gpu: %s\n", runs[0].gpu_how);
    if (o->trace && n > 0)
        bu_sb_printf(b, "trace: %s (workers %d; open it in ui.perfetto.dev or chrome://tracing)\n",
                     o->trace, runs[n - 1].workers);
    for (unsigned i = 0; i < n; i++)
        if (runs[i].io_reason[0]) {
            bu_sb_printf(b, "io: %s (%s)\n", runs[i].io, runs[i].io_reason);
            break;
        }
    if (o->checksum && n > 1) {
        int same = 1;
        for (unsigned i = 1; i < n; i++)
            same &= runs[i].checksum == runs[0].checksum;
        if (same)
            bu_sb_printf(b, "checksum %016llx is the same for every worker count.\n",
                      (unsigned long long)runs[0].checksum);
        else
            bu_sb_printf(b, "CHECKSUM MISMATCH between worker counts%s.\n",
                      o->in_order ? " (in_order 1: this is a determinism bug)"
                                  : " (expected with in_order 0)");
    }
}

static void make_json(const opts *o, const context *cx, const run_res *runs, unsigned n,
                      bu_sbuf *b)
{
    bu_sb_printf(b, "{\n  \"tool\": \"feeder\",\n  \"version\": ");
    bu_sb_json_str(b, feeder_version_string());
    bu_sb_printf(b, ",\n  \"label\": ");
    bu_sb_json_str(b, cx->m.label);
    bu_sb_printf(b, ",\n  \"cpu\": ");
    bu_sb_json_str(b, cx->m.cpu);
    bu_sb_printf(b, ",\n  \"cores\": %ld,\n  \"date\": ", cx->m.cores);
    bu_sb_json_str(b, cx->m.date);
    bu_sb_printf(b, ",\n  \"command\": ");
    bu_sb_json_str(b, cx->cmd.p);
    bu_sb_printf(b, ",\n  \"dataset\": {\"path\": ");
    bu_sb_json_str(b, cx->data);
    bu_sb_printf(b, ", \"images\": %llu, \"classes\": %llu, \"jpeg_bytes\": %llu, \"packed\": ",
              (unsigned long long)cx->images, (unsigned long long)cx->classes,
              (unsigned long long)cx->jpeg_bytes);
    if (g_pack.kind)
        bu_sb_printf(b, "{\"kind\": \"%s\", \"height\": %u, \"width\": %u, \"layout\": \"%s\", "
                     "\"data_bytes\": %llu, \"read\": \"%s\", \"verify_crc\": %s}},\n",
                     g_pack.kind == FEEDER_RECORD_RAW ? "raw" : "jpeg", g_pack.height,
                     g_pack.width, layout_names[g_pack.layout],
                     (unsigned long long)g_pack.data_bytes, packed_read_names[o->packed_read],
                     o->verify_crc ? "true" : "false");
    else
        bu_sb_printf(b, "null},\n");
    bu_sb_printf(b, "  \"config\": {\"batch\": %u, \"epochs\": %u, \"prefetch\": %d, "
              "\"pipeline\": \"%s\", \"decoder\": \"%s\", \"io\": \"%s\", \"seed\": %llu, "
              "\"size\": %u, \"resize\": %u, \"layout\": \"%s\", \"shuffle\": %d, "
              "\"in_order\": %d, \"persistent_workers\": %d, \"checksum\": %s},\n",
              o->batch, o->epochs, o->prefetch, pipeline_names[o->pipeline],
              decoder_names[o->decoder],
              o->io == FEEDER_IO_URING ? "uring" : o->io == FEEDER_IO_PREAD ? "pread" : "auto",
              (unsigned long long)o->seed, o->size, o->resize, layout_names[o->layout],
              o->shuffle, o->in_order, o->persistent, o->checksum ? "true" : "false");
    bu_sb_printf(b, "  \"runs\": [");
    for (unsigned i = 0; i < n; i++) {
        const run_res *r = &runs[i];
        if (r->na) {
            /* Not measured: no figure at all under the GPU decoder's name. */
            bu_sb_printf(b, "%s\n    {\"workers\": %d, \"status\": \"n/a\", \"reason\": ",
                         i ? "," : "", r->workers);
            bu_sb_json_str(b, r->na_reason + 5);
            bu_sb_printf(b, "}");
            continue;
        }
        bu_sb_printf(b, "%s\n    {\"workers\": %d, \"io_backend\": ", i ? "," : "", r->workers);
        bu_sb_json_str(b, r->io);
        bu_sb_printf(b, ", \"io_reason\": ");
        bu_sb_json_str(b, r->io_reason);
        bu_sb_printf(b, ",\n     \"steady_images_per_s\": %.1f, \"first_epoch_images_per_s\": %.1f, "
                  "\"first_epoch_first_batch_ms\": %.2f,",
                  r->steady_rate, r->rate[0], r->ep[0].first_ns / 1e6);
        bu_sb_printf(b, "\n     \"median_images_per_s\": %.1f, \"median_first_batch_ms\": %.2f, "
                  "\"median_mb_per_s\": %.2f, \"median_gb_per_s\": %.3f,\n     "
                  "\"read_us_per_image\": %.2f, "
                  "\"decode_us_per_image\": %.2f, \"transform_us_per_image\": %.2f, "
                  "\"wait_ms_per_epoch\": %.2f,\n     \"scaling_efficiency\": ",
                  r->med_rate, r->med_first_ms, r->mbps, r->gbps, r->read_us, r->decode_us,
                  r->xform_us, r->wait_ms);
        if (r->eff >= 0)
            bu_sb_printf(b, "%.4f", r->eff);
        else
            bu_sb_printf(b, "null");
        bu_sb_printf(b, ", \"status\": \"ok\", \"reason\": null");
        bu_sb_printf(b, ", \"cpu_cores_busy\": %.3f, \"gpu_busy_pct\": ", r->cpu_cores);
        if (r->gpu_busy_pct >= 0)
            bu_sb_printf(b, "%.3f", r->gpu_busy_pct);
        else
            bu_sb_printf(b, "null");
        bu_sb_printf(b, ", \"gpu_decode_us_per_image\": %.3f, \"gpu_decoded\": %llu, "
                     "\"gpu_fallback\": %llu, \"hybrid_cpu_permille\": %llu",
                     r->gpu_decode_us, (unsigned long long)r->gpu_decoded,
                     (unsigned long long)r->gpu_fallback, (unsigned long long)r->hybrid_permille);
        bu_sb_printf(b, ", \"shm_bytes\": %llu, \"slots\": %llu, \"checksum\": ",
                  (unsigned long long)r->shm_bytes, (unsigned long long)r->slots);
        if (o->checksum)
            bu_sb_printf(b, "\"%016llx\"", (unsigned long long)r->checksum);
        else
            bu_sb_printf(b, "null");
        bu_sb_printf(b, ",\n     \"gpu\": ");
        if (r->gpu) {
            bu_sb_printf(b, "{\"device\": %d, \"pin\": \"%s\", \"dtype\": \"%s\", "
                      "\"gpu_prefetch\": %d, \"compute_ms\": %.3f, \"h2d_gb_per_s\": %.2f, "
                      "\"h2d_bytes\": %llu, \"pin_ns\": %llu, \"median_stall_pct_after_first\": %.3f, "
                      "\"median_gpu_idle_pct\": %.2f, \"median_epoch_over_compute_alone\": %.4f, "
                      "\"status\": ",
                      o->device, pin_names[o->pin], dtype_names[o->dtype], o->gpu_prefetch,
                      o->compute_ms, r->h2d_gbps, (unsigned long long)r->h2d_bytes,
                      (unsigned long long)r->pin_ns, r->med_stall_pct, r->med_idle_pct,
                      r->med_vs_alone);
            bu_sb_json_str(b, r->gpu_how);
            bu_sb_printf(b, "}");
        } else {
            bu_sb_printf(b, "null");
        }
        bu_sb_printf(b, ",\n     \"epochs\": [");
        for (unsigned e = 0; e < r->nep; e++) {
            const epoch_res *ep = &r->ep[e];
            bu_sb_printf(b, "%s\n       {\"images\": %llu, \"batches\": %llu, \"seconds\": %.6f, "
                      "\"images_per_s\": %.1f, \"first_batch_ms\": %.3f, \"bytes_read\": %llu, "
                      "\"read_ns\": %llu, \"decode_ns\": %llu, \"transform_ns\": %llu, "
                      "\"wait_ns\": %llu, \"skipped\": %llu}",
                      e ? "," : "", (unsigned long long)ep->images,
                      (unsigned long long)ep->batches, ep->ns / 1e9, r->rate[e],
                      ep->first_ns / 1e6, (unsigned long long)ep->bytes,
                      (unsigned long long)ep->read_ns, (unsigned long long)ep->decode_ns,
                      (unsigned long long)ep->transform_ns, (unsigned long long)ep->wait_ns,
                      (unsigned long long)ep->skipped);
        }
        bu_sb_printf(b, "]}");
    }
    bu_sb_printf(b, "\n  ]\n}\n");
}

static void append_record(const opts *o, const context *cx, const bu_sbuf *header,
                          const bu_sbuf *tbl, const bu_sbuf *footer)
{
    char title[64];
    snprintf(title, sizeof(title), PROG ", %s", pipeline_names[o->pipeline]);
    bu_sbuf body = {0};
    bu_sb_printf(&body, "%s\n%s\n%s", header->p, tbl->p, footer->p);
    bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &cx->m, title, cx->cmd.p, body.p);
    free(body.p);
}

/* ------------------------------------------------------------------------ */
/* --decoder all: every backend on the same files, one table                 */
/* ------------------------------------------------------------------------ */

static void all_header(const opts *o, const context *cx, const char *pack,
                       const feeder_packed_info *pk, bu_sbuf *b)
{
    bu_sb_printf(b, "feeder %s on %s (%s); decode backends on the same files: %s pipeline, "
                 "%ux%u %s, batch %u, workers %d, prefetch %d, %u epochs, %s order%s%s\n",
                 feeder_version_string(), cx->m.label, cx->m.cpu, pipeline_names[o->pipeline],
                 o->size, o->size, layout_names[o->layout], o->batch, o->workers[0],
                 o->prefetch, o->epochs, o->shuffle ? "shuffled" : "sequential",
                 o->in_order ? "" : ", in_order 0", o->persistent ? ", persistent workers" : "");
    if (o->device >= 0)
        bu_sb_printf(b, "GPU: device %d, %s, gpu_prefetch %d, %s batches for every backend\n",
                     o->device, pin_names[o->pin], o->gpu_prefetch, dtype_names[o->dtype]);
    else
        bu_sb_printf(b, "host batches (no --device, or no GPU found)\n");
    bu_sb_printf(b, "dataset %s: %llu images, %llu classes, %.1f MB of JPEG (%.1f KB average); "
                 "raw: %s, %.1f MB of uint8 %ux%ux%u records\n",
                 cx->data, (unsigned long long)cx->images, (unsigned long long)cx->classes,
                 cx->jpeg_bytes / 1e6, cx->images ? cx->jpeg_bytes / 1e3 / cx->images : 0.0,
                 pack, pk->data_bytes / 1e6, pk->height, pk->width, pk->channels);
}

static void all_json(const opts *o, const context *cx, const char *pack,
                     const feeder_packed_info *pk, const bd_row *rows, unsigned n, bu_sbuf *b)
{
    bu_sb_printf(b, "{\n  \"tool\": \"feeder\",\n  \"mode\": \"decoders\",\n  \"version\": ");
    bu_sb_json_str(b, feeder_version_string());
    bu_sb_printf(b, ",\n  \"label\": ");
    bu_sb_json_str(b, cx->m.label);
    bu_sb_printf(b, ",\n  \"cpu\": ");
    bu_sb_json_str(b, cx->m.cpu);
    bu_sb_printf(b, ",\n  \"cores\": %ld,\n  \"date\": ", cx->m.cores);
    bu_sb_json_str(b, cx->m.date);
    bu_sb_printf(b, ",\n  \"command\": ");
    bu_sb_json_str(b, cx->cmd.p);
    bu_sb_printf(b, ",\n  \"dataset\": {\"path\": ");
    bu_sb_json_str(b, cx->data);
    bu_sb_printf(b, ", \"images\": %llu, \"classes\": %llu, \"jpeg_bytes\": %llu},\n"
                 "  \"raw_pack\": {\"path\": ",
                 (unsigned long long)cx->images, (unsigned long long)cx->classes,
                 (unsigned long long)cx->jpeg_bytes);
    bu_sb_json_str(b, pack);
    bu_sb_printf(b, ", \"data_bytes\": %llu, \"height\": %u, \"width\": %u},\n",
                 (unsigned long long)pk->data_bytes, pk->height, pk->width);
    bu_sb_printf(b, "  \"config\": {\"batch\": %u, \"workers\": %d, \"prefetch\": %d, "
                 "\"epochs\": %u, \"pipeline\": \"%s\", \"size\": %u, \"resize\": %u, "
                 "\"layout\": \"%s\", \"shuffle\": %d, \"persistent_workers\": %d, "
                 "\"device\": %d},\n  \"backends\": ",
                 o->batch, o->workers[0], o->prefetch, o->epochs, pipeline_names[o->pipeline],
                 o->size, o->resize, layout_names[o->layout], o->shuffle, o->persistent,
                 o->device);
    bd_json_rows(rows, n, b);
    bu_sb_printf(b, "\n}\n");
}

static int run_all(opts *o, context *cx)
{
    static const int order[BD_NBACKENDS] = {FEEDER_DECODER_TURBO, FEEDER_DECODER_ROI,
                                            FEEDER_DECODER_NVJPEG, FEEDER_DECODER_HYBRID, BD_RAW};
    char pack[4096];
    bd_raw_pack_path(pack, sizeof(pack), cx->data, o->size, o->resize, o->layout);
    /* Packed before anything is timed, so packing competes with nothing. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    bd_ensure_raw_pack(PROG, cx->data, pack, o->size, o->resize, o->layout,
                       cores > 0 ? (int)cores : 1, o->io);
    feeder_dataset *ds = open_dataset(cx->data);
    cx->images = feeder_dataset_size(ds);
    cx->classes = feeder_dataset_num_classes(ds);
    run_res *r = calloc(1, sizeof(run_res));
    bd_row *rows = calloc(BD_NBACKENDS, sizeof(bd_row));
    if (!r || !rows)
        die("out of memory");
    feeder_packed_info pk;
    memset(&pk, 0, sizeof(pk));
    for (unsigned i = 0; i < BD_NBACKENDS; i++) {
        opts ob = *o;
        ob.decoder = order[i];
        fprintf(stderr, "== %s\n", decoder_names[ob.decoder]);
        if (ob.decoder == BD_RAW) {
            feeder_dataset *dr = open_dataset(pack); /* sets g_pack */
            pk = g_pack;
            ob.shape_given = 0; /* the pack's own shape, made from these options */
            run_config(dr, &ob, o->workers[0], r, pack);
            feeder_dataset_destroy(dr);
            memset(&g_pack, 0, sizeof(g_pack));
        } else {
            run_config(ds, &ob, o->workers[0], r, cx->data);
        }
        if (ob.decoder == FEEDER_DECODER_TURBO)
            cx->jpeg_bytes = r->ep[0].bytes;
        bd_row *w = &rows[i];
        w->backend = decoder_names[ob.decoder];
        w->na = r->na;
        snprintf(w->reason, sizeof(w->reason), "%s", r->na_reason);
        w->gpu = r->gpu;
        w->nep = r->nep;
        memcpy(w->rate, r->rate, r->nep * sizeof(double));
        w->images_per_s = r->med_rate;
        w->mb_per_s = r->mbps;
        w->cpu_cores = r->cpu_cores;
        w->gpu_busy_pct = r->gpu_busy_pct;
        w->stall_ms = r->wait_ms;
        w->read_us = r->read_us;
        w->decode_us = r->decode_us;
        w->xform_us = r->xform_us;
        w->gpu_decode_us = r->gpu_decode_us;
        w->gpu_decoded = r->gpu_decoded;
        w->gpu_fallback = r->gpu_fallback;
        w->cpu_share_pct = ob.decoder == FEEDER_DECODER_HYBRID ? r->hybrid_permille / 10.0 : -1;
    }
    feeder_dataset_destroy(ds);
    free(r);

    bu_machine_init(&cx->m, o->label);
    bu_sbuf header = {0}, tbl = {0}, notes = {0};
    all_header(o, cx, pack, &pk, &header);
    bd_table(rows, BD_NBACKENDS, &tbl);
    bd_notes(rows, BD_NBACKENDS, pack, &notes);
    if (o->json) {
        bu_sbuf js = {0};
        all_json(o, cx, pack, &pk, rows, BD_NBACKENDS, &js);
        fputs(js.p, stdout);
        free(js.p);
    } else {
        printf("\n%s\n%s\n%s", header.p, tbl.p, notes.p);
    }
    fflush(stdout);
    if (o->append) {
        char title[96];
        snprintf(title, sizeof(title), PROG " --decoder all, %s", pipeline_names[o->pipeline]);
        bu_sbuf body = {0};
        bu_sb_printf(&body, "%s\n%s\n%s", header.p, tbl.p, notes.p);
        bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &cx->m, title, cx->cmd.p,
                         body.p);
        free(body.p);
    }
    free(header.p);
    free(tbl.p);
    free(notes.p);
    free(rows);
    free(cx->cmd.p);
    return 0;
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);

    context cx;
    memset(&cx, 0, sizeof(cx));
    bu_command_line(&cx.cmd, PROG, argc, argv);

    if (o.data) {
        snprintf(cx.data, sizeof(cx.data), "%s", o.data);
    } else {
        bm_default_dir(cx.data, sizeof(cx.data), set_names[o.set], o.make_images);
        char err[1024];
        if (bm_ensure_set(cx.data, set_names[o.set], o.make_images, FEEDER_BENCH_PHOTOS, err,
                          sizeof(err)))
            die("%s", err);
    }
    /* The GPU decoders need a device: the first one, when there is one. */
    if ((o.decoder == FEEDER_DECODER_NVJPEG || o.decoder == FEEDER_DECODER_HYBRID ||
         o.decoder == BD_ALL) && !o.device_given && bg_device_count() > 0)
        o.device = 0;
    if (o.decoder == BD_ALL)
        return run_all(&o, &cx);
    if (o.decoder == BD_RAW) {
        char pack[4096];
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        bd_raw_pack_path(pack, sizeof(pack), cx.data, o.size, o.resize, o.layout);
        bd_ensure_raw_pack(PROG, cx.data, pack, o.size, o.resize, o.layout,
                           cores > 0 ? (int)cores : 1, o.io);
        snprintf(cx.data, sizeof(cx.data), "%s", pack);
        o.shape_given = 0; /* the pack's own shape, made from these options */
    }
    feeder_dataset *ds = open_dataset(cx.data);
    cx.images = feeder_dataset_size(ds);
    cx.classes = feeder_dataset_num_classes(ds);

    run_res *runs = calloc(o.nworkers, sizeof(run_res));
    if (!runs)
        die("out of memory");
    for (unsigned i = 0; i < o.nworkers; i++)
        run_config(ds, &o, o.workers[i], &runs[i], cx.data);
    feeder_dataset_destroy(ds);
    /* One epoch reads every file once. Taken from the loader rather than by
     * stat()ing every path up front, which would warm the dentry cache
     * before the first, cold epoch. */
    cx.jpeg_bytes = runs[0].ep[0].bytes;

    double rate0 = -1;
    for (unsigned i = 0; i < o.nworkers; i++)
        if (runs[i].workers == 0)
            rate0 = runs[i].med_rate;
    if (o.sweep && rate0 > 0)
        for (unsigned i = 0; i < o.nworkers; i++)
            if (runs[i].workers > 0)
                runs[i].eff = runs[i].med_rate / (runs[i].workers * rate0);

    bu_machine_init(&cx.m, o.label);

    bu_sbuf header = {0}, tbl = {0}, footer = {0};
    make_header(&o, &cx, &header);
    make_table(&o, runs, o.nworkers, &tbl);
    make_footer(&o, runs, o.nworkers, &footer);
    if (o.json) {
        bu_sbuf js = {0};
        make_json(&o, &cx, runs, o.nworkers, &js);
        fputs(js.p, stdout);
        free(js.p);
    } else {
        printf("\n%s\n%s\n%s", header.p, tbl.p, footer.p);
    }
    fflush(stdout);
    if (o.append)
        append_record(&o, &cx, &header, &tbl, &footer);

    int mismatch = 0;
    if (o.checksum && o.in_order)
        for (unsigned i = 1; i < o.nworkers; i++)
            mismatch |= runs[i].checksum != runs[0].checksum;
    free(header.p);
    free(tbl.p);
    free(footer.p);
    free(cx.cmd.p);
    free(runs);
    /* A sweep whose in-order checksums differ has found a bug: say so in the
     * exit status too, so scripts notice. */
    return mismatch ? 3 : 0;
}
