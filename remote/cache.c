/*
 * The shard cache: a folder of whole shards, each named by a hash of its
 * URL, with the server's size, ETag and Last-Modified beside it (.meta) and
 * a lock file (.lock). A shard is fetched under an exclusive flock on its
 * lock file, into a temporary name in the same folder, and renamed: two
 * loaders or processes on one machine fetch it once, and nobody ever maps
 * half a shard. Whoever uses a shard holds a shared flock on the lock file,
 * which is what eviction (least recently used first, by the lock file's
 * mtime, touched on every use) tries to take exclusively and skips when it
 * cannot. Lock files stay: removing one races with a process that has
 * opened it but not yet locked it, and they are empty.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "remote/remote.h"

#define ULL(x) ((unsigned long long)(x))

static int mkdirs(const char *dir)
{
    char p[4096];
    feeder__fmt(p, sizeof(p), "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int feeder__cache_open(feeder__cache *c, const char *dir, uint64_t max_bytes, char *err,
                       size_t errlen)
{
    memset(c, 0, sizeof(*c));
    feeder__remote_defaults(&c->cfg);
    char buf[4096];
    const char *env = getenv("FEEDER_CACHE_DIR"), *home = getenv("HOME");
    if (dir && *dir)
        feeder__fmt(buf, sizeof(buf), "%s", dir);
    else if (env && *env)
        feeder__fmt(buf, sizeof(buf), "%s", env);
    else
        feeder__fmt(buf, sizeof(buf), "%s/.cache/feeder/shards", home && *home ? home : "/tmp");
    const char *mx = getenv("FEEDER_CACHE_MAX_BYTES");
    c->max_bytes = max_bytes ? max_bytes : mx && *mx ? strtoull(mx, NULL, 10) : 0;
    const char *lt = getenv("FEEDER_CACHE_LOCK_TIMEOUT_MS");
    c->lock_timeout_ms = lt && *lt ? atoi(lt) : 600000;
    const char *off = getenv("FEEDER_REMOTE_OFFLINE");
    c->offline = off && !strcmp(off, "1");
    int rc = mkdirs(buf);
    if (rc) {
        feeder__fmt(err, errlen, "%s: cannot create the shard cache folder: %s", buf,
                    strerror(-rc));
        return rc;
    }
    if (!(c->dir = strdup(buf)))
        return -ENOMEM;
    return 0;
}

void feeder__cache_close(feeder__cache *c)
{
    if (c) {
        free(c->dir);
        c->dir = NULL;
    }
}

void feeder__shard_release(feeder__shard *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* drops the shared flock */
    s->fd = s->lock_fd = -1;
}

/* FNV-1a, 64 bits: a file name, not a security boundary. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

void feeder__cache_name(const char *dir, const char *url, char *out, size_t outlen)
{
    const char *base = strrchr(url, '/');
    base = base ? base + 1 : url;
    char clean[101];
    size_t n = 0;
    for (; base[n] && n < sizeof(clean) - 1; n++) {
        char ch = base[n];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_';
        clean[n] = ok ? ch : '_';
    }
    clean[n] = 0;
    feeder__fmt(out, outlen, "%s/%016llx-%s", dir, ULL(fnv1a(url)), clean);
}

/* ---- the .meta file ---- */

static int meta_read(const char *path, const char *url, feeder__remote_meta *m)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[4400], got_url[4200] = "";
    memset(m, 0, sizeof(*m));
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "url ", 4))
            feeder__fmt(got_url, sizeof(got_url), "%s", line + 4);
        else if (!strncmp(line, "size ", 5))
            m->size = strtoull(line + 5, NULL, 10);
        else if (!strncmp(line, "etag ", 5))
            feeder__fmt(m->etag, sizeof(m->etag), "%s", line + 5);
        else if (!strncmp(line, "modified ", 9))
            feeder__fmt(m->modified, sizeof(m->modified), "%s", line + 9);
    }
    fclose(f);
    return strcmp(got_url, url) ? -1 : 0;
}

static int meta_write(const char *path, const char *url, const feeder__remote_meta *m)
{
    char tmp[4200];
    feeder__fmt(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return -errno;
    fprintf(f, "url %s\nsize %llu\netag %s\nmodified %s\n", url, ULL(m->size), m->etag,
            m->modified);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        return -e;
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

/* Whether `expect` (size; ETag when both are known) matches `m`. */
static int meta_matches(const feeder__remote_meta *expect, const feeder__remote_meta *m)
{
    if (!expect)
        return 1;
    if (expect->size != m->size)
        return 0;
    return !expect->etag[0] || !m->etag[0] || !strcmp(expect->etag, m->etag);
}

/* The cached copy, when it is whole and what `expect` asks for: opened. */
static int cached_open(const char *data, const char *url, const feeder__remote_meta *expect,
                       feeder__shard *out)
{
    char meta[4200];
    feeder__fmt(meta, sizeof(meta), "%s.meta", data);
    feeder__remote_meta m;
    if (meta_read(meta, url, &m) < 0 || !meta_matches(expect, &m))
        return -1;
    int fd = open(data, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != m.size) {
        close(fd);
        return -1;
    }
    out->fd = fd;
    out->size = m.size;
    out->meta = m;
    return 0;
}

int feeder__cache_lookup(const feeder__cache *c, const char *url, feeder__remote_meta *out)
{
    feeder__shard s = {.fd = -1, .lock_fd = -1};
    feeder__cache_name(c->dir, url, s.path, sizeof(s.path));
    if (cached_open(s.path, url, NULL, &s) < 0)
        return -ENOENT;
    *out = s.meta;
    close(s.fd);
    return 0;
}

/* ---- eviction ---- */

typedef struct entry {
    char name[300];
    uint64_t size;
    struct timespec used;
} entry;

static int by_use(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec)
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return 0;
}

/* Every cached shard (a .meta beside a data file) with its size and last use. */
static size_t list_entries(const char *dir, entry **out, uint64_t *total)
{
    DIR *d = opendir(dir);
    size_t n = 0, cap = 0;
    *out = NULL;
    *total = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || len >= 300 || strcmp(e->d_name + len - 5, ".meta"))
            continue;
        char p[4600];
        struct stat st, lk;
        feeder__fmt(p, sizeof(p), "%s/%.*s", dir, (int)(len - 5), e->d_name);
        if (stat(p, &st) < 0)
            continue;
        feeder__fmt(p, sizeof(p), "%s/%.*s.lock", dir, (int)(len - 5), e->d_name);
        if (stat(p, &lk) < 0)
            lk.st_mtim = st.st_mtim;
        if (n == cap) {
            entry *g = realloc(*out, (cap = cap ? 2 * cap : 64) * sizeof(entry));
            if (!g)
                break;
            *out = g;
        }
        feeder__fmt((*out)[n].name, sizeof((*out)[n].name), "%.*s", (int)(len - 5), e->d_name);
        (*out)[n].size = (uint64_t)st.st_size;
        (*out)[n].used = lk.st_mtim;
        *total += (uint64_t)st.st_size;
        n++;
    }
    closedir(d);
    return n;
}

/* Remove least recently used shards nobody holds until `need` more bytes
 * fit under the limit (or nothing more can go). */
static void evict(const feeder__cache *c, uint64_t need, const char *keep)
{
    if (!c->max_bytes)
        return;
    entry *es;
    uint64_t total;
    size_t n = list_entries(c->dir, &es, &total);
    if (n)
        qsort(es, n, sizeof(*es), by_use);
    for (size_t i = 0; i < n && total + need > c->max_bytes; i++) {
        char p[4600];
        feeder__fmt(p, sizeof(p), "%s/%s", c->dir, es[i].name);
        if (!strcmp(p, keep))
            continue;
        char lock[4700];
        feeder__fmt(lock, sizeof(lock), "%s.lock", p);
        int fd = open(lock, O_RDWR | O_CLOEXEC);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
            if (fd >= 0)
                close(fd);
            continue; /* in use, or being fetched */
        }
        char meta[4700];
        feeder__fmt(meta, sizeof(meta), "%s.meta", p);
        unlink(meta);
        unlink(p);
        total -= es[i].size;
        close(fd);
    }
    free(es);
}

/* ---- the download ---- */

static int download(feeder__cache *c, const feeder__target *t, const char *data,
                    const feeder__remote_meta *expect, char *err, size_t errlen)
{
    static _Atomic unsigned seq;
    char tmp[4200];
    feeder__fmt(tmp, sizeof(tmp), "%s.tmp.%ld.%u", data, (long)getpid(), seq++);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: cannot create %s in the shard cache: %s", t->url, tmp,
                    strerror(e));
        return -e;
    }
    feeder__request r = {.target = t, .last = UINT64_MAX, .fd = fd};
    int rc = feeder__remote_run(&c->cfg, &r, 1, err, errlen);
    if (rc == -ENOSPC || rc == -EFBIG || rc == -EDQUOT)
        feeder__fmt(err, errlen, "%s: the shard cache %s is full (%s); the partial download "
                    "was removed", t->url, c->dir, strerror(-rc));
    if (!rc && r.meta.size && r.len != r.meta.size) {
        feeder__fmt(err, errlen, "%s: %llu bytes arrived of the %llu announced", t->url,
                    ULL(r.len), ULL(r.meta.size));
        rc = FEEDER_EREMOTE;
    }
    r.meta.size = r.len;
    if (!rc && !meta_matches(expect, &r.meta)) {
        feeder__fmt(err, errlen, "%s: the shard changed on the server: %llu bytes (ETag %s) "
                    "when it was opened, %llu bytes (ETag %s) now", t->url, ULL(expect->size),
                    expect->etag[0] ? expect->etag : "none", ULL(r.meta.size),
                    r.meta.etag[0] ? r.meta.etag : "none");
        rc = FEEDER_ECHECKSUM;
    }
    char meta[4200];
    feeder__fmt(meta, sizeof(meta), "%s.meta", data);
    if (!rc && (rc = meta_write(meta, t->url, &r.meta)) != 0)
        feeder__fmt(err, errlen, "%s: writing %s: %s", t->url, meta, strerror(-rc));
    if (!rc && rename(tmp, data) < 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "%s: renaming %s: %s", t->url, tmp, strerror(-rc));
        unlink(meta);
    }
    close(fd);
    if (rc)
        unlink(tmp);
    return rc;
}

/* Under the exclusive lock: the cached copy if another process fetched it
 * meanwhile, else a download. */
static int fetch_locked(feeder__cache *c, const feeder__target *t, const char *data,
                        const feeder__remote_meta *expect, feeder__shard *out, char *err,
                        size_t errlen)
{
    if (cached_open(data, t->url, expect, out) == 0)
        return 0;
    evict(c, expect ? expect->size : 0, data);
    int rc = download(c, t, data, expect, err, errlen);
    if (rc)
        return rc;
    if (cached_open(data, t->url, NULL, out) < 0) {
        feeder__fmt(err, errlen, "%s: the cached copy %s vanished after its download",
                    t->url, data);
        return -ENOENT;
    }
    return 0;
}

/* Poll until either the cached copy can be used under a shared lock, or
 * this process gets the exclusive lock and fetches it. Never wait for the
 * exclusive lock alone: every process that maps the shard holds a shared
 * lock for as long as it does, so a process waiting for the exclusive lock
 * after another fetched it would wait forever. */
static int get_locked(feeder__cache *c, const feeder__target *t, const char *data,
                      const feeder__remote_meta *expect, feeder__shard *out, char *err,
                      size_t errlen)
{
    uint64_t end = feeder__now_ns() + (uint64_t)c->lock_timeout_ms * 1000000ull;
    for (;;) {
        if (flock(out->lock_fd, LOCK_SH | LOCK_NB) == 0) {
            if (cached_open(data, t->url, expect, out) == 0)
                return 0;
            flock(out->lock_fd, LOCK_UN);
        }
        if (flock(out->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            int rc = fetch_locked(c, t, data, expect, out, err, errlen);
            if (rc)
                return rc;
            /* Downgrade: a shared lock keeps the evictors (LOCK_EX|LOCK_NB) away. */
            if (flock(out->lock_fd, LOCK_SH) < 0) {
                rc = -errno;
                feeder__fmt(err, errlen, "%s: flock: %s", data, strerror(-rc));
            }
            return rc;
        }
        if (feeder__now_ns() >= end) {
            feeder__fmt(err, errlen, "%s: waited %d ms for another process fetching it into %s",
                        t->url, c->lock_timeout_ms, data);
            return FEEDER_ETIMEDOUT;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int feeder__cache_get(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
                      feeder__shard *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->fd = out->lock_fd = -1;
    feeder__target t;
    int rc = feeder__target_resolve(url, &t, err, errlen);
    if (rc)
        return rc;
    feeder__cache_name(c->dir, url, out->path, sizeof(out->path));
    char lock[4200];
    feeder__fmt(lock, sizeof(lock), "%s.lock", out->path);
    if ((out->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "%s: cannot open %s: %s", url, lock, strerror(-rc));
    }
    if (!rc)
        rc = get_locked(c, &t, out->path, expect, out, err, errlen);
    feeder__target_free(&t);
    if (rc) {
        feeder__shard_release(out);
        return rc;
    }
    futimens(out->lock_fd, NULL); /* last use, for eviction */
    return 0;
}
