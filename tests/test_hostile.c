/*
 * The remote-shards path (remote/) against hostile servers and a shared
 * cache folder: tests/hostile_server.py, started on 127.0.0.1 by each test,
 * sends endless bodies, stalls, trickles, fails, redirects in loops, to
 * other protocols and to other hosts; the cache folder gets planted links,
 * stale temporary files and loose permissions. Every setting is small
 * (FEEDER_REMOTE_*), so each test ends in seconds. The server dies with
 * its test (PR_SET_PDEATHSIG). Skips (77) without python3.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "feeder.h"
#include "remote/remote.h"
#include "testutil.h"

#define PYTHON "/usr/bin/python3"

static char tmpdir[256], docroot[300], cachedir[300], logpath[300];
static pid_t server_pid;
static int port;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-hostile-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(docroot, sizeof(docroot), "%s/www", tmpdir);
    snprintf(cachedir, sizeof(cachedir), "%s/cache", tmpdir);
    snprintf(logpath, sizeof(logpath), "%s/server.log", tmpdir);
    ck_assert_int_eq(mkdir(docroot, 0755), 0);
    setenv("FEEDER_CACHE_DIR", cachedir, 1);
    setenv("FEEDER_REMOTE_BACKOFF_MS", "20", 1);
    setenv("FEEDER_REMOTE_RETRIES", "1", 1);
    setenv("FEEDER_REMOTE_LOW_SPEED_TIME_S", "1", 1);
    setenv("FEEDER_REMOTE_TIMEOUT_S", "20", 1);
    unsetenv("FEEDER_REMOTE_LOW_SPEED");
    unsetenv("FEEDER_REMOTE_MAX_INDEX_BYTES");
    unsetenv("FEEDER_CACHE_MAX_BYTES");
    unsetenv("FEEDER_REMOTE_OFFLINE");
    unsetenv("AWS_SESSION_TOKEN");
    server_pid = 0;
}

static void teardown(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
    }
    bu_rm_rf(tmpdir);
}

/* hostile_server.py on docroot; its port from the first line it prints. */
static void start_server(const char *rate)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    server_pid = fork();
    ck_assert_int_ge(server_pid, 0);
    if (server_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        char *argv[] = {PYTHON, FEEDER_TEST_HOSTILE, docroot, "--log", logpath, "--rate",
                        (char *)(rate ? rate : "1100"), "--hang-s", "60", NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    char line[32] = {0};
    ssize_t n = read(p[0], line, sizeof(line) - 1);
    close(p[0]);
    ck_assert_msg(n > 0, "the hostile server printed no port");
    port = atoi(line);
}

static void url_of(char *buf, size_t len, const char *mode, const char *name)
{
    snprintf(buf, len, "http://127.0.0.1:%d/%s/%s", port, mode, name);
}

static size_t put_pack(const char *name, uint64_t n)
{
    char p[400];
    snprintf(p, sizeof(p), "%s/%s", docroot, name);
    feeder__pack_header h;
    return tu_write_raw_pack(p, n, 16, 16, 2, &h);
}

/* Lines of the server's log containing every one of the needles (NULL-ended). */
static int logged(const char *a, const char *b)
{
    FILE *f = fopen(logpath, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, a) && (!b || strstr(line, b));
    fclose(f);
    return n;
}

/* Files in the cache folder whose name contains `needle`, and their bytes. */
static int cache_files(const char *needle, uint64_t *bytes)
{
    DIR *d = opendir(cachedir);
    int n = 0;
    if (bytes)
        *bytes = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strstr(e->d_name, needle))
            continue;
        char p[600];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", cachedir, e->d_name);
        if (bytes && lstat(p, &st) == 0)
            *bytes += (uint64_t)st.st_size;
        n++;
    }
    closedir(d);
    return n;
}

static double now_s(void)
{
    return (double)feeder__now_ns() / 1e9;
}

/* ---- 1. sizes ---- */

/* A whole-shard GET answered with the file and then zeros forever (no
 * Content-Length): the download stops at the size seen at open, nothing
 * past it is written, the temporary file is removed. */
START_TEST(test_endless_body_stops_at_shard_size)
{
    size_t size = put_pack("a.pack", 40);
    start_server(NULL);
    char url[300], err[512], want[600];
    url_of(url, sizeof(url), "endless", "a.pack");
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_double_lt(now_s() - t0, 10.0);
    snprintf(want, sizeof(want), "%s: the response runs past the %zu bytes expected (the "
             "shard's size when the dataset was opened): stopped there (1 attempt)", url, size);
    ck_assert_str_eq(err, want);
    uint64_t bytes;
    ck_assert_int_eq(cache_files(".tmp.", &bytes), 0);
    cache_files("", &bytes);
    ck_assert_uint_lt(bytes, 4096); /* the lock file alone */
}
END_TEST

/* The same with a Content-Length of the file + 1 GB: not read at all; the
 * shard is what changed on the server. */
START_TEST(test_big_content_length_refused)
{
    size_t size = put_pack("a.pack", 40);
    start_server(NULL);
    char url[300], err[512], want[600];
    url_of(url, sizeof(url), "biglen", "a.pack");
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_ECHECKSUM);
    snprintf(want, sizeof(want), "%s: the shard changed on the server: %zu bytes (ETag \"",
             url, size);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    snprintf(want, sizeof(want), "when it was opened, %zu bytes now (Content-Length)",
             size + 1000000000u);
    ck_assert_msg(strstr(err, want), "%s", err);
    ck_assert_int_eq(cache_files(".tmp.", NULL), 0);
}
END_TEST

/* A range request answered with 200 and an endless body: stopped at the
 * range's size. */
START_TEST(test_endless_range_stops_at_range)
{
    put_pack("a.pack", 40);
    start_server(NULL);
    char url[300], err[512], want[600];
    url_of(url, sizeof(url), "endless-range", "a.pack");
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    snprintf(want, sizeof(want), "%s: the response runs past the 4096 bytes expected (the "
             "range asked for): stopped there (1 attempt)", url);
    ck_assert_str_eq(err, want);
}
END_TEST

/* A range request answered without a Content-Range: the pack's size is
 * unknown, so the whole GET would have no bound; open refuses it before
 * asking for it (the whole GET here is endless). */
START_TEST(test_probe_without_size_refused)
{
    put_pack("a.pack", 40);
    start_server(NULL);
    char url[300], err[512], want[600];
    url_of(url, sizeof(url), "norange", "a.pack");
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EFORMAT);
    ck_assert_double_lt(now_s() - t0, 10.0);
    snprintf(want, sizeof(want), "%s: not a packed file (0 bytes)", url);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(logged("GET /norange/a.pack range=-", NULL), 0);
    uint64_t bytes;
    ck_assert_int_eq(cache_files(".tmp.", &bytes), 0);
    cache_files("", &bytes);
    ck_assert_uint_lt(bytes, 4096);
}
END_TEST

/* A tar shard whose <url>.idx never ends: the index request stops at
 * FEEDER_REMOTE_MAX_INDEX_BYTES (1 MiB here), counts as no index, and the
 * shard is walked instead: open returns, with every sample. */
START_TEST(test_endless_index_bounded)
{
    tu_tar t = {0};
    uint8_t jpg[64] = {0xff, 0xd8, 0xff, 0xd9};
    tu_tar_member(&t, "k0.jpg", '0', jpg, 4);
    tu_tar_member(&t, "k0.cls", '0', "1", 1);
    tu_tar_member(&t, "k1.jpg", '0', jpg, 4);
    tu_tar_member(&t, "k1.cls", '0', "0", 1);
    tu_tar_grow(&t, 1024); /* the two zero blocks that end an archive */
    char p[400];
    snprintf(p, sizeof(p), "%s/s-0.tar", docroot);
    ck_assert_int_eq(bu_write_file(p, t.b, t.len), 0);
    free(t.b);
    setenv("FEEDER_REMOTE_MAX_INDEX_BYTES", "1048576", 1);
    start_server(NULL);
    char url[300], err[512];
    url_of(url, sizeof(url), "endless-idx", "s-0.tar");
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_lt(now_s() - t0, 10.0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 2);
    ck_assert_int_eq(logged("GET /endless-idx/s-0.tar.idx", NULL), 1);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A server's .idx answer carries bytes past its Content-Length. libcurl
 * 7.88 keeps the connection and reads them as the start of the next
 * request's answer (the shard's whole GET): "HTTP/0.9", final. Come on a
 * reused connection, it is asked for again on a new one: two GETs. Later
 * libcurl releases close a connection that sent excess bytes, and the one
 * GET is answered right. Either way open walks the shard. */
START_TEST(test_bytes_past_content_length_not_an_answer)
{
    tu_tar t = {0};
    uint8_t jpg[4] = {0xff, 0xd8, 0xff, 0xd9};
    tu_tar_member(&t, "k0.jpg", '0', jpg, 4);
    tu_tar_member(&t, "k0.cls", '0', "1", 1);
    tu_tar_grow(&t, 1024);
    char p[400];
    snprintf(p, sizeof(p), "%s/s-0.tar", docroot);
    ck_assert_int_eq(bu_write_file(p, t.b, t.len), 0);
    free(t.b);
    start_server(NULL);
    char url[300], err[512];
    url_of(url, sizeof(url), "smuggle", "s-0.tar");
    feeder_dataset *ds = NULL;
    ck_assert_msg(feeder_dataset_open_shards(url, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(feeder_dataset_size(ds), 1);
    ck_assert_int_eq(logged("GET /smuggle/s-0.tar.idx", NULL), 1);
    int gets = logged("GET /smuggle/s-0.tar range=-", NULL);
    ck_assert_msg(gets == 1 || gets == 2, "%d GETs of the shard", gets);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- 2. time ---- */

/* Half the body, then silence: each attempt is cut once libcurl's speed
 * (an average over its last few seconds) has stayed under
 * FEEDER_REMOTE_LOW_SPEED for FEEDER_REMOTE_LOW_SPEED_TIME_S (1 s); two
 * attempts, an error in seconds. */
START_TEST(test_stall_mid_body)
{
    put_pack("a.pack", 40);
    start_server(NULL);
    char url[300], err[512];
    url_of(url, sizeof(url), "stall", "a.pack");
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_double_lt(now_s() - t0, 8.0);
    ck_assert_msg(strstr(err, url) == err &&
                      strstr(err, ": slower than FEEDER_REMOTE_LOW_SPEED = 16384 bytes/s for "
                                  "FEEDER_REMOTE_LOW_SPEED_TIME_S = 1 s (") &&
                      strstr(err, "(2 attempts)"),
                  "%s", err);
    ck_assert_int_eq(cache_files(".tmp.", NULL), 0);
}
END_TEST

/* 1,100 bytes/s: under the default low-speed limit, cut in about a second;
 * with the limit lowered to 100 bytes/s, the request's deadline
 * (FEEDER_REMOTE_TIMEOUT_S = 2) cuts it instead. */
START_TEST(test_trickle_cut)
{
    put_pack("a.pack", 400);
    start_server("1100");
    char url[300], err[512];
    url_of(url, sizeof(url), "trickle", "a.pack");
    feeder_dataset *ds = NULL;
    double t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_double_lt(now_s() - t0, 8.0);
    ck_assert_msg(strstr(err, "slower than FEEDER_REMOTE_LOW_SPEED"), "%s", err);

    setenv("FEEDER_REMOTE_LOW_SPEED", "100", 1);
    setenv("FEEDER_REMOTE_TIMEOUT_S", "2", 1);
    url_of(url, sizeof(url), "trickle", "a.pack");
    t0 = now_s();
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    double took = now_s() - t0;
    ck_assert_msg(took >= 1.9 && took < 6.0, "%.2f s", took);
    ck_assert_msg(strstr(err, url) == err &&
                      strstr(err, ": no whole response within FEEDER_REMOTE_TIMEOUT_S = 2 s (") &&
                      strstr(err, "in the last attempt) (1 attempt)"),
                  "%s", err);
    ck_assert_int_eq(cache_files(".tmp.", NULL), 0);
}
END_TEST

/* A shard whose whole GET always fails: the first batch that needs it
 * retries (2 GETs), every later batch gets that failure at once, naming
 * it, without asking the server again: in the calling thread (0 workers)
 * and across 2 worker processes (the cache folder's record). A new open
 * tries again, once. The readers download alone (FEEDER_FETCH_AHEAD_NONE):
 * a fetch thread's failed download could come before the first batch's. */
START_TEST(test_retry_budget_per_shard)
{
    put_pack("s-0.pack", 30);
    put_pack("s-1.pack", 30);
    start_server(NULL);
    char pat[300], err[512];
    url_of(pat, sizeof(pat), "fail", "s-{0..1}.pack");
    for (int w = 0, round = 1; w <= 2; w += 2, round++) {
        feeder_dataset *ds;
        const feeder_shard_options none = {.fetch_ahead = FEEDER_FETCH_AHEAD_NONE};
        ck_assert_msg(feeder_dataset_open_shards(pat, &none, &ds, err, sizeof(err)) == 0, "%s",
                      err);
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, w), 0);
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EREMOTE);
        ck_assert_msg(strstr(feeder_loader_errmsg(ld), ": HTTP 503 (2 attempts)"), "%s",
                      feeder_loader_errmsg(ld));
        for (int k = 0; k < 3; k++) {
            double t0 = now_s();
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EREMOTE);
            ck_assert_double_lt(now_s() - t0, 1.0);
            const char *m = feeder_loader_errmsg(ld);
            ck_assert_msg(strstr(m, "s-0.pack: not fetched again: its download failed (pid ") &&
                              strstr(m, "HTTP 503 (2 attempts)"),
                          "%s", m);
        }
        ck_assert_int_eq(logged("GET /fail/s-0.pack range=-", NULL), 2 * round);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* ---- 3. redirects ---- */

/* A redirect loop: at most 10 followed, not retried. */
START_TEST(test_redirect_loop)
{
    start_server(NULL);
    char url[300], err[512];
    url_of(url, sizeof(url), "loop", "a.pack");
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)), FEEDER_EREMOTE);
    ck_assert_msg(strstr(err, url) == err && strstr(err, "(1 attempt)") &&
                      strstr(err, "Maximum (10) redirects followed"),
                  "%s", err);
    ck_assert_int_eq(logged("GET /loop/a.pack", NULL), 11);
}
END_TEST

/* Redirects to file:// and ftp:// are refused, not followed or retried. */
START_TEST(test_redirect_other_protocols)
{
    start_server(NULL);
    const char *modes[] = {"to-file", "to-ftp"};
    for (int k = 0; k < 2; k++) {
        char url[300], err[512];
        url_of(url, sizeof(url), modes[k], "a.pack");
        feeder_dataset *ds = NULL;
        ck_assert_int_eq(feeder_dataset_open_packed(url, &ds, err, sizeof(err)),
                         FEEDER_EREMOTE);
        ck_assert_msg(strstr(err, url) == err && strstr(err, "(1 attempt)") &&
                          (strstr(err, "not supported") || strstr(err, "disabled")),
                      "%s", err);
    }
}
END_TEST

static void s3_env(const char *token)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    setenv("AWS_SESSION_TOKEN", token, 1);
    setenv("AWS_REGION", "us-east-1", 1);
}

/* A signed request redirected to another host name (localhost, the same
 * server): refused, naming both; the other host never sees the signature
 * or the session token. Redirected within its origin, it is followed and
 * signed again there. */
START_TEST(test_signed_redirect_stays_home)
{
    size_t size = put_pack("a.pack", 20);
    start_server(NULL);
    s3_env("TOKEN123");
    char err[512];
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_packed("s3://to-localhost/a.pack", &ds, err,
                                                sizeof(err)), FEEDER_EREMOTE);
    char want[300];
    snprintf(want, sizeof(want), "s3://to-localhost/a.pack: HTTP 302 redirects this signed "
             "request to http://localhost:%d/ok/a.pack, outside http://127.0.0.1:%d: not "
             "followed", port, port);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    ck_assert_int_eq(logged("GET /to-localhost/a.pack", "auth=1 token=1"), 1);
    ck_assert_int_eq(logged("host=localhost", NULL), 0);

    ck_assert_msg(feeder_dataset_open_packed("s3://to-self/a.pack", &ds, err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_uint_eq(ds->pack->map_len, size);
    ck_assert_int_eq(logged("GET /ok/a.pack", "auth=1 token=1"), 2); /* range, whole */
    feeder_dataset_destroy(ds);
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_SESSION_TOKEN");
}
END_TEST

/* ---- 4. the cache folder ---- */

START_TEST(test_cache_folder_checks)
{
    feeder__cache c;
    char err[512], want[700], dir[400];
    /* no folder to use */
    unsetenv("FEEDER_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    unsetenv("HOME");
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "no folder for the shard cache: FEEDER_CACHE_DIR, XDG_CACHE_HOME and "
                          "HOME are unset (or not absolute); set FEEDER_CACHE_DIR or the "
                          "cache_dir option");
    /* XDG_CACHE_HOME, made 0700 */
    snprintf(dir, sizeof(dir), "%s/xdg", tmpdir);
    setenv("XDG_CACHE_HOME", dir, 1);
    ck_assert_msg(feeder__cache_open(&c, NULL, 0, err, sizeof(err)) == 0, "%s", err);
    snprintf(want, sizeof(want), "%s/feeder/shards", dir);
    ck_assert_str_eq(c.dir, want);
    struct stat st;
    ck_assert_int_eq(stat(c.dir, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    feeder__cache_close(&c);
    if (home)
        setenv("HOME", home, 1);
    free(home);
    /* writable by others */
    snprintf(dir, sizeof(dir), "%s/open", tmpdir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chmod(dir, 01777), 0);
    ck_assert_int_eq(feeder__cache_open(&c, dir, 0, err, sizeof(err)), -EPERM);
    snprintf(want, sizeof(want), "%s: the shard cache folder is writable by group and others "
             "(mode 1777): another user could plant shards there; chmod go-w it (or chmod 700), "
             "or set FEEDER_CACHE_DIR to a folder of your own", dir);
    ck_assert_str_eq(err, want);
    /* another user's (root can make one) */
    if (geteuid() == 0) {
        ck_assert_int_eq(chmod(dir, 0755), 0);
        ck_assert_int_eq(chown(dir, 65534, 65534), 0);
        ck_assert_int_eq(feeder__cache_open(&c, dir, 0, err, sizeof(err)), -EPERM);
        snprintf(want, sizeof(want), "%s: the shard cache folder belongs to uid 65534, not to "
                 "this user (uid 0): another user could plant shards there; set "
                 "FEEDER_CACHE_DIR to a folder of your own", dir);
        ck_assert_str_eq(err, want);
    }
}
END_TEST

/* A link planted where the shard's lock file goes is not followed (the
 * file it points at is untouched); one planted as its .meta is not read,
 * and is replaced by the real record, not written through. */
START_TEST(test_planted_links_not_followed)
{
    put_pack("a.pack", 20);
    start_server(NULL);
    char url[300], err[512], name[600], lnk[700], victim[400];
    url_of(url, sizeof(url), "ok", "a.pack");
    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    feeder__cache_name(c.dir, url, 0, name, sizeof(name));
    snprintf(victim, sizeof(victim), "%s/victim", tmpdir);
    ck_assert_int_eq(bu_write_file(victim, "keep", 4), 0);
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, victim, old, 0), 0);
    snprintf(lnk, sizeof(lnk), "%s.lock", name);
    ck_assert_int_eq(symlink(victim, lnk), 0);
    feeder__shard sh;
    ck_assert_int_eq(feeder__cache_get(&c, url, NULL, &sh, err, sizeof(err)), -ELOOP);
    char want[1400];
    snprintf(want, sizeof(want), "%s: cannot open %s: %s", url, lnk, strerror(ELOOP));
    ck_assert_str_eq(err, want);
    struct stat st;
    ck_assert_int_eq(stat(victim, &st), 0);
    ck_assert_int_eq(st.st_mtime, 1000000000);
    unlink(lnk);
    snprintf(lnk, sizeof(lnk), "%s.meta", name);
    ck_assert_int_eq(symlink(victim, lnk), 0);
    ck_assert_msg(feeder__cache_get(&c, url, NULL, &sh, err, sizeof(err)) == 0, "%s", err);
    feeder__shard_release(&sh);
    ck_assert_int_eq(lstat(lnk, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    size_t len;
    uint8_t *v;
    ck_assert_int_eq(bu_read_file(victim, &v, &len), 0);
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(v, "keep", 4), 0);
    free(v);
    feeder__cache_close(&c);
}
END_TEST

/* Temporary files a crash left: a dead owner's, untouched for 2 minutes,
 * and this process's, untouched for 20 minutes, go at the next download; a
 * dead owner's fresh one and a cached shard whose name ends like one stay. */
START_TEST(test_stale_tmp_swept)
{
    put_pack("a.pack", 20);
    put_pack("b.tmp.1", 20);
    start_server(NULL);
    char url[300], err[512];
    feeder__cache c;
    ck_assert_int_eq(feeder__cache_open(&c, NULL, 0, err, sizeof(err)), 0);
    url_of(url, sizeof(url), "ok", "b.tmp.1");
    feeder__shard sh;
    ck_assert_msg(feeder__cache_get(&c, url, NULL, &sh, err, sizeof(err)) == 0, "%s", err);
    feeder__shard_release(&sh);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char p[3][500];
    snprintf(p[0], sizeof(p[0]), "%s/0123456789abcdef-x.pack.tmp.%d.0", c.dir, (int)dead);
    snprintf(p[1], sizeof(p[1]), "%s/0123456789abcdef-y.pack.tmp.%d.3", c.dir, (int)getpid());
    snprintf(p[2], sizeof(p[2]), "%s/0123456789abcdef-z.idx.tmp.%d", c.dir, (int)dead);
    time_t now = time(NULL);
    time_t ages[3] = {120, 1200, 0};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(bu_write_file(p[k], "partial", 7), 0);
        struct timespec ts[2] = {{now - ages[k], 0}, {now - ages[k], 0}};
        ck_assert_int_eq(utimensat(AT_FDCWD, p[k], ts, 0), 0);
    }
    url_of(url, sizeof(url), "ok", "a.pack");
    ck_assert_msg(feeder__cache_get(&c, url, NULL, &sh, err, sizeof(err)) == 0, "%s", err);
    feeder__shard_release(&sh);
    ck_assert_int_eq(access(p[0], F_OK), -1);
    ck_assert_int_eq(access(p[1], F_OK), -1);
    ck_assert_int_eq(access(p[2], F_OK), 0);
    ck_assert_int_eq(cache_files("-b.tmp.1", NULL), 3); /* the shard, .meta, .lock */
    feeder__cache_close(&c);
}
END_TEST

/* A server without ETags rewrites a shard keeping its size (one label
 * changed): the cached copy matches the size recorded, but not the header
 * and index the next open fetched, so it is dropped and fetched again, and
 * the batch has the new label. */
START_TEST(test_stale_copy_same_size_refetched)
{
    put_pack("s-0.pack", 20);
    start_server(NULL);
    char pat[300], err[512], p[400];
    url_of(pat, sizeof(pat), "noetag", "s-{0..0}.pack");
    feeder_dataset *ds;
    feeder_loader *ld;
    feeder_batch *b;
    for (int round = 0; round < 2; round++) {
        ck_assert_msg(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)) == 0, "%s",
                      err);
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0), 0);
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_int_eq(b->labels[0], round ? 9 : 0);
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
        if (round)
            break;
        /* label 0 of record 0 becomes 9, the file's size unchanged */
        snprintf(p, sizeof(p), "%s/s-0.pack", docroot);
        uint8_t *f;
        size_t len;
        ck_assert_int_eq(bu_read_file(p, &f, &len), 0);
        feeder__pack_header h;
        ck_assert_int_eq(feeder__pack_peek(f, len, p, &h, err, sizeof(err)), 0);
        int64_t nine = 9;
        memcpy(f + h.labels_off, &nine, 8);
        ck_assert_int_eq(bu_write_file(p, f, len), 0);
        free(f);
    }
    ck_assert_int_eq(logged("GET /noetag/s-0.pack range=-", NULL), 2);
}
END_TEST

/* ---- 5. messages ---- */

/* A URL shard's cached copy cut while a worker has it mapped: the error
 * names the URL, the cached copy and both sizes (not "-1 bytes"). */
START_TEST(test_truncated_cached_copy_named)
{
    put_pack("s-0.pack", 200);
    start_server(NULL);
    char pat[300], err[512];
    url_of(pat, sizeof(pat), "ok", "s-{0..0}.pack");
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 1), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    char url[300], name[600];
    url_of(url, sizeof(url), "ok", "s-0.pack");
    feeder__cache_name(cachedir, url, FEEDER__GET_STRIPED, name, sizeof(name));
    /* The batch's records may have come before the rest of the shard: the
     * copy is renamed into the cache when its download ends. */
    struct stat st;
    for (int i = 0; i < 1000 && stat(name, &st) < 0; i++)
        usleep(10000);
    ck_assert_int_eq(truncate(name, 8192), 0);
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(rc, -EIO);
    const char *m = feeder_loader_errmsg(ld);
    char want[1400];
    snprintf(want, sizeof(want), "of %s (shard 0 of %s): its cached copy %s changed under the "
             "loader: reading its mapping faulted (SIGBUS); it is now 8192 bytes, %llu when the "
             "dataset was opened", url, pat, name,
             (unsigned long long)ds->pack->shards->bytes[0]);
    ck_assert_msg(strstr(m, want), "%s", m);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_endless_body_stops_at_shard_size);
    tcase_add_test(tc, test_big_content_length_refused);
    tcase_add_test(tc, test_endless_range_stops_at_range);
    tcase_add_test(tc, test_endless_index_bounded);
    tcase_add_test(tc, test_probe_without_size_refused);
    tcase_add_test(tc, test_bytes_past_content_length_not_an_answer);
    tcase_add_test(tc, test_stall_mid_body);
    tcase_add_test(tc, test_trickle_cut);
    tcase_add_test(tc, test_retry_budget_per_shard);
    tcase_add_test(tc, test_redirect_loop);
    tcase_add_test(tc, test_redirect_other_protocols);
    tcase_add_test(tc, test_signed_redirect_stays_home);
    tcase_add_test(tc, test_cache_folder_checks);
    tcase_add_test(tc, test_planted_links_not_followed);
    tcase_add_test(tc, test_stale_tmp_swept);
    tcase_add_test(tc, test_stale_copy_same_size_refetched);
    tcase_add_test(tc, test_truncated_cached_copy_named);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (access(PYTHON, X_OK) != 0) {
        printf("test_hostile: skipped, %s is not installed\n", PYTHON);
        return 77;
    }
    SRunner *sr = srunner_create(hostile_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
