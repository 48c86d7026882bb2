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
 * opened it but not yet locked it, and they are empty. The folder must be
 * the user's alone (another user who can write there could plant a shard
 * or a link), and nothing in it is created over an existing name or
 * opened through a link.
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

#define ULL(x) ((unsigned long long)(x))

/* Every cache file is made with these: never through a link planted in
 * its place, never over a file that is there. */
#define CREATE_FLAGS (O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

/* Shards whose download failed in this process: the first failure is
 * every later caller's answer (the retry budget is the shard's, not each
 * batch's). Append-only and lock-free, so a fork never inherits a held lock. */
enum { FAILS_MAX = 256 };
struct feeder__cache_fails {
    _Atomic unsigned n;
    struct {
        _Atomic uint64_t key; /* fnv1a(url) | 1 once rc and msg are written; 0 before */
        int rc;
        char msg[400];
    } r[FAILS_MAX];
};

/* Downloads this process runs on threads of their own for streaming
 * readers ("the download"), joined by feeder__remote_settle. Pushed
 * lock-free: a fork never inherits a held lock. */
typedef struct dl dl;
static _Atomic(dl *) dls_head;

static int mkdirs(const char *dir)
{
    char p[4096];
    feeder__fmt(p, sizeof(p), "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0700) < 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(p, 0700) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* The folder is this user's alone: another local user who can write to it
 * could plant a shard, a .meta or a link there. */
static int check_owner(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: the shard cache folder: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        feeder__fmt(err, errlen, "%s: the shard cache folder is not a folder", dir);
        return -ENOTDIR;
    }
    if (st.st_uid != geteuid()) {
        feeder__fmt(err, errlen, "%s: the shard cache folder belongs to uid %u, not to this user "
                    "(uid %u): another user could plant shards there; set FEEDER_CACHE_DIR to a "
                    "folder of your own", dir, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        feeder__fmt(err, errlen, "%s: the shard cache folder is writable by %s (mode %04o): "
                    "another user could plant shards there; chmod go-w it (or chmod 700), or "
                    "set FEEDER_CACHE_DIR to a folder of your own", dir,
                    (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                    : st.st_mode & S_IWGRP ? "its group" : "others",
                    (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

/* The folder: `dir`, else FEEDER_CACHE_DIR, else XDG_CACHE_HOME/feeder/shards,
 * else HOME/.cache/feeder/shards; never a shared folder like /tmp. */
static int cache_dir(const char *dir, char *buf, size_t len, char *err, size_t errlen)
{
    const char *env = getenv("FEEDER_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (dir && *dir)
        feeder__fmt(buf, len, "%s", dir);
    else if (env && *env)
        feeder__fmt(buf, len, "%s", env);
    else if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is ignored */
        feeder__fmt(buf, len, "%s/feeder/shards", xdg);
    else if (home && home[0] == '/')
        feeder__fmt(buf, len, "%s/.cache/feeder/shards", home);
    else {
        feeder__fmt(err, errlen, "no folder for the shard cache: FEEDER_CACHE_DIR, "
                    "XDG_CACHE_HOME and HOME are unset (or not absolute); set FEEDER_CACHE_DIR "
                    "or the cache_dir option");
        return FEEDER_EINVAL;
    }
    return 0;
}

int feeder__cache_open(feeder__cache *c, const char *dir, uint64_t max_bytes, char *err,
                       size_t errlen)
{
    memset(c, 0, sizeof(*c));
    feeder__remote_defaults(&c->cfg);
    char buf[4096];
    int rc = cache_dir(dir, buf, sizeof(buf), err, errlen);
    if (rc)
        return rc;
    const char *mx = getenv("FEEDER_CACHE_MAX_BYTES");
    c->max_bytes = max_bytes ? max_bytes : mx && *mx ? strtoull(mx, NULL, 10) : 0;
    const char *lt = getenv("FEEDER_CACHE_LOCK_TIMEOUT_MS");
    c->lock_timeout_ms = lt && *lt ? atoi(lt) : 600000;
    const char *off = getenv("FEEDER_REMOTE_OFFLINE");
    c->offline = off && !strcmp(off, "1");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->opened_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if ((rc = mkdirs(buf)) != 0) {
        feeder__fmt(err, errlen, "%s: cannot create the shard cache folder: %s", buf,
                    strerror(-rc));
        return rc;
    }
    if ((rc = check_owner(buf, err, errlen)) != 0)
        return rc;
    if (!(c->dir = strdup(buf)) || !(c->fails = calloc(1, sizeof(*c->fails)))) {
        feeder__cache_close(c);
        return -ENOMEM;
    }
    return 0;
}

void feeder__cache_close(feeder__cache *c)
{
    if (c) {
        feeder__remote_settle(); /* no download thread uses c past here */
        free(c->dir);
        free(c->fails);
        c->dir = NULL;
        c->fails = NULL;
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
    if (s->prog)
        munmap(s->prog, s->prog_len);
    s->prog = NULL;
    s->fd = s->lock_fd = -1;
}

int feeder__shard_verify(feeder__shard *s, const char *url, const uint8_t *want, size_t len,
                         char *err, size_t errlen)
{
    uint8_t *got = malloc(len ? len : 1);
    if (!got)
        return -ENOMEM;
    long n = feeder__pread_full(s->fd, 0, got, len);
    int rc = n < 0 ? (int)n : (size_t)n != len || memcmp(got, want, len) ? FEEDER_ECHECKSUM : 0;
    free(got);
    if (rc == FEEDER_ECHECKSUM) {
        feeder__fmt(err, errlen, "%s: its cached copy %s does not begin with the %zu bytes of "
                    "header and index the server sent when the dataset was opened (the shard "
                    "changed on the server without a new size or ETag, or the copy was "
                    "altered): dropped from the cache", url, s->path, len);
        char meta[4200];
        feeder__fmt(meta, sizeof(meta), "%s.meta", s->path);
        unlink(meta);
    } else if (rc) {
        feeder__fmt(err, errlen, "%s: reading its cached copy %s: %s", url, s->path,
                    strerror(-rc));
    }
    if (rc)
        feeder__shard_release(s);
    return rc;
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
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
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
    static _Atomic unsigned seq;
    feeder__fmt(tmp, sizeof(tmp), "%s.tmp.%ld.%u", path, (long)getpid(), seq++);
    int fd = open(tmp, O_WRONLY | CREATE_FLAGS, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return -e;
    }
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
    int fd = open(data, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != m.size) {
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
        int fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
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

/* ---- temporary files a crash left ---- */

/* A temporary file ("NAME.tmp.PID[.N]") that nobody will rename: its
 * owner is gone and it has not changed for a minute, or it has not changed
 * for ten minutes (a live download writes far more often: an attempt slower
 * than the low-speed limit is cut in seconds). A pid from another pid
 * namespace sharing the folder may look dead, hence the minute. */
static int stale_tmp(const char *dir, const char *name, time_t now)
{
    const char *t = NULL;
    for (const char *q = name; (q = strstr(q, ".tmp.")); q++)
        t = q;
    if (!t)
        return 0;
    char *end;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || (*end == '.' && (strtoul(end + 1, &end, 10), *end)) || *end)
        return 0;
    char p[4400];
    struct stat st;
    feeder__fmt(p, sizeof(p), "%s/%s.meta", dir, name);
    if (lstat(p, &st) == 0)
        return 0; /* a cached shard whose URL's name ends so, not a temporary file */
    feeder__fmt(p, sizeof(p), "%s/%s", dir, name);
    if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    time_t age = now - st.st_mtime;
    int dead = pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
    return age > 600 || (dead && age > 60);
}

static void sweep_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        if (stale_tmp(dir, e->d_name, now))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* ---- the retry budget: one round of retries per shard ---- */

/* A shard whose download failed (after its retries) is not fetched again
 * for a dataset opened before that failure: in this process the record is
 * in c->fails, across processes (the loader's workers, other loaders on the
 * machine) it is "<data>.failed" beside the copy, "RC PID" then the
 * message; a newer open, or a successful download, starts afresh. */
static int budget_spent(int rc, long pid, const char *url, const char *why, char *err,
                        size_t errlen)
{
    feeder__fmt(err, errlen, "%s: not fetched again: its download failed (pid %ld) since the "
                "dataset was opened, and a shard gets one round of FEEDER_REMOTE_RETRIES "
                "(open the dataset again to retry): %s", url, pid, why);
    return rc;
}

static int failed_before(const feeder__cache *c, const char *url, const char *data, char *err,
                         size_t errlen)
{
    const struct feeder__cache_fails *f = c->fails;
    uint64_t key = fnv1a(url) | 1;
    unsigned n = f ? atomic_load(&f->n) : 0;
    for (unsigned i = 0; i < n && i < FAILS_MAX; i++)
        if (atomic_load_explicit(&f->r[i].key, memory_order_acquire) == key)
            return budget_spent(f->r[i].rc, (long)getpid(), url, f->r[i].msg, err, errlen);
    char mark[4200], buf[512];
    feeder__fmt(mark, sizeof(mark), "%s.failed", data);
    int fd = open(mark, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return 0;
    long got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
                   ? feeder__pread_full(fd, 0, buf, sizeof(buf) - 1) : -1;
    close(fd);
    uint64_t when = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    if (got <= 0 || when < c->opened_ns)
        return 0;
    buf[got] = 0;
    int rc;
    long pid;
    int used = 0;
    if (sscanf(buf, "%d %ld %n", &rc, &pid, &used) < 2 || !used ||
        (rc != FEEDER_EREMOTE && rc != FEEDER_ECHECKSUM))
        return 0;
    return budget_spent(rc, pid, url, buf + used, err, errlen);
}

/* The server's failures (not this machine's: a full disk, a lock wait),
 * recorded under the shard's exclusive lock. */
static void remember_failure(feeder__cache *c, const char *url, const char *data, int rc,
                             const char *msg)
{
    struct feeder__cache_fails *f = c->fails;
    if (rc != FEEDER_EREMOTE && rc != FEEDER_ECHECKSUM)
        return;
    const char *m = strncmp(msg, url, strlen(url)) ? msg : msg + strlen(url);
    m += !strncmp(m, ": ", 2) ? 2 : 0; /* the URL is named once, by budget_spent */
    unsigned i = f ? atomic_fetch_add(&f->n, 1) : FAILS_MAX;
    if (i < FAILS_MAX) {
        f->r[i].rc = rc;
        feeder__fmt(f->r[i].msg, sizeof(f->r[i].msg), "%s", m);
        atomic_store_explicit(&f->r[i].key, fnv1a(url) | 1, memory_order_release);
    }
    static _Atomic unsigned seq;
    char mark[4200], tmp[4300];
    feeder__fmt(mark, sizeof(mark), "%s.failed", data);
    feeder__fmt(tmp, sizeof(tmp), "%s.tmp.%ld.%u", mark, (long)getpid(), seq++);
    int fd = open(tmp, O_WRONLY | CREATE_FLAGS, 0600);
    if (fd < 0)
        return; /* this process still remembers it */
    char line[600];
    int len = snprintf(line, sizeof(line), "%d %ld %s", rc, (long)getpid(), m);
    len = len < (int)sizeof(line) ? len : (int)sizeof(line) - 1;
    int ok = write(fd, line, (size_t)len) == len;
    if (close(fd) != 0 || !ok || rename(tmp, mark) != 0)
        unlink(tmp);
}

/* ---- a download in progress, as its readers see it ---- */

/* "<data>.progress", beside the partial copy, made under the exclusive
 * lock and mapped shared by every process that reads the shard while it
 * arrives: the shard comes in chunks, each written in order from its
 * start, and chunk i's arrived bytes are raised as they reach the file.
 * A reader of bytes [a, b) waits until every chunk they touch has come as
 * far; the partial file already has the shard's size (preallocated), so
 * a mapping of it never faults. Made under a temporary name and renamed,
 * so a reader never sees half a record. */
enum { PROG_RUNNING = 0, PROG_DONE = 1, PROG_FAILED = 2, PROG_ABANDONED = 3 };
enum { PROG_CHUNKS_MAX = 4096 };
#define PROG_MAGIC 0x676f727072656466ull

struct feeder__progress {
    _Atomic uint64_t magic; /* PROG_MAGIC once the rest is written */
    _Atomic int state;
    int rc;                 /* PROG_FAILED: the download's error, and its message */
    int64_t pid;            /* the downloading process */
    uint64_t size, chunk;   /* the shard's bytes; each chunk's (the last: what is left) */
    uint32_t nchunks;
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
                                     size_t *len)
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
    int fd, lock_fd;          /* lock_fd: a thread's, held exclusively; else -1 */
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
        l->r[l->n++] = (feeder__request){.target = &d->t, .first = a, .last = b, .fd = d->fd,
                                         .fd_off = a, .sized = 1, .cap = (size_t)(b - a + 1),
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

/* The partial copy, of the shard's size from the start when it is known
 * (a full disk shows before any byte is fetched, and its readers' mappings
 * never reach past its end), and the progress record. */
static int dl_begin(dl *d, char *err, size_t errlen)
{
    static _Atomic unsigned seq;
    feeder__fmt(d->tmp, sizeof(d->tmp), "%s.tmp.%ld.%u", d->data, (long)getpid(), seq++);
    d->fd = open(d->tmp, O_RDWR | CREATE_FLAGS, 0600);
    if (d->fd < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: cannot create %s in the shard cache: %s", d->t.url, d->tmp,
                    strerror(e));
        return -e;
    }
    if (!d->has_expect || !d->expect.size)
        return 0;
    int rc = fallocate(d->fd, 0, 0, (off_t)d->expect.size) < 0 ? errno : 0;
    if (rc == EOPNOTSUPP && ftruncate(d->fd, (off_t)d->expect.size) < 0)
        rc = errno; /* a file system without fallocate: a sparse file of that size */
    else if (rc == EOPNOTSUPP)
        rc = 0;
    if (rc) {
        if (rc == ENOSPC || rc == EFBIG || rc == EDQUOT)
            feeder__fmt(err, errlen, "%s: the shard cache %s is full (%s); the partial download "
                        "was removed", d->t.url, d->c->dir, strerror(rc));
        else
            feeder__fmt(err, errlen, "%s: sizing %s: %s", d->t.url, d->tmp, strerror(rc));
        close(d->fd);
        d->fd = -1;
        unlink(d->tmp);
        return -rc;
    }
    d->prog = prog_create(d->data, d->tmp, &d->expect, chunk_for(&d->c->cfg, d->expect.size),
                          &d->prog_len);
    if (!d->prog) {
        int e = errno ? errno : ENOMEM;
        feeder__fmt(err, errlen, "%s: cannot create its progress record in the shard cache "
                    "%s: %s", d->t.url, d->c->dir, strerror(e));
        close(d->fd);
        d->fd = -1;
        unlink(d->tmp);
        return -e;
    }
    return 0;
}

/* The transfers, their checks, then .meta and the rename (or the partial
 * copy removed), the outcome told to the readers and, for a server's
 * failure, recorded. */
static int dl_run(dl *d, char *err, size_t errlen)
{
    const feeder__remote_meta *expect = d->has_expect ? &d->expect : NULL;
    feeder__request r = {.target = &d->t, .last = UINT64_MAX, .fd = d->fd};
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
    if (!rc && !meta_matches(expect, &r.meta)) {
        feeder__fmt(err, errlen, "%s: the shard changed on the server: %llu bytes (ETag %s) "
                    "when it was opened, %llu bytes (ETag %s) now", d->t.url, ULL(expect->size),
                    expect->etag[0] ? expect->etag : "none", ULL(r.meta.size),
                    r.meta.etag[0] ? r.meta.etag : "none");
        rc = FEEDER_ECHECKSUM;
    }
    char meta[4300];
    feeder__fmt(meta, sizeof(meta), "%s.meta", d->data);
    if (!rc && (rc = meta_write(meta, d->t.url, &r.meta)) != 0)
        feeder__fmt(err, errlen, "%s: writing %s: %s", d->t.url, meta, strerror(-rc));
    if (!rc && rename(d->tmp, d->data) < 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "%s: renaming %s: %s", d->t.url, d->tmp, strerror(-rc));
        unlink(meta);
    }
    close(d->fd);
    d->fd = -1;
    if (rc)
        unlink(d->tmp);
    prog_finish(d->data, d->prog, d->prog_len, rc, err);
    d->prog = NULL;
    char mark[4300];
    feeder__fmt(mark, sizeof(mark), "%s.failed", d->data);
    if (rc) {
        remember_failure(d->c, d->t.url, d->data, rc, err);
    } else {
        unlink(mark);
        /* Again now that it is in: a copy whose readers let it go while it
         * was still arriving, or one that landed meanwhile, may be over the
         * limit, since readers no longer wait for the rename. */
        evict(d->c, 0, d->data);
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

void feeder__remote_settle(void)
{
    dl *d = atomic_exchange(&dls_head, NULL);
    while (d) {
        dl *next = d->next;
        if (d->pid == getpid())
            pthread_join(d->th, NULL); /* else a parent's thread: only its memory is here */
        feeder__target_free(&d->t);
        free(d);
        d = next;
    }
}

/* Under the exclusive lock: the cached copy if another process fetched it
 * meanwhile, else a download: here, or, for a reader that streams it
 * (`stream`, with a known size), on a thread of its own that takes the lock
 * over; `out` is then the partial copy and its progress (feeder__shard_wait). */
static int fetch_locked(feeder__cache *c, const feeder__target *t, const char *data,
                        const feeder__remote_meta *expect, int stream, feeder__shard *out,
                        char *err, size_t errlen)
{
    if (cached_open(data, t->url, expect, out) == 0)
        return 0;
    sweep_tmp(c->dir);
    evict(c, expect ? expect->size : 0, data);
    int rc = failed_before(c, t->url, data, err, errlen); /* while this one waited */
    if (rc)
        return rc;
    dl *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    *d = (dl){.c = c, .fd = -1, .lock_fd = -1, .has_expect = expect != NULL, .pid = getpid()};
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
    if (cached_open(data, t->url, NULL, out) < 0) {
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
static int stream_join(const char *data, const feeder__remote_meta *expect, feeder__shard *out)
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
             prog_bytes(g->nchunks) <= len && memchr(g->tmp, 0, sizeof(g->tmp)) &&
             !strchr(g->tmp, '/') && g->tmp[0] && memchr(g->etag, 0, sizeof(g->etag)) &&
             (!expect->etag[0] || !g->etag[0] || !strcmp(expect->etag, g->etag));
    const char *slash = strrchr(data, '/');
    int dfd = -1;
    if (ok) {
        feeder__fmt(p, sizeof(p), "%.*s%s", slash ? (int)(slash - data + 1) : 0, data, g->tmp);
        dfd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ok = dfd >= 0 && fstat(dfd, &st) == 0 && S_ISREG(st.st_mode) &&
             (uint64_t)st.st_size == g->size;
    }
    if (!ok) {
        if (dfd >= 0)
            close(dfd);
        munmap(g, len);
        return -1;
    }
    if (out->lock_fd >= 0)
        close(out->lock_fd); /* a reader of a partial copy holds no lock (shard_wait) */
    out->lock_fd = -1;
    out->fd = dfd;
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
                      const feeder__remote_meta *expect, int stream, feeder__shard *out,
                      char *err, size_t errlen)
{
    uint64_t end = feeder__now_ns() + (uint64_t)c->lock_timeout_ms * 1000000ull;
    char lock[4300];
    feeder__fmt(lock, sizeof(lock), "%s.lock", data);
    for (;;) {
        if (flock(out->lock_fd, LOCK_SH | LOCK_NB) == 0) {
            if (cached_open(data, t->url, expect, out) == 0)
                return 0;
            flock(out->lock_fd, LOCK_UN);
        }
        if (flock(out->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            int rc = fetch_locked(c, t, data, expect, stream, out, err, errlen);
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
        if (stream && expect && expect->size && stream_join(data, expect, out) == 0)
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

static int get(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
               int stream, feeder__shard *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->fd = out->lock_fd = -1;
    out->wait_ms = c->lock_timeout_ms;
    feeder__cache_name(c->dir, url, out->path, sizeof(out->path));
    int rc = failed_before(c, url, out->path, err, errlen);
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
        rc = get_locked(c, &t, out->path, expect, stream, out, err, errlen);
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
    return get(c, url, expect, 0, out, err, errlen);
}

int feeder__cache_get_stream(feeder__cache *c, const char *url,
                             const feeder__remote_meta *expect, feeder__shard *out, char *err,
                             size_t errlen)
{
    return get(c, url, expect, 1, out, err, errlen);
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
