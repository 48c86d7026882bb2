/*
 * soak: run loaders for a while under faults and check that nothing is lost.
 *
 *   soak [--seconds S | --minutes M] [--workers W] [--images N] [--data DIR]
 *        [--kill-every K] [--corrupt-every C] [--recreate-every R] [--stall-every S]
 *        [--remote-every E] [--seed X]
 *
 * A folder of JPEGs is made (or DIR's JPEGs copied) in a temporary folder.
 * The reference is computed first on the clean copy: for each of 4 epochs,
 * the order and every sample's hash. Then loaders (train pipeline, shuffle,
 * skip policy, MAX_RESTARTS 1000) run epoch after epoch while, every few
 * batches:
 *   - a random worker is SIGKILLed (the loader restarts it);
 *   - a random file is replaced by bytes that are not a JPEG, and the last
 *     one restored (atomically, by rename);
 *   - the loader's state is saved, the loader destroyed with batches in
 *     flight, and a new one (random num_workers 0..W) resumes from the state;
 *     every other new loader is made and started by a short-lived thread that
 *     ends at once (its workers must outlive it: PR_SET_PDEATHSIG is bound to
 *     the forking thread), and its workers are checked alive afterwards;
 *   - a random worker is stopped (SIGSTOP): the loader, with TIMEOUT_MS 1000
 *     and MAX_RESTARTS, must kill it, start another and redo its parts.
 * Every delivered batch is checked: a batch with no skipped sample must hash
 * to the reference batch; in one with skips, every sample must be its
 * reference sample, or, where the original was corrupted at the time,
 * another sample of its class (the skip policy's rule, include/feeder.h). Every position of every epoch must be
 * delivered exactly once, across kills and recreations. RSS, open
 * descriptors and /dev/shm entries are printed at start and end and must not
 * grow (RSS by at most 16 MiB; under ASan set quarantine_size_mb=0, or its
 * quarantine alone grows RSS by design).
 * Every E epochs (8; 0: never) the same images come over HTTP: a server
 * thread of this process on 127.0.0.1 serves them as 3 WebDataset tar
 * shards, and one epoch of a loader over their URLs (random workers, one
 * killed every K batches; the cache emptied, or its shard copies removed
 * so the workers download them, or left) must equal the reference exactly.
 * Then two shards of the same server under hostile paths are opened (in
 * turn: a stall mid-body, an endless body, a body cut short, a redirect
 * loop, a new ETag, a Content-Length 1 GB too long, 503s, a redirect to
 * file://): each must fail with its own error naming the URL within the
 * deadlines (FEEDER_REMOTE_TIMEOUT_S 4, one retry), and leave in the
 * cache folder no temporary file and nothing larger than a shard, and
 * nothing outside it.
 * After the last loader no child process may be left (leaked or zombie).
 * Exit 0 when every check held.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "benchutil.h"
#include "feeder.h"

#define EPOCHS 4
#define BATCH 8
#define H 48
#define W 64
#define REMOTE_TIMEOUT_S 4 /* FEEDER_REMOTE_TIMEOUT_S: one request's deadline */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soak: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static long count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct {
    long rss, fds, shm, refs;
} reading;

/* Lines of this process's maps and fds that name /dev/shm: the slots are a
 * memfd, so there must be none. (/dev/shm itself is shared with every other
 * process on the machine, so its entry count is printed, not compared.) */
static long shm_refs(void)
{
    long n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4300];
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, "/dev/shm/") != NULL;
    if (f)
        fclose(f);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[300], t[4200];
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, t, sizeof(t) - 1);
        if (k > 0) {
            t[k] = 0;
            n += strncmp(t, "/dev/shm/", 9) == 0;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static reading measure(void)
{
    return (reading){rss_kib(), count_dir("/proc/self/fd") - 1, count_dir("/dev/shm"), shm_refs()};
}

/* TIMEOUT_MS of every loader: short when workers are stopped on purpose. */
static int64_t timeout_ms = 60000;

/* Every other loader keeps its workers between epochs (and begins the next
 * epoch early); persistent_made says what the last one made does. */
static int loaders_made, persistent_made;

static feeder_loader *make_loader(feeder_dataset *ds, int workers, uint64_t seed)
{
    feeder_loader *ld;
    persistent_made = loaders_made++ % 2 == 0;
    if (feeder_loader_create(ds, NULL, &ld))
        die("feeder_loader_create failed");
    feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, BATCH);
    feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers);
    feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1);
    feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)seed);
    feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN);
    feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_SKIP);
    feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 1000);
    feeder_loader_set(ld, FEEDER_OPT_HEIGHT, H);
    feeder_loader_set(ld, FEEDER_OPT_WIDTH, W);
    feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, timeout_ms);
    feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, persistent_made);
    return ld;
}

/* The reference: per epoch, the order and each sample's hash by index. */
typedef struct {
    uint64_t n, nbatches;
    uint64_t *order[EPOCHS];
    uint64_t *sample[EPOCHS];
} ref;

static uint64_t sample_hash(const feeder_batch *b, uint32_t i)
{
    uint64_t h = bu_hash64(0, b->data + (size_t)i * b->sample_bytes, b->sample_bytes);
    h = bu_hash64(h, &b->labels[i], sizeof(int64_t));
    return bu_hash64(h, &b->indices[i], sizeof(uint64_t));
}

static void make_reference(feeder_dataset *ds, uint64_t seed, ref *r)
{
    r->n = feeder_dataset_size(ds);
    r->nbatches = (r->n + BATCH - 1) / BATCH;
    feeder_loader *ld = make_loader(ds, 2, seed);
    feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_FAIL);
    for (int e = 0; e < EPOCHS; e++) {
        r->order[e] = calloc(r->n, sizeof(uint64_t));
        r->sample[e] = calloc(r->n, sizeof(uint64_t));
        feeder_batch *b;
        int rc;
        uint64_t pos = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            for (uint32_t i = 0; i < b->count; i++, pos++) {
                r->order[e][pos] = b->indices[i];
                r->sample[e][b->indices[i]] = sample_hash(b, i);
            }
            feeder_batch_release(b, NULL);
        }
        if (rc != FEEDER_DONE || pos != r->n)
            die("reference epoch %d: %s: %s", e, feeder_strerror(rc), feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
}

/* ---- files ---- */

typedef struct {
    char **paths;
    uint8_t **orig;
    size_t *len;
    uint64_t n;
    int64_t corrupted; /* index now corrupted, or -1 */
    uint64_t *bad_since; /* per index: how many corruptions touched it this epoch */
    uint64_t *bad_before; /* the same for the epoch before: a persistent loader reads the
                             next epoch's first batches while this one ends */
    char tmp[4200];
} files;

static void put_file(files *f, uint64_t i, const void *data, size_t len)
{
    snprintf(f->tmp, sizeof(f->tmp), "%s.soak-tmp", f->paths[i]);
    if (bu_write_file(f->tmp, data, len) != 0 || rename(f->tmp, f->paths[i]) != 0)
        die("rewriting %s: %s", f->paths[i], strerror(errno));
}

static void corrupt(files *f, uint64_t i)
{
    static const char junk[] = "this file was corrupted by soak; it is not a JPEG\n";
    put_file(f, i, junk, sizeof(junk) - 1);
    f->corrupted = (int64_t)i;
    f->bad_since[i]++;
}

static void restore(files *f)
{
    if (f->corrupted >= 0)
        put_file(f, (uint64_t)f->corrupted, f->orig[f->corrupted], f->len[f->corrupted]);
    f->corrupted = -1;
}

/* ---- remote shards from a server thread on 127.0.0.1 ---- */

/* The soak's images as WebDataset tar shards (sample i of the folder is
 * member pair i: "%06d.jpg" with its bytes, "%06d.cls" with its label),
 * served by a thread of this process. At /good/ the server is honest
 * (Range, Content-Length, ETag, no .idx); under the hostile paths it
 * answers range requests honestly and misbehaves on the whole-shard GET. */
enum { NSHARDS = 3, HANG_S = 10 };

typedef struct web_file {
    uint8_t *p;
    size_t n;
} web_file;

static struct {
    int lfd, port;
    web_file shard[NSHARDS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active; /* connections not yet closed */
} web = {.lfd = -1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void tar_add(web_file *t, const char *name, const void *data, size_t len)
{
    size_t at = t->n, padded = (len + 511) / 512 * 512;
    if (!(t->p = realloc(t->p, at + 512 + padded)))
        die("out of memory");
    memset(t->p + at, 0, 512 + padded);
    char *h = (char *)t->p + at;
    snprintf(h, 100, "%s", name);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf(h + 124, 12, "%011llo", (unsigned long long)len);
    snprintf(h + 136, 12, "%011o", 0);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (uint8_t)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    memcpy(t->p + at + 512, data, len);
    t->n = at + 512 + padded;
}

static void make_shards(const files *f, const feeder_dataset *ds)
{
    for (uint64_t i = 0; i < f->n; i++) {
        web_file *t = &web.shard[i * NSHARDS / f->n];
        char name[32], cls[32];
        snprintf(name, sizeof(name), "%06llu.jpg", (unsigned long long)i);
        tar_add(t, name, f->orig[i], f->len[i]);
        snprintf(name, sizeof(name), "%06llu.cls", (unsigned long long)i);
        int n = snprintf(cls, sizeof(cls), "%lld", (long long)feeder_dataset_label(ds, i));
        tar_add(t, name, cls, (size_t)n);
    }
    for (int s = 0; s < NSHARDS; s++) {
        web_file *t = &web.shard[s];
        if (!(t->p = realloc(t->p, t->n + 1024)))
            die("out of memory");
        memset(t->p + t->n, 0, 1024); /* the two zero blocks that end an archive */
        t->n += 1024;
    }
}

static int send_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

static int sendf(int fd, const char *fmt, ...)
{
    char s[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s, sizeof(s), fmt, ap);
    va_end(ap);
    return send_all(fd, s, (size_t)n);
}

/* Until the client goes (or HANG_S): a stalled response. */
static void hold(int fd)
{
    uint64_t end = bu_now_ns() + HANG_S * 1000000000ull;
    char b[512];
    while (bu_now_ns() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) > 0 && recv(fd, b, sizeof(b), 0) <= 0)
            return;
    }
}

/* Zeros until the client goes (or HANG_S): an endless body. */
static void zeros(int fd)
{
    static const uint8_t z[16384];
    uint64_t end = bu_now_ns() + HANG_S * 1000000000ull;
    while (bu_now_ns() < end && send_all(fd, z, sizeof(z)) == 0)
        ;
}

static void answer(int fd, const char *mode, const char *name, const char *head)
{
    const char *close_hdr = "Connection: close\r\n";
    if (!strcmp(mode, "loop")) {
        const char *q = strstr(name, "?n=");
        int n = q ? atoi(q + 3) + 1 : 1;
        sendf(fd, "HTTP/1.1 302 Found\r\nLocation: /loop/s-0.tar?n=%d\r\nContent-Length: 0\r\n%s\r\n",
              n, close_hdr);
        return;
    }
    if (!strcmp(mode, "to-file")) {
        sendf(fd, "HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n"
                  "%s\r\n", close_hdr);
        return;
    }
    int s = -1;
    if (sscanf(name, "s-%d.tar", &s) != 1 || s < 0 || s >= NSHARDS || strchr(name, '?') ||
        strcmp(name + strlen(name) - 4, ".tar")) {
        sendf(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n%s\r\n", close_hdr);
        return;
    }
    const web_file *b = &web.shard[s];
    const char *range = strcasestr(head, "\r\nRange: bytes=");
    unsigned long long lo, hi;
    if (range && sscanf(range + 15, "%llu-%llu", &lo, &hi) == 2 && lo <= hi && lo < b->n) {
        hi = hi < b->n - 1 ? hi : b->n - 1;
        if (sendf(fd, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: "
                      "bytes %llu-%llu/%zu\r\nETag: \"soak-%d\"\r\n%s\r\n",
                  hi - lo + 1, lo, hi, b->n, s, close_hdr) == 0)
            send_all(fd, b->p + lo, (size_t)(hi - lo + 1));
        return;
    }
    if (!strcmp(mode, "fail")) {
        sendf(fd, "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n%s\r\n", close_hdr);
        return;
    }
    int good = !strcmp(mode, "good");
    size_t clen = !strcmp(mode, "biglen") ? b->n + 1000000000u : b->n;
    if (!strcmp(mode, "endless"))
        sendf(fd, "HTTP/1.1 200 OK\r\nETag: \"soak-%d\"\r\n%s\r\n", s, close_hdr);
    else
        sendf(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nETag: \"soak-%d%s\"\r\n%s\r\n",
              clen, s, !strcmp(mode, "etag") ? "-new" : "", close_hdr);
    int half = !strcmp(mode, "stall") || !strcmp(mode, "truncate");
    if (send_all(fd, b->p, half ? b->n / 2 : b->n) != 0 || good)
        return;
    if (!strcmp(mode, "stall"))
        hold(fd);
    else if (!strcmp(mode, "endless") || !strcmp(mode, "biglen"))
        zeros(fd);
}

static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char head[8192], mode[64], name[256];
    size_t got = 0;
    while (got + 1 < sizeof(head)) {
        ssize_t k = recv(fd, head + got, sizeof(head) - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        head[got] = 0;
        if (strstr(head, "\r\n\r\n"))
            break;
    }
    head[got] = 0;
    if (sscanf(head, "GET /%63[^/]/%255s HTTP/1.1", mode, name) == 2)
        answer(fd, mode, name, head);
    close(fd);
    pthread_mutex_lock(&web.mu);
    web.active--;
    pthread_cond_broadcast(&web.cv);
    pthread_mutex_unlock(&web.mu);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept4(web.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&web.mu);
        web.active++;
        pthread_mutex_unlock(&web.mu);
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, conn_main, (void *)(intptr_t)fd)) {
            close(fd);
            pthread_mutex_lock(&web.mu);
            web.active--;
            pthread_mutex_unlock(&web.mu);
        }
        pthread_attr_destroy(&a);
    }
    return NULL;
}

static void web_start(void)
{
    web.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (web.lfd < 0 || bind(web.lfd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(web.lfd, (struct sockaddr *)&a, &al) || listen(web.lfd, 64))
        die("server socket: %s", strerror(errno));
    web.port = ntohs(a.sin_port);
    pthread_t t;
    if (pthread_create(&t, NULL, accept_main, NULL) || pthread_detach(t))
        die("pthread_create failed");
}

/* Every connection answered and closed (a stalled one ends when libcurl
 * drops it, or after HANG_S). */
static void web_idle(void)
{
    pthread_mutex_lock(&web.mu);
    while (web.active)
        pthread_cond_wait(&web.cv, &web.mu);
    pthread_mutex_unlock(&web.mu);
}

/* ---- the cache folder ---- */

static char cache_dir[300], soak_dir[64];

/* Remove the cache's files whose name ends with one of `ends` (NULL: all). */
static void cache_remove(const char *const *ends)
{
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t n = strlen(e->d_name);
        int hit = !ends;
        for (int k = 0; ends && ends[k] && !hit; k++)
            hit = n >= strlen(ends[k]) && !strcmp(e->d_name + n - strlen(ends[k]), ends[k]);
        if (hit)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
}

/* After a remote round: no temporary file in the cache, no file there
 * larger than the largest shard, nothing new beside data/ and cache/. */
static void check_cache(const char *after)
{
    size_t most = 0;
    for (int s = 0; s < NSHARDS; s++)
        most = web.shard[s].n > most ? web.shard[s].n : most;
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[600];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", cache_dir, e->d_name);
        if (strstr(e->d_name, ".tmp."))
            die("%s: a temporary file is left in the cache: %s", after, p);
        if (lstat(p, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > most)
            die("%s: %s is not a regular file of at most %zu bytes", after, p, most);
    }
    if (d)
        closedir(d);
    d = opendir(soak_dir);
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && strcmp(e->d_name, "data") && strcmp(e->d_name, "cache"))
            die("%s: %s/%s was written outside the cache", after, soak_dir, e->d_name);
    if (d)
        closedir(d);
}

/* ---- remote rounds ---- */

typedef struct {
    uint64_t epochs, batches, samples, kills, worker_fetch, walked, hostile, max_ms;
    uint64_t by_mode[8];
} remote_counts;

/* One epoch of the good shards (epoch e of the reference), up to `workers`
 * workers (one is killed every kill_every batches): every batch must be
 * the reference's, exactly. Round k starts from an empty cache (open walks
 * the downloaded shards), from the indexes alone (the workers download the
 * shards, and the loader's fetch thread one shard ahead: the default
 * options), or from everything cached. */
static void remote_epoch(const ref *r, uint64_t seed, int workers, int kill_every, int e,
                         unsigned *rnd, remote_counts *rc)
{
    static const char *const copies[] = {".tar", ".tar.meta", NULL};
    int kind = (int)(rc->epochs % 3);
    if (kind == 0)
        cache_remove(NULL);
    char pat[128], err[512];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/good/s-{0..%d}.tar", web.port, NSHARDS - 1);
    feeder_dataset *ds;
    if (feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)))
        die("remote epoch: %s", err);
    if (feeder_dataset_size(ds) != r->n)
        die("remote epoch: %llu samples in %s, %llu in the folder",
            (unsigned long long)feeder_dataset_size(ds), pat, (unsigned long long)r->n);
    if (kind == 1)
        cache_remove(copies);
    int saved = persistent_made, w = (int)(rand_r(rnd) % (unsigned)(workers + 1));
    feeder_loader *ld = make_loader(ds, w, seed);
    persistent_made = saved;
    feeder_loader_set_epoch(ld, (uint64_t)e);
    feeder_batch *b;
    int rcode;
    uint64_t pos = 0, nb = 0;
    while ((rcode = feeder_next(ld, &b)) == 0) {
        if (b->skipped)
            die("remote epoch %d batch %llu: %u samples replaced", e,
                (unsigned long long)b->number, b->skipped);
        for (uint32_t i = 0; i < b->count; i++, pos++) {
            if (b->number * BATCH + i != pos || pos >= r->n || b->indices[i] != r->order[e][pos])
                die("remote epoch %d position %llu: index %llu, expected %llu", e,
                    (unsigned long long)pos, (unsigned long long)b->indices[i],
                    (unsigned long long)(pos < r->n ? r->order[e][pos] : 0));
            if (sample_hash(b, i) != r->sample[e][b->indices[i]])
                die("remote epoch %d position %llu (index %llu): bytes differ from the "
                    "reference", e, (unsigned long long)pos, (unsigned long long)b->indices[i]);
        }
        rc->samples += b->count;
        feeder_batch_release(b, NULL);
        if (++nb % (uint64_t)kill_every == 0 && w) {
            int pid = feeder_loader_worker_pid(ld, (int)(rand_r(rnd) % (unsigned)w));
            if (pid > 0 && kill(pid, SIGKILL) == 0)
                rc->kills++;
        }
    }
    if (rcode != FEEDER_DONE || pos != r->n)
        die("remote epoch %d: %s after %llu samples: %s", e, feeder_strerror(rcode),
            (unsigned long long)pos, feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    rc->epochs++;
    rc->batches += nb;
    rc->walked += kind == 0;
    rc->worker_fetch += kind == 1 && w;
    web_idle();
    check_cache("remote epoch");
}

/* A hostile server's shard: open must fail with the error this misbehaviour
 * earns, naming the URL, within the deadlines (each request's
 * FEEDER_REMOTE_TIMEOUT_S), and leave the cache clean. */
static const struct {
    const char *mode;
    int rc;
    const char *says[2]; /* either */
} hostile[] = {
    {"stall", FEEDER_EREMOTE, {"slower than FEEDER_REMOTE_LOW_SPEED", "FEEDER_REMOTE_TIMEOUT_S"}},
    {"endless", FEEDER_EREMOTE, {"the response runs past the ", NULL}},
    {"truncate", FEEDER_EREMOTE, {"bytes remaining to read (2 attempts)", NULL}},
    {"loop", FEEDER_EREMOTE, {"Maximum (10) redirects followed", NULL}},
    {"etag", FEEDER_ECHECKSUM, {"the shard changed on the server", NULL}},
    {"biglen", FEEDER_ECHECKSUM, {"bytes now (Content-Length)", NULL}},
    {"fail", FEEDER_EREMOTE, {"HTTP 503 (2 attempts)", NULL}},
    {"to-file", FEEDER_EREMOTE, {"not supported or disabled", NULL}},
};
enum { NHOSTILE = sizeof(hostile) / sizeof(hostile[0]) };

static void hostile_open(remote_counts *rc)
{
    int k = (int)(rc->hostile % NHOSTILE);
    char url[128], err[512] = "";
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/%s/s-0.tar", web.port, hostile[k].mode);
    feeder_dataset *ds = NULL;
    uint64_t t0 = bu_now_ns();
    int got = feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err));
    uint64_t ms = (bu_now_ns() - t0) / 1000000;
    if (got != hostile[k].rc || !strstr(err, url) ||
        !(strstr(err, hostile[k].says[0]) || (hostile[k].says[1] && strstr(err, hostile[k].says[1]))))
        die("hostile %s: %s (%s), expected %s: %s", hostile[k].mode, feeder_strerror(got),
            feeder_err_name(got), feeder_err_name(hostile[k].rc), err);
    if (ms > (uint64_t)(2 * REMOTE_TIMEOUT_S + 5) * 1000)
        die("hostile %s: open took %llu ms, past its deadlines", hostile[k].mode,
            (unsigned long long)ms);
    feeder_dataset_destroy(ds);
    if (!rc->by_mode[k]) /* what the user sees, once per kind */
        printf("soak: hostile %s: %s in %.1f s: %s\n", hostile[k].mode, feeder_err_name(got),
               (double)ms / 1e3, err);
    rc->max_ms = ms > rc->max_ms ? ms : rc->max_ms;
    rc->by_mode[k]++;
    rc->hostile++;
    web_idle();
    check_cache(hostile[k].mode);
}

/* ---- the run ---- */

typedef struct {
    uint64_t batches, samples, skipped, kills, corruptions, recreations, epochs, restarts, ahead;
    uint64_t errors, stalls, threaded;
} counts;

/* Is `pid` running (neither gone nor a zombie)? */
static int alive(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

/* Child processes of this process, zombies included (every thread's list). */
static long children(void)
{
    DIR *d = opendir("/proc/self/task");
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/self/task/%s/children", e->d_name);
        FILE *f = fopen(path, "r");
        int pid;
        while (f && fscanf(f, "%d", &pid) == 1)
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

/* A new loader resumed from a saved state, made and started by `make_in`. */
typedef struct {
    feeder_dataset *ds;
    int workers;
    uint64_t seed;
    const uint8_t *blob;
    size_t len;
    feeder_loader *ld;
} resumed;

static void *make_resumed(void *arg)
{
    resumed *m = arg;
    m->ld = make_loader(m->ds, m->workers, m->seed);
    if (feeder_loader_state_load(m->ld, m->blob, m->len))
        die("state load: %s", feeder_loader_errmsg(m->ld));
    int rc = feeder_loader_start(m->ld);
    if (rc)
        die("start: %s: %s", feeder_strerror(rc), feeder_loader_errmsg(m->ld));
    return NULL;
}

/* The resumed loader, made here or (threaded) by a thread that ends right
 * after starting it; then its workers must all still run. */
static feeder_loader *resume_loader(resumed *m, int threaded)
{
    if (!threaded) {
        make_resumed(m);
        return m->ld;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, make_resumed, m) || pthread_join(t, NULL))
        die("pthread_create/join failed");
    usleep(20000);
    for (int i = 0; i < m->workers; i++) {
        int pid = feeder_loader_worker_pid(m->ld, i);
        if (pid > 0 && !alive(pid))
            die("worker %d (pid %d) of a loader started by a thread died with the thread", i,
                pid);
    }
    return m->ld;
}

/* Stop a random worker; the loader must notice (TIMEOUT_MS) and replace it. */
static void stall_one(feeder_loader *ld, int workers, unsigned *rnd, counts *c)
{
    int pid = feeder_loader_worker_pid(ld, (int)(rand_r(rnd) % (unsigned)workers));
    if (pid > 0 && kill(pid, SIGSTOP) == 0)
        c->stalls++;
}

static void usage(void)
{
    fprintf(stderr, "usage: soak [--seconds S | --minutes M] [--workers W] [--images N] "
                    "[--data DIR] [--kill-every K] [--corrupt-every C] [--recreate-every R] "
                    "[--stall-every S (0: never)] [--remote-every E (0: never)] [--seed X]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double seconds = 30;
    int workers = 3, images = 240, kill_every = 5, corrupt_every = 7, recreate_every = 23;
    int stall_every = 97, remote_every = 8;
    uint64_t seed = 1;
    const char *data = NULL;
    static const struct option opts[] = {
        {"seconds", 1, 0, 's'}, {"minutes", 1, 0, 'm'}, {"workers", 1, 0, 'w'},
        {"images", 1, 0, 'n'}, {"data", 1, 0, 'd'}, {"kill-every", 1, 0, 'k'},
        {"corrupt-every", 1, 0, 'c'}, {"recreate-every", 1, 0, 'r'}, {"seed", 1, 0, 'x'},
        {"stall-every", 1, 0, 't'}, {"remote-every", 1, 0, 'e'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's': seconds = atof(optarg); break;
        case 'm': seconds = atof(optarg) * 60; break;
        case 'w': workers = atoi(optarg); break;
        case 'n': images = atoi(optarg); break;
        case 'd': data = optarg; break;
        case 'k': kill_every = atoi(optarg); break;
        case 'c': corrupt_every = atoi(optarg); break;
        case 'r': recreate_every = atoi(optarg); break;
        case 't': stall_every = atoi(optarg); break;
        case 'e': remote_every = atoi(optarg); break;
        case 'x': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (seconds <= 0 || workers < 1 || images < BATCH || kill_every < 1 || corrupt_every < 1 ||
        recreate_every < 1 || stall_every < 0 || remote_every < 0)
        usage();
    if (stall_every)
        timeout_ms = 1000;

    char dir[] = "/tmp/feeder-soak-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp: %s", strerror(errno));
    char root[256];
    snprintf(root, sizeof(root), "%s/data", dir);
    snprintf(soak_dir, sizeof(soak_dir), "%s", dir);
    snprintf(cache_dir, sizeof(cache_dir), "%s/cache", dir);
    if (mkdir(cache_dir, 0700))
        die("mkdir %s: %s", cache_dir, strerror(errno));
    /* Remote shards: this cache, and small limits, so a hostile server's
     * shard fails in seconds (set before any thread starts). */
    char tmo[16];
    snprintf(tmo, sizeof(tmo), "%d", REMOTE_TIMEOUT_S);
    setenv("FEEDER_CACHE_DIR", cache_dir, 1);
    setenv("FEEDER_REMOTE_RETRIES", "1", 1);
    setenv("FEEDER_REMOTE_BACKOFF_MS", "20", 1);
    setenv("FEEDER_REMOTE_LOW_SPEED_TIME_S", "1", 1);
    setenv("FEEDER_REMOTE_TIMEOUT_S", tmo, 1);
    unsetenv("FEEDER_REMOTE_LOW_SPEED");
    unsetenv("FEEDER_REMOTE_MAX_INDEX_BYTES");
    unsetenv("FEEDER_REMOTE_OFFLINE");
    unsetenv("FEEDER_CACHE_MAX_BYTES");
    if (data) {
        char cmd[8400];
        snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s'", data, root);
        if (system(cmd) != 0)
            die("copying %s failed", data);
    } else {
        bu_photos *ph;
        char err[256];
        const char *pd = getenv("FEEDER_BENCH_PHOTOS");
        if (bu_photos_load(pd ? pd : FEEDER_TEST_PHOTOS, &ph, err, sizeof(err)))
            die("photos: %s", err);
        for (int i = 0; i < images; i++) {
            char p[512];
            snprintf(p, sizeof(p), "%s/c%d", root, i % 6);
            bu_mkdirs(p);
            snprintf(p, sizeof(p), "%s/c%d/%04d.jpg", root, i % 6, i);
            uint32_t w = 120 + (uint32_t)(i * 37 % 200), h = 100 + (uint32_t)(i * 53 % 180);
            if (bu_write_jpeg(ph, p, (unsigned)i, w, h, 80, -1, (uint64_t)i))
                die("writing %s", p);
        }
        bu_photos_free(ph);
    }
    char err[512];
    feeder_dataset *ds;
    if (feeder_dataset_open_folder(root, &ds, err, sizeof(err)))
        die("%s", err);
    files f = {.n = feeder_dataset_size(ds), .corrupted = -1};
    f.paths = calloc(f.n, sizeof(char *));
    f.orig = calloc(f.n, sizeof(uint8_t *));
    f.len = calloc(f.n, sizeof(size_t));
    f.bad_since = calloc(f.n, sizeof(uint64_t));
    f.bad_before = calloc(f.n, sizeof(uint64_t));
    for (uint64_t i = 0; i < f.n; i++) {
        f.paths[i] = strdup(feeder_dataset_path(ds, i));
        if (bu_read_file(f.paths[i], &f.orig[i], &f.len[i]))
            die("reading %s", f.paths[i]);
    }
    ref r;
    uint64_t t_ref = bu_now_ns();
    make_reference(ds, seed, &r);
    printf("soak: %llu images in %s, %llu batches an epoch, reference of %d epochs in %.1f s\n",
           (unsigned long long)r.n, root, (unsigned long long)r.nbatches, EPOCHS,
           (double)(bu_now_ns() - t_ref) / 1e9);
    printf("soak: %.0f s, up to %d workers, kill every %d batches, corrupt every %d, "
           "recreate every %d, stop a worker every %d, remote shards every %d epochs\n",
           seconds, workers, kill_every, corrupt_every, recreate_every, stall_every,
           remote_every);
    fflush(stdout);

    unsigned rnd = (unsigned)seed * 2654435761u + 1;
    remote_counts rem = {0};
    if (remote_every) {
        /* The first remote epoch also sets libcurl up (its lasting handle and
         * descriptors) before the readings start. */
        make_shards(&f, ds);
        web_start();
        remote_epoch(&r, seed, workers, kill_every, 0, &rnd, &rem);
    }
    counts c = {0};
    uint8_t *seen = calloc(r.n, 1);
    reading base = measure(); /* before any loader */
    int cur_workers = workers;
    feeder_loader *ld = make_loader(ds, cur_workers, seed);
    reading start = {0, 0, 0, 0}, peak = {0, 0, 0, 0};
    uint64_t t0 = bu_now_ns(), deadline = t0 + (uint64_t)(seconds * 1e9);
    uint64_t epoch_base = 0; /* epochs run so far; the loader's epoch is this mod EPOCHS */
    feeder_loader_set_epoch(ld, 0);
    int done = 0;
    while (!done) {
        int e = (int)(epoch_base % EPOCHS);
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (rc == FEEDER_DONE) {
            for (uint64_t p = 0; p < r.n; p++)
                if (seen[p] != 1)
                    die("epoch %llu: position %llu delivered %d times",
                        (unsigned long long)epoch_base, (unsigned long long)p, seen[p]);
            memset(seen, 0, r.n);
            memcpy(f.bad_before, f.bad_since, r.n * sizeof(uint64_t));
            memset(f.bad_since, 0, r.n * sizeof(uint64_t));
            if (f.corrupted >= 0)
                f.bad_since[f.corrupted] = 1;
            c.epochs++;
            epoch_base++;
            if (epoch_base == 1) {
                /* Warm: the first epoch grew every buffer to its size. */
                start = measure();
                peak = start;
            }
            if (remote_every && epoch_base % (uint64_t)remote_every == 0) {
                remote_epoch(&r, seed, workers, kill_every, (int)(epoch_base % EPOCHS), &rnd,
                             &rem);
                hostile_open(&rem);
                hostile_open(&rem);
            }
            feeder_loader_set_epoch(ld, epoch_base % EPOCHS);
            if (bu_now_ns() >= deadline)
                done = 1;
            continue;
        }
        if (rc != 0)
            die("epoch %llu: %s (%s): %s", (unsigned long long)epoch_base, feeder_strerror(rc),
                feeder_err_name(rc), feeder_loader_errmsg(ld));
        if (b->epoch != (uint64_t)e)
            die("batch of epoch %llu, expected %d", (unsigned long long)b->epoch, e);
        /* Check the batch. */
        uint64_t first = b->number * BATCH;
        uint32_t skips = 0;
        for (uint32_t i = 0; i < b->count; i++) {
            uint64_t pos = first + i, want = r.order[e][pos], got = b->indices[i];
            if (pos >= r.n)
                die("batch %llu overruns the epoch", (unsigned long long)b->number);
            seen[pos]++;
            if (got != want) {
                /* A skip: the original must have been corrupted, and the
                 * replacement is another sample of its class. */
                int bad = f.bad_since[want] || (persistent_made && f.bad_before[want]);
                if (!bad || got >= r.n ||
                    feeder_dataset_label(ds, got) != feeder_dataset_label(ds, want))
                    die("epoch %d batch %llu position %u: index %llu, expected %llu",
                        e, (unsigned long long)b->number, i, (unsigned long long)got,
                        (unsigned long long)want);
                skips++;
            }
            if (sample_hash(b, i) != r.sample[e][got])
                die("epoch %d batch %llu position %u (index %llu): bytes differ from the "
                    "reference",
                    e, (unsigned long long)b->number, i, (unsigned long long)got);
        }
        if (skips != b->skipped)
            die("batch %llu: %u replaced samples, batch says %u", (unsigned long long)b->number,
                skips, b->skipped);
        c.batches++;
        c.samples += b->count;
        c.skipped += skips;
        feeder_batch_release(b, NULL);

        /* Faults. */
        if (cur_workers && c.batches % (uint64_t)kill_every == 0) {
            int pid = feeder_loader_worker_pid(ld, (int)(rand_r(&rnd) % (unsigned)cur_workers));
            if (pid > 0 && kill(pid, SIGKILL) == 0)
                c.kills++;
        }
        if (cur_workers && stall_every && c.batches % (uint64_t)stall_every == 0)
            stall_one(ld, cur_workers, &rnd, &c);
        if (c.batches % (uint64_t)corrupt_every == 0) {
            restore(&f);
            corrupt(&f, rand_r(&rnd) % f.n);
            c.corruptions++;
        } else if (c.batches % (uint64_t)corrupt_every == (uint64_t)corrupt_every / 2) {
            restore(&f);
        }
        if (c.batches % (uint64_t)recreate_every == 0) {
            size_t len = 0;
            if (feeder_loader_state_save(ld, NULL, 0, &len))
                die("state size: %s", feeder_loader_errmsg(ld));
            uint8_t *blob = malloc(len);
            if (feeder_loader_state_save(ld, blob, len, &len))
                die("state save: %s", feeder_loader_errmsg(ld));
            feeder_stats st;
            feeder_loader_stats(ld, &st);
            c.restarts += st.worker_restarts;
            c.ahead += st.batches_ahead;
            feeder_loader_destroy(ld); /* with parts in flight */
            cur_workers = (int)(rand_r(&rnd) % (unsigned)(workers + 1));
            resumed m = {ds, cur_workers, seed, blob, len, NULL};
            int threaded = c.recreations % 2 == 1;
            ld = resume_loader(&m, threaded);
            free(blob);
            c.recreations++;
            c.threaded += (uint64_t)threaded;
        }
        if (epoch_base >= 1) {
            reading now = measure();
            if (now.rss > peak.rss)
                peak.rss = now.rss;
            if (now.fds > peak.fds)
                peak.fds = now.fds;
            if (now.shm > peak.shm)
                peak.shm = now.shm;
            if (now.refs > peak.refs)
                peak.refs = now.refs;
        }
    }
    restore(&f);
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    c.restarts += st.worker_restarts;
    c.ahead += st.batches_ahead;
    reading end = measure();
    double secs = (double)(bu_now_ns() - t0) / 1e9;
    printf("soak: %.0f s, %llu epochs, %llu batches (%llu samples) checked, %llu samples "
           "replaced under the skip policy\n",
           secs, (unsigned long long)c.epochs, (unsigned long long)c.batches,
           (unsigned long long)c.samples, (unsigned long long)c.skipped);
    printf("soak: %llu workers killed, %llu stopped (%llu restarts seen), %llu files corrupted "
           "and restored, %llu loaders destroyed mid-epoch and resumed (%llu of them made by a "
           "short-lived thread)\n",
           (unsigned long long)c.kills, (unsigned long long)c.stalls,
           (unsigned long long)c.restarts, (unsigned long long)c.corruptions,
           (unsigned long long)c.recreations, (unsigned long long)c.threaded);
    printf("soak: %llu batches begun ahead of their epoch by persistent loaders\n",
           (unsigned long long)c.ahead);
    if (remote_every) {
        printf("soak: remote: %llu epochs of %d tar shards from 127.0.0.1 checked (%llu batches, "
               "%llu samples, exact; %llu workers killed; %llu opens walked shards downloaded "
               "into an empty cache, %llu epochs' workers downloaded the shards), %llu hostile "
               "opens refused (",
               (unsigned long long)rem.epochs, NSHARDS, (unsigned long long)rem.batches,
               (unsigned long long)rem.samples, (unsigned long long)rem.kills,
               (unsigned long long)rem.walked, (unsigned long long)rem.worker_fetch,
               (unsigned long long)rem.hostile);
        for (int k = 0; k < NHOSTILE; k++)
            printf("%s%s %llu", k ? ", " : "", hostile[k].mode,
                   (unsigned long long)rem.by_mode[k]);
        printf("), the slowest in %.1f s\n", (double)rem.max_ms / 1e3);
    }
    printf("soak: RSS after epoch 1 / peak / end: %ld / %ld / %ld KiB\n", start.rss, peak.rss,
           end.rss);
    feeder_loader_destroy(ld);
    reading after = measure();
    long left = children();
    printf("soak: child processes left after the last loader: %ld\n", left);
    /* Descriptors and /dev/shm: before the first loader against after the
     * last (a live loader holds 2 per worker and its memfd). */
    printf("soak: open fds before the first loader / peak / after the last: %ld / %ld / %ld; "
           "/dev/shm entries (whole machine) %ld / %ld / %ld; /dev/shm files mapped or open "
           "here: %ld\n",
           base.fds, peak.fds, after.fds, base.shm, peak.shm, after.shm, peak.refs);
    int ok = c.epochs >= 1 && left == 0 && after.fds == base.fds && peak.refs == 0 && after.refs == 0 &&
             peak.fds <= base.fds + 2 * workers + 1 && end.rss <= start.rss + 16 * 1024;
    feeder_dataset_destroy(ds);
    for (uint64_t i = 0; i < f.n; i++) {
        free(f.paths[i]);
        free(f.orig[i]);
    }
    free(f.paths);
    free(f.orig);
    free(f.len);
    free(f.bad_since);
    free(f.bad_before);
    free(seen);
    for (int e = 0; e < EPOCHS; e++) {
        free(r.order[e]);
        free(r.sample[e]);
    }
    bu_rm_rf(dir);
    if (!ok) {
        printf("soak: FAILED: a reading grew, a child process was left, or no epoch finished\n");
        return 1;
    }
    printf("soak: ok\n");
    return 0;
}
