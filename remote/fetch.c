/*
 * Transfers: a batch of requests run over one libcurl multi handle, the
 * process's (shared_take), so connections to a server are kept alive and
 * reused between requests and between calls, and many are in flight at once. Each request retries on its own (timeouts,
 * connection errors, 5xx), waiting an exponential backoff whose jitter comes
 * from feeder_random, so two runs with the same seed wait the same; a 4xx is
 * the server's final word. libcurl is told never to use signals
 * (CURLOPT_NOSIGNAL): the library installs no handler in the user's process.
 * A server is not trusted to end what it sends: each request has a cap on
 * the bytes it takes, a low-speed limit and a deadline, and at most 10
 * redirects to http(s); a signed request's redirects are followed here, not
 * by libcurl, so its credentials never leave its origin.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include "remote/remote.h"

#define ULL(x) ((unsigned long long)(x))

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum { X_WAIT = 0, X_RUN = 1, X_DONE = 2 };

typedef struct xfer {
    feeder__request *r;
    size_t id;
    CURL *h;
    struct curl_slist *hdrs;
    unsigned attempt;     /* attempts started */
    unsigned hops;        /* redirects followed by hand (signed requests) */
    int fresh;            /* the next attempts open a new connection */
    char *addr;           /* a signed request's address after a redirect, or NULL */
    uint64_t not_before;  /* ns: a retry's earliest start */
    uint64_t deadline;    /* ns: no attempt runs past it (cfg->timeout_s) */
    int state;
    long status;          /* the current response's HTTP status */
    uint64_t clen;        /* the current response's Content-Length, or UINT64_MAX */
    uint64_t written;
    int werr;             /* errno of a failed write, or EMSGSIZE: body past cap */
    uint8_t *stage;       /* a download to a file: the body gathered here, then written */
    size_t stage_cap, staged; /* (libcurl hands it over 16 KiB at a time, whatever its buffer) */
    uint64_t staged_at;   /* ns: when the stage's first byte came (readers wait for it) */
    char cerr[CURL_ERROR_SIZE];
} xfer;

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    return *end || x > 1000000000ul ? dflt : (unsigned)x;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end || !x ? dflt : (uint64_t)x;
}

void feeder__remote_defaults(feeder__remote_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->retries = env_uint("FEEDER_REMOTE_RETRIES", 4);
    cfg->backoff_ms = env_uint("FEEDER_REMOTE_BACKOFF_MS", 200);
    cfg->connect_timeout_ms = env_uint("FEEDER_REMOTE_CONNECT_TIMEOUT_MS", 5000);
    cfg->low_speed = env_uint("FEEDER_REMOTE_LOW_SPEED", 16384);
    cfg->low_speed_time_s = env_uint("FEEDER_REMOTE_LOW_SPEED_TIME_S", 5);
    cfg->timeout_s = env_uint("FEEDER_REMOTE_TIMEOUT_S", 600);
    cfg->max_index_bytes = env_u64("FEEDER_REMOTE_MAX_INDEX_BYTES", 64ull << 20);
    cfg->max_in_flight = 16;
    /* libcurl's default 16 KiB buffer costs a recv, a pwrite and a poll
     * every 16 KiB of a shard: 18,000 of each for 300 MB. */
    cfg->buffer_bytes = env_uint("FEEDER_REMOTE_BUFFER_BYTES", 512u << 10);
    if (cfg->buffer_bytes < 16384)
        cfg->buffer_bytes = 16384;
    if (cfg->buffer_bytes > (10l << 20))
        cfg->buffer_bytes = 10l << 20; /* CURL_MAX_READ_SIZE */
    cfg->part_bytes = env_u64("FEEDER_REMOTE_PART_BYTES", 8ull << 20);
    /* docs/BENCHMARKS.md, "Shards over HTTP" */
    cfg->max_parts = env_uint("FEEDER_REMOTE_PARTS", feeder__remote_spare_cores());
    if (cfg->max_parts < 1)
        cfg->max_parts = 1;
    if (cfg->max_parts > 16)
        cfg->max_parts = 16;
    const char *ca = getenv("FEEDER_CA_FILE");
    if (!ca || !*ca)
        ca = getenv("CURL_CA_BUNDLE");
    if (ca && *ca)
        feeder__fmt(cfg->ca_file, sizeof(cfg->ca_file), "%s", ca);
}

unsigned feeder__remote_spare_cores(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus >= 8 ? 4 : cpus >= 2 ? (unsigned)cpus / 2 : 1;
}

/* No thread is inside libcurl, and so inside OpenSSL, when the process
 * forks: every libcurl call but the wait on the sockets runs between
 * in_curl and out_curl, and a fork (pthread_atfork) first stops new entries
 * and waits until no thread is inside, holding fork_mu across the fork. A
 * forked worker thus never inherits a lock that libcurl's or OpenSSL's code
 * held in another thread of its parent (a fetch thread mid-handshake), and
 * it uses no handle made before the fork (shared_take). A fork waits at most
 * for one step of the transfers under way. A mutex and a count, not a
 * rwlock: a forked child cannot unlock a rwlock its parent's thread
 * write-locked (glibc matches the writer by thread id, which changes). */
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fork_cv = PTHREAD_COND_INITIALIZER;
static unsigned inside;  /* threads between in_curl and out_curl */
static int forking;

static void in_curl(void)
{
    pthread_mutex_lock(&fork_mu);
    while (forking)
        pthread_cond_wait(&fork_cv, &fork_mu);
    inside++;
    pthread_mutex_unlock(&fork_mu);
}

static void out_curl(void)
{
    pthread_mutex_lock(&fork_mu);
    if (--inside == 0)
        pthread_cond_broadcast(&fork_cv);
    pthread_mutex_unlock(&fork_mu);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&fork_mu);
    forking = 1;
    while (inside)
        pthread_cond_wait(&fork_cv, &fork_mu);
}

static void fork_parent(void)
{
    forking = 0;
    pthread_cond_broadcast(&fork_cv);
    pthread_mutex_unlock(&fork_mu);
}

/* The child's only thread is the forking one: nobody is inside. */
static void fork_child(void)
{
    forking = 0;
    inside = 0;
    pthread_mutex_unlock(&fork_mu);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void)
{
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) {
        curl_init_rc = CURLE_FAILED_INIT;
        return;
    }
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- callbacks ---- */

/* Readers of a download in progress may use the bytes below `arrived`:
 * raised once they are in the file, never lowered (a retry writes the same
 * bytes again, the object's size and ETag checked before its first one). */
static void publish(xfer *x, uint64_t in_file)
{
    _Atomic uint64_t *a = x->r->arrived;
    if (!a)
        return;
    uint64_t was = atomic_load_explicit(a, memory_order_relaxed);
    while (in_file > was &&
           !atomic_compare_exchange_weak_explicit(a, &was, in_file, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

/* Bytes of a download to their place in the file; -1 with werr set. */
static int write_at(xfer *x, const void *data, size_t n, uint64_t off)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(x->r->fd, (const char *)data + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            x->werr = w < 0 ? errno : ENOSPC;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* The response is the object the request expects (size; ETag when both
 * are known): its headers have all come before the first body byte. */
static int expected(const feeder__request *r)
{
    const feeder__remote_meta *e = r->expect;
    if (!e)
        return 1;
    if (r->meta.size && e->size != r->meta.size)
        return 0; /* (no size: a chunked body, measured when it ends) */
    return !e->etag[0] || !r->meta.etag[0] || !strcmp(e->etag, r->meta.etag);
}

/* What the stage holds, written where it belongs: one pwrite a buffer of
 * the body rather than one each 16 KiB (a 300 MB shard: 18,000). */
static int flush_stage(xfer *x)
{
    if (!x->staged)
        return 0;
    int rc = write_at(x, x->stage, x->staged, x->r->fd_off + x->written - x->staged);
    x->staged = 0;
    if (!rc)
        publish(x, x->written);
    return rc;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    xfer *x = arg;
    feeder__request *r = x->r;
    size_t n = size * nmemb;
    if (x->werr)
        return 0; /* a write of the stage between calls failed (flush_aged) */
    if (x->status >= 300 && x->status < 400)
        return n; /* a redirect's own body (followed by hand): not the object */
    if (r->cap && ((x->clen != UINT64_MAX && x->clen > r->cap) || x->written + n > r->cap)) {
        x->werr = EMSGSIZE; /* stop now: neither memory nor the cache grows past cap */
        return 0;
    }
    if (!x->written && !expected(r)) {
        x->werr = ESTALE; /* another object than the one opened: not one byte of it */
        return 0;
    }
    if (r->fd < 0) {
        memcpy(r->buf + x->written, data, n);
        x->written += n;
        return n;
    }
    if (x->stage && x->staged + n > x->stage_cap && flush_stage(x) < 0)
        return 0;
    if (x->stage && n <= x->stage_cap) {
        if (!x->staged)
            x->staged_at = feeder__now_ns();
        memcpy(x->stage + x->staged, data, n);
        x->staged += n;
        x->written += n;
        return n;
    }
    if (write_at(x, data, n, r->fd_off + x->written) < 0)
        return 0;
    x->written += n;
    publish(x, x->written);
    return n;
}

/* Copy a header's value (trimmed) into out. */
static void header_value(const char *v, size_t n, char *out, size_t len)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= len)
        n = len - 1;
    memcpy(out, v, n);
    out[n] = 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    feeder__request *r = ((xfer *)arg)->r;
    size_t n = size * nmemb;
    char v[160];
    xfer *x = arg;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        memset(&r->meta, 0, sizeof(r->meta)); /* a new response (redirect, retry) */
        const char *sp = memchr(line, ' ', n);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->clen = UINT64_MAX;
    }
    else if (n > 5 && !strncasecmp(line, "ETag:", 5))
        header_value(line + 5, n - 5, r->meta.etag, sizeof(r->meta.etag));
    else if (n > 14 && !strncasecmp(line, "Last-Modified:", 14))
        header_value(line + 14, n - 14, r->meta.modified, sizeof(r->meta.modified));
    else if (n > 15 && !strncasecmp(line, "Content-Length:", 15) && !r->meta.size) {
        header_value(line + 15, n - 15, v, sizeof(v));
        x->clen = strtoull(v, NULL, 10);
        if (r->last == UINT64_MAX)
            r->meta.size = strtoull(v, NULL, 10);
    } else if (n > 14 && !strncasecmp(line, "Content-Range:", 14)) {
        header_value(line + 14, n - 14, v, sizeof(v));
        const char *slash = strchr(v, '/');
        if (slash && slash[1] != '*')
            r->meta.size = strtoull(slash + 1, NULL, 10);
    }
    return n;
}

/* ---- one attempt ---- */

static int start(CURLM *m, const feeder__remote_cfg *cfg, xfer *x)
{
    feeder__request *r = x->r;
    const feeder__target *t = r->target;
    if (!x->h && !(x->h = curl_easy_init()))
        return -ENOMEM;
    CURL *h = x->h;
    curl_easy_reset(h);
    x->written = 0;
    x->werr = 0;
    x->staged = 0;
    if (r->fd >= 0 && !x->stage && cfg->buffer_bytes > 16384 &&
        (x->stage = malloc((size_t)cfg->buffer_bytes)) != NULL)
        x->stage_cap = (size_t)cfg->buffer_bytes; /* else: written as it comes */
    x->status = 0;
    x->clen = UINT64_MAX;
    x->cerr[0] = 0;
    if (r->fd >= 0 && !r->fd_off && r->last == UINT64_MAX && !r->sized && ftruncate(r->fd, 0) < 0)
        return -errno;
    uint64_t now = feeder__now_ns();
    if (!x->deadline)
        x->deadline = cfg->timeout_s ? now + (uint64_t)cfg->timeout_s * 1000000000ull
                                     : UINT64_MAX; /* 0: no deadline */
    long left_ms = x->deadline == UINT64_MAX ? 0
                   : x->deadline > now ? (long)((x->deadline - now) / 1000000) + 1 : 1;
    curl_easy_setopt(h, CURLOPT_URL, x->addr ? x->addr : t->address);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (x->fresh)
        curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* libcurl re-sends headers set with CURLOPT_HTTPHEADER (the session
     * token) to wherever a redirect leads: a signed request's redirects are
     * followed by hand (finish), within its origin only. */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, t->sigv4 ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->cerr);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, left_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, cfg->low_speed);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, cfg->low_speed_time_s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    if (r->fd >= 0)
        curl_easy_setopt(h, CURLOPT_BUFFERSIZE, cfg->buffer_bytes);
    if (cfg->ca_file[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, cfg->ca_file);
    char range[64];
    if (r->last != UINT64_MAX) {
        feeder__fmt(range, sizeof(range), "%llu-%llu", ULL(r->first), ULL(r->last));
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    if (t->sigv4) {
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, t->sigv4);
        curl_easy_setopt(h, CURLOPT_USERPWD, t->userpwd);
    }
    /* S3 wants the payload's SHA-256 in a signed header, which this libcurl
     * (7.88) does not add: a GET's payload is empty. */
    if (t->sigv4 && !x->hdrs) {
        struct curl_slist *l = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
        if (l && t->token) {
            struct curl_slist *l2 = curl_slist_append(l, t->token);
            if (!l2)
                curl_slist_free_all(l);
            l = l2;
        }
        if (!(x->hdrs = l))
            return -ENOMEM;
    }
    if (x->hdrs)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    x->attempt++;
    x->state = X_RUN;
    return curl_multi_add_handle(m, h) == CURLM_OK ? 0 : -ENOMEM;
}

/* Errors no retry can mend. */
static int final_curl_error(CURLcode c)
{
    return c == CURLE_UNSUPPORTED_PROTOCOL || c == CURLE_URL_MALFORMAT ||
           c == CURLE_OUT_OF_MEMORY || c == CURLE_BAD_FUNCTION_ARGUMENT ||
           c == CURLE_LOGIN_DENIED || c == CURLE_PEER_FAILED_VERIFICATION ||
           c == CURLE_FILESIZE_EXCEEDED || c == CURLE_TOO_MANY_REDIRECTS;
}

static void fail(xfer *x, int rc, const char *what)
{
    feeder__request *r = x->r;
    r->rc = rc;
    feeder__fmt(r->err, sizeof(r->err), "%s: %s (%u attempt%s)", r->target->url, what,
                x->attempt, x->attempt == 1 ? "" : "s");
    x->state = X_DONE;
}

/* The scheme, host and port of `url` into out ("" when it does not parse). */
static void origin_of(const char *url, char *out, size_t len)
{
    out[0] = 0;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
        feeder__fmt(out, len, "%s://%s:%s", scheme, host, port);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
}

/* A signed request's redirect: followed (a new attempt at the new address,
 * signed again by libcurl for it) when it stays on the request's origin;
 * elsewhere it is refused, so neither the signature nor the session token
 * is sent to another host. */
static void redirect_by_hand(xfer *x, long status)
{
    char *loc = NULL, what[400], from[300], to[300];
    curl_easy_getinfo(x->h, CURLINFO_REDIRECT_URL, &loc);
    if (!loc) {
        feeder__fmt(what, sizeof(what), "HTTP %ld, a redirect without a Location", status);
        return fail(x, FEEDER_EREMOTE, what);
    }
    origin_of(x->r->target->address, from, sizeof(from));
    origin_of(loc, to, sizeof(to));
    if (!from[0] || strcmp(from, to)) {
        feeder__fmt(what, sizeof(what), "HTTP %ld redirects this signed request to %.200s, "
                    "outside %s: not followed, so its credentials stay with that host (set "
                    "AWS_ENDPOINT_URL or AWS_REGION to the endpoint the bucket lives at)",
                    status, loc, from);
        return fail(x, FEEDER_EREMOTE, what);
    }
    if (++x->hops > 10) {
        feeder__fmt(what, sizeof(what), "more than 10 redirects (the last to %.200s)", loc);
        return fail(x, FEEDER_EREMOTE, what);
    }
    char *next = strdup(loc);
    if (!next)
        return fail(x, -ENOMEM, strerror(ENOMEM));
    free(x->addr);
    x->addr = next;
    x->attempt--; /* a redirect is no failed attempt */
    x->not_before = 0;
    x->state = X_WAIT;
}

/* A connection kept alive from an earlier response can hold bytes that
 * response's server sent past its Content-Length, which libcurl (7.88)
 * reads as the start of the next request's answer: "Received HTTP/0.9 when
 * not allowed", final. On a reused connection that answer is asked for once
 * more, on a new one, before it counts (a well-formed answer there is the
 * server's word, as anywhere). */
static int again_fresh(xfer *x, CURLcode c)
{
    long made = -1;
    if (c != CURLE_UNSUPPORTED_PROTOCOL || x->fresh ||
        curl_easy_getinfo(x->h, CURLINFO_NUM_CONNECTS, &made) != CURLE_OK || made != 0)
        return 0;
    x->fresh = 1;
    x->attempt--;
    x->not_before = 0;
    x->state = X_WAIT;
    return 1;
}

/* The message for a response longer than the request's cap. */
static void fail_over_cap(xfer *x)
{
    feeder__request *r = x->r;
    char what[400];
    const char *why = r->cap_what ? r->cap_what : "the range asked for";
    r->over = 1;
    if (x->clen != UINT64_MAX && x->clen > r->cap)
        feeder__fmt(what, sizeof(what), "the response announces %llu bytes (Content-Length), "
                    "more than the %llu expected (%s): not read", ULL(x->clen), ULL(r->cap), why);
    else
        feeder__fmt(what, sizeof(what), "the response runs past the %llu bytes expected (%s): "
                    "stopped there", ULL(r->cap), why);
    fail(x, FEEDER_EREMOTE, what);
}

/* What an attempt that ended with `c` means: done, final error or retry. */
static void finish(const feeder__remote_cfg *cfg, xfer *x, CURLcode c)
{
    feeder__request *r = x->r;
    long status = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    char what[400];
    if (c == CURLE_WRITE_ERROR && x->werr == EMSGSIZE)
        return fail_over_cap(x);
    if (c == CURLE_WRITE_ERROR && x->werr == ESTALE) {
        feeder__fmt(what, sizeof(what), "the shard changed on the server: %llu bytes (ETag %s) "
                    "when it was opened, %llu bytes (ETag %s) now", ULL(r->expect->size),
                    r->expect->etag[0] ? r->expect->etag : "none", ULL(r->meta.size),
                    r->meta.etag[0] ? r->meta.etag : "none");
        return fail(x, FEEDER_ECHECKSUM, what);
    }
    if (c == CURLE_OK && (x->werr || flush_stage(x) < 0))
        c = CURLE_WRITE_ERROR; /* the body's last bytes could not be written */
    if (c == CURLE_OK && status >= 300 && status < 400) {
        if (r->target->sigv4)
            return redirect_by_hand(x, status);
        feeder__fmt(what, sizeof(what), "HTTP %ld, a redirect without a Location", status);
        return fail(x, FEEDER_EREMOTE, what);
    }
    if (c == CURLE_WRITE_ERROR && x->werr) {
        feeder__fmt(what, sizeof(what), "writing the download: %s", strerror(x->werr));
        return fail(x, -x->werr, what);
    }
    if (c == CURLE_OK && r->last != UINT64_MAX && status != 206) {
        feeder__fmt(what, sizeof(what), "HTTP %ld to a range request (206 expected)", status);
        return fail(x, FEEDER_EREMOTE, what);
    }
    if (c == CURLE_OK) {
        r->len = (size_t)x->written;
        r->rc = 0;
        x->state = X_DONE;
        return;
    }
    uint64_t now = feeder__now_ns();
    if (c == CURLE_OPERATION_TIMEDOUT && now + 1000000 >= x->deadline) {
        feeder__fmt(what, sizeof(what), "no whole response within FEEDER_REMOTE_TIMEOUT_S = "
                    "%ld s (%llu bytes had come in the last attempt)", cfg->timeout_s,
                    ULL(x->written));
        return fail(x, FEEDER_EREMOTE, what);
    }
    if (c == CURLE_HTTP_RETURNED_ERROR)
        feeder__fmt(what, sizeof(what), "HTTP %ld", status);
    else if (c == CURLE_OPERATION_TIMEDOUT && strstr(x->cerr, "too slow"))
        feeder__fmt(what, sizeof(what), "slower than FEEDER_REMOTE_LOW_SPEED = %ld bytes/s for "
                    "FEEDER_REMOTE_LOW_SPEED_TIME_S = %ld s (%llu bytes had come)",
                    cfg->low_speed, cfg->low_speed_time_s, ULL(x->written));
    else
        feeder__fmt(what, sizeof(what), "%s", x->cerr[0] ? x->cerr : curl_easy_strerror(c));
    int retry = c == CURLE_HTTP_RETURNED_ERROR ? status >= 500 : !final_curl_error(c);
    if (!retry && again_fresh(x, c))
        return;
    if (!retry || x->attempt > cfg->retries)
        return fail(x, FEEDER_EREMOTE, what);
    double u = feeder_random_uniform(cfg->seed, x->attempt, x->id, 0);
    double wait_ms = (double)cfg->backoff_ms * (double)(1u << (x->attempt - 1 < 16 ? x->attempt - 1 : 16));
    x->not_before = now + (uint64_t)(wait_ms * (0.5 + u) * 1e6);
    if (x->not_before >= x->deadline) {
        char late[480];
        feeder__fmt(late, sizeof(late), "%s; no time left for another attempt within "
                    "FEEDER_REMOTE_TIMEOUT_S = %ld s", what, cfg->timeout_s);
        return fail(x, FEEDER_EREMOTE, late);
    }
    x->fresh = 1; /* the failed attempt's connection is not trusted again */
    x->state = X_WAIT;
}

/* ---- the batch ---- */

/* A download that readers use as it arrives (`arrived`) writes a stage
 * that has waited STAGE_AGE_NS, full or not: when the body comes slower
 * than a stage fills, its bytes reach the readers anyway. The wait (ms)
 * until the next stage is that old. */
#define STAGE_AGE_NS 2000000ull

static long flush_aged(xfer *xs, size_t n)
{
    long wait_ms = 1000;
    uint64_t now = feeder__now_ns();
    for (size_t i = 0; i < n; i++) {
        xfer *x = &xs[i];
        if (x->state != X_RUN || !x->staged || !x->r->arrived || x->werr)
            continue;
        if (now - x->staged_at >= STAGE_AGE_NS)
            flush_stage(x); /* a failure: werr, and the next on_body stops the transfer */
        else if (wait_ms > 2)
            wait_ms = 2;
    }
    return wait_ms;
}

/* Start every waiting request whose time has come, while there is room;
 * the wait (ms) until the next one may start. */
static int start_ready(CURLM *m, const feeder__remote_cfg *cfg, xfer *xs, size_t n,
                       unsigned *running, long *wait_ms)
{
    uint64_t now = feeder__now_ns(), next = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (xs[i].state != X_WAIT)
            continue;
        if (xs[i].not_before > now) {
            next = xs[i].not_before < next ? xs[i].not_before : next;
            continue;
        }
        if (*running >= cfg->max_in_flight)
            continue;
        int rc = start(m, cfg, &xs[i]);
        if (rc) {
            fail(&xs[i], rc, strerror(-rc));
            continue;
        }
        (*running)++;
    }
    *wait_ms = next == UINT64_MAX ? 1000 : (long)((next - now) / 1000000 + 1);
    if (*wait_ms > 1000)
        *wait_ms = 1000;
    return 0;
}

static void collect(CURLM *m, const feeder__remote_cfg *cfg, unsigned *running, size_t *seen)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        xfer *x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode c = msg->data.result;
        curl_multi_remove_handle(m, msg->easy_handle);
        (*running)--;
        finish(cfg, x, c);
        (*seen)++; /* finished or waiting to retry: either way, look again at once */
    }
}

static int run_all(CURLM *m, const feeder__remote_cfg *cfg, xfer *xs, size_t n)
{
    unsigned running = 0;
    size_t done = 0;
    while (done < n) {
        long wait_ms;
        in_curl();
        start_ready(m, cfg, xs, n, &running, &wait_ms);
        done = 0;
        for (size_t i = 0; i < n; i++)
            done += xs[i].state == X_DONE;
        if (done == n) {
            out_curl();
            break;
        }
        int still;
        CURLMcode mc = curl_multi_perform(m, &still);
        size_t fresh = 0;
        if (mc == CURLM_OK)
            collect(m, cfg, &running, &fresh);
        long aged_ms = flush_aged(xs, n);
        if (aged_ms < wait_ms)
            wait_ms = aged_ms;
        /* No longer than libcurl's own next deadline (connect timeouts). */
        long curl_ms = -1;
        curl_multi_timeout(m, &curl_ms);
        out_curl();
        if (mc != CURLM_OK)
            return FEEDER_EREMOTE;
        if (curl_ms >= 0 && curl_ms < wait_ms)
            wait_ms = curl_ms;
        if (!fresh && curl_multi_poll(m, NULL, 0, (int)wait_ms, NULL) != CURLM_OK)
            return FEEDER_EREMOTE;
    }
    return 0;
}

/* One multi handle per process, kept between calls, so its connection
 * pool carries keep-alive connections from one shard's download to the
 * next. A call that finds it in use (the fetch thread and the calling
 * thread at once) runs on a multi handle of its own. A forked child never
 * uses, nor cleans up, its parent's handle (the sockets are shared with the
 * parent): it makes its own; and if a parent thread held the lock at fork,
 * the child's trylock fails forever and it always uses its own. */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static CURLM *shared_m;
static pid_t shared_pid;

static CURLM *shared_take(void)
{
    if (pthread_mutex_trylock(&shared_mu) != 0)
        return NULL;
    if (shared_pid != getpid()) {
        shared_m = curl_multi_init(); /* a parent's handle is abandoned, not cleaned */
        shared_pid = getpid();
    }
    if (!shared_m) {
        shared_pid = 0;
        pthread_mutex_unlock(&shared_mu);
    }
    return shared_m;
}

static void shared_give(CURLM *m, int shared)
{
    if (shared)
        pthread_mutex_unlock(&shared_mu);
    else if (m)
        curl_multi_cleanup(m);
}

int feeder__remote_run(const feeder__remote_cfg *cfg, feeder__request *reqs, size_t n,
                       char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        feeder__fmt(err, errlen, "libcurl: %s", curl_easy_strerror(curl_init_rc));
        return FEEDER_EREMOTE;
    }
    xfer *xs = calloc(n ? n : 1, sizeof(*xs));
    in_curl();
    CURLM *m = shared_take();
    int shared = m != NULL;
    if (!m)
        m = curl_multi_init();
    if (!xs || !m) {
        free(xs);
        shared_give(m, shared);
        out_curl();
        return -ENOMEM;
    }
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)cfg->max_in_flight);
    out_curl();
    for (size_t i = 0; i < n; i++) {
        xs[i].r = &reqs[i];
        xs[i].id = i;
        reqs[i].rc = 0;
        reqs[i].over = 0;
        reqs[i].err[0] = 0;
        reqs[i].len = 0;
        memset(&reqs[i].meta, 0, sizeof(reqs[i].meta));
    }
    int rc = run_all(m, cfg, xs, n);
    in_curl();
    for (size_t i = 0; i < n; i++) {
        if (xs[i].h) {
            curl_multi_remove_handle(m, xs[i].h);
            curl_easy_cleanup(xs[i].h);
        }
        curl_slist_free_all(xs[i].hdrs);
        free(xs[i].addr);
        free(xs[i].stage);
    }
    shared_give(m, shared);
    out_curl();
    free(xs);
    if (rc) {
        feeder__fmt(err, errlen, "libcurl's multi interface failed");
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (reqs[i].rc) {
            feeder__fmt(err, errlen, "%s", reqs[i].err);
            return reqs[i].rc;
        }
    return 0;
}
