/*
 * Hardening, second round (issue 21): a list file streamed with bounded
 * memory, workers that inherit nothing, files changed under the loader,
 * workers that cannot start or stall, and the smaller faults. Check forks
 * each test; tests that need their own process tree fork again.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "common/common.h"
#include "dataset/dataset.h"
#include "dataset/pack.h"
#include "feeder.h"

static char tmpdir[256];
static bu_photos *photos;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-faults-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char err[256];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
}

static void teardown(void)
{
    bu_photos_free(photos);
    photos = NULL;
    bu_rm_rf(tmpdir);
}

static void path_in(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tmpdir, rel);
}

static void make_folder(const char *rel, int classes, int per)
{
    tu_make_folder(photos, tmpdir, rel, classes, per, "c", 160, 140, 120, 160);
}

static feeder_loader *small_loader(feeder_dataset *ds, int workers, int batch)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 40), 0);
    return ld;
}

static uint8_t *save_state(feeder_loader *ld, size_t *len)
{
    ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, len), 0);
    uint8_t *blob = malloc(*len);
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, *len, len), 0);
    return blob;
}

static void reseal(uint8_t *b, size_t len)
{
    memset(b + 12, 0, 4);
    uint32_t c = feeder__crc32c(0, b, len);
    for (int i = 0; i < 4; i++)
        b[12 + i] = (uint8_t)(c >> (8 * i));
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A sparse 2 GiB list file of zeros, or of one endless line: refused at its
 * first line, without reading (or holding) the rest. */
START_TEST(test_list_file_streams_bounded)
{
    char lst[512], want[700], err[1024];
    path_in(lst, sizeof(lst), "big.txt");
    const off_t size = (off_t)2 << 30;
    int fd = open(lst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, size), 0);
    close(fd);
    long before = max_rss_kib();
    feeder_dataset *ds = NULL;
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:1: line is longer than the limit of %d bytes", lst,
             FEEDER__LIST_LINE_MAX);
    ck_assert_str_eq(err, want);
    /* 5000 bytes of path and no newline, then the hole. */
    fd = open(lst, O_WRONLY);
    char *a = malloc(5000);
    memset(a, 'a', 5000);
    ck_assert_int_eq(pwrite(fd, "x.jpg 1\n", 8, 0), 8);
    ck_assert_int_eq(pwrite(fd, a, 5000, 8), 5000);
    free(a);
    close(fd);
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:2: line is longer than the limit of %d bytes", lst,
             FEEDER__LIST_LINE_MAX);
    ck_assert_str_eq(err, want);
    ck_assert_msg(max_rss_kib() - before < 32 * 1024, "RSS grew by %ld KiB",
                  max_rss_kib() - before);
    /* Lines split across read chunks parse as whole lines. */
    FILE *f = fopen(lst, "w");
    for (int i = 0; i < 20000; i++)
        fprintf(f, "d/%05d_some_longer_name.jpg %d\n", i, i % 7);
    fclose(f);
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 20000);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 7);
    snprintf(want, sizeof(want), "%s/d/%05d_some_longer_name.jpg", tmpdir, 12345);
    ck_assert_str_eq(feeder_dataset_path(ds, 12345), want);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A file renamed between save and resume (same count): the state names the
 * dataset by a fingerprint and refuses it; a moved root still resumes; a
 * version 1 blob (no fingerprint) still loads. */
START_TEST(test_resume_checks_dataset_fingerprint)
{
    make_folder("d", 2, 4);
    char root[512], from[600], to[600], moved[512];
    path_in(root, sizeof(root), "d");
    feeder_dataset *ds = tu_open_folder(tmpdir, "d");
    feeder_loader *ld = small_loader(ds, 0, 2);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    size_t len;
    uint8_t *blob = save_state(ld, &len);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* The same files under another root: accepted. */
    path_in(moved, sizeof(moved), "moved");
    ck_assert_int_eq(rename(root, moved), 0);
    ds = tu_open_folder(tmpdir, "moved");
    ld = small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), 0);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    /* One file renamed, in the same place of the sorted order. */
    snprintf(from, sizeof(from), "%s/c0/001.jpg", moved);
    snprintf(to, sizeof(to), "%s/c0/001b.jpg", moved);
    ck_assert_int_eq(rename(from, to), 0);
    ds = tu_open_folder(tmpdir, "moved");
    ld = small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_EMISMATCH);
    const char *want = "state blob does not match the loader: the dataset's files differ";
    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), want, strlen(want)) == 0, "%s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    /* The same blob as version 1: no fingerprint, not compared. */
    uint8_t *v1 = malloc(len - 8);
    memcpy(v1, blob, 176);
    memcpy(v1 + 176, blob + 184, len - 184);
    v1[4] = 1;
    v1[8] = (uint8_t)(len - 8);
    reseal(v1, len - 8);
    ld = small_loader(ds, 0, 2);
    ck_assert_int_eq(feeder_loader_state_load(ld, v1, len - 8), 0);
    ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(b->number, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(v1);
    free(blob);
}
END_TEST

/* Lines of /proc/PID/maps naming `what`. */
static int count_maps(int pid, const char *what)
{
    char p[64], line[512];
    snprintf(p, sizeof(p), "/proc/%d/maps", pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* Descriptors above 2 of PID linked to `what`, or all of them (what NULL). */
static int count_fds(int pid, const char *what)
{
    char p[64], link[512], target[512];
    snprintf(p, sizeof(p), "/proc/%d/fd", pid);
    DIR *d = opendir(p);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || (what && atoi(e->d_name) <= 2))
            continue; /* stdin, stdout, stderr: whatever the test runner gave */
        snprintf(link, sizeof(link), "%s/%s", p, e->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        target[k > 0 ? k : 0] = 0;
        n += !what || strstr(target, what) != NULL;
    }
    closedir(d);
    return n;
}

/* Two loaders: the second's workers hold neither loader's parent mapping nor
 * the process's other descriptors; destroying the first leaves nothing of it
 * in them. */
START_TEST(test_workers_inherit_nothing)
{
    make_folder("d", 2, 4);
    int extra[30];
    for (int i = 0; i < 30; i++)
        extra[i] = open("/dev/null", O_RDONLY);
    feeder_dataset *ds = tu_open_folder(tmpdir, "d");
    feeder_loader *a = small_loader(ds, 1, 2), *b = small_loader(ds, 2, 2);
    feeder_batch *bt;
    ck_assert_int_eq(feeder_next(a, &bt), 0);
    feeder_batch_release(bt, NULL);
    ck_assert_int_eq(feeder_next(b, &bt), 0);
    feeder_batch_release(bt, NULL);
    int pid = feeder_loader_worker_pid(b, 1);
    ck_assert_int_gt(pid, 0);
    /* Its own mapping only (before: both loaders' parent mappings too). */
    ck_assert_int_eq(count_maps(pid, "feeder-slots"), 1);
    feeder_loader_destroy(a);
    ck_assert_int_eq(count_maps(pid, "feeder-slots"), 1);
    int fds = count_fds(pid, NULL);
    /* stdin/out/err, its channel, a pidfd of the loader's process, a ring. */
    ck_assert_msg(fds <= 8, "worker holds %d descriptors", fds);
    ck_assert_int_eq(count_fds(pid, "/dev/null"), 0);
    ck_assert_int_eq(count_fds(pid, "feeder-slots"), 0);
    ck_assert_int_eq(feeder_next(b, &bt), 0);
    feeder_batch_release(bt, NULL);
    feeder_loader_destroy(b);
    feeder_dataset_destroy(ds);
    for (int i = 0; i < 30; i++)
        close(extra[i]);
}
END_TEST

static uint64_t u_len(void *u)
{
    (void)u;
    return 8;
}

static int u_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                 int64_t *label, char *err, size_t errlen)
{
    (void)u;
    (void)err;
    (void)errlen;
    memset(dst, (int)(ctx->index & 0xff), bytes);
    *label = (int64_t)ctx->index;
    return 0;
}

/* A user dataset's workers keep the process's descriptors (its callbacks may
 * use them) but no loader's memfd, channel or mapping. */
START_TEST(test_user_workers_keep_user_fds)
{
    int extra = open("/dev/null", O_RDONLY);
    feeder_dataset_callbacks cb = {.len = u_len, .get = u_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *a = small_loader(ds, 1, 2), *b = small_loader(ds, 1, 2);
    feeder_batch *bt;
    ck_assert_int_eq(feeder_next(a, &bt), 0);
    feeder_batch_release(bt, NULL);
    ck_assert_int_eq(feeder_next(b, &bt), 0);
    feeder_batch_release(bt, NULL);
    int pid = feeder_loader_worker_pid(b, 0);
    ck_assert_int_eq(count_maps(pid, "feeder-slots"), 1);
    ck_assert_int_eq(count_fds(pid, "feeder-slots"), 0);
    ck_assert_int_eq(count_fds(pid, "/dev/null"), count_fds(getpid(), "/dev/null"));
    feeder_loader_destroy(a);
    feeder_loader_destroy(b);
    feeder_dataset_destroy(ds);
    close(extra);
}
END_TEST

static int init_fd = -1;
static int init_fails(void *user, int id)
{
    (void)user;
    char c = (char)('0' + id);
    if (write(init_fd, &c, 1) != 1)
        return 1;
    return id == 1 ? 42 : 0;
}

/* A worker that cannot start (worker_init fails) is an error, once: later
 * calls return it without forking workers again. */
START_TEST(test_worker_start_failure_not_retried)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    init_fd = p[1];
    feeder_dataset_callbacks cb = {.len = u_len, .get = u_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = small_loader(ds, 2, 2);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, init_fails, NULL), 0);
    feeder_batch *b;
    for (int k = 0; k < 20; k++) {
        int rc = feeder_next(ld, &b);
        ck_assert_int_eq(rc, FEEDER_ECALLBACK);
        const char *m = feeder_loader_errmsg(ld);
        ck_assert_msg(strstr(m, "worker_init failed in worker 1 (pid ") &&
                          strstr(m, "returned 42; workers that cannot start are not started again"),
                      "%s", m);
    }
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    close(p[1]);
    char got[256];
    ssize_t n = read(p[0], got, sizeof(got));
    close(p[0]);
    /* One start of each worker (before: two more on every call). */
    ck_assert_int_le(n, 2);
}
END_TEST

static long vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmSize:", 7) == 0)
            kib = atol(line + 7);
    if (f)
        fclose(f);
    return kib * 1024;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

/* Workers that cannot map the slots (RLIMIT_AS): the worker's reason comes
 * back, and 200 more calls fork nothing (before: 4 processes a call). */
START_TEST(test_workers_cannot_map_slots)
{
    if (UNDER_SANITIZER)
        return; /* the sanitizers' shadow memory needs an unlimited address space */
    make_folder("d", 2, 4);
    feeder_dataset *ds = tu_open_folder(tmpdir, "d");
    feeder_loader *ld = small_loader(ds, 4, 8);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 224), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 224), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 256), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 5), 0);
    struct rlimit rl = {(rlim_t)vm_size() + (64 << 20), RLIM_INFINITY};
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
    int rc = feeder_loader_start(ld);
    ck_assert_msg(rc == 0, "%d %s", rc, feeder_loader_errmsg(ld));
    ck_assert_int_gt(feeder_loader_worker_pid(ld, 0), 0); /* workers exist once start returns */
    rl.rlim_cur = (rlim_t)vm_size() + (4 << 20);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
    /* Epoch 0's workers started before the limit; epoch 1's cannot. */
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
    rc = feeder_next(ld, &b);
    ck_assert_msg(rc == -ENOMEM, "rc %d: %s", rc, feeder_loader_errmsg(ld));
    const char *want = "could not start: mmap of the ";
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), want), "%s", feeder_loader_errmsg(ld));
    uint64_t t0 = bu_now_ns();
    for (int k = 0; k < 200; k++)
        ck_assert_int_eq(feeder_next(ld, &b), -ENOMEM);
    ck_assert_int_eq(feeder_loader_worker_pid(ld, 0), -1);
    ck_assert_msg(bu_now_ns() - t0 < 500000000ull, "200 calls took %llu ns",
                  (unsigned long long)(bu_now_ns() - t0));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A SIGSTOPped worker: the timeout names it (id, pid) and the batch; with
 * max_restarts it is killed, started again and its batch redone, and the
 * epoch arrives whole. */
static void stalled_worker_case(int restarts)
{
    feeder_dataset_callbacks cb = {.len = u_len, .get = u_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = small_loader(ds, 2, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 300), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, restarts), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    int pids[2] = {feeder_loader_worker_pid(ld, 0), feeder_loader_worker_pid(ld, 1)};
    ck_assert_int_eq(kill(pids[0], SIGSTOP), 0);
    ck_assert_int_eq(kill(pids[1], SIGSTOP), 0);
    feeder_batch *b;
    if (restarts == 0) {
        for (int k = 0; k < 3; k++) {
            ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ETIMEDOUT);
            const char *m = feeder_loader_errmsg(ld);
            char want[256];
            int named = 0;
            for (int i = 0; i < 2; i++) {
                snprintf(want, sizeof(want), "worker %d (pid %d) has not finished batch 0)", i,
                         pids[i]);
                named |= strstr(m, want) != NULL;
            }
            ck_assert_msg(named && strstr(m, "waiting for batch 0 of epoch 0"), "%s", m);
        }
        kill(pids[0], SIGCONT);
        kill(pids[1], SIGCONT);
    }
    uint64_t seen = 0;
    int rc, batches = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->number, (uint64_t)batches);
        for (uint32_t i = 0; i < b->count; i++)
            seen |= 1ull << b->indices[i];
        batches++;
        feeder_batch_release(b, NULL);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%d %s", rc, feeder_loader_errmsg(ld));
    ck_assert_int_eq(batches, 4);
    ck_assert_uint_eq(seen, 0xff);
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    if (restarts)
        ck_assert_uint_eq(st.worker_restarts, 2);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}

START_TEST(test_stalled_worker_named)
{
    stalled_worker_case(0);
}
END_TEST

START_TEST(test_stalled_worker_replaced)
{
    stalled_worker_case(4);
}
END_TEST

/* A RAW pack of n records of h x w x 3 bytes at `path`; returns the file's
 * size, *records_off where the records start. */
static size_t write_raw_pack_v(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                               uint32_t version, feeder__pack_header *out)
{
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    h.version = version;
    h.header_bytes = 4096;
    h.kind = FEEDER_RECORD_RAW;
    h.dtype = FEEDER__PACK_DTYPE_UINT8;
    h.layout = FEEDER_LAYOUT_NHWC;
    h.height = hgt;
    h.width = wid;
    h.channels = 3;
    h.label_type = FEEDER__PACK_LABEL_INT64;
    h.count = n;
    h.record_bytes = (uint64_t)hgt * wid * 3;
    h.shard_count = 1;
    h.total_records = n;
    size_t len = (size_t)feeder__pack_layout(&h, 0, n * h.record_bytes);
    ck_assert_uint_gt(len, 0);
    uint8_t *buf = calloc(1, len);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *rec = buf + h.records_off + i * h.record_bytes;
        memset(rec, (int)(i & 0xff), h.record_bytes);
        int64_t lab = (int64_t)(i % 4);
        uint32_t seed = feeder__pack_crc_seed(version, lab);
        feeder__pack_entry_encode(buf + h.index_off + i * 24, h.records_off + i * h.record_bytes,
                                  h.record_bytes, feeder__crc32c(seed, rec, h.record_bytes));
        memcpy(buf + h.labels_off + i * 8, &lab, 8);
    }
    feeder__pack_header_encode(&h, buf);
    ck_assert_int_eq(bu_write_file(path, buf, len), 0);
    free(buf);
    *out = h;
    return len;
}

static size_t write_raw_pack(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                             uint64_t *records_off)
{
    feeder__pack_header h;
    size_t len = write_raw_pack_v(path, n, hgt, wid, FEEDER__PACK_VERSION, &h);
    *records_off = h.records_off;
    return len;
}

typedef struct toggler {
    const char *path;
    off_t small, full;
    atomic_int stop;
} toggler;

/* Cut the file to its header and grow it back, over and over, as a job
 * rewriting it in place would. */
static void *toggle(void *arg)
{
    toggler *t = arg;
    int fd = open(t->path, O_WRONLY);
    while (!atomic_load(&t->stop)) {
        if (ftruncate(fd, t->small) != 0 || ftruncate(fd, t->full) != 0)
            break;
    }
    close(fd);
    return NULL;
}

/* A pack cut under a running loader: with 0 workers the calling thread
 * must not fault (it reads with pread); workers turn a fault into their
 * batch's error naming the file. Never a death (before: exit 135, or
 * "killed by signal 7"). */
static void pack_cut_while_loading(int workers)
{
    char path[512];
    path_in(path, sizeof(path), "cut.pack");
    uint64_t roff;
    size_t len = write_raw_pack(path, 256, 128, 128, &roff);
    char err[512];
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    toggler t = {.path = path, .small = (off_t)roff + 4096, .full = (off_t)len};
    atomic_init(&t.stop, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, toggle, &t), 0);
    uint64_t end = bu_now_ns() + 1500000000ull;
    int ok = 0, failed = 0, faults = 0;
    while (bu_now_ns() < end) {
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (rc == 0) {
            ok++;
            feeder_batch_release(b, NULL);
            continue;
        }
        if (rc == FEEDER_DONE)
            continue;
        const char *m = feeder_loader_errmsg(ld);
        ck_assert_msg(rc == -EIO && strstr(m, path), "rc %d: %s", rc, m);
        failed++;
        faults += strstr(m, "changed under the loader") != NULL;
    }
    atomic_store(&t.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_gt(ok + failed, 10);
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    ck_assert_uint_eq(st.worker_restarts, 0);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    fprintf(stderr, "pack cut, %d workers: %d batches, %d failed (%d faults caught)\n", workers,
            ok, failed, faults);
}

START_TEST(test_pack_cut_no_workers)
{
    pack_cut_while_loading(0);
}
END_TEST

START_TEST(test_pack_cut_workers)
{
    pack_cut_while_loading(2);
}
END_TEST

static uint64_t open_fd_count(void)
{
    return (uint64_t)count_fds(getpid(), NULL) + 3;
}

/* num_workers 0, batch 140: the calling thread opens its files in groups of
 * 64, so a descriptor limit of what is open + 3 + 64 is enough (before: 140
 * at once, FEEDER_ELIMIT at start), and the batch is whole. */
START_TEST(test_inline_reads_in_groups)
{
    make_folder("d", 2, 70);
    feeder_dataset *ds = tu_open_folder(tmpdir, "d");
    pid_t pid = fork();
    if (pid == 0) {
        feeder_loader *ld;
        if (feeder_loader_create(ds, NULL, &ld) ||
            feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 140) ||
            feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 0) ||
            feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 32) || feeder_loader_set(ld, FEEDER_OPT_WIDTH, 32) ||
            feeder_loader_set(ld, FEEDER_OPT_RESIZE, 40))
            _exit(10);
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = open_fd_count() + 3 + 64;
        if (setrlimit(RLIMIT_NOFILE, &rl))
            _exit(11);
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (rc) {
            fprintf(stderr, "%d %s\n", rc, feeder_loader_errmsg(ld));
            _exit(12);
        }
        uint64_t seen[3] = {0, 0, 0};
        for (uint32_t i = 0; i < b->count; i++)
            seen[b->indices[i] / 64] |= 1ull << (b->indices[i] % 64);
        if (b->count != 140 || seen[0] != ~0ull || seen[1] != ~0ull || seen[2] != 0xfff)
            _exit(13);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %x", st);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A label changed in a packed file: from format version 2 the record's CRC
 * covers it, so VERIFY_CRC names the record (every read path); a version 1
 * file's labels are not covered (documented). */
START_TEST(test_pack_label_in_crc)
{
    char path[512], want[1024], err[512];
    path_in(path, sizeof(path), "lab.pack");
    for (uint32_t version = 1; version <= 2; version++) {
        feeder__pack_header h;
        write_raw_pack_v(path, 8, 4, 4, version, &h);
        int fd = open(path, O_WRONLY);
        int64_t lab = 3; /* record 5's label is 1 */
        ck_assert_int_eq(pwrite(fd, &lab, 8, (off_t)(h.labels_off + 5 * 8)), 8);
        close(fd);
        feeder_dataset *ds;
        ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
        for (int workers = 0; workers <= 2; workers += 2)
            for (int read = 0; read <= 1; read++) {
                feeder_loader *ld;
                ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PACKED_READ, read), 0);
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
                feeder_batch *b;
                int rc = feeder_next(ld, &b);
                if (version == 1) {
                    ck_assert_msg(rc == 0, "%s", feeder_loader_errmsg(ld));
                    ck_assert_int_eq(b->labels[5], 3);
                    feeder_batch_release(b, NULL);
                } else {
                    ck_assert_int_eq(rc, FEEDER_ECHECKSUM);
                    snprintf(want, sizeof(want),
                             "batch 0 of epoch 0: record 5 of %s: crc32c mismatch over its label "
                             "and bytes",
                             path);
                    ck_assert_msg(strncmp(feeder_loader_errmsg(ld), want, strlen(want)) == 0,
                                  "%s", feeder_loader_errmsg(ld));
                }
                feeder_loader_destroy(ld);
            }
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* A symlink loop in a class folder: the error names the link, not the class
 * folder (before: "DIR/c0: Too many levels of symbolic links", found 64
 * levels down). */
START_TEST(test_symlink_loop_named)
{
    make_folder("d", 2, 1);
    char link[512], want[700], err[1024];
    path_in(link, sizeof(link), "d/c0/loop");
    ck_assert_int_eq(symlink("..", link), 0);
    feeder_dataset *ds = NULL;
    char root[512];
    path_in(root, sizeof(root), "d");
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), -ELOOP);
    snprintf(want, sizeof(want), "%s: a symbolic link loop: it leads back to a folder it is in",
             link);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink(".", link), 0);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), -ELOOP);
    ck_assert_str_eq(err, want);
}
END_TEST

static int failing_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                       int64_t *label, char *err, size_t errlen)
{
    (void)u;
    (void)ctx;
    (void)dst;
    (void)bytes;
    (void)label;
    snprintf(err, errlen, "bad");
    return -EIO;
}

static uint64_t len3(void *u)
{
    (void)u;
    return 3;
}

/* Every sample of a 3-sample dataset bad, SKIP: the message counts the 2
 * others, not "the 16 after it". */
START_TEST(test_skip_message_small_dataset)
{
    feeder_dataset_callbacks cb = {.len = len3, .get = failing_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = small_loader(ds, 0, 3);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_SKIP), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), -EIO);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "batch 0 of epoch 0: sample 0: dataset callback returned -5: bad; skip "
                     "policy: no good sample is left for it among the dataset's 2 others");
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

#ifdef FEEDER_PACK_TOOL
/* Run feeder-pack with args; its exit status, its stderr in out. */
static int run_pack(const char *const *args, char *out, size_t outlen)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execv(FEEDER_PACK_TOOL, (char *const *)args);
        _exit(127);
    }
    close(p[1]);
    size_t used = 0;
    ssize_t k;
    while (used + 1 < outlen && (k = read(p[0], out + used, outlen - 1 - used)) > 0)
        used += (size_t)k;
    out[used] = 0;
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* feeder-pack names its own --allow-escape, and refuses a truncated JPEG
 * without --verify (its EOI is missing). */
START_TEST(test_pack_tool_checks)
{
    char lst[512], out[512], msg[2048], want[1024];
    path_in(lst, sizeof(lst), "esc.txt");
    path_in(out, sizeof(out), "o.pack");
    ck_assert_int_eq(bu_write_file(lst, "../x.jpg 1\n", 11), 0);
    const char *a1[] = {"feeder-pack", "--data", lst, "--out", out, "--mode", "jpeg", "--quiet",
                        NULL};
    ck_assert_int_eq(run_pack(a1, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want),
             "feeder-pack: %s:1: path '../x.jpg' escapes the root %s ('..' climbs above the "
             "root); --allow-escape allows it\n",
             lst, tmpdir);
    ck_assert_str_eq(msg, want);
    make_folder("d", 1, 2);
    char good[600], cut[600], dir[512];
    path_in(dir, sizeof(dir), "d");
    snprintf(good, sizeof(good), "%s/c0/000.jpg", dir);
    snprintf(cut, sizeof(cut), "%s/c0/002.jpg", dir);
    uint8_t *bytes;
    size_t len;
    ck_assert_int_eq(bu_read_file(good, &bytes, &len), 0);
    ck_assert_int_eq(bu_write_file(cut, bytes, len * 3 / 4), 0);
    free(bytes);
    const char *a2[] = {"feeder-pack", "--data", dir, "--out", out, "--mode", "jpeg", "--quiet",
                        NULL};
    ck_assert_int_eq(run_pack(a2, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want),
             "feeder-pack: %s: truncated JPEG: no end-of-image marker (FF D9) after its last "
             "scan (--verify decodes every record)\n",
             cut);
    ck_assert_str_eq(msg, want);
    ck_assert_int_eq(unlink(cut), 0);
    ck_assert_int_eq(run_pack(a2, msg, sizeof(msg)), 0);
}
END_TEST
#endif

/* c0/001-003 (indices 1-3, a run) and c1/007 (15, the last of its class)
 * corrupt, batch 16 unshuffled. */
static feeder_loader *policy_loader(feeder_dataset **ds, int workers, int policy)
{
    make_folder("p", 2, 8);
    const char *bad[] = {"p/c0/001.jpg", "p/c0/002.jpg", "p/c0/003.jpg", "p/c1/007.jpg"};
    for (int i = 0; i < 4; i++) {
        char f[512];
        path_in(f, sizeof(f), bad[i]);
        ck_assert_int_eq(bu_write_file(f, "not a jpeg", 10), 0);
    }
    *ds = tu_open_folder(tmpdir, "p");
    feeder_loader *ld = small_loader(*ds, workers, 16);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, policy), 0);
    return ld;
}

/* SKIP: each bad sample of the run gets its own replacement from its class
 * (as brackets match: 1 -> 6, 2 -> 5, 3 -> 4), and 15 wraps to 8 within its
 * class (before: 1, 2 and 3 all became 4, so 4 arrived 4 times, and 15
 * became 0, of the other class). The same for any num_workers. */
START_TEST(test_skip_replacements_distinct_in_class)
{
    const uint64_t want[16] = {0, 6, 5, 4, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 8};
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_dataset *ds;
        feeder_loader *ld = policy_loader(&ds, workers, FEEDER_ON_ERROR_SKIP);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->count, 16);
        ck_assert_uint_eq(b->skipped, 4);
        for (uint32_t i = 0; i < 16; i++) {
            ck_assert_msg(b->indices[i] == want[i], "workers %d position %u: %llu", workers, i,
                          (unsigned long long)b->indices[i]);
            ck_assert_int_eq(b->labels[i], i < 8 ? 0 : 1);
        }
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* DROP: the four bad samples are left out, nothing is repeated. */
START_TEST(test_drop_policy_shortens_batch)
{
    const uint64_t want[12] = {0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    for (int workers = 0; workers <= 2; workers += 2) {
        feeder_dataset *ds;
        feeder_loader *ld = policy_loader(&ds, workers, FEEDER_ON_ERROR_DROP);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->count, 12);
        ck_assert_uint_eq(b->skipped, 4);
        /* The kept samples' pixels moved with them: compare with a clean
         * load of the same index. */
        uint8_t *copy = malloc(b->sample_bytes * 12);
        memcpy(copy, b->data, b->sample_bytes * 12);
        for (uint32_t i = 0; i < 12; i++) {
            ck_assert_uint_eq(b->indices[i], want[i]);
            ck_assert_int_eq(b->labels[i], want[i] < 8 ? 0 : 1);
        }
        feeder_batch_release(b, NULL);
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
        feeder_stats st;
        ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
        ck_assert_uint_eq(st.dropped, 4);
        ck_assert_uint_eq(st.samples, 12);
        feeder_loader_destroy(ld);
        /* FAIL on the good samples alone gives the same pixels. */
        feeder_loader *ref = small_loader(ds, 0, 1);
        ck_assert_int_eq(feeder_loader_set(ref, FEEDER_OPT_SHUFFLE, 0), 0);
        uint32_t k = 0;
        int rc;
        while ((rc = feeder_next(ref, &b)) != FEEDER_DONE) {
            if (rc == 0 && k < 12 && b->indices[0] == want[k]) {
                ck_assert_int_eq(memcmp(b->data, copy + k * b->sample_bytes, b->sample_bytes), 0);
                k++;
            }
            if (rc == 0)
                feeder_batch_release(b, NULL);
        }
        ck_assert_uint_eq(k, 12);
        feeder_loader_destroy(ref);
        free(copy);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_list_file_streams_bounded);
    tcase_add_test(tc, test_resume_checks_dataset_fingerprint);
    tcase_add_test(tc, test_workers_inherit_nothing);
    tcase_add_test(tc, test_user_workers_keep_user_fds);
    tcase_add_test(tc, test_worker_start_failure_not_retried);
    tcase_add_test(tc, test_workers_cannot_map_slots);
    tcase_add_test(tc, test_stalled_worker_named);
    tcase_add_test(tc, test_stalled_worker_replaced);
    tcase_add_test(tc, test_pack_cut_no_workers);
    tcase_add_test(tc, test_pack_cut_workers);
    tcase_add_test(tc, test_inline_reads_in_groups);
    tcase_add_test(tc, test_pack_label_in_crc);
    tcase_add_test(tc, test_symlink_loop_named);
    tcase_add_test(tc, test_skip_message_small_dataset);
    tcase_add_test(tc, test_skip_replacements_distinct_in_class);
    tcase_add_test(tc, test_drop_policy_shortens_batch);
#ifdef FEEDER_PACK_TOOL
    tcase_add_test(tc, test_pack_tool_checks);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(faults_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
