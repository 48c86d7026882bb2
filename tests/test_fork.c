/*
 * A loader and fork(): the loader belongs to the process that created it.
 * In a child forked from that process every call that drives the loader
 * returns FEEDER_EFORKED and touches nothing of the parent's (its workers,
 * their channels, the slots), destroy frees only the child's copies, and
 * the parent's epoch goes on whole. The dataset may be used in the child.
 */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feeder.h"
#include "testutil.h"

#define N 96
#define BATCH 4

static uint64_t user_len(void *u) { return *(uint64_t *)u; }

static int user_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                    int64_t *label, char *err, size_t errlen)
{
    (void)u, (void)err, (void)errlen;
    memset(dst, (int)((ctx->index * 7 + 3) & 255), bytes);
    *label = (int64_t)ctx->index * 3;
    return 0;
}

static feeder_loader *make(feeder_dataset *ds)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, BATCH), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
    return ld;
}

/* NULL when batch b is batch `number` of the sequential epoch, exact in every
 * index, label and byte; else what differs. */
static const char *check_batch(const feeder_batch *b, uint64_t number)
{
    if (b->number != number || b->count != BATCH)
        return "batch number or count";
    for (uint32_t k = 0; k < b->count; k++) {
        uint64_t i = number * BATCH + k;
        if (b->indices[k] != i || b->labels[k] != (int64_t)i * 3)
            return "index or label";
        for (size_t j = 0; j < b->sample_bytes; j++)
            if (b->data[k * b->sample_bytes + j] != (uint8_t)((i * 7 + 3) & 255))
                return "pixel";
    }
    return NULL;
}

/* Read the rest of the epoch from batch `first` on; NULL when it is whole. */
static const char *read_epoch(feeder_loader *ld, uint64_t first)
{
    feeder_batch *b;
    int rc;
    uint64_t next = first;
    while ((rc = feeder_next(ld, &b)) == 0) {
        const char *bad = check_batch(b, next++);
        feeder_batch_release(b, NULL);
        if (bad)
            return bad;
    }
    if (rc != FEEDER_DONE)
        return feeder_loader_errmsg(ld);
    return next == N / BATCH ? NULL : "batches missing";
}

static int alive(int pid)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return kill(pid, 0) == 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int exited = poll(&p, 1, 0);
    close(fd);
    return exited == 0;
}

/* The child's side: every call refused with the rule's message, then its
 * own loader over the same dataset, then destroy. Exits 0, or writes what
 * failed to `out` and exits 1. */
static _Noreturn void child_side(feeder_loader *ld, feeder_dataset *ds, feeder_batch *held,
                                 pid_t parent, int out)
{
    char want[512], why[1024] = "";
    snprintf(want, sizeof(want),
             "this loader belongs to process %d; a loader cannot be used in a process forked "
             "from the one that created it (make a new loader in the child)",
             (int)parent);
    feeder_batch *b;
    size_t len;
    feeder_stats st;
    struct {
        const char *what;
        int rc;
    } calls[] = {
        {"feeder_next", feeder_next(ld, &b)},
        {"feeder_batch_release", feeder_batch_release(held, NULL)},
        {"feeder_loader_start", feeder_loader_start(ld)},
        {"feeder_loader_set_epoch", feeder_loader_set_epoch(ld, 3)},
        {"feeder_loader_set", feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 2)},
        {"feeder_loader_state_save", feeder_loader_state_save(ld, NULL, 0, &len)},
        {"feeder_loader_stats", feeder_loader_stats(ld, &st)},
    };
    for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]) && !why[0]; k++) {
        if (calls[k].rc != FEEDER_EFORKED)
            snprintf(why, sizeof(why), "%s returned %d (%s)", calls[k].what, calls[k].rc,
                     feeder_loader_errmsg(ld));
    }
    if (!why[0] && strcmp(feeder_loader_errmsg(ld), want) != 0)
        snprintf(why, sizeof(why), "message: %s", feeder_loader_errmsg(ld));
    if (!why[0] && feeder_loader_worker_pid(ld, 0) != -1)
        snprintf(why, sizeof(why), "worker_pid gave the parent's worker");
    if (!why[0] && feeder_loader_state_size(ld) != 0)
        snprintf(why, sizeof(why), "state_size gave a size");
    /* The dataset is the child's too: a loader of its own reads it whole.
     * It starts (and maps its slots, maybe where the parent's were: they
     * are not mapped in the child) before the parent's copy is destroyed,
     * which must leave it alone. */
    feeder_loader *mine = NULL;
    const char *bad = NULL;
    if (!why[0] && feeder_loader_create(ds, NULL, &mine) == 0) {
        feeder_loader_set(mine, FEEDER_OPT_BATCH_SIZE, BATCH);
        feeder_loader_set(mine, FEEDER_OPT_HEIGHT, 8);
        feeder_loader_set(mine, FEEDER_OPT_WIDTH, 8);
        feeder_loader_set(mine, FEEDER_OPT_NUM_WORKERS, 2);
        if (feeder_loader_start(mine))
            snprintf(why, sizeof(why), "the child's own loader: %s", feeder_loader_errmsg(mine));
    }
    feeder_loader_destroy(ld);
    if (mine && !why[0] && (bad = read_epoch(mine, 0)))
        snprintf(why, sizeof(why), "the child's own loader: %s", bad);
    feeder_loader_destroy(mine);
    feeder_dataset_destroy(ds);
    if (!why[0])
        _exit(0);
    if (write(out, why, strlen(why)) < 0)
        _exit(2);
    _exit(1);
}

/* A child forked while the parent's loader is mid-epoch, with a batch
 * borrowed and the workers busy: the child's calls are refused, its
 * destroy leaves the workers alone, and the parent's epoch arrives whole
 * and exact, with the same workers. */
START_TEST(forked_child_cannot_use_or_harm_the_loader)
{
    uint64_t n = N;
    feeder_dataset *ds;
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get};
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    feeder_loader *ld = make(ds);
    feeder_batch *held;
    ck_assert_int_eq(feeder_next(ld, &held), 0);
    ck_assert_ptr_null(check_batch(held, 0));
    int w0 = feeder_loader_worker_pid(ld, 0), w1 = feeder_loader_worker_pid(ld, 1);
    ck_assert_int_gt(w0, 0);
    ck_assert_int_gt(w1, 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        child_side(ld, ds, held, parent, fds[1]);
    }
    close(fds[1]);
    char why[1024];
    ssize_t got = read(fds[0], why, sizeof(why) - 1);
    why[got > 0 ? got : 0] = 0;
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %x: %s", status,
                  why);
    ck_assert_msg(alive(w0) && alive(w1), "the child's destroy ended the parent's workers");
    /* The borrowed batch is still the parent's, and so is the rest. */
    ck_assert_ptr_null(check_batch(held, 0));
    ck_assert_int_eq(feeder_batch_release(held, NULL), 0);
    const char *bad = read_epoch(ld, 1);
    ck_assert_msg(bad == NULL, "parent's epoch: %s", bad);
    feeder_stats st; /* the same workers all along */
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    ck_assert_uint_eq(st.worker_restarts, 0);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Before start: the child's calls are refused as well (the options, the
 * start that would fork workers of its own from a loader it did not make). */
START_TEST(forked_child_cannot_start_a_parents_loader)
{
    uint64_t n = N;
    feeder_dataset *ds;
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get};
    ck_assert_int_eq(feeder_dataset_create(&cb, &n, &ds), 0);
    feeder_loader *ld = make(ds);
    pid_t child = fork();
    if (child == 0) {
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
        _exit(rc == FEEDER_EFORKED ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %x", status);
    ck_assert_ptr_null(read_epoch(ld, 0));
    ck_assert_str_eq(feeder_err_name(FEEDER_EFORKED), "FEEDER_EFORKED");
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A batch's bytes and labels, hashed (FNV-1a). */
static uint64_t batch_hash(const feeder_batch *b)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)b->count * b->sample_bytes; i++)
        h = (h ^ b->data[i]) * 1099511628211ull;
    for (uint32_t k = 0; k < b->count; k++)
        h = (h ^ (uint64_t)b->labels[k]) * 1099511628211ull;
    return h;
}

#define FOLDER_BATCHES 4 /* 2 classes of 6 JPEGs, batches of 3 */

/* The epoch's batch hashes from batch `first` on into h; how many came, or
 * -1 on an error. */
static int epoch_hashes(feeder_loader *ld, uint64_t first, uint64_t *h)
{
    feeder_batch *b;
    int rc, n = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        if (b->number != first + (uint64_t)n || n >= FOLDER_BATCHES)
            return -1;
        h[n++] = batch_hash(b);
        feeder_batch_release(b, NULL);
    }
    return rc == FEEDER_DONE ? n : -1;
}

/* A folder dataset (files, readers, decoders) opened before the fork serves
 * a loader made in the child, byte for byte as in the parent, while the
 * parent's own loader, forked mid-epoch, goes on. */
START_TEST(forked_child_reads_a_folder_dataset)
{
    tu_folder("d", 2, 6);
    feeder_dataset *ds = tu_open_folder(tu_dir, "d");
    uint64_t ref[FOLDER_BATCHES], got[FOLDER_BATCHES];
    feeder_loader *ld = tu_small_loader(ds, 2, 3);
    ck_assert_int_eq(epoch_hashes(ld, 0, ref), FOLDER_BATCHES);
    feeder_loader_destroy(ld);
    ld = tu_small_loader(ds, 2, 3);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(batch_hash(b), ref[0]);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    pid_t child = fork();
    if (child == 0) {
        feeder_loader *mine;
        int ok = feeder_loader_create(ds, NULL, &mine) == 0;
        ok = ok && feeder_loader_set(mine, FEEDER_OPT_BATCH_SIZE, 3) == 0 &&
             feeder_loader_set(mine, FEEDER_OPT_NUM_WORKERS, 2) == 0 &&
             feeder_loader_set(mine, FEEDER_OPT_HEIGHT, 32) == 0 &&
             feeder_loader_set(mine, FEEDER_OPT_WIDTH, 32) == 0 &&
             feeder_loader_set(mine, FEEDER_OPT_RESIZE, 40) == 0;
        ok = ok && epoch_hashes(mine, 0, got) == FOLDER_BATCHES &&
             memcmp(got, ref, sizeof(ref)) == 0;
        feeder_loader_destroy(mine);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
        _exit(ok ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %x", status);
    ck_assert_int_eq(epoch_hashes(ld, 1, got + 1), FOLDER_BATCHES - 1);
    ck_assert_mem_eq(got + 1, ref + 1, sizeof(ref) - sizeof(ref[0]));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forked_child_cannot_use_or_harm_the_loader);
    tcase_add_test(tc, forked_child_cannot_start_a_parents_loader);
    tcase_add_test(tc, forked_child_reads_a_folder_dataset);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
