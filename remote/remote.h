/*
 * remote/: shards that live behind HTTP(S) or in S3-compatible storage,
 * fetched with libcurl (fetch.c: the multi interface, keep-alive, range
 * requests, retries with backoff), addressed and signed (url.c: s3:// to a
 * path-style URL, SigV4 credentials and region from the AWS variables and
 * files), and kept in a bounded on-disk cache of whole shards (cache.c:
 * temp-and-rename, a flock per shard, LRU eviction). Rank 1: depends on
 * common/ and the public header only.
 */
#ifndef FEEDER_REMOTE_H
#define FEEDER_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ---- addresses (url.c) ---- */

enum { FEEDER__URL_LOCAL = 0, FEEDER__URL_HTTP = 1, FEEDER__URL_S3 = 2 };

/* What `s` names: http:// and https:// (FEEDER__URL_HTTP), s3://
 * (FEEDER__URL_S3), anything else a local path. Pure. */
int feeder__url_kind(const char *s);

/* How to reach one URL: the address libcurl asks for and, for S3, the
 * signing parameters. Strings are the struct's own (feeder__target_free). */
typedef struct feeder__target {
    char *url;     /* as the user wrote it: what messages name */
    char *address; /* http(s) address requested */
    char *sigv4;   /* "aws:amz:REGION:s3", or NULL for plain HTTP */
    char *userpwd; /* "KEY:SECRET" for SigV4 */
    char *token;   /* "x-amz-security-token: ..." header, or NULL */
} feeder__target;

/* Resolve `url` (http(s):// or s3://): s3://BUCKET/KEY becomes
 * ENDPOINT/BUCKET/KEY (path style) with ENDPOINT from AWS_ENDPOINT_URL_S3,
 * AWS_ENDPOINT_URL or https://s3.REGION.amazonaws.com; credentials from
 * AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, else
 * ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE or
 * default); region from AWS_REGION/AWS_DEFAULT_REGION, else ~/.aws/config
 * (AWS_CONFIG_FILE), else us-east-1. FEEDER_EINVAL naming the URL for a
 * malformed one or S3 without credentials; -ENOMEM. */
int feeder__target_resolve(const char *url, feeder__target *out, char *err, size_t errlen);
void feeder__target_free(feeder__target *t);

/* ---- transfers (fetch.c) ---- */

/* How hard a transfer tries. feeder__remote_defaults fills the defaults,
 * overridden by FEEDER_REMOTE_RETRIES, FEEDER_REMOTE_BACKOFF_MS,
 * FEEDER_REMOTE_CONNECT_TIMEOUT_MS, FEEDER_REMOTE_LOW_SPEED,
 * FEEDER_REMOTE_LOW_SPEED_TIME_S, FEEDER_REMOTE_TIMEOUT_S,
 * FEEDER_REMOTE_MAX_INDEX_BYTES, FEEDER_REMOTE_BUFFER_BYTES,
 * FEEDER_REMOTE_PART_BYTES and FEEDER_REMOTE_PARTS; the CA certificates that https servers
 * are checked against from FEEDER_CA_FILE, else CURL_CA_BUNDLE, else
 * libcurl's default bundle. */
typedef struct feeder__remote_cfg {
    unsigned retries;        /* attempts after the first (4) */
    unsigned backoff_ms;     /* first wait; doubles each retry, +-50% jitter (200) */
    long connect_timeout_ms; /* (5000) */
    long low_speed;          /* bytes/s under which an attempt is slow (16384) */
    long low_speed_time_s;   /* an attempt slower than low_speed this long is cut (5) */
    long timeout_s;          /* one request's deadline, all its attempts together (600; 0: none) */
    uint64_t max_index_bytes; /* the most a server's tar index may hold (64 MiB) */
    unsigned max_in_flight;  /* transfers at once (16) */
    long buffer_bytes;       /* libcurl's receive buffer for a download to a file (512 KiB) */
    uint64_t part_bytes;     /* a whole-shard download of at least twice this size is fetched
                                as range requests of at least this many bytes (8 MiB) */
    unsigned max_parts;      /* ... this many at most, each on a thread of its own
                                (half the online CPUs, 1 to 4; 1: one request) */
    uint64_t seed;           /* jitter: feeder_random(seed, attempt, request, 0) */
    char ca_file[1024];      /* CURLOPT_CAINFO, or "" for libcurl's default */
} feeder__remote_cfg;
void feeder__remote_defaults(feeder__remote_cfg *cfg);

/* Transfers a process runs beside its readers by default: half the online
 * CPUs, 1 to 4 (a shard's lanes, and the shards fetched ahead). The readers
 * use a shard as it arrives, so the transfers share the cores with them. */
unsigned feeder__remote_spare_cores(void);

/* What the server said about the object (any field may be unknown). */
typedef struct feeder__remote_meta {
    uint64_t size;   /* whole object's bytes (Content-Length or Content-Range) */
    char etag[128];  /* "" when absent */
    char modified[64]; /* Last-Modified, "" when absent */
} feeder__remote_meta;

/* One request. `fd` >= 0: the body is written there from offset `fd_off`
 * (a retry starts over there; with fd_off 0, no range and not `sized` it
 * truncates the file first); otherwise into buf[0, cap). `len` says
 * how much came. Either way `cap` (0 with a descriptor: no limit but the
 * response's own Content-Length) is the most the request accepts: a
 * response that announces more, or a body that runs past it, is stopped
 * there and is FEEDER_EREMOTE naming the URL and both sizes, `over` set;
 * `cap_what` says in that message where the limit comes from. `first`/`last`
 * give a byte range (last == UINT64_MAX: none, the whole object). */
typedef struct feeder__request {
    const feeder__target *target;
    uint64_t first, last;
    int fd;
    uint64_t fd_off;
    int sized;                /* fd already has the object's size: a retry writes over it
                                 rather than truncating (readers may have it mapped) */
    _Atomic uint64_t *arrived; /* fd: the body's bytes written in order from fd_off, raised
                                  (release) after each write, never lowered; or NULL */
    const feeder__remote_meta *expect; /* a response whose size or ETag is not this one's is
                                          stopped before its first byte is written:
                                          FEEDER_ECHECKSUM, the object changed; or NULL */
    uint8_t *buf;
    size_t cap, len;
    const char *cap_what;     /* "the range asked for" when NULL */
    feeder__remote_meta meta; /* filled on success */
    int rc;                   /* 0, or the request's error */
    int over;                 /* the response was longer than cap */
    char err[512];            /* the request's message when rc != 0 */
} feeder__request;

/* Run `n` requests, up to cfg->max_in_flight at once over one multi handle
 * (keep-alive: connections are reused between them). Timeouts, connection
 * errors, bodies cut short and 5xx are retried with exponential backoff,
 * each retry on a new connection, until cfg->timeout_s has passed since the
 * request's first attempt; 4xx is final. An answer that is no HTTP
 * ("HTTP/0.9") on a kept-alive connection, where bytes an earlier response
 * sent past its Content-Length would be read, is asked for once more on a
 * new connection, not counted as an attempt. Each request gets its own rc and message (naming the URL and
 * the HTTP status or libcurl's text, after how many attempts); a failed
 * write to `fd` is -errno (ENOSPC, EFBIG) and is not retried. Redirects:
 * at most 10, to http or https only; a signed (S3) request follows a
 * redirect only within its own scheme, host and port, and one elsewhere is
 * FEEDER_EREMOTE naming both, so its credentials never reach another host.
 * Returns the first failing request's rc with its message in `err`, or 0.
 * Thread-safe (each call has its own handles). */
int feeder__remote_run(const feeder__remote_cfg *cfg, feeder__request *reqs, size_t n,
                       char *err, size_t errlen);

/* ---- the cache of whole shards (cache.c) ---- */

typedef struct feeder__cache {
    char *dir;          /* the cache folder, created when missing */
    uint64_t max_bytes; /* 0: no limit */
    int lock_timeout_ms; /* how long to wait for another fetcher of a shard */
    int offline;         /* FEEDER_REMOTE_OFFLINE=1: open from cached copies alone */
    feeder__remote_cfg cfg;
    struct feeder__cache_fails *fails; /* shards whose download failed (cache.c) */
    uint64_t opened_ns;  /* CLOCK_REALTIME at open: older failure records are ignored */
} feeder__cache;

/* The cache folder: `dir` when given, else FEEDER_CACHE_DIR, else
 * $XDG_CACHE_HOME/feeder/shards, else $HOME/.cache/feeder/shards, else
 * FEEDER_EINVAL saying so; created 0700 when missing, and refused (-EPERM
 * saying why and what to do) unless it belongs to this user and neither its
 * group nor others may write to it. The limit from `max_bytes`, else
 * FEEDER_CACHE_MAX_BYTES, else none; `offline` from FEEDER_REMOTE_OFFLINE
 * ("1": datasets open from the copies cached here without asking the
 * server). 0, -errno naming the folder, or -ENOMEM. */
int feeder__cache_open(feeder__cache *c, const char *dir, uint64_t max_bytes, char *err,
                       size_t errlen);
void feeder__cache_close(feeder__cache *c);

typedef struct feeder__progress feeder__progress; /* a download in progress (cache.c) */

/* The most files one cached copy is kept as. A copy is one file, or, when
 * a reader that maps it asks for that (FEEDER__GET_STRIPED), a shard of
 * several chunks is kept as one stripe a lane (cfg.max_parts, at most
 * this): chunk i in stripe i mod n, at (i div n) chunks. A file system
 * takes one file's writes one at a time (ext4 holds the inode's lock for
 * each), so the lanes of one large shard written into one file go no
 * faster than one lane; into a file each they go side by side
 * (docs/BENCHMARKS.md, "Shards over HTTP"). */
enum { FEEDER__STRIPES_MAX = 8 };

/* A shard in the cache, held: `fd` the whole file (read-only), `lock_fd` a
 * shared flock that keeps eviction away while it is held; both are the
 * caller's to close (feeder__shard_release). From feeder__cache_get_stream
 * it may instead be a copy still arriving: `prog` set, `fd` the partial
 * file (of the shard's full size), `lock_fd` -1, and no byte of it may be
 * read before feeder__shard_wait has said it is there. */
typedef struct feeder__shard {
    int fd, lock_fd;
    uint32_t stripes;       /* files the copy is kept as: 0 or 1 one (fd), else fd and ... */
    int stripe_fd[FEEDER__STRIPES_MAX - 1]; /* ... stripes 1 .. stripes - 1 (read-only) */
    uint64_t stripe_chunk;  /* a stripe's unit: chunk i in stripe i % stripes */
    uint64_t size;
    feeder__remote_meta meta;
    char path[4096];
    feeder__progress *prog; /* the download's progress record (mapped), or NULL: whole */
    size_t prog_len;
    int wait_ms;            /* the cache's lock_timeout_ms: the most a wait goes without a byte */
} feeder__shard;

/* feeder__shard_wait: the download a partial copy belongs to stopped
 * without an answer (its process died): get the shard again. */
#define FEEDER__SHARD_AGAIN 1

/* Get `url` into the cache (or find it there) and hold it. When `expect`
 * is given (size, and ETag when both are known), a cached copy that differs
 * is fetched again, the download stops at that size, and a download that
 * differs is FEEDER_ECHECKSUM naming the URL: the shard changed on the
 * server. Without it, a cached copy is used as it is. Only one process
 * fetches a shard at a time (an exclusive flock on its .lock file); the
 * others poll, up to lock_timeout_ms (FEEDER_ETIMEDOUT), for the copy it
 * makes; the download goes to a temporary name and is renamed, so a reader
 * never sees half a shard; temporary files a crash left are removed. Every
 * cache file is created with O_EXCL | O_NOFOLLOW. Least recently used
 * shards not held by anyone are evicted to keep the folder under
 * max_bytes. A full disk is -ENOSPC (or -EFBIG) naming the folder, the
 * temporary file removed. A shard whose download failed (FEEDER_EREMOTE,
 * FEEDER_ECHECKSUM) after `c` was opened, in this process or another (a
 * "<name>.failed" record in the folder), is not fetched again through `c`:
 * later calls return that failure at once, naming it. Thread-safe; several
 * processes may share a folder. */
int feeder__cache_get(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
                      feeder__shard *out, char *err, size_t errlen);
void feeder__shard_release(feeder__shard *s);

/* feeder__cache_get with flags: FEEDER__GET_STREAM is
 * feeder__cache_get_stream; FEEDER__GET_STRIPED says the caller reads the
 * copy only through feeder__shard_map and feeder__shard_pread, so a shard
 * downloaded in chunks by several lanes is kept as stripes (a file a lane).
 * Such copies have names of their own (feeder__cache_name). */
enum { FEEDER__GET_STREAM = 1, FEEDER__GET_STRIPED = 2 };
int feeder__cache_fetch(feeder__cache *c, const char *url, const feeder__remote_meta *expect,
                        unsigned flags, feeder__shard *out, char *err, size_t errlen);

/* Map bytes [0, len) of the copy `s` read-only at `at` (MAP_FIXED), each
 * stripe's chunks in their places: 0 or -errno. */
int feeder__shard_map(const feeder__shard *s, void *at, uint64_t len);
/* Bytes [off, off + len) of the copy `s` into dst: how many were read
 * (fewer at its end), or -errno. */
long feeder__shard_pread(const feeder__shard *s, uint64_t off, void *dst, size_t len);
/* Close the copy's files (its mappings stay), keeping its lock and
 * progress. */
void feeder__shard_close_files(feeder__shard *s);

/* feeder__cache_get, except that a shard not yet cached (with `expect`
 * giving its size) need not have arrived: when another process or thread
 * is downloading it, or when this call starts its download (on a thread of
 * its own: feeder__remote_settle), `out` is the
 * partial copy, read as it arrives (feeder__shard_wait). Every download
 * publishes its progress ("<name>.progress" beside the copy), so readers in
 * other processes can use it too. The first bytes of every response are
 * checked against `expect`: a partial copy never holds another version's
 * bytes. Thread-safe. */
int feeder__cache_get_stream(feeder__cache *c, const char *url,
                             const feeder__remote_meta *expect, feeder__shard *out, char *err,
                             size_t errlen);

/* Wait for every download this process started on a thread of its own
 * (feeder__cache_get_stream) to end: its copy renamed into the cache or
 * removed. feeder__cache_close waits for those into its own cache alone
 * (another dataset's downloads go on); a worker calls this before it exits,
 * so that a shard its readers no longer need the last bytes of is not left
 * half fetched. In a process forked while such a download ran, it only
 * frees the parent's records. */
void feeder__remote_settle(void);

/* Wait until bytes [off, off + len) of `s` have arrived (at once for a
 * whole copy); when its download has ended, `s` becomes a whole copy held
 * under a shared lock. 0; the download's own error and message (naming the
 * URL) when it failed; FEEDER__SHARD_AGAIN when it stopped without an
 * answer (release `s` and get the shard again); FEEDER_ETIMEDOUT naming
 * the URL after `s->wait_ms` without a new byte. Not thread-safe for one
 * `s`; any number of readers, in any processes, may wait on one download. */
int feeder__shard_wait(feeder__shard *s, const char *url, uint64_t off, uint64_t len, char *err,
                       size_t errlen);

/* Whether bytes [0, len) of the held copy `s` are `want` (what the server
 * sent for them at open: a pack's header and index); when they are not,
 * the copy is released and dropped from the cache (its .meta removed, so
 * the next feeder__cache_get fetches it again). 0 when they match, else
 * FEEDER_ECHECKSUM (or -errno of the read) naming `url` and the copy. */
int feeder__shard_verify(feeder__shard *s, const char *url, const uint8_t *want, size_t len,
                         char *err, size_t errlen);

/* What the cache holds for `url` without asking the server: 0 and `out`
 * (the size, ETag and Last-Modified recorded at its download) when a whole
 * copy is there, else -ENOENT; `flags` as feeder__cache_fetch's (which
 * kind of copy). Takes no lock: a copy evicted after this
 * call is fetched again by feeder__cache_get. Thread-safe. */
int feeder__cache_lookup(const feeder__cache *c, const char *url, unsigned flags,
                         feeder__remote_meta *out);

/* Bytes [off, off + len) of the whole copy the cache holds for `url`,
 * striped or not, without asking the server or taking a lock: how many
 * were read, -ENOENT without a whole copy, or -errno. */
long feeder__cache_peek(const feeder__cache *c, const char *url, unsigned flags, uint64_t off,
                        void *dst, size_t len);

/* The bytes of the cached copy at `path` (a name from feeder__cache_name),
 * its stripes' with it, as they are now: -errno when its first file is
 * gone. */
long long feeder__cache_copy_bytes(const char *path);

/* The cache file names of `url` inside `dir`: "<dir>/<16 hex>-<basename>"
 * (+ ".meta", ".lock", and a striped copy's ".s1" ...), the hex a hash of
 * the URL and of whether the copy is for readers that map it
 * (FEEDER__GET_STRIPED in `flags`): those are kept apart from copies read
 * as one file, so neither kind ever waits on the other. Pure. */
void feeder__cache_name(const char *dir, const char *url, unsigned flags, char *out,
                        size_t outlen);

/* ---- fetching ahead of the sampler (ahead.c) ---- */

/* A shard set as the fetch-ahead threads see it: `shard_of` gives the URL
 * shard (0 .. nshards-1) that holds sample `index`, or UINT32_MAX for a
 * local one; `url` and `meta` give a URL shard's address and what open saw
 * of it (size, ETag). `ctx` and the cache outlive the fetcher. */
typedef struct feeder__ahead_src {
    feeder__cache *cache;
    uint32_t nshards;
    uint32_t ahead; /* shards fetched past the one the loader is in; 0: none */
    const void *ctx;
    uint32_t (*shard_of)(const void *ctx, uint64_t index);
    const char *(*url)(const void *ctx, uint32_t s);
    const feeder__remote_meta *(*meta)(const void *ctx, uint32_t s);
    unsigned flags; /* feeder__cache_fetch's: FEEDER__GET_STRIPED when the readers map */
} feeder__ahead_src;

typedef struct feeder__ahead feeder__ahead;

/* The shards a set fetches ahead (feeder__ahead_src.ahead) for the option's
 * value `opt` over a set with `urls` URL shards and a cache of at most
 * `cache_max_bytes` (0: no limit): 0 without URL shards, as nothing is
 * fetched; FEEDER_FETCH_AHEAD_NONE: 0; 0, the default:
 * feeder__remote_spare_cores() (one download at a time keeps 20 MB shards
 * read in file order at 0.46 of the local files' first epoch on 16 cores,
 * four at 0.86-0.95: docs/BENCHMARKS.md, "Shards over HTTP"), but 1 in a
 * cache with a byte limit, where shards fetched ahead may evict the ones
 * still being read, which are then downloaded again. */
uint32_t feeder__ahead_shards(uint32_t opt, uint64_t urls, uint64_t cache_max_bytes);

/* The loader's hooks (parent process only). plan gives the epoch's order
 * (read now, as the URL shards in the order they are first needed; NULL/0
 * stops fetching) and the first time it names a URL shard starts
 * min(ahead, 4) threads (downloads in flight) into *a; progress says the
 * loader has handed out positions below `pos`. The threads download each
 * planned shard into the cache (and let it go: the readers map or open it)
 * while it is at most `ahead` shards past the one holding position `pos`. A
 * failed download spends the shard's retries (feeder__cache_get): the reader
 * that needs the shard reports that failure; every shard is left to the
 * readers when memory or threads are short. stop joins
 * the threads (a download in flight finishes first: its temporary file is
 * renamed or removed) and frees *a. No-ops with ahead 0 or no URL shard.
 * plan, progress and stop are not thread-safe with one another. The threads
 * belong to the process that started them: in a process forked from it
 * (the dataset used in a child), stop only frees *a, progress does nothing
 * and plan drops the copy and starts threads of the child's own. */
void feeder__ahead_plan(feeder__ahead **a, const feeder__ahead_src *src, const uint64_t *order,
                        uint64_t len);
void feeder__ahead_progress(feeder__ahead *a, uint64_t pos);
void feeder__ahead_stop(feeder__ahead **a);

/* Whether there is nothing left to fetch ahead: every one of the set's
 * `nurl` URL shards has landed once (by these threads, or found whole in
 * the cache as open saw it: a worker may have fetched it first), in a cache
 * with no byte limit (so none is evicted). Then an epoch may begin before
 * the user asks for it without its fetches being planned (loader/flow.c).
 * Looks up each planned shard not yet known to have landed (a file each).
 * 0 for NULL or a forked copy. Parent process only. */
int feeder__ahead_settled(feeder__ahead *a, uint32_t nurl);

#endif
