/*
 * Remote shards (remote/) against real servers started by the test on
 * 127.0.0.1: lighttpd (range requests), s3rver (S3 with SigV4) and
 * tests/remote_proxy.py (added latency, 503s, responses cut short). Faults:
 * a dead server, a body cut mid-transfer, a shard changed on the server, a
 * full cache (RLIMIT_FSIZE). Every server dies with its test
 * (PR_SET_PDEATHSIG). Skips (77) when lighttpd is not installed.
 *   test_remote        everything but S3 (CTest's test_remote)
 *   test_remote --s3   the S3 tests only (CTest's remote_s3, through
 *                      tests/remote_s3.sh, which installs s3rver from npm
 *                      first); skips (77) when s3rver is not installed
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "benchutil.h"
#include "feeder.h"
#include "remote/cache.h"
#include "remote/remote.h"
#include "testutil.h"

#define LIGHTTPD "/usr/sbin/lighttpd"
#define PYTHON "/usr/bin/python3"

static char tmpdir[256], docroot[300], cachedir[300];

typedef struct server {
    pid_t pid;
    int port;
} server;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-remote-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(docroot, sizeof(docroot), "%s/www", tmpdir);
    snprintf(cachedir, sizeof(cachedir), "%s/cache", tmpdir);
    ck_assert_int_eq(mkdir(docroot, 0755), 0);
    setenv("FEEDER_CACHE_DIR", cachedir, 1);
    setenv("FEEDER_REMOTE_BACKOFF_MS", "20", 1);
    unsetenv("FEEDER_REMOTE_RETRIES");
    unsetenv("FEEDER_CACHE_MAX_BYTES");
    unsetenv("FEEDER_CACHE_LOCK_TIMEOUT_MS");
    unsetenv("FEEDER_CA_FILE");
    unsetenv("CURL_CA_BUNDLE");
    unsetenv("FEEDER_REMOTE_OFFLINE");
    unsetenv("FEEDER_REMOTE_PART_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
    unsetenv("FEEDER_REMOTE_BUFFER_BYTES");
}

static void teardown(void)
{
    bu_rm_rf(tmpdir);
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &l), 0);
    close(s);
    return ntohs(a.sin_port);
}

static int port_open(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    return ok;
}

static void wait_port(int port)
{
    for (int i = 0; i < 1000 && !port_open(port); i++)
        usleep(10000);
    ck_assert_msg(port_open(port), "no server came up on port %d", port);
}

/* Fork and exec argv; the child dies with the test. stdout to `out_fd`
 * when >= 0, else /dev/null. */
static pid_t spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        dup2(out_fd >= 0 ? out_fd : null, 1);
        dup2(null, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void stop(server *s, int sig)
{
    if (s->pid > 0) {
        kill(s->pid, sig);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

static server start_lighttpd_with(const char *extra);

static server start_lighttpd(void)
{
    return start_lighttpd_with("");
}

/* lighttpd with `extra` lines appended to its configuration. */
static server start_lighttpd_with(const char *extra)
{
    server s = {0, free_port()};
    char conf[400];
    snprintf(conf, sizeof(conf), "%s/lighttpd.conf", tmpdir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "server.document-root = \"%s\"\nserver.port = %d\nserver.bind = \"127.0.0.1\"\n"
            "server.modules = (\"mod_accesslog\")\naccesslog.filename = \"%s/access.log\"\n"
            "server.errorlog = \"%s/error.log\"\nserver.stat-cache-engine = \"disable\"\n"
            "mimetype.assign = (\"\" => \"application/octet-stream\")\n%s",
            docroot, s.port, tmpdir, tmpdir, extra);
    fclose(f);
    char *argv[] = {LIGHTTPD, "-D", "-f", conf, NULL};
    s.pid = spawn(argv, -1);
    wait_port(s.port);
    return s;
}

/* remote_proxy.py in front of `upstream`, with `opt` ("--delay-ms", ...). */
static server start_proxy(int upstream, const char *opt, const char *val)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    char up[16], log[400];
    snprintf(up, sizeof(up), "%d", upstream);
    snprintf(log, sizeof(log), "%s/proxy.log", tmpdir);
    char *argv[] = {PYTHON, FEEDER_TEST_PROXY, up, "--log", log, (char *)opt, (char *)val, NULL};
    if (!opt)
        argv[5] = NULL;
    server s = {spawn(argv, p[1]), 0};
    close(p[1]);
    char line[32] = {0};
    ssize_t n = read(p[0], line, sizeof(line) - 1);
    close(p[0]);
    ck_assert_msg(n > 0, "the proxy printed no port");
    s.port = atoi(line);
    wait_port(s.port);
    return s;
}

static void url_of(char *buf, size_t len, const server *s, const char *name)
{
    snprintf(buf, len, "http://127.0.0.1:%d/%s", s->port, name);
}

static void www(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", docroot, name);
}

/* A RAW pack in the document root: n records of 16x16x3. */
static size_t put_pack(const char *name, uint64_t n)
{
    char p[400], tmp[420];
    www(p, sizeof(p), name);
    snprintf(tmp, sizeof(tmp), "%s.new", p);
    feeder__pack_header h;
    size_t size = tu_write_raw_pack(tmp, n, 16, 16, 2, &h);
    ck_assert_int_eq(rename(tmp, p), 0); /* a new file, as a server's files are replaced */
    return size;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len ? *len : 1);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* Lines of `file` containing `needle`. */
static int count_lines(const char *file, const char *needle)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Files in the cache folder whose name contains `needle`. */
static int cache_files(const char *needle)
{
    DIR *d = opendir(cachedir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' && strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

/* Nothing of a download is left in the cache: no progress record, no
 * partial copy. */
static void expect_no_partial_copies(void)
{
    ck_assert_int_eq(cache_files(".progress"), 0);
    ck_assert_int_eq(cache_files(".tmp."), 0);
}

/* Every batch of one epoch (data, labels, indices): 2 workers, shuffled. */
static uint32_t epoch_crc(feeder_dataset *ds, uint64_t *samples)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 7), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
    feeder_batch *b;
    int rc;
    uint32_t crc = 0;
    *samples = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        crc = feeder__crc32c(crc, b->data, (size_t)b->count * b->sample_bytes);
        crc = feeder__crc32c(crc, b->labels, b->count * sizeof(int64_t));
        crc = feeder__crc32c(crc, b->indices, b->count * sizeof(uint64_t));
        *samples += b->count;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return crc;
}

static const char *proxy_log(void)
{
    static char p[400];
    snprintf(p, sizeof(p), "%s/proxy.log", tmpdir);
    return p;
}

static double now_s(void)
{
    return (double)feeder__now_ns() / 1e9;
}

/* ------------------------------------------------------------------------ */

/* open_packed on a URL: the same bytes and batches as the local file, the
 * cache holds the shard, its .meta and .lock; a second open downloads
 * nothing more (one range request for the header, no full GET). */
START_TEST(test_http_open_packed)
{
    put_pack("a.pack", 100);
    server s = start_lighttpd();
    char url[300], local[400], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    www(local, sizeof(local), "a.pack");
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_packed(url, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_open_packed(local, &l, err, sizeof(err)), 0);
    size_t len;
    uint8_t *want = read_all(local, &len);
    ck_assert_uint_eq(r->pack->map_len, len);
    ck_assert_int_eq(memcmp(r->pack->map, want, len), 0);
    ck_assert_str_eq(r->pack->path, url);
    ck_assert_uint_eq(r->n, 100);
    uint64_t nr, nl;
    ck_assert_uint_eq(epoch_crc(r, &nr), epoch_crc(l, &nl));
    ck_assert_uint_eq(nr, 100);
    ck_assert_int_eq(cache_files("-a.pack"), 3);
    feeder_dataset_destroy(r);
    feeder_dataset *r2;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &r2, err, sizeof(err)), 0);
    feeder_dataset_destroy(r2);
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM); /* lighttpd buffers its access log until it stops */
    ck_assert_int_eq(count_lines(log, "GET /a.pack HTTP/1.1\" 206"), 2);
    ck_assert_int_eq(count_lines(log, "GET /a.pack HTTP/1.1\" 200"), 1);
    feeder_dataset_destroy(l);
    free(want);
}
END_TEST

/* A 404 is final at once; its message names the URL and the status. */
START_TEST(test_http_404)
{
    server s = start_lighttpd();
    char url[300], err[512], want[400];
    url_of(url, sizeof(url), &s, "missing.pack");
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    snprintf(want, sizeof(want), "%s: HTTP 404 (1 attempt)", url);
    ck_assert_str_eq(err, want);
    ck_assert_ptr_null(ds);
    stop(&s, SIGTERM);
}
END_TEST

/* A server that is gone: retried (FEEDER_REMOTE_RETRIES), then an error
 * naming the URL and libcurl's text; it does not hang. */
START_TEST(test_server_killed)
{
    put_pack("a.pack", 10);
    server s = start_lighttpd();
    char url[300], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    stop(&s, SIGKILL);
    setenv("FEEDER_REMOTE_RETRIES", "2", 1);
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_double_lt(now_s() - t0, 5.0);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "(3 attempts)") &&
                      strstr(err, "onnect"),
                  "%s", err);
    ck_assert_int_eq(cache_files(".tmp."), 0);
}
END_TEST

/* 503s are retried and the retry succeeds; a 503 on every attempt is an
 * error naming the status. */
START_TEST(test_5xx_retried)
{
    put_pack("a.pack", 10);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--fail-first", "2");
    char url[300], err[512], want[400];
    url_of(url, sizeof(url), &p, "a.pack");
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_packed(url, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ds->n, 10);
    feeder_dataset_destroy(ds);
    stop(&p, SIGKILL);
    p = start_proxy(s.port, "--fail-first", "1000");
    url_of(url, sizeof(url), &p, "b.pack");
    setenv("FEEDER_REMOTE_RETRIES", "1", 1);
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    snprintf(want, sizeof(want), "%s: HTTP 503 (2 attempts)", url);
    ck_assert_str_eq(err, want);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* Every response cut after 8 KiB (the server dying mid-transfer): the
 * header page arrives, the whole file never does; retried, then an error
 * naming the URL, and nothing but the lock file and the failure's record
 * (the shard's retries are spent) is left in the cache. */
START_TEST(test_cut_mid_transfer)
{
    put_pack("a.pack", 100);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--cut-after", "8192");
    char url[300], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    setenv("FEEDER_REMOTE_RETRIES", "2", 1);
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "(3 attempts)"), "%s", err);
    ck_assert_int_eq(cache_files("-a.pack"), 2); /* the lock file and the failure's record */
    ck_assert_int_eq(cache_files("-a.pack.lock"), 1);
    ck_assert_int_eq(cache_files("-a.pack.failed"), 1);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack bytes=0-4095"), 1);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack -"), 3);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* 150 ms added to every request: slower, same bytes. */
START_TEST(test_slow_server)
{
    put_pack("a.pack", 40);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--delay-ms", "150");
    char url[300], local[400], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    www(local, sizeof(local), "a.pack");
    feeder_dataset *ds;
    double t0 = now_s();
    ck_assert_msg(feeder_dataset_open_packed(url, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_ge(now_s() - t0, 0.3); /* the header page, then the whole file */
    size_t len;
    uint8_t *want = read_all(local, &len);
    ck_assert_uint_eq(ds->pack->map_len, len);
    ck_assert_int_eq(memcmp(ds->pack->map, want, len), 0);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack"), 2);
    free(want);
    feeder_dataset_destroy(ds);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* The shard changed on the server between its header and its download:
 * FEEDER_ECHECKSUM naming the URL, nothing cached. A stale cached copy met
 * by a new open is replaced (the open's header request is the truth). */
START_TEST(test_changed_on_server)
{
    put_pack("a.pack", 100);
    server s = start_lighttpd();
    char url[300], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    feeder__target t;
    ck_assert_int_eq(feeder__target_resolve(url, &t, err, sizeof(err)), 0);
    uint8_t page[4096];
    feeder__request r = {.target = &t, .last = 4095, .fd = -1, .buf = page, .cap = 4096};
    ck_assert_int_eq(feeder__remote_run(&c.cfg, &r, 1, err, sizeof(err)), 0);
    ck_assert_uint_eq(r.len, 4096);
    put_pack("a.pack", 120);
    feeder__shard sh;
    ck_assert_int_eq(feeder__cache_get(&c, url, &r.meta, &sh, err, sizeof(err)),
                     FEEDER_ECHECKSUM);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "the shard changed on the server"),
                  "%s", err);
    ck_assert_int_eq(cache_files("-a.pack"), 2); /* the lock file and the failure's record */
    ck_assert_int_eq(cache_files("-a.pack.failed"), 1);
    feeder__target_free(&t);
    feeder__cache_close(&c);

    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(ds->n, 120);
    feeder_dataset_destroy(ds);
    put_pack("a.pack", 90);
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(ds->n, 90);
    feeder_dataset_destroy(ds);
    stop(&s, SIGTERM);
}
END_TEST

/* The cache's disk full (RLIMIT_FSIZE: EFBIG on the write): a clear error
 * naming the URL and the cache folder, the partial file removed. */
START_TEST(test_cache_full)
{
    put_pack("a.pack", 400);
    server s = start_lighttpd();
    char url[300], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {64 * 1024, 64 * 1024};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), -EFBIG);
    char want[900];
    snprintf(want, sizeof(want), "%s: the shard cache %s is full (%s); the partial download "
             "was removed", url, cachedir, strerror(EFBIG));
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(cache_files(".tmp."), 0);
    ck_assert_int_eq(cache_files("-a.pack"), 1);
    stop(&s, SIGTERM);
}
END_TEST

/* A size limit: least recently used shards go first, a held one never. */
START_TEST(test_cache_lru)
{
    size_t size = put_pack("a.pack", 40);
    put_pack("b.pack", 40);
    put_pack("c.pack", 40);
    char max[32];
    snprintf(max, sizeof(max), "%zu", 2 * size + size / 2);
    setenv("FEEDER_CACHE_MAX_BYTES", max, 1);
    server s = start_lighttpd();
    char ua[300], ub[300], uc[300], err[512];
    url_of(ua, sizeof(ua), &s, "a.pack");
    url_of(ub, sizeof(ub), &s, "b.pack");
    url_of(uc, sizeof(uc), &s, "c.pack");
    feeder_dataset *a, *b, *c;
    ck_assert_int_eq(feeder_dataset_open_packed(ua, &a, err, sizeof(err)), 0);
    feeder_dataset_destroy(a);
    usleep(20000);
    ck_assert_int_eq(feeder_dataset_open_packed(ub, &b, err, sizeof(err)), 0);
    feeder_dataset_destroy(b);
    usleep(20000);
    ck_assert_int_eq(feeder_dataset_open_packed(uc, &c, err, sizeof(err)), 0);
    feeder_dataset_destroy(c);
    ck_assert_int_eq(cache_files("-a.pack"), 1); /* evicted: the lock file stays */
    ck_assert_int_eq(cache_files("-b.pack"), 3);
    ck_assert_int_eq(cache_files("-c.pack"), 3);
    /* b is now the least recently used, but held: c goes instead. */
    usleep(20000);
    ck_assert_int_eq(feeder_dataset_open_packed(ub, &b, err, sizeof(err)), 0);
    usleep(20000);
    ck_assert_int_eq(feeder_dataset_open_packed(ua, &a, err, sizeof(err)), 0);
    ck_assert_int_eq(cache_files("-b.pack"), 3);
    ck_assert_int_eq(cache_files("-c.pack"), 1);
    ck_assert_int_eq(cache_files("-a.pack"), 3);
    uint64_t n;
    epoch_crc(b, &n);
    ck_assert_uint_eq(n, 40);
    feeder_dataset_destroy(a);
    feeder_dataset_destroy(b);
    stop(&s, SIGTERM);
}
END_TEST

/* Two processes open the same URL at once (behind a 300 ms proxy, so they
 * overlap) and keep it open 2 s: the shard is downloaded once, and the one
 * that did not fetch it does not wait for the other to let it go (a lock
 * wait of 1.5 s would fail). */
START_TEST(test_two_processes_fetch_once)
{
    put_pack("a.pack", 100);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--delay-ms", "300");
    char url[300];
    url_of(url, sizeof(url), &p, "a.pack");
    setenv("FEEDER_CACHE_LOCK_TIMEOUT_MS", "1500", 1);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        ck_assert_int_ge(kids[k], 0);
        if (kids[k] == 0) {
            char err[512];
            feeder_dataset *ds;
            int rc = feeder_dataset_open_packed(url, &ds, err, sizeof(err));
            if (rc)
                fprintf(stderr, "%s\n", err);
            sleep(2);
            _exit(rc == 0 && ds->n == 100 ? 0 : 1);
        }
    }
    for (int k = 0; k < 2; k++) {
        int st;
        ck_assert_int_eq(waitpid(kids[k], &st, 0), kids[k]);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack bytes=0-4095"), 2);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack -"), 1);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* ---- S3 ---- */

static char s3rver_bin[600];

static server start_s3rver(void)
{
    server s = {0, free_port()};
    char dir[400], port[16];
    snprintf(dir, sizeof(dir), "%s/s3", tmpdir);
    snprintf(port, sizeof(port), "%d", s.port);
    char *argv[] = {s3rver_bin, "-d", dir, "-a", "127.0.0.1", "-p", port, "-s",
                    "--configure-bucket", "bkt", NULL};
    s.pid = spawn(argv, -1);
    wait_port(s.port);
    return s;
}

/* PUT a file with the curl tool, signed as S3RVER. */
static void s3_put(const server *s, const char *file, const char *key)
{
    char url[400];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/bkt/%s", s->port, key);
    char *argv[] = {"/usr/bin/curl", "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                    "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T",
                    (char *)file, url, "-o", "/dev/null", NULL};
    pid_t pid = spawn(argv, -1);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "curl -T %s %s failed", file, url);
}

static void s3_env(const server *s, const char *key)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", s->port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("AWS_ACCESS_KEY_ID", key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_REGION", "us-east-1", 1);
}

/* s3://bkt/KEY through s3rver: SigV4-signed range and whole GETs, the same
 * bytes and batches as the local file; a missing key is a 404, an unknown
 * access key a 403, both at once and naming the s3:// URL. */
START_TEST(test_s3_open_packed)
{
    put_pack("a.pack", 100);
    server s = start_s3rver();
    char local[400], err[512], want[600];
    www(local, sizeof(local), "a.pack");
    s3_put(&s, local, "shards/a.pack");
    s3_env(&s, "S3RVER");
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_packed("s3://bkt/shards/a.pack", &r, err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_int_eq(feeder_dataset_open_packed(local, &l, err, sizeof(err)), 0);
    size_t len;
    uint8_t *bytes = read_all(local, &len);
    ck_assert_uint_eq(r->pack->map_len, len);
    ck_assert_int_eq(memcmp(r->pack->map, bytes, len), 0);
    uint64_t nr, nl;
    ck_assert_uint_eq(epoch_crc(r, &nr), epoch_crc(l, &nl));
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    ck_assert_int_eq(feeder_dataset_open_packed("s3://bkt/shards/none.pack", &r, err, sizeof(err)),
                     FEEDER_EREMOTE);
    ck_assert_str_eq(err, "s3://bkt/shards/none.pack: HTTP 404 (1 attempt)");
    s3_env(&s, "NOPE");
    ck_assert_int_eq(feeder_dataset_open_packed("s3://bkt/shards/b.pack", &r, err, sizeof(err)),
                     FEEDER_EREMOTE);
    snprintf(want, sizeof(want), "s3://bkt/shards/b.pack: HTTP 403 (1 attempt)");
    ck_assert_str_eq(err, want);
    free(bytes);
    stop(&s, SIGTERM);
}
END_TEST

/* ---- addresses, no server ---- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_target_resolve)
{
    const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                          "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    char cred[400], conf[400], err[512];
    snprintf(cred, sizeof(cred), "%s/credentials", tmpdir);
    snprintf(conf, sizeof(conf), "%s/config", tmpdir);
    write_text(cred, "[default]\naws_access_key_id = K1\naws_secret_access_key = S1\n\n"
                     "[p2]\naws_access_key_id=K2\naws_secret_access_key=S2\n"
                     "aws_session_token = T2\n");
    write_text(conf, "[default]\nregion = us-west-2\n[profile p2]\nregion = eu-west-3\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    ck_assert_int_eq(feeder__url_kind("HTTPS://x/y"), FEEDER__URL_HTTP);
    ck_assert_int_eq(feeder__url_kind("s3://b/k"), FEEDER__URL_S3);
    ck_assert_int_eq(feeder__url_kind("/data/s3://x"), FEEDER__URL_LOCAL);
    feeder__target t;
    ck_assert_int_eq(feeder__target_resolve("s3://bkt/k/x.pack", &t, err, sizeof(err)), 0);
    ck_assert_str_eq(t.address, "https://s3.us-west-2.amazonaws.com/bkt/k/x.pack");
    ck_assert_str_eq(t.sigv4, "aws:amz:us-west-2:s3");
    ck_assert_str_eq(t.userpwd, "K1:S1");
    ck_assert_ptr_null(t.token);
    feeder__target_free(&t);
    setenv("AWS_PROFILE", "p2", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    ck_assert_int_eq(feeder__target_resolve("s3://bkt/x.pack", &t, err, sizeof(err)), 0);
    ck_assert_str_eq(t.address, "http://127.0.0.1:9000/bkt/x.pack");
    ck_assert_str_eq(t.sigv4, "aws:amz:eu-west-3:s3");
    ck_assert_str_eq(t.userpwd, "K2:S2");
    ck_assert_str_eq(t.token, "x-amz-security-token: T2");
    feeder__target_free(&t);
    setenv("AWS_ACCESS_KEY_ID", "EK", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ES", 1);
    setenv("AWS_REGION", "ap-south-1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://s3.local", 1);
    ck_assert_int_eq(feeder__target_resolve("s3://bkt/x.pack", &t, err, sizeof(err)), 0);
    ck_assert_str_eq(t.address, "http://s3.local/bkt/x.pack");
    ck_assert_str_eq(t.sigv4, "aws:amz:ap-south-1:s3");
    ck_assert_str_eq(t.userpwd, "EK:ES");
    ck_assert_ptr_null(t.token);
    feeder__target_free(&t);
    ck_assert_int_eq(feeder__target_resolve("http://h/x.pack", &t, err, sizeof(err)), 0);
    ck_assert_str_eq(t.address, "http://h/x.pack");
    ck_assert_ptr_null(t.sigv4);
    feeder__target_free(&t);
    ck_assert_int_eq(feeder__target_resolve("s3://bkt", &t, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "s3://bkt: an S3 URL is s3://BUCKET/KEY");
    ck_assert_int_eq(feeder__target_resolve("/local", &t, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "/local: not an http://, https:// or s3:// URL");
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_PROFILE", "none", 1);
    ck_assert_int_eq(feeder__target_resolve("s3://bkt/x", &t, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "s3://bkt/x: no S3 credentials (set AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials)");
    char name[600];
    feeder__cache_name("/c", "http://h/d/s-00001.pack?x=1", 0, name, sizeof(name));
    ck_assert_int_eq(strlen(name), strlen("/c/0123456789abcdef-s-00001.pack_x_1"));
    ck_assert_str_eq(name + 19, "-s-00001.pack_x_1");
}
END_TEST


/* ---- shards datasets ---- */

static const uint64_t SHARD_N[4] = {30, 20, 25, 10};

static void put_shards(void)
{
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof(name), "s-%d.pack", k);
        put_pack(name, SHARD_N[k]);
    }
}

static uint32_t epoch_crc_workers(feeder_dataset *ds, int workers, uint64_t *samples,
                                  int *rc_out, char *msg, size_t msglen)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 11), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
    feeder_batch *b;
    int rc;
    uint32_t crc = 0;
    *samples = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        crc = feeder__crc32c(crc, b->data, (size_t)b->count * b->sample_bytes);
        crc = feeder__crc32c(crc, b->labels, b->count * sizeof(int64_t));
        crc = feeder__crc32c(crc, b->indices, b->count * sizeof(uint64_t));
        *samples += b->count;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    *rc_out = rc;
    snprintf(msg, msglen, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return crc;
}

/* Four packs as one dataset, from local files and from URLs: the same
 * samples, labels and batches (0 and 2 workers); open reads only headers
 * and indices (range requests), each shard is downloaded whole once (the
 * default options: the workers and the fetch thread, one shard ahead,
 * share each download). */
START_TEST(test_shards_http)
{
    put_shards();
    server s = start_lighttpd();
    char pat_local[400], pat_url[300], err[512], msg[1024];
    snprintf(pat_local, sizeof(pat_local), "%s/s-{0..3}.pack", docroot);
    snprintf(pat_url, sizeof(pat_url), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    feeder_dataset *l, *r;
    ck_assert_msg(feeder_dataset_open_shards(pat_local, NULL, &l, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_msg(feeder_dataset_open_shards(pat_url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(cache_files(".pack"), 0); /* nothing downloaded whole at open */
    ck_assert_uint_eq(l->n, 85);
    ck_assert_uint_eq(r->n, 85);
    uint64_t counts[8];
    uint32_t ns;
    ck_assert_int_eq(feeder_dataset_shard_counts(r, counts, 8, &ns), 0);
    ck_assert_uint_eq(ns, 4);
    for (int k = 0, i = 0; k < 4; k++) {
        ck_assert_uint_eq(counts[k], SHARD_N[k]);
        for (uint64_t j = 0; j < SHARD_N[k]; j++, i++) {
            ck_assert_int_eq(r->labels[i], (int64_t)(j % 4));
            ck_assert_int_eq(l->labels[i], (int64_t)(j % 4));
        }
    }
    uint64_t nl, nr, n0;
    int rc;
    uint32_t cl = epoch_crc_workers(l, 2, &nl, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t cr = epoch_crc_workers(r, 2, &nr, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t c0 = epoch_crc_workers(r, 0, &n0, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(nl, 85);
    ck_assert_uint_eq(nr, 85);
    ck_assert_uint_eq(cl, cr);
    ck_assert_uint_eq(cl, c0);
    ck_assert_int_eq(cache_files(".pack.meta"), 4);
    feeder_dataset_destroy(l);
    feeder_dataset_destroy(r);
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "GET /s-%d.pack HTTP/1.1\" 206", k);
        ck_assert_int_eq(count_lines(log, want), 2); /* header page, then the index */
        snprintf(want, sizeof(want), "GET /s-%d.pack HTTP/1.1\" 200", k);
        ck_assert_int_eq(count_lines(log, want), 1);
    }
}
END_TEST

/* Shards that disagree on the sample shape, a missing one, a tar shard. */
START_TEST(test_shards_reject)
{
    put_pack("s-0.pack", 4);
    char p[400], pat[400], err[1024], want[1400];
    www(p, sizeof(p), "s-1.pack");
    feeder__pack_header h;
    tu_write_raw_pack(p, 4, 8, 8, 2, &h);
    snprintf(pat, sizeof(pat), "%s/s-{0..1}.pack", docroot);
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), FEEDER_EFORMAT);
    snprintf(want, sizeof(want),
             "%s/s-1.pack: version 2, kind 1, 8x8x3 layout 0; %s/s-0.pack, the first shard: "
             "version 2, kind 1, 16x16x3 layout 0: every shard must match it",
             docroot, docroot);
    ck_assert_str_eq(err, want);
    snprintf(pat, sizeof(pat), "%s/s-{0..2}.pack", docroot);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), -ENOENT);
    snprintf(want, sizeof(want), "%s/s-2.pack: cannot open packed file: %s", docroot,
             strerror(ENOENT));
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_shards("x-{0..1}.tar", NULL, &ds, err, sizeof(err)),
                     -ENOENT);
    snprintf(want, sizeof(want), "x-0.tar: cannot open tar shard: %s", strerror(ENOENT));
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(feeder_dataset_open_shards("x-{0..", NULL, &ds, err, sizeof(err)),
                     FEEDER_EINVAL);
    ck_assert_ptr_null(ds);
}
END_TEST

/* After open: a shard replaced on the server fails its batch with
 * FEEDER_ECHECKSUM naming the URL; a server killed mid-epoch fails the
 * batch with FEEDER_EREMOTE naming the URL, after the retries, no hang. */
START_TEST(test_shards_faults)
{
    put_shards();
    server s = start_lighttpd();
    char pat[300], url[300], err[512], msg[1024];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), 0);
    put_pack("s-2.pack", 26);
    uint64_t n;
    int rc;
    epoch_crc_workers(ds, 2, &n, &rc, msg, sizeof(msg));
    ck_assert_int_eq(rc, FEEDER_ECHECKSUM);
    url_of(url, sizeof(url), &s, "s-2.pack");
    ck_assert_msg(strstr(msg, url) && strstr(msg, "the shard changed on the server"), "%s", msg);
    feeder_dataset_destroy(ds);

    put_pack("s-2.pack", 25);
    setenv("FEEDER_REMOTE_RETRIES", "2", 1);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), 0);
    stop(&s, SIGKILL);
    double t0 = now_s();
    epoch_crc_workers(ds, 2, &n, &rc, msg, sizeof(msg));
    ck_assert_double_lt(now_s() - t0, 10.0);
    ck_assert_int_eq(rc, FEEDER_EREMOTE);
    ck_assert_msg(strstr(msg, "http://127.0.0.1:") && strstr(msg, "(3 attempts)"), "%s", msg);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A loader over ds (sampler smp, NULL for in order) with one worker, two
 * slots and batches of `batch`, both its first batches taken into b and
 * held: the worker then idles, having read only those positions. */
static feeder_loader *loader_both_held(feeder_dataset *ds, feeder_sampler *smp, uint32_t batch,
                                       feeder_batch *b[2])
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 2), 0);
    ck_assert_msg(feeder_next(ld, &b[0]) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_int_eq(feeder_next(ld, &b[1]), 0);
    return ld;
}

/* Epochs of a persistent loader over the four URL shards; the loader's
 * batches_ahead after them. */
static uint64_t ahead_after_epochs(const char *pat, const feeder_shard_options *opt, int epochs)
{
    char err[512];
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(pat, opt, &ds, err, sizeof(err)) == 0, "%s", err);
    uint64_t counts[4];
    uint32_t ns;
    ck_assert_int_eq(feeder_dataset_shard_counts(ds, counts, 4, &ns), 0);
    feeder_sampler *smp;
    ck_assert_int_eq(feeder_sampler_shards(counts, ns, 0, 1, 1, 5, 0, &smp), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    uint64_t seen = 0;
    for (int e = 0; e < epochs; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->epoch, (uint64_t)e);
            seen += b->count;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    }
    ck_assert_uint_eq(seen, (uint64_t)epochs * 85);
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
    return st.batches_ahead;
}

/* A set that fetches ahead plans each epoch's fetches from its order, so
 * persistent workers do not begin the next epoch early; once every URL
 * shard has landed in a cache that evicts none there is nothing left to
 * plan, and the epochs after it begin early as a local set's do. With a
 * byte limit on the cache they keep being planned. */
START_TEST(test_shards_fetch_ahead_then_run_ahead)
{
    put_shards();
    server s = start_lighttpd();
    char pat[300];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    bu_rm_rf(cachedir);
    ck_assert_uint_gt(ahead_after_epochs(pat, NULL, 3), 0);
    bu_rm_rf(cachedir);
    feeder_shard_options limited = {.cache_max_bytes = 1ull << 40};
    ck_assert_uint_eq(ahead_after_epochs(pat, &limited, 3), 0);
    stop(&s, SIGTERM);
}
END_TEST

/* fetch_ahead: with a window of one shard and both slots held (positions
 * 0-7, all in the first shard), the worker needs only the first shard; the
 * loader's fetch threads download one more with 1 and every shard with 4,
 * none with FEEDER_FETCH_AHEAD_NONE; one whole download per shard and run
 * (the default, 0: test_shards_fetch_ahead_default). */
START_TEST(test_shards_fetch_ahead)
{
    put_shards();
    server s = start_lighttpd();
    char pat[300], err[512];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    const uint32_t aheads[3] = {FEEDER_FETCH_AHEAD_NONE, 1, 4};
    const int cached[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        bu_rm_rf(cachedir);
        feeder_shard_options opt = {.fetch_ahead = aheads[k]};
        feeder_dataset *ds;
        ck_assert_int_eq(feeder_dataset_open_shards(pat, &opt, &ds, err, sizeof(err)), 0);
        uint64_t counts[4];
        uint32_t ns;
        ck_assert_int_eq(feeder_dataset_shard_counts(ds, counts, 4, &ns), 0);
        feeder_sampler *smp;
        ck_assert_int_eq(feeder_sampler_shards(counts, ns, 0, 1, 1, 5, 0, &smp), 0);
        feeder_batch *b[2];
        feeder_loader *ld = loader_both_held(ds, smp, 4, b); /* workers idle */
        for (int i = 0; i < 300 && cache_files(".pack.meta") < cached[k]; i++)
            usleep(10000);
        usleep(200000);
        ck_assert_int_eq(cache_files(".pack.meta"), cached[k]);
        /* Destroyed with both batches held: a release would let the worker
         * on to later positions, perhaps another shard's. */
        feeder_loader_destroy(ld);
        feeder_sampler_destroy(smp);
        feeder_dataset_destroy(ds);
    }
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM);
    int whole = 0;
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "GET /s-%d.pack HTTP/1.1\" 200", k);
        whole += count_lines(log, want);
    }
    ck_assert_int_eq(whole, 1 + 2 + 4); /* the shards cached in the three runs */
}
END_TEST

/* The default: options zero-filled or NULL over URL shards fetch half the
 * online CPUs' worth of shards ahead, 1 to 4: that many "feeder-ahead"
 * threads (remote/ahead.c names them) start with the first epoch and
 * download as many shards after the one the worker reads (in file order,
 * both slots held: positions 0-7, all in s-0), and no other (one on two
 * cores: s-1 alone); in a cache with a byte limit one thread fetches s-1
 * alone; FEEDER_FETCH_AHEAD_NONE starts none and s-1 stays on the server.
 * Over the local shards the default starts no thread. */
START_TEST(test_shards_fetch_ahead_default)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = cpus >= 8 ? 4 : cpus >= 2 ? (int)cpus / 2 : 1;
    put_shards();
    server s = start_lighttpd();
    char pat[300], local[400], err[512];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    snprintf(local, sizeof(local), "%s/s-{0..3}.pack", docroot);
    const feeder_shard_options zero = {0}, none = {.fetch_ahead = FEEDER_FETCH_AHEAD_NONE},
                               limited = {.cache_max_bytes = 1ull << 40};
    const feeder_shard_options *opts[5] = {&zero, NULL, &limited, &none, &zero};
    for (int k = 0; k < 5; k++) {
        int url = k < 4, ahead = k < 3, dflt = k == 2 ? 1 : cores;
        int past = dflt < 3 ? dflt : 3; /* of s-1..s-3 */
        bu_rm_rf(cachedir);
        feeder_dataset *ds;
        ck_assert_msg(feeder_dataset_open_shards(url ? pat : local, opts[k], &ds, err,
                                                 sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(tu_threads_named("feeder-ahead"), 0); /* none before a loader */
        feeder_batch *b[2];
        feeder_loader *ld = loader_both_held(ds, NULL, 4, b);
        ck_assert_uint_eq(b[1]->indices[3], 7);
        for (int i = 0; i < 300 && ahead && cache_files(".pack.meta") < 1 + past; i++)
            usleep(10000);
        usleep(200000);
        ck_assert_int_eq(tu_threads_named("feeder-ahead"), ahead ? dflt : 0);
        ck_assert_int_eq(cache_files("-s-0.pack.meta"), url);
        ck_assert_int_eq(cache_files("-s-1.pack.meta"), ahead);
        ck_assert_int_eq(cache_files("-s-2.pack.meta"), ahead && past >= 2);
        ck_assert_int_eq(cache_files(".pack.meta"), url + ahead * past); /* the rest: not yet */
        feeder_loader_destroy(ld); /* the batches held */
        feeder_dataset_destroy(ds);
        ck_assert_int_eq(tu_threads_named("feeder-ahead"), 0);
    }
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM);
    ck_assert_int_eq(count_lines(log, "GET /s-0.pack HTTP/1.1\" 200"), 4); /* once per run */
    ck_assert_int_eq(count_lines(log, "GET /s-1.pack HTTP/1.1\" 200"), 3); /* ahead: 3 runs */
    ck_assert_int_eq(count_lines(log, "GET /s-2.pack HTTP/1.1\" 200"), cores >= 2 ? 2 : 0);
    ck_assert_int_eq(count_lines(log, "GET /s-3.pack HTTP/1.1\" 200"), cores >= 3 ? 2 : 0);
}
END_TEST

/* A cache smaller than two shards and max_resident 1, read in the calling
 * thread with a window of one shard, no fetch thread
 * (FEEDER_FETCH_AHEAD_NONE: one fetching ahead would hold a second shard in
 * the cache): every shard still comes through (evicting the previous one),
 * the batches are the local files', and the process never holds more than
 * one URL shard. */
START_TEST(test_shards_small_cache)
{
    put_shards();
    server s = start_lighttpd();
    char pat[300], local[400], err[512];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.pack", s.port);
    snprintf(local, sizeof(local), "%s/s-{0..3}.pack", docroot);
    struct stat st;
    char p0[400];
    www(p0, sizeof(p0), "s-0.pack");
    ck_assert_int_eq(stat(p0, &st), 0);
    feeder_shard_options opt = {.max_resident = 1,
                                .cache_max_bytes = (uint64_t)st.st_size * 3 / 2,
                                .fetch_ahead = FEEDER_FETCH_AHEAD_NONE};
    feeder_dataset *r, *l;
    ck_assert_int_eq(feeder_dataset_open_shards(pat, &opt, &r, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_dataset_open_shards(local, NULL, &l, err, sizeof(err)), 0);
    uint64_t counts[4];
    uint32_t ns;
    ck_assert_int_eq(feeder_dataset_shard_counts(r, counts, 4, &ns), 0);
    feeder_sampler *smp;
    ck_assert_int_eq(feeder_sampler_shards(counts, ns, 0, 1, 1, 9, 0, &smp), 0);
    uint32_t crc[2];
    feeder_dataset *dss[2] = {r, l};
    for (int k = 0; k < 2; k++) {
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(dss[k], smp, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0), 0);
        feeder_batch *b;
        int rc;
        crc[k] = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            crc[k] = feeder__crc32c(crc[k], b->data, (size_t)b->count * b->sample_bytes);
            crc[k] = feeder__crc32c(crc[k], b->labels, b->count * sizeof(int64_t));
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
            uint32_t held = 0;
            for (uint32_t q = 0; k == 0 && q < 4; q++)
                held += r->pack->shards->resident[q];
            ck_assert_uint_le(held, 1);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        feeder_loader_destroy(ld);
    }
    ck_assert_uint_eq(crc[0], crc[1]);
    feeder__remote_settle(); /* the last shard's records can come before its rename */
    ck_assert_int_eq(cache_files(".pack.meta"), 1);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    stop(&s, SIGTERM);
}
END_TEST

/* Four processes, released together, get the same eight shards in the same
 * order and hold every one for 1.5 s (as workers that map them do): those
 * that did not fetch a shard must use the others' download instead of
 * waiting for an exclusive lock the holders never give back (a lock wait of
 * 1 s would fail). Three rounds, each from an empty cache. */
START_TEST(test_cache_race)
{
    for (int k = 0; k < 8; k++) {
        char name[32];
        snprintf(name, sizeof(name), "r-%d.pack", k);
        put_pack(name, 20);
    }
    server s = start_lighttpd();
    setenv("FEEDER_CACHE_LOCK_TIMEOUT_MS", "1000", 1);
    for (int round = 0; round < 3; round++) {
        bu_rm_rf(cachedir);
        int gate[2];
        ck_assert_int_eq(pipe(gate), 0);
        pid_t kids[4];
        for (int c = 0; c < 4; c++) {
            kids[c] = fork();
            ck_assert_int_ge(kids[c], 0);
            if (kids[c] > 0)
                continue;
            close(gate[1]);
            char err[512], byte;
            feeder__cache cache;
            if (feeder__cache_open(&cache, NULL, 0, err, sizeof(err)))
                _exit(2);
            if (read(gate[0], &byte, 1) < 0) /* EOF when the parent closes it */
                _exit(2);
            feeder__shard held[8];
            for (int i = 0; i < 8; i++) {
                char url[300], name[32];
                snprintf(name, sizeof(name), "r-%d.pack", i);
                url_of(url, sizeof(url), &s, name);
                if (feeder__cache_get(&cache, url, NULL, &held[i], err, sizeof(err))) {
                    fprintf(stderr, "round %d process %d: %s\n", round, c, err);
                    _exit(1);
                }
            }
            usleep(1500000);
            _exit(0);
        }
        close(gate[0]);
        close(gate[1]);
        for (int c = 0; c < 4; c++) {
            int st;
            ck_assert_int_eq(waitpid(kids[c], &st, 0), kids[c]);
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d process %d", round, c);
        }
        ck_assert_int_eq(cache_files(".pack.meta"), 8);
    }
    stop(&s, SIGTERM);
}
END_TEST

/* Keep-alive: the header request and the download of two packs, four
 * transfers in separate calls, ride one connection (the proxy logs the
 * client's port). */
START_TEST(test_keep_alive)
{
    put_pack("a.pack", 10);
    put_pack("b.pack", 10);
    server s = start_lighttpd();
    server p = start_proxy(s.port, NULL, NULL);
    char ua[300], ub[300], err[512];
    url_of(ua, sizeof(ua), &p, "a.pack");
    url_of(ub, sizeof(ub), &p, "b.pack");
    feeder_dataset *a, *b;
    ck_assert_int_eq(feeder_dataset_open_packed(ua, &a, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_dataset_open_packed(ub, &b, err, sizeof(err)), 0);
    FILE *f = fopen(proxy_log(), "r");
    ck_assert_ptr_nonnull(f);
    char line[512], first[32] = "";
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        char *port = strstr(line, "port=");
        ck_assert_ptr_nonnull(port);
        if (!n++)
            snprintf(first, sizeof(first), "%s", port);
        ck_assert_str_eq(port, first);
    }
    fclose(f);
    ck_assert_int_eq(n, 4);
    feeder_dataset_destroy(a);
    feeder_dataset_destroy(b);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* The download settings: libcurl's receive buffer for downloads to the
 * cache (FEEDER_REMOTE_BUFFER_BYTES, 512 KiB, kept within libcurl's 16 KiB
 * .. 10 MiB) and the parts a large shard is fetched in
 * (FEEDER_REMOTE_PART_BYTES, FEEDER_REMOTE_PARTS: half the online CPUs, 1 to 4). */
START_TEST(test_download_settings)
{
    feeder__remote_cfg cfg;
    unsetenv("FEEDER_REMOTE_BUFFER_BYTES");
    unsetenv("FEEDER_REMOTE_PART_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
    feeder__remote_defaults(&cfg);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_eq(cfg.buffer_bytes, 512 * 1024);
    ck_assert_uint_eq(cfg.part_bytes, 8u << 20);
    ck_assert_uint_eq(cfg.max_parts, cpus >= 8 ? 4 : cpus >= 2 ? (unsigned)cpus / 2 : 1);
    ck_assert_uint_eq(feeder__remote_spare_cores(), cfg.max_parts); /* fetch_ahead's default too */
    setenv("FEEDER_REMOTE_BUFFER_BYTES", "1000", 1);
    setenv("FEEDER_REMOTE_PARTS", "64", 1);
    feeder__remote_defaults(&cfg);
    ck_assert_int_eq(cfg.buffer_bytes, 16384);
    ck_assert_uint_eq(cfg.max_parts, 16);
    setenv("FEEDER_REMOTE_BUFFER_BYTES", "100000000", 1);
    setenv("FEEDER_REMOTE_PARTS", "1", 1);
    feeder__remote_defaults(&cfg);
    ck_assert_int_eq(cfg.buffer_bytes, 10l << 20);
    ck_assert_uint_eq(cfg.max_parts, 1);
    unsetenv("FEEDER_REMOTE_BUFFER_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
}
END_TEST

/* A shard at least twice FEEDER_REMOTE_PART_BYTES comes as range requests
 * of that size (chunks), in 3 lanes on threads of their own, written at
 * their offsets of one file: the cached copy is the server's file byte for
 * byte and the loader's batches are the local file's; no whole GET is
 * made. A chunk answered 503 is retried on its own, the others kept. The body is gathered in a
 * stage of FEEDER_REMOTE_BUFFER_BYTES and written a stage at a time. */
START_TEST(test_download_parts)
{
    size_t size = put_pack("a.pack", 400);
    ck_assert_uint_ge(size, 3 * 65536);
    setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
    setenv("FEEDER_REMOTE_PARTS", "3", 1);
    server s = start_lighttpd();
    server p = start_proxy(s.port, NULL, NULL);
    char url[300], local[400], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    www(local, sizeof(local), "a.pack");
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_packed(url, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_open_packed(local, &l, err, sizeof(err)), 0);
    size_t len;
    uint8_t *want = read_all(local, &len);
    ck_assert_uint_eq(r->pack->map_len, len);
    ck_assert_int_eq(memcmp(r->pack->map, want, len), 0);
    uint64_t nr, nl;
    ck_assert_uint_eq(epoch_crc(r, &nr), epoch_crc(l, &nl));
    int chunks = (int)((size + 65535) / 65536);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack"), 1 + chunks); /* the header, chunks */
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack - "), 0); /* no whole GET */
    feeder_dataset_destroy(r);
    stop(&p, SIGKILL);

    /* Again into an empty cache, through a proxy that answers its first two
     * requests (two of the parts) with 503, with a 20,000-byte stage: the
     * body gathered and written many times, at no 16 KiB boundary. */
    setenv("FEEDER_REMOTE_BUFFER_BYTES", "20000", 1);
    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    char direct[300];
    url_of(direct, sizeof(direct), &s, "a.pack");
    feeder__target t;
    ck_assert_int_eq(feeder__target_resolve(direct, &t, err, sizeof(err)), 0);
    uint8_t page[4096];
    feeder__request q = {.target = &t, .last = 4095, .fd = -1, .buf = page, .cap = 4096};
    ck_assert_int_eq(feeder__remote_run(&c.cfg, &q, 1, err, sizeof(err)), 0);
    feeder__target_free(&t);
    p = start_proxy(s.port, "--fail-first", "2");
    url_of(url, sizeof(url), &p, "a.pack");
    feeder__shard sh;
    ck_assert_msg(feeder__cache_get(&c, url, &q.meta, &sh, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(sh.size, len);
    uint8_t *got = malloc(len);
    ck_assert_int_eq(feeder__pread_full(sh.fd, 0, got, len), (long)len);
    ck_assert_int_eq(memcmp(got, want, len), 0);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack"), 1 + chunks + chunks + 2);
    ck_assert_int_eq(c.cfg.buffer_bytes, 20000);
    free(got);
    feeder__shard_release(&sh);
    feeder__cache_close(&c);
    feeder_dataset_destroy(l);
    free(want);
    unsetenv("FEEDER_REMOTE_PART_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* A shard changed on the server between open and a download in parts:
 * FEEDER_ECHECKSUM naming the URL, as for a whole download, and nothing
 * left in the cache but the lock and the failure's record. */
START_TEST(test_download_parts_changed)
{
    put_pack("a.pack", 400);
    setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
    setenv("FEEDER_REMOTE_PARTS", "3", 1);
    server s = start_lighttpd();
    char url[300], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    feeder__target t;
    ck_assert_int_eq(feeder__target_resolve(url, &t, err, sizeof(err)), 0);
    uint8_t page[4096];
    feeder__request r = {.target = &t, .last = 4095, .fd = -1, .buf = page, .cap = 4096};
    ck_assert_int_eq(feeder__remote_run(&c.cfg, &r, 1, err, sizeof(err)), 0);
    put_pack("a.pack", 420);
    feeder__shard sh;
    ck_assert_int_eq(feeder__cache_get(&c, url, &r.meta, &sh, err, sizeof(err)),
                     FEEDER_ECHECKSUM);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "the shard changed on the server"),
                  "%s", err);
    ck_assert_int_eq(cache_files("-a.pack"), 2);
    ck_assert_int_eq(cache_files("-a.pack.failed"), 1);
    feeder__target_free(&t);
    feeder__cache_close(&c);
    unsetenv("FEEDER_REMOTE_PART_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
    stop(&s, SIGTERM);
}
END_TEST

/* remote_proxy.py in front of `upstream` with two options. */
static server start_proxy2(int upstream, const char *o1, const char *v1, const char *o2,
                           const char *v2)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    char up[16], log[400];
    snprintf(up, sizeof(up), "%d", upstream);
    snprintf(log, sizeof(log), "%s/proxy.log", tmpdir);
    char *argv[] = {PYTHON, FEEDER_TEST_PROXY, up, "--log", log, (char *)o1, (char *)v1,
                    (char *)o2, (char *)v2, NULL};
    server s = {spawn(argv, p[1]), 0};
    close(p[1]);
    char line[32] = {0};
    ssize_t n = read(p[0], line, sizeof(line) - 1);
    close(p[0]);
    ck_assert_msg(n > 0, "the proxy printed no port");
    s.port = atoi(line);
    wait_port(s.port);
    return s;
}

/* Record i of a one-shard dataset is the local file's record i. */
static void assert_record(const feeder_dataset *ds, const uint8_t *local, uint64_t i)
{
    const struct feeder__pack *pk = ds->pack;
    uint64_t at = pk->off[i] - pk->shards->base[0];
    ck_assert_int_eq(memcmp(pk->map + pk->off[i], local + at, pk->size[i]), 0);
}

/* A shard is read while it downloads: through a proxy that stalls every
 * body for 3 s after its first 64 KiB, record 0 (in those 64 KiB) is there
 * long before the download ends, in the process that fetches it (on the
 * cache's thread) and in another process that reads the same download
 * (its progress record) rather than fetching it again; the last record
 * waits for the rest. Then the shard is an ordinary cached copy held under
 * a shared lock, and the folder holds no partial copy or progress record. */
START_TEST(test_stream_read_early)
{
    size_t size = put_pack("a.pack", 400);
    ck_assert_uint_gt(size, 200000);
    server s = start_lighttpd();
    server p = start_proxy2(s.port, "--stall-after", "65536", "--stall-ms", "3000");
    char url[300], local[400], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    www(local, sizeof(local), "a.pack");
    size_t len;
    uint8_t *want = read_all(local, &len);
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ds->n, 400);
    ck_assert_uint_lt(ds->pack->off[0] + ds->pack->size[0], 65536);
    double t0 = now_s();
    uint64_t first = 0, last = 399;
    ck_assert_msg(feeder__shards_ensure(ds->pack, &first, 1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_lt(now_s() - t0, 2.0);
    assert_record(ds, want, 0);
    ck_assert_ptr_nonnull(ds->pack->shards->stream[0]);
    ck_assert_int_eq(cache_files("-a.pack.progress"), 1);

    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        feeder_dataset *other;
        double t1 = now_s();
        int ok = feeder_dataset_open_shards(url, NULL, &other, err, sizeof(err)) == 0 &&
                 feeder__shards_ensure(other->pack, &first, 1, err, sizeof(err)) == 0 &&
                 other->pack->shards->stream[0] != NULL && now_s() - t1 < 2.0 &&
                 !memcmp(other->pack->map + other->pack->off[0], want + other->pack->off[0] -
                         other->pack->shards->base[0], other->pack->size[0]);
        ok = ok && feeder__shards_ensure(other->pack, &last, 1, err, sizeof(err)) == 0 &&
             !memcmp(other->pack->map + other->pack->off[399], want + other->pack->off[399] -
                     other->pack->shards->base[0], other->pack->size[399]);
        if (!ok)
            fprintf(stderr, "the other reader: %s\n", err);
        _exit(ok ? 0 : 1);
    }
    ck_assert_msg(feeder__shards_ensure(ds->pack, &last, 1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_ge(now_s() - t0, 2.5);
    assert_record(ds, want, 399);
    int st;
    ck_assert_int_eq(waitpid(kid, &st, 0), kid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* Once the download has ended, the next read holds it as a whole copy. */
    for (double t1 = now_s(); ds->pack->shards->stream[0] && now_s() - t1 < 5.0;) {
        usleep(10000);
        ck_assert_int_eq(feeder__shards_ensure(ds->pack, &last, 1, err, sizeof(err)), 0);
    }
    ck_assert_ptr_null(ds->pack->shards->stream[0]);
    ck_assert_int_ge(ds->pack->shards->lock_fd[0], 0);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack -"), 1); /* one download */
    feeder_dataset_destroy(ds);
    ck_assert_int_eq(cache_files("-a.pack.meta"), 1);
    expect_no_partial_copies();
    size_t clen;
    char cached[700];
    feeder__cache_name(cachedir, url, FEEDER__GET_STRIPED, cached, sizeof(cached));
    uint8_t *got = read_all(cached, &clen);
    ck_assert_uint_eq(clen, len);
    ck_assert_int_eq(memcmp(got, want, len), 0);
    free(got);
    free(want);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* Closing a dataset waits for its own downloads only: with one shard's
 * download held 3 s by the proxy, a second dataset streamed from the
 * server directly is destroyed at once, and then the first waits for its
 * own. */
START_TEST(test_close_waits_for_its_own_downloads)
{
    put_pack("a.pack", 400);
    put_pack("b.pack", 400);
    server s = start_lighttpd();
    server p = start_proxy2(s.port, "--stall-after", "65536", "--stall-ms", "3000");
    char ua[300], ub[300], err[512];
    url_of(ua, sizeof(ua), &p, "a.pack");
    url_of(ub, sizeof(ub), &s, "b.pack");
    feeder_dataset *a, *b;
    ck_assert_msg(feeder_dataset_open_shards(ua, NULL, &a, err, sizeof(err)) == 0, "%s", err);
    double t0 = now_s();
    uint64_t first = 0;
    ck_assert_msg(feeder__shards_ensure(a->pack, &first, 1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_ptr_nonnull(a->pack->shards->stream[0]); /* its download runs, held */
    ck_assert_msg(feeder_dataset_open_shards(ub, NULL, &b, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(feeder__shards_ensure(b->pack, &first, 1, err, sizeof(err)) == 0, "%s", err);
    feeder_dataset_destroy(b);
    double closed_b = now_s() - t0;
    ck_assert_msg(closed_b < 2.0, "b's close took %.2f s: it waited for a's download", closed_b);
    ck_assert_int_eq(cache_files("-b.pack.meta"), 1); /* b's own download ended whole */
    feeder_dataset_destroy(a);
    ck_assert_double_ge(now_s() - t0, 2.5); /* a's close waited for a's download */
    ck_assert_int_eq(cache_files("-a.pack.meta"), 1);
    expect_no_partial_copies();
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* The same with the shard in chunks (FEEDER_REMOTE_PART_BYTES 65536, two
 * lanes): the records arrive as their chunks do, all of them right, and
 * the loader's batches (2 workers, both reading the one download) are the
 * local file's. */
START_TEST(test_stream_chunks)
{
    put_pack("a.pack", 400);
    setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
    setenv("FEEDER_REMOTE_PARTS", "2", 1);
    server s = start_lighttpd();
    server p = start_proxy2(s.port, "--stall-after", "32768", "--stall-ms", "200");
    char url[300], local[400], err[512], msg[1024];
    url_of(url, sizeof(url), &p, "a.pack");
    www(local, sizeof(local), "a.pack");
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_open_shards(local, NULL, &l, err, sizeof(err)), 0);
    uint64_t nl, nr;
    int rc;
    uint32_t cl = epoch_crc_workers(l, 2, &nl, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t cr = epoch_crc_workers(r, 2, &nr, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(nr, 400);
    ck_assert_uint_eq(cl, cr);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack -"), 0); /* chunks only */
    ck_assert_int_ge(count_lines(proxy_log(), "GET /a.pack bytes="), 1 + 1 + 4);
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    expect_no_partial_copies();
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* One epoch of the shard set `path` (2 workers, shuffled): its checksum,
 * and the samples in *n. */
static uint32_t shards_crc(const char *path, uint64_t *n)
{
    feeder_dataset *ds;
    char err[512], msg[1024];
    int rc;
    ck_assert_msg(feeder_dataset_open_shards(path, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    uint32_t crc = epoch_crc_workers(ds, 2, n, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    feeder_dataset_destroy(ds);
    return crc;
}

/* The bytes each stripe of a striped copy holds: chunk i in stripe i % n,
 * the short last chunk's bytes counted where it lies. */
START_TEST(test_stripe_bytes)
{
    ck_assert_uint_eq(feeder__stripe_bytes(1000, 100, 1, 0), 1000);
    ck_assert_uint_eq(feeder__stripe_bytes(1000, 100, 1, 1), 0);
    /* 10 chunks in 3 stripes: 0 3 6 9 | 1 4 7 | 2 5 8 */
    ck_assert_uint_eq(feeder__stripe_bytes(1000, 100, 3, 0), 400);
    ck_assert_uint_eq(feeder__stripe_bytes(1000, 100, 3, 1), 300);
    ck_assert_uint_eq(feeder__stripe_bytes(1000, 100, 3, 2), 300);
    /* 950 bytes: chunk 9 is 50 bytes, in stripe 0 */
    ck_assert_uint_eq(feeder__stripe_bytes(950, 100, 3, 0), 350);
    ck_assert_uint_eq(feeder__stripe_bytes(950, 100, 3, 1), 300);
    /* 870 bytes: 9 chunks, the last (8, 70 bytes) in stripe 2 */
    ck_assert_uint_eq(feeder__stripe_bytes(870, 100, 3, 2), 270);
    ck_assert_uint_eq(feeder__stripe_bytes(870, 100, 3, 0) + feeder__stripe_bytes(870, 100, 3, 1) +
                          feeder__stripe_bytes(870, 100, 3, 2), 870);
    /* more stripes than chunks: the extra ones hold nothing */
    ck_assert_uint_eq(feeder__stripe_bytes(150, 100, 4, 1), 50);
    ck_assert_uint_eq(feeder__stripe_bytes(150, 100, 4, 3), 0);
}
END_TEST

/* A shard set's pack of at least two chunks a lane, fetched by 3 lanes
 * (PARTS 3), is kept as 3 stripes, a file a lane, under a name of its own
 * (one of fewer chunks stays one file): the batches
 * (2 workers, while it arrives and again from the whole copy) are the
 * local file's; the stripes put together by the rule are the server's file
 * byte for byte; lookup and peek read it; the same URL opened as one packed
 * file meanwhile (a copy read with pread) gets a one-file copy of its own
 * at once, not a wait on the striped one; a copy missing a stripe is
 * fetched again; offline the set opens from the stripes; eviction removes
 * every stripe; a dead download's stripes are swept. */
START_TEST(test_stream_stripes)
{
    size_t size = put_pack("a.pack", 600);
    ck_assert_uint_gt(size, 5 * 65536); /* 6 chunks or more: 2 a lane */
    size_t small = put_pack("b.pack", 200);
    ck_assert_uint_gt(small, 65536);
    ck_assert_uint_le(small, 5 * 65536);
    setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
    setenv("FEEDER_REMOTE_PARTS", "3", 1);
    server s = start_lighttpd();
    char url[300], local[400], err[512], msg[1024], name[700];
    url_of(url, sizeof(url), &s, "a.pack");
    www(local, sizeof(local), "a.pack");
    size_t len;
    uint8_t *want = read_all(local, &len);
    uint64_t nr;
    uint32_t cl = shards_crc(local, &nr);
    ck_assert_uint_eq(nr, 600);
    feeder_dataset *r;
    int rc;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    for (int pass = 0; pass < 2; pass++) { /* arriving, then whole */
        uint32_t cr = epoch_crc_workers(r, 2, &nr, &rc, msg, sizeof(msg));
        ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
        ck_assert_uint_eq(nr, 600);
        ck_assert_uint_eq(cl, cr);
    }
    feeder_dataset_destroy(r);
    expect_no_partial_copies();

    /* Three files, each of its stripe's size, put together by the rule. */
    feeder__cache_name(cachedir, url, FEEDER__GET_STRIPED, name, sizeof(name));
    char plain[700];
    feeder__cache_name(cachedir, url, 0, plain, sizeof(plain));
    ck_assert_str_ne(name, plain);
    uint8_t *st[3];
    size_t sl[3];
    for (uint32_t j = 0; j < 3; j++) {
        char p[800];
        if (j)
            snprintf(p, sizeof(p), "%s.s%u", name, j);
        st[j] = read_all(j ? p : name, &sl[j]);
        ck_assert_uint_eq(sl[j], feeder__stripe_bytes(len, 65536, 3, j));
    }
    ck_assert_int_eq(cache_files("-a.pack.s3"), 0);
    char ub[300];
    url_of(ub, sizeof(ub), &s, "b.pack");
    shards_crc(ub, &nr);
    ck_assert_uint_eq(nr, 200);
    ck_assert_int_eq(cache_files("-b.pack.meta"), 1);
    ck_assert_int_eq(cache_files("-b.pack.s"), 0); /* fewer than 6 chunks: one file */
    for (size_t off = 0; off < len; off += 65536) {
        size_t i = off / 65536, n = len - off < 65536 ? len - off : 65536;
        ck_assert_int_eq(memcmp(st[i % 3] + i / 3 * 65536, want + off, n), 0);
    }
    for (uint32_t j = 0; j < 3; j++)
        free(st[j]);
    char meta[800];
    snprintf(meta, sizeof(meta), "%s.meta", name);
    size_t ml;
    char *mt = (char *)read_all(meta, &ml);
    ck_assert_ptr_nonnull(strstr(mt, "\nstripes 3 65536\n"));
    free(mt);

    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    feeder__remote_meta m;
    ck_assert_int_eq(feeder__cache_lookup(&c, url, FEEDER__GET_STRIPED, &m), 0);
    ck_assert_uint_eq(m.size, len);
    ck_assert_int_eq(feeder__cache_lookup(&c, url, 0, &m), -ENOENT); /* kept apart */
    uint8_t span[3 * 65536];
    ck_assert_int_eq(feeder__cache_peek(&c, url, FEEDER__GET_STRIPED, 65536 - 100, span,
                                        sizeof(span)), (long)sizeof(span));
    ck_assert_int_eq(memcmp(span, want + 65536 - 100, sizeof(span)), 0);
    ck_assert_int_eq(feeder__cache_peek(&c, url, FEEDER__GET_STRIPED, len - 10, span, 100), 10);
    ck_assert_int_eq(memcmp(span, want + len - 10, 10), 0);

    /* A stripe gone from the folder: no whole copy, fetched again. */
    char s2[800];
    snprintf(s2, sizeof(s2), "%s.s2", name);
    ck_assert_int_eq(unlink(s2), 0);
    ck_assert_int_eq(feeder__cache_lookup(&c, url, FEEDER__GET_STRIPED, &m), -ENOENT);
    ck_assert_uint_eq(shards_crc(url, &nr), cl);
    ck_assert_int_eq(feeder__cache_lookup(&c, url, FEEDER__GET_STRIPED, &m), 0);

    /* Held by a shard set (a shared lock on the striped copy), the URL
     * opened as one packed file: a copy of its own, no wait. */
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    uint64_t first = 0;
    ck_assert_int_eq(feeder__shards_ensure(r->pack, &first, 1, err, sizeof(err)), 0);
    ck_assert_int_ge(r->pack->shards->lock_fd[0], 0);
    setenv("FEEDER_CACHE_LOCK_TIMEOUT_MS", "2000", 1);
    feeder_dataset *whole;
    double t0 = now_s();
    ck_assert_msg(feeder_dataset_open_packed(url, &whole, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_lt(now_s() - t0, 1.5);
    unsetenv("FEEDER_CACHE_LOCK_TIMEOUT_MS");
    ck_assert_uint_eq(whole->pack->map_len, len);
    ck_assert_int_eq(memcmp(whole->pack->map, want, len), 0);
    ck_assert_int_eq(feeder__cache_lookup(&c, url, 0, &m), 0);
    feeder_dataset_destroy(whole);
    feeder_dataset_destroy(r);

    /* Offline, from the stripes alone. */
    stop(&s, SIGTERM);
    setenv("FEEDER_REMOTE_OFFLINE", "1", 1);
    ck_assert_uint_eq(shards_crc(url, &nr), cl);
    unsetenv("FEEDER_REMOTE_OFFLINE");

    /* Landed stripes of no whole copy (a crash cut an eviction or a
     * landing) are swept under their copy's lock; those of a whole copy
     * stay, and so do one whose copy someone holds and one that no copy of
     * the cache's ever had (no lock file). */
    char cut[700], cut_s1[800], cut_lock[800], held_s1[800], held_lock[800], stray[800];
    snprintf(cut, sizeof(cut), "%s/00000000000000aa-cut.pack", cachedir);
    snprintf(cut_s1, sizeof(cut_s1), "%s.s1", cut);
    snprintf(cut_lock, sizeof(cut_lock), "%s.lock", cut);
    snprintf(held_s1, sizeof(held_s1), "%s/00000000000000bb-held.pack.s3", cachedir);
    snprintf(held_lock, sizeof(held_lock), "%s/00000000000000bb-held.pack.lock", cachedir);
    snprintf(stray, sizeof(stray), "%s/00000000000000cc-stray.pack.s2", cachedir);
    const char *made[] = {cut, cut_s1, cut_lock, held_s1, held_lock, stray};
    for (size_t k = 0; k < sizeof(made) / sizeof(made[0]); k++)
        ck_assert_int_eq(bu_write_file(made[k], "x", 1), 0);
    int hold = open(held_lock, O_RDWR);
    ck_assert_int_eq(flock(hold, LOCK_SH), 0);
    feeder__cache_sweep(cachedir);
    ck_assert_int_eq(access(cut_s1, F_OK), -1);
    ck_assert_int_eq(access(cut, F_OK), 0); /* a data file without its .meta: refetched over */
    ck_assert_int_eq(access(held_s1, F_OK), 0);
    ck_assert_int_eq(access(stray, F_OK), 0);
    ck_assert_int_eq(access(s2, F_OK), 0);
    ck_assert_int_eq(feeder__cache_lookup(&c, url, FEEDER__GET_STRIPED, &m), 0);
    close(hold);
    feeder__cache_sweep(cachedir);
    ck_assert_int_eq(access(held_s1, F_OK), -1); /* no longer held */
    for (size_t k = 0; k < sizeof(made) / sizeof(made[0]); k++)
        unlink(made[k]);

    /* A dead download's partial stripes are swept; eviction takes every
     * stripe of a copy. */
    char dead[800];
    snprintf(dead, sizeof(dead), "%s.tmp.999999999.0.s2", name);
    ck_assert_int_eq(bu_write_file(dead, "x", 1), 0);
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, dead, old, 0), 0);
    feeder__cache_sweep(cachedir);
    ck_assert_int_eq(cache_files(".tmp."), 0);
    c.max_bytes = 1;
    feeder__cache_evict(&c, 0, "");
    ck_assert_int_eq(cache_files("-b.pack"), 1); /* its .lock */
    ck_assert_int_eq(cache_files("-a.pack"), 2); /* the two .lock files */
    ck_assert_int_eq(cache_files("-a.pack.lock"), 2);
    feeder__cache_close(&c);
    free(want);
    unsetenv("FEEDER_REMOTE_PART_BYTES");
    unsetenv("FEEDER_REMOTE_PARTS");
}
END_TEST

/* The server drops every body after 100,000 bytes: the records that came
 * may be read, the others' wait ends with the download's error (naming the
 * URL and its attempts) instead of hanging; nothing partial stays. The same
 * with chunks answered short (206 with fewer bytes than asked, a
 * Content-Length to match): an error naming the bytes that came. */
START_TEST(test_stream_dropped)
{
    put_pack("a.pack", 400);
    setenv("FEEDER_REMOTE_RETRIES", "1", 1);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--cut-after", "100000");
    char url[300], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    uint64_t last = 399;
    double t0 = now_s();
    ck_assert_int_eq(feeder__shards_ensure(ds->pack, &last, 1, err, sizeof(err)),
                     FEEDER_EREMOTE);
    ck_assert_double_lt(now_s() - t0, 10.0);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "(2 attempts)"), "%s", err);
    feeder_dataset_destroy(ds);
    expect_no_partial_copies();
    ck_assert_int_eq(cache_files("-a.pack.meta"), 0);
    stop(&p, SIGKILL);

    setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
    setenv("FEEDER_REMOTE_PARTS", "2", 1);
    p = start_proxy(s.port, "--short-by", "100");
    url_of(url, sizeof(url), &p, "a.pack");
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder__shards_ensure(ds->pack, &last, 1, err, sizeof(err)),
                     FEEDER_EREMOTE);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "arrived of the 65536 asked for"),
                  "%s", err);
    feeder_dataset_destroy(ds);
    expect_no_partial_copies();
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* The shard replaced on the server after open: not one byte of the new one
 * reaches a reader (the answer's size is checked before its body is
 * written); FEEDER_ECHECKSUM naming the URL, whole or in chunks. */
START_TEST(test_stream_changed)
{
    put_pack("a.pack", 400);
    server s = start_lighttpd();
    char url[300], err[512];
    url_of(url, sizeof(url), &s, "a.pack");
    for (int chunks = 0; chunks < 2; chunks++) {
        if (chunks) {
            setenv("FEEDER_REMOTE_PART_BYTES", "65536", 1);
            setenv("FEEDER_REMOTE_PARTS", "2", 1);
        }
        put_pack("a.pack", 400);
        feeder_dataset *ds;
        ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s",
                      err);
        put_pack("a.pack", 410);
        uint64_t first = 0;
        ck_assert_int_eq(feeder__shards_ensure(ds->pack, &first, 1, err, sizeof(err)),
                         FEEDER_ECHECKSUM);
        ck_assert_msg(strstr(err, url) == err && strstr(err, "the shard changed on the server"),
                      "%s", err);
        feeder_dataset_destroy(ds);
        ck_assert_int_eq(cache_files(".progress"), 0);
        ck_assert_int_eq(cache_files(".tmp."), 0);
    }
    stop(&s, SIGTERM);
}
END_TEST

/* The process downloading a shard is killed while another reads it as it
 * arrives: the reader sees the download's lock let go without an answer,
 * gets the shard again (its own download, which marks the dead one's
 * progress record abandoned) and reads every record right. */
START_TEST(test_stream_downloader_dies)
{
    put_pack("a.pack", 400);
    server s = start_lighttpd();
    server p = start_proxy2(s.port, "--stall-after", "65536", "--stall-ms", "1500");
    char url[300], local[400], err[512];
    url_of(url, sizeof(url), &p, "a.pack");
    www(local, sizeof(local), "a.pack");
    size_t len;
    uint8_t *want = read_all(local, &len);
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t kid = fork();
    ck_assert_int_ge(kid, 0);
    if (kid == 0) {
        feeder_dataset *ds;
        uint64_t first = 0;
        int ok = feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0 &&
                 feeder__shards_ensure(ds->pack, &first, 1, err, sizeof(err)) == 0;
        ck_assert_int_eq(write(go[1], ok ? "y" : "n", 1), 1);
        pause();
        _exit(0);
    }
    close(go[1]);
    char c = 0;
    ck_assert_int_eq(read(go[0], &c, 1), 1);
    close(go[0]);
    ck_assert_int_eq(c, 'y');
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    uint64_t first = 0, last = 399;
    ck_assert_msg(feeder__shards_ensure(ds->pack, &first, 1, err, sizeof(err)) == 0, "%s", err);
    ck_assert_ptr_nonnull(ds->pack->shards->stream[0]); /* the other process's download */
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    ck_assert_msg(feeder__shards_ensure(ds->pack, &last, 1, err, sizeof(err)) == 0, "%s", err);
    assert_record(ds, want, 0);
    assert_record(ds, want, 399);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /a.pack -"), 2);
    feeder_dataset_destroy(ds);
    ck_assert_int_eq(cache_files(".progress"), 0);
    ck_assert_int_eq(cache_files("-a.pack.meta"), 1);
    free(want);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* A shards dataset from s3rver: signed range requests for the headers and
 * indices of s3://bkt/s-{0..3}.pack, then signed whole downloads by two
 * workers: the local shards' batches. */
START_TEST(test_s3_shards)
{
    put_shards();
    server s = start_s3rver();
    for (int k = 0; k < 4; k++) {
        char local[400], name[32], key[64];
        snprintf(name, sizeof(name), "s-%d.pack", k);
        snprintf(key, sizeof(key), "d/s-%d.pack", k);
        www(local, sizeof(local), name);
        s3_put(&s, local, key);
    }
    s3_env(&s, "S3RVER");
    char pat[400], err[512], msg[1024];
    snprintf(pat, sizeof(pat), "%s/s-{0..3}.pack", docroot);
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_shards("s3://bkt/d/s-{0..3}.pack", NULL, &r, err,
                                             sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &l, err, sizeof(err)), 0);
    ck_assert_int_eq(cache_files(".pack.meta"), 0);
    uint64_t nr, nl;
    int rc;
    uint32_t cr = epoch_crc_workers(r, 2, &nr, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t cl = epoch_crc_workers(l, 2, &nl, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(nr, 85);
    ck_assert_uint_eq(cr, cl);
    ck_assert_int_eq(cache_files(".pack.meta"), 4);
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    stop(&s, SIGTERM);
}
END_TEST

/* ---- tar shards from URLs ---- */

static const int TAR_N[4] = {5, 3, 4, 2};

/* Four WebDataset tar shards (JPEG + .cls per key) in the document root,
 * made by GNU tar from files the test writes. */
static void put_tars(void)
{
    bu_photos *photos;
    char err[256], p[700], cmd[1600];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
    for (int s = 0, n = 0; s < 4; s++) {
        snprintf(p, sizeof(p), "%s/src/s%d", tmpdir, s);
        ck_assert_int_eq(bu_mkdirs(p), 0);
        for (int i = 0; i < TAR_N[s]; i++, n++) {
            uint8_t *j;
            size_t len;
            ck_assert_int_eq(bu_make_jpeg(photos, (unsigned)n, 40 + (unsigned)n * 7 % 30,
                                          36 + (unsigned)n * 5 % 20, 85, -1, (unsigned)n, &j,
                                          &len), 0);
            snprintf(p, sizeof(p), "%s/src/s%d/%04d.jpg", tmpdir, s, n);
            ck_assert_int_eq(bu_write_file(p, j, len), 0);
            free(j);
            char lab[8];
            snprintf(lab, sizeof(lab), "%d", n % 3);
            snprintf(p, sizeof(p), "%s/src/s%d/%04d.cls", tmpdir, s, n);
            ck_assert_int_eq(bu_write_file(p, lab, strlen(lab)), 0);
        }
        snprintf(cmd, sizeof(cmd), "tar -C %s/src --sort=name -cf %s/s-%d.tar s%d", tmpdir,
                 docroot, s, s);
        ck_assert_int_eq(system(cmd), 0);
    }
    bu_photos_free(photos);
}

/* Two epochs of decoded batches (32x32), every byte, labels and indices. */
static uint32_t tar_epochs(feeder_dataset *ds, int workers, uint64_t *samples, int *rc_out,
                           char *msg, size_t msglen)
{
    feeder_loader *ld = tu_small_loader(ds, workers, 4);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
    uint32_t crc = 0;
    int rc = FEEDER_DONE;
    *samples = 0;
    for (uint64_t epoch = 0; epoch < 2 && rc == FEEDER_DONE; epoch++) {
        ck_assert_int_eq(feeder_loader_set_epoch(ld, epoch), 0);
        feeder_batch *b;
        while ((rc = feeder_next(ld, &b)) == 0) {
            crc = feeder__crc32c(crc, b->data, (size_t)b->count * b->sample_bytes);
            crc = feeder__crc32c(crc, b->labels, b->count * sizeof(int64_t));
            crc = feeder__crc32c(crc, b->indices, b->count * sizeof(uint64_t));
            *samples += b->count;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
    }
    *rc_out = rc;
    snprintf(msg, msglen, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return crc;
}

static void assert_same_samples(const feeder_dataset *a, const feeder_dataset *b)
{
    ck_assert_uint_eq(a->n, 14);
    ck_assert_uint_eq(b->n, 14);
    ck_assert_uint_eq(a->num_classes, 3);
    ck_assert_uint_eq(b->num_classes, 3);
    ck_assert_uint_eq(a->fingerprint, b->fingerprint);
    for (uint64_t i = 0; i < 14; i++) {
        const char *ka, *kb;
        uint64_t oa, ob, za, zb;
        ck_assert_int_eq(feeder_dataset_tar_sample(a, i, NULL, &ka, &oa, &za, NULL), 0);
        ck_assert_int_eq(feeder_dataset_tar_sample(b, i, NULL, &kb, &ob, &zb, NULL), 0);
        char want[32];
        snprintf(want, sizeof(want), "s%d/%04d", i < 5 ? 0 : i < 8 ? 1 : i < 12 ? 2 : 3, (int)i);
        ck_assert_str_eq(ka, want);
        ck_assert_str_eq(kb, want);
        ck_assert_uint_eq(oa, ob);
        ck_assert_uint_eq(za, zb);
        ck_assert_int_eq(a->labels[i], (int64_t)(i % 3));
        ck_assert_int_eq(b->labels[i], (int64_t)(i % 3));
    }
}

/* A brace range of tar shard URLs through feeder_dataset_open_shards: with
 * no <url>.idx on the server open downloads each shard whole into the cache
 * and walks it; the batches (0 and 2 workers, two epochs) are byte for byte
 * the local shards'. Then, with <shard>.idx files beside them on the server
 * (the local open wrote them) and an empty cache, open fetches only the
 * indexes and each shard is downloaded once (the default options: by a
 * worker or the fetch thread, one shard ahead). */
START_TEST(test_tar_shards_http)
{
    put_tars();
    server s = start_lighttpd();
    char pat_local[400], pat_url[300], err[512], msg[1024];
    snprintf(pat_local, sizeof(pat_local), "%s/s-{0..3}.tar", docroot);
    snprintf(pat_url, sizeof(pat_url), "http://127.0.0.1:%d/s-{0..3}.tar", s.port);
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_shards(pat_url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(cache_files(".tar.meta"), 4);
    ck_assert_int_eq(cache_files(".tar.idx"), 4);
    feeder_tar_info ti;
    ck_assert_int_eq(feeder_dataset_tar_info(r, &ti), 0);
    ck_assert_uint_eq(ti.shards, 4);
    ck_assert_uint_eq(ti.indexes_written, 4);
    ck_assert_uint_eq(ti.indexes_cached, 0);
    ck_assert_msg(feeder_dataset_open_tar_pattern(pat_local, &l, err, sizeof(err)) == 0, "%s",
                  err);
    assert_same_samples(l, r);
    uint64_t nl, nr, n0;
    int rc;
    uint32_t cl = tar_epochs(l, 2, &nl, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t cr = tar_epochs(r, 2, &nr, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t c0 = tar_epochs(r, 0, &n0, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(nl, 28);
    ck_assert_uint_eq(nr, 28);
    ck_assert_uint_eq(n0, 28);
    ck_assert_uint_eq(cl, cr);
    ck_assert_uint_eq(cl, c0);
    feeder_dataset_destroy(r);

    bu_rm_rf(cachedir);
    feeder_shard_options so = {0};
    char dir2[280];
    snprintf(dir2, sizeof(dir2), "%s/cache2", tmpdir);
    so.cache_dir = dir2;
    ck_assert_msg(feeder_dataset_open_shards(pat_url, &so, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(feeder_dataset_tar_info(r, &ti), 0);
    ck_assert_uint_eq(ti.indexes_cached, 4);
    assert_same_samples(l, r);
    snprintf(cachedir, sizeof(cachedir), "%s", dir2);
    ck_assert_int_eq(cache_files(".tar.meta"), 0); /* no shard downloaded at open */
    ck_assert_uint_eq(tar_epochs(r, 2, &nr, &rc, msg, sizeof(msg)), cl);
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_int_eq(cache_files(".tar.meta"), 4);
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "GET /s-%d.tar HTTP/1.1\" 200", k);
        ck_assert_int_eq(count_lines(log, want), 2); /* once per cache */
        snprintf(want, sizeof(want), "GET /s-%d.tar.idx HTTP/1.1\" 404", k);
        ck_assert_int_eq(count_lines(log, want), 1);
        snprintf(want, sizeof(want), "GET /s-%d.tar.idx HTTP/1.1\" 200", k);
        ck_assert_int_eq(count_lines(log, want), 1);
    }
}
END_TEST

/* Tar shards read as they arrive: through a proxy that stalls every body
 * after its first 2 KiB, with the shards' .idx published (open downloads
 * no shard), the workers read members of shards still downloading (their
 * own, the other worker's, or the default fetch thread's); the batches are
 * the local shards', and each shard is downloaded once. */
START_TEST(test_stream_tar)
{
    put_tars();
    server s = start_lighttpd();
    char pat_local[400], pat_url[300], err[512], msg[1024];
    snprintf(pat_local, sizeof(pat_local), "%s/s-{0..3}.tar", docroot);
    feeder_dataset *r, *l;
    ck_assert_msg(feeder_dataset_open_tar_pattern(pat_local, &l, err, sizeof(err)) == 0, "%s",
                  err); /* writes each shard's .idx beside it */
    server p = start_proxy2(s.port, "--stall-after", "2048", "--stall-ms", "300");
    snprintf(pat_url, sizeof(pat_url), "http://127.0.0.1:%d/s-{0..3}.tar", p.port);
    ck_assert_msg(feeder_dataset_open_shards(pat_url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(cache_files(".tar.meta"), 0);
    uint64_t nl, nr;
    int rc;
    uint32_t cl = tar_epochs(l, 2, &nl, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    uint32_t cr = tar_epochs(r, 2, &nr, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(nr, 28);
    ck_assert_uint_eq(cl, cr);
    feeder_dataset_destroy(r);
    feeder_dataset_destroy(l);
    ck_assert_int_eq(cache_files(".tar.meta"), 4);
    expect_no_partial_copies();
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "GET /s-%d.tar -", k);
        ck_assert_int_eq(count_lines(proxy_log(), want), 1); /* one download each */
    }
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* A tar shard URL that is missing, one that is no tar, one changed on the
 * server after open (the worker's download is FEEDER_ECHECKSUM naming the
 * URL), and a pattern mixing tars and packs. */
START_TEST(test_tar_shards_faults)
{
    put_tars();
    server s = start_lighttpd();
    char pat[300], url[300], err[1024], want[1400], msg[1024], p[400];
    feeder_dataset *ds = NULL;
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..4}.tar", s.port);
    url_of(url, sizeof(url), &s, "s-4.tar");
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    snprintf(want, sizeof(want), "%s: HTTP 404 (1 attempt)", url);
    ck_assert_str_eq(err, want);
    www(p, sizeof(p), "s-4.tar");
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 2048; i++)
        fputc('x', f);
    fclose(f);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)),
                     FEEDER_EDATASET);
    ck_assert_msg(!strncmp(err, url, strlen(url)), "%s", err);
    ck_assert_ptr_null(ds);

    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.tar", s.port);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), 0);
    /* s-1's cached copy goes (a worker downloads it again), and s-1 is
     * another file on the server now. */
    char cmd[2400];
    snprintf(cmd, sizeof(cmd), "rm %s/*-s-1.tar %s/*-s-1.tar.meta && tar -C %s/src --sort=name "
             "-cf %s/s-1.new s1 s0 && mv %s/s-1.new %s/s-1.tar", cachedir, cachedir, tmpdir,
             docroot, docroot, docroot);
    ck_assert_int_eq(system(cmd), 0);
    uint64_t n;
    int rc;
    tar_epochs(ds, 2, &n, &rc, msg, sizeof(msg));
    ck_assert_int_eq(rc, FEEDER_ECHECKSUM);
    url_of(url, sizeof(url), &s, "s-1.tar");
    ck_assert_msg(strstr(msg, url) && strstr(msg, "the shard changed on the server"), "%s", msg);
    feeder_dataset_destroy(ds);

    /* Indexes on the server, one of them damaged: open takes the three
     * good ones, walks s-0 downloaded whole; then, the server killed, a
     * worker's download of another shard fails naming its URL. */
    bu_rm_rf(cachedir);
    feeder_dataset *l;
    snprintf(p, sizeof(p), "%s/s-{0..3}.tar", docroot);
    ck_assert_msg(feeder_dataset_open_tar_pattern(p, &l, err, sizeof(err)) == 0, "%s", err);
    feeder_dataset_destroy(l);
    www(p, sizeof(p), "s-0.tar.idx");
    f = fopen(p, "r+");
    ck_assert_ptr_nonnull(f);
    fseek(f, 70, SEEK_SET);
    fputc('!', f);
    fclose(f);
    setenv("FEEDER_REMOTE_RETRIES", "1", 1); /* read at open */
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), 0);
    feeder_tar_info ti;
    ck_assert_int_eq(feeder_dataset_tar_info(ds, &ti), 0);
    ck_assert_uint_eq(ti.indexes_cached, 3);
    ck_assert_uint_eq(ti.indexes_written, 1);
    ck_assert_int_eq(cache_files(".tar.meta"), 1);
    stop(&s, SIGKILL);
    tar_epochs(ds, 2, &n, &rc, msg, sizeof(msg));
    ck_assert_int_eq(rc, FEEDER_EREMOTE);
    ck_assert_msg(strstr(msg, "http://127.0.0.1:") && strstr(msg, ".tar: ") &&
                  strstr(msg, "(2 attempts)"), "%s", msg);
    feeder_dataset_destroy(ds);

    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/{s-0.tar,s-0.pack}", s.port);
    ck_assert_int_eq(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)), FEEDER_EINVAL);
    snprintf(want, sizeof(want), "http://127.0.0.1:%d/s-0.tar is a tar shard and "
             "http://127.0.0.1:%d/s-0.pack a pack: one pattern names tar shards (.tar) or "
             "packs, not both", s.port, s.port);
    ck_assert_str_eq(err, want);
}
END_TEST

/* Tar shard URLs with <shard>.idx files beside them on the server (a local
 * open writes them), so that open downloads no shard; `l` is the local set. */
static void tar_with_server_idx(feeder_dataset **l)
{
    put_tars();
    char pat_local[400], err[512];
    snprintf(pat_local, sizeof(pat_local), "%s/s-{0..3}.tar", docroot);
    ck_assert_msg(feeder_dataset_open_tar_pattern(pat_local, l, err, sizeof(err)) == 0, "%s",
                  err);
}

/* fetch_ahead for tar shards, as for packs: with one worker, batches of two
 * and both slots held, the workers need only s-0 (samples 0-3); the fetch
 * threads download s-1 too with 1, all four shards with 4, before any
 * worker asks for them, and none with FEEDER_FETCH_AHEAD_NONE; each once
 * per run (the access log). With 1 and with 4, the
 * batches of two shuffled epochs are then the local shards', byte for
 * byte. */
START_TEST(test_tar_fetch_ahead)
{
    feeder_dataset *l;
    tar_with_server_idx(&l);
    server s = start_lighttpd();
    char pat[300], err[512], msg[1024];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.tar", s.port);
    const uint32_t aheads[3] = {FEEDER_FETCH_AHEAD_NONE, 1, 4};
    const int cached[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        bu_rm_rf(cachedir);
        feeder_shard_options opt = {.fetch_ahead = aheads[k]};
        feeder_dataset *ds;
        ck_assert_msg(feeder_dataset_open_shards(pat, &opt, &ds, err, sizeof(err)) == 0, "%s",
                      err);
        ck_assert_int_eq(cache_files(".tar.meta"), 0);
        feeder_batch *b[2];
        feeder_loader *ld = loader_both_held(ds, NULL, 2, b);
        ck_assert_uint_eq(b[1]->indices[1], 3);
        for (int i = 0; i < 300 && cache_files(".tar.meta") < cached[k]; i++)
            usleep(10000);
        usleep(200000);
        ck_assert_int_eq(cache_files(".tar.meta"), cached[k]);
        /* Destroyed with both batches held: a release would hand the worker
         * batch 2 (s-1), and whether its download reached the server's log
         * before the destroy killed it would be a race (it did once, under
         * ASan). */
        feeder_loader_destroy(ld);
        if (aheads[k] != FEEDER_FETCH_AHEAD_NONE) {
            uint64_t nl, nr;
            int rc;
            uint32_t cl = tar_epochs(l, 2, &nl, &rc, msg, sizeof(msg));
            ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
            uint32_t cr = tar_epochs(ds, 2, &nr, &rc, msg, sizeof(msg));
            ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
            ck_assert_uint_eq(nr, 28);
            ck_assert_uint_eq(cr, cl);
        }
        feeder_dataset_destroy(ds);
    }
    feeder_dataset_destroy(l);
    char log[400];
    snprintf(log, sizeof(log), "%s/access.log", tmpdir);
    stop(&s, SIGTERM);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof(want), "GET /s-%d.tar HTTP/1.1\" 200", k);
        /* s-0 in the three runs; the others fetched ahead or read by the
         * epochs of the last two */
        ck_assert_int_eq(count_lines(log, want), k ? 2 : 3);
    }
}
END_TEST

/* Destroyed mid-fetch: through a proxy that holds every response 1 s, one
 * fetch thread (fetch_ahead 1) and the calling thread reading: the first
 * batch waits for s-0, which the thread fetches, and the thread is then
 * fetching s-1 (one shard ahead) and not s-2. Destroying the loader and the
 * dataset then leaves no fetch thread (remote/ahead.c names them
 * "feeder-ahead"), no temporary file, and whole copies only. */
START_TEST(test_tar_fetch_ahead_stop)
{
    feeder_dataset *l;
    tar_with_server_idx(&l);
    feeder_dataset_destroy(l);
    server s = start_lighttpd();
    server p = start_proxy(s.port, "--delay-ms", "1000");
    char pat[300], err[512];
    snprintf(pat, sizeof(pat), "http://127.0.0.1:%d/s-{0..3}.tar", p.port);
    feeder_shard_options opt = {.fetch_ahead = 1};
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(pat, &opt, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(tu_threads_named("feeder-ahead"), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0), 0);
    feeder_batch *b;
    ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(b->indices[1], 1);
    feeder_batch_release(b, NULL);
    for (int i = 0; i < 500 && count_lines(proxy_log(), "GET /s-1.tar -") < 1; i++)
        usleep(10000); /* until s-1's request is at the proxy, which holds it 1 s */
    ck_assert_int_eq(count_lines(proxy_log(), "GET /s-1.tar -"), 1);
    ck_assert_int_eq(cache_files(".tar.meta"), 1);
    ck_assert_int_eq(tu_threads_named("feeder-ahead"), 1); /* one thread: fetch_ahead 1 */
    double t0 = now_s();
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    ck_assert_double_ge(now_s() - t0, 0.3); /* it waited for s-1's transfer */
    ck_assert_int_eq(tu_threads_named("feeder-ahead"), 0);
    ck_assert_int_eq(cache_files(".tmp."), 0);
    ck_assert_int_eq(cache_files(".tar.meta"), 2); /* s-0 and s-1, whole */
    ck_assert_int_eq(count_lines(proxy_log(), "GET /s-2.tar -"), 0);
    ck_assert_int_eq(count_lines(proxy_log(), "GET /s-3.tar -"), 0);
    stop(&p, SIGKILL);
    stop(&s, SIGTERM);
}
END_TEST

/* ---- https ---- */

/* A self-signed certificate for 127.0.0.1 made by the openssl CLI:
 * <tmpdir>/NAME.pem (certificate) and NAME.key. */
static void make_cert(const char *name)
{
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
             "/CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout %s/%s.key -out "
             "%s/%s.pem 2>/dev/null", tmpdir, name, tmpdir, name);
    ck_assert_int_eq(system(cmd), 0);
}

static server start_lighttpd_tls(void)
{
    char extra[1200];
    snprintf(extra, sizeof(extra), "server.modules += (\"mod_openssl\")\nssl.engine = "
             "\"enable\"\nssl.pemfile = \"%s/server.pem\"\nssl.privkey = \"%s/server.key\"\n",
             tmpdir, tmpdir);
    return start_lighttpd_with(extra);
}

/* Packs and tar shards over https from lighttpd with a certificate the test
 * made, its CA given by FEEDER_CA_FILE: 2 workers fetch the shards on
 * demand, each over its own TLS connections made after the fork (the parent
 * opened the set over TLS first), and the batches equal the local files'.
 * Without the CA, or with another one, open fails naming the URL. */
START_TEST(test_https)
{
    put_shards();
    put_tars();
    make_cert("server");
    make_cert("other");
    server s = start_lighttpd_tls();
    char pat_local[400], pat_url[300], err[1024], msg[1024], ca[400], url[300];
    snprintf(ca, sizeof(ca), "%s/server.pem", tmpdir);
    setenv("FEEDER_CA_FILE", ca, 1);
    feeder_dataset *l, *r;
    uint64_t nl, nr;
    int rc;
    for (int tar = 0; tar < 2; tar++) {
        const char *ext = tar ? "tar" : "pack";
        snprintf(pat_local, sizeof(pat_local), "%s/s-{0..3}.%s", docroot, ext);
        snprintf(pat_url, sizeof(pat_url), "https://127.0.0.1:%d/s-{0..3}.%s", s.port, ext);
        ck_assert_msg(feeder_dataset_open_shards(pat_local, NULL, &l, err, sizeof(err)) == 0,
                      "%s", err);
        ck_assert_msg(feeder_dataset_open_shards(pat_url, NULL, &r, err, sizeof(err)) == 0, "%s",
                      err);
        uint32_t cl = tar ? tar_epochs(l, 2, &nl, &rc, msg, sizeof(msg))
                          : epoch_crc_workers(l, 2, &nl, &rc, msg, sizeof(msg));
        ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
        uint32_t cr = tar ? tar_epochs(r, 2, &nr, &rc, msg, sizeof(msg))
                          : epoch_crc_workers(r, 2, &nr, &rc, msg, sizeof(msg));
        ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
        ck_assert_uint_eq(nl, tar ? 28 : 85);
        ck_assert_uint_eq(nr, nl);
        ck_assert_uint_eq(cr, cl);
        feeder_dataset_destroy(l);
        feeder_dataset_destroy(r);
    }
    ck_assert_int_eq(cache_files(".pack.meta"), 4);
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/s-0.pack", s.port);
    unsetenv("FEEDER_CA_FILE");
    setenv("CURL_CA_BUNDLE", ca, 1); /* the other variable that names it */
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &r, err, sizeof(err)) == 0, "%s", err);
    feeder_dataset_destroy(r);
    unsetenv("CURL_CA_BUNDLE");
    for (int k = 0; k < 2; k++) {
        snprintf(ca, sizeof(ca), "%s/other.pem", tmpdir);
        if (k)
            setenv("FEEDER_CA_FILE", ca, 1);
        else
            unsetenv("FEEDER_CA_FILE");
        ck_assert_int_eq(feeder_dataset_open_shards(url, NULL, &r, err, sizeof(err)),
                         FEEDER_EREMOTE);
        ck_assert_msg(!strncmp(err, url, strlen(url)) && strstr(err, "certificate") &&
                      strstr(err, "(1 attempt)"), "%s", err);
    }
    unsetenv("FEEDER_CA_FILE");
    stop(&s, SIGTERM);
}
END_TEST

#ifndef __SANITIZE_ADDRESS__ /* (see the suite below) */
/* One https range request (the first 4 KiB of s-0.pack); 0 when it came. */
static int fetch_page(const char *url)
{
    feeder__remote_cfg cfg;
    feeder__remote_defaults(&cfg);
    feeder__target t;
    char err[512];
    if (feeder__target_resolve(url, &t, err, sizeof(err)))
        return -1;
    uint8_t page[4096];
    feeder__request r = {.target = &t, .first = 0, .last = sizeof(page) - 1, .fd = -1,
                         .buf = page, .cap = sizeof(page)};
    int rc = feeder__remote_run(&cfg, &r, 1, err, sizeof(err));
    feeder__target_free(&t);
    return rc || r.len != sizeof(page) || memcmp(page, "FEEDPACK", 8) ? -1 : 0;
}

typedef struct busy {
    const char *url;
    atomic_int stop;
    int failed, done;
} busy;

static void *busy_main(void *arg)
{
    busy *b = arg;
    while (!atomic_load(&b->stop)) {
        b->failed += fetch_page(b->url) != 0;
        b->done++;
    }
    return NULL;
}

/* Forks while another thread runs https transfers back to back: each child
 * makes its own TLS transfer at once and finishes it (no lock of libcurl's
 * or OpenSSL's held by the parent's transfer thread at the fork is left
 * held in the child: remote/fetch.c's fork guard). */
START_TEST(test_fork_during_https)
{
    put_pack("s-0.pack", 4);
    make_cert("server");
    server s = start_lighttpd_tls();
    char ca[400], url[300];
    snprintf(ca, sizeof(ca), "%s/server.pem", tmpdir);
    setenv("FEEDER_CA_FILE", ca, 1);
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/s-0.pack", s.port);
    ck_assert_int_eq(fetch_page(url), 0);
    busy b = {url, 0, 0, 0};
    atomic_init(&b.stop, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, busy_main, &b), 0);
    for (int k = 0; k < 16; k++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
            _exit(fetch_page(url) == 0 ? 0 : 1);
        int st = -1;
        double t0 = now_s();
        while (waitpid(pid, &st, WNOHANG) == 0 && now_s() - t0 < 20.0)
            nanosleep(&ts, NULL);
        if (now_s() - t0 >= 20.0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            ck_abort_msg("fork %d: the child's https transfer hung", k);
        }
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d: the child's transfer "
                      "failed", k);
    }
    atomic_store(&b.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_eq(b.failed, 0);
    ck_assert_int_gt(b.done, 16);
    stop(&s, SIGTERM);
}
END_TEST
#endif

/* ---- a warm cache without the server ---- */

/* One epoch's batches (0 or 2 workers) of a pack or tar pattern; asserts
 * it opened and finished. */
static uint32_t open_and_run(const char *pat, int tar, int workers)
{
    char err[1024], msg[1024];
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    uint64_t n;
    int rc;
    uint32_t crc = tar ? tar_epochs(ds, workers, &n, &rc, msg, sizeof(msg))
                       : epoch_crc_workers(ds, workers, &n, &rc, msg, sizeof(msg));
    ck_assert_msg(rc == FEEDER_DONE, "%s", msg);
    ck_assert_uint_eq(n, tar ? 28 : 85);
    feeder_dataset_destroy(ds);
    return crc;
}

/* Packs and tar shards read once from lighttpd fill the cache; with the
 * server gone, opening them fails as before, and with
 * FEEDER_REMOTE_OFFLINE=1 it works from the cache alone and gives the same
 * batches (0 and 2 workers). Offline, a shard the cache lacks fails the
 * open naming the URL. */
START_TEST(test_offline)
{
    put_shards();
    put_tars();
    server s = start_lighttpd();
    char pat[2][300], err[1024], want[1400], url[300];
    uint32_t crc[2];
    for (int tar = 0; tar < 2; tar++) {
        snprintf(pat[tar], sizeof(pat[tar]), "http://127.0.0.1:%d/s-{0..3}.%s", s.port,
                 tar ? "tar" : "pack");
        crc[tar] = open_and_run(pat[tar], tar, 2);
    }
    stop(&s, SIGKILL);
    setenv("FEEDER_REMOTE_RETRIES", "0", 1);
    feeder_dataset *ds = NULL;
    for (int tar = 0; tar < 2; tar++) {
        unsetenv("FEEDER_REMOTE_OFFLINE");
        ck_assert_int_eq(feeder_dataset_open_shards(pat[tar], NULL, &ds, err, sizeof(err)),
                         FEEDER_EREMOTE);
        url_of(url, sizeof(url), &s, tar ? "s-0.tar" : "s-0.pack");
        ck_assert_msg(strstr(err, url) && strstr(err, "(1 attempt)"), "%s", err);
        setenv("FEEDER_REMOTE_OFFLINE", "1", 1);
        ck_assert_uint_eq(open_and_run(pat[tar], tar, 2), crc[tar]);
        ck_assert_uint_eq(open_and_run(pat[tar], tar, 0), crc[tar]);
    }
    char cmd[1000];
    snprintf(cmd, sizeof(cmd), "rm %s/*-s-2.pack.meta %s/*-s-3.tar", cachedir, cachedir);
    ck_assert_int_eq(system(cmd), 0);
    for (int tar = 0; tar < 2; tar++) {
        url_of(url, sizeof(url), &s, tar ? "s-3.tar" : "s-2.pack");
        ck_assert_int_eq(feeder_dataset_open_shards(pat[tar], NULL, &ds, err, sizeof(err)),
                         -ENOENT);
        snprintf(want, sizeof(want), "%s: FEEDER_REMOTE_OFFLINE=1 and the shard cache %s holds "
                 "no whole copy of it", url, cachedir);
        ck_assert_str_eq(err, want);
    }
    ck_assert_ptr_null(ds);
}
END_TEST

/* Everything but S3, or (s3 set) the S3 tests only: those need s3rver from
 * npm, which the main suite does not depend on. */
static Suite *remote_suite(int s3)
{
    Suite *s = suite_create("remote");
    TCase *tc = tcase_create("remote");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    if (s3) {
        tcase_add_test(tc, test_s3_open_packed);
        tcase_add_test(tc, test_s3_shards);
        suite_add_tcase(s, tc);
        return s;
    }
    tcase_add_test(tc, test_target_resolve);
    tcase_add_test(tc, test_http_open_packed);
    tcase_add_test(tc, test_http_404);
    tcase_add_test(tc, test_keep_alive);
    tcase_add_test(tc, test_download_settings);
    tcase_add_test(tc, test_download_parts);
    tcase_add_test(tc, test_download_parts_changed);
    tcase_add_test(tc, test_stream_read_early);
    tcase_add_test(tc, test_close_waits_for_its_own_downloads);
    tcase_add_test(tc, test_stream_chunks);
    tcase_add_test(tc, test_stripe_bytes);
    tcase_add_test(tc, test_stream_stripes);
    tcase_add_test(tc, test_stream_dropped);
    tcase_add_test(tc, test_stream_changed);
    tcase_add_test(tc, test_stream_downloader_dies);
    tcase_add_test(tc, test_stream_tar);
    tcase_add_test(tc, test_server_killed);
    tcase_add_test(tc, test_5xx_retried);
    tcase_add_test(tc, test_cut_mid_transfer);
    tcase_add_test(tc, test_slow_server);
    tcase_add_test(tc, test_changed_on_server);
    tcase_add_test(tc, test_cache_full);
    tcase_add_test(tc, test_cache_lru);
    tcase_add_test(tc, test_two_processes_fetch_once);
    tcase_add_test(tc, test_cache_race);
    tcase_add_test(tc, test_shards_http);
    tcase_add_test(tc, test_shards_reject);
    tcase_add_test(tc, test_shards_faults);
    tcase_add_test(tc, test_shards_fetch_ahead);
    tcase_add_test(tc, test_shards_fetch_ahead_then_run_ahead);
    tcase_add_test(tc, test_shards_fetch_ahead_default);
    tcase_add_test(tc, test_shards_small_cache);
    tcase_add_test(tc, test_tar_shards_http);
    tcase_add_test(tc, test_tar_shards_faults);
    tcase_add_test(tc, test_tar_fetch_ahead);
    tcase_add_test(tc, test_tar_fetch_ahead_stop);
    tcase_add_test(tc, test_https);
    tcase_add_test(tc, test_offline);
#ifndef __SANITIZE_ADDRESS__
    /* Not under ASan: GCC 12's ASan runtime is not fork-safe while another
     * thread allocates (a child can inherit its allocator's lock held; CI's
     * ASan run hung one child of this test that way). The plain and TSan
     * suites run it. */
    tcase_add_test(tc, test_fork_during_https);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    int s3 = argc == 2 && !strcmp(argv[1], "--s3");
    if (argc > 2 || (argc == 2 && !s3)) {
        fprintf(stderr, "usage: test_remote [--s3]\n");
        return 2;
    }
    if (access(LIGHTTPD, X_OK) != 0 || access(PYTHON, X_OK) != 0) {
        printf("test_remote: skipped, %s or %s is not installed (scripts/setup.sh)\n",
               LIGHTTPD, PYTHON);
        return 77;
    }
    const char *npm = getenv("FEEDER_NPM_DIR"), *home = getenv("HOME");
    if (npm && *npm)
        snprintf(s3rver_bin, sizeof(s3rver_bin), "%s/node_modules/.bin/s3rver", npm);
    else
        snprintf(s3rver_bin, sizeof(s3rver_bin), "%s/.cache/feeder/npm/node_modules/.bin/s3rver",
                 home ? home : "");
    if (s3 && (access(s3rver_bin, X_OK) != 0 || access("/usr/bin/curl", X_OK) != 0)) {
        printf("test_remote --s3: skipped, no s3rver at %s or no /usr/bin/curl "
               "(bash scripts/setup_s3.sh installs them)\n", s3rver_bin);
        return 77;
    }
    SRunner *sr = srunner_create(remote_suite(s3));
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
