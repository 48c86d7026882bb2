/*
 * Shards datasets: a brace range of packs, local or behind URLs, opened as
 * one packed dataset (pack.h, "shards"). The shards live in one reserved
 * address range, each at its own page-aligned offset, so every reader of
 * packed records (worker/packed_read.c) works on them unchanged; for a URL
 * only the header and index are fetched at open (range requests, all shards
 * at once), and the whole shard comes later through the shard cache, mapped
 * over its place in the range by the process that needs it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/brace.h"
#include "common/common.h"
#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "dataset/tar.h"
#include "remote/remote.h"

#define ULL(x) ((unsigned long long)(x))
#define PAGE 4096u

static uint64_t page_up(uint64_t v) { return (v + PAGE - 1) / PAGE * PAGE; }

uint32_t feeder__shards_of(const struct feeder__shards *sh, uint64_t index)
{
    uint32_t lo = 0, hi = sh->n; /* first[lo] <= index < first[hi] */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sh->first[mid] <= index)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void feeder__shards_free(struct feeder__shards *sh, uint8_t *map, size_t map_len)
{
    if (!sh)
        return;
    feeder__ahead_stop(&sh->fetch);
    for (uint32_t s = 0; s < sh->n; s++) {
        if (sh->lock_fd && sh->lock_fd[s] >= 0)
            close(sh->lock_fd[s]);
        if (sh->stream && sh->stream[s]) {
            feeder__shard_release(sh->stream[s]);
            free(sh->stream[s]);
        }
        if (sh->names)
            free(sh->names[s]);
    }
    if (sh->cache) {
        feeder__cache_close(sh->cache);
        free(sh->cache);
    }
    free(sh->names);
    free(sh->first);
    free(sh->base);
    free(sh->bytes);
    free(sh->meta);
    free(sh->remote);
    free(sh->resident);
    free(sh->lock_fd);
    free(sh->stream);
    free(sh->used);
    free(sh);
}

static struct feeder__shards *shards_alloc(char **names, uint32_t n)
{
    struct feeder__shards *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return NULL;
    sh->n = n;
    sh->names = names;
    sh->first = calloc(n + 1, sizeof(uint64_t));
    sh->base = calloc(n, sizeof(uint64_t));
    sh->bytes = calloc(n, sizeof(uint64_t));
    sh->meta = calloc(n, sizeof(feeder__remote_meta));
    sh->remote = calloc(n, 1);
    sh->resident = calloc(n, 1);
    sh->lock_fd = malloc(n * sizeof(int));
    sh->stream = calloc(n, sizeof(void *));
    sh->used = calloc(n, sizeof(uint64_t));
    sh->cache = calloc(1, sizeof(feeder__cache));
    if (!sh->first || !sh->base || !sh->bytes || !sh->meta || !sh->remote || !sh->resident ||
        !sh->lock_fd || !sh->stream || !sh->used || !sh->cache) {
        sh->n = 0; /* names stay the caller's */
        sh->names = NULL;
        feeder__shards_free(sh, NULL, 0);
        return NULL;
    }
    for (uint32_t s = 0; s < n; s++)
        sh->lock_fd[s] = -1;
    return sh;
}

/* ---- open: sizes, then the reservation, then the metadata ---- */

/* Open state that lives only during feeder_dataset_open_shards. */
typedef struct opening {
    struct feeder__shards *sh;
    uint32_t n;              /* shards: fd, t and h have n entries */
    int *fd;                 /* local shards' descriptors */
    feeder__target *t;       /* URL shards' addresses */
    feeder__pack_header *h;  /* each shard's header */
    uint8_t *map;
    size_t map_len;
} opening;

static int size_local(opening *o, uint32_t s, char *err, size_t errlen)
{
    const char *path = o->sh->names[s];
    if ((o->fd[s] = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: cannot open packed file: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(o->fd[s], &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)PAGE) {
        feeder__fmt(err, errlen, "%s: not a packed file (a regular file of at least %u bytes)",
                    path, PAGE);
        return FEEDER_EFORMAT;
    }
    o->sh->bytes[s] = (uint64_t)st.st_size;
    return 0;
}

/* Offline (FEEDER_REMOTE_OFFLINE=1): bytes [off, off + len) of URL shard
 * s's copy in the shard cache, in place of a range request. */
static int read_cached(const struct feeder__shards *sh, uint32_t s, uint64_t off, uint8_t *dst,
                       size_t len, char *err, size_t errlen)
{
    const feeder__cache *c = sh->cache;
    long got = feeder__cache_peek(c, sh->names[s], FEEDER__GET_STRIPED, off, dst, len);
    int e = got < 0 ? (int)-got : (size_t)got < len ? EIO : 0; /* EIO: shorter than recorded */
    if (e) {
        char path[4200];
        feeder__cache_name(c->dir, sh->names[s], FEEDER__GET_STRIPED, path, sizeof(path));
        feeder__fmt(err, errlen, "%s: FEEDER_REMOTE_OFFLINE=1 and its cached copy %s cannot be "
                    "read: %s", sh->names[s], path, strerror(e));
    }
    return -e;
}

/* Offline: every URL shard's size and ETag as the cache recorded them, and
 * its header page from the cached copy. */
static int probe_cached(opening *o, uint8_t *pages, char *err, size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    const feeder__cache *c = sh->cache;
    for (uint32_t s = 0; s < sh->n; s++) {
        if (!sh->remote[s])
            continue;
        feeder__remote_meta *m = &((feeder__remote_meta *)sh->meta)[s];
        if (feeder__cache_lookup(c, sh->names[s], FEEDER__GET_STRIPED, m) < 0) {
            feeder__fmt(err, errlen, "%s: FEEDER_REMOTE_OFFLINE=1 and the shard cache %s holds "
                        "no whole copy of it", sh->names[s], c->dir);
            return -ENOENT;
        }
        if ((sh->bytes[s] = m->size) < PAGE) {
            feeder__fmt(err, errlen, "%s: not a packed file (%llu bytes)", sh->names[s],
                        ULL(m->size));
            return FEEDER_EFORMAT;
        }
        int rc = read_cached(sh, s, 0, pages + (size_t)s * PAGE, PAGE, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* Every URL shard's header page, all in flight at once: their sizes and
 * ETags come with them. */
static int probe_remote(opening *o, uint8_t *pages, char *err, size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    if (((feeder__cache *)sh->cache)->offline)
        return probe_cached(o, pages, err, errlen);
    feeder__request *rq = calloc(sh->n, sizeof(*rq));
    uint32_t *which = calloc(sh->n, sizeof(*which));
    if (!rq || !which) {
        free(rq);
        free(which);
        return -ENOMEM;
    }
    uint32_t m = 0;
    for (uint32_t s = 0; s < sh->n; s++)
        if (sh->remote[s]) {
            rq[m] = (feeder__request){.target = &o->t[s], .first = 0, .last = PAGE - 1,
                                      .fd = -1, .buf = pages + (size_t)s * PAGE, .cap = PAGE};
            which[m++] = s;
        }
    int rc = m ? feeder__remote_run(&((feeder__cache *)sh->cache)->cfg, rq, m, err, errlen) : 0;
    for (uint32_t k = 0; !rc && k < m; k++) {
        uint32_t s = which[k];
        ((feeder__remote_meta *)sh->meta)[s] = rq[k].meta;
        sh->bytes[s] = rq[k].meta.size;
        if (rq[k].len != PAGE || rq[k].meta.size < PAGE) {
            feeder__fmt(err, errlen, "%s: not a packed file (%llu bytes)", sh->names[s],
                        ULL(rq[k].meta.size));
            rc = FEEDER_EFORMAT;
        }
    }
    free(rq);
    free(which);
    return rc;
}

static int reserve(opening *o, char *err, size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    uint64_t total = 0;
    for (uint32_t s = 0; s < sh->n; s++) {
        sh->base[s] = total;
        total += page_up(sh->bytes[s]);
    }
    if (total > SIZE_MAX / 2) {
        feeder__fmt(err, errlen, "%s ...: %llu bytes of shards do not fit this address space",
                    sh->names[0], ULL(total));
        return FEEDER_EOVERFLOW;
    }
    void *m = mmap(NULL, (size_t)total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        feeder__fmt(err, errlen, "reserving %llu bytes of address space for %u shards: %s",
                    ULL(total), sh->n, strerror(e));
        return -e;
    }
    o->map = m;
    o->map_len = (size_t)total;
    return 0;
}

static int map_local(opening *o, uint32_t s, char *err, size_t errlen)
{
    void *at = o->map + o->sh->base[s];
    void *m = mmap(at, (size_t)o->sh->bytes[s], PROT_READ, MAP_SHARED | MAP_FIXED, o->fd[s], 0);
    if (m == MAP_FAILED) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: mmap: %s", o->sh->names[s], strerror(e));
        return -e;
    }
    o->sh->resident[s] = 1;
    return 0;
}

/* The sections a reader needs before the records: they must come first in
 * the file, as feeder-pack writes them, to be fetched without the records. */
static int meta_end(const feeder__pack_header *h, const char *name, uint64_t size, char *err,
                    size_t errlen)
{
    uint64_t ends[3] = {h->index_off + h->count * FEEDER__PACK_ENTRY_BYTES,
                        h->labels_off + h->count * 8, h->classes_off + h->classes_bytes};
    int ok = h->count < (UINT64_MAX / 64) && h->records_off <= size &&
             h->records_off >= PAGE;
    for (int k = 0; k < 3 && ok; k++)
        ok = ends[k] <= h->records_off;
    if (!ok) {
        feeder__fmt(err, errlen,
                    "%s: its index, labels and class names do not all lie before its record "
                    "area inside its %llu bytes: a shard read over the network needs them first",
                    name, ULL(size));
        return FEEDER_EFORMAT;
    }
    return 0;
}

/* A URL shard's header page and metadata, in anonymous memory at its place
 * in the range; the rest of its place stays unmapped until ensure. */
static int place_remote(opening *o, const uint8_t *pages, char *err, size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    feeder__request *rq = calloc(sh->n, sizeof(*rq));
    uint32_t *which = calloc(sh->n, sizeof(*which));
    int rc = rq && which ? 0 : -ENOMEM;
    uint32_t m = 0;
    for (uint32_t s = 0; s < sh->n && !rc; s++) {
        if (!sh->remote[s])
            continue;
        const uint8_t *page = pages + (size_t)s * PAGE;
        if ((rc = feeder__pack_peek(page, PAGE, sh->names[s], &o->h[s], err, errlen)) ||
            (rc = meta_end(&o->h[s], sh->names[s], sh->bytes[s], err, errlen)))
            break;
        uint8_t *at = o->map + sh->base[s];
        uint64_t len = o->h[s].records_off;
        if (mmap(at, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == MAP_FAILED) {
            rc = -errno;
            feeder__fmt(err, errlen, "%s: mapping %llu bytes for its index: %s", sh->names[s],
                        ULL(len), strerror(-rc));
            break;
        }
        memcpy(at, page, PAGE);
        if (len > PAGE && ((feeder__cache *)sh->cache)->offline) {
            if ((rc = read_cached(sh, s, PAGE, at + PAGE, (size_t)(len - PAGE), err, errlen)))
                break;
        } else if (len > PAGE) {
            rq[m] = (feeder__request){.target = &o->t[s], .first = PAGE, .last = len - 1,
                                      .fd = -1, .buf = at + PAGE, .cap = (size_t)(len - PAGE)};
            which[m++] = s;
        }
    }
    if (!rc && m)
        rc = feeder__remote_run(&((feeder__cache *)sh->cache)->cfg, rq, m, err, errlen);
    for (uint32_t k = 0; !rc && k < m; k++) {
        const feeder__remote_meta *seen = &((feeder__remote_meta *)sh->meta)[which[k]];
        if (rq[k].len != rq[k].cap) {
            feeder__fmt(err, errlen, "%s: %zu bytes of its index arrived of %zu",
                        rq[k].target->url, rq[k].len, rq[k].cap);
            rc = FEEDER_EREMOTE;
        } else if (rq[k].meta.size != seen->size || strcmp(rq[k].meta.etag, seen->etag)) {
            feeder__fmt(err, errlen, "%s: the shard changed on the server while it was opened",
                        rq[k].target->url);
            rc = FEEDER_ECHECKSUM;
        }
    }
    free(rq);
    free(which);
    return rc;
}

/* ---- open: one index over every shard ---- */

/* Each shard parsed where it lies in the range; the same record kind and
 * RAW shape (and format version: the CRC's seed) as the first. */
static int parse_all(opening *o, feeder__pack_view *v, char *err, size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    for (uint32_t s = 0; s < sh->n; s++) {
        int rc = feeder__pack_parse(o->map + sh->base[s], (size_t)sh->bytes[s], sh->names[s],
                                    &v[s], err, errlen);
        if (rc)
            return rc;
        const feeder__pack_header *a = &v[0].h, *b = &v[s].h;
        if (a->kind != b->kind || a->version != b->version || a->layout != b->layout ||
            a->height != b->height || a->width != b->width || a->channels != b->channels) {
            feeder__fmt(err, errlen,
                        "%s: version %u, kind %u, %ux%ux%u layout %u; %s, the first shard: "
                        "version %u, kind %u, %ux%ux%u layout %u: every shard must match it",
                        sh->names[s], b->version, b->kind, b->height, b->width, b->channels,
                        b->layout, sh->names[0], a->version, a->kind, a->height, a->width,
                        a->channels, a->layout);
            return FEEDER_EFORMAT;
        }
        sh->first[s + 1] = sh->first[s] + b->count;
    }
    return 0;
}

static int build_index(feeder_dataset *ds, opening *o, const feeder__pack_view *v)
{
    struct feeder__pack *pk = ds->pack;
    struct feeder__shards *sh = o->sh;
    uint64_t n = sh->first[sh->n], nc = 0;
    pk->off = malloc(n * sizeof(*pk->off));
    pk->size = malloc(n * sizeof(*pk->size));
    pk->crc = malloc(n * sizeof(*pk->crc));
    ds->labels = malloc(n * sizeof(*ds->labels));
    if (!pk->off || !pk->size || !pk->crc || !ds->labels)
        return -ENOMEM;
    uint32_t a = 0, b = ~0u;
    for (uint32_t s = 0; s < sh->n; s++) {
        for (uint64_t r = 0, i = sh->first[s]; r < v[s].h.count; r++, i++) {
            feeder__pack_entry(&v[s], r, &pk->off[i], &pk->size[i], &pk->crc[i]);
            pk->off[i] += sh->base[s];
            ds->labels[i] = feeder__pack_label(&v[s], r);
        }
        nc = v[s].num_classes > nc ? v[s].num_classes : nc;
        a = feeder__crc32c(a, &sh->bytes[s], sizeof(uint64_t));
    }
    a = feeder__crc32c(a, pk->size, n * sizeof(*pk->size));
    a = feeder__crc32c(a, pk->crc, n * sizeof(*pk->crc));
    b = feeder__crc32c(b, ds->labels, n * sizeof(*ds->labels));
    ds->fingerprint = ((uint64_t)a << 32 | b) ? ((uint64_t)a << 32 | b) : 1;
    ds->n = n;
    ds->num_classes = nc;
    pk->v = v[0];
    pk->v.h.count = n;
    pk->v.h.shard_index = 0;
    pk->v.h.shard_count = 1;
    pk->v.h.shard_first = 0;
    pk->v.h.total_records = n;
    pk->v.buf = pk->map;
    pk->v.len = pk->map_len;
    pk->v.index = pk->v.labels = NULL;
    pk->v.num_classes = nc;
    return 0;
}

/* The first shard's class names, when it has a name for every class. */
static int copy_classes(feeder_dataset *ds, const feeder__pack_view *v0)
{
    if (!v0->classes || v0->h.num_classes != ds->num_classes)
        return 0;
    if (!(ds->classes = calloc((size_t)ds->num_classes, sizeof(char *))))
        return -ENOMEM;
    const char *c = (const char *)v0->classes;
    for (uint64_t k = 0; k < ds->num_classes; k++) {
        if (!(ds->classes[k] = strdup(c)))
            return -ENOMEM;
        c += strlen(c) + 1;
    }
    return 0;
}

/* ---- open ---- */

static void discard(feeder_dataset *ds, opening *o)
{
    struct feeder__pack *pk = ds ? ds->pack : NULL;
    for (uint32_t s = 0; s < o->n; s++) {
        if (o->fd && o->fd[s] >= 0)
            close(o->fd[s]);
        if (o->t)
            feeder__target_free(&o->t[s]);
    }
    free(o->fd);
    free(o->t);
    free(o->h);
    if (!ds)
        return;
    for (uint64_t i = 0; ds->classes && i < ds->num_classes; i++)
        free(ds->classes[i]);
    free(ds->classes);
    free(ds->labels);
    if (pk) {
        if (pk->map)
            munmap(pk->map, pk->map_len);
        feeder__shards_free(pk->shards, NULL, 0);
        free(pk->off);
        free(pk->size);
        free(pk->crc);
        free(pk->path);
        free(pk);
    }
    free(ds);
}

/* Local shards opened and sized, URL shards resolved and probed. */
static int size_shards(opening *o, const feeder_shard_options *opt, uint8_t **pages, char *err,
                       size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    uint32_t n = sh->n, remote = 0;
    o->fd = malloc(n * sizeof(int));
    o->t = calloc(n, sizeof(feeder__target));
    o->h = calloc(n, sizeof(feeder__pack_header));
    if (!o->fd || !o->t || !o->h)
        return -ENOMEM;
    o->n = n;
    for (uint32_t s = 0; s < n; s++)
        o->fd[s] = -1;
    int rc = 0;
    for (uint32_t s = 0; s < n && !rc; s++) {
        sh->remote[s] = feeder__url_kind(sh->names[s]) != FEEDER__URL_LOCAL;
        remote += sh->remote[s];
        rc = sh->remote[s] ? feeder__target_resolve(sh->names[s], &o->t[s], err, errlen)
                           : size_local(o, s, err, errlen);
    }
    sh->fetch_ahead = 0;
    sh->nurl = remote;
    if (rc || !remote)
        return rc;
    if ((rc = feeder__cache_open(sh->cache, opt->cache_dir, opt->cache_max_bytes, err, errlen)))
        return rc;
    sh->fetch_ahead = feeder__ahead_shards(opt->fetch_ahead, remote,
                                           ((feeder__cache *)sh->cache)->max_bytes);
    if (!(*pages = malloc((size_t)n * PAGE)))
        return -ENOMEM;
    return probe_remote(o, *pages, err, errlen);
}

/* The dataset over the reservation: every shard placed and parsed. */
static int assemble(feeder_dataset *ds, opening *o, const uint8_t *pages, char *err,
                    size_t errlen)
{
    struct feeder__shards *sh = o->sh;
    int rc = reserve(o, err, errlen);
    if (rc)
        return rc;
    ds->pack->map = o->map;
    ds->pack->map_len = o->map_len;
    for (uint32_t s = 0; s < sh->n && !rc; s++)
        if (!sh->remote[s])
            rc = map_local(o, s, err, errlen);
    if (!rc && pages)
        rc = place_remote(o, pages, err, errlen);
    feeder__pack_view *v = rc ? NULL : calloc(sh->n, sizeof(*v));
    if (!rc && !v)
        rc = -ENOMEM;
    if (!rc)
        rc = parse_all(o, v, err, errlen);
    if (!rc)
        rc = build_index(ds, o, v);
    if (!rc)
        rc = copy_classes(ds, &v[0]);
    free(v);
    for (uint32_t s = 0; !rc && s < sh->n; s++)
        if (sh->remote[s])
            mprotect(o->map + sh->base[s], (size_t)o->h[s].records_off, PROT_READ);
    return rc;
}

static int is_tar(const char *name)
{
    size_t len = strlen(name);
    return len >= 4 && !strcmp(name + len - 4, ".tar");
}

/* The single switch point by extension: all .tar names go to the tar
 * datasets (dataset/tar.c), all others are packs; one pattern names one
 * kind. 1: tar shards, 0: packs, or FEEDER_EINVAL. */
static int shard_format(char **names, size_t n, char *err, size_t errlen)
{
    size_t tars = 0;
    for (size_t s = 0; s < n; s++)
        tars += is_tar(names[s]) != 0;
    if (tars == 0 || tars == n)
        return tars != 0;
    for (size_t s = 0; s < n; s++)
        if (is_tar(names[s]) != is_tar(names[0])) {
            int first_tar = is_tar(names[0]);
            feeder__fmt(err, errlen, "%s is a tar shard and %s a pack: one pattern names tar "
                        "shards (.tar) or packs, not both", first_tar ? names[0] : names[s],
                        first_tar ? names[s] : names[0]);
            break;
        }
    return FEEDER_EINVAL;
}

static feeder_dataset *new_packed(const char *pattern)
{
    feeder_dataset *ds = calloc(1, sizeof(*ds));
    struct feeder__pack *pk = calloc(1, sizeof(*pk));
    if (!ds || !pk || !(pk->path = strdup(pattern))) {
        free(pk);
        free(ds);
        return NULL;
    }
    ds->kind = FEEDER__DS_PACKED;
    atomic_init(&ds->refs, 1);
    ds->pack = pk;
    ds->release = feeder__pack_release;
    pk->fd = pk->lock_fd = -1;
    return ds;
}

int feeder_dataset_open_shards(const char *pattern, const feeder_shard_options *opt,
                               feeder_dataset **out, char *err, size_t errlen)
{
    static const feeder_shard_options none;
    if (!opt)
        opt = &none;
    char **names;
    size_t n;
    int rc = feeder__dataset_pattern("feeder_dataset_open_shards", pattern, out, &names, &n, err,
                                     errlen);
    if (rc)
        return rc;
    if ((rc = shard_format(names, n, err, errlen)) == 1) {
        rc = feeder__tar_open((const char *const *)names, n, opt, out, err, errlen);
        feeder__brace_free(names, n);
        return rc;
    }
    if (!rc && n > UINT32_MAX) {
        feeder__fmt(err, errlen, "%s: %zu shards (at most %u)", pattern, n, UINT32_MAX);
        rc = FEEDER_EINVAL;
    }
    if (rc) {
        feeder__brace_free(names, n);
        return rc;
    }
    opening o = {0};
    feeder_dataset *ds = new_packed(pattern);
    if (!ds || !(o.sh = shards_alloc(names, (uint32_t)n))) {
        feeder__brace_free(names, n);
        discard(ds, &o);
        return -ENOMEM;
    }
    ds->pack->shards = o.sh;
    ds->pack->shards_free = feeder__shards_free;
    o.sh->max_resident = opt->max_resident;
    uint8_t *pages = NULL;
    rc = size_shards(&o, opt, &pages, err, errlen);
    if (!rc)
        rc = assemble(ds, &o, pages, err, errlen);
    free(pages);
    if (rc) {
        discard(ds, &o);
        return rc;
    }
    o.sh = NULL; /* the dataset's now */
    discard(NULL, &o);
    *out = ds;
    return 0;
}

int feeder_dataset_shard_counts(const feeder_dataset *ds, uint64_t *counts, uint32_t cap,
                                uint32_t *n)
{
    if (!ds || !n || ds->kind != FEEDER__DS_PACKED || !ds->pack->shards)
        return FEEDER_EINVAL;
    const struct feeder__shards *sh = ds->pack->shards;
    for (uint32_t s = 0; counts && s < sh->n && s < cap; s++)
        counts[s] = sh->first[s + 1] - sh->first[s];
    *n = sh->n;
    return 0;
}

/* ---- a process maps the shards it reads ---- */

/* A partial copy's state, let go (its mapping stays until replaced). */
static void drop_stream(struct feeder__shards *sh, uint32_t s)
{
    feeder__shard *st = sh->stream[s];
    if (!st)
        return;
    feeder__shard_release(st);
    free(st);
    sh->stream[s] = NULL;
}

/* Give back the least recently used URL shard (not used in this call):
 * its place becomes unmapped again and its cache lock is dropped. */
static void unmap_oldest(struct feeder__shards *sh, uint8_t *map)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t s = 0; s < sh->n; s++)
        if (sh->remote[s] && sh->resident[s] && sh->used[s] != sh->tick &&
            (best == UINT32_MAX || sh->used[s] < sh->used[best]))
            best = s;
    if (best == UINT32_MAX)
        return;
    mmap(map + sh->base[best], (size_t)page_up(sh->bytes[best]), PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    drop_stream(sh, best);
    close(sh->lock_fd[best]);
    sh->lock_fd[best] = -1;
    sh->resident[best] = 0;
}

/* How often a shard is got again after its download stopped without an
 * answer (the downloading process died) before that is the reader's error. */
enum { AGAIN_MAX = 3 };

static int stopped(const char *url, char *msg, size_t msglen)
{
    feeder__fmt(msg, msglen, "%s: its download into the shard cache stopped without an answer "
                "%d times (the downloading process ended)", url, AGAIN_MAX);
    return FEEDER_EREMOTE;
}

/* The cached copy of URL shard s, held (or its partial copy, once its
 * header and index have arrived), when it begins with the header and index
 * open parsed (they lie at its place in the range, fetched then): a copy
 * that does not (the shard rewritten on a server that gives no ETag and
 * kept its size) is dropped and fetched once more. */
static int get_checked(struct feeder__shards *sh, uint8_t *map, uint32_t s, feeder__shard *got,
                       char *msg, size_t msglen)
{
    const feeder__remote_meta *seen = &((feeder__remote_meta *)sh->meta)[s];
    feeder__pack_header h;
    int rc = feeder__pack_peek(map + sh->base[s], PAGE, sh->names[s], &h, msg, msglen);
    for (int round = 0, again = 0; !rc && round < 2;) {
        if ((rc = feeder__cache_fetch(sh->cache, sh->names[s], seen,
                                      FEEDER__GET_STREAM | FEEDER__GET_STRIPED, got, msg,
                                      msglen)))
            break;
        rc = feeder__shard_wait(got, sh->names[s], 0, h.records_off, msg, msglen);
        if (rc == FEEDER__SHARD_AGAIN) {
            feeder__shard_release(got);
            rc = ++again < AGAIN_MAX ? 0 : stopped(sh->names[s], msg, msglen);
            continue;
        }
        if (!rc)
            rc = feeder__shard_verify(got, sh->names[s], map + sh->base[s],
                                      (size_t)h.records_off, msg, msglen);
        else
            feeder__shard_release(got);
        if (rc != FEEDER_ECHECKSUM)
            break;
        if (round++ == 0)
            rc = 0;
    }
    return rc;
}

static int map_cached(struct feeder__shards *sh, uint8_t *map, uint32_t s, char *msg,
                      size_t msglen)
{
    feeder__shard got;
    int rc = get_checked(sh, map, s, &got, msg, msglen);
    if (rc)
        return rc;
    if ((rc = feeder__shard_map(&got, map + sh->base[s], sh->bytes[s])) != 0) {
        feeder__fmt(msg, msglen, "%s: mmap of its cached copy %s: %s", sh->names[s], got.path,
                    strerror(-rc));
        feeder__shard_release(&got);
        return rc;
    }
    feeder__shard_close_files(&got);
    drop_stream(sh, s);
    if (got.prog && !(sh->stream[s] = malloc(sizeof(got)))) {
        feeder__shard_release(&got);
        return -ENOMEM;
    }
    if (got.prog)
        *(feeder__shard *)sh->stream[s] = got;
    sh->lock_fd[s] = got.lock_fd; /* a partial copy's: -1 until it is whole */
    sh->resident[s] = 1;
    return 0;
}

/* Record i of URL shard s, mapped from a partial copy, once it has
 * arrived; the shard held as a whole copy once its download has ended. */
static int wait_record(struct feeder__shards *sh, struct feeder__pack *pk, uint32_t s,
                       uint64_t i, char *msg, size_t msglen)
{
    for (int again = 0;;) {
        feeder__shard *st = sh->stream[s];
        if (!st)
            return 0;
        int rc = feeder__shard_wait(st, sh->names[s], pk->off[i] - sh->base[s], pk->size[i],
                                    msg, msglen);
        if (!rc && !st->prog) { /* whole now: kept like any cached copy */
            sh->lock_fd[s] = st->lock_fd;
            st->lock_fd = -1;
            drop_stream(sh, s);
        }
        if (rc != FEEDER__SHARD_AGAIN)
            return rc;
        if (++again == AGAIN_MAX)
            return stopped(sh->names[s], msg, msglen);
        if ((rc = map_cached(sh, pk->map, s, msg, msglen)) != 0)
            return rc;
    }
}

int feeder__shards_ensure(struct feeder__pack *pk, const uint64_t *idx, uint32_t n, char *msg,
                          size_t msglen)
{
    struct feeder__shards *sh = pk->shards;
    if (!sh)
        return 0;
    sh->tick++;
    uint32_t resident = 0;
    for (uint32_t k = 0; k < n; k++)
        sh->used[feeder__shards_of(sh, idx[k])] = sh->tick;
    for (uint32_t s = 0; s < sh->n; s++)
        resident += sh->remote[s] && sh->resident[s];
    for (uint32_t k = 0; k < n; k++) {
        uint32_t s = feeder__shards_of(sh, idx[k]);
        if (sh->resident[s])
            continue;
        while (sh->max_resident && resident >= sh->max_resident) {
            unmap_oldest(sh, pk->map);
            uint32_t r = 0;
            for (uint32_t q = 0; q < sh->n; q++)
                r += sh->remote[q] && sh->resident[q];
            if (r == resident)
                break; /* all resident ones are this call's */
            resident = r;
        }
        int rc = map_cached(sh, pk->map, s, msg, msglen);
        if (rc)
            return rc;
        resident++;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t s = feeder__shards_of(sh, idx[k]);
        int rc = sh->stream[s] ? wait_record(sh, pk, s, idx[k], msg, msglen) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- fetch ahead (remote/ahead.c) ---- */

static uint32_t ahead_shard_of(const void *ctx, uint64_t index)
{
    const struct feeder__shards *sh = ctx;
    uint32_t s = feeder__shards_of(sh, index);
    return sh->remote[s] ? s : UINT32_MAX;
}

static const char *ahead_url(const void *ctx, uint32_t s)
{
    return ((const struct feeder__shards *)ctx)->names[s];
}

static const feeder__remote_meta *ahead_meta(const void *ctx, uint32_t s)
{
    return &((const feeder__remote_meta *)((const struct feeder__shards *)ctx)->meta)[s];
}

void feeder__shards_plan(struct feeder__pack *pk, const uint64_t *order, uint64_t len)
{
    struct feeder__shards *sh = pk->shards;
    if (!sh)
        return;
    feeder__ahead_src src = {.cache = sh->cache, .nshards = sh->n, .ahead = sh->fetch_ahead,
                             .ctx = sh, .shard_of = ahead_shard_of, .url = ahead_url,
                             .meta = ahead_meta, .flags = FEEDER__GET_STRIPED};
    feeder__ahead_plan(&sh->fetch, &src, order, len);
}

void feeder__shards_progress(struct feeder__pack *pk, uint64_t pos)
{
    if (pk->shards)
        feeder__ahead_progress(pk->shards->fetch, pos);
}

int feeder__shards_settled(const struct feeder__pack *pk)
{
    return pk->shards && feeder__ahead_settled(pk->shards->fetch, pk->shards->nurl);
}
