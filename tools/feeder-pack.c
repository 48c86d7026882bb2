/*
 * feeder-pack: an image folder or list file in, a packed file out
 * (docs/FORMAT.md).
 *
 *   feeder-pack --data DIR|LIST --out F.pack [--mode raw|jpeg] [--size 224]
 *               [--resize 256] [--layout nhwc|nchw] [--workers N]
 *               [--shard-size BYTES] [--verify]
 *
 * RAW mode decodes every image once with the loader itself (EVAL pipeline:
 * resize the shorter side, centre crop; sequential order; N worker
 * processes) and stores the batches it delivers, so loading the pack gives
 * the very bytes loading the folder with that transform gives. JPEG mode
 * stores each file's bytes as they are, after checking that TurboJPEG can
 * parse its header.
 *
 * Output is written to NAME.tmp.PID beside NAME and renamed when complete
 * (after fdatasync), so NAME either does not exist or is whole. On an error,
 * SIGINT, SIGTERM or SIGHUP the temporary files are removed and no output
 * appears. SIGKILL cannot be caught: then NAME.tmp.PID may remain (never
 * NAME itself); delete it by hand.
 *
 * With --shard-size, records are split in dataset order into files of at
 * most BYTES each, named F-00000-of-0000N.pack (F is --out less its .pack
 * suffix); each shard is a complete packed file of its own records.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feeder.h"
#include "packer.h"

#define PROG "feeder-pack"

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(" PROG " --help lists the options)\n");
    exit(2);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --data DIR|LIST --out FILE.pack [options]\n"
            "  --data DIR|LIST     image folder (one sub-folder per class) or list file of\n"
            "                      'relative/path label' lines\n"
            "  --out FILE          the packed file; with --shard-size, FILE-00000-of-0000N.pack\n"
            "                      (FILE less its .pack suffix)\n"
            "  --mode raw|jpeg     raw: decode and transform once, store uint8 tensors (default);\n"
            "                      jpeg: store the original JPEG bytes\n"
            "  --size N|HxW        raw: output height x width (224)\n"
            "  --resize N          raw: shorter side before the centre crop (size*256/224)\n"
            "  --layout nhwc|nchw  raw: sample layout (nhwc)\n"
            "  --workers N         raw: decoding worker processes (number of cores)\n"
            "  --batch N           raw: samples per loader batch (64)\n"
            "  --shard-size BYTES  split into files of at most BYTES (suffix K, M, G: x1024)\n"
            "  --io auto|uring|pread  raw: how the loader reads the images (auto)\n"
            "  --allow-escape      a list file may name absolute paths and paths above its\n"
            "                      folder (refused by default, as the library does)\n"
            "  --verify            read the output back: every record's crc32c, every JPEG decoded\n"
            "  --progress          draw the progress bar even when stderr is not a terminal\n"
            "  --quiet             no progress bar, no summary\n"
            "  -h, --help          this text\n"
            "Exit status: 0 done, 1 failed (nothing written), 2 bad arguments.\n");
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef fpk_opts opts;

static uint64_t parse_uint(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        goto bad;
    return v;
bad:
    die_usage("%s '%s': expected an integer in [%llu, %llu]", opt, s, (unsigned long long)min,
              (unsigned long long)max);
}

static uint64_t parse_bytes(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    else if (*end == 'T' || *end == 't')
        shift = 40;
    if (shift)
        end++;
    if (errno || *end || v == 0 || v > (UINT64_MAX >> shift))
        goto bad;
    return (uint64_t)v << shift;
bad:
    die_usage("%s '%s': expected a positive size in bytes, optionally with K, M, G or T", opt,
              s);
}

static void parse_args(opts *o, int argc, char **argv)
{
    enum { O_DATA = 256, O_OUT, O_MODE, O_SIZE, O_RESIZE, O_LAYOUT, O_WORKERS, O_BATCH,
           O_SHARD, O_VERIFY, O_PROGRESS, O_QUIET, O_IO, O_ALLOW_ESCAPE };
    static const struct option longopts[] = {
        {"data", required_argument, 0, O_DATA},
        {"out", required_argument, 0, O_OUT},
        {"mode", required_argument, 0, O_MODE},
        {"size", required_argument, 0, O_SIZE},
        {"resize", required_argument, 0, O_RESIZE},
        {"layout", required_argument, 0, O_LAYOUT},
        {"workers", required_argument, 0, O_WORKERS},
        {"batch", required_argument, 0, O_BATCH},
        {"shard-size", required_argument, 0, O_SHARD},
        {"io", required_argument, 0, O_IO},
        {"allow-escape", no_argument, 0, O_ALLOW_ESCAPE},
        {"verify", no_argument, 0, O_VERIFY},
        {"progress", no_argument, 0, O_PROGRESS},
        {"quiet", no_argument, 0, O_QUIET},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof(*o));
    o->height = o->width = 224;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->workers = cores > 0 ? (int)cores : 1;
    o->batch = 64;
    int raw_opt = 0;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
        if (optarg && strncmp(optarg, "--", 2) == 0 && li >= 0)
            die_usage("--%s needs a value, got the option '%s'", longopts[li].name, optarg);
        li = -1;
        switch (c) {
        case O_DATA:
            o->data = optarg;
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_MODE:
            if (strcmp(optarg, "raw") == 0)
                o->jpeg = 0;
            else if (strcmp(optarg, "jpeg") == 0)
                o->jpeg = 1;
            else
                die_usage("--mode '%s': expected raw or jpeg", optarg);
            break;
        case O_SIZE: {
            const char *x = strchr(optarg, 'x');
            if (x) {
                char h[32];
                if ((size_t)(x - optarg) >= sizeof(h))
                    die_usage("--size '%s': expected N or HxW", optarg);
                memcpy(h, optarg, (size_t)(x - optarg));
                h[x - optarg] = 0;
                o->height = (uint32_t)parse_uint("--size", h, 1, 65535);
                o->width = (uint32_t)parse_uint("--size", x + 1, 1, 65535);
            } else {
                o->height = o->width = (uint32_t)parse_uint("--size", optarg, 1, 65535);
            }
            raw_opt = 1;
            break;
        }
        case O_RESIZE:
            o->resize = (uint32_t)parse_uint("--resize", optarg, 1, 65535);
            raw_opt = 1;
            break;
        case O_LAYOUT:
            if (strcmp(optarg, "nhwc") == 0)
                o->layout = FEEDER_LAYOUT_NHWC;
            else if (strcmp(optarg, "nchw") == 0)
                o->layout = FEEDER_LAYOUT_NCHW;
            else
                die_usage("--layout '%s': expected nhwc or nchw", optarg);
            raw_opt = 1;
            break;
        case O_WORKERS:
            o->workers = (int)parse_uint("--workers", optarg, 0, 1024);
            break;
        case O_BATCH:
            o->batch = (uint32_t)parse_uint("--batch", optarg, 1, 65536);
            break;
        case O_SHARD:
            o->shard_size = parse_bytes("--shard-size", optarg);
            break;
        case O_IO:
            if (strcmp(optarg, "auto") == 0)
                o->io = FEEDER_IO_AUTO;
            else if (strcmp(optarg, "uring") == 0)
                o->io = FEEDER_IO_URING;
            else if (strcmp(optarg, "pread") == 0)
                o->io = FEEDER_IO_PREAD;
            else
                die_usage("--io '%s': expected auto, uring or pread", optarg);
            break;
        case O_ALLOW_ESCAPE:
            o->allow_escape = 1;
            break;
        case O_VERIFY:
            o->verify = 1;
            break;
        case O_PROGRESS:
            o->progress = 1;
            break;
        case O_QUIET:
            o->quiet = 1;
            break;
        case 'h':
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
    if (!o->data || !o->out)
        die_usage("--data and --out are required");
    if (o->jpeg && raw_opt)
        die_usage("--size, --resize and --layout apply to --mode raw only (JPEG records are "
                  "stored as they are)");
    if (!o->resize) {
        uint32_t m = o->height > o->width ? o->height : o->width;
        o->resize = (uint32_t)(((uint64_t)m * 256 + 112) / 224);
    }
    if (o->resize < o->height || o->resize < o->width)
        die_usage("--resize %u is smaller than the %ux%u crop", o->resize, o->height, o->width);
    if (o->progress && o->quiet)
        die_usage("--progress and --quiet exclude each other");
    if (!o->quiet && !o->progress && isatty(2))
        o->progress = 1;
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    fpk_pack(PROG, &o);
    return 0;
}
