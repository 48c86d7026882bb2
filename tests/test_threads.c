/*
 * Loaders used across threads: the workers belong to the
 * loader's process, not to the thread that happened to fork them. A loader
 * started by a thread that then ends keeps its workers, persistent or not,
 * and they still die with the process.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feeder.h"

static uint64_t user_len(void *u) { return *(uint64_t *)u; }

static int user_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                    int64_t *label, char *err, size_t errlen)
{
    (void)u, (void)err, (void)errlen;
    memset(dst, (int)(ctx->index & 255), bytes);
    *label = (int64_t)ctx->index;
    return 0;
}

static feeder_loader *make(feeder_dataset **ds, uint64_t *n, int persistent)
{
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get};
    ck_assert_int_eq(feeder_dataset_create(&cb, n, ds), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(*ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, persistent), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
    return ld;
}

typedef struct first_call {
    feeder_loader *ld;
    int rc;
    uint64_t number;
} first_call;

static void *take_first(void *arg)
{
    first_call *f = arg;
    feeder_batch *b;
    f->rc = feeder_next(f->ld, &b);
    if (f->rc == 0) {
        f->number = b->number;
        f->rc = feeder_batch_release(b, NULL);
    }
    return NULL;
}

static void started_in_a_thread(int persistent)
{
    uint64_t n = 40;
    feeder_dataset *ds;
    feeder_loader *ld = make(&ds, &n, persistent);
    first_call f = {.ld = ld, .rc = -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_first, &f), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0); /* the forking thread is gone */
    ck_assert_int_eq(f.rc, 0);
    ck_assert_uint_eq(f.number, 0);
    usleep(200 * 1000); /* a thread-bound parent-death signal would have fired by now */
    int pid0 = feeder_loader_worker_pid(ld, 0);
    ck_assert_int_gt(pid0, 0);
    ck_assert_int_eq(kill(pid0, 0), 0);
    feeder_batch *b;
    int rc, batches = 1;
    for (int epoch = 0; epoch < 2; epoch++) {
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
            batches++;
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc),
                      feeder_loader_errmsg(ld));
    }
    ck_assert_int_eq(batches, 20); /* 2 epochs of 10 batches, none lost */
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}

START_TEST(workers_outlive_the_thread_that_forked_them)
{
    started_in_a_thread(0);
}
END_TEST

START_TEST(persistent_workers_outlive_it_too)
{
    started_in_a_thread(1);
}
END_TEST

/* The workers still go with the process: a child starts a loader from a
 * thread, then is killed; its workers exit on their own. */
START_TEST(workers_die_with_the_process)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t child = fork();
    if (child == 0) {
        uint64_t n = 400;
        feeder_dataset *ds;
        feeder_loader *ld = make(&ds, &n, 1);
        first_call f = {.ld = ld, .rc = -1};
        pthread_t t;
        pthread_create(&t, NULL, take_first, &f);
        pthread_join(t, NULL);
        int pids[2] = {feeder_loader_worker_pid(ld, 0), feeder_loader_worker_pid(ld, 1)};
        if (write(fds[1], pids, sizeof(pids)) != (ssize_t)sizeof(pids))
            _exit(1);
        pause();
        _exit(0);
    }
    int pids[2];
    ck_assert_int_eq(read(fds[0], pids, sizeof(pids)), (ssize_t)sizeof(pids));
    ck_assert_int_gt(pids[0], 0);
    ck_assert_int_gt(pids[1], 0);
    kill(child, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    /* Reparented to init (or a subreaper): they are not our children, so
     * watch them with kill(pid, 0) until they are gone. */
    for (int i = 0; i < 2; i++) {
        int gone = 0;
        for (int k = 0; k < 300 && !gone; k++) {
            gone = kill(pids[i], 0) != 0;
            if (!gone)
                usleep(10 * 1000);
        }
        ck_assert_msg(gone, "worker %d (pid %d) outlived its loader's process", i, pids[i]);
    }
    close(fds[0]);
    close(fds[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, workers_outlive_the_thread_that_forked_them);
    tcase_add_test(tc, persistent_workers_outlive_it_too);
    tcase_add_test(tc, workers_die_with_the_process);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
