/*
 * The loader end to end: determinism across worker counts, datasets, bad
 * input, worker deaths, timeouts, destroy mid-epoch, options and states.
 * Check forks each test, so a test's workers are its grandchildren and die
 * with it.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "testutil.h"
#include "feeder.h"

/* ---- helpers ---- */

static feeder_dataset *open_folder(const char *rel) { return tu_open_folder(tu_dir, rel); }

typedef struct run_cfg {
    int workers, prefetch, shuffle, in_order, pipeline, decoder, io, layout, batch, policy;
    int epochs;
    uint64_t seed;
} run_cfg;

static run_cfg defaults(void)
{
    return (run_cfg){.workers = 2, .prefetch = 2, .shuffle = 1, .in_order = 1, .pipeline = 0,
                     .decoder = FEEDER_DECODER_ROI, .io = FEEDER_IO_AUTO, .layout = 0,
                     .batch = 5, .policy = 0, .epochs = 2, .seed = 7};
}

static feeder_loader *make_loader(feeder_dataset *ds, const run_cfg *c)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, c->batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, c->workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, c->prefetch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, c->shuffle), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)c->seed), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IN_ORDER, c->in_order), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, c->pipeline), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, c->decoder), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, c->io), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, c->layout), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, c->policy), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 48), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 64), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 72), 0);
    return ld;
}

/* Run c->epochs epochs; hash every delivered byte, label and index in delivery
 * order. In order, the hash is the output's identity. */
static uint64_t run_hash(feeder_dataset *ds, const run_cfg *c, uint64_t *batches)
{
    feeder_loader *ld = make_loader(ds, c);
    uint64_t h = BU_HASH_INIT, nb = 0;
    for (int e = 0; e < c->epochs; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->epoch, (uint64_t)e);
            h = bu_hash(h, b->data, (size_t)b->count * b->sample_bytes);
            h = bu_hash(h, b->labels, b->count * sizeof(int64_t));
            h = bu_hash(h, b->indices, b->count * sizeof(uint64_t));
            nb++;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "feeder_next: %s: %s", feeder_strerror(rc),
                      feeder_loader_errmsg(ld));
    }
    feeder_loader_destroy(ld);
    if (batches)
        *batches = nb;
    return h;
}

/* ---- a user dataset whose pixels are a function of (index, epoch) ---- */

typedef struct user_ds {
    uint64_t n;
    int sleep_ms;          /* per sample */
    int64_t exit_at;       /* index whose load calls _exit(exit_code), or -1 */
    int exit_code;
    int64_t fail_at;       /* index that fails, or -1 */
    int note_fd;           /* > 0: each load writes its epoch's low byte there */
} user_ds;

static uint64_t user_len(void *u) { return ((user_ds *)u)->n; }

static int user_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                    int64_t *label, char *err, size_t errlen)
{
    user_ds *d = u;
    if (d->sleep_ms) {
        struct timespec ts = {0, d->sleep_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    if ((int64_t)ctx->index == d->exit_at)
        _exit(d->exit_code);
    if ((int64_t)ctx->index == d->fail_at) {
        snprintf(err, errlen, "refusing sample %llu", (unsigned long long)ctx->index);
        return -5;
    }
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(feeder_random(ctx->seed, ctx->epoch, ctx->index, i / 8) >> (8 * (i % 8)));
    *label = (int64_t)(ctx->index % 10);
    uint8_t e = (uint8_t)ctx->epoch;
    if (d->note_fd > 0 && write(d->note_fd, &e, 1) != 1)
        return -5;
    return 0;
}

static feeder_dataset *make_user(user_ds *d)
{
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, d, &ds), 0);
    return ds;
}

/* ---- determinism ---- */

START_TEST(test_user_exact_order)
{
    user_ds d = {.n = 23, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.batch = 4;
    c.workers = 3;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_sampler *ref;
    ck_assert_int_eq(feeder_sampler_random(23, 0, 0, 7, &ref), 0);
    for (uint64_t e = 0; e < 2; e++) {
        uint64_t order[23];
        ck_assert_int_eq(feeder_sampler_fill(ref, e, order, 23), 0);
        feeder_batch *b;
        uint64_t pos = 0, nb = 0;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->number, nb);
            ck_assert_uint_eq(b->count, nb < 5 ? 4u : 3u);
            ck_assert_uint_eq(b->height, 48);
            ck_assert_uint_eq(b->width, 64);
            for (uint32_t i = 0; i < b->count; i++, pos++) {
                ck_assert_uint_eq(b->indices[i], order[pos]);
                ck_assert_int_eq(b->labels[i], (int64_t)(order[pos] % 10));
                uint8_t want[48 * 64 * 3];
                int64_t lab;
                feeder_sample_ctx sc = {.index = order[pos], .seed = 7, .epoch = e};
                user_get(&d, &sc, want, sizeof(want), &lab, NULL, 0);
                ck_assert_int_eq(memcmp(b->data + i * b->sample_bytes, want, sizeof(want)), 0);
            }
            nb++;
            feeder_batch_release(b, NULL);
        }
        ck_assert_int_eq(rc, FEEDER_DONE);
        ck_assert_uint_eq(pos, 23);
        ck_assert_uint_eq(nb, 6);
    }
    feeder_sampler_destroy(ref);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_user_same_hash_any_workers)
{
    user_ds d = {.n = 37, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.workers = 0;
    uint64_t ref = run_hash(ds, &c, NULL);
    int workers[] = {1, 2, 4};
    int prefetch[] = {1, 4};
    for (int w = 0; w < 3; w++)
        for (int p = 0; p < 2; p++) {
            c.workers = workers[w];
            c.prefetch = prefetch[p];
            ck_assert_msg(run_hash(ds, &c, NULL) == ref, "workers %d prefetch %d differ",
                          workers[w], prefetch[p]);
        }
    c.seed = 8;
    ck_assert_uint_ne(run_hash(ds, &c, NULL), ref);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_jpeg_same_hash_any_workers_and_io)
{
    tu_folder("imgs", 3, 6);
    feeder_dataset *ds = open_folder("imgs");
    int pipelines[] = {FEEDER_PIPELINE_EVAL, FEEDER_PIPELINE_TRAIN};
    for (int p = 0; p < 2; p++) {
        run_cfg c = defaults();
        c.pipeline = pipelines[p];
        c.workers = 0;
        c.io = FEEDER_IO_PREAD;
        uint64_t nb, ref = run_hash(ds, &c, &nb);
        ck_assert_uint_eq(nb, 8); /* 18 samples, batch 5: 4 per epoch */
        int workers[] = {0, 1, 2, 4};
        for (int w = 0; w < 4; w++)
            for (int pf = 1; pf <= 4; pf += 3)
                for (int io = FEEDER_IO_AUTO; io <= FEEDER_IO_PREAD; io++) {
                    c.workers = workers[w];
                    c.prefetch = pf;
                    c.io = io;
                    ck_assert_msg(run_hash(ds, &c, NULL) == ref,
                                  "pipeline %d workers %d prefetch %d io %d differ", c.pipeline,
                                  c.workers, pf, io);
                }
    }
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_in_order_off_delivers_everything)
{
    user_ds d = {.n = 40, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.workers = 3;
    c.in_order = 0;
    c.batch = 3;
    feeder_loader *ld = make_loader(ds, &c);
    int seen[14] = {0};
    int count[40] = {0};
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_lt(b->number, 14);
        seen[b->number]++;
        for (uint32_t i = 0; i < b->count; i++)
            count[b->indices[i]]++;
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    for (int i = 0; i < 14; i++)
        ck_assert_int_eq(seen[i], 1);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(count[i], 1);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_drop_last_and_sampler)
{
    user_ds d = {.n = 10, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    uint64_t idx[] = {9, 3, 3, 1, 0, 7, 2};
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_subset(idx, 7, 0, 0, &s), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, s, &ld), 0);
    feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 3);
    feeder_loader_set(ld, FEEDER_OPT_DROP_LAST, 1);
    feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2);
    feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 4);
    feeder_loader_set(ld, FEEDER_OPT_WIDTH, 4);
    feeder_loader_set(ld, FEEDER_OPT_RESIZE, 4);
    feeder_batch *b;
    uint64_t pos = 0;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->count, 3);
        for (uint32_t i = 0; i < 3; i++)
            ck_assert_uint_eq(b->indices[i], idx[pos++]);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(pos, 6);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(s);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_set_epoch_mid_epoch)
{
    user_ds d = {.n = 30, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.workers = 2;
    c.batch = 4;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 5), 0);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->epoch, 5);
    ck_assert_uint_eq(b->number, 0);
    feeder_sampler *ref;
    ck_assert_int_eq(feeder_sampler_random(30, 0, 0, 7, &ref), 0);
    uint64_t order[30];
    feeder_sampler_fill(ref, 5, order, 30);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_uint_eq(b->indices[i], order[i]);
    feeder_batch_release(b, NULL);
    feeder_sampler_destroy(ref);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- workers ---- */

START_TEST(test_persistent_workers)
{
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    for (int persistent = 0; persistent <= 1; persistent++) {
        run_cfg c = defaults();
        feeder_loader *ld = make_loader(ds, &c);
        feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, persistent);
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        int pid0 = feeder_loader_worker_pid(ld, 0);
        ck_assert_int_gt(pid0, 0);
        feeder_batch_release(b, NULL);
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0)
            feeder_batch_release(b, NULL);
        ck_assert_int_eq(rc, FEEDER_DONE);
        if (!persistent) /* stopped and reaped at the end of the epoch */
            ck_assert_int_eq(kill(pid0, 0), -1);
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        int pid1 = feeder_loader_worker_pid(ld, 0);
        if (persistent)
            ck_assert_int_eq(pid1, pid0);
        else
            ck_assert_int_ne(pid1, pid0);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- the next epoch run ahead (persistent workers) ---- */

/* One epoch's hash (bytes, labels, indices in delivery order); *ahead: the
 * loader's batches_ahead counter after it. */
static uint64_t epoch_hash(feeder_loader *ld, uint64_t want_epoch, uint64_t *ahead)
{
    uint64_t h = BU_HASH_INIT;
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->epoch, want_epoch);
        h = bu_hash(h, b->data, (size_t)b->count * b->sample_bytes);
        h = bu_hash(h, b->labels, b->count * sizeof(int64_t));
        h = bu_hash(h, b->indices, b->count * sizeof(uint64_t));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_msg(rc == FEEDER_DONE, "feeder_next: %s: %s", feeder_strerror(rc),
                  feeder_loader_errmsg(ld));
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    if (ahead)
        *ahead = st.batches_ahead;
    return h;
}

/* Epoch e alone, from a loader whose workers stop after every epoch. */
static uint64_t reference_epoch(feeder_dataset *ds, const run_cfg *c, uint64_t e)
{
    feeder_loader *ld = make_loader(ds, c);
    ck_assert_int_eq(feeder_loader_set_epoch(ld, e), 0);
    uint64_t ahead = 1, h = epoch_hash(ld, e, &ahead);
    ck_assert_uint_eq(ahead, 0);
    feeder_loader_destroy(ld);
    return h;
}

START_TEST(test_run_ahead_same_output)
{
    /* 23 samples in batches of 5: 5 batches, 4 slots; with 1 worker and a
     * slow sample the next epoch begins while this one is still loading. */
    user_ds d = {.n = 23, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    for (int workers = 1; workers <= 3; workers += 2) {
        run_cfg c = defaults();
        c.workers = workers;
        c.in_order = workers == 1;
        feeder_loader *ld = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
        uint64_t ahead = 0, before = 0;
        for (uint64_t e = 0; e < 3; e++) {
            uint64_t h = epoch_hash(ld, e, &ahead);
            if (c.in_order)
                ck_assert_uint_eq(h, reference_epoch(ds, &c, e));
            if (e > 0) /* every batch of epochs 1 and 2 was begun early or not */
                ck_assert_uint_le(ahead - before, 5);
            before = ahead;
        }
        ck_assert_uint_gt(ahead, 0);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_run_ahead_set_epoch)
{
    user_ds d = {.n = 23, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    uint64_t a0, a1, a2;
    ck_assert_uint_eq(epoch_hash(ld, 0, &a0), reference_epoch(ds, &c, 0));
    ck_assert_uint_gt(a0, 0);
    /* The epoch begun ahead, chosen again (a loop that sets every epoch):
     * kept. */
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 1), 0);
    ck_assert_uint_eq(epoch_hash(ld, 1, &a1), reference_epoch(ds, &c, 1));
    ck_assert_uint_gt(a1, a0);
    /* Another epoch after the end of one: what was begun is dropped. */
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 7), 0);
    ck_assert_uint_eq(epoch_hash(ld, 7, &a2), reference_epoch(ds, &c, 7));
    /* Mid-epoch, with epoch 8 begun in the slots freed so far. */
    feeder_batch *b;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->epoch, 8);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 3), 0);
    ck_assert_uint_eq(epoch_hash(ld, 3, NULL), reference_epoch(ds, &c, 3));
    ck_assert_uint_eq(epoch_hash(ld, 4, NULL), reference_epoch(ds, &c, 4));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Read n notes (user_ds.note_fd) from fd within 30 s; each must be `epoch`. */
static void expect_notes(int fd, int n, uint8_t epoch)
{
    for (int got = 0; got < n;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&p, 1, 30000) == 1, "%d of %d samples loaded", got, n);
        uint8_t buf[64];
        ssize_t k = read(fd, buf, sizeof(buf) < (size_t)(n - got) ? sizeof(buf) : (size_t)(n - got));
        ck_assert_int_gt(k, 0);
        for (ssize_t i = 0; i < k; i++)
            ck_assert_uint_eq(buf[i], epoch);
        got += (int)k;
    }
}

static void drain_notes(int fd)
{
    uint8_t buf[256];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

START_TEST(test_start_begins_the_first_epoch)
{
    /* feeder_loader_start gives the workers the first epoch's batches
     * before it returns (loader/flow.c, feeder__host_kick): 4 slots of 5
     * samples, 2 parts a batch (one per worker), and each worker holds 2
     * parts at a time (FEEDER__WORKER_QUEUE), so batches 0 and 1, 10
     * samples, are loaded before any feeder_next. The
     * epoch is the one set before start; set after start to another, the
     * begun batches are dropped and that epoch comes whole. Neither counts
     * as batches_ahead, and the bytes are the reference's. */
    int p[2];
    ck_assert_int_eq(pipe2(p, O_NONBLOCK), 0);
    user_ds d = {.n = 20, .exit_at = -1, .fail_at = -1, .note_fd = p[1]};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    uint64_t ref2 = reference_epoch(ds, &c, 2), ref5 = reference_epoch(ds, &c, 5), ahead = 1;
    drain_notes(p[0]);
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 2), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    expect_notes(p[0], 10, 2);
    ck_assert_uint_eq(epoch_hash(ld, 2, &ahead), ref2);
    ck_assert_uint_eq(ahead, 0);
    feeder_loader_destroy(ld);
    drain_notes(p[0]);
    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    expect_notes(p[0], 10, 0);
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 5), 0);
    ck_assert_uint_eq(epoch_hash(ld, 5, &ahead), ref5);
    ck_assert_uint_eq(ahead, 0);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* A user sampler: the dataset's indices, last first. */
static uint64_t rev_len(void *u, uint64_t epoch)
{
    (void)epoch;
    return ((user_ds *)u)->n;
}

static int rev_fill(void *u, uint64_t epoch, uint64_t *out, uint64_t count)
{
    (void)epoch;
    for (uint64_t i = 0; i < count; i++)
        out[i] = ((user_ds *)u)->n - 1 - i;
    return 0;
}

START_TEST(test_run_ahead_state_and_user_sampler)
{
    user_ds d = {.n = 23, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    epoch_hash(ld, 0, NULL);
    /* Saved between epochs while epoch 1 is being begun: the state is
     * epoch 1 from its start, and a loader resumed from it gives epoch 1. */
    uint8_t blob[4096];
    size_t len = 0;
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, sizeof(blob), &len), 0);
    uint64_t want = epoch_hash(ld, 1, NULL);
    feeder_loader_destroy(ld);
    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), 0);
    ck_assert_uint_eq(epoch_hash(ld, 1, NULL), want);
    ck_assert_uint_eq(want, reference_epoch(ds, &c, 1));
    feeder_loader_destroy(ld);
    /* A user's sampler may change between epochs: never asked early. */
    feeder_sampler_callbacks cb = {.len = rev_len, .fill = rev_fill};
    feeder_sampler *smp;
    ck_assert_int_eq(feeder_sampler_create(&cb, &d, &smp), 0);
    ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    for (uint64_t e = 0; e < 2; e++) {
        uint64_t ahead = 1;
        feeder_batch *b;
        uint64_t next = 22;
        while (feeder_next(ld, &b) == 0) {
            for (uint32_t i = 0; i < b->count; i++)
                ck_assert_uint_eq(b->indices[i], next--);
            feeder_batch_release(b, NULL);
        }
        feeder_stats st;
        ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
        ahead = st.batches_ahead;
        ck_assert_uint_eq(ahead, 0);
        ck_assert_uint_eq(next, UINT64_MAX);
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A user sampler asked early (feeder_sampler_set_ahead): the dataset's
 * indices rotated by 7 an epoch plus `shift`, its fills counted by epoch. */
typedef struct rot_sampler {
    uint64_t n, shift;
    int fills[8];
} rot_sampler;

static uint64_t rot_len(void *u, uint64_t epoch)
{
    (void)epoch;
    return ((rot_sampler *)u)->n;
}

static int rot_fill(void *u, uint64_t epoch, uint64_t *out, uint64_t count)
{
    rot_sampler *r = u;
    if (epoch < 8)
        r->fills[epoch]++;
    for (uint64_t i = 0; i < count; i++)
        out[i] = (i + epoch * 7 + r->shift) % r->n;
    return 0;
}

/* One epoch from ld: every index at its place in the rotation by `rot`. */
static void expect_rotation(feeder_loader *ld, uint64_t epoch, uint64_t n, uint64_t rot)
{
    feeder_batch *b;
    uint64_t pos = 0;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->epoch, epoch);
        for (uint32_t i = 0; i < b->count; i++, pos++)
            ck_assert_uint_eq(b->indices[i], (pos + rot) % n);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(pos, n);
}

START_TEST(test_run_ahead_checked_user_sampler)
{
    user_ds d = {.n = 23, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    rot_sampler r = {.n = 23};
    feeder_sampler_callbacks cb = {.len = rot_len, .fill = rot_fill};
    feeder_sampler *smp, *plain;
    ck_assert_int_eq(feeder_sampler_create(&cb, &r, &smp), 0);
    ck_assert_int_eq(feeder_sampler_set_ahead(NULL, 1), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_random(23, 0, 0, 1, &plain), 0);
    ck_assert_int_eq(feeder_sampler_set_ahead(plain, 1), FEEDER_EINVAL);
    feeder_sampler_destroy(plain);
    ck_assert_int_eq(feeder_sampler_set_ahead(smp, 1), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    feeder_stats st;
    /* The same order when the epoch begins: the early batches are kept. */
    expect_rotation(ld, 0, 23, 0);
    ck_assert_int_eq(r.fills[1], 1); /* epoch 1 asked early */
    expect_rotation(ld, 1, 23, 7);
    ck_assert_int_eq(r.fills[1], 2); /* and again as it began */
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    uint64_t kept = st.batches_ahead;
    ck_assert_uint_gt(kept, 0);
    /* The sampler changed after epoch 2 was asked early: epoch 2 is the
     * later order, every index once, nothing of the early one. */
    ck_assert_int_eq(r.fills[2], 1);
    r.shift = 5;
    expect_rotation(ld, 2, 23, 14 + 5);
    ck_assert_int_eq(r.fills[2], 2);
    expect_rotation(ld, 3, 23, 21 + 5);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}
END_TEST

static int init_calls_fd = -1;
static int record_init(void *user, int id)
{
    char c = (char)('0' + id);
    return write(init_calls_fd, &c, 1) == 1 ? 0 : 1;
}
static int failing_init(void *user, int id) { return id == 1 ? 42 : 0; }

START_TEST(test_worker_init)
{
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    init_calls_fd = p[1];
    run_cfg c = defaults();
    c.workers = 3;
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, record_init, NULL), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    close(p[1]);
    char got[8] = {0};
    ssize_t n = read(p[0], got, sizeof(got));
    ck_assert_int_eq(n, 3);
    int mask = 0;
    for (int i = 0; i < 3; i++)
        mask |= 1 << (got[i] - '0');
    ck_assert_int_eq(mask, 7);
    close(p[0]);

    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, failing_init, NULL), 0);
    int rc = feeder_next(ld, &b);
    ck_assert_int_eq(rc, FEEDER_ECALLBACK);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "worker_init failed in worker 1"));
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "returned 42"));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

static double now_s(void) { return (double)bu_now_ns() / 1e9; }

START_TEST(test_worker_sigkill_mid_epoch)
{
    user_ds d = {.n = 200, .sleep_ms = 5, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.workers = 3;
    c.batch = 4;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    int pid = feeder_loader_worker_pid(ld, 1);
    int others[2] = {feeder_loader_worker_pid(ld, 0), feeder_loader_worker_pid(ld, 2)};
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    double t0 = now_s();
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        feeder_batch_release(b, NULL);
    double dt = now_s() - t0;
    ck_assert_int_eq(rc, FEEDER_EWORKER);
    ck_assert_double_lt(dt, 2.0);
    char want[128];
    snprintf(want, sizeof(want), "worker 1 (pid %d) was killed by signal 9", pid);
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), want), "message: %s", feeder_loader_errmsg(ld));
    /* Every worker is gone and reaped. */
    ck_assert_int_eq(kill(pid, 0), -1);
    ck_assert_int_eq(kill(others[0], 0), -1);
    ck_assert_int_eq(kill(others[1], 0), -1);
    /* The loader goes on with the next epoch and fresh workers. */
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->epoch, 1);
    ck_assert_uint_eq(b->number, 0);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_worker_exit_status)
{
    user_ds d = {.n = 40, .exit_at = 13, .exit_code = 7, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.shuffle = 0;
    c.workers = 2;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        feeder_batch_release(b, NULL);
    ck_assert_int_eq(rc, FEEDER_EWORKER);
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), "exited with status 7"), "message: %s",
                  feeder_loader_errmsg(ld));
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), "while loading batch 2"), "message: %s",
                  feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_timeout_loses_nothing)
{
    user_ds d = {.n = 4, .sleep_ms = 150, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.workers = 1;
    c.batch = 4;
    c.shuffle = 0;
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 50), 0);
    feeder_batch *b;
    double t0 = now_s();
    int rc = feeder_next(ld, &b);
    ck_assert_int_eq(rc, FEEDER_ETIMEDOUT);
    ck_assert_double_lt(now_s() - t0, 0.5);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "timeout_ms = 50"));
    int timeouts = 1;
    while ((rc = feeder_next(ld, &b)) == FEEDER_ETIMEDOUT)
        timeouts++;
    ck_assert_int_eq(rc, 0);
    ck_assert_int_ge(timeouts, 2);
    ck_assert_uint_eq(b->count, 4);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_uint_eq(b->indices[i], i);
    feeder_batch_release(b, NULL);
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

static int count_memfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        char p[300], target[300];
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(p, target, sizeof(target) - 1);
        if (l > 0) {
            target[l] = 0;
            n += strstr(target, "feeder-slots") != NULL;
        }
    }
    closedir(d);
    return n;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int count_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, "feeder-slots") != NULL;
    fclose(f);
    return n;
}

START_TEST(test_destroy_mid_epoch_leaves_nothing)
{
    tu_folder("imgs", 2, 10);
    feeder_dataset *ds = open_folder("imgs");
    int shm0 = count_dir("/dev/shm");
    run_cfg c = defaults();
    c.workers = 4;
    c.batch = 2;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(count_memfds(), 1);
    ck_assert_int_eq(count_mappings(), 1);
    int pids[4];
    for (int i = 0; i < 4; i++)
        pids[i] = feeder_loader_worker_pid(ld, i);
    /* Destroy with a batch borrowed and parts in flight. */
    feeder_loader_destroy(ld);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_gt(pids[i], 0);
        /* Not running and not a zombie: reaped, so the pid is gone. */
        ck_assert_int_eq(kill(pids[i], 0), -1);
        ck_assert_int_eq(errno, ESRCH);
    }
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* no child left at all */
    ck_assert_int_eq(count_memfds(), 0);
    ck_assert_int_eq(count_mappings(), 0);
    ck_assert_int_eq(count_dir("/dev/shm"), shm0);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_all_slots_borrowed)
{
    user_ds d = {.n = 50, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    for (int w = 0; w <= 2; w += 2) {
        run_cfg c = defaults();
        c.workers = w;
        c.prefetch = 1;
        feeder_loader *ld = make_loader(ds, &c);
        int slots = w ? w : 1;
        feeder_batch *held[4];
        for (int i = 0; i < slots; i++)
            ck_assert_int_eq(feeder_next(ld, &held[i]), 0);
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EBUSY);
        ck_assert_int_eq(feeder_batch_release(held[0], NULL), 0);
        ck_assert_int_eq(feeder_batch_release(held[0], NULL), FEEDER_EINVAL); /* twice */
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->number, (uint64_t)slots);
        feeder_batch_release(b, NULL);
        for (int i = 1; i < slots; i++)
            feeder_batch_release(held[i], NULL);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- bad input ---- */

static void write_bytes(const char *rel, const void *data, size_t len)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    ck_assert_int_eq(bu_write_file(p, data, len), 0);
}

/* A folder where c0/002.jpg is replaced by `bad`. Sequential, batch 3:
 * sample 2 is in batch 0. */
static void expect_bad(const void *bad, size_t len, int want_rc, const char *want_text,
                       int64_t max_pixels)
{
    tu_folder("bad", 2, 4);
    char rel[64] = "bad/c0/002.jpg";
    if (bad)
        write_bytes(rel, bad, len);
    else {
        char p[512];
        tu_path(p, sizeof(p), rel);
        unlink(p);
        /* The dataset was opened before the file vanished: keep it listed by
         * re-creating the folder's list through a list file instead. */
    }
    char lst[512];
    tu_path(lst, sizeof(lst), "bad.txt");
    FILE *f = fopen(lst, "w");
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 4; i++)
            fprintf(f, "bad/c%d/%03d.jpg %d\n", c, i, c);
    fclose(f);
    char err[512];
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    for (int policy = 0; policy <= 1; policy++)
        for (int workers = 0; workers <= 2; workers += 2) {
            run_cfg c = defaults();
            c.shuffle = 0;
            c.batch = 3;
            c.workers = workers;
            c.policy = policy;
            feeder_loader *ld = make_loader(ds, &c);
            if (max_pixels)
                ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_PIXELS, max_pixels), 0);
            feeder_batch *b;
            int rc = feeder_next(ld, &b);
            if (policy == FEEDER_ON_ERROR_FAIL) {
                ck_assert_int_eq(rc, want_rc);
                const char *m = feeder_loader_errmsg(ld);
                ck_assert_msg(strstr(m, "sample 2 (") && strstr(m, "bad/c0/002.jpg") &&
                                  strstr(m, want_text),
                              "message: %s", m);
                /* Only that batch failed: the rest of the epoch arrives. */
                ck_assert_int_eq(feeder_next(ld, &b), 0);
                ck_assert_uint_eq(b->number, 1);
                ck_assert_uint_eq(b->indices[0], 3);
                feeder_batch_release(b, NULL);
                ck_assert_int_eq(feeder_next(ld, &b), 0);
                feeder_batch_release(b, NULL);
                ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
                feeder_stats st;
                feeder_loader_stats(ld, &st);
                ck_assert_uint_eq(st.failed_batches, 1);
            } else {
                ck_assert_msg(rc == 0, "%s", feeder_loader_errmsg(ld));
                /* Replaced by the next sample in dataset order. */
                ck_assert_uint_eq(b->indices[0], 0);
                ck_assert_uint_eq(b->indices[1], 1);
                ck_assert_uint_eq(b->indices[2], 3);
                ck_assert_int_eq(b->labels[2], 0);
                ck_assert_uint_eq(b->skipped, 1);
                feeder_batch_release(b, NULL);
                while ((rc = feeder_next(ld, &b)) == 0)
                    feeder_batch_release(b, NULL);
                ck_assert_int_eq(rc, FEEDER_DONE);
                feeder_stats st;
                feeder_loader_stats(ld, &st);
                ck_assert_uint_eq(st.skipped, 1);
                ck_assert_uint_eq(st.samples, 8);
            }
            feeder_loader_destroy(ld);
        }
    feeder_dataset_destroy(ds);
}

START_TEST(test_bad_missing_file)
{
    expect_bad(NULL, 0, -ENOENT, "open: No such file or directory", 0);
}
END_TEST

START_TEST(test_bad_empty_file) { expect_bad("", 0, FEEDER_EDECODE, "empty file", 0); }
END_TEST

START_TEST(test_bad_not_jpeg)
{
    const char gif[] = "GIF89a this is not an image we read";
    expect_bad(gif, sizeof(gif), FEEDER_EDECODE,
               "not a JPEG, PNG or WebP file (starts 47 49 46 38: GIF)", 0);
}
END_TEST

START_TEST(test_bad_truncated)
{
    uint8_t *j;
    size_t len;
    ck_assert_int_eq(bu_make_jpeg(tu_photos, 0, 200, 150, 90, -1, 1, &j, &len), 0);
    /* Keep the header and part of the scan: a truncated download. */
    expect_bad(j, len / 2, FEEDER_EDECODE, "", 0);
    free(j);
}
END_TEST

START_TEST(test_bad_over_pixel_limit)
{
    /* Every image in the folder is under 300x280; this one is 400x300. */
    uint8_t *j;
    size_t len;
    ck_assert_int_eq(bu_make_jpeg(tu_photos, 0, 400, 300, 90, -1, 1, &j, &len), 0);
    expect_bad(j, len, FEEDER_ETOOBIG, "", 300 * 280);
    free(j);
}
END_TEST

START_TEST(test_user_callback_error)
{
    user_ds d = {.n = 9, .exit_at = -1, .fail_at = 4};
    feeder_dataset *ds = make_user(&d);
    run_cfg c = defaults();
    c.shuffle = 0;
    c.batch = 3;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    ck_assert_int_eq(feeder_next(ld, &b), -5);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "refusing sample 4"));
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 2);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- datasets ---- */

START_TEST(test_folder_labels_and_order)
{
    /* Class names sort in byte order; files inside sort by path; non-JPEG
     * files and files beside the class folders are ignored; nested folders
     * belong to their class. */
    const char *files[] = {"f/b/2.jpg", "f/b/1.JPEG", "f/a/x.jpg", "f/a/sub/y.jpg",
                           "f/a/notes.txt", "f/C/z.jpg", "f/readme.jpg"};
    char dir[512];
    tu_path(dir, sizeof(dir), "f/a/sub");
    bu_mkdirs(dir);
    tu_path(dir, sizeof(dir), "f/b");
    bu_mkdirs(dir);
    tu_path(dir, sizeof(dir), "f/C");
    bu_mkdirs(dir);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        write_bytes(files[i], "x", 1);
    feeder_dataset *ds = open_folder("f");
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 3);
    ck_assert_str_eq(feeder_dataset_class_name(ds, 0), "C");
    ck_assert_str_eq(feeder_dataset_class_name(ds, 1), "a");
    ck_assert_str_eq(feeder_dataset_class_name(ds, 2), "b");
    ck_assert_uint_eq(feeder_dataset_size(ds), 5);
    const char *want[] = {"f/C/z.jpg", "f/a/sub/y.jpg", "f/a/x.jpg", "f/b/1.JPEG", "f/b/2.jpg"};
    int64_t labels[] = {0, 1, 1, 2, 2};
    for (int i = 0; i < 5; i++) {
        char p[512];
        tu_path(p, sizeof(p), want[i]);
        ck_assert_str_eq(feeder_dataset_path(ds, (uint64_t)i), p);
        ck_assert_int_eq(feeder_dataset_label(ds, (uint64_t)i), labels[i]);
    }
    ck_assert_ptr_null(feeder_dataset_path(ds, 5));
    ck_assert_int_eq(feeder_dataset_label(ds, 5), -1);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_folder_errors)
{
    char root[512], err[512];
    feeder_dataset *ds = (feeder_dataset *)0x1;
    tu_path(root, sizeof(root), "missing");
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, root));
    ck_assert_ptr_eq(ds, (feeder_dataset *)0x1); /* untouched on failure */
    tu_path(root, sizeof(root), "empty");
    bu_mkdirs(root);
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_ptr_nonnull(strstr(err, "no class folders"));
    tu_path(root, sizeof(root), "empty/cls");
    bu_mkdirs(root);
    tu_path(root, sizeof(root), "empty");
    ck_assert_int_eq(feeder_dataset_open_folder(root, &ds, err, sizeof(err)), FEEDER_EDATASET);
    ck_assert_ptr_nonnull(strstr(err, "no .jpg, .jpeg, .jfif, .png or .webp files"));
    ck_assert_int_eq(feeder_dataset_open_folder(NULL, &ds, err, sizeof(err)), FEEDER_EINVAL);
}
END_TEST

START_TEST(test_list_file_paths_with_spaces_and_utf8)
{
    char dir[512];
    tu_path(dir, sizeof(dir), "l/été tu_photos");
    bu_mkdirs(dir);
    char p[600];
    snprintf(p, sizeof(p), "%s/chat noir.jpg", dir);
    ck_assert_int_eq(bu_write_jpeg(tu_photos, p, 1, 120, 100, 90, -1, 3), 0);
    snprintf(p, sizeof(p), "%s/日本.jpg", dir);
    ck_assert_int_eq(bu_write_jpeg(tu_photos, p, 2, 100, 120, 90, -1, 4), 0);
    const char *list = "# comment\n\n été tu_photos/chat noir.jpg   3\nété tu_photos/日本.jpg\t11\r\n";
    write_bytes("l/list.txt", list, strlen(list));
    char lst[512], err[512];
    tu_path(lst, sizeof(lst), "l/list.txt");
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(feeder_dataset_size(ds), 2);
    ck_assert_int_eq(feeder_dataset_label(ds, 0), 3);
    ck_assert_int_eq(feeder_dataset_label(ds, 1), 11);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), 12);
    snprintf(p, sizeof(p), "%s/chat noir.jpg", dir);
    ck_assert_str_eq(feeder_dataset_path(ds, 0), p);
    run_cfg c = defaults();
    c.shuffle = 0;
    c.batch = 2;
    for (c.workers = 0; c.workers <= 1; c.workers++) {
        feeder_loader *ld = make_loader(ds, &c);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_int_eq(b->labels[0], 3);
        ck_assert_int_eq(b->labels[1], 11);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_list_file_errors)
{
    char lst[512], err[512];
    feeder_dataset *ds;
    const char *bad[] = {"a.jpg 1\nb.jpg\n", "a.jpg 1\nb.jpg -3\n", "a.jpg 1\nb.jpg x\n",
                         "a.jpg 1\n   7\n"};
    for (int i = 0; i < 4; i++) {
        write_bytes("bad.txt", bad[i], strlen(bad[i]));
        tu_path(lst, sizeof(lst), "bad.txt");
        ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)),
                         FEEDER_EDATASET);
        char want[600];
        snprintf(want, sizeof(want), "%s:2:", lst);
        ck_assert_msg(strstr(err, want), "case %d: %s", i, err);
    }
    write_bytes("empty.txt", "# nothing\n", 10);
    tu_path(lst, sizeof(lst), "empty.txt");
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    tu_path(lst, sizeof(lst), "nope.txt");
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "nope.txt"));
}
END_TEST

/* ---- options and states ---- */

/* Every option keeps what was set, at both ends of its range, in the
 * field its table row names: a row with the wrong field type would clip
 * or mangle one end. */
START_TEST(test_option_round_trip)
{
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    int seen = 0;
    for (int opt = 0; opt < 256; opt++) {
        if (!feeder_option_name((feeder_option)opt) || opt == FEEDER_OPT_SEED)
            continue;
        double lo, hi, v;
        ck_assert_int_eq(feeder_option_bounds((feeder_option)opt, &lo, &hi), 0);
        int is_double = feeder_loader_set(ld, (feeder_option)opt, (int64_t)lo) == FEEDER_EINVAL;
        double ends[2] = {lo, hi};
        for (int e = 0; e < 2; e++) {
            if (is_double)
                ck_assert_int_eq(feeder_loader_set_double(ld, (feeder_option)opt, ends[e]), 0);
            else
                ck_assert_int_eq(feeder_loader_set(ld, (feeder_option)opt, (int64_t)ends[e]), 0);
            ck_assert_int_eq(feeder_loader_get(ld, (feeder_option)opt, &v), 0);
            ck_assert_msg(v == ends[e], "%s: set %.17g, got %.17g",
                          feeder_option_name((feeder_option)opt), ends[e], v);
        }
        seen++;
    }
    ck_assert_int_eq(seen, 48);
    double v;
    uint64_t seed;
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, INT64_MIN), 0);
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_SEED, &v), 0);
    ck_assert_double_eq(v, (double)INT64_MIN);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, -5), 0);
    ck_assert_int_eq(feeder_loader_seed(ld, &seed), 0);
    ck_assert_uint_eq(seed, (uint64_t)-5);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, FEEDER_DECODER_TURBO), 0);
    ck_assert_int_eq(feeder_loader_decoder(ld, NULL), FEEDER_DECODER_TURBO);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_options)
{
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    double v, lo, hi;
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_BATCH_SIZE, &v), 0);
    ck_assert_double_eq(v, 64);
    ck_assert_int_eq(feeder_loader_get(ld, FEEDER_OPT_PREFETCH_FACTOR, &v), 0);
    ck_assert_double_eq(v, 2);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 0), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "batch_size = 0 is out of range [1, "));
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 65), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set(ld, (feeder_option)999, 1), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_FLIP_PROB, 1), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_FLIP_PROB, 1.5), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_FLIP_PROB, NAN), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_SCALE_MIN, 0.5), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_SCALE_MAX, 0.25), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ERANGE); /* min > max */
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "scale_min"));
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_SCALE_MAX, 1.0), 0);
    /* Eval: the shorter side may be either one, so RESIZE must cover both. */
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 200), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 210), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ERANGE);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "resize 200 is smaller than the 224x210 crop"));
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 256), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 224), 0);
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_NUM_WORKERS, &lo, &hi), 0);
    ck_assert_double_eq(lo, 0);
    ck_assert_int_eq(feeder_option_bounds((feeder_option)999, &lo, &hi), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_PREFETCH_FACTOR), "prefetch_factor");
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), FEEDER_ESTATE);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, record_init, NULL), FEEDER_ESTATE);
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    ck_assert_uint_eq(st.slots, 2);
    ck_assert_uint_gt(st.shm_bytes, 2 * 64 * 224 * 224 * 3 - 1);
    feeder_loader_destroy(ld);
    feeder_loader_destroy(NULL);
    feeder_dataset_destroy(ds);
    feeder_dataset_destroy(NULL);
}
END_TEST

START_TEST(test_gpu_room_option)
{
    double lo, hi;
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_GPU_ROOM), "gpu_room");
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_GPU_ROOM, &lo, &hi), 0);
    ck_assert_double_eq(lo, 0);
    ck_assert_double_eq(hi, 1 << 30);
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    uint64_t shm[3];
    for (int k = 0; k < 3; k++) {
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_ROOM, -1), FEEDER_ERANGE);
        ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "gpu_room = -1 is out of range [0, "));
        if (k > 0)
            ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_ROOM, 1 << 20), 0);
        if (k == 2) /* host batches: the CPU decodes, whatever was asked */
            ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, FEEDER_DECODER_NVJPEG), 0);
        ck_assert_int_eq(feeder_loader_start(ld), 0);
        feeder_stats st;
        ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
        shm[k] = st.shm_bytes;
        feeder_loader_destroy(ld);
    }
    /* Only a GPU decoder that runs gets the room: the slots keep a sample's. */
    ck_assert_uint_eq(shm[1], shm[0]);
    ck_assert_uint_eq(shm[2], shm[0]);
    feeder_dataset_destroy(ds);
}
END_TEST

/* FEEDER_OPT_GPU_DECODE_THREADS: 0 (automatic) to 4, named in the error;
 * host batches run as before whatever it says. */
START_TEST(test_gpu_decode_threads_option)
{
    double lo, hi;
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_GPU_DECODE_THREADS), "gpu_decode_threads");
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_GPU_DECODE_THREADS, &lo, &hi), 0);
    ck_assert_double_eq(lo, 0);
    ck_assert_double_eq(hi, 4);
    user_ds d = {.n = 8, .exit_at = -1, .fail_at = -1};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_DECODE_THREADS, 5), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "gpu_decode_threads = 5 is out of range [0, 4]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_DECODE_THREADS, -1), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_DECODE_THREADS, 3), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, FEEDER_DECODER_NVJPEG), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    feeder_batch *b;
    uint32_t seen = 0;
    while (feeder_next(ld, &b) == 0) {
        seen += b->count;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_uint_eq(seen, 8);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_errors_text)
{
    ck_assert_str_eq(feeder_strerror(FEEDER_DONE), "end of epoch");
    ck_assert_str_eq(feeder_strerror(FEEDER_EWORKER), "worker process died");
    ck_assert_str_eq(feeder_err_name(FEEDER_EDECODE), "FEEDER_EDECODE");
    ck_assert_str_eq(feeder_err_name(-ENOENT), "ENOENT");
    ck_assert_str_eq(feeder_strerror(-ENOENT), "No such file or directory");
    ck_assert_str_eq(feeder_strerror(-99999), "unknown result");
    ck_assert_uint_eq(feeder_version(), FEEDER_VERSION_NUMBER);
    ck_assert_str_eq(feeder_version_string(), "0.1.0");
}
END_TEST

START_TEST(test_io_backend_reported)
{
    tu_folder("imgs", 1, 3);
    feeder_dataset *ds = open_folder("imgs");
    run_cfg c = defaults();
    c.io = FEEDER_IO_PREAD;
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why;
    ck_assert_str_eq(feeder_loader_io_backend(ld, &why), "pread");
    ck_assert_str_eq(why, "forced by option");
    feeder_loader_destroy(ld);
    c.io = FEEDER_IO_AUTO;
    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *be = feeder_loader_io_backend(ld, &why);
    /* Either io_uring works here, or the reason it does not is given. */
    ck_assert(strcmp(be, "io_uring") == 0 ? why[0] == 0 : (strcmp(be, "pread") == 0 && why[0]));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_stats_counts)
{
    tu_folder("imgs", 2, 5);
    feeder_dataset *ds = open_folder("imgs");
    run_cfg c = defaults();
    c.epochs = 1;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        feeder_batch_release(b, NULL);
    ck_assert_int_eq(rc, FEEDER_DONE);
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    ck_assert_uint_eq(st.batches, 2);
    ck_assert_uint_eq(st.samples, 10);
    ck_assert_uint_gt(st.bytes_read, 10 * 1000);
    ck_assert_uint_gt(st.decode_ns, 0);
    ck_assert_uint_gt(st.first_batch_ns, 0);
    uint64_t total = 0;
    for (uint64_t i = 0; i < 10; i++) {
        struct stat sb;
        stat(feeder_dataset_path(ds, i), &sb);
        total += (uint64_t)sb.st_size;
    }
    ck_assert_uint_eq(st.bytes_read, total);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* DEVICE set where no GPU can be used: host batches, identical to DEVICE -1,
 * and gpu_status says why. CUDA_VISIBLE_DEVICES="" hides any GPU from this
 * (forked, fresh) test process, so the case is the same on a GPU machine. */
START_TEST(test_gpu_fallback_host_batches)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    tu_folder("fb", 2, 4);
    feeder_dataset *ds = open_folder("fb");
    run_cfg c = defaults();
    uint64_t want = run_hash(ds, &c, NULL);
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why = NULL;
    ck_assert_int_eq(feeder_loader_gpu_status(ld, &why), 0);
#ifdef FEEDER_HAVE_CUDA
    /* The GPU plugin loads from this build tree; only the device is missing. */
    ck_assert_msg(strstr(why, "no CUDA device"), "reason: %s", why);
#else
    ck_assert_msg(strstr(why, "built without CUDA"), "reason: %s", why);
#endif
    uint64_t h = BU_HASH_INIT;
    for (int e = 0; e < c.epochs; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_ptr_null(b->device_data);
            ck_assert_ptr_null(b->ready_event);
            ck_assert_int_eq(b->device, -1);
            ck_assert_int_eq(b->dtype, FEEDER_DTYPE_UINT8);
            h = bu_hash(h, b->data, (size_t)b->count * b->sample_bytes);
            h = bu_hash(h, b->labels, b->count * sizeof(int64_t));
            h = bu_hash(h, b->indices, b->count * sizeof(uint64_t));
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        ck_assert_int_eq(rc, FEEDER_DONE);
    }
    ck_assert_uint_eq(h, want);
    feeder_loader_destroy(ld);

    /* Device -1 says so too; GPU options are range-checked like any other. */
    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, 3), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "pin_mode = 3 is out of range [0, 2]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_PREFETCH, 1), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, 4), FEEDER_ERANGE);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_G, 0), FEEDER_ERANGE);
    feeder_allocator half = {NULL, NULL, NULL};
    ck_assert_int_eq(feeder_loader_set_allocators(ld, &half, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_loader_gpu_status(ld, &why), 0);
    ck_assert_str_eq(why, "device = -1: host batches");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), FEEDER_ESTATE);
    ck_assert_int_eq(feeder_loader_set_allocators(ld, NULL, NULL), FEEDER_ESTATE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A GPU plugin that cannot be loaded is the build without CUDA: host batches,
 * and gpu_status names the file and dlopen's words. The plugin is looked up
 * once per process; Check forks every test, so this one looks afresh. */
START_TEST(test_gpu_plugin_missing)
{
    const char *path = "/nonexistent/libfeeder_cuda.so.0";
    setenv("FEEDER_CUDA_PLUGIN", path, 1);
    tu_folder("pm", 2, 3);
    feeder_dataset *ds = open_folder("pm");
    run_cfg c = defaults();
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why = NULL;
    ck_assert_int_eq(feeder_loader_gpu_status(ld, &why), 0);
    ck_assert_msg(strstr(why, "device = 0, but ") && strstr(why, path) &&
                      strstr(why, "cannot open shared object file") &&
                      strstr(why, "host batches"),
                  "reason: %s", why);
    feeder_batch *b;
    int rc, images = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_ptr_null(b->device_data);
        ck_assert_int_eq(b->device, -1);
        images += (int)b->count;
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_int_eq(images, 6);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

static Suite *loader_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_user_exact_order);
    tcase_add_test(tc, test_user_same_hash_any_workers);
    tcase_add_test(tc, test_jpeg_same_hash_any_workers_and_io);
    tcase_add_test(tc, test_in_order_off_delivers_everything);
    tcase_add_test(tc, test_drop_last_and_sampler);
    tcase_add_test(tc, test_set_epoch_mid_epoch);
    tcase_add_test(tc, test_persistent_workers);
    tcase_add_test(tc, test_run_ahead_same_output);
    tcase_add_test(tc, test_run_ahead_set_epoch);
    tcase_add_test(tc, test_start_begins_the_first_epoch);
    tcase_add_test(tc, test_run_ahead_state_and_user_sampler);
    tcase_add_test(tc, test_run_ahead_checked_user_sampler);
    tcase_add_test(tc, test_worker_init);
    tcase_add_test(tc, test_worker_sigkill_mid_epoch);
    tcase_add_test(tc, test_worker_exit_status);
    tcase_add_test(tc, test_timeout_loses_nothing);
    tcase_add_test(tc, test_destroy_mid_epoch_leaves_nothing);
    tcase_add_test(tc, test_all_slots_borrowed);
    tcase_add_test(tc, test_bad_missing_file);
    tcase_add_test(tc, test_bad_empty_file);
    tcase_add_test(tc, test_bad_not_jpeg);
    tcase_add_test(tc, test_bad_truncated);
    tcase_add_test(tc, test_bad_over_pixel_limit);
    tcase_add_test(tc, test_user_callback_error);
    tcase_add_test(tc, test_folder_labels_and_order);
    tcase_add_test(tc, test_folder_errors);
    tcase_add_test(tc, test_list_file_paths_with_spaces_and_utf8);
    tcase_add_test(tc, test_list_file_errors);
    tcase_add_test(tc, test_options);
    tcase_add_test(tc, test_option_round_trip);
    tcase_add_test(tc, test_gpu_room_option);
    tcase_add_test(tc, test_gpu_decode_threads_option);
    tcase_add_test(tc, test_errors_text);
    tcase_add_test(tc, test_io_backend_reported);
    tcase_add_test(tc, test_stats_counts);
    tcase_add_test(tc, test_gpu_fallback_host_batches);
    tcase_add_test(tc, test_gpu_plugin_missing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(loader_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
