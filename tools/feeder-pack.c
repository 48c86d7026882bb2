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
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "feeder.h"
#include "loader/pack.h"

#define PROG "feeder-pack"

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

static void cleanup_tmp(void);

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

/* Fatal: remove the temporary output, say why, exit 1. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    cleanup_tmp();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
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
/* Temporary files and signals                                               */
/* ------------------------------------------------------------------------ */

/* Names made before any file is created, so the handler only reads them. */
static char **tmp_names;
static volatile sig_atomic_t tmp_count;

static void cleanup_tmp(void)
{
    for (sig_atomic_t i = 0; i < tmp_count; i++)
        unlink(tmp_names[i]);
}

/* unlink is async-signal-safe; SA_RESETHAND restores the default action, so
 * the re-raised signal, delivered when the handler returns, ends the process
 * with the status a caller expects from that signal. The loader's workers
 * inherit this handler (they are forked, not exec'd); one hit by the
 * terminal's SIGINT removes the same files and dies the same way. */
static void on_signal(int sig)
{
    cleanup_tmp();
    raise(sig);
}

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void block_signals(int block)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGHUP);
    sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &s, NULL);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct opts {
    const char *data, *out;
    int jpeg;
    uint32_t height, width, resize;
    int layout;
    int workers;
    uint32_t batch;
    uint64_t shard_size;
    int io;
    int allow_escape;
    int verify, progress, quiet;
} opts;

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

/* ------------------------------------------------------------------------ */
/* Progress                                                                  */
/* ------------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct progress {
    int on;
    const char *what;
    uint64_t total, t0, last;
} progress;

static void progress_draw(progress *p, uint64_t done, uint64_t bytes, int final)
{
    if (!p->on)
        return;
    uint64_t t = now_ns();
    if (!final && t - p->last < 100000000ull)
        return;
    p->last = t;
    double secs = (t - p->t0) / 1e9;
    int bar = p->total ? (int)(30.0 * done / p->total) : 30;
    fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu  %.0f images/s  %.1f MB/s ", p->what, bar,
            "==============================", 30 - bar, "", (unsigned long long)done,
            (unsigned long long)p->total, secs > 0 ? done / secs : 0.0,
            secs > 0 ? bytes / secs / 1e6 : 0.0);
    if (final)
        fprintf(stderr, "\n");
}

/* ------------------------------------------------------------------------ */
/* Shards                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct shard {
    uint64_t first, count;     /* records [first, first + count) of the dataset */
    uint64_t data_bytes;
    feeder__pack_header h;
    uint64_t file_bytes;
    char *name, *tmp;
    int fd;
    uint8_t *index;            /* count entries, filled while writing */
    int64_t *labels;
} shard;

static uint64_t layout_size(feeder__pack_header *h, uint64_t count, uint64_t classes_bytes,
                            uint64_t data)
{
    h->count = count;
    return feeder__pack_layout(h, classes_bytes, data);
}

/* Cut the records into shards of at most `limit` bytes (0: one file). */
static shard *plan_shards(const uint64_t *sizes, uint64_t n, uint64_t limit,
                          uint64_t classes_bytes, uint32_t *nshards)
{
    shard *v = NULL;
    uint32_t ns = 0, cap = 0;
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    uint64_t i = 0;
    while (i < n) {
        uint64_t first = i, data = 0;
        while (i < n) {
            uint64_t size = layout_size(&h, i - first + 1, classes_bytes, data + sizes[i]);
            if (size == 0)
                die("the output would be too large for a 64-bit size");
            if (limit && size > limit) {
                if (i == first)
                    die("--shard-size %llu is smaller than a shard holding record %llu alone "
                        "(%llu bytes)",
                        (unsigned long long)limit, (unsigned long long)i,
                        (unsigned long long)size);
                break;
            }
            data += sizes[i];
            i++;
        }
        if (ns == cap) {
            cap = cap ? cap * 2 : 16;
            if (!(v = realloc(v, cap * sizeof(*v))))
                die("out of memory");
        }
        memset(&v[ns], 0, sizeof(v[ns]));
        v[ns].first = first;
        v[ns].count = i - first;
        v[ns].data_bytes = data;
        v[ns].fd = -1;
        ns++;
        if (ns > 99999)
            die("--shard-size %llu makes more than 99999 shards", (unsigned long long)limit);
    }
    *nshards = ns;
    return v;
}

static char *xstrdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xstrdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    if (!s)
        die("out of memory");
    return s;
}

static void name_shards(const opts *o, shard *v, uint32_t ns)
{
    size_t len = strlen(o->out);
    int suffix = len > 5 && strcmp(o->out + len - 5, ".pack") == 0;
    tmp_names = calloc(ns, sizeof(char *));
    if (!tmp_names)
        die("out of memory");
    for (uint32_t s = 0; s < ns; s++) {
        if (!o->shard_size)
            v[s].name = xstrdup_printf("%s", o->out);
        else
            v[s].name = xstrdup_printf("%.*s-%05u-of-%05u.pack", (int)(suffix ? len - 5 : len),
                                       o->out, s, ns);
        v[s].tmp = xstrdup_printf("%s.tmp.%d", v[s].name, (int)getpid());
        tmp_names[s] = v[s].tmp;
    }
}

static void pwrite_all(const shard *s, const void *data, size_t len, uint64_t off)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t k = pwrite(s->fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            die("%s: write of %zu bytes at offset %llu: %s", s->tmp, len,
                (unsigned long long)off, strerror(errno));
        p += k;
        off += (uint64_t)k;
        len -= (size_t)k;
    }
}

static void open_shards(shard *v, uint32_t ns, const feeder__pack_header *proto,
                        uint64_t classes_bytes, uint64_t total)
{
    /* Counted before any file exists: the handler may run at any time, and
     * unlinking a name not yet created is harmless. */
    tmp_count = (sig_atomic_t)ns;
    for (uint32_t s = 0; s < ns; s++) {
        shard *sh = &v[s];
        sh->h = *proto;
        sh->h.count = sh->count;
        sh->h.shard_index = s;
        sh->h.shard_count = ns;
        sh->h.shard_first = sh->first;
        sh->h.total_records = total;
        sh->file_bytes = feeder__pack_layout(&sh->h, classes_bytes, sh->data_bytes);
        sh->fd = open(sh->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (sh->fd < 0)
            die("%s: cannot create: %s", sh->tmp, strerror(errno));
        if (ftruncate(sh->fd, (off_t)sh->file_bytes) < 0)
            die("%s: cannot size to %llu bytes: %s", sh->tmp, (unsigned long long)sh->file_bytes,
                strerror(errno));
        sh->index = calloc(sh->count, FEEDER__PACK_ENTRY_BYTES);
        sh->labels = calloc(sh->count, sizeof(int64_t));
        if (!sh->index || !sh->labels)
            die("out of memory for the index of %llu records", (unsigned long long)sh->count);
    }
}

/* Index, labels, class names, then the header; flushed to disk. */
static void finish_shard(shard *sh, const char *classes, uint64_t classes_bytes)
{
    pwrite_all(sh, sh->index, sh->count * FEEDER__PACK_ENTRY_BYTES, sh->h.index_off);
    uint8_t *lab = malloc(sh->count * 8);
    if (!lab)
        die("out of memory");
    for (uint64_t i = 0; i < sh->count; i++)
        for (int b = 0; b < 8; b++)
            lab[i * 8 + b] = (uint8_t)((uint64_t)sh->labels[i] >> (8 * b));
    pwrite_all(sh, lab, sh->count * 8, sh->h.labels_off);
    free(lab);
    if (classes_bytes)
        pwrite_all(sh, classes, classes_bytes, sh->h.classes_off);
    uint8_t page[FEEDER__PACK_HEADER_BYTES];
    feeder__pack_header_encode(&sh->h, page);
    pwrite_all(sh, page, sizeof(page), 0);
    if (fdatasync(sh->fd) < 0)
        die("%s: fdatasync: %s", sh->tmp, strerror(errno));
    if (close(sh->fd) < 0)
        die("%s: close: %s", sh->tmp, strerror(errno));
    sh->fd = -1;
}

/* Which shard holds record g: shards are in record order. */
static uint32_t shard_of(const shard *v, uint32_t ns, uint64_t g, uint32_t hint)
{
    while (hint + 1 < ns && g >= v[hint + 1].first)
        hint++;
    (void)ns;
    return hint;
}

/* ------------------------------------------------------------------------ */
/* The source dataset                                                        */
/* ------------------------------------------------------------------------ */

static feeder_dataset *open_source(const char *path, int allow_escape)
{
    struct stat st;
    if (stat(path, &st) != 0)
        die_usage("--data '%s': %s", path, strerror(errno));
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc;
    if (S_ISDIR(st.st_mode))
        rc = feeder_dataset_open_folder(path, &ds, err, sizeof(err));
    else if (S_ISREG(st.st_mode))
        rc = feeder_dataset_open_list2(path, NULL, allow_escape ? FEEDER_LIST_ALLOW_ESCAPE : 0,
                                       &ds, err, sizeof(err));
    else
        die_usage("--data '%s': neither a folder nor a list file", path);
    if (rc)
        die("%s", err[0] ? err : feeder_strerror(rc));
    return ds;
}

/* Class names of a folder dataset, back to back with their NULs. */
static char *class_block(const feeder_dataset *ds, uint64_t *bytes, uint64_t *count)
{
    uint64_t n = feeder_dataset_num_classes(ds), len = 0;
    *bytes = *count = 0;
    if (!n || !feeder_dataset_class_name(ds, 0))
        return NULL;
    for (uint64_t k = 0; k < n; k++)
        len += strlen(feeder_dataset_class_name(ds, k)) + 1;
    char *b = malloc(len);
    if (!b)
        die("out of memory");
    char *p = b;
    for (uint64_t k = 0; k < n; k++) {
        size_t l = strlen(feeder_dataset_class_name(ds, k)) + 1;
        memcpy(p, feeder_dataset_class_name(ds, k), l);
        p += l;
    }
    *bytes = len;
    *count = n;
    return b;
}

/* ------------------------------------------------------------------------ */
/* Writing records                                                           */
/* ------------------------------------------------------------------------ */

static void set_opt(feeder_loader *ld, feeder_option opt, int64_t v)
{
    int rc = feeder_loader_set(ld, opt, v);
    if (rc)
        die("setting %s to %lld: %s", feeder_option_name(opt), (long long)v,
            feeder_loader_errmsg(ld));
}

/* RAW: the loader decodes (EVAL, sequential, N workers); batches are written
 * as they come, each batch's share of a shard in one write. */
static uint64_t write_raw(const opts *o, feeder_dataset *ds, shard *v, uint32_t ns,
                          uint64_t rb, progress *pg)
{
    feeder_loader *ld;
    int rc = feeder_loader_create(ds, NULL, &ld);
    if (rc)
        die("feeder_loader_create: %s", feeder_strerror(rc));
    set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL);
    set_opt(ld, FEEDER_OPT_SHUFFLE, 0);
    set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
    set_opt(ld, FEEDER_OPT_NUM_WORKERS, o->workers);
    set_opt(ld, FEEDER_OPT_HEIGHT, o->height);
    set_opt(ld, FEEDER_OPT_WIDTH, o->width);
    set_opt(ld, FEEDER_OPT_RESIZE, o->resize);
    set_opt(ld, FEEDER_OPT_LAYOUT, o->layout);
    set_opt(ld, FEEDER_OPT_IO, o->io);
    uint64_t next = 0, bytes = 0;
    uint32_t s = 0;
    feeder_batch *b;
    while ((rc = feeder_next(ld, &b)) == 0) {
        uint32_t j = 0;
        while (j < b->count) {
            if (b->indices[j] != next + j)
                die("internal error: the loader delivered sample %llu where %llu was due",
                    (unsigned long long)b->indices[j], (unsigned long long)(next + j));
            s = shard_of(v, ns, next + j, s);
            shard *sh = &v[s];
            uint64_t local = next + j - sh->first;
            uint32_t n = b->count - j;
            if (local + n > sh->count)
                n = (uint32_t)(sh->count - local);
            const uint8_t *src = b->data + (size_t)j * b->sample_bytes;
            pwrite_all(sh, src, (size_t)n * rb, sh->h.records_off + local * rb);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t off = sh->h.records_off + (local + k) * rb;
                feeder__pack_entry_encode(sh->index + (local + k) * FEEDER__PACK_ENTRY_BYTES, off,
                                          rb, feeder__crc32c(0, src + (size_t)k * rb, rb));
                sh->labels[local + k] = b->labels[j + k];
            }
            j += n;
        }
        next += b->count;
        bytes += (uint64_t)b->count * rb;
        feeder_batch_release(b, NULL);
        progress_draw(pg, next, bytes, 0);
    }
    if (rc != FEEDER_DONE)
        die("%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return bytes;
}

static int read_whole(const char *path, uint8_t *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? -errno : -EIO;
            close(fd);
            return e;
        }
        got += (size_t)k;
    }
    /* One more byte: the file must not have grown since it was measured. */
    uint8_t extra;
    ssize_t k = read(fd, &extra, 1);
    close(fd);
    return k == 0 ? 0 : -EIO;
}

/* JPEG: each file's bytes as they are, checked to be a JPEG TurboJPEG can
 * parse, written in dataset order. */
static uint64_t write_jpeg(feeder_dataset *ds, const uint64_t *sizes, shard *v, uint32_t ns,
                           progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    uint64_t n = feeder_dataset_size(ds), bytes = 0, biggest = 0;
    for (uint64_t i = 0; i < n; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    uint8_t *buf = malloc(biggest ? biggest : 1);
    if (!buf)
        die("out of memory for a %llu-byte file", (unsigned long long)biggest);
    uint32_t s = 0;
    uint64_t pos = 0; /* where the next record goes in its shard */
    for (uint64_t i = 0; i < n; i++) {
        const char *path = feeder_dataset_path(ds, i);
        int rc = read_whole(path, buf, sizes[i]);
        if (rc == -EIO)
            die("%s: changed size while being packed", path);
        if (rc)
            die("%s: %s", path, strerror(-rc));
        /* A stream cut short after its tables "succeeds" without a frame:
         * the size must be set too. */
        int w = 0, h = 0, ss, cs;
        if (tjDecompressHeader3(tj, buf, (unsigned long)sizes[i], &w, &h, &ss, &cs) != 0 ||
            w <= 0 || h <= 0)
            die("%s: not a JPEG TurboJPEG can read: %s", path, tjGetErrorStr2(tj));
        uint32_t ns_before = s;
        s = shard_of(v, ns, i, s);
        shard *sh = &v[s];
        if (s != ns_before || i == 0)
            pos = sh->h.records_off;
        uint64_t local = i - sh->first;
        pwrite_all(sh, buf, sizes[i], pos);
        feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, pos, sizes[i],
                                  feeder__crc32c(0, buf, sizes[i]));
        sh->labels[local] = feeder_dataset_label(ds, i);
        pos += sizes[i];
        bytes += sizes[i];
        progress_draw(pg, i + 1, bytes, 0);
    }
    free(buf);
    tjDestroy(tj);
    return bytes;
}

/* Read every output file back through the loader with VERIFY_CRC on. */
static void verify(const opts *o, const shard *v, uint32_t ns, int jpeg)
{
    for (uint32_t s = 0; s < ns; s++) {
        char err[1024];
        feeder_dataset *ds;
        int rc = feeder_dataset_open_packed(v[s].name, &ds, err, sizeof(err));
        if (rc)
            die("verify: %s", err);
        feeder_loader *ld;
        if ((rc = feeder_loader_create(ds, NULL, &ld)))
            die("verify: feeder_loader_create: %s", feeder_strerror(rc));
        set_opt(ld, FEEDER_OPT_VERIFY_CRC, 1);
        set_opt(ld, FEEDER_OPT_NUM_WORKERS, o->workers);
        set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
        if (jpeg) {
            /* Decoding to a small size still reads every entropy-coded byte. */
            set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_RESIZE);
            set_opt(ld, FEEDER_OPT_HEIGHT, 32);
            set_opt(ld, FEEDER_OPT_WIDTH, 32);
        }
        uint64_t seen = 0;
        feeder_batch *b;
        while ((rc = feeder_next(ld, &b)) == 0) {
            for (uint32_t k = 0; k < b->count; k++)
                if (b->labels[k] != v[s].labels[b->indices[k]])
                    die("verify: %s: record %llu has label %lld, %lld was written", v[s].name,
                        (unsigned long long)b->indices[k], (long long)b->labels[k],
                        (long long)v[s].labels[b->indices[k]]);
            seen += b->count;
            feeder_batch_release(b, NULL);
        }
        if (rc != FEEDER_DONE)
            die("verify: %s", feeder_loader_errmsg(ld));
        if (seen != v[s].count)
            die("verify: %s: read %llu records, %llu were written", v[s].name,
                (unsigned long long)seen, (unsigned long long)v[s].count);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    install_handlers();
    uint64_t t0 = now_ns();

    feeder_dataset *ds = open_source(o.data, o.allow_escape);
    uint64_t n = feeder_dataset_size(ds);
    uint64_t classes_bytes, num_classes;
    char *classes = class_block(ds, &classes_bytes, &num_classes);

    feeder__pack_header proto;
    memset(&proto, 0, sizeof(proto));
    proto.version = FEEDER__PACK_VERSION;
    proto.header_bytes = FEEDER__PACK_HEADER_BYTES;
    proto.dtype = FEEDER__PACK_DTYPE_UINT8;
    proto.label_type = FEEDER__PACK_LABEL_INT64;
    proto.num_classes = num_classes;
    uint64_t *sizes = malloc(n * sizeof(*sizes));
    if (!sizes)
        die("out of memory");
    uint64_t rb = 0;
    if (o.jpeg) {
        proto.kind = FEEDER_RECORD_JPEG;
        /* Sizes first: they decide the shards (and their names) up front. */
        for (uint64_t i = 0; i < n; i++) {
            struct stat st;
            const char *p = feeder_dataset_path(ds, i);
            if (stat(p, &st) != 0)
                die("%s: %s", p, strerror(errno));
            if (!S_ISREG(st.st_mode))
                die("%s: not a regular file", p);
            if (st.st_size == 0)
                die("%s: empty file", p);
            sizes[i] = (uint64_t)st.st_size;
        }
    } else {
        proto.kind = FEEDER_RECORD_RAW;
        proto.layout = (uint32_t)o.layout;
        proto.height = o.height;
        proto.width = o.width;
        proto.channels = 3;
        rb = (uint64_t)o.height * o.width * 3;
        proto.record_bytes = rb;
        for (uint64_t i = 0; i < n; i++)
            sizes[i] = rb;
    }
    uint32_t ns;
    shard *v = plan_shards(sizes, n, o.shard_size, classes_bytes, &ns);
    name_shards(&o, v, ns);
    open_shards(v, ns, &proto, classes_bytes, n);

    progress pg = {.on = o.progress, .what = o.jpeg ? "packing JPEG" : "packing RAW",
                   .total = n, .t0 = now_ns()};
    uint64_t bytes = o.jpeg ? write_jpeg(ds, sizes, v, ns, &pg) : write_raw(&o, ds, v, ns, rb, &pg);
    progress_draw(&pg, n, bytes, 1);
    for (uint32_t s = 0; s < ns; s++)
        finish_shard(&v[s], classes, classes_bytes);

    /* Every file is whole and on disk: now they get their names. A signal
     * from here on waits until all are renamed. */
    block_signals(1);
    for (uint32_t s = 0; s < ns; s++) {
        if (rename(v[s].tmp, v[s].name) != 0) {
            int e = errno;
            /* All shards or none: take back the ones already named. */
            for (uint32_t k = 0; k < s; k++)
                unlink(v[k].name);
            die("rename %s to %s: %s", v[s].tmp, v[s].name, strerror(e));
        }
    }
    tmp_count = 0;
    block_signals(0);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", o.out);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* the renames themselves */
        close(dfd);
    }
    if (o.verify)
        verify(&o, v, ns, o.jpeg);

    if (!o.quiet) {
        uint64_t total = 0;
        for (uint32_t s = 0; s < ns; s++)
            total += v[s].file_bytes;
        double secs = (now_ns() - t0) / 1e9;
        char what[96];
        if (o.jpeg)
            snprintf(what, sizeof(what), "JPEG");
        else
            snprintf(what, sizeof(what), "RAW %ux%ux3 %s", o.height, o.width,
                     o.layout ? "nchw" : "nhwc");
        fprintf(stderr, PROG ": %s: %llu records (%s) in %u file%s, %.1f MB, %.1f s (%.0f images/s)%s\n",
                ns == 1 ? v[0].name : o.out, (unsigned long long)n, what, ns, ns == 1 ? "" : "s",
                total / 1e6, secs, secs > 0 ? n / secs : 0.0, o.verify ? "; verified" : "");
    }
    for (uint32_t s = 0; s < ns; s++) {
        free(v[s].name);
        free(v[s].tmp);
        free(v[s].index);
        free(v[s].labels);
    }
    free(v);
    free(tmp_names);
    free(sizes);
    free(classes);
    feeder_dataset_destroy(ds);
    return 0;
}
