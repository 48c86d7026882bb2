/*
 * A shard's download into the cache, and its readers while it arrives: the
 * partial copy beside its progress record, the lanes that fetch its chunks
 * in order, the threads that run downloads for streaming readers, and the
 * waits of a reader for its own bytes. cache.c holds the folder, the copies
 * that have landed, eviction and the retry budget.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "remote/remote.h"

#include "remote/cache.h"

#define ULL(x) ((unsigned long long)(x))

/* Downloads this process runs on threads of their own for streaming
 * readers ("the download"), joined by feeder__remote_settle. Pushed
 * lock-free: a fork never inherits a held lock. */
typedef struct dl dl;
static _Atomic(dl *) dls_head;

/* ---- a download in progress, as its readers see it ---- */

/* "<data>.progress", beside the partial copy, made under the exclusive
 * lock and mapped shared by every process that reads the shard while it
 * arrives: the shard comes in chunks, each written in order from its
 * start, and chunk i's arrived bytes are raised as they reach the file.
 * A reader of bytes [a, b) waits until every chunk they touch has come as
 * far; the partial file already has the shard's size (preallocated), so
 * a mapping of it never faults. It may be kept as stripes (remote.h,
 * FEEDER__STRIPES_MAX), each preallocated. Made under a temporary name and renamed,
 * so a reader never sees half a record. */
enum { PROG_RUNNING = 0, PROG_DONE = 1, PROG_FAILED = 2, PROG_ABANDONED = 3 };
enum { PROG_CHUNKS_MAX = 4096 };
#define PROG_MAGIC 0x676f727072656467ull /* the layout's: a new one for each change */

struct feeder__progress {
    _Atomic uint64_t magic; /* PROG_MAGIC once the rest is written */
    _Atomic int state;
    int rc;                 /* PROG_FAILED: the download's error, and its message */
    int64_t pid;            /* the downloading process */
    uint64_t size, chunk;   /* the shard's bytes; each chunk's (the last: what is left) */
    uint32_t nchunks;
    uint32_t stripes;       /* the partial copy's files: chunk i in tmp's stripe i % stripes */
    char etag[128];
    char tmp[320];          /* the partial copy's name in the folder */
    char err[512];
    _Atomic uint64_t arrived[]; /* chunk i: bytes in the file from i * chunk on */
};

static size_t prog_bytes(uint32_t nchunks)
{
    size_t n = sizeof(feeder__progress) + (size_t)nchunks * sizeof(uint64_t);
    return (n + 4095) / 4096 * 4096;
}

/* Chunks of the part size, at least two of them and no more than
 * PROG_CHUNKS_MAX; a shard under twice the part size (or parts off) is one
 * chunk, fetched by one whole GET. */
static uint64_t chunk_for(const feeder__remote_cfg *cfg, uint64_t size)
{
    if (!cfg->part_bytes || cfg->max_parts < 2 || size / 2 < cfg->part_bytes)
        return size ? size : 1;
    uint64_t chunk = cfg->part_bytes;
    while (size / chunk >= PROG_CHUNKS_MAX)
        chunk *= 2;
    return chunk;
}

static void prog_path(const char *data, char *out, size_t len)
{
    feeder__fmt(out, len, "%s.progress", data);
}

/* A record of an earlier download of this shard (its process died: this
 * one holds the exclusive lock) is marked abandoned, so that its readers
 * get the shard again instead of waiting for bytes that will not come. */
static void prog_abandon(const char *data)
{
    char p[4300];
    prog_path(data, p, sizeof(p));
    int fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size >= sizeof(feeder__progress)) {
        feeder__progress *g = mmap(NULL, sizeof(*g), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (g != MAP_FAILED) {
            int running = PROG_RUNNING;
            atomic_compare_exchange_strong(&g->state, &running, PROG_ABANDONED);
            munmap(g, sizeof(*g));
        }
    }
    close(fd);
    unlink(p);
}

static feeder__progress *prog_create(const char *data, const char *tmp,
                                     const feeder__remote_meta *expect, uint64_t chunk,
                                     uint32_t stripes, size_t *len)
{
    static _Atomic unsigned seq;
    char p[4300], t[4400];
    prog_abandon(data);
    prog_path(data, p, sizeof(p));
    feeder__fmt(t, sizeof(t), "%s.tmp.%ld.%u", p, (long)getpid(), seq++);
    uint32_t n = (uint32_t)((expect->size + chunk - 1) / chunk);
    *len = prog_bytes(n);
    int fd = open(t, O_RDWR | CREATE_FLAGS, 0600);
    if (fd < 0)
        return NULL;
    feeder__progress *g = ftruncate(fd, (off_t)*len) == 0
        ? mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (g == MAP_FAILED) {
        unlink(t);
        return NULL;
    }
    const char *base = strrchr(tmp, '/');
    g->pid = getpid();
    g->size = expect->size;
    g->chunk = chunk;
    g->nchunks = n;
    g->stripes = stripes;
    feeder__fmt(g->etag, sizeof(g->etag), "%s", expect->etag);
    feeder__fmt(g->tmp, sizeof(g->tmp), "%s", base ? base + 1 : tmp);
    atomic_store_explicit(&g->magic, PROG_MAGIC, memory_order_release);
    if (rename(t, p) < 0) {
        unlink(t);
        munmap(g, *len);
        return NULL;
    }
    return g;
}

/* The download's end, for its readers; the record leaves the folder. */
static void prog_finish(const char *data, feeder__progress *g, size_t len, int rc,
                        const char *err)
{
    if (!g)
        return;
    if (rc) {
        g->rc = rc;
        feeder__fmt(g->err, sizeof(g->err), "%s", err);
    }
    atomic_store_explicit(&g->state, rc ? PROG_FAILED : PROG_DONE, memory_order_release);
    char p[4300];
    prog_path(data, p, sizeof(p));
    unlink(p);
    munmap(g, len);
}

/* ---- the download ---- */

/* One download into the cache: made under the shard's exclusive lock, run
 * there or (a reader that streams it) on a thread of its own, which then
 * owns the lock until the copy is renamed or removed. */
struct dl {
    feeder__cache *c;
    feeder__target t;
    char data[4200], tmp[4300];
    feeder__remote_meta expect;
    int has_expect;
    unsigned flags;           /* feeder__cache_fetch's */
    int fd[FEEDER__STRIPES_MAX]; /* the partial copy: stripe 0 (tmp), then tmp's stripes */
    uint32_t stripes;
    int lock_fd;              /* a thread's, held exclusively; else -1 */
    feeder__progress *prog;   /* with a known size, else NULL */
    size_t prog_len;
    int rc;
    char err[512];
    pid_t pid;
    pthread_t th;
    struct dl *next;
};


/* The chunks c, c + k, c + 2k, ... one after the other on one connection,
 * so that the arrived prefix grows at the k connections' rate. */
typedef struct lane {
    feeder__remote_cfg cfg;
    feeder__request *r;
    size_t n;
    int rc;
    char err[512];
    pthread_t th;
    int threaded;
} lane;

static void *lane_main(void *arg)
{
    lane *l = arg;
    l->rc = feeder__remote_run(&l->cfg, l->r, l->n, l->err, sizeof(l->err));
    return NULL;
}

static int fetch_chunks(dl *d, feeder__request *out, char *err, size_t errlen)
{
    const feeder__progress *g = d->prog;
    uint32_t n = g->nchunks, k = d->c->cfg.max_parts < n ? d->c->cfg.max_parts : n;
    uint32_t per = (n + k - 1) / k;
    feeder__request *rs = calloc((size_t)per * k, sizeof(*rs));
    lane *ls = calloc(k, sizeof(*ls));
    if (!rs || !ls) {
        free(rs);
        free(ls);
        return -ENOMEM;
    }
    for (uint32_t j = 0; j < k; j++) {
        ls[j] = (lane){.cfg = d->c->cfg, .r = rs + (size_t)j * per};
        ls[j].cfg.max_in_flight = 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        lane *l = &ls[i % k];
        uint64_t a = (uint64_t)i * g->chunk, b = i + 1 == n ? g->size - 1 : a + g->chunk - 1;
        uint32_t j = i % d->stripes; /* with stripes, a lane writes its own file */
        l->r[l->n++] = (feeder__request){.target = &d->t, .first = a, .last = b, .fd = d->fd[j],
                                         .fd_off = (uint64_t)(i / d->stripes) * g->chunk,
                                         .sized = 1, .cap = (size_t)(b - a + 1),
                                         .cap_what = "the chunk of the shard asked for",
                                         .arrived = &d->prog->arrived[i], .expect = &d->expect};
    }
    for (uint32_t j = 1; j < k; j++)
        ls[j].threaded = pthread_create(&ls[j].th, NULL, lane_main, &ls[j]) == 0;
    lane_main(&ls[0]);
    for (uint32_t j = 1; j < k; j++) {
        if (ls[j].threaded)
            pthread_join(ls[j].th, NULL);
        else
            lane_main(&ls[j]); /* no thread: in turn */
    }
    /* The first failure in the shard's order names the download's error; a
     * changed shard before any other, since it explains the rest. */
    int rc = 0;
    const feeder__request *bad = NULL;
    out->len = 0;
    out->meta = rs[0].meta;
    for (uint32_t i = 0; i < n; i++) {
        const feeder__request *r = &ls[i % k].r[i / k];
        out->len += r->len;
        if (r->rc && (!bad || (r->rc == FEEDER_ECHECKSUM && bad->rc != FEEDER_ECHECKSUM)))
            bad = r;
        else if (!r->rc && !bad && r->len != r->last - r->first + 1 && !rc) {
            feeder__fmt(err, errlen, "%s: %zu bytes arrived of the %llu asked for (bytes "
                        "%llu-%llu)", d->t.url, r->len, ULL(r->last - r->first + 1),
                        ULL(r->first), ULL(r->last));
            rc = FEEDER_EREMOTE;
        }
    }
    if (bad) {
        rc = bad->rc;
        feeder__fmt(err, errlen, "%s", bad->err);
    }
    out->meta.size = g->size;
    free(rs);
    free(ls);
    return rc;
}

/* Remove the partial copy's files, those made so far. */
static void dl_discard(dl *d)
{
    for (uint32_t j = 0; j < d->stripes; j++) {
        char p[4400];
        if (d->fd[j] >= 0)
            close(d->fd[j]);
        d->fd[j] = -1;
        if (j)
            feeder__stripe_name(d->tmp, j, p, sizeof(p));
        unlink(j ? p : d->tmp);
    }
    d->stripes = 0;
}

/* The partial copy, of the shard's size from the start when it is known
 * (a full disk shows before any byte is fetched, and its readers' mappings
 * never reach past its end): one file, or, for a reader that maps it
 * (FEEDER__GET_STRIPED) and a shard in several chunks, a stripe a lane;
 * and the progress record. */
static int dl_begin(dl *d, char *err, size_t errlen)
{
    static _Atomic unsigned seq;
    feeder__fmt(d->tmp, sizeof(d->tmp), "%s.tmp.%ld.%u", d->data, (long)getpid(), seq++);
    uint64_t size = d->has_expect ? d->expect.size : 0;
    uint64_t chunk = chunk_for(&d->c->cfg, size);
    uint64_t nchunks = size ? (size + chunk - 1) / chunk : 1;
    /* Stripes when every lane has more than one chunk to write: a 1.5 GB
     * pack (188 chunks, 4 lanes) came in at 0.91 of the local first epoch
     * as stripes, 0.65 as one file; 20 MB shards (3 chunks, a lane each)
     * gained nothing (docs/BENCHMARKS.md, "Shards over HTTP"). Each chunk is
     * mapped on its own, so it must be whole pages. */
    uint32_t want = 1;
    uint64_t lanes = d->c->cfg.max_parts;
    if ((d->flags & FEEDER__GET_STRIPED) && lanes > 1 && nchunks >= 2 * lanes &&
        chunk % (uint64_t)sysconf(_SC_PAGESIZE) == 0)
        want = lanes < FEEDER__STRIPES_MAX ? (uint32_t)lanes : FEEDER__STRIPES_MAX;
    int rc = 0;
    for (d->stripes = 0; d->stripes < want && !rc; d->stripes++) {
        uint32_t j = d->stripes;
        char p[4400];
        if (j)
            feeder__stripe_name(d->tmp, j, p, sizeof(p));
        const char *path = j ? p : d->tmp;
        if ((d->fd[j] = open(path, O_RDWR | CREATE_FLAGS, 0600)) < 0) {
            rc = errno;
            feeder__fmt(err, errlen, "%s: cannot create %s in the shard cache: %s", d->t.url,
                        path, strerror(rc));
            break;
        }
        uint64_t bytes = feeder__stripe_bytes(size, chunk, want, j);
        if (!bytes)
            continue;
        rc = fallocate(d->fd[j], 0, 0, (off_t)bytes) < 0 ? errno : 0;
        if (rc == EOPNOTSUPP && ftruncate(d->fd[j], (off_t)bytes) < 0)
            rc = errno; /* a file system without fallocate: a sparse file of that size */
        else if (rc == EOPNOTSUPP)
            rc = 0;
        if (rc == ENOSPC || rc == EFBIG || rc == EDQUOT)
            feeder__fmt(err, errlen, "%s: the shard cache %s is full (%s); the partial download "
                        "was removed", d->t.url, d->c->dir, strerror(rc));
        else if (rc)
            feeder__fmt(err, errlen, "%s: sizing %s: %s", d->t.url, path, strerror(rc));
    }
    if (!rc && size &&
        !(d->prog = prog_create(d->data, d->tmp, &d->expect, chunk, want, &d->prog_len))) {
        rc = errno ? errno : ENOMEM;
        feeder__fmt(err, errlen, "%s: cannot create its progress record in the shard cache "
                    "%s: %s", d->t.url, d->c->dir, strerror(rc));
    }
    if (rc)
        dl_discard(d);
    return -rc;
}

/* The transfers, their checks, then .meta and the rename (or the partial
 * copy removed), the outcome told to the readers and, for a server's
 * failure, recorded. */
static int dl_run(dl *d, char *err, size_t errlen)
{
    const feeder__remote_meta *expect = d->has_expect ? &d->expect : NULL;
    feeder__request r = {.target = &d->t, .last = UINT64_MAX, .fd = d->fd[0]};
    if (expect && expect->size) {
        r.cap = (size_t)expect->size;
        r.cap_what = "the shard's size when the dataset was opened";
        r.sized = 1;
        r.expect = expect;
    }
    int rc;
    if (d->prog && d->prog->nchunks > 1) {
        rc = fetch_chunks(d, &r, err, errlen);
    } else {
        r.arrived = d->prog ? &d->prog->arrived[0] : NULL;
        rc = feeder__remote_run(&d->c->cfg, &r, 1, err, errlen);
    }
    if (rc && r.over && r.meta.size && expect && r.meta.size != expect->size) {
        feeder__fmt(err, errlen, "%s: the shard changed on the server: %llu bytes (ETag %s) "
                    "when it was opened, %llu bytes now (Content-Length)", d->t.url,
                    ULL(expect->size), expect->etag[0] ? expect->etag : "none",
                    ULL(r.meta.size));
        rc = FEEDER_ECHECKSUM;
    }
    if (rc == -ENOSPC || rc == -EFBIG || rc == -EDQUOT)
        feeder__fmt(err, errlen, "%s: the shard cache %s is full (%s); the partial download "
                    "was removed", d->t.url, d->c->dir, strerror(-rc));
    if (!rc && r.meta.size && r.len != r.meta.size) {
        feeder__fmt(err, errlen, "%s: %llu bytes arrived of the %llu announced", d->t.url,
                    ULL(r.len), ULL(r.meta.size));
        rc = FEEDER_EREMOTE;
    }
    r.meta.size = r.len;
    if (!rc && !feeder__cache_meta_matches(expect, &r.meta)) {
        feeder__fmt(err, errlen, "%s: the shard changed on the server: %llu bytes (ETag %s) "
                    "when it was opened, %llu bytes (ETag %s) now", d->t.url, ULL(expect->size),
                    expect->etag[0] ? expect->etag : "none", ULL(r.meta.size),
                    r.meta.etag[0] ? r.meta.etag : "none");
        rc = FEEDER_ECHECKSUM;
    }
    char meta[4300];
    feeder__fmt(meta, sizeof(meta), "%s.meta", d->data);
    uint64_t chunk = d->prog ? d->prog->chunk : 0;
    if (!rc && (rc = feeder__cache_meta_write(meta, d->t.url, &r.meta, d->stripes, chunk)) != 0)
        feeder__fmt(err, errlen, "%s: writing %s: %s", d->t.url, meta, strerror(-rc));
    int wrote = !rc;
    /* The stripes first, stripe 0 (the name readers open first) last; an
     * older copy's stripes past this one's go. */
    for (uint32_t j = d->stripes; !rc && j-- > 1;) {
        char from[4400], to[4300];
        feeder__stripe_name(d->tmp, j, from, sizeof(from));
        feeder__stripe_name(d->data, j, to, sizeof(to));
        if (rename(from, to) < 0) {
            rc = -errno;
            feeder__fmt(err, errlen, "%s: renaming %s: %s", d->t.url, from, strerror(-rc));
        }
    }
    if (!rc)
        feeder__cache_unlink_stripes(d->data, d->stripes);
    if (!rc && rename(d->tmp, d->data) < 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "%s: renaming %s: %s", d->t.url, d->tmp, strerror(-rc));
    }
    if (rc && wrote) { /* a rename failed: no copy, and none of its stripes */
        unlink(meta);
        feeder__cache_unlink_stripes(d->data, 1);
    }
    if (rc)
        dl_discard(d);
    for (uint32_t j = 0; j < d->stripes; j++)
        close(d->fd[j]);
    d->stripes = 0;
    prog_finish(d->data, d->prog, d->prog_len, rc, err);
    d->prog = NULL;
    char mark[4300];
    feeder__fmt(mark, sizeof(mark), "%s.failed", d->data);
    if (rc) {
        feeder__cache_remember_failure(d->c, d->t.url, d->data, rc, err);
    } else {
        unlink(mark);
        /* Again now that it is in: a copy whose readers let it go while it
         * was still arriving, or one that landed meanwhile, may be over the
         * limit, since readers no longer wait for the rename. */
        feeder__cache_evict(d->c, 0, d->data);
    }
    return rc;
}

static void *dl_main(void *arg)
{
    dl *d = arg;
    pthread_setname_np(pthread_self(), "feeder-dl");
    d->rc = dl_run(d, d->err, sizeof(d->err));
    close(d->lock_fd); /* the copy is whole and renamed, or gone */
    d->lock_fd = -1;
    return NULL;
}

/* Moves records between the list and a settle, never held across a join:
 * two settles at once each take their own records, not each other's. A
 * fork waits for it (settle_atfork), so no child inherits it held. */
static pthread_mutex_t settle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t settle_once = PTHREAD_ONCE_INIT;
static int settle_forksafe;

static void settle_lock(void) { pthread_mutex_lock(&settle_mu); }
static void settle_unlock(void) { pthread_mutex_unlock(&settle_mu); }
static void settle_atfork(void)
{
    settle_forksafe = pthread_atfork(settle_lock, settle_unlock, settle_unlock) == 0;
}

/* The records of downloads into cache `c` (all of them when c is NULL),
 * taken off the list; the others stay on it. */
static dl *take_records(const feeder__cache *c)
{
    pthread_once(&settle_once, settle_atfork);
    if (settle_forksafe)
        settle_lock();
    dl *d = atomic_exchange(&dls_head, NULL), *mine = NULL, *rest = NULL, *rest_tail = NULL;
    while (d) {
        dl *next = d->next;
        if (!c || d->c == c) {
            d->next = mine;
            mine = d;
        } else {
            d->next = rest;
            rest = d;
            if (!rest_tail)
                rest_tail = d;
        }
        d = next;
    }
    if (rest) { /* back in front of any pushed meanwhile */
        rest_tail->next = atomic_load(&dls_head);
        while (!atomic_compare_exchange_weak(&dls_head, &rest_tail->next, rest))
            ;
    }
    if (settle_forksafe)
        settle_unlock();
    return mine;
}

/* Join the records' threads (those of this process) and free them. */
static void join_records(dl *d)
{
    while (d) {
        dl *next = d->next;
        if (d->pid == getpid())
            pthread_join(d->th, NULL); /* else a parent's thread: only its memory is here */
        feeder__target_free(&d->t);
        free(d);
        d = next;
    }
}

void feeder__remote_settle(void) { join_records(take_records(NULL)); }

/* Closing a cache waits for this process's download threads into it first:
 * they write into it. Another cache's downloads go on. */
void feeder__cache_close(feeder__cache *c)
{
    if (c) {
        join_records(take_records(c)); /* no download thread uses c past here */
        free(c->dir);
        free(c->fails);
        c->dir = NULL;
        c->fails = NULL;
    }
}

/* Under the exclusive lock: the cached copy if another process fetched it
 * meanwhile, else a download: here, or, for a reader that streams it
 * (`stream`, with a known size), on a thread of its own that takes the lock
 * over; `out` is then the partial copy and its progress (feeder__shard_wait). */
static int fetch_locked(feeder__cache *c, const feeder__target *t, const char *data,
                        const feeder__remote_meta *expect, unsigned flags, feeder__shard *out,
                        char *err, size_t errlen)
{
    int striped_ok = (flags & FEEDER__GET_STRIPED) != 0, stream = flags & FEEDER__GET_STREAM;
    if (feeder__cache_open_copy(data, t->url, expect, striped_ok, out) == 0)
        return 0;
    feeder__cache_sweep(c->dir);
    feeder__cache_evict(c, expect ? expect->size : 0, data);
    int rc = feeder__cache_failed_before(c, t->url, data, err, errlen); /* while this one waited */
    if (rc)
        return rc;
    dl *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    *d = (dl){.c = c, .lock_fd = -1, .has_expect = expect != NULL, .flags = flags,
              .pid = getpid()};
    feeder__fmt(d->data, sizeof(d->data), "%s", data);
    if (expect)
        d->expect = *expect;
    if ((rc = feeder__target_resolve(t->url, &d->t, err, errlen)) != 0) {
        free(d);
        return rc;
    }
    if ((rc = dl_begin(d, err, errlen)) != 0)
        goto done;
    if (stream && d->prog) {
        d->lock_fd = out->lock_fd;
        if (pthread_create(&d->th, NULL, dl_main, d) == 0) {
            out->lock_fd = -1;
            d->next = atomic_load(&dls_head);
            while (!atomic_compare_exchange_weak(&dls_head, &d->next, d))
                ;
            return 1;
        }
        d->lock_fd = -1; /* no thread: fetched here */
    }
    rc = dl_run(d, err, errlen);
done:
    feeder__target_free(&d->t);
    free(d);
    if (rc)
        return rc;
    if (feeder__cache_open_copy(data, t->url, NULL, striped_ok, out) < 0) {
        feeder__fmt(err, errlen, "%s: the cached copy %s vanished after its download",
                    t->url, data);
        return -ENOENT;
    }
    return 0;
}

/* A download of the shard in progress (another process's, or a thread's
 * of this one) that `out` may read as it arrives: its progress record
 * mapped and its partial copy opened, when both are there and are the
 * shard `expect` describes. */
static int stream_join(const char *data, const feeder__remote_meta *expect, unsigned flags,
                       feeder__shard *out)
{
    char p[4300];
    prog_path(data, p, sizeof(p));
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    feeder__progress *g = MAP_FAILED;
    size_t len = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size >= sizeof(feeder__progress))
        g = mmap(NULL, len = (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (g == MAP_FAILED)
        return -1;
    int ok = atomic_load_explicit(&g->magic, memory_order_acquire) == PROG_MAGIC &&
             atomic_load(&g->state) == PROG_RUNNING && g->size == expect->size &&
             g->chunk && g->nchunks == (g->size + g->chunk - 1) / g->chunk &&
             g->stripes >= 1 && g->stripes <= FEEDER__STRIPES_MAX &&
             (g->stripes == 1 || ((flags & FEEDER__GET_STRIPED) &&
                                   g->chunk % (uint64_t)sysconf(_SC_PAGESIZE) == 0)) &&
             prog_bytes(g->nchunks) <= len && memchr(g->tmp, 0, sizeof(g->tmp)) &&
             !strchr(g->tmp, '/') && g->tmp[0] && memchr(g->etag, 0, sizeof(g->etag)) &&
             (!expect->etag[0] || !g->etag[0] || !strcmp(expect->etag, g->etag));
    const char *slash = strrchr(data, '/');
    if (ok)
        feeder__fmt(p, sizeof(p), "%.*s%s", slash ? (int)(slash - data + 1) : 0, data, g->tmp);
    if (!ok || feeder__stripes_open(p, g->size, g->chunk, g->stripes, out) < 0) {
        munmap(g, len);
        return -1;
    }
    if (out->lock_fd >= 0)
        close(out->lock_fd); /* a reader of a partial copy holds no lock (shard_wait) */
    out->lock_fd = -1;
    out->size = g->size;
    out->meta = *expect;
    out->prog = g;
    out->prog_len = len;
    return 0;
}

/* Poll until either the cached copy can be used under a shared lock, or
 * this process gets the exclusive lock and fetches it, or (`stream`) a
 * download in progress can be read as it arrives. Never wait for the
 * exclusive lock alone: every process that maps the shard holds a shared
 * lock for as long as it does, so a process waiting for the exclusive lock
 * after another fetched it would wait forever. */
static int get_locked(feeder__cache *c, const feeder__target *t, const char *data,
                      const feeder__remote_meta *expect, unsigned flags, feeder__shard *out,
                      char *err, size_t errlen)
{
    int striped_ok = (flags & FEEDER__GET_STRIPED) != 0;
    uint64_t end = feeder__now_ns() + (uint64_t)c->lock_timeout_ms * 1000000ull;
    char lock[4300];
    feeder__fmt(lock, sizeof(lock), "%s.lock", data);
    for (;;) {
        if (flock(out->lock_fd, LOCK_SH | LOCK_NB) == 0) {
            if (feeder__cache_open_copy(data, t->url, expect, striped_ok, out) == 0)
                return 0;
            flock(out->lock_fd, LOCK_UN);
        }
        if (flock(out->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            int rc = fetch_locked(c, t, data, expect, flags, out, err, errlen);
            if (rc == 1) { /* the lock went with the download's thread: read it as it comes */
                if ((out->lock_fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                    rc = -errno;
                    feeder__fmt(err, errlen, "%s: cannot open %s: %s", t->url, lock,
                                strerror(-rc));
                    return rc;
                }
                continue;
            }
            if (rc)
                return rc;
            /* Downgrade: a shared lock keeps the evictors (LOCK_EX|LOCK_NB) away. */
            if (flock(out->lock_fd, LOCK_SH) < 0) {
                rc = -errno;
                feeder__fmt(err, errlen, "%s: flock: %s", data, strerror(-rc));
            }
            return rc;
        }
        if ((flags & FEEDER__GET_STREAM) && expect && expect->size &&
            stream_join(data, expect, flags, out) == 0)
            return 0;
        if (feeder__now_ns() >= end) {
            feeder__fmt(err, errlen, "%s: waited %d ms for another process fetching it into %s",
                        t->url, c->lock_timeout_ms, data);
            return FEEDER_ETIMEDOUT;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int feeder__cache_fetch(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
                        unsigned flags, feeder__shard *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->fd = out->lock_fd = -1;
    out->wait_ms = c->lock_timeout_ms;
    feeder__cache_name(c->dir, url, flags, out->path, sizeof(out->path));
    int rc = feeder__cache_failed_before(c, url, out->path, err, errlen);
    if (rc)
        return rc;
    feeder__target t;
    rc = feeder__target_resolve(url, &t, err, errlen);
    if (rc)
        return rc;
    char lock[4200];
    feeder__fmt(lock, sizeof(lock), "%s.lock", out->path);
    if ((out->lock_fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "%s: cannot open %s: %s", url, lock, strerror(-rc));
    }
    if (!rc)
        rc = get_locked(c, &t, out->path, expect, flags, out, err, errlen);
    feeder__target_free(&t);
    if (rc) {
        feeder__shard_release(out);
        return rc;
    }
    if (out->lock_fd >= 0)
        futimens(out->lock_fd, NULL); /* last use, for eviction */
    return 0;
}

int feeder__cache_get(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
                      feeder__shard *out, char *err, size_t errlen)
{
    return feeder__cache_fetch(c, url, expect, 0, out, err, errlen);
}

int feeder__cache_get_stream(feeder__cache *c, const char *url,
                             const feeder__remote_meta *expect, feeder__shard *out, char *err,
                             size_t errlen)
{
    return feeder__cache_fetch(c, url, expect, FEEDER__GET_STREAM, out, err, errlen);
}

/* ---- reading a shard as it arrives ---- */

/* Whether bytes [a, b) are all in the partial copy. */
static int arrived(const feeder__progress *g, uint64_t a, uint64_t b)
{
    for (uint64_t i = a / g->chunk; i < g->nchunks && i * g->chunk < b; i++) {
        uint64_t lo = i * g->chunk, hi = lo + g->chunk < g->size ? lo + g->chunk : g->size;
        uint64_t need = (b < hi ? b : hi) - lo;
        if (atomic_load_explicit(&g->arrived[i], memory_order_acquire) < need)
            return 0;
    }
    return 1;
}

static uint64_t arrived_total(const feeder__progress *g)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < g->nchunks; i++)
        n += atomic_load_explicit(&g->arrived[i], memory_order_relaxed);
    return n;
}

/* The download is over and the copy whole: held from now on like any
 * cached copy, under a shared lock (0), once the downloader has let its
 * exclusive one go (1: not yet). */
static int settle(feeder__shard *s)
{
    char lock[4300];
    feeder__fmt(lock, sizeof(lock), "%s.lock", s->path);
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_SH | LOCK_NB) < 0) {
        close(fd);
        return 1;
    }
    munmap(s->prog, s->prog_len);
    s->prog = NULL;
    s->lock_fd = fd;
    futimens(fd, NULL);
    return 0;
}

/* Whether the downloader still holds its exclusive lock: a process that
 * died lets it go. A shared lock taken here to find out is let go at once. */
static int downloader_alive(const feeder__shard *s)
{
    char lock[4300];
    feeder__fmt(lock, sizeof(lock), "%s.lock", s->path);
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int alive = flock(fd, LOCK_SH | LOCK_NB) < 0;
    close(fd);
    return alive;
}

int feeder__shard_wait(feeder__shard *s, const char *url, uint64_t off, uint64_t len, char *err,
                       size_t errlen)
{
    if (!s->prog)
        return 0;
    const feeder__progress *g = s->prog;
    if (off > g->size)
        off = g->size; /* bytes past the end never come: the read finds the end */
    if (len > g->size - off)
        len = g->size - off;
    uint64_t seen = arrived_total(g), since = feeder__now_ns(), checked = since;
    long nap_us = 100;
    for (;;) {
        int state = atomic_load_explicit(&g->state, memory_order_acquire);
        if (state == PROG_DONE) {
            settle(s); /* else the next call: every byte is there either way */
            return 0;
        } else if (arrived(g, off, off + len)) {
            return 0;
        } else if (state == PROG_FAILED) {
            feeder__fmt(err, errlen, "%s", g->err);
            return g->rc ? g->rc : FEEDER_EREMOTE;
        } else if (state == PROG_ABANDONED) {
            return FEEDER__SHARD_AGAIN;
        }
        uint64_t now = feeder__now_ns(), got = arrived_total(g);
        if (got != seen) {
            seen = got;
            since = now;
        }
        if (now - checked > 100000000ull) { /* every 100 ms: is the downloader there? */
            checked = now;
            /* The lock first: the downloader says how it ended before it lets go. */
            if (!downloader_alive(s) && atomic_load(&g->state) == PROG_RUNNING)
                return FEEDER__SHARD_AGAIN;
        }
        if (s->wait_ms > 0 && now - since > (uint64_t)s->wait_ms * 1000000ull) {
            feeder__fmt(err, errlen, "%s: no byte of it arrived for %d ms (FEEDER_CACHE_LOCK_"
                        "TIMEOUT_MS) from the download by pid %lld into the shard cache",
                        url, s->wait_ms, (long long)g->pid);
            return FEEDER_ETIMEDOUT;
        }
        struct timespec ts = {0, nap_us * 1000};
        nanosleep(&ts, NULL);
        nap_us = nap_us < 2000 ? nap_us * 2 : 2000;
    }
}
