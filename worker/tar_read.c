/*
 * The read of a tar dataset's samples: each sample's image member is one
 * span of its shard, and a task's spans of one shard go to the reader in
 * one call (io_uring: all queued at once). The bytes then take the path a
 * file's bytes take (worker.c: decode, or a GPU decoder's plan). Shards are
 * opened on first use in each worker, after fork, so no descriptor crosses
 * it; a worker keeps at most FEEDER__TAR_FDS_MAX of them open (dataset/tar.h).
 * A URL's shard is the shard cache's copy, fetched by the worker when it is
 * not there yet (with libcurl handles the worker makes itself:
 * remote/fetch.c) and held under the cache's shared lock while it is open.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset/tar.h"
#include "worker/worker.h"

#define MSG_LEN 512

struct feeder__tar_worker {
    int *fd;            /* per shard: -1 until opened */
    int *lock;          /* per shard: the cache's shared lock on a URL's copy, or -1 */
    feeder__shard **part; /* per shard: a URL's copy still arriving (read as it comes), or NULL */
    uint32_t nopen;
    uint8_t *buf;       /* the task's members, back to back */
    size_t buf_cap;
    feeder__span *spans;
    uint32_t *which;    /* spans[j] is file which[j] */
    unsigned span_cap;
    char *names;        /* the task's display names ("shard: key.ext") */
    size_t names_cap;
    char *msgs;         /* a failed fetch's message, at its shard's first file */
    size_t msgs_cap;
};

static const char SHORT_READ[] = "read: the shard ends before the member's last byte (was it "
                                 "changed after it was opened?)";

void feeder__tar_ctx_free(feeder__worker_ctx *w)
{
    struct feeder__tar_worker *p = w->tar;
    if (!p)
        return;
    const feeder__tar *t = w->job->ds->tar;
    for (uint32_t i = 0; p->fd && i < t->nshards; i++) {
        if (p->fd[i] >= 0)
            close(p->fd[i]);
        if (p->lock[i] >= 0)
            close(p->lock[i]);
        feeder__shard_release(p->part[i]);
        free(p->part[i]);
    }
    free(p->fd);
    free(p->lock);
    free(p->part);
    free(p->msgs);
    free(p->buf);
    free(p->spans);
    free(p->which);
    free(p->names);
    free(p);
    w->tar = NULL;
}

static int tar_ctx(feeder__worker_ctx *w)
{
    if (w->tar)
        return 0;
    const feeder__tar *t = w->job->ds->tar;
    struct feeder__tar_worker *p = calloc(1, sizeof(*p));
    if (!p || !(p->fd = malloc(t->nshards * sizeof(*p->fd))) ||
        !(p->lock = malloc(t->nshards * sizeof(*p->lock))) ||
        !(p->part = calloc(t->nshards, sizeof(*p->part)))) {
        if (p) {
            free(p->fd);
            free(p->lock);
        }
        free(p);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < t->nshards; i++)
        p->fd[i] = p->lock[i] = -1;
    w->tar = p;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Entry e of shard s's display name, "SHARD: KEY.EXT" ("SHARD: key KEY"
 * for a bad sample), into out (cap bytes; NULL and 0 measure it). Its
 * length without the NUL. */
static size_t entry_name(char *out, size_t cap, const feeder__tar_shard *s, uint64_t e)
{
    int len = s->ix.e[e].bad
                  ? snprintf(out, cap, "%s: key %s", s->path, feeder__tar_key(&s->ix, e))
                  : snprintf(out, cap, "%s: %s.%s", s->path, feeder__tar_key(&s->ix, e),
                             feeder__tar_detail(&s->ix, e));
    return len < 0 ? 0 : (size_t)len;
}

/* Sample k of a task's `index`: its shard, and its entry there in *e. */
static const feeder__tar_shard *task_sample(const feeder__worker_ctx *w, const uint64_t *index,
                                            unsigned k, uint64_t *e)
{
    return feeder__tar_sample(w->job->ds->tar, index[k], e);
}

/* Room for n files: spans, and the display names and member bytes of the
 * samples in `index`. */
static int reserve(feeder__worker_ctx *w, const uint64_t *index, unsigned n)
{
    struct feeder__tar_worker *p = w->tar;
    size_t names = 0, bytes = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t e;
        const feeder__tar_shard *s = task_sample(w, index, k, &e);
        names += entry_name(NULL, 0, s, e) + 1;
        bytes += s->ix.e[e].bad ? 0 : (size_t)s->ix.e[e].len;
    }
    if (n > p->span_cap) {
        feeder__span *sp = realloc(p->spans, n * sizeof(*sp));
        if (sp)
            p->spans = sp;
        uint32_t *wh = realloc(p->which, n * sizeof(*wh));
        if (wh)
            p->which = wh;
        if (!sp || !wh)
            return -ENOMEM;
        p->span_cap = n;
    }
    if (grow((void **)&p->names, &p->names_cap, names) ||
        grow((void **)&p->msgs, &p->msgs_cap, (size_t)n * MSG_LEN) ||
        grow((void **)&p->buf, &p->buf_cap, bytes ? bytes : 1))
        return -ENOMEM;
    return 0;
}

static void close_one(struct feeder__tar_worker *p, uint32_t i)
{
    if (p->fd[i] >= 0) {
        close(p->fd[i]);
        p->nopen--;
    }
    if (p->lock[i] >= 0)
        close(p->lock[i]); /* lets the cache evict the copy */
    p->fd[i] = p->lock[i] = -1;
    feeder__shard_release(p->part[i]);
    free(p->part[i]);
    p->part[i] = NULL;
}

static void close_all(struct feeder__tar_worker *p, uint32_t nshards)
{
    for (uint32_t i = 0; i < nshards; i++)
        close_one(p, i);
    p->nopen = 0;
}

/* The shard's descriptor, opened now if it is not yet (a URL's: the
 * cache's copy, fetched now if need be, with its message in msg); -errno or
 * a feeder error. */
static int shard_fd(feeder__worker_ctx *w, uint32_t shard, char *msg)
{
    struct feeder__tar_worker *p = w->tar;
    const feeder__tar *t = w->job->ds->tar;
    const feeder__tar_shard *s = &t->shards[shard];
    if (p->fd[shard] >= 0)
        return p->fd[shard];
    if (p->nopen == FEEDER__TAR_FDS_MAX)
        close_all(p, t->nshards);
    int fd;
    if (s->remote) {
        feeder__shard got;
        int rc = feeder__cache_get_stream(t->cache, s->path, &s->meta, &got, msg, MSG_LEN);
        if (rc)
            return rc;
        if (got.prog && !(p->part[shard] = malloc(sizeof(got)))) {
            feeder__shard_release(&got);
            return -ENOMEM;
        }
        fd = got.fd;
        p->lock[shard] = got.lock_fd; /* a partial copy's: -1 until it is whole */
        if (got.prog) {
            got.fd = -1; /* p->fd's */
            *p->part[shard] = got;
        }
    } else if ((fd = open(s->path, O_RDONLY | O_CLOEXEC)) < 0) {
        return -errno;
    }
    p->fd[shard] = fd;
    p->nopen++;
    return fd;
}

/* Each file's name, place and, for a bad sample, its error. */
static void describe(feeder__worker_ctx *w, const uint64_t *index, feeder__file *files,
                     unsigned n)
{
    struct feeder__tar_worker *p = w->tar;
    size_t at = 0, boff = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t e;
        const feeder__tar_shard *s = task_sample(w, index, k, &e);
        const feeder__tar_entry *en = &s->ix.e[e];
        char *name = p->names + at;
        at += entry_name(name, p->names_cap - at, s, e) + 1;
        files[k] = (feeder__file){.path = name};
        if (en->bad) {
            files[k].err = FEEDER_EDATASET;
            files[k].op = feeder__tar_detail(&s->ix, e);
            continue;
        }
        files[k].data = p->buf + boff;
        files[k].len = (size_t)en->len;
        boff += (size_t)en->len;
    }
}

/* A shard's copy still arriving: wait until the m spans have come (the
 * shard held as a whole copy once its download has ended); got again when
 * its download stopped without an answer. The descriptor, or the error
 * with its message in msg. */
static int arrive(feeder__worker_ctx *w, uint32_t shard, unsigned m, char *msg)
{
    struct feeder__tar_worker *p = w->tar;
    const feeder__tar_shard *s = &w->job->ds->tar->shards[shard];
    for (int again = 0;;) {
        feeder__shard *part = p->part[shard];
        int rc = 0;
        for (unsigned j = 0; j < m && part && !rc; j++)
            rc = feeder__shard_wait(part, s->path, p->spans[j].off, p->spans[j].len, msg,
                                    MSG_LEN);
        if (!rc && part && !part->prog) { /* whole now: kept like any cached copy */
            p->lock[shard] = part->lock_fd;
            free(part);
            p->part[shard] = NULL;
        }
        if (!rc)
            return p->fd[shard];
        if (rc != FEEDER__SHARD_AGAIN)
            return rc;
        close_one(p, shard);
        if (++again == 3) {
            snprintf(msg, MSG_LEN, "%s: its download into the shard cache stopped without an "
                     "answer 3 times (the downloading process ended)", s->path);
            return FEEDER_EREMOTE;
        }
        int fd = shard_fd(w, shard, msg);
        if (fd < 0 || !p->part[shard])
            return fd;
    }
}

/* Every good file of shard `shard` among `files`, in one reader call. */
static int read_shard(feeder__worker_ctx *w, uint32_t shard, const uint64_t *index,
                      feeder__file *files, unsigned n)
{
    struct feeder__tar_worker *p = w->tar;
    const feeder__tar *t = w->job->ds->tar;
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++) {
        uint64_t e;
        if (files[k].err || t->shard_of[index[k]] != shard)
            continue;
        const feeder__tar_shard *s = task_sample(w, index, k, &e);
        p->spans[m] = (feeder__span){.off = s->ix.e[e].off, .len = files[k].len,
                                     .dst = files[k].data};
        p->which[m++] = k;
    }
    if (!m)
        return 0;
    char *msg = p->msgs + (size_t)p->which[0] * MSG_LEN;
    msg[0] = 0;
    int fd = shard_fd(w, shard, msg);
    if (fd >= 0 && p->part[shard])
        fd = arrive(w, shard, m, msg);
    int rc = fd < 0 ? 0 : feeder__reader_read_at(w->rd, fd, p->spans, m);
    for (unsigned j = 0; j < m; j++) {
        feeder__file *f = &files[p->which[j]];
        if (fd < 0 || p->spans[j].err) {
            f->err = fd < 0 ? fd : p->spans[j].err;
            f->op = fd >= 0 ? "read" : msg[0] ? msg : "open";
        } else if (p->spans[j].got < f->len) {
            f->err = FEEDER_EDATASET;
            f->op = SHORT_READ;
        }
    }
    return rc;
}

int feeder__tar_read(feeder__worker_ctx *w, const uint64_t *index, feeder__file *files,
                     unsigned n)
{
    int rc = tar_ctx(w);
    if (!rc)
        rc = reserve(w, index, n);
    if (rc)
        return rc;
    describe(w, index, files, n);
    const feeder__tar *t = w->job->ds->tar;
    /* Shards in the order the task first meets them; usually one or two. */
    for (unsigned k = 0; k < n && !rc; k++) {
        uint32_t s = t->shard_of[index[k]];
        int first = 1;
        for (unsigned j = 0; j < k && first; j++)
            first = t->shard_of[index[j]] != s;
        if (first)
            rc = read_shard(w, s, index, files, n);
    }
    return rc;
}
