/*
 * Batch datasets and batch samplers (include/feeder.h, "Batch datasets"):
 * whole batches made by one worker each, in sampler order, with the
 * sampler's lengths (empty batches too) and workers; a batch larger than
 * the room through an extra descriptor; a failing batch named while the
 * next one still comes; the fork hooks; and the refusals (device batches,
 * resume state, a batch past batch_size, a worker that does not exist);
 * and a batch sampler over an image folder, batch by batch against the
 * same images loaded one at a time.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "feeder.h"
#include "testutil.h"

/* What every batch's payload begins with. */
typedef struct head {
    int32_t worker_id;
    uint32_t count;
    uint64_t number;
    uint64_t epoch;
    uint64_t sum; /* of the indices */
} head;

typedef struct bds {
    uint64_t n;
    int64_t fail_batch; /* batch number whose get fails, or -1 */
    size_t extra;       /* bytes to send through an extra descriptor, 0: none */
} bds;

static uint64_t bds_len(void *user) { return ((bds *)user)->n; }

/* The extra bytes of batch `number`: a pattern the test recomputes. */
static uint8_t extra_byte(uint64_t number, size_t i) { return (uint8_t)(number * 31 + i * 7); }

static int extra_fd(uint64_t number, size_t bytes)
{
    int fd = memfd_create("batch-extra", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
        return -1;
    uint8_t *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    for (size_t i = 0; i < bytes; i++)
        m[i] = extra_byte(number, i);
    munmap(m, bytes);
    return fd;
}

static int bds_get(void *user, const feeder_batch_ctx *ctx, feeder_batch_out *out, char *err,
                   size_t errlen)
{
    bds *d = user;
    if ((int64_t)ctx->number == d->fail_batch) {
        snprintf(err, errlen, "no batch %llu today", (unsigned long long)ctx->number);
        return -EIO;
    }
    head h = {ctx->worker_id, ctx->count, ctx->number, ctx->epoch, 0};
    for (uint32_t i = 0; i < ctx->count; i++)
        h.sum += ctx->indices[i];
    if (out->capacity < sizeof(h) + ctx->count * sizeof(uint64_t))
        return -ENOSPC;
    memcpy(out->data, &h, sizeof(h));
    memcpy((uint8_t *)out->data + sizeof(h), ctx->indices, ctx->count * sizeof(uint64_t));
    out->used = sizeof(h) + ctx->count * sizeof(uint64_t);
    if (d->extra) {
        out->extra_fd = extra_fd(ctx->number, d->extra);
        out->extra_bytes = d->extra;
        if (out->extra_fd < 0)
            return -errno;
    }
    return 0;
}

/* A batch sampler: epoch e's batch b holds lens[b] indices, counting up
 * from e * 100, and goes to worker b mod nworkers (or any when 0). */
typedef struct bsamp {
    uint32_t lens[16];
    uint64_t nb;
    int nworkers;
    int32_t bad_worker; /* a worker id to give batch 0, or -2: none */
} bsamp;

static uint64_t bs_nb(void *user, uint64_t epoch)
{
    (void)epoch;
    return ((bsamp *)user)->nb;
}

static uint64_t bs_len(void *user, uint64_t epoch)
{
    (void)epoch;
    bsamp *s = user;
    uint64_t t = 0;
    for (uint64_t b = 0; b < s->nb; b++)
        t += s->lens[b];
    return t;
}

static int bs_fill(void *user, uint64_t epoch, uint64_t *idx, uint64_t len, uint32_t *lengths,
                   int32_t *workers, uint64_t nb)
{
    bsamp *s = user;
    for (uint64_t i = 0; i < len; i++)
        idx[i] = (epoch * 100 + i) % 1000;
    for (uint64_t b = 0; b < nb; b++) {
        lengths[b] = s->lens[b];
        workers[b] = s->nworkers ? (int32_t)(b % (uint64_t)s->nworkers) : -1;
    }
    if (s->bad_worker != -2)
        workers[0] = s->bad_worker;
    return 0;
}

static feeder_loader *make(bds *d, bsamp *s, int workers, feeder_dataset **ds_out,
                           feeder_sampler **s_out)
{
    feeder_batches_callbacks cb = {.len = bds_len, .get = bds_get};
    ck_assert_int_eq(feeder_dataset_create_batches(&cb, d, ds_out), 0);
    feeder_batch_sampler_callbacks sc = {.nbatches = bs_nb, .len = bs_len, .fill = bs_fill};
    ck_assert_int_eq(feeder_sampler_create_batches(&sc, s, s_out), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(*ds_out, *s_out, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_ROOM, 4096), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
    return ld;
}

/* Every batch of two epochs: its number, length, indices and worker. */
static void check_epochs(int workers, int affinity, size_t extra)
{
    bds d = {.n = 1000, .fail_batch = -1, .extra = extra};
    bsamp s = {.lens = {3, 8, 0, 1, 5, 8, 2}, .nb = 7, .nworkers = affinity ? workers : 0,
               .bad_worker = -2};
    feeder_dataset *ds;
    feeder_sampler *smp;
    feeder_loader *ld = make(&d, &s, workers, &ds, &smp);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        uint64_t first = epoch * 100;
        for (uint64_t b = 0; b < s.nb; b++) {
            feeder_batch *bt;
            ck_assert_msg(feeder_next(ld, &bt) == 0, "%s", feeder_loader_errmsg(ld));
            ck_assert_uint_eq(bt->number, b);
            ck_assert_uint_eq(bt->epoch, epoch);
            ck_assert_uint_eq(bt->count, s.lens[b]);
            ck_assert_ptr_null(bt->labels);
            void *data, *xdata;
            size_t len, xlen;
            ck_assert_int_eq(feeder_batch_payload(bt, &data, &len, &xdata, &xlen), 0);
            ck_assert_uint_eq(len, sizeof(head) + s.lens[b] * sizeof(uint64_t));
            head h;
            memcpy(&h, data, sizeof(h));
            ck_assert_uint_eq(h.count, s.lens[b]);
            ck_assert_uint_eq(h.number, b);
            ck_assert_uint_eq(h.epoch, epoch);
            if (workers == 0)
                ck_assert_int_eq(h.worker_id, -1);
            else if (affinity)
                ck_assert_int_eq(h.worker_id, (int)(b % (uint64_t)workers));
            const uint64_t *idx = (const uint64_t *)((uint8_t *)data + sizeof(h));
            for (uint32_t i = 0; i < s.lens[b]; i++) {
                ck_assert_uint_eq(idx[i], first + i);
                ck_assert_uint_eq(bt->indices[i], first + i);
            }
            if (extra) {
                ck_assert_ptr_nonnull(xdata);
                ck_assert_uint_eq(xlen, extra);
                const uint8_t *x = xdata;
                for (size_t i = 0; i < extra; i += 997)
                    ck_assert_uint_eq(x[i], extra_byte(b, i));
            } else {
                ck_assert_ptr_null(xdata);
                ck_assert_uint_eq(xlen, 0);
            }
            first += s.lens[b];
            ck_assert_int_eq(feeder_batch_release(bt, NULL), 0);
        }
        feeder_batch *bt;
        ck_assert_int_eq(feeder_next(ld, &bt), FEEDER_DONE);
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}

START_TEST(test_order_inline) { check_epochs(0, 0, 0); }
END_TEST
START_TEST(test_order_workers_any) { check_epochs(3, 0, 0); }
END_TEST
START_TEST(test_order_workers_affinity) { check_epochs(3, 1, 0); }
END_TEST
START_TEST(test_extra_descriptor) { check_epochs(2, 1, 3 * 4096 + 5); }
END_TEST
START_TEST(test_extra_descriptor_inline) { check_epochs(0, 0, 10000); }
END_TEST

/* A failing batch is named with the callback's text; the next one comes. */
START_TEST(test_failed_batch_named)
{
    bds d = {.n = 1000, .fail_batch = 1};
    bsamp s = {.lens = {2, 2, 2}, .nb = 3, .nworkers = 2, .bad_worker = -2};
    feeder_dataset *ds;
    feeder_sampler *smp;
    feeder_loader *ld = make(&d, &s, 2, &ds, &smp);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(feeder_next(ld, &b), -EIO);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "batch 1 of epoch 0: batch get callback returned "
                                               "-5: no batch 1 today");
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->number, 2);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}
END_TEST

static void expect_start_error(bsamp *s, int workers, int device, int rc, const char *msg)
{
    bds d = {.n = 1000, .fail_batch = -1};
    feeder_dataset *ds;
    feeder_sampler *smp;
    feeder_loader *ld = make(&d, s, workers, &ds, &smp);
    if (device >= 0)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, device), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), rc);
    ck_assert_str_eq(feeder_loader_errmsg(ld), msg);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}

START_TEST(test_refusals)
{
    bsamp big = {.lens = {2, 9}, .nb = 2, .bad_worker = -2};
    expect_start_error(&big, 1, -1, FEEDER_ERANGE,
                       "the batch sampler's batch 1 of epoch 0 has 9 indices; the slots hold at "
                       "most batch_size = 8");
    bsamp who = {.lens = {2}, .nb = 1, .bad_worker = 2};
    expect_start_error(&who, 2, -1, FEEDER_ERANGE,
                       "the batch sampler gave batch 0 of epoch 0 to worker 2; the loader has 2");
    bsamp ok = {.lens = {2}, .nb = 1, .bad_worker = -2};
    expect_start_error(&ok, 1, 0, FEEDER_EINVAL,
                       "device 0: a batch dataset (feeder_dataset_create_batches) gives host "
                       "batches only");
    /* No resume state, before start or after. */
    bds d = {.n = 1000, .fail_batch = -1};
    feeder_dataset *ds;
    feeder_sampler *smp;
    feeder_loader *ld = make(&d, &ok, 1, &ds, &smp);
    size_t len = 0;
    ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, &len), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_state_save: a batch dataset "
                                               "(feeder_dataset_create_batches) has no resume "
                                               "state");
    ck_assert_uint_eq(feeder_loader_state_size(ld), 0);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
    /* A payload is asked of a batch dataset's batches only; bad arguments. */
    ck_assert_int_eq(feeder_batch_payload(NULL, NULL, NULL, NULL, NULL), FEEDER_EINVAL);
    feeder_batches_callbacks none = {.len = bds_len};
    ck_assert_int_eq(feeder_dataset_create_batches(&none, &d, &ds), FEEDER_EINVAL);
    feeder_batch_sampler_callbacks nos = {.len = bs_len};
    ck_assert_int_eq(feeder_sampler_create_batches(&nos, &ok, &smp), FEEDER_EINVAL);
}
END_TEST

/* The hooks run around every fork: prepare and parent here, child in the
 * worker before worker_init (which sees what child left). */
static int prepared, parented;
static int child_mark;
static void hook_prepare(void *u) { (void)u; prepared++; }
static void hook_parent(void *u) { (void)u; parented++; }
static void hook_child(void *u) { (void)u; child_mark = 42; }
static int init_sees_child(void *u, int id)
{
    (void)u;
    (void)id;
    return child_mark == 42 ? 0 : 7;
}

START_TEST(test_fork_hooks)
{
    bds d = {.n = 1000, .fail_batch = -1};
    bsamp s = {.lens = {1, 1, 1, 1}, .nb = 4, .nworkers = 3, .bad_worker = -2};
    feeder_dataset *ds;
    feeder_sampler *smp;
    feeder_loader *ld = make(&d, &s, 3, &ds, &smp);
    feeder_fork_hooks h = {hook_prepare, hook_parent, hook_child, NULL};
    ck_assert_int_eq(feeder_loader_set_fork_hooks(ld, &h), 0);
    ck_assert_int_eq(feeder_loader_set_worker_init(ld, init_sees_child, NULL), 0);
    feeder_batch *b;
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(prepared, 3);
    ck_assert_int_eq(parented, 3);
    ck_assert_int_eq(child_mark, 0); /* the parent's copy never ran it */
    ck_assert_int_eq(feeder_loader_set_fork_hooks(ld, &h), FEEDER_ESTATE);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A batch sampler over an image folder (the C pipeline, not a batch
 * dataset): epoch e's batch b holds lens[b] indices (7 * i + 5 * e) mod 12,
 * i counting through the epoch; each batch's indices, labels and pixels are
 * those of the same images loaded one at a time in file order, across a
 * batch split between workers and an empty one. */
static const uint32_t img_lens[] = {3, 8, 0, 1, 5};
enum { IMG_N = 12, IMG_NB = 5, IMG_BYTES = 32 * 32 * 3 };

static uint64_t img_nb(void *user, uint64_t epoch)
{
    (void)user;
    (void)epoch;
    return IMG_NB;
}

static uint64_t img_len(void *user, uint64_t epoch)
{
    (void)user;
    (void)epoch;
    uint64_t t = 0;
    for (int b = 0; b < IMG_NB; b++)
        t += img_lens[b];
    return t;
}

static uint64_t img_index(uint64_t epoch, uint64_t i) { return (7 * i + 5 * epoch) % IMG_N; }

static int img_fill(void *user, uint64_t epoch, uint64_t *idx, uint64_t len, uint32_t *lengths,
                    int32_t *workers, uint64_t nb)
{
    (void)user;
    for (uint64_t i = 0; i < len; i++)
        idx[i] = img_index(epoch, i);
    for (uint64_t b = 0; b < nb; b++) {
        lengths[b] = img_lens[b];
        workers[b] = -1;
    }
    return 0;
}

START_TEST(test_batch_sampler_over_images)
{
    tu_setup();
    tu_folder("f", 2, 6);
    feeder_dataset *ds = tu_open_folder(tu_dir, "f");
    uint8_t ref[IMG_N][IMG_BYTES];
    int64_t ref_label[IMG_N];
    feeder_loader *one = tu_small_loader(ds, 0, 1);
    ck_assert_int_eq(feeder_loader_set(one, FEEDER_OPT_SHUFFLE, 0), 0);
    for (int i = 0; i < IMG_N; i++) {
        feeder_batch *bt;
        ck_assert_msg(feeder_next(one, &bt) == 0, "%s", feeder_loader_errmsg(one));
        ck_assert_uint_eq(bt->indices[0], (uint64_t)i);
        memcpy(ref[i], bt->data, IMG_BYTES);
        ref_label[i] = bt->labels[0];
        ck_assert_int_eq(feeder_batch_release(bt, NULL), 0);
    }
    feeder_loader_destroy(one);

    feeder_batch_sampler_callbacks sc = {.nbatches = img_nb, .len = img_len, .fill = img_fill};
    feeder_sampler *smp;
    ck_assert_int_eq(feeder_sampler_create_batches(&sc, NULL, &smp), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SPLIT, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 40), 0);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        uint64_t i = 0;
        for (uint64_t b = 0; b < IMG_NB; b++) {
            feeder_batch *bt;
            ck_assert_msg(feeder_next(ld, &bt) == 0, "%s", feeder_loader_errmsg(ld));
            ck_assert_uint_eq(bt->epoch, epoch);
            ck_assert_uint_eq(bt->number, b);
            ck_assert_uint_eq(bt->count, img_lens[b]);
            for (uint32_t k = 0; k < bt->count; k++, i++) {
                uint64_t want = img_index(epoch, i);
                ck_assert_uint_eq(bt->indices[k], want);
                ck_assert_int_eq(bt->labels[k], ref_label[want]);
                ck_assert_msg(!memcmp(bt->data + (size_t)k * IMG_BYTES, ref[want], IMG_BYTES),
                              "epoch %llu batch %llu sample %u: pixels differ",
                              (unsigned long long)epoch, (unsigned long long)b, k);
            }
            ck_assert_int_eq(feeder_batch_release(bt, NULL), 0);
        }
        feeder_batch *bt;
        ck_assert_int_eq(feeder_next(ld, &bt), FEEDER_DONE);
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(smp);
    feeder_dataset_destroy(ds);
    tu_teardown();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("batches");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_order_inline);
    tcase_add_test(tc, test_order_workers_any);
    tcase_add_test(tc, test_order_workers_affinity);
    tcase_add_test(tc, test_extra_descriptor);
    tcase_add_test(tc, test_extra_descriptor_inline);
    tcase_add_test(tc, test_failed_batch_named);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_fork_hooks);
    tcase_add_test(tc, test_batch_sampler_over_images);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
