/*
 * The packer's shared writer (pack_writer.h): messages, the temporary files
 * and the signals that remove them, the list of bad files, the progress bar,
 * and the shards from their plan to their names, read back with --verify.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "pack_writer.h"

/* The program named in messages (fpk_pack's `prog`). */
const char *fpk_prog = "feeder-pack";

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

void fpk_usage_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vdie_usage(fpk_prog, fmt, ap);
}

/* Fatal: remove the temporary output, say why, exit 1. */
void fpk_die(const char *fmt, ...)
{
    fpk_cleanup_tmp();
    va_list ap;
    va_start(ap, fmt);
    cli_vdie(fpk_prog, fmt, ap);
}

/* A formatted copy; out of memory is fatal. */
static char *vformat(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0 || !s)
        fpk_die("out of memory");
    return s;
}

/* ------------------------------------------------------------------------ */
/* Temporary files and signals                                               */
/* ------------------------------------------------------------------------ */

/* Names made before any file is created, so the handler only reads them. */
char **fpk_tmp_names;
volatile sig_atomic_t fpk_tmp_count;

void fpk_cleanup_tmp(void)
{
    for (sig_atomic_t i = 0; i < fpk_tmp_count; i++)
        unlink(fpk_tmp_names[i]);
}

/* unlink is async-signal-safe; SA_RESETHAND restores the default action, so
 * the re-raised signal, delivered when the handler returns, ends the process
 * with the status a caller expects from that signal. The loader's workers
 * inherit this handler (they are forked, not exec'd); one hit by the
 * terminal's SIGINT removes the same files and dies the same way. */
static void on_signal(int sig)
{
    fpk_cleanup_tmp();
    raise(sig);
}

void fpk_install_handlers(void)
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

void fpk_block_signals(int block)
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

bad_file *fpk_bad;
uint64_t fpk_nbad;
static uint64_t g_badcap;
uint8_t *fpk_isbad;

void fpk_bad_add(uint64_t i, const char *fmt, ...)
{
    if (fpk_isbad[i])
        return;
    if (fpk_nbad == g_badcap) {
        g_badcap = g_badcap ? g_badcap * 2 : 16;
        if (!(fpk_bad = realloc(fpk_bad, g_badcap * sizeof(*fpk_bad))))
            fpk_die("out of memory");
    }
    va_list ap;
    va_start(ap, fmt);
    char *line = vformat(fmt, ap);
    va_end(ap);
    fpk_bad[fpk_nbad++] = (bad_file){.index = i, .line = line};
    fpk_isbad[i] = 1;
}

static int by_index(const void *a, const void *b)
{
    uint64_t x = ((const bad_file *)a)->index, y = ((const bad_file *)b)->index;
    return x < y ? -1 : x > y;
}

/* Every bad file on stderr, in dataset order, each line after `lead`. */
void fpk_bad_list(const char *lead)
{
    qsort(fpk_bad, fpk_nbad, sizeof(*fpk_bad), by_index);
    for (uint64_t k = 0; k < fpk_nbad; k++)
        fprintf(stderr, "%s: %s%s\n", fpk_prog, lead, fpk_bad[k].line);
}

void fpk_bad_free(void)
{
    for (uint64_t k = 0; k < fpk_nbad; k++)
        free(fpk_bad[k].line);
    free(fpk_bad);
    free(fpk_isbad);
    fpk_bad = NULL;
    fpk_isbad = NULL;
    fpk_nbad = g_badcap = 0;
}

/* ------------------------------------------------------------------------ */
/* Progress                                                                  */
/* ------------------------------------------------------------------------ */

uint64_t fpk_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fpk_progress_draw(progress *p, uint64_t done, uint64_t bytes, int final)
{
    if (!p->on)
        return;
    uint64_t t = fpk_now_ns();
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

static uint64_t layout_size(feeder__pack_header *h, uint64_t count, uint64_t classes_bytes,
                            uint64_t data)
{
    h->count = count;
    return feeder__pack_layout(h, classes_bytes, data);
}

/* Cut the records into shards of at most `limit` bytes (0: one file). */
shard *fpk_plan_shards(const uint64_t *sizes, uint64_t n, uint64_t limit,
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

char *fpk_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

void fpk_name_shards(const fpk_opts *o, shard *v, uint32_t ns)
{
    size_t len = strlen(o->out);
    int suffix = len > 5 && strcmp(o->out + len - 5, ".pack") == 0;
    fpk_tmp_names = calloc(ns, sizeof(char *));
    if (!fpk_tmp_names)
        fpk_die("out of memory");
    for (uint32_t s = 0; s < ns; s++) {
        if (!o->shard_size)
            v[s].name = fpk_strdup_printf("%s", o->out);
        else
            v[s].name = fpk_strdup_printf("%.*s-%05u-of-%05u.pack",
                                          (int)(suffix ? len - 5 : len), o->out, s, ns);
        v[s].tmp = fpk_strdup_printf("%s.tmp.%d", v[s].name, (int)getpid());
        fpk_tmp_names[s] = v[s].tmp;
    }
}

void fpk_pwrite_all(const shard *s, const void *data, size_t len, uint64_t off)
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

void fpk_open_shards(shard *v, uint32_t ns, const feeder__pack_header *proto,
                     uint64_t classes_bytes, uint64_t total)
{
    /* Counted before any file exists: the handler may run at any time, and
     * unlinking a name not yet created is harmless. */
    fpk_tmp_count = (sig_atomic_t)ns;
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
void fpk_finish_shard(shard *sh, const char *classes, uint64_t classes_bytes)
{
    fpk_pwrite_all(sh, sh->index, sh->count * FEEDER__PACK_ENTRY_BYTES, sh->h.index_off);
    uint8_t *lab = malloc(sh->count * 8);
    if (!lab)
        fpk_die("out of memory");
    for (uint64_t i = 0; i < sh->count; i++)
        for (int b = 0; b < 8; b++)
            lab[i * 8 + b] = (uint8_t)((uint64_t)sh->labels[i] >> (8 * b));
    fpk_pwrite_all(sh, lab, sh->count * 8, sh->h.labels_off);
    free(lab);
    if (classes_bytes)
        fpk_pwrite_all(sh, classes, classes_bytes, sh->h.classes_off);
    uint8_t page[FEEDER__PACK_HEADER_BYTES];
    feeder__pack_header_encode(&sh->h, page);
    fpk_pwrite_all(sh, page, sizeof(page), 0);
    if (fdatasync(sh->fd) < 0)
        fpk_die("%s: fdatasync: %s", sh->tmp, strerror(errno));
    if (close(sh->fd) < 0)
        fpk_die("%s: close: %s", sh->tmp, strerror(errno));
    sh->fd = -1;
}

/* Which shard holds record g: shards are in record order. */
uint32_t fpk_shard_of(const shard *v, uint32_t ns, uint64_t g, uint32_t hint)
{
    while (hint + 1 < ns && g >= v[hint + 1].first)
        hint++;
    (void)ns;
    return hint;
}

/* ------------------------------------------------------------------------ */
/* Publishing and reading back                                              */
/* ------------------------------------------------------------------------ */

/* Every file is whole and on disk: now they get their names (all or none),
 * and the directory entry is synced. A signal waits until all are renamed. */
void fpk_publish(const fpk_opts *o, shard *v, uint32_t ns)
{
    fpk_block_signals(1);
    for (uint32_t s = 0; s < ns; s++) {
        if (rename(v[s].tmp, v[s].name) != 0) {
            int e = errno;
            for (uint32_t k = 0; k < s; k++)
                unlink(v[k].name);
            fpk_die("rename %s to %s: %s", v[s].tmp, v[s].name, strerror(e));
        }
    }
    fpk_tmp_count = 0;
    fpk_block_signals(0);
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

void fpk_free_shards(shard *v, uint32_t ns)
{
    for (uint32_t s = 0; s < ns; s++) {
        free(v[s].name);
        free(v[s].tmp);
        free(v[s].index);
        free(v[s].labels);
    }
    free(v);
    free(fpk_tmp_names);
    fpk_tmp_names = NULL;
}

/* Close and remove one pass's shards: a bad file left a hole in them. */
void fpk_discard_shards(shard *v, uint32_t ns)
{
    fpk_block_signals(1);
    fpk_cleanup_tmp();
    fpk_tmp_count = 0;
    fpk_block_signals(0);
    for (uint32_t s = 0; s < ns; s++)
        if (v[s].fd >= 0)
            close(v[s].fd);
    fpk_free_shards(v, ns);
}

void fpk_set_opt(feeder_loader *ld, feeder_option opt, int64_t v)
{
    int rc = feeder_loader_set(ld, opt, v);
    if (rc)
        fpk_die("setting %s to %lld: %s", feeder_option_name(opt), (long long)v,
            feeder_loader_errmsg(ld));
}

/* Read every output file back through the loader with VERIFY_CRC on. */
void fpk_verify(const fpk_opts *o, const shard *v, uint32_t ns, int jpeg)
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
        fpk_set_opt(ld, FEEDER_OPT_VERIFY_CRC, 1);
        fpk_set_opt(ld, FEEDER_OPT_NUM_WORKERS, o->workers);
        fpk_set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
        if (jpeg) {
            /* Decoding to a small size still reads every entropy-coded byte. */
            fpk_set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_RESIZE);
            fpk_set_opt(ld, FEEDER_OPT_HEIGHT, 32);
            fpk_set_opt(ld, FEEDER_OPT_WIDTH, 32);
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
