/*
 * The packer behind feeder-pack (tools/feeder-pack.c) and bench_loader's
 * --decoder raw cache (bench/decoders.c): an image folder or list file in, a
 * packed file out (docs/FORMAT.md). See packer.h; feeder-pack.c's comment
 * describes the modes, the temporary files and the signals.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "dataset/pack.h"
#include "pack_fields.h"
#include "packer.h"
#include "shrink.h"


/* The program named in messages (fpk_pack's `prog`). */
static const char *g_prog = "feeder-pack";

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

static void cleanup_tmp(void);

static void fpk_usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fpk_usage_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(%s --help lists the options)\n", g_prog);
    exit(2);
}

/* Fatal: remove the temporary output, say why, exit 1. */
static void fpk_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fpk_die(const char *fmt, ...)
{
    cleanup_tmp();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
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
                fpk_die("the output would be too large for a 64-bit size");
            if (limit && size > limit) {
                if (i == first)
                    fpk_die("--shard-size %llu is smaller than a shard holding record %llu alone "
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
                fpk_die("out of memory");
        }
        memset(&v[ns], 0, sizeof(v[ns]));
        v[ns].first = first;
        v[ns].count = i - first;
        v[ns].data_bytes = data;
        v[ns].fd = -1;
        ns++;
        if (ns > 99999)
            fpk_die("--shard-size %llu makes more than 99999 shards", (unsigned long long)limit);
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
        fpk_die("out of memory");
    return s;
}

static void name_shards(const fpk_opts *o, shard *v, uint32_t ns)
{
    size_t len = strlen(o->out);
    int suffix = len > 5 && strcmp(o->out + len - 5, ".pack") == 0;
    tmp_names = calloc(ns, sizeof(char *));
    if (!tmp_names)
        fpk_die("out of memory");
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
            fpk_die("%s: write of %zu bytes at offset %llu: %s", s->tmp, len,
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
            fpk_die("%s: cannot create: %s", sh->tmp, strerror(errno));
        if (ftruncate(sh->fd, (off_t)sh->file_bytes) < 0)
            fpk_die("%s: cannot size to %llu bytes: %s", sh->tmp,
                    (unsigned long long)sh->file_bytes, strerror(errno));
        sh->index = calloc(sh->count, FEEDER__PACK_ENTRY_BYTES);
        sh->labels = calloc(sh->count, sizeof(int64_t));
        if (!sh->index || !sh->labels)
            fpk_die("out of memory for the index of %llu records", (unsigned long long)sh->count);
    }
}

/* Index, labels, class names, then the header; flushed to disk. */
static void finish_shard(shard *sh, const char *classes, uint64_t classes_bytes)
{
    pwrite_all(sh, sh->index, sh->count * FEEDER__PACK_ENTRY_BYTES, sh->h.index_off);
    uint8_t *lab = malloc(sh->count * 8);
    if (!lab)
        fpk_die("out of memory");
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
        fpk_die("%s: fdatasync: %s", sh->tmp, strerror(errno));
    if (close(sh->fd) < 0)
        fpk_die("%s: close: %s", sh->tmp, strerror(errno));
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

/* A tar shard: the ustar magic of its first header (GNU's "ustar  " too). */
static int is_tar(const char *path)
{
    uint8_t h[512];
    FILE *f = fopen(path, "rb");
    int yes = f && fread(h, 1, sizeof(h), f) == sizeof(h) && memcmp(h + 257, "ustar", 5) == 0;
    if (f)
        fclose(f);
    return yes;
}

static feeder_dataset *open_source(const char *path, int allow_escape)
{
    struct stat st;
    char err[1024] = "";
    feeder_dataset *ds = NULL;
    int rc;
    /* WebDataset shards: a brace range of them, or one. */
    if (strchr(path, '{') || (stat(path, &st) == 0 && S_ISREG(st.st_mode) && is_tar(path))) {
        if ((rc = feeder_dataset_open_tar_pattern(path, &ds, err, sizeof(err))))
            fpk_die("%s", err[0] ? err : feeder_strerror(rc));
        return ds;
    }
    if (stat(path, &st) != 0)
        fpk_usage_die("--data '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        rc = feeder_dataset_open_folder(path, &ds, err, sizeof(err));
    else if (S_ISREG(st.st_mode))
        rc = feeder_dataset_open_list2(path, NULL, allow_escape ? FEEDER_LIST_ALLOW_ESCAPE : 0,
                                       &ds, err, sizeof(err));
    else
        fpk_usage_die("--data '%s': neither a folder nor a list file", path);
    /* The library's message names its flag; this tool's user has an option. */
    const char *flag = "FEEDER_LIST_ALLOW_ESCAPE allows it";
    char *at = rc == FEEDER_EPATH ? strstr(err, flag) : NULL;
    if (at)
        fpk_die("%.*s--allow-escape allows it%s", (int)(at - err), err, at + strlen(flag));
    if (rc)
        fpk_die("%s", err[0] ? err : feeder_strerror(rc));
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
        fpk_die("out of memory");
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
        fpk_die("setting %s to %lld: %s", feeder_option_name(opt), (long long)v,
            feeder_loader_errmsg(ld));
}

/* Channels of a RAW record: 1 (grayscale) or 3. */
static uint32_t raw_channels(const fpk_opts *o) { return o->channels == 1 ? 1 : 3; }

/* RAW: the loader decodes (EVAL, sequential, N workers); batches are written
 * as they come, each batch's share of a shard in one write. */
static uint64_t write_raw(const fpk_opts *o, feeder_dataset *ds, shard *v, uint32_t ns,
                          uint64_t rb, progress *pg)
{
    feeder_loader *ld;
    int rc = feeder_loader_create(ds, NULL, &ld);
    if (rc)
        fpk_die("feeder_loader_create: %s", feeder_strerror(rc));
    set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL);
    set_opt(ld, FEEDER_OPT_SHUFFLE, 0);
    set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
    set_opt(ld, FEEDER_OPT_NUM_WORKERS, o->workers);
    set_opt(ld, FEEDER_OPT_HEIGHT, o->height);
    set_opt(ld, FEEDER_OPT_WIDTH, o->width);
    set_opt(ld, FEEDER_OPT_RESIZE, o->resize);
    set_opt(ld, FEEDER_OPT_LAYOUT, o->layout);
    set_opt(ld, FEEDER_OPT_CHANNELS, raw_channels(o));
    set_opt(ld, FEEDER_OPT_IO, o->io);
    uint64_t next = 0, bytes = 0;
    uint32_t s = 0;
    feeder_batch *b;
    while ((rc = feeder_next(ld, &b)) == 0) {
        uint32_t j = 0;
        while (j < b->count) {
            if (b->indices[j] != next + j)
                fpk_die("internal error: the loader delivered sample %llu where %llu was due",
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
                uint32_t seed = feeder__pack_crc_seed(FEEDER__PACK_VERSION, b->labels[j + k]);
                feeder__pack_entry_encode(sh->index + (local + k) * FEEDER__PACK_ENTRY_BYTES, off,
                                          rb, feeder__crc32c(seed, src + (size_t)k * rb, rb));
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
        fpk_die("%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return bytes;
}

/* A tar sample's image member, `len` bytes at its offset in its shard. A
 * shard shorter than that now: -EIO, as a file that changed size. */
static int read_member(const feeder_dataset *ds, uint64_t i, uint8_t *buf, size_t len,
                       const char **tar)
{
    uint64_t off;
    feeder_dataset_tar_sample(ds, i, tar, NULL, &off, NULL, NULL);
    int fd = open(*tar, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? -errno : -EIO;
            close(fd);
            return e;
        }
        got += (size_t)k;
    }
    close(fd);
    return 0;
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

/* Sample i's bytes, from its file or its tar member; `name` gets what
 * messages call it (the path, or "SHARD: key KEY"). */
static int read_source(const feeder_dataset *ds, uint64_t i, uint8_t *buf, size_t len,
                       char *name, size_t namelen)
{
    const char *path = feeder_dataset_path(ds, i), *key = NULL;
    if (path) {
        snprintf(name, namelen, "%s", path);
        return read_whole(path, buf, len);
    }
    int rc = read_member(ds, i, buf, len, &path);
    feeder_dataset_tar_sample(ds, i, NULL, &key, NULL, NULL, NULL);
    snprintf(name, namelen, "%s: key %s", path, key);
    return rc;
}

/* Does a JPEG reach its end-of-image marker? The marker segments are walked
 * by their lengths and each scan's entropy-coded data up to the next marker
 * (0xFF followed by 0x00 is a stuffed byte, by 0xD0-0xD7 a restart); bytes
 * after the EOI are allowed (camera trailers). A file cut anywhere has no
 * EOI: caught without decoding, where tjDecompressHeader3 reads only the
 * header. */
static int jpeg_reaches_eoi(const uint8_t *b, size_t n)
{
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8)
        return 0;
    size_t i = 2;
    int in_scan = 0;
    while (i + 1 < n) {
        if (b[i] != 0xFF) {
            if (!in_scan)
                return 0;
            const uint8_t *ff = memchr(b + i, 0xFF, n - i);
            if (!ff)
                return 0;
            i = (size_t)(ff - b);
            continue;
        }
        uint8_t m = b[i + 1];
        if (m == 0xFF) { /* fill byte before a marker */
            i++;
            continue;
        }
        if (m == 0xD9)
            return 1;
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {
            if (m == 0x00 && !in_scan)
                return 0;
            i += 2; /* stuffed byte, TEM or restart: no length */
            continue;
        }
        if (i + 3 >= n)
            return 0;
        size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (len < 2)
            return 0;
        i += 2 + len;
        in_scan = m == 0xDA;
    }
    return 0;
}

/* A JPEG file's header, as tjDecompressHeader3 reads it. */
typedef struct jhdr {
    int w, h, ss, cs;
} jhdr;

/* Read file `path` (`size` bytes, from the plan) into buf and check it is a
 * JPEG TurboJPEG can parse that reaches its end-of-image marker. */
/* Sample i's bytes (a file, or a tar shard's member) into buf, checked to be
 * a whole JPEG; `path` gets the name messages use. */
static void read_jpeg(tjhandle tj, const feeder_dataset *ds, uint64_t i, uint8_t *buf,
                      uint64_t size, jhdr *hd, char *path, size_t pathlen)
{
    int rc = read_source(ds, i, buf, size, path, pathlen);
    if (rc == -EIO)
        fpk_die("%s: changed size while being packed", path);
    if (rc)
        fpk_die("%s: %s", path, strerror(-rc));
    /* A stream cut short after its tables "succeeds" without a frame: the
     * size must be set too. */
    hd->w = hd->h = 0;
    if (tjDecompressHeader3(tj, buf, (unsigned long)size, &hd->w, &hd->h, &hd->ss, &hd->cs) != 0 ||
        hd->w <= 0 || hd->h <= 0)
        fpk_die("%s: not a JPEG TurboJPEG can read: %s", path, tjGetErrorStr2(tj));
    if (!jpeg_reaches_eoi(buf, size))
        fpk_die("%s: truncated JPEG: no end-of-image marker (FF D9) after its last scan "
            "(--verify decodes every record)",
            path);
}

/* The fields of a --mode fields pack, for the summary. */
static char g_fields_desc[400];

/* What --max-side did, for the summary. */
static uint64_t g_shrunk, g_shrunk_from, g_shrunk_to;

/* The record of a file read into buf: its own bytes, or (sk set, the image
 * larger than --max-side) the re-encoded ones. */
static const uint8_t *record_bytes(fpk_shrinker *sk, const char *path, const uint8_t *buf,
                                   uint64_t size, const jhdr *hd, uint64_t *rlen)
{
    *rlen = size;
    if (!sk)
        return buf;
    const uint8_t *out;
    size_t olen;
    char err[1024];
    int rc = fpk_shrink(sk, buf, size, hd->w, hd->h, hd->ss, hd->cs, &out, &olen, err,
                        sizeof(err));
    if (rc < 0)
        fpk_die("%s: --max-side: %s", path, err);
    if (rc == 0)
        return buf;
    *rlen = olen;
    return out;
}

static uint8_t *alloc_biggest(const uint64_t *sizes, uint64_t n)
{
    uint64_t biggest = 0;
    for (uint64_t i = 0; i < n; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    uint8_t *buf = malloc(biggest ? biggest : 1);
    if (!buf)
        fpk_die("out of memory for a %llu-byte file", (unsigned long long)biggest);
    return buf;
}

static fpk_shrinker *open_shrinker(const fpk_opts *o)
{
    if (!o->max_side)
        return NULL;
    fpk_shrinker *sk = fpk_shrinker_create(o->max_side, o->quality);
    if (!sk)
        fpk_die("out of memory for the --max-side encoder");
    return sk;
}

/* --max-side: the records' sizes, before the shards are planned. Each large
 * file is re-encoded here and again when written (the encoder is
 * deterministic), so no record is held in memory between the passes. */
static void plan_shrunk(const fpk_opts *o, feeder_dataset *ds, const uint64_t *fsizes,
                        uint64_t *sizes, progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        fpk_die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    fpk_shrinker *sk = open_shrinker(o);
    uint64_t n = feeder_dataset_size(ds);
    uint8_t *buf = alloc_biggest(fsizes, n);
    for (uint64_t i = 0; i < n; i++) {
        char path[8400];
        jhdr hd;
        read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path));
        if (record_bytes(sk, path, buf, fsizes[i], &hd, &sizes[i]) != buf) {
            g_shrunk++;
            g_shrunk_from += fsizes[i];
            g_shrunk_to += sizes[i];
        }
        progress_draw(pg, i + 1, 0, 0);
    }
    free(buf);
    fpk_shrinker_destroy(sk);
    tjDestroy(tj);
}

/* JPEG: each file's bytes as they are (or re-encoded with --max-side),
 * checked to be a JPEG TurboJPEG can parse and to reach its end-of-image
 * marker, written in dataset order. fsizes are the files' sizes, sizes the
 * records' (the same array without --max-side). */
static uint64_t write_jpeg(const fpk_opts *o, feeder_dataset *ds, const uint64_t *fsizes,
                           const uint64_t *sizes, shard *v, uint32_t ns, progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        fpk_die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    fpk_shrinker *sk = open_shrinker(o);
    uint64_t n = feeder_dataset_size(ds), bytes = 0;
    uint8_t *buf = alloc_biggest(fsizes, n);
    uint32_t s = 0;
    uint64_t pos = 0; /* where the next record goes in its shard */
    for (uint64_t i = 0; i < n; i++) {
        char path[8400];
        jhdr hd;
        read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path));
        uint64_t rlen;
        const uint8_t *rec = record_bytes(sk, path, buf, fsizes[i], &hd, &rlen);
        if (rlen != sizes[i])
            fpk_die("%s: re-encoded to %llu bytes, %llu when the pack was planned", path,
                (unsigned long long)rlen, (unsigned long long)sizes[i]);
        uint32_t ns_before = s;
        s = shard_of(v, ns, i, s);
        shard *sh = &v[s];
        if (s != ns_before || i == 0)
            pos = sh->h.records_off;
        uint64_t local = i - sh->first;
        pwrite_all(sh, rec, rlen, pos);
        feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, pos, rlen,
                                  feeder__crc32c(feeder__pack_crc_seed(FEEDER__PACK_VERSION,
                                                                       feeder_dataset_label(ds, i)),
                                                 rec, rlen));
        sh->labels[local] = feeder_dataset_label(ds, i);
        pos += rlen;
        bytes += rlen;
        progress_draw(pg, i + 1, bytes, 0);
    }
    free(buf);
    fpk_shrinker_destroy(sk);
    tjDestroy(tj);
    return bytes;
}

/* Read every output file back through the loader with VERIFY_CRC on. */
static void verify(const fpk_opts *o, const shard *v, uint32_t ns, int jpeg)
{
    for (uint32_t s = 0; s < ns; s++) {
        char err[1024];
        feeder_dataset *ds;
        int rc = feeder_dataset_open_packed(v[s].name, &ds, err, sizeof(err));
        if (rc)
            fpk_die("verify: %s", err);
        feeder_loader *ld;
        if ((rc = feeder_loader_create(ds, NULL, &ld)))
            fpk_die("verify: feeder_loader_create: %s", feeder_strerror(rc));
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
                    fpk_die("verify: %s: record %llu has label %lld, %lld was written", v[s].name,
                        (unsigned long long)b->indices[k], (long long)b->labels[k],
                        (long long)v[s].labels[b->indices[k]]);
            seen += b->count;
            feeder_batch_release(b, NULL);
        }
        if (rc != FEEDER_DONE)
            fpk_die("verify: %s", feeder_loader_errmsg(ld));
        if (seen != v[s].count)
            fpk_die("verify: %s: read %llu records, %llu were written", v[s].name,
                (unsigned long long)seen, (unsigned long long)v[s].count);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}

/* A tar sample's image member size; a bad sample stops the pack, named. */
static uint64_t tar_member_size(const feeder_dataset *ds, uint64_t i)
{
    const char *tar, *key, *problem;
    uint64_t size;
    if (feeder_dataset_tar_sample(ds, i, &tar, &key, NULL, &size, &problem))
        fpk_die("%s: key %s: %s", tar, key, problem);
    if (size == 0)
        fpk_die("%s: key %s: empty image member", tar, key);
    return size;
}

/* The header every shard starts from, and each record's size (JPEG: its
 * file's, which decides the shards up front; RAW: one tensor). Returns the
 * RAW record size (0 for JPEG). */
static uint64_t plan_records(const fpk_opts *o, feeder_dataset *ds, uint64_t n,
                             uint64_t num_classes, feeder__pack_header *proto, uint64_t *sizes)
{
    memset(proto, 0, sizeof(*proto));
    proto->version = FEEDER__PACK_VERSION;
    proto->header_bytes = FEEDER__PACK_HEADER_BYTES;
    proto->dtype = FEEDER__PACK_DTYPE_UINT8;
    proto->label_type = FEEDER__PACK_LABEL_INT64;
    proto->num_classes = num_classes;
    if (o->jpeg) {
        proto->kind = FEEDER_RECORD_JPEG;
        for (uint64_t i = 0; i < n; i++) {
            struct stat st;
            const char *p = feeder_dataset_path(ds, i);
            if (!p) {
                sizes[i] = tar_member_size(ds, i);
                continue;
            }
            if (stat(p, &st) != 0)
                fpk_die("%s: %s", p, strerror(errno));
            if (!S_ISREG(st.st_mode))
                fpk_die("%s: not a regular file", p);
            if (st.st_size == 0)
                fpk_die("%s: empty file", p);
            sizes[i] = (uint64_t)st.st_size;
        }
        return 0;
    }
    uint64_t rb = (uint64_t)o->height * o->width * raw_channels(o);
    proto->kind = FEEDER_RECORD_RAW;
    proto->layout = (uint32_t)o->layout;
    proto->height = o->height;
    proto->width = o->width;
    proto->channels = raw_channels(o);
    proto->record_bytes = rb;
    for (uint64_t i = 0; i < n; i++)
        sizes[i] = rb;
    return rb;
}

/* Every file is whole and on disk: now they get their names (all or none),
 * and the directory entry is synced. A signal waits until all are renamed. */
static void publish(const fpk_opts *o, shard *v, uint32_t ns)
{
    block_signals(1);
    for (uint32_t s = 0; s < ns; s++) {
        if (rename(v[s].tmp, v[s].name) != 0) {
            int e = errno;
            for (uint32_t k = 0; k < s; k++)
                unlink(v[k].name);
            fpk_die("rename %s to %s: %s", v[s].tmp, v[s].name, strerror(e));
        }
    }
    tmp_count = 0;
    block_signals(0);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", o->out);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* the renames themselves */
        close(dfd);
    }
}

static void summary(const fpk_opts *o, const shard *v, uint32_t ns, uint64_t n, uint64_t t0)
{
    uint64_t total = 0;
    for (uint32_t s = 0; s < ns; s++)
        total += v[s].file_bytes;
    double secs = (now_ns() - t0) / 1e9;
    char what[512];
    if (o->fields)
        snprintf(what, sizeof(what), "fields: %s", g_fields_desc);
    else if (o->jpeg && o->max_side)
        snprintf(what, sizeof(what), "JPEG; %llu re-encoded at max side %u, quality %d: "
                 "%.1f MB to %.1f MB",
                 (unsigned long long)g_shrunk, o->max_side, o->quality, g_shrunk_from / 1e6,
                 g_shrunk_to / 1e6);
    else if (o->jpeg)
        snprintf(what, sizeof(what), "JPEG");
    else
        snprintf(what, sizeof(what), "RAW %ux%ux%u %s", o->height, o->width, raw_channels(o),
                 o->layout ? "nchw" : "nhwc");
    fprintf(stderr, "%s: %s: %llu records (%s) in %u file%s, %.1f MB, %.1f s (%.0f %s/s)%s\n",
            g_prog, ns == 1 ? v[0].name : o->out, (unsigned long long)n, what, ns,
            ns == 1 ? "" : "s", total / 1e6, secs, secs > 0 ? n / secs : 0.0,
            o->fields ? "samples" : "images", o->verify ? "; verified" : "");
}

static void free_shards(shard *v, uint32_t ns)
{
    for (uint32_t s = 0; s < ns; s++) {
        free(v[s].name);
        free(v[s].tmp);
        free(v[s].index);
        free(v[s].labels);
    }
    free(v);
    free(tmp_names);
    tmp_names = NULL;
}

/* The bytes --mode fields has read, for the progress bar's last line. */
static uint64_t g_fields_bytes;

static void tick(void *user, uint64_t done, uint64_t bytes)
{
    g_fields_bytes = bytes;
    progress_draw(user, done, bytes, 0);
}

/* --mode fields' output: OUT.tmp.PID, and the OUT.tmp.PID.tmp that
 * feeder_pack_fields writes first; both removed on a signal or an error. */
static shard fields_output(const fpk_opts *o, uint64_t n)
{
    shard one = {.count = n, .fd = -1, .name = xstrdup_printf("%s", o->out)};
    one.tmp = xstrdup_printf("%s.tmp.%d", o->out, (int)getpid());
    if (!(tmp_names = calloc(2, sizeof(char *))))
        fpk_die("out of memory");
    tmp_names[0] = one.tmp;
    tmp_names[1] = xstrdup_printf("%s.tmp", one.tmp);
    tmp_count = 2;
    return one;
}

/* --mode fields: the library's feeder_pack_fields writes the file, --verify
 * reads it back, then it gets its name. */
static void pack_fields(const fpk_opts *o)
{
    uint64_t t0 = now_ns();
    progress pg = {.on = o->progress, .what = "packing fields", .t0 = t0};
    fpk_fields_opts fo = {.data = o->data, .spec = o->fields_spec, .max_bytes = o->max_bytes,
                          .allow_escape = o->allow_escape, .tick = tick, .tick_user = &pg};
    char err[2048];
    fpk_fields *f;
    int rc = fpk_fields_open(&fo, &f, err, sizeof(err));
    if (rc == 2)
        fpk_usage_die("%s", err);
    if (rc)
        fpk_die("%s", err);
    uint64_t n = fpk_fields_count(f);
    pg.total = n;
    shard one = fields_output(o, n);
    if (feeder_pack_fields(fpk_fields_dataset(f), one.tmp, err, sizeof(err)))
        fpk_die("%s", fpk_fields_last_error(f) ? fpk_fields_last_error(f) : err);
    progress_draw(&pg, n, g_fields_bytes, 1);
    if (o->verify && fpk_fields_verify(f, one.tmp, o->out, o->workers, o->batch, err,
                                       sizeof(err)))
        fpk_die("verify: %s", err);
    struct stat st;
    one.file_bytes = stat(one.tmp, &st) == 0 ? (uint64_t)st.st_size : 0;
    tmp_count = 1;
    free(tmp_names[1]);
    publish(o, &one, 1);
    fpk_fields_describe(f, g_fields_desc, sizeof(g_fields_desc));
    if (!o->quiet)
        summary(o, &one, 1, n, t0);
    fpk_fields_close(f);
    free(one.name);
    free(one.tmp);
    free(tmp_names);
    tmp_names = NULL;
}

void fpk_pack(const char *prog, const fpk_opts *op)
{
    g_prog = prog;
    const fpk_opts o = *op;
    install_handlers();
    if (o.fields) {
        pack_fields(&o);
        return;
    }
    uint64_t t0 = now_ns();
    feeder_dataset *ds = open_source(o.data, o.allow_escape);
    uint64_t n = feeder_dataset_size(ds);
    uint64_t classes_bytes, num_classes;
    char *classes = class_block(ds, &classes_bytes, &num_classes);
    uint64_t *sizes = malloc((n ? n : 1) * sizeof(*sizes));
    if (!sizes)
        fpk_die("out of memory");
    feeder__pack_header proto;
    uint64_t rb = plan_records(&o, ds, n, num_classes, &proto, sizes);
    uint64_t *fsizes = sizes;
    if (o.jpeg && o.max_side) {
        if (!(fsizes = malloc((n ? n : 1) * sizeof(*fsizes))))
            fpk_die("out of memory");
        memcpy(fsizes, sizes, n * sizeof(*fsizes));
        progress pp = {.on = o.progress, .what = "sizing --max-side", .total = n, .t0 = now_ns()};
        plan_shrunk(&o, ds, fsizes, sizes, &pp);
        progress_draw(&pp, n, 0, 1);
    }
    uint32_t ns;
    shard *v = plan_shards(sizes, n, o.shard_size, classes_bytes, &ns);
    name_shards(&o, v, ns);
    open_shards(v, ns, &proto, classes_bytes, n);
    progress pg = {.on = o.progress, .what = o.jpeg ? "packing JPEG" : "packing RAW",
                   .total = n, .t0 = now_ns()};
    uint64_t bytes = o.jpeg ? write_jpeg(&o, ds, fsizes, sizes, v, ns, &pg)
                            : write_raw(&o, ds, v, ns, rb, &pg);
    progress_draw(&pg, n, bytes, 1);
    for (uint32_t s = 0; s < ns; s++)
        finish_shard(&v[s], classes, classes_bytes);
    publish(&o, v, ns);
    if (o.verify)
        verify(&o, v, ns, o.jpeg);
    if (!o.quiet)
        summary(&o, v, ns, n, t0);
    free_shards(v, ns);
    if (fsizes != sizes)
        free(fsizes);
    free(sizes);
    free(classes);
    feeder_dataset_destroy(ds);
}
