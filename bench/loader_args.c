/* bench_loader's command line: one table (cli/cli.h), then the checks that
 * involve more than one option. */
#include <string.h>

#include "loader.h"

const char *const set_names[] = {"web", "imagenet", "uniform", NULL};
const size_t dtype_size[] = {1, 2, 2, 4};
/* --dtype takes the library's names and these shorter ones. */
static const char *const dtype_extras[] = {"fp16", "bf16", "fp32", NULL};
static const int dtype_extra_values[] = {FEEDER_DTYPE_FLOAT16, FEEDER_DTYPE_BFLOAT16,
                                         FEEDER_DTYPE_FLOAT32};

const char *value_name(feeder_option opt, int v)
{
    const char *name = feeder_option_value_name(opt, v);
    return name ? name : "?";
}

opt_names opts_names(const opts *o)
{
    return (opt_names){.pipeline = value_name(FEEDER_OPT_PIPELINE, o->pipeline),
                       .decoder = bd_decoder_name(o->decoder),
                       .io = value_name(FEEDER_OPT_IO, o->io),
                       .layout = value_name(FEEDER_OPT_LAYOUT, o->layout),
                       .pin = value_name(FEEDER_OPT_PIN_MODE, o->pin),
                       .dtype = value_name(FEEDER_OPT_DTYPE, o->dtype),
                       .packed_read = value_name(FEEDER_OPT_PACKED_READ, o->packed_read)};
}

static const char epilog[] =
    "Exit status: 0 done, 1 the loader failed, 2 bad arguments, 3 --checksum differs\n"
    "between worker counts with in-order delivery (a determinism bug).\n";

/* --threads-sweep 1,2,4: distinct counts, with 0 (the scaling baseline) first. */
static void parse_sweep(const char *prog, const char *s, void *dest)
{
    opts *o = dest;
    uint64_t v[MAX_SWEEP];
    unsigned n = cli_parse_list(prog, "--threads-sweep", s, v, MAX_SWEEP - 1, 0, 1024);
    int have0 = 0;
    o->nworkers = 0;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = 0; j < i; j++)
            if (v[j] == v[i])
                die_usage("--threads-sweep '%s': %d appears twice", s, (int)v[i]);
        have0 |= v[i] == 0;
    }
    if (!have0)
        o->workers[o->nworkers++] = 0;
    for (unsigned i = 0; i < n; i++)
        o->workers[o->nworkers++] = (int)v[i];
    o->sweep = 1;
}

static void set_defaults(opts *o)
{
    memset(o, 0, sizeof(*o));
    o->batch = 256;
    o->epochs = 3;
    o->workers[0] = 0; /* check_args: the usable CPUs unless --workers */
    o->nworkers = 1;
    o->prefetch = 2;
    o->pipeline = FEEDER_PIPELINE_EVAL;
    o->decoder = FEEDER_DECODER_ROI;
    o->io = FEEDER_IO_AUTO;
    o->packed_read = FEEDER_PACKED_READ_AUTO;
    o->size = 224;
    o->layout = FEEDER_LAYOUT_NHWC;
    o->shuffle = -1;
    o->in_order = 1;
    o->timeout_ms = 120000;
    o->make_images = 2000;
    o->fetch_ahead = FETCH_AHEAD_DEFAULT;
    o->device = -1;
    o->pin = FEEDER_PIN_REGISTER;
    o->gpu_prefetch = 2;
    o->row_index_mib = 256;
    o->dtype = FEEDER_DTYPE_UINT8;
}

/* What one option implies for another, and the pairs that exclude each other. */
static void check_args(opts *o, int workers_given, const int *shape)
{
    o->shape_given = shape[0] | shape[1] | shape[2] | shape[3];
    o->make_images = o->make_images / 10 * 10; /* 10 classes of equal size */
    if (o->sweep && workers_given)
        die_usage("--workers and --threads-sweep exclude each other");
    /* A fixed count overcommits a small machine and under-uses a large one:
     * one worker per CPU this process may use. */
    if (!o->sweep && !workers_given) {
        o->workers[0] = bu_usable_cpus();
        o->workers_auto = 1;
    }
    if (o->sweep && o->decoder == BD_ALL)
        die_usage("--decoder all and --threads-sweep exclude each other (all runs every backend "
                  "at one worker count)");
    if (o->shuffle < 0)
        o->shuffle = 1; /* the order training reads, eval included; --shuffle 0 for file order */
    if (!o->resize)
        o->resize = (uint32_t)(((uint64_t)o->size * 256 + 112) / 224);
    if (o->device < 0 && (o->compute_ms > 0 || o->dtype != FEEDER_DTYPE_UINT8))
        die_usage("--compute-ms and --dtype need --device");
    if (o->pipeline == FEEDER_PIPELINE_EVAL && o->resize < o->size)
        die_usage("--resize %u is smaller than --size %u: the centre crop would not fit",
                  o->resize, o->size);
}

/* The table points into A, a file-scope copy of the options, so it is data
 * rather than code; parse_args copies A out. */
static opts A;
static int workers_given, shape[4], no_append;

static cli_opt table[] = {
    CLI_STRING("data", "DIR|LIST", A.data,
               "image folder (one sub-folder per class), list file of\n"
               "'path label' lines, packed file, or WebDataset tar shard\n"
               "(.jpg + .cls); or a brace range of packs or of tar shards\n"
               "(s-{0..7}.pack, s-{000..127}.tar), local or behind\n"
               "http://, https:// or s3:// URLs (one URL, or a range of\n"
               "them: s3://b/s-{0..7}.tar), opened as a shards dataset\n"
               "(shard cache: $FEEDER_CACHE_DIR); default: make 2,000\n"
               "images of --set under $FEEDER_DATA or\n~/.cache/feeder/web-2000"),
    CLI_UINT("fetch-ahead", "N", A.fetch_ahead, 0, 1000000,
             "URL shards (packs or tar): shards downloaded ahead of the\n"
             "sampler into the shard cache (default: half the online\n"
             "CPUs, 1 to 4; 0: none, the workers fetch each shard on\n"
             "demand)"),
    CLI_UINT("images", "N", A.make_images, 10, 10000000,
             "size of the dataset made when --data is not given (2000;\nmade in SET-N)"),
    CLI_ENUM("set", A.set, set_names,
             "the set made when --data is not\n"
             "given: a web-like JPEG mix (web, the default),\n"
             "ImageNet-like files, or uniform baseline 4:2:0 JPEGs\n"
             "(in default-N); bench/make_set makes them too"),
    CLI_UINT("batch", "N", A.batch, 1, 1u << 20, "samples per batch (256)"),
    CLI_UINT("epochs", "N", A.epochs, 1, MAX_EPOCHS,
             "epochs per configuration (3): the first is the warm-up\n"
             "(fork, cold page cache), the headline is the median of\n"
             "the others"),
    CLI_UINT("workers", "N", A.workers[0], 0, 1024,
             "worker processes, 0 = the calling thread (default: one\n"
             "per usable CPU, as sched_getaffinity counts them)"),
    CLI_UINT("prefetch", "N", A.prefetch, 1, 1024, "batches in flight per worker (2)"),
    CLI_UINT("split", "N", A.split, 0, 1 << 20,
             "tasks per batch, 0 = one per worker (FEEDER_OPT_SPLIT; 0)"),
    CLI_FUNC("threads-sweep", "LIST", parse_sweep, &A,
             "run each worker count in turn, e.g. 0,1,2,4,8,15\n"
             "(0 is added when missing: it is the scaling baseline)"),
    CLI_OPTION("pipeline", A.pipeline, FEEDER_OPT_PIPELINE,
             "(eval: resize 256 + centre crop 224;\ntrain: RandomResizedCrop 224 + flip)"),
    CLI_OPTIONX("decoder", A.decoder, FEEDER_OPT_DECODER, bd_decoder_extras,
                bd_decoder_extra_values, "full TurboJPEG decode, cropped\n"
                "DCT-scaled decode (roi, the default), nvJPEG batches on the\n"
                "GPU, CPU and GPU together (hybrid), the same images as a\n"
                "cached RAW pack of uint8 tensors beside the dataset (raw:\n"
                "DATA-SIZE.pack, made with feeder-pack's packer, remade when\n"
                "older than the dataset), or each of them on the same files\n"
                "in one table (all). nvjpeg, hybrid and all use --device 0\n"
                "when a GPU is present and --device is not given; a GPU\n"
                "decoder that cannot run is reported as n/a, not measured"),
    CLI_OPTION("io", A.io, FEEDER_OPT_IO, "read path (auto)"),
    CLI_UINT("seed", "N", A.seed, 0, UINT64_MAX, "seed of the order and the random crops (0)"),
    CLI_UINT("size", "N", A.size, 1, 65535, "output side (224)"),
    CLI_UINT("resize", "N", A.resize, 1, 65535,
             "eval: shorter side before the crop (size*256/224)"),
    CLI_OPTION("layout", A.layout, FEEDER_OPT_LAYOUT, "output layout (nhwc)"),
    CLI_UINT("shuffle", "0|1", A.shuffle, 0, 1,
             "random order, the one training reads (default 1; 0: file order)"),
    CLI_UINT("in-order", "0|1", A.in_order, 0, 1, "deliver in sampler order (1)"),
    CLI_FLAG("persistent", A.persistent, "keep the workers across epochs"),
    CLI_UINT("timeout-ms", "N", A.timeout_ms, 0, 86400000,
             "fail when no batch comes within N ms, 0 = never (120000)"),
    CLI_UINT("row-index", "MIB", A.row_index_mib, 0, 1 << 20,
             "roi: MiB the workers share for each JPEG's MCU-row\nstarts (FEEDER_OPT_ROW_INDEX_BYTES; 256; 0: off)"),
    CLI_FLAG("checksum", A.checksum,
             "hash every delivered pixel and label, in delivery order"),
    BU_CLI_REPORT_OPTIONS(A.json, A.append_to, A.label),
    CLI_FLAG("no-append", no_append, "the default (kept so older command lines run)"),
    CLI_INT("device", "N", A.device, -1, 1023,
            "deliver batches on CUDA device N (-1: host batches)"),
    CLI_OPTION("pin", A.pin, FEEDER_OPT_PIN_MODE, "how slots reach the GPU (register)"),
    CLI_UINT("gpu-prefetch", "N", A.gpu_prefetch, 2, 64, "device buffers in the ring (2)"),
    CLI_UINT("gpu-room", "BYTES", A.gpu_room, 0, 1u << 30,
             "nvjpeg/hybrid: slot room per sample for the encoded\nfiles, 0 = automatic "
             "(FEEDER_OPT_GPU_ROOM; 0)"),
    CLI_UINT("gpu-decode-threads", "N", A.gpu_decode_threads, 0, 4,
             "nvjpeg/hybrid: nvJPEG decoders side by side, each on\na thread of its own, "
             "0 = automatic (FEEDER_OPT_GPU_DECODE_THREADS; 0)"),
    CLI_OPTIONX("dtype", A.dtype, FEEDER_OPT_DTYPE, dtype_extras, dtype_extra_values,
                "device batch type; floats are normalised on\nthe GPU (uint8)"),
    CLI_DOUBLE("compute-ms", "X", A.compute_ms, 0, 60000,
               "per batch, a kernel on the user's stream reads every byte\n"
               "of the batch and spins X ms (a stand-in training step);\n"
               "reports consumer stall and GPU idle share (0)"),
    CLI_OPTION("packed-read", A.packed_read, FEEDER_OPT_PACKED_READ,
             "how a packed file's records are read (auto: mmap while\n"
             "the file fits in half the memory, else direct)"),
    CLI_FLAG("verify-crc", A.verify_crc, "check every packed record's crc32c while loading"),
    CLI_FLAG("drop-cache", A.drop_cache,
             "evict the dataset's files from the page cache before every\n"
             "epoch (cold-cache figures; untimed; reports what stayed)"),
    CLI_STRING("augment", "LIST", A.augment,
               "augmentations after the pipeline's crop, in order, as\n"
               "torchvision's defaults: jitter (ColorJitter 0.4,0.4,0.4,0.1),\n"
               "trivial (TrivialAugmentWide), randaug (RandAugment), gray\n"
               "(RandomGrayscale 0.2), blur (GaussianBlur 5), erase\n"
               "(RandomErasing 0.25), mixup, cutmix; compare_torch.py\n"
               "--augment runs the same on PyTorch's side"),
    CLI_FLAG("augment-on-device", A.augment_on_device,
             "with --device: the trailing colour steps (jitter, gray,\n"
             "blur) and mixup/cutmix run as kernels on the device batch"),
    CLI_STRING("trace", "FILE", A.trace,
               "write a timeline of the run (workers, consumer, pin threads,\n"
               "copy stream) to FILE as Chrome/Perfetto JSON; with\n"
               "--threads-sweep, of the last configuration only"),
    CLI_END,
};

void parse_args(opts *o, int argc, char **argv)
{
    set_defaults(&A);
    for (cli_opt *p = table; p->name; p++) {
        const char *n = p->name;
        p->given = !strcmp(n, "workers") ? &workers_given
                   : !strcmp(n, "pipeline") ? &shape[0] : !strcmp(n, "size") ? &shape[1]
                   : !strcmp(n, "resize") ? &shape[2] : !strcmp(n, "layout") ? &shape[3]
                   : !strcmp(n, "device") ? &A.device_given : NULL;
    }
    cli_spec spec = {.prog = PROG, .opts = table, .epilog = epilog};
    cli_parse(&spec, argc, argv);
    check_args(&A, workers_given, shape);
    *o = A;
    g_fetch_ahead = A.fetch_ahead == FETCH_AHEAD_DEFAULT ? 0
                    : A.fetch_ahead ? A.fetch_ahead : FEEDER_FETCH_AHEAD_NONE;
}
