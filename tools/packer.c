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
/* Bad files                                                                 */
/* ------------------------------------------------------------------------ */

/* Every file that cannot be packed, found in one run so that they can all be
 * fixed at once: its dataset index and its line ("NAME: reason"). */
typedef struct bad_file {
    uint64_t index;
    char *line;
} bad_file;

static bad_file *g_bad;
static uint64_t g_nbad, g_badcap;
static uint8_t *g_isbad; /* one flag per dataset index */

static void bad_add(uint64_t i, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad_add(uint64_t i, const char *fmt, ...)
{
    if (g_isbad[i])
        return;
    if (g_nbad == g_badcap) {
        g_badcap = g_badcap ? g_badcap * 2 : 16;
        if (!(g_bad = realloc(g_bad, g_badcap * sizeof(*g_bad))))
            fpk_die("out of memory");
    }
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    if (vasprintf(&line, fmt, ap) < 0)
        line = NULL;
    va_end(ap);
    if (!line)
        fpk_die("out of memory");
    g_bad[g_nbad++] = (bad_file){.index = i, .line = line};
    g_isbad[i] = 1;
}

static int by_index(const void *a, const void *b)
{
    uint64_t x = ((const bad_file *)a)->index, y = ((const bad_file *)b)->index;
    return x < y ? -1 : x > y;
}

/* Every bad file on stderr, in dataset order, each line after `lead`. */
static void bad_list(const char *lead)
{
    qsort(g_bad, g_nbad, sizeof(*g_bad), by_index);
    for (uint64_t k = 0; k < g_nbad; k++)
        fprintf(stderr, "%s: %s%s\n", g_prog, lead, g_bad[k].line);
}

static void bad_free(void)
{
    for (uint64_t k = 0; k < g_nbad; k++)
        free(g_bad[k].line);
    free(g_bad);
    free(g_isbad);
    g_bad = NULL;
    g_isbad = NULL;
    g_nbad = g_badcap = 0;
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

/* The loader that makes RAW records: EVAL, sequential, over `sampler` (NULL:
 * every sample). */
static feeder_loader *raw_loader(const fpk_opts *o, feeder_dataset *ds, feeder_sampler *sampler,
                                 int workers, int policy)
{
    feeder_loader *ld;
    int rc = feeder_loader_create(ds, sampler, &ld);
    if (rc)
        fpk_die("feeder_loader_create: %s", feeder_strerror(rc));
    set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL);
    set_opt(ld, FEEDER_OPT_SHUFFLE, 0);
    set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
    set_opt(ld, FEEDER_OPT_NUM_WORKERS, workers);
    set_opt(ld, FEEDER_OPT_HEIGHT, o->height);
    set_opt(ld, FEEDER_OPT_WIDTH, o->width);
    set_opt(ld, FEEDER_OPT_RESIZE, o->resize);
    set_opt(ld, FEEDER_OPT_LAYOUT, o->layout);
    set_opt(ld, FEEDER_OPT_CHANNELS, raw_channels(o));
    set_opt(ld, FEEDER_OPT_IO, o->io);
    set_opt(ld, FEEDER_OPT_ERROR_POLICY, policy);
    return ld;
}

/* What messages call sample i: its path, or "SHARD: key KEY". */
static void sample_name(const feeder_dataset *ds, uint64_t i, char *name, size_t len)
{
    const char *path = feeder_dataset_path(ds, i), *key = NULL;
    if (path) {
        snprintf(name, len, "%s", path);
        return;
    }
    feeder_dataset_tar_sample(ds, i, &path, &key, NULL, NULL, NULL);
    snprintf(name, len, "%s: key %s", path ? path : "?", key ? key : "?");
}

/* Why the loader left sample i out: it is loaded again alone, in this
 * process, under the fail policy, whose message says why. */
static void raw_bad(const fpk_opts *o, feeder_dataset *ds, uint64_t i)
{
    feeder_sampler *one;
    if (feeder_sampler_subset(&i, 1, 0, 0, &one))
        fpk_die("out of memory");
    feeder_loader *ld = raw_loader(o, ds, one, 0, FEEDER_ON_ERROR_FAIL);
    feeder_batch *b;
    char name[8400];
    sample_name(ds, i, name, sizeof(name));
    int rc = feeder_next(ld, &b);
    if (rc == 0) {
        feeder_batch_release(b, NULL);
        bad_add(i, "%s: failed to load, then loaded when tried again alone (does it change?)",
                name);
    } else {
        /* The loader's message names the batch, the sample and its path
         * ("batch 0 of epoch 0: sample I (PATH): why"): keep the why. */
        const char *msg = feeder_loader_errmsg(ld), *why = strstr(msg, name);
        why = why && !strncmp(why + strlen(name), "): ", 3) ? why + strlen(name) + 3 : msg;
        bad_add(i, "%s: %s", name, why);
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(one);
}

/* RAW: the loader decodes keep[0..nk) (EVAL, sequential, N workers) and
 * leaves out the samples it cannot load (FEEDER_ON_ERROR_DROP); record r is
 * keep[r]'s tensor. A left-out sample is a bad file: its record stays a
 * hole and fpk_pack lists it (then writes nothing, or packs again without
 * it). */
static uint64_t write_raw(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                          uint64_t nk, shard *v, uint32_t ns, uint64_t rb, progress *pg)
{
    feeder_sampler *sub = NULL;
    if (nk < feeder_dataset_size(ds) && feeder_sampler_subset(keep, nk, 0, 0, &sub))
        fpk_die("out of memory");
    feeder_loader *ld = raw_loader(o, ds, sub, o->workers, FEEDER_ON_ERROR_DROP);
    uint64_t r = 0, bytes = 0, nleft = 0, *left = NULL;
    uint32_t s = 0;
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t j = 0; j < b->count; j++, r++) {
            for (; r < nk && keep[r] != b->indices[j]; r++) {
                if (!(left = realloc(left, (nleft + 1) * sizeof(*left))))
                    fpk_die("out of memory");
                left[nleft++] = keep[r];
            }
            if (r == nk)
                fpk_die("internal error: the loader delivered sample %llu out of order",
                        (unsigned long long)b->indices[j]);
            s = shard_of(v, ns, r, s);
            shard *sh = &v[s];
            uint64_t local = r - sh->first, off = sh->h.records_off + local * rb;
            const uint8_t *src = b->data + (size_t)j * b->sample_bytes;
            pwrite_all(sh, src, rb, off);
            uint32_t seed = feeder__pack_crc_seed(FEEDER__PACK_VERSION, b->labels[j]);
            feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, off, rb,
                                      feeder__crc32c(seed, src, rb));
            sh->labels[local] = b->labels[j];
            bytes += rb;
        }
        feeder_batch_release(b, NULL);
        progress_draw(pg, r, bytes, 0);
    }
    if (rc != FEEDER_DONE)
        fpk_die("%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(sub);
    for (; r < nk; r++) {
        if (!(left = realloc(left, (nleft + 1) * sizeof(*left))))
            fpk_die("out of memory");
        left[nleft++] = keep[r];
    }
    for (uint64_t k = 0; k < nleft; k++)
        raw_bad(o, ds, left[k]);
    free(left);
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

/* Sample i's bytes (a file, or a tar shard's member; `size` bytes, from the
 * plan) into buf, checked to be a JPEG TurboJPEG can parse that reaches its
 * end-of-image marker; `path` gets the name messages use. 1 when it is not
 * (listed as bad), else 0. */
static int read_jpeg(tjhandle tj, const feeder_dataset *ds, uint64_t i, uint8_t *buf,
                     uint64_t size, jhdr *hd, char *path, size_t pathlen)
{
    int rc = read_source(ds, i, buf, size, path, pathlen);
    if (rc == -EIO) {
        bad_add(i, "%s: changed size while being packed", path);
        return 1;
    }
    if (rc) {
        bad_add(i, "%s: %s", path, strerror(-rc));
        return 1;
    }
    /* A stream cut short after its tables "succeeds" without a frame: the
     * size must be set too. */
    hd->w = hd->h = 0;
    if (tjDecompressHeader3(tj, buf, (unsigned long)size, &hd->w, &hd->h, &hd->ss, &hd->cs) != 0 ||
        hd->w <= 0 || hd->h <= 0) {
        bad_add(i, "%s: not a JPEG TurboJPEG can read: %s", path, tjGetErrorStr2(tj));
        return 1;
    }
    if (!jpeg_reaches_eoi(buf, size)) {
        bad_add(i, "%s: truncated JPEG: no end-of-image marker (FF D9) after its last scan "
                "(--verify decodes every record)", path);
        return 1;
    }
    return 0;
}

/* The fields of a --mode fields pack, for the summary. */
static char g_fields_desc[400];

/* What --max-side did, for the summary. */
static uint64_t g_shrunk, g_shrunk_from, g_shrunk_to;

/* The record of sample i's file read into buf: its own bytes, or (sk set,
 * the image larger than --max-side) the re-encoded ones; NULL when it cannot
 * be re-encoded (listed as bad). */
static const uint8_t *record_bytes(fpk_shrinker *sk, uint64_t i, const char *path,
                                   const uint8_t *buf, uint64_t size, const jhdr *hd,
                                   uint64_t *rlen)
{
    *rlen = size;
    if (!sk)
        return buf;
    const uint8_t *out;
    size_t olen;
    char err[1024];
    int rc = fpk_shrink(sk, buf, size, hd->w, hd->h, hd->ss, hd->cs, &out, &olen, err,
                        sizeof(err));
    if (rc < 0) {
        bad_add(i, "%s: --max-side: %s", path, err);
        return NULL;
    }
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
        if (g_isbad[i] || read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path)))
            continue;
        const uint8_t *rec = record_bytes(sk, i, path, buf, fsizes[i], &hd, &sizes[i]);
        if (rec && rec != buf) {
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
 * marker; record r is keep[r]'s. fsizes are the files' sizes, sizes the
 * records' (the same array without --max-side), both by dataset index. A bad
 * file is listed and its record left a hole (fpk_pack then writes nothing,
 * or packs again without it). */
static uint64_t write_jpeg(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                           uint64_t nk, const uint64_t *fsizes, const uint64_t *sizes, shard *v,
                           uint32_t ns, progress *pg)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        fpk_die("tjInitDecompress: %s", tjGetErrorStr2(NULL));
    fpk_shrinker *sk = open_shrinker(o);
    uint64_t n = feeder_dataset_size(ds), bytes = 0;
    uint8_t *buf = alloc_biggest(fsizes, n);
    uint32_t s = 0, cur = UINT32_MAX;
    uint64_t pos = 0; /* where the next record goes in its shard */
    for (uint64_t r = 0; r < nk; r++) {
        uint64_t i = keep[r];
        char path[8400];
        jhdr hd;
        uint64_t rlen;
        const uint8_t *rec = NULL;
        s = shard_of(v, ns, r, s);
        shard *sh = &v[s];
        if (s != cur) {
            cur = s;
            pos = sh->h.records_off;
        }
        if (!read_jpeg(tj, ds, i, buf, fsizes[i], &hd, path, sizeof(path)))
            rec = record_bytes(sk, i, path, buf, fsizes[i], &hd, &rlen);
        if (rec && rlen != sizes[i])
            fpk_die("%s: re-encoded to %llu bytes, %llu when the pack was planned", path,
                (unsigned long long)rlen, (unsigned long long)sizes[i]);
        if (!rec) {
            pos += sizes[i]; /* a hole: this pass's output is not kept */
            continue;
        }
        uint64_t local = r - sh->first;
        pwrite_all(sh, rec, rlen, pos);
        feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, pos, rlen,
                                  feeder__crc32c(feeder__pack_crc_seed(FEEDER__PACK_VERSION,
                                                                       feeder_dataset_label(ds, i)),
                                                 rec, rlen));
        sh->labels[local] = feeder_dataset_label(ds, i);
        pos += rlen;
        bytes += rlen;
        progress_draw(pg, r + 1, bytes, 0);
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

/* A tar sample's image member size; 0 for a bad sample (listed). */
static uint64_t tar_member_size(const feeder_dataset *ds, uint64_t i)
{
    const char *tar, *key, *problem;
    uint64_t size;
    if (feeder_dataset_tar_sample(ds, i, &tar, &key, NULL, &size, &problem))
        bad_add(i, "%s: key %s: %s", tar, key, problem);
    else if (size == 0)
        bad_add(i, "%s: key %s: empty image member", tar, key);
    return g_isbad[i] ? 0 : size;
}

/* The header every shard starts from, and each sample's record size (JPEG:
 * its file's, which decides the shards up front; RAW: one tensor). A file
 * that is missing, empty or not a regular file is listed as bad. Returns the
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
            sizes[i] = 0;
            if (stat(p, &st) != 0)
                bad_add(i, "%s: %s", p, strerror(errno));
            else if (!S_ISREG(st.st_mode))
                bad_add(i, "%s: not a regular file", p);
            else if (st.st_size == 0)
                bad_add(i, "%s: empty file", p);
            else
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

/* Close and remove one pass's shards: a bad file left a hole in them. */
static void discard_shards(shard *v, uint32_t ns)
{
    block_signals(1);
    cleanup_tmp();
    tmp_count = 0;
    block_signals(0);
    for (uint32_t s = 0; s < ns; s++)
        if (v[s].fd >= 0)
            close(v[s].fd);
    free_shards(v, ns);
}

/* The samples not listed as bad, in dataset order, into keep; how many. */
static uint64_t keep_list(uint64_t n, uint64_t *keep)
{
    uint64_t nk = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!g_isbad[i])
            keep[nk++] = i;
    return nk;
}

/* Plan, open and write the shards of keep[0..nk); a bad file found while
 * writing is listed (g_nbad grows). */
static shard *write_pass(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep, uint64_t nk,
                         const uint64_t *fsizes, const uint64_t *sizes, uint64_t rb,
                         const feeder__pack_header *proto, uint64_t classes_bytes, uint32_t *ns)
{
    uint64_t *rsizes = malloc((nk ? nk : 1) * sizeof(*rsizes));
    if (!rsizes)
        fpk_die("out of memory");
    for (uint64_t r = 0; r < nk; r++)
        rsizes[r] = sizes[keep[r]];
    shard *v = plan_shards(rsizes, nk, o->shard_size, classes_bytes, ns);
    free(rsizes);
    name_shards(o, v, *ns);
    open_shards(v, *ns, proto, classes_bytes, nk);
    progress pg = {.on = o->progress, .what = o->jpeg ? "packing JPEG" : "packing RAW",
                   .total = nk, .t0 = now_ns()};
    uint64_t bytes = o->jpeg ? write_jpeg(o, ds, keep, nk, fsizes, sizes, v, *ns, &pg)
                             : write_raw(o, ds, keep, nk, v, *ns, rb, &pg);
    progress_draw(&pg, nk, bytes, 1);
    return v;
}

/* The bad files: without --skip-bad every one is listed and nothing is
 * written (exit 1); with it, an empty remainder is an error too. */
static void bad_verdict(const fpk_opts *o, uint64_t n)
{
    if (!g_nbad)
        return;
    if (!o->skip_bad) {
        bad_list("");
        fpk_die("%llu bad file%s (listed above): nothing written; --skip-bad packs the others",
                (unsigned long long)g_nbad, g_nbad == 1 ? "" : "s");
    }
    if (g_nbad == n) {
        bad_list("skipped ");
        fpk_die("every one of the %llu files is bad (listed above): nothing to pack",
                (unsigned long long)n);
    }
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
    uint64_t *keep = malloc((n ? n : 1) * sizeof(*keep));
    if (!sizes || !keep || !(g_isbad = calloc(n ? n : 1, 1)))
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
    /* A bad file found while writing leaves a hole: with --skip-bad the
     * shards are planned and written again without it. The second pass finds
     * none unless a file changes meanwhile. */
    uint32_t ns = 0;
    shard *v = NULL;
    uint64_t nk = 0;
    for (int pass = 0;; pass++) {
        uint64_t before = g_nbad;
        nk = keep_list(n, keep);
        if (nk == 0)
            break;
        v = write_pass(&o, ds, keep, nk, fsizes, sizes, rb, &proto, classes_bytes, &ns);
        if (g_nbad == before || !o.skip_bad)
            break;
        if (pass == 1)
            fpk_die("%s (it went bad between two passes over the files)",
                    g_bad[g_nbad - 1].line);
        discard_shards(v, ns);
        v = NULL;
        ns = 0;
    }
    bad_verdict(&o, n);
    for (uint32_t s = 0; s < ns; s++)
        finish_shard(&v[s], classes, classes_bytes);
    publish(&o, v, ns);
    if (o.verify)
        verify(&o, v, ns, o.jpeg);
    if (g_nbad) {
        bad_list("skipped ");
        fprintf(stderr, "%s: skipped %llu bad file%s (--skip-bad); packed the other %llu\n",
                g_prog, (unsigned long long)g_nbad, g_nbad == 1 ? "" : "s",
                (unsigned long long)nk);
    }
    if (!o.quiet)
        summary(&o, v, ns, nk, t0);
    free_shards(v, ns);
    if (fsizes != sizes)
        free(fsizes);
    free(sizes);
    free(keep);
    free(classes);
    bad_free();
    feeder_dataset_destroy(ds);
}
