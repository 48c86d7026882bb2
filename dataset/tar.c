/*
 * Tar datasets: WebDataset shards read in place. Each shard's headers are
 * walked once (tar_index.c) and the result cached beside it as <shard>.idx;
 * samples are the shards' keys in shard order, then member order.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/brace.h"
#include "dataset/dataset.h"
#include "dataset/tar.h"
#include "decode/format.h"
#include "io/io.h"

void feeder__tar_free(feeder__tar *t)
{
    if (!t)
        return;
    feeder__ahead_stop(&t->fetch);
    for (uint32_t i = 0; i < t->nshards; i++) {
        free(t->shards[i].path);
        feeder__tar_index_free(&t->shards[i].ix);
    }
    feeder__cache_close(t->cache);
    free(t->cache);
    free(t->shards);
    free(t->shard_of);
    free(t);
}

static long pread_src(void *ctx, uint64_t off, uint8_t *dst, size_t len)
{
    return feeder__pread_full(*(int *)ctx, off, dst, len);
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* An index file, when it is whole and made for this size and mtime. */
static int load_cache(const char *idx, uint64_t size, int64_t mtime, feeder__tar_index *ix)
{
    int fd = open(idx, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat is;
    int rc = FEEDER_EFORMAT;
    uint8_t *buf = NULL;
    if (fstat(fd, &is) == 0 && S_ISREG(is.st_mode) && is.st_size >= FEEDER__TAR_IDX_HEADER &&
        (uint64_t)is.st_size <= size * 2 + (1u << 20) && (buf = malloc((size_t)is.st_size)) &&
        pread_src(&fd, 0, buf, (size_t)is.st_size) == (long)is.st_size) {
        char why[128];
        rc = feeder__tar_index_decode(buf, (size_t)is.st_size, size, mtime, ix, why, sizeof(why));
    }
    free(buf);
    close(fd);
    return rc;
}

/* Write the index beside the shard: a temporary file renamed over
 * <shard>.idx, so a reader sees the old file or the new one, never half of
 * one. A folder that is not writable (or full) just gets no cache: 0 or 1. */
static int write_cache(const char *idx, const feeder__tar_index *ix, uint64_t size, int64_t mtime)
{
    uint8_t *buf;
    size_t len;
    if (feeder__tar_index_encode(ix, size, mtime, &buf, &len))
        return 0;
    size_t n = strlen(idx) + 32;
    char *tmp = malloc(n);
    int fd = -1, ok = 0;
    if (tmp) {
        snprintf(tmp, n, "%s.tmp.%ld", idx, (long)getpid());
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    }
    if (fd >= 0) {
        size_t at = 0;
        while (at < len) {
            ssize_t k = write(fd, buf + at, len - at);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            at += (size_t)k;
        }
        ok = close(fd) == 0 && at == len && rename(tmp, idx) == 0;
        if (!ok)
            unlink(tmp);
    }
    free(tmp);
    free(buf);
    return ok;
}

/* FNV-1a, 64 bits: identity, not security. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* ---- URL shards: read from the shard cache's copies ---- */

/* What a URL shard's index files are made for in place of a modification
 * time: its ETag and Last-Modified, hashed, so a shard replaced on the
 * server with one of the same size gets a new index. */
static int64_t remote_tag(const feeder__remote_meta *m)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, m->etag, strlen(m->etag) + 1);
    h = fnv1a(h, m->modified, strlen(m->modified) + 1);
    return (int64_t)(h >> 1);
}

/* The name of a URL shard's index file in the cache folder. */
static void cache_index_name(const feeder__tar *t, const feeder__tar_shard *sh, char *out,
                             size_t outlen)
{
    feeder__cache_name(t->cache->dir, sh->path, 0, out, outlen - 8);
    strcat(out, ".idx");
}

/* Requests for some of the URL shards, one each, all in flight at once. */
typedef struct batch {
    feeder__target *tg;
    feeder__request *rq;
    uint32_t *which; /* rq[k] is for shard which[k] */
    uint32_t m;
} batch;

static void batch_free(batch *b, uint32_t n)
{
    for (uint32_t k = 0; b->tg && k < n; k++)
        feeder__target_free(&b->tg[k]);
    for (uint32_t k = 0; b->rq && k < b->m; k++)
        if (b->rq[k].fd >= 0)
            close(b->rq[k].fd);
    free(b->tg);
    free(b->rq);
    free(b->which);
}

/* Request shard i's URL + `suffix`: into buf[0, cap) when buf is given,
 * else into a memory file of at most `cap` bytes. */
static int batch_add(batch *b, const feeder__tar_shard *sh, uint32_t i, const char *suffix,
                     uint8_t *buf, size_t cap, char *err, size_t errlen)
{
    char url[4200];
    feeder__fmt(url, sizeof(url), "%s%s", sh->path, suffix);
    int rc = feeder__target_resolve(url, &b->tg[b->m], err, errlen);
    if (rc)
        return rc;
    feeder__request *r = &b->rq[b->m];
    *r = (feeder__request){.target = &b->tg[b->m], .last = UINT64_MAX, .fd = -1};
    if (buf) {
        r->last = cap - 1;
        r->buf = buf;
        r->cap = cap;
    } else if ((r->fd = memfd_create("feeder-tar-idx", MFD_CLOEXEC)) < 0) {
        return -errno;
    } else {
        r->cap = cap; /* a server's index: FEEDER_REMOTE_MAX_INDEX_BYTES */
        r->cap_what = "FEEDER_REMOTE_MAX_INDEX_BYTES";
    }
    b->which[b->m++] = i;
    return 0;
}

static int batch_alloc(batch *b, uint32_t n)
{
    memset(b, 0, sizeof(*b));
    b->tg = calloc(n, sizeof(*b->tg));
    b->rq = calloc(n, sizeof(*b->rq));
    b->which = calloc(n, sizeof(*b->which));
    return b->tg && b->rq && b->which ? 0 : -ENOMEM;
}

/* Every URL shard's size and ETag: its first header block, a range
 * request, all shards in flight at once. */
static int probe_all(feeder__tar *t, char *err, size_t errlen)
{
    batch b;
    uint8_t *blocks = malloc((size_t)t->nshards * 512);
    int rc = batch_alloc(&b, t->nshards);
    rc = !rc && !blocks ? -ENOMEM : rc;
    for (uint32_t i = 0; i < t->nshards && !rc; i++)
        if (t->shards[i].remote)
            rc = batch_add(&b, &t->shards[i], i, "", blocks + (size_t)i * 512, 512, err, errlen);
    if (!rc && b.m)
        rc = feeder__remote_run(&t->cache->cfg, b.rq, b.m, err, errlen);
    for (uint32_t k = 0; !rc && k < b.m; k++) {
        feeder__tar_shard *sh = &t->shards[b.which[k]];
        sh->meta = b.rq[k].meta;
        sh->size = b.rq[k].meta.size;
        if (b.rq[k].len != 512 || sh->size < 1024) {
            feeder__fmt(err, errlen, "%s: not a tar shard (%llu bytes)", sh->path,
                        (unsigned long long)sh->size);
            rc = FEEDER_EDATASET;
        }
    }
    batch_free(&b, t->nshards);
    free(blocks);
    return rc;
}

/* A server's <url>.idx that came whole into memory file `fd` (`len`
 * bytes), when it is made for a shard of this size. */
static int decode_server_index(int fd, size_t len, const feeder__tar_shard *sh,
                               feeder__tar_index *ix)
{
    char why[256];
    if (len < FEEDER__TAR_IDX_HEADER || len > sh->size * 2 + (1u << 20))
        return FEEDER_EFORMAT;
    uint8_t *buf = malloc(len);
    int rc = buf ? 0 : -ENOMEM;
    if (!rc && pread_src(&fd, 0, buf, len) != (long)len)
        rc = FEEDER_EFORMAT;
    if (!rc)
        rc = feeder__tar_index_decode(buf, len, sh->size, FEEDER__TAR_MTIME_ANY, ix, why,
                                      sizeof(why));
    free(buf);
    return rc;
}

/* Indexes for the URL shards that need no walk: the cache folder's index
 * file, else the server's <url>.idx (all fetched at once; any failure just
 * means there is none), kept in the cache folder. Those found are marked
 * cached 1; the rest are left to index_remote. */
static int known_indexes(feeder__tar *t)
{
    batch b;
    char idx[4200], why[512];
    int rc = batch_alloc(&b, t->nshards);
    for (uint32_t i = 0; i < t->nshards && !rc; i++) {
        feeder__tar_shard *sh = &t->shards[i];
        if (!sh->remote)
            continue;
        cache_index_name(t, sh, idx, sizeof(idx));
        if (load_cache(idx, sh->size, remote_tag(&sh->meta), &sh->ix) == 0)
            sh->cached = 1;
        else
            batch_add(&b, sh, i, ".idx", NULL, (size_t)t->cache->cfg.max_index_bytes, why,
                      sizeof(why)); /* failed: no index */
    }
    if (!rc && b.m)
        feeder__remote_run(&t->cache->cfg, b.rq, b.m, why, sizeof(why)); /* each has its rc */
    for (uint32_t k = 0; !rc && k < b.m; k++) {
        feeder__tar_shard *sh = &t->shards[b.which[k]];
        if (b.rq[k].rc || decode_server_index(b.rq[k].fd, b.rq[k].len, sh, &sh->ix))
            continue;
        sh->cached = 1;
        cache_index_name(t, sh, idx, sizeof(idx));
        write_cache(idx, &sh->ix, sh->size, remote_tag(&sh->meta));
    }
    batch_free(&b, t->nshards);
    return rc;
}

/* A URL shard known_indexes left (or, offline, any): its size and ETag from
 * the cache's record when offline, then the cache folder's index file, else
 * a walk of the whole shard downloaded into the cache, written to the cache
 * folder for the next open. */
static int index_remote(const feeder__tar *t, feeder__tar_shard *sh, char *err, size_t errlen)
{
    if (sh->cached)
        return 0;
    if (t->cache->offline) {
        if (feeder__cache_lookup(t->cache, sh->path, 0, &sh->meta) < 0) {
            feeder__fmt(err, errlen, "%s: FEEDER_REMOTE_OFFLINE=1 and the shard cache %s holds "
                        "no whole copy of it", sh->path, t->cache->dir);
            return -ENOENT;
        }
        sh->size = sh->meta.size;
    }
    char idx[4200];
    cache_index_name(t, sh, idx, sizeof(idx));
    int64_t tag = remote_tag(&sh->meta);
    if (load_cache(idx, sh->size, tag, &sh->ix) == 0) {
        sh->cached = 1;
        return 0;
    }
    feeder__shard got;
    int rc = feeder__cache_get(t->cache, sh->path, &sh->meta, &got, err, errlen);
    if (rc)
        return rc;
    feeder__tar_src src = {pread_src, &got.fd, sh->size};
    rc = feeder__tar_scan(&src, sh->path, &sh->ix, err, errlen);
    feeder__shard_release(&got);
    if (!rc)
        sh->cached = write_cache(idx, &sh->ix, sh->size, tag) ? 2 : 0;
    return rc;
}

/* Open a shard, check it is a regular file, and take its index from the
 * cache or a walk of its headers. */
static int index_shard(feeder__tar_shard *sh, char *err, size_t errlen)
{
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: cannot open tar shard: %s", sh->path, strerror(e));
        return -e;
    }
    struct stat st, after;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    if (!rc && !S_ISREG(st.st_mode)) {
        feeder__fmt(err, errlen, "%s: not a tar shard: %s", sh->path,
                    feeder__file_type(st.st_mode));
        rc = S_ISDIR(st.st_mode) ? -EISDIR : FEEDER_EDATASET;
    } else if (rc) {
        feeder__fmt(err, errlen, "%s: cannot stat tar shard: %s", sh->path, strerror(-rc));
    }
    size_t n = strlen(sh->path) + 5;
    char *idx = rc ? NULL : malloc(n);
    if (!rc && !idx)
        rc = -ENOMEM;
    if (!rc) {
        snprintf(idx, n, "%s.idx", sh->path);
        sh->size = (uint64_t)st.st_size;
        if (load_cache(idx, sh->size, mtime_ns(&st), &sh->ix) == 0) {
            sh->cached = 1;
        } else {
            feeder__tar_src src = {pread_src, &fd, sh->size};
            rc = feeder__tar_scan(&src, sh->path, &sh->ix, err, errlen);
            /* A shard changed during the walk gets no cache. */
            if (!rc && fstat(fd, &after) == 0 && after.st_size == st.st_size &&
                mtime_ns(&after) == mtime_ns(&st))
                sh->cached = write_cache(idx, &sh->ix, sh->size, mtime_ns(&st)) ? 2 : 0;
        }
    }
    free(idx);
    close(fd);
    return rc;
}

/* What a resume state checks: each shard's file name (not its folder, so a
 * moved set still matches) and size, and each sample's key and label. */
static uint64_t tar_fingerprint(const feeder__tar *t)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, "tar", 3);
    for (uint32_t i = 0; i < t->nshards; i++) {
        const feeder__tar_shard *s = &t->shards[i];
        const char *base = strrchr(s->path, '/');
        base = base ? base + 1 : s->path;
        h = fnv1a(h, base, strlen(base) + 1);
        h = fnv1a(h, &s->size, sizeof(s->size));
        h = fnv1a(h, &s->ix.n, sizeof(s->ix.n));
        for (uint64_t k = 0; k < s->ix.n; k++) {
            const char *key = feeder__tar_key(&s->ix, k);
            h = fnv1a(h, key, strlen(key) + 1);
            h = fnv1a(h, &s->ix.e[k].label, sizeof(s->ix.e[k].label));
        }
    }
    return h ? h : 1;
}

/* The dataset's arrays from the shards' indexes: labels, each sample's
 * shard, the class count. */
static int assemble(feeder_dataset *ds, char *err, size_t errlen)
{
    feeder__tar *t = ds->tar;
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->nshards; i++) {
        t->shards[i].first = n;
        n += t->shards[i].ix.n;
    }
    if (n == 0) {
        char exts[128];
        feeder__format_ext_list(FEEDER__EXT_TAR, exts, sizeof(exts));
        feeder__fmt(err, errlen, "%s%s: no samples (keys with a %s and a .cls member) in %u tar "
                    "shard%s", t->shards[0].path, t->nshards > 1 ? " ..." : "", exts,
                    t->nshards, t->nshards > 1 ? "s" : "");
        return FEEDER_EDATASET;
    }
    ds->labels = malloc(n * sizeof(*ds->labels));
    t->shard_of = malloc(n * sizeof(*t->shard_of));
    if (!ds->labels || !t->shard_of)
        return -ENOMEM;
    int64_t maxlab = -1;
    for (uint32_t i = 0; i < t->nshards; i++)
        for (uint64_t k = 0; k < t->shards[i].ix.n; k++) {
            int64_t l = t->shards[i].ix.e[k].label;
            ds->labels[t->shards[i].first + k] = l;
            t->shard_of[t->shards[i].first + k] = i;
            maxlab = l > maxlab ? l : maxlab;
        }
    ds->n = n;
    ds->num_classes = (uint64_t)(maxlab + 1);
    ds->fingerprint = tar_fingerprint(t);
    return 0;
}

static void tar_release(feeder_dataset *ds) { feeder__tar_free(ds->tar); }

static int tar_alloc(const char *const *paths, size_t count, feeder_dataset **out)
{
    feeder_dataset *ds = calloc(1, sizeof(*ds));
    feeder__tar *t = calloc(1, sizeof(*t));
    if (!ds || !t || !(t->shards = calloc(count, sizeof(*t->shards)))) {
        free(t);
        free(ds);
        return -ENOMEM;
    }
    ds->kind = FEEDER__DS_TAR;
    atomic_init(&ds->refs, 1);
    ds->tar = t;
    ds->release = tar_release;
    *out = ds;
    for (size_t i = 0; i < count; i++, t->nshards++)
        if (!(t->shards[i].path = strdup(paths[i])))
            return -ENOMEM;
    return 0;
}

/* The shard cache, when any shard is a URL. */
static int open_cache(feeder__tar *t, const feeder_shard_options *opt, char *err, size_t errlen)
{
    int any = 0;
    for (uint32_t i = 0; i < t->nshards; i++)
        any |= t->shards[i].remote = feeder__url_kind(t->shards[i].path) != FEEDER__URL_LOCAL;
    if (!any)
        return 0;
    if (!(t->cache = calloc(1, sizeof(*t->cache))))
        return -ENOMEM;
    return feeder__cache_open(t->cache, opt ? opt->cache_dir : NULL,
                              opt ? opt->cache_max_bytes : 0, err, errlen);
}

int feeder__tar_open(const char *const *paths, size_t count, const feeder_shard_options *opt,
                     feeder_dataset **out, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!paths || !out || count == 0 || count > UINT32_MAX) {
        feeder__fmt(err, errlen, "feeder_dataset_open_tar: paths and out must not be NULL and "
                    "count must be 1 .. 2^32-1 (got %zu)", count);
        return FEEDER_EINVAL;
    }
    for (size_t i = 0; i < count; i++)
        if (!paths[i]) {
            feeder__fmt(err, errlen, "feeder_dataset_open_tar: paths[%zu] is NULL", i);
            return FEEDER_EINVAL;
        }
    feeder_dataset *ds = NULL;
    int rc = tar_alloc(paths, count, &ds);
    if (!rc)
        rc = open_cache(ds->tar, opt, err, errlen);
    if (!rc) /* the cache: URL shards */
        ds->tar->fetch_ahead = feeder__ahead_shards(opt ? opt->fetch_ahead : 0, !!ds->tar->cache,
                                                    ds->tar->cache ? ds->tar->cache->max_bytes : 0);
    if (!rc && ds->tar->cache && !ds->tar->cache->offline &&
        !(rc = probe_all(ds->tar, err, errlen)))
        rc = known_indexes(ds->tar);
    for (size_t i = 0; !rc && i < count; i++)
        rc = ds->tar->shards[i].remote
                 ? index_remote(ds->tar, &ds->tar->shards[i], err, errlen)
                 : index_shard(&ds->tar->shards[i], err, errlen);
    if (!rc)
        rc = assemble(ds, err, errlen);
    if (rc == -ENOMEM && err && errlen && !err[0])
        feeder__fmt(err, errlen, "feeder_dataset_open_tar: out of memory");
    if (rc) {
        feeder_dataset_destroy(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

/* ---- fetch ahead (remote/ahead.c) ---- */

static uint32_t ahead_shard_of(const void *ctx, uint64_t index)
{
    const feeder__tar *t = ctx;
    uint32_t s = t->shard_of[index];
    return t->shards[s].remote ? s : UINT32_MAX;
}

static const char *ahead_url(const void *ctx, uint32_t s)
{
    return ((const feeder__tar *)ctx)->shards[s].path;
}

static const feeder__remote_meta *ahead_meta(const void *ctx, uint32_t s)
{
    return &((const feeder__tar *)ctx)->shards[s].meta;
}

void feeder__tar_plan(feeder__tar *t, const uint64_t *order, uint64_t len)
{
    feeder__ahead_src src = {.cache = t->cache, .nshards = t->nshards, .ahead = t->fetch_ahead,
                             .ctx = t, .shard_of = ahead_shard_of, .url = ahead_url,
                             .meta = ahead_meta};
    feeder__ahead_plan(&t->fetch, &src, order, len);
}

void feeder__tar_progress(feeder__tar *t, uint64_t pos)
{
    feeder__ahead_progress(t->fetch, pos);
}

int feeder__tar_settled(const feeder__tar *t)
{
    uint32_t nurl = 0;
    for (uint32_t s = 0; s < t->nshards; s++)
        nurl += t->shards[s].remote != 0;
    return feeder__ahead_settled(t->fetch, nurl);
}

int feeder_dataset_open_tar(const char *const *paths, size_t count, feeder_dataset **out,
                            char *err, size_t errlen)
{
    return feeder__tar_open(paths, count, NULL, out, err, errlen);
}

int feeder_dataset_open_tar_pattern(const char *pattern, feeder_dataset **out, char *err,
                                    size_t errlen)
{
    char **names;
    size_t n;
    int rc = feeder__dataset_pattern("feeder_dataset_open_tar_pattern", pattern, out, &names, &n,
                                     err, errlen);
    if (rc)
        return rc;
    rc = feeder_dataset_open_tar((const char *const *)names, n, out, err, errlen);
    feeder__brace_free(names, n);
    return rc;
}

int feeder_dataset_tar_info(const feeder_dataset *ds, feeder_tar_info *out)
{
    if (!ds || !out || ds->kind != FEEDER__DS_TAR)
        return FEEDER_EINVAL;
    memset(out, 0, sizeof(*out));
    const feeder__tar *t = ds->tar;
    out->shards = t->nshards;
    out->samples = ds->n;
    for (uint32_t i = 0; i < t->nshards; i++) {
        out->indexes_cached += t->shards[i].cached == 1;
        out->indexes_written += t->shards[i].cached == 2;
        for (uint64_t k = 0; k < t->shards[i].ix.n; k++)
            out->bad_samples += t->shards[i].ix.e[k].bad;
    }
    return 0;
}

int feeder_dataset_tar_sample(const feeder_dataset *ds, uint64_t index, const char **shard,
                              const char **key, uint64_t *offset, uint64_t *size,
                              const char **problem)
{
    if (!ds || ds->kind != FEEDER__DS_TAR || index >= ds->n)
        return FEEDER_EINVAL;
    uint64_t k;
    const feeder__tar_shard *s = feeder__tar_sample(ds->tar, index, &k);
    if (shard)
        *shard = s->path;
    if (key)
        *key = feeder__tar_key(&s->ix, k);
    int bad = s->ix.e[k].bad != 0;
    if (offset)
        *offset = bad ? 0 : s->ix.e[k].off;
    if (size)
        *size = bad ? 0 : s->ix.e[k].len;
    if (problem)
        *problem = bad ? feeder__tar_detail(&s->ix, k) : NULL;
    return bad ? FEEDER_EDATASET : 0;
}
