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
#include <stdio.h>
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

/* The main thread starts a loader (it forks the workers), hands the epoch
 * to another thread and ends with pthread_exit: the process goes on, and so
 * must its workers. The consumer waits until the main thread is gone (a
 * zombie in /proc/self/task) before it reads, then checks every sample,
 * label and index of the epoch. */
typedef struct consumer {
    feeder_loader *ld;
    feeder_dataset *ds;
    pid_t main_tid;
    int out; /* the verdict goes here */
} consumer;

/* 1 once thread `tid` of this process has ended. */
static int thread_ended(pid_t tid)
{
    char p[64], line[512];
    snprintf(p, sizeof(p), "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 1;
    int ended = 0;
    if (fgets(line, sizeof(line), f)) {
        const char *r = strrchr(line, ')');
        ended = r && (r[2] == 'Z' || r[2] == 'X');
    }
    fclose(f);
    return ended;
}

static void say(int out, const char *msg)
{
    size_t n = strlen(msg);
    if (write(out, msg, n) != (ssize_t)n)
        _exit(5);
}

static void *consume_epoch(void *arg)
{
    consumer *c = arg;
    while (!thread_ended(c->main_tid))
        usleep(1000);
    feeder_batch *b;
    int rc;
    uint64_t next = 0;
    char msg[1024];
    while ((rc = feeder_next(c->ld, &b)) == 0) {
        for (uint32_t k = 0; k < b->count; k++, next++) {
            int ok = b->indices[k] == next && b->labels[k] == (int64_t)next;
            for (size_t j = 0; ok && j < b->sample_bytes; j++)
                ok = b->data[k * b->sample_bytes + j] == (uint8_t)(next & 255);
            if (!ok) {
                snprintf(msg, sizeof(msg), "sample %llu differs", (unsigned long long)next);
                say(c->out, msg);
                return NULL;
            }
        }
        feeder_batch_release(b, NULL);
    }
    if (rc != FEEDER_DONE)
        snprintf(msg, sizeof(msg), "%s (after %llu samples)", feeder_loader_errmsg(c->ld),
                 (unsigned long long)next);
    else
        snprintf(msg, sizeof(msg), "ok %llu", (unsigned long long)next);
    say(c->out, msg);
    feeder_loader_destroy(c->ld);
    feeder_dataset_destroy(c->ds);
    /* The last thread: the process ends here. _exit, because Check's own
     * allocations, reachable only from the ended main thread's stack, would
     * read as leaks to LeakSanitizer at exit. */
    _exit(0);
}

START_TEST(workers_outlive_the_main_thread)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        static uint64_t n = 400;
        static consumer c;
        c.ld = make(&c.ds, &n, 0);
        feeder_loader_set(c.ld, FEEDER_OPT_PREFETCH_FACTOR, 1);
        c.main_tid = getpid();
        c.out = fds[1];
        if (feeder_loader_start(c.ld) || feeder_loader_worker_pid(c.ld, 1) <= 0)
            _exit(3);
        pthread_t t;
        if (pthread_create(&t, NULL, consume_epoch, &c))
            _exit(4);
        pthread_exit(NULL); /* the process goes on: the consumer ends it */
    }
    close(fds[1]);
    char got[1024];
    ssize_t len = 0, r;
    while ((r = read(fds[0], got + len, sizeof(got) - 1 - (size_t)len)) > 0)
        len += r;
    got[len] = 0;
    close(fds[0]);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_str_eq(got, "ok 400");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %x", st);
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
    tcase_add_test(tc, workers_outlive_the_main_thread);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
