/*
 * libFuzzer target for the remote path (remote/, dataset/packed.c,
 * dataset/shards.c, dataset/tar.c): the input is what a server answers.
 *
 *   byte 0     what the user opens: bits 0-1 feeder_dataset_open_packed (0),
 *              feeder_dataset_open_shards of a pack (1) or of a tar (2),
 *              feeder_dataset_open_tar (3); bit 2 the same object as
 *              s3://bkt/NAME (signed, AWS_SESSION_TOKEN set) instead of
 *              http://127.0.0.1:PORT/d/NAME; bit 3 FEEDER_REMOTE_RETRIES 1
 *              instead of 0
 *   the rest   raw responses (status line, headers, body), separated by
 *              SEP; "%H" in them becomes 127.0.0.1:PORT and "%L"
 *              localhost:PORT (redirects to this server by another name)
 *
 * An in-process server thread on 127.0.0.1 (an ephemeral port, made once)
 * reads each request's head and answers the next response in order as it
 * is, then ends the connection (a FIN; requests past the last response get
 * none). So the fuzzer writes Content-Length mismatches,
 * chunked bodies, short and oversize bodies, redirects (to other paths
 * here, to other schemes and hosts), ETag changes between requests, and
 * garbage packed headers, tar headers and .idx files. An opened dataset is
 * loaded as a user would (two batches of 4, num_workers 0). Each input:
 *  - open and load return 0 or an error with a message;
 *  - a signed request never reaches the server under another host name
 *    (its token would go with it);
 *  - afterwards the cache folder holds no temporary file, and no cached
 *    copy whose size differs from its .meta record or exceeds all the
 *    bytes the server was given.
 * The cache folder is the process's own and emptied after every input, and
 * the input's connections are reset at its end (none stays in libcurl's
 * pool for the next), so no state passes from one input to the next. The
 * remote deadlines are small (FEEDER_REMOTE_TIMEOUT_S 2, LOW_SPEED_TIME_S 1,
 * connect 1 s): the server ends every answer, so nothing waits for them
 * but a redirect to a host name that does not resolve at once.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "feeder.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "\n~~next~~\n"
enum { MAX_RESPONSES = 32, MAX_OPEN = 64 };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;
    int busy; /* a connection is accepted and not yet answered */
    int open[MAX_OPEN], nopen; /* answered connections, reset at the input's end */
    int lfd, port;
    uint8_t *resp[MAX_RESPONSES]; /* this input's responses, substituted */
    size_t len[MAX_RESPONSES], n, next;
    int signed_mode;
    char host[64]; /* "127.0.0.1:PORT": a signed request's only Host */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .idle_cv = PTHREAD_COND_INITIALIZER, .lfd = -1};

static char cache_dir[64];
static int verbose; /* FEEDER_FUZZ_VERBOSE=1: each input's outcome on stderr */

/* ---- the server ---- */

/* The request's head (up to the blank line), or -1. */
static ssize_t read_head(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t k = recv(fd, buf + got, cap - 1 - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
        buf[got] = 0;
        if (strstr(buf, "\r\n\r\n"))
            return (ssize_t)got;
    }
    return -1;
}

/* A signed request under another host name is a leak of its credentials. */
static void check_host(const char *head)
{
    const char *h = strcasestr(head, "\r\nHost:");
    if (!h)
        abort();
    h += 7;
    while (*h == ' ')
        h++;
    if (strncmp(h, srv.host, strlen(srv.host)) != 0 || (h[strlen(srv.host)] != '\r'))
        abort();
}

static void serve_one(int fd)
{
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char head[8192];
    if (read_head(fd, head, sizeof(head)) < 0)
        return;
    uint8_t *copy = NULL;
    size_t len = 0;
    pthread_mutex_lock(&srv.mu);
    if (srv.signed_mode)
        check_host(head);
    if (srv.next < srv.n) {
        len = srv.len[srv.next];
        copy = malloc(len ? len : 1);
        if (copy)
            memcpy(copy, srv.resp[srv.next], len);
    }
    srv.next++;
    pthread_mutex_unlock(&srv.mu);
    for (size_t done = 0; copy && done < len;) {
        ssize_t k = send(fd, copy + done, len - done, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        done += (size_t)k;
    }
    free(copy);
}

/* Close with a reset: a connection libcurl kept in its pool is then seen
 * dead at once, even with bytes the response left unread in it. */
static void reset_close(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static void *server(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(srv.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&srv.mu);
        srv.busy = 1;
        pthread_mutex_unlock(&srv.mu);
        serve_one(fd);
        shutdown(fd, SHUT_WR); /* the response ends here */
        pthread_mutex_lock(&srv.mu);
        if (srv.nopen == MAX_OPEN)
            reset_close(srv.open[--srv.nopen]);
        srv.open[srv.nopen++] = fd;
        srv.busy = 0;
        pthread_cond_broadcast(&srv.idle_cv);
        pthread_mutex_unlock(&srv.mu);
    }
    return NULL;
}

/* ---- the cache folder ---- */

static void empty_cache(void)
{
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..")))
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

static void remove_cache(void)
{
    empty_cache();
    rmdir(cache_dir);
}

static uint64_t meta_size(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[4400];
    unsigned long long size = UINT64_MAX;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "size ", 5))
            size = strtoull(line + 5, NULL, 10);
    if (f)
        fclose(f);
    return size;
}

/* No temporary file left; every cached copy as its record says and no
 * larger than all the bytes the server had to give (the records, lock
 * files and indexes beside them are the library's own text). */
static void check_cache(size_t given)
{
    DIR *d = opendir(cache_dir);
    if (!d)
        abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (strstr(e->d_name, ".tmp."))
            abort();
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", cache_dir, e->d_name);
        if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
            abort();
        size_t n = strlen(e->d_name);
        if (n > 5 && !strcmp(e->d_name + n - 5, ".meta")) {
            char data[512];
            snprintf(data, sizeof(data), "%.*s", (int)(strlen(p) - 5), p);
            if (stat(data, &st) == 0) {
                uint64_t bytes = (uint64_t)st.st_size;
                for (int j = 1; j < 8; j++) { /* a striped copy's other files: NAME.sJ */
                    char sj[600];
                    snprintf(sj, sizeof(sj), "%s.s%d", data, j);
                    if (stat(sj, &st) < 0)
                        break;
                    bytes += (uint64_t)st.st_size;
                }
                if (bytes != meta_size(p) || bytes > given)
                    abort();
            }
        }
    }
    closedir(d);
}

/* ---- once per process ---- */

static int init(void)
{
    srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (srv.lfd < 0 || bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(srv.lfd, (struct sockaddr *)&a, &al) < 0 || listen(srv.lfd, 64) < 0)
        abort();
    srv.port = ntohs(a.sin_port);
    snprintf(srv.host, sizeof(srv.host), "127.0.0.1:%d", srv.port);
    pthread_t t;
    if (pthread_create(&t, NULL, server, NULL) || pthread_detach(t))
        abort();
    snprintf(cache_dir, sizeof(cache_dir), "/tmp/feeder-fuzz-remote-XXXXXX");
    if (!mkdtemp(cache_dir))
        abort();
    atexit(remove_cache);
    verbose = getenv("FEEDER_FUZZ_VERBOSE") != NULL;
    char ep[64];
    snprintf(ep, sizeof(ep), "http://%s", srv.host);
    setenv("FEEDER_CACHE_DIR", cache_dir, 1);
    setenv("FEEDER_REMOTE_BACKOFF_MS", "0", 1);
    setenv("FEEDER_REMOTE_CONNECT_TIMEOUT_MS", "1000", 1);
    setenv("FEEDER_REMOTE_LOW_SPEED_TIME_S", "1", 1);
    setenv("FEEDER_REMOTE_TIMEOUT_S", "2", 1);
    setenv("FEEDER_REMOTE_MAX_INDEX_BYTES", "1048576", 1);
    setenv("FEEDER_CACHE_LOCK_TIMEOUT_MS", "2000", 1);
    unsetenv("FEEDER_REMOTE_LOW_SPEED");
    unsetenv("FEEDER_CACHE_MAX_BYTES");
    unsetenv("FEEDER_REMOTE_OFFLINE");
    setenv("AWS_ENDPOINT_URL", ep, 1);
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("AWS_ACCESS_KEY_ID", "AKIDFUZZ", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    setenv("AWS_SESSION_TOKEN", "TOKEN", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    return 0;
}

/* ---- one input ---- */

/* `p[0, n)` with %H and %L replaced. */
static uint8_t *substitute(const uint8_t *p, size_t n, size_t *out_len)
{
    char h[64], l[64];
    snprintf(h, sizeof(h), "127.0.0.1:%d", srv.port);
    snprintf(l, sizeof(l), "localhost:%d", srv.port);
    uint8_t *o = malloc(n * 10 + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '%' && i + 1 < n && (p[i + 1] == 'H' || p[i + 1] == 'L')) {
            const char *s = p[i + 1] == 'H' ? h : l;
            memcpy(w, s, strlen(s));
            w += strlen(s);
            i++;
        } else {
            *w++ = p[i];
        }
    }
    *out_len = (size_t)(w - o);
    return o;
}

static void set_responses(const uint8_t *data, size_t size, int signed_mode)
{
    pthread_mutex_lock(&srv.mu);
    srv.n = srv.next = 0;
    srv.signed_mode = signed_mode;
    const size_t sl = strlen(SEP);
    while (srv.n < MAX_RESPONSES) {
        const uint8_t *end = memmem(data, size, SEP, sl);
        size_t n = end ? (size_t)(end - data) : size;
        if (!(srv.resp[srv.n] = substitute(data, n, &srv.len[srv.n])))
            break;
        srv.n++;
        if (!end)
            break;
        data += n + sl;
        size -= n + sl;
    }
    pthread_mutex_unlock(&srv.mu);
}

/* After the library returned: the server is done with the last connection,
 * and every connection of this input is reset, so no input finds a
 * connection of the one before in libcurl's pool (nor its unread bytes). */
static void clear_responses(void)
{
    pthread_mutex_lock(&srv.mu);
    while (srv.busy)
        pthread_cond_wait(&srv.idle_cv, &srv.mu);
    while (srv.nopen)
        reset_close(srv.open[--srv.nopen]);
    for (size_t i = 0; i < srv.n; i++)
        free(srv.resp[i]);
    srv.n = srv.next = 0;
    srv.signed_mode = 0;
    pthread_mutex_unlock(&srv.mu);
}

static void load(feeder_dataset *ds, int tar)
{
    feeder_loader *ld;
    if (feeder_loader_create(ds, NULL, &ld))
        abort();
    feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4);
    feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0);
    if (tar) {
        feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 8);
        feeder_loader_set(ld, FEEDER_OPT_WIDTH, 8);
    }
    for (int k = 0; k < 2; k++) {
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (verbose)
            fprintf(stderr, "  batch %d: %s %s\n", k, feeder_err_name(rc),
                    rc < 0 ? feeder_loader_errmsg(ld) : "");
        if (rc == 0) {
            feeder_batch_release(b, NULL);
            continue;
        }
        if (rc < 0 && !feeder_loader_errmsg(ld)[0])
            abort();
        break;
    }
    feeder_loader_destroy(ld);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready)
        ready = !init();
    if (size < 1)
        return 0;
    int entry = data[0] & 3, signed_mode = (data[0] >> 2) & 1;
    setenv("FEEDER_REMOTE_RETRIES", data[0] & 8 ? "1" : "0", 1);
    set_responses(data + 1, size - 1, signed_mode);
    const char *name = entry == 0 ? "a.pack" : entry == 1 ? "s-0.pack" : "s-0.tar";
    char url[128], err[1024] = "";
    if (signed_mode)
        snprintf(url, sizeof(url), "s3://bkt/%s", name);
    else
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/d/%s", srv.port, name);
    feeder_dataset *ds = NULL;
    int rc;
    if (entry == 0)
        rc = feeder_dataset_open_packed(url, &ds, err, sizeof(err));
    else if (entry == 3) {
        const char *paths[1] = {url};
        rc = feeder_dataset_open_tar(paths, 1, &ds, err, sizeof(err));
    } else {
        feeder_shard_options opt = {0};
        rc = feeder_dataset_open_shards(url, &opt, &ds, err, sizeof(err));
    }
    if (verbose)
        fprintf(stderr, "%s: %s %s\n", url, feeder_err_name(rc), err);
    if (rc > 0 || (rc < 0 && !err[0]) || (rc == 0) != (ds != NULL))
        abort();
    if (ds) {
        load(ds, entry >= 2);
        feeder_dataset_destroy(ds);
    }
    size_t given = 0;
    for (size_t i = 0; i < srv.n; i++)
        given += srv.len[i];
    clear_responses();
    check_cache(given);
    empty_cache();
    return 0;
}
