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
 * opened through a link. A download itself, and reading a shard while it
 * arrives, are download.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

#include "remote/cache.h"

#define ULL(x) ((unsigned long long)(x))


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
        free(c->dir); /* nothing downloads into it yet: no feeder__cache_close */
        c->dir = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* ---- a copy's files: one, or stripes ---- */

void feeder__stripe_name(const char *base, uint32_t j, char *out, size_t len)
{
    feeder__fmt(out, len, "%s.s%u", base, j);
}

void feeder__cache_unlink_stripes(const char *base, uint32_t from)
{
    for (uint32_t j = from ? from : 1; j < FEEDER__STRIPES_MAX; j++) {
        char p[4300];
        feeder__stripe_name(base, j, p, sizeof(p));
        unlink(p);
    }
}

uint64_t feeder__stripe_bytes(uint64_t size, uint64_t chunk, uint32_t n, uint32_t j)
{
    if (n <= 1)
        return j ? 0 : size;
    uint64_t m = (size + chunk - 1) / chunk; /* chunks; the last may be short */
    if (j >= m)
        return 0;
    uint64_t mine = (m - 1 - j) / n + 1;
    uint64_t bytes = mine * chunk;
    if ((m - 1) % n == j)
        bytes -= m * chunk - size; /* the short last chunk is this stripe's */
    return bytes;
}

long long feeder__cache_copy_bytes(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    long long n = (long long)st.st_size;
    for (uint32_t j = 1; j < FEEDER__STRIPES_MAX; j++) {
        char p[4300];
        feeder__stripe_name(path, j, p, sizeof(p));
        if (stat(p, &st) < 0)
            break;
        n += (long long)st.st_size;
    }
    return n;
}

/* Where byte `off` of a striped copy lies: its stripe, its offset there,
 * and how many bytes from it on are in the same chunk. */
static int stripe_at(const feeder__shard *s, uint64_t off, uint64_t *at, uint64_t *run)
{
    uint64_t i = off / s->stripe_chunk, in = off % s->stripe_chunk;
    *at = i / s->stripes * s->stripe_chunk + in;
    *run = s->stripe_chunk - in;
    uint32_t j = (uint32_t)(i % s->stripes);
    return j ? s->stripe_fd[j - 1] : s->fd;
}

int feeder__shard_map(const feeder__shard *s, void *at, uint64_t len)
{
    if (s->stripes <= 1)
        return len && mmap(at, (size_t)len, PROT_READ, MAP_SHARED | MAP_FIXED, s->fd, 0) ==
                          MAP_FAILED ? -errno : 0;
    for (uint64_t off = 0; off < len;) {
        uint64_t where, run;
        int fd = stripe_at(s, off, &where, &run);
        size_t n = (size_t)(run < len - off ? run : len - off);
        if (mmap((uint8_t *)at + off, n, PROT_READ, MAP_SHARED | MAP_FIXED, fd,
                 (off_t)where) == MAP_FAILED)
            return -errno;
        off += n;
    }
    return 0;
}

long feeder__shard_pread(const feeder__shard *s, uint64_t off, void *dst, size_t len)
{
    if (s->stripes <= 1)
        return feeder__pread_full(s->fd, off, dst, len);
    size_t done = 0;
    while (done < len) {
        uint64_t where, run;
        int fd = stripe_at(s, off + done, &where, &run);
        size_t n = (size_t)(run < len - done ? run : len - done);
        long got = feeder__pread_full(fd, where, (uint8_t *)dst + done, n);
        if (got < 0)
            return got;
        done += (size_t)got;
        if ((size_t)got < n)
            break; /* the copy's end */
    }
    return (long)done;
}

void feeder__shard_close_files(feeder__shard *s)
{
    if (s->fd >= 0)
        close(s->fd);
    for (uint32_t j = 1; j < s->stripes; j++)
        if (s->stripe_fd[j - 1] >= 0)
            close(s->stripe_fd[j - 1]);
    s->fd = -1;
    s->stripes = 1;
}

void feeder__shard_release(feeder__shard *s)
{
    if (!s)
        return;
    feeder__shard_close_files(s);
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
    long n = feeder__shard_pread(s, 0, got, len);
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

void feeder__cache_name(const char *dir, const char *url, unsigned flags, char *out,
                        size_t outlen)
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
    uint64_t h = fnv1a(url);
    if (flags & FEEDER__GET_STRIPED) /* a mapped reader's copy, kept apart */
        h = (h ^ 0x5f) * 0x100000001b3ull;
    feeder__fmt(out, outlen, "%s/%016llx-%s", dir, ULL(h), clean);
}

/* ---- the .meta file ---- */

static int meta_read(const char *path, const char *url, feeder__remote_meta *m,
                     uint32_t *stripes, uint64_t *chunk)
{
    *stripes = 1;
    *chunk = 0;
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
        else if (!strncmp(line, "stripes ", 8) &&
                 sscanf(line + 8, "%u %" SCNu64, stripes, chunk) != 2)
            *stripes = 0; /* unreadable: no copy */
    }
    if (*stripes > 1 && (*stripes > FEEDER__STRIPES_MAX || !*chunk ||
                         *chunk % (uint64_t)sysconf(_SC_PAGESIZE)))
        *stripes = 0;
    fclose(f);
    return strcmp(got_url, url) || !*stripes ? -1 : 0;
}

int feeder__cache_meta_write(const char *path, const char *url, const feeder__remote_meta *m,
                             uint32_t stripes, uint64_t chunk)
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
    if (stripes > 1)
        fprintf(f, "stripes %u %llu\n", stripes, ULL(chunk));
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
int feeder__cache_meta_matches(const feeder__remote_meta *expect, const feeder__remote_meta *m)
{
    if (!expect)
        return 1;
    if (expect->size != m->size)
        return 0;
    return !expect->etag[0] || !m->etag[0] || !strcmp(expect->etag, m->etag);
}

/* A regular file of `size` bytes, opened read-only, or -1. */
static int open_sized(const char *path, uint64_t size)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int feeder__stripes_open(const char *base, uint64_t size, uint64_t chunk, uint32_t n,
                         feeder__shard *s)
{
    s->fd = open_sized(base, feeder__stripe_bytes(size, chunk, n, 0));
    s->stripes = 1;
    s->stripe_chunk = chunk;
    for (uint32_t j = 1; s->fd >= 0 && j < n; j++, s->stripes++) {
        char p[4400];
        feeder__stripe_name(base, j, p, sizeof(p));
        if ((s->stripe_fd[j - 1] = open_sized(p, feeder__stripe_bytes(size, chunk, n, j))) < 0)
            break;
    }
    if (s->fd < 0 || s->stripes != n) {
        feeder__shard_close_files(s);
        return -1;
    }
    return 0;
}

int feeder__cache_open_copy(const char *data, const char *url, const feeder__remote_meta *expect,
                            int striped_ok, feeder__shard *out)
{
    char meta[4200];
    feeder__fmt(meta, sizeof(meta), "%s.meta", data);
    feeder__remote_meta m;
    uint32_t n;
    uint64_t chunk;
    if (meta_read(meta, url, &m, &n, &chunk) < 0 || !feeder__cache_meta_matches(expect, &m) ||
        (n > 1 && !striped_ok))
        return -1;
    if (feeder__stripes_open(data, m.size, chunk, n, out) < 0)
        return -1;
    out->size = m.size;
    out->meta = m;
    return 0;
}

/* The whole copy of `url` of the kind `flags` names, opened with no lock
 * and no server: 0, or -ENOENT. */
static int open_whole(const feeder__cache *c, const char *url, unsigned flags, feeder__shard *s)
{
    *s = (feeder__shard){.fd = -1, .lock_fd = -1};
    feeder__cache_name(c->dir, url, flags, s->path, sizeof(s->path));
    return feeder__cache_open_copy(s->path, url, NULL, (flags & FEEDER__GET_STRIPED) != 0, s) < 0
               ? -ENOENT : 0;
}

int feeder__cache_lookup(const feeder__cache *c, const char *url, unsigned flags,
                         feeder__remote_meta *out)
{
    feeder__shard s;
    if (open_whole(c, url, flags, &s) < 0)
        return -ENOENT;
    *out = s.meta;
    feeder__shard_close_files(&s);
    return 0;
}

long feeder__cache_peek(const feeder__cache *c, const char *url, unsigned flags, uint64_t off,
                        void *dst, size_t len)
{
    feeder__shard s;
    if (open_whole(c, url, flags, &s) < 0)
        return -ENOENT;
    long got = feeder__shard_pread(&s, off, dst, len);
    feeder__shard_close_files(&s);
    return got;
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
        long long bytes = feeder__cache_copy_bytes(p); /* a striped copy's every file */
        if (bytes < 0 || stat(p, &st) < 0)
            continue;
        uint64_t size = (uint64_t)bytes;
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
        (*out)[n].size = size;
        (*out)[n].used = lk.st_mtim;
        *total += size;
        n++;
    }
    closedir(d);
    return n;
}

/* Remove least recently used shards nobody holds until `need` more bytes
 * fit under the limit (or nothing more can go). */
void feeder__cache_evict(const feeder__cache *c, uint64_t need, const char *keep)
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
        feeder__cache_unlink_stripes(p, 1);
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
    if (end == t + 5)
        return 0;
    if (*end == '.' && end[1] >= '0' && end[1] <= '9')
        strtoul(end + 1, &end, 10);
    if (*end == '.' && end[1] == 's') /* a partial copy's stripe: "NAME.tmp.PID.N.sJ" */
        strtoul(end + 2, &end, 10);
    if (*end)
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

/* A landed stripe ("NAME.sJ") of no whole copy: eviction or a landing cut
 * by a crash between its unlinks or renames leaves one, and the size limit
 * counts only whole copies. NAME or its .meta gone marks it; then, under an
 * exclusive lock on NAME's lock file (no download lands NAME meanwhile, no
 * reader holds it), it is looked at again and removed. A stripe past the
 * count of a copy that is there is left: the copy's next landing removes
 * it. */
static void sweep_orphan_stripe(int dfd, const char *dir, const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot[1] != 's' || dot[2] < '1' || dot[2] >= '0' + FEEDER__STRIPES_MAX || dot[3] ||
        strstr(name, ".tmp."))
        return;
    char base[4400], meta[4500], p[4500];
    struct stat st;
    feeder__fmt(p, sizeof(p), "%s/%s.meta", dir, name);
    if (lstat(p, &st) == 0)
        return; /* a cached shard whose URL's name ends so */
    feeder__fmt(base, sizeof(base), "%s/%.*s", dir, (int)(dot - name), name);
    feeder__fmt(meta, sizeof(meta), "%s.meta", base);
    if (lstat(base, &st) == 0 && lstat(meta, &st) == 0)
        return; /* the common case: a stripe of a whole copy, no lock taken */
    feeder__fmt(p, sizeof(p), "%s.lock", base);
    int fd = open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return; /* no copy of this cache's was ever there */
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && (lstat(base, &st) < 0 || lstat(meta, &st) < 0))
        unlinkat(dfd, name, 0); /* still so under the lock */
    close(fd); /* drops the lock; lock files stay (eviction says why) */
}

void feeder__cache_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (stale_tmp(dir, e->d_name, now))
            unlinkat(dirfd(d), e->d_name, 0);
        else
            sweep_orphan_stripe(dirfd(d), dir, e->d_name);
    }
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

int feeder__cache_failed_before(const feeder__cache *c, const char *url, const char *data,
                                char *err, size_t errlen)
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
void feeder__cache_remember_failure(feeder__cache *c, const char *url, const char *data, int rc,
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
