/*
 * Process faults: workers that inherit nothing of
 * other loaders, workers that cannot start or stall, a packed file cut under
 * a running loader, and the calling thread's descriptors. Check forks each
 * test; tests that need their own process tree fork again.
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
    tu_folder("d", 2, 4);
    int extra[30];
    for (int i = 0; i < 30; i++)
        extra[i] = open("/dev/null", O_RDONLY);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    feeder_loader *a = tu_small_loader(ds, 1, 2), *b = tu_small_loader(ds, 2, 2);
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
    feeder_loader *a = tu_small_loader(ds, 1, 2), *b = tu_small_loader(ds, 1, 2);
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
    feeder_loader *ld = tu_small_loader(ds, 2, 2);
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
    tu_folder("d", 2, 4);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    feeder_loader *ld = tu_small_loader(ds, 4, 8);
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
/* Each worker's first incarnation stops itself before it serves a task
 * (a marker file per worker id): stalled for sure, whatever the machine's
 * load, where a SIGSTOP sent after start could come after its first batch.
 * A worker started again (max_restarts) finds its marker and goes on. */
static char stall_dir[256];

static int stop_first_time(void *user, int id)
{
    (void)user;
    char marker[300];
    snprintf(marker, sizeof(marker), "%s/stalled-%d", stall_dir, id);
    int fd = open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd >= 0) {
        close(fd);
        raise(SIGSTOP);
    }
    return 0;
}

static void stalled_worker_case(int restarts)
{
    feeder_dataset_callbacks cb = {.len = u_len, .get = u_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = tu_small_loader(ds, 2, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 300), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, restarts), 0);
    tu_path(stall_dir, sizeof(stall_dir), restarts ? "stall-r" : "stall-0");
    ck_assert_int_eq(mkdir(stall_dir, 0700), 0);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, stop_first_time, NULL), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    int pids[2] = {feeder_loader_worker_pid(ld, 0), feeder_loader_worker_pid(ld, 1)};
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

/* A persistent loader's workers begin the next epoch early; the worker
 * given epoch 1's index 0 stops itself (a marker file, once). set_epoch to
 * another epoch drops those parts and waits for the ones in flight: the
 * stopped worker must not hold that wait forever. After timeout_ms it is
 * killed and replaced (max_restarts), and the chosen epoch arrives whole. */
static int u_get_stop_ahead(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                            int64_t *label, char *err, size_t errlen)
{
    char marker[300];
    snprintf(marker, sizeof(marker), "%s/ahead-stalled", stall_dir);
    if (ctx->epoch == 1 && ctx->index == 0) {
        int fd = open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd >= 0) {
            close(fd);
            raise(SIGSTOP);
        }
    }
    return u_get(u, ctx, dst, bytes, label, err, errlen);
}

START_TEST(test_stalled_worker_in_dropped_epoch)
{
    feeder_dataset_callbacks cb = {.len = u_len, .get = u_get_stop_ahead};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, NULL, &ds), 0);
    feeder_loader *ld = tu_small_loader(ds, 2, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 300), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    tu_path(stall_dir, sizeof(stall_dir), "stall-ahead");
    ck_assert_int_eq(mkdir(stall_dir, 0700), 0);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        feeder_batch_release(b, NULL);
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    char marker[300];
    snprintf(marker, sizeof(marker), "%s/ahead-stalled", stall_dir);
    for (int i = 0; i < 1000 && access(marker, F_OK) != 0; i++)
        usleep(10000);
    ck_assert_msg(access(marker, F_OK) == 0, "no worker began epoch 1 ahead");
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 7), 0);
    uint64_t seen = 0;
    int batches = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->epoch, 7);
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
    ck_assert_uint_eq(st.worker_restarts, 1);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

static size_t write_raw_pack(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                             uint64_t *records_off)
{
    feeder__pack_header h;
    size_t len = tu_write_raw_pack(path, n, hgt, wid, FEEDER__PACK_VERSION, &h);
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
    tu_path(path, sizeof(path), "cut.pack");
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
    tu_folder("d", 2, 70);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
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

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_workers_inherit_nothing);
    tcase_add_test(tc, test_user_workers_keep_user_fds);
    tcase_add_test(tc, test_worker_start_failure_not_retried);
    tcase_add_test(tc, test_workers_cannot_map_slots);
    tcase_add_test(tc, test_stalled_worker_named);
    tcase_add_test(tc, test_stalled_worker_replaced);
    tcase_add_test(tc, test_stalled_worker_in_dropped_epoch);
    tcase_add_test(tc, test_pack_cut_no_workers);
    tcase_add_test(tc, test_pack_cut_workers);
    tcase_add_test(tc, test_inline_reads_in_groups);
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
