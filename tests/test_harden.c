/*
 * Hardening: resume from a saved state, worker restarts, parent death,
 * resource limits at start, hostile list paths, size edges, the pixel limit.
 * Check forks each test; tests that need their own process tree fork again.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

#include "benchutil.h"
#include "testutil.h"
#include "collate/slot.h"
#include "decode/decode.h"
#include "feeder.h"
#include "loader/host.h"
#include "loader/loader.h"

/* ---- helpers ---- */

static void write_text(const char *rel, const char *text)
{
    char p[512];
    tu_path(p, sizeof(p), rel);
    ck_assert_int_eq(bu_write_file(p, text, strlen(text)), 0);
}

static feeder_dataset *open_folder(const char *rel) { return tu_open_folder(tu_dir, rel); }

typedef struct cfg {
    int workers, prefetch, shuffle, in_order, pipeline, batch, policy, split, restarts;
    uint64_t seed;
} cfg;

static cfg train_cfg(void)
{
    return (cfg){.workers = 2, .prefetch = 2, .shuffle = 1, .in_order = 1,
                 .pipeline = FEEDER_PIPELINE_TRAIN, .batch = 4, .seed = 11};
}

static feeder_loader *make_loader(feeder_dataset *ds, const cfg *c)
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
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, c->policy), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SPLIT, c->split), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, c->restarts), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 48), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 64), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 72), 0);
    return ld;
}

/* Everything a batch carries: pixels, labels, indices, skips. */
static uint64_t batch_hash(const feeder_batch *b)
{
    uint64_t h = bu_hash64(0, b->data, (size_t)b->count * b->sample_bytes);
    h = bu_hash64(h, b->labels, b->count * sizeof(int64_t));
    h = bu_hash64(h, b->indices, b->count * sizeof(uint64_t));
    return bu_hash64(h, &b->skipped, sizeof(b->skipped));
}

#define MAXB 64

/* The reference: every batch's hash of epochs 0 and 1, by number. */
typedef struct ref {
    uint64_t n;             /* batches in epoch 0 */
    uint64_t h[2][MAXB];
} ref;

static void reference(feeder_dataset *ds, const cfg *c, ref *r)
{
    cfg rc0 = *c;
    rc0.in_order = 1;
    feeder_loader *ld = make_loader(ds, &rc0);
    memset(r, 0, sizeof(*r));
    for (int e = 0; e < 2; e++) {
        feeder_batch *b;
        int rc;
        uint64_t k = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->number, k);
            ck_assert_uint_lt(k, MAXB);
            r->h[e][k++] = batch_hash(b);
            feeder_batch_release(b, NULL);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        if (e == 0)
            r->n = k;
    }
    feeder_loader_destroy(ld);
}

/* CRC32C as the blob uses it, to make hand-edited blobs that pass the CRC. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void reseal(uint8_t *b, size_t len)
{
    memset(b + 12, 0, 4);
    uint32_t c = crc32c(b, len);
    for (int i = 0; i < 4; i++)
        b[12 + i] = (uint8_t)(c >> (8 * i));
}

static uint8_t *save(feeder_loader *ld, size_t *len)
{
    ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, len), 0);
    ck_assert_uint_eq(*len, feeder_loader_state_size(ld));
    uint8_t *blob = malloc(*len);
    size_t got = 0;
    int rc = feeder_loader_state_save(ld, blob, *len, &got);
    ck_assert_msg(rc == 0, "save: %s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(got, *len);
    return blob;
}

/* ---- a user dataset: pixels from (seed, epoch, index); optional slowness,
 * deaths and pids reported by worker_init ---- */

typedef struct user_ds {
    uint64_t n;
    int sleep_ms;     /* every sample */
    int64_t slow_at;  /* this index sleeps slow_ms more */
    int slow_ms;
} user_ds;

static uint64_t user_len(void *u) { return ((user_ds *)u)->n; }

static int user_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                    int64_t *label, char *err, size_t errlen)
{
    user_ds *d = u;
    int ms = d->sleep_ms + ((int64_t)ctx->index == d->slow_at ? d->slow_ms : 0);
    if (ms) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(feeder_random(ctx->seed, ctx->epoch, ctx->index, i / 8) >> (8 * (i % 8)));
    *label = (int64_t)(ctx->index % 10);
    return 0;
}

static feeder_dataset *make_user(user_ds *d)
{
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, d, &ds), 0);
    return ds;
}

/* ------------------------------------------------------------------------ */
/* Resume                                                                    */
/* ------------------------------------------------------------------------ */

/* Save after k delivered batches (with batches in flight in a 2-worker
 * loader), resume with 0, 1 and 3 workers: exactly batches k.. arrive, each
 * byte-identical to the reference, then DONE, then epoch 1 as in the
 * reference. Train pipeline (random crops and flips), shuffled. */
START_TEST(test_resume_in_order_any_workers)
{
    tu_folder("imgs", 3, 9); /* 27 images, batch 4: 7 batches, the last of 3 */
    feeder_dataset *ds = open_folder("imgs");
    cfg c = train_cfg();
    ref r;
    reference(ds, &c, &r);
    ck_assert_uint_eq(r.n, 7);
    uint64_t ks[] = {0, 1, 3, 6, 7};
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        uint64_t k = ks[ki];
        feeder_loader *ld = make_loader(ds, &c);
        feeder_batch *b;
        for (uint64_t i = 0; i < k; i++) {
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            ck_assert_uint_eq(batch_hash(b), r.h[0][i]);
            /* The last one stays borrowed: a lent batch is delivered. */
            if (i + 1 < k)
                feeder_batch_release(b, NULL);
        }
        size_t len;
        uint8_t *blob = save(ld, &len);
        ck_assert_uint_eq(len, 200 + 1); /* 7 batches: a 1-byte map */
        feeder_loader_destroy(ld);
        for (int w = 0; w <= 3; w += w == 0 ? 1 : 2) {
            cfg rc = c;
            rc.workers = w;
            feeder_loader *ld2 = make_loader(ds, &rc);
            ck_assert_msg(feeder_loader_state_load(ld2, blob, len) == 0, "k %llu: %s",
                          (unsigned long long)k, feeder_loader_errmsg(ld2));
            for (uint64_t i = k; i < r.n; i++) {
                int rc2 = feeder_next(ld2, &b);
                ck_assert_msg(rc2 == 0, "k %llu workers %d: %s", (unsigned long long)k, w,
                              feeder_loader_errmsg(ld2));
                ck_assert_uint_eq(b->epoch, 0);
                ck_assert_uint_eq(b->number, i);
                ck_assert_uint_eq(batch_hash(b), r.h[0][i]);
                feeder_batch_release(b, NULL);
            }
            ck_assert_int_eq(feeder_next(ld2, &b), FEEDER_DONE);
            ck_assert_int_eq(feeder_next(ld2, &b), 0);
            ck_assert_uint_eq(b->epoch, 1);
            ck_assert_uint_eq(batch_hash(b), r.h[1][0]);
            feeder_batch_release(b, NULL);
            feeder_loader_destroy(ld2);
        }
        free(blob);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* in_order 0: batch 0 is slow, so later batches are delivered before it and
 * the delivered set is not a prefix. The promise: a resumed loader delivers
 * exactly the undelivered set, each batch byte-identical to the reference. */
START_TEST(test_resume_out_of_order_delivers_the_rest)
{
    user_ds d = {.n = 40, .slow_at = 0, .slow_ms = 400};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg();
    c.workers = 3;
    c.split = 1;
    c.in_order = 0;
    ref r;
    d.slow_ms = 0;
    reference(ds, &c, &r);
    d.slow_ms = 400;
    ck_assert_uint_eq(r.n, 10);
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    int seen[MAXB] = {0};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(batch_hash(b), r.h[0][b->number]);
        seen[b->number] = 1;
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(seen[0], 0); /* not a prefix */
    size_t len;
    uint8_t *blob = save(ld, &len);
    feeder_loader_destroy(ld);
    d.slow_ms = 0;
    for (int w = 0; w <= 3; w += w == 0 ? 1 : 2) {
        cfg rc = c;
        rc.workers = w;
        feeder_loader *ld2 = make_loader(ds, &rc);
        ck_assert_int_eq(feeder_loader_state_load(ld2, blob, len), 0);
        int got[MAXB];
        memcpy(got, seen, sizeof(got));
        int rc2;
        uint64_t count = 0;
        while ((rc2 = feeder_next(ld2, &b)) == 0) {
            ck_assert_uint_eq(b->epoch, 0);
            ck_assert_int_eq(got[b->number], 0); /* never twice */
            got[b->number] = 1;
            ck_assert_uint_eq(batch_hash(b), r.h[0][b->number]);
            count++;
            feeder_batch_release(b, NULL);
        }
        ck_assert_int_eq(rc2, FEEDER_DONE);
        ck_assert_uint_eq(count, r.n - 4);
        for (uint64_t i = 0; i < r.n; i++)
            ck_assert_int_eq(got[i], 1);
        feeder_loader_destroy(ld2);
    }
    free(blob);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Where a loader stands outside an epoch: before start (epoch 0), after
 * DONE (the next epoch), after set_epoch (that epoch); a blob saved after a
 * resume was loaded and before it began is the same blob. */
START_TEST(test_resume_positions_outside_an_epoch)
{
    user_ds d = {.n = 10};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg();
    c.workers = 1;
    ref r;
    reference(ds, &c, &r);
    feeder_loader *ld = make_loader(ds, &c);
    size_t len;
    uint8_t *blob = save(ld, &len); /* before start */
    feeder_batch *b;
    while (feeder_next(ld, &b) == 0)
        feeder_batch_release(b, NULL);
    uint8_t *after = save(ld, &len); /* after DONE: epoch 1 */
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 5), 0);
    uint8_t *five = save(ld, &len);
    feeder_loader_destroy(ld);
    uint64_t want_epoch[3] = {0, 1, 5};
    uint8_t *blobs[3] = {blob, after, five};
    for (int i = 0; i < 3; i++) {
        feeder_loader *ld2 = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_state_load(ld2, blobs[i], len), 0);
        size_t l2;
        uint8_t *again = save(ld2, &l2);
        ck_assert_uint_eq(l2, len);
        ck_assert_int_eq(memcmp(again, blobs[i], len), 0);
        free(again);
        ck_assert_int_eq(feeder_next(ld2, &b), 0);
        ck_assert_uint_eq(b->epoch, want_epoch[i]);
        ck_assert_uint_eq(b->number, 0);
        if (want_epoch[i] < 2)
            ck_assert_uint_eq(batch_hash(b), r.h[want_epoch[i]][0]);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld2);
    }
    free(blob);
    free(after);
    free(five);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A blob made with one setting, loaded into a loader with another. */
static void expect_mismatch(feeder_dataset *ds, feeder_dataset *other_ds, int opt, int64_t v,
                            feeder_sampler *smp, const char *want)
{
    cfg c = train_cfg();
    feeder_loader *ld = make_loader(ds, &c);
    size_t len;
    uint8_t *blob = save(ld, &len);
    feeder_loader_destroy(ld);
    feeder_loader *ld2;
    if (other_ds || smp) {
        ck_assert_int_eq(feeder_loader_create(other_ds ? other_ds : ds, smp, &ld2), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_BATCH_SIZE, c.batch), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_SHUFFLE, c.shuffle), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_SEED, (int64_t)c.seed), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_PIPELINE, c.pipeline), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_HEIGHT, 48), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_WIDTH, 64), 0);
        ck_assert_int_eq(feeder_loader_set(ld2, FEEDER_OPT_RESIZE, 72), 0);
    } else {
        ld2 = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_set(ld2, (feeder_option)opt, v), 0);
    }
    ck_assert_int_eq(feeder_loader_state_load(ld2, blob, len), FEEDER_EMISMATCH);
    ck_assert_str_eq(feeder_loader_errmsg(ld2), want);
    feeder_loader_destroy(ld2);
    free(blob);
}

START_TEST(test_resume_refuses_another_loader)
{
    user_ds d = {.n = 30}, d2 = {.n = 31};
    feeder_dataset *ds = make_user(&d), *ds2 = make_user(&d2);
    const char *pre = "state blob does not match the loader: ";
    char want[512];
#define WANT(text) (snprintf(want, sizeof(want), "%s%s", pre, text), want)
    expect_mismatch(ds, NULL, FEEDER_OPT_BATCH_SIZE, 5, NULL,
                    WANT("batch_size is 4 in the blob, 5 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_SEED, 12, NULL, WANT("seed is 11 in the blob, 12 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_DROP_LAST, 1, NULL,
                    WANT("drop_last is 0 in the blob, 1 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_SHUFFLE, 0, NULL, WANT("shuffle is 1 in the blob, 0 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL, NULL,
                    WANT("pipeline is 1 in the blob, 0 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_HEIGHT, 32, NULL, WANT("height is 48 in the blob, 32 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_LAYOUT, FEEDER_LAYOUT_NCHW, NULL,
                    WANT("layout is 0 in the blob, 1 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_DECODER, FEEDER_DECODER_TURBO, NULL,
                    WANT("decoder is 1 in the blob, 0 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_ERROR_POLICY, FEEDER_ON_ERROR_SKIP, NULL,
                    WANT("error_policy is 0 in the blob, 1 in the loader"));
    expect_mismatch(ds, NULL, FEEDER_OPT_MAX_PIXELS, 1000, NULL,
                    WANT("max_pixels is 178956970 in the blob, 1000 in the loader"));
    expect_mismatch(ds, ds2, 0, 0, NULL, WANT("dataset size is 30 in the blob, 31 in the loader"));
    /* The same length but another order: rank 1 of 2 against the whole set. */
    feeder_sampler *smp;
    ck_assert_int_eq(feeder_sampler_random(30, 0, 0, 11, &smp), 0);
    expect_mismatch(ds, NULL, 0, 0, smp,
                    WANT("user sampler (1: a sampler was given) is 0 in the blob, 1 in the loader"));
    feeder_sampler_destroy(smp);
    /* Not compared: what cannot change the bytes under TRAIN. */
    cfg c = train_cfg();
    feeder_loader *ld = make_loader(ds, &c);
    size_t len;
    uint8_t *blob = save(ld, &len);
    feeder_loader_destroy(ld);
    ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 99), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IN_ORDER, 0), 0);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), 0);
    /* Options set after the load are checked again at start. */
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_FLIP_PROB, 0.25), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_EMISMATCH);
    ck_assert_str_eq(feeder_loader_errmsg(ld), WANT("flip_prob is 0.5 in the blob, 0.25 in the loader"));
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_FLIP_PROB, 0.5), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_loader_state_load(ld, blob, len), FEEDER_ESTATE);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "feeder_loader_state_load: the loader started; load the state into a new "
                     "loader before its first feeder_next");
    feeder_loader_destroy(ld);
    /* A different order with the same settings: a user sampler of another
     * seed on both sides. */
    feeder_sampler *s1, *s2;
    ck_assert_int_eq(feeder_sampler_random(30, 0, 0, 1, &s1), 0);
    ck_assert_int_eq(feeder_sampler_random(30, 0, 0, 2, &s2), 0);
    feeder_loader *a, *bl;
    ck_assert_int_eq(feeder_loader_create(ds, s1, &a), 0);
    ck_assert_int_eq(feeder_loader_create(ds, s2, &bl), 0);
    free(blob);
    blob = save(a, &len);
    ck_assert_int_eq(feeder_loader_state_load(bl, blob, len), FEEDER_EMISMATCH);
    WANT("the order of epoch 0 differs (hash ");
    ck_assert_msg(strncmp(feeder_loader_errmsg(bl), want, strlen(want)) == 0, "%s",
                  feeder_loader_errmsg(bl));
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(bl), "in the loader): another sampler, seed or rank"));
    feeder_loader_destroy(a);
    feeder_loader_destroy(bl);
    feeder_sampler_destroy(s1);
    feeder_sampler_destroy(s2);
    free(blob);
#undef WANT
    feeder_dataset_destroy(ds);
    feeder_dataset_destroy(ds2);
}
END_TEST

START_TEST(test_resume_blob_damage)
{
    user_ds d = {.n = 30};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg();
    c.workers = 0;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_batch_release(b, NULL);
    size_t len;
    uint8_t *blob = save(ld, &len);
    ck_assert_uint_eq(len, 201); /* 8 batches: one map byte */
    ck_assert_int_eq(blob[200], 1);
    /* Size queries. */
    size_t l2 = 0;
    uint8_t small[100];
    ck_assert_int_eq(feeder_loader_state_save(ld, small, sizeof(small), &l2), -ENOSPC);
    ck_assert_uint_eq(l2, 201);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "feeder_loader_state_save: the blob needs 201 bytes, the buffer holds 100");
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, len, NULL), FEEDER_EINVAL);
    feeder_loader_destroy(ld);

    uint8_t *x = malloc(len);
    struct {
        size_t off;
        uint8_t val;
        int reseal;
        size_t len;
        const char *want;
    } cases[] = {
        {20, 0x55, 0, 201, "state blob: CRC32C mismatch (stored 0x"},
        {0, 'X', 1, 201, "state blob: bad magic 0x53524458 (not a feeder state blob)"},
        {4, 5, 1, 201, "state blob: version 5, this library reads versions 1 to 4"},
        {0, 'F', 0, 100, "state blob: 100 bytes, shorter than its 176-byte header"},
        {0, 'F', 0, 190, "state blob: 190 bytes, shorter than its 200-byte header"},
        {0, 'F', 0, 200, "state blob: its length field says 201 bytes, 200 were given"},
        {200, 3, 1, 201, "state blob: 1 batches delivered, but the map marks 2"},
        {200, 0x81, 1, 201, "state blob: 1 batches delivered, but the map marks 2"},
        {56, 9, 1, 201, "state blob: map of 1 bytes for 9 batches in a 201-byte blob"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(x, blob, len);
        x[cases[i].off] = cases[i].val;
        if (cases[i].reseal)
            reseal(x, len);
        feeder_loader *l = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_state_load(l, x, cases[i].len), FEEDER_ESTATEBLOB);
        ck_assert_msg(strncmp(feeder_loader_errmsg(l), cases[i].want, strlen(cases[i].want)) == 0,
                      "case %zu: %s", i, feeder_loader_errmsg(l));
        feeder_loader_destroy(l);
    }
    /* Bits past the epoch's batches: 8 batches fill the byte, so shrink the
     * epoch to 7 (and the length field's story stays consistent). */
    memcpy(x, blob, len);
    x[56] = 7;
    x[200] = 0x81;
    x[32] = 2;
    reseal(x, len);
    feeder_loader *l = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_state_load(l, x, len), FEEDER_ESTATEBLOB);
    ck_assert_str_eq(feeder_loader_errmsg(l), "state blob: the map marks batches past the epoch's 7");
    /* NULL. */
    ck_assert_int_eq(feeder_loader_state_load(l, NULL, 10), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_loader_state_load(NULL, blob, len), FEEDER_EINVAL);
    ck_assert_uint_eq(feeder_loader_state_size(NULL), 0);
    feeder_loader_destroy(l);
    /* set_epoch after a load drops the resume. */
    l = make_loader(ds, &c);
    ck_assert_int_eq(feeder_loader_state_load(l, blob, len), 0);
    ck_assert_int_eq(feeder_loader_set_epoch(l, 3), 0);
    ck_assert_int_eq(feeder_next(l, &b), 0);
    ck_assert_uint_eq(b->epoch, 3);
    ck_assert_uint_eq(b->number, 0);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(l);
    free(x);
    free(blob);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Worker restarts                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t epoch_hash(feeder_loader *ld, int kill_every, int *kills, int max_kills)
{
    uint64_t h = BU_HASH_INIT, k = 0;
    feeder_batch *b;
    int rc;
    unsigned seed = 1;
    int killed[64], nkilled = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->number, k);
        h = bu_hash64(h, &(uint64_t){batch_hash(b)}, 8);
        feeder_batch_release(b, NULL);
        k++;
        if (kill_every && k % (uint64_t)kill_every == 0 && *kills < max_kills) {
            /* A random worker not killed already: the loader may not have
             * seen the last death yet (a ready batch is handed out without
             * waiting), and a second kill of that pid is no new death. */
            double v;
            feeder_loader_get(ld, FEEDER_OPT_NUM_WORKERS, &v);
            int pid = feeder_loader_worker_pid(ld, (int)(rand_r(&seed) % (unsigned)v));
            ck_assert_int_gt(pid, 0);
            int again = 0;
            for (int i = 0; i < nkilled; i++)
                again |= killed[i] == pid;
            if (!again) {
                ck_assert_int_eq(kill(pid, SIGKILL), 0);
                killed[nkilled++] = pid;
                (*kills)++;
            }
        }
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    return h;
}

/* SIGKILL a random worker every few batches, under the limit: the epoch is
 * byte-identical to one without deaths and every restart is counted. */
START_TEST(test_restart_sigkill_loses_nothing)
{
    user_ds d = {.n = 120, .sleep_ms = 3};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg();
    c.workers = 3;
    c.restarts = 10;
    feeder_loader *ld = make_loader(ds, &c);
    int kills = 0;
    uint64_t want = epoch_hash(ld, 0, &kills, 0);
    feeder_loader_destroy(ld);
    ld = make_loader(ds, &c);
    /* A kill every 2 batches ends 14 batches before the epoch's end, more
     * than its 6 slots: the loader still needs the killed worker and sees the
     * death. (Every 3 left 6, which could all be ready before the last death
     * was seen; that worker was then reaped at the epoch's end, not
     * restarted.) */
    ck_assert_uint_eq(epoch_hash(ld, 2, &kills, 8), want);
    ck_assert_int_eq(kills, 8);
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    ck_assert_uint_eq(st.worker_restarts, 8);
    ck_assert_uint_eq(st.samples, 120);
    /* The limit is per epoch: the next epoch survives as many again. */
    kills = 0;
    epoch_hash(ld, 2, &kills, 8);
    feeder_loader_stats(ld, &st);
    ck_assert_uint_eq(st.worker_restarts, 16);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* The same on JPEGs under the skip policy, with a corrupt file: a part
 * re-run after a death must start from the indices the loader wrote, not
 * the replacements the dead worker may have put in the slot. */
START_TEST(test_restart_jpeg_skip_policy)
{
    tu_folder("imgs", 2, 12);
    char p[512];
    tu_path(p, sizeof(p), "imgs/c0/005.jpg");
    ck_assert_int_eq(bu_write_file(p, "not a jpeg", 10), 0);
    feeder_dataset *ds = open_folder("imgs");
    cfg c = train_cfg();
    c.workers = 2;
    c.split = 1;
    c.batch = 2;
    c.restarts = 20;
    c.policy = FEEDER_ON_ERROR_SKIP;
    feeder_loader *ld = make_loader(ds, &c);
    int kills = 0;
    uint64_t want = epoch_hash(ld, 0, &kills, 0);
    feeder_loader_destroy(ld);
    ld = make_loader(ds, &c);
    ck_assert_uint_eq(epoch_hash(ld, 1, &kills, 10), want);
    ck_assert_int_ge(kills, 4);
    /* Tasks are short here: a death that comes after the worker's last part
     * of the epoch is only reaped at its end, not restarted. */
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    ck_assert_uint_ge(st.worker_restarts, 1);
    ck_assert_uint_le(st.worker_restarts, (uint64_t)kills);
    ck_assert_uint_eq(st.skipped, 1);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Over the limit: the error lists every death of the epoch. One worker and
 * two slots: while batch k is borrowed, batch k+1 is the one being loaded. */
START_TEST(test_restart_over_limit_lists_deaths)
{
    user_ds d = {.n = 40, .sleep_ms = 60};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg();
    c.workers = 1;
    c.restarts = 2;
    feeder_loader *ld = make_loader(ds, &c);
    feeder_batch *held[2];
    int pids[3];
    ck_assert_int_eq(feeder_next(ld, &held[0]), 0); /* batch 0; batch 1 loading */
    pids[0] = feeder_loader_worker_pid(ld, 0);
    kill(pids[0], SIGKILL);
    ck_assert_int_eq(feeder_next(ld, &held[1]), 0); /* batch 1, after a restart */
    ck_assert_uint_eq(held[1]->number, 1);
    feeder_batch_release(held[0], NULL);           /* batch 2 starts loading */
    pids[1] = feeder_loader_worker_pid(ld, 0);
    ck_assert_int_ne(pids[1], pids[0]);
    kill(pids[1], SIGKILL);
    ck_assert_int_eq(feeder_next(ld, &held[0]), 0);
    ck_assert_uint_eq(held[0]->number, 2);
    feeder_batch_release(held[1], NULL);           /* batch 3 starts loading */
    pids[2] = feeder_loader_worker_pid(ld, 0);
    kill(pids[2], SIGKILL);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_EWORKER);
    char want[1024];
    snprintf(want, sizeof(want),
             "3 worker deaths in epoch 0, more than max_restarts = 2: "
             "worker 0 (pid %d) was killed by signal 9 (Killed) while loading batch 1 of epoch 0; "
             "worker 0 (pid %d) was killed by signal 9 (Killed) while loading batch 2 of epoch 0; "
             "worker 0 (pid %d) was killed by signal 9 (Killed) while loading batch 3 of epoch 0",
             pids[0], pids[1], pids[2]);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    ck_assert_uint_eq(st.worker_restarts, 2);
    feeder_batch_release(held[0], NULL);
    /* As without restarts: the next call begins the next epoch. */
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_uint_eq(b->epoch, 1);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Parent death                                                              */
/* ------------------------------------------------------------------------ */

static int pid_pipe = -1;

static int report_pid(void *user, int id)
{
    int v[2] = {id, (int)getpid()};
    return write(pid_pipe, v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : 1;
}

/* Entries of `path` whose names contain `part`: what this test's loader
 * could have made there, not what other processes on the machine make. */
static int count_entries(const char *path, const char *part)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

/* Reap children of this process (a subreaper) until every pid in `want` is
 * seen or `ms` pass; returns how many were seen, their statuses in `st`. */
static int reap_all(const int *want, int n, int *st, int ms)
{
    int seen = 0;
    for (int t = 0; t < ms && seen < n; t += 5) {
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0)
            for (int i = 0; i < n; i++)
                if (want[i] == p) {
                    st[i] = status;
                    seen++;
                }
        if (seen < n)
            usleep(5000);
    }
    return seen;
}

/* Workers kill themselves mid-task when the loader's process exits (a
 * thread waits on its pidfd); ThreadSanitizer builds have no such thread
 * and their workers leave between tasks, which the tests below cannot wait
 * for (a task sleeps 20 s). */
#if defined(__SANITIZE_THREAD__)
#define WATCH_MID_TASK 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WATCH_MID_TASK 0
#endif
#endif
#ifndef WATCH_MID_TASK
#define WATCH_MID_TASK 1
#endif

/* The process that owns a loader is SIGKILLed while its workers are deep in
 * a task: the watching thread in each worker kills it at once (they would
 * otherwise sleep 20 s more), and the slots were never in /dev/shm. */
START_TEST(test_parent_death_kills_workers)
{
    /* Orphans come to us, so we can see their end and reap them. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int shm0 = count_entries("/dev/shm", "feeder");
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t owner = fork();
    if (owner == 0) {
        close(fds[0]);
        pid_pipe = fds[1];
        user_ds d = {.n = 64, .sleep_ms = 20000};
        feeder_dataset *ds = make_user(&d);
        cfg c = train_cfg();
        c.workers = 3;
        feeder_loader *ld = make_loader(ds, &c);
        feeder_loader_set_worker_init(ld, report_pid, NULL);
        feeder_batch *b;
        feeder_next(ld, &b); /* blocks: every sample sleeps 20 s */
        _exit(9);
    }
    close(fds[1]);
    int pids[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        int v[2];
        ck_assert_int_eq(read(fds[0], v, sizeof(v)), (ssize_t)sizeof(v));
        ck_assert(v[0] >= 0 && v[0] < 3);
        pids[v[0]] = v[1];
    }
    close(fds[0]);
    usleep(200 * 1000); /* into their first sample */
    for (int i = 0; i < 3; i++) {
        char p[64], line[512];
        snprintf(p, sizeof(p), "/proc/%d/maps", pids[i]);
        FILE *f = fopen(p, "r");
        ck_assert_ptr_nonnull(f);
        int memfd = 0, shm = 0;
        while (fgets(line, sizeof(line), f)) {
            memfd += strstr(line, "/memfd:feeder-slots") != NULL;
            shm += strstr(line, "/dev/shm/") != NULL;
        }
        fclose(f);
        /* Its own mapping, and the one inherited from the loader. */
        ck_assert_int_ge(memfd, 1);
        ck_assert_int_eq(shm, 0);
    }
    ck_assert_int_eq(kill(owner, SIGKILL), 0);
    int ost;
    ck_assert_int_eq(waitpid(owner, &ost, 0), owner);
    ck_assert(WIFSIGNALED(ost) && WTERMSIG(ost) == SIGKILL);
    int st[3];
    double t0 = (double)bu_now_ns() / 1e9;
    ck_assert_int_eq(reap_all(pids, 3, st, 3000), 3);
    ck_assert_double_lt((double)bu_now_ns() / 1e9 - t0, 3.0);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(WIFSIGNALED(st[i]) && WTERMSIG(st[i]) == SIGKILL, "worker %d: status %x",
                      i, st[i]);
        ck_assert_int_eq(kill(pids[i], 0), -1);
        ck_assert_int_eq(errno, ESRCH);
    }
    ck_assert_int_eq(count_entries("/dev/shm", "feeder"), shm0);
}
END_TEST

/* Wait until the main thread of process `pid` sleeps in (clock_)nanosleep,
 * as /proc/PID/syscall tells; 1 then, 0 after 10 s. */
static int in_sleep(int pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/syscall", pid);
    for (int t = 0; t < 10000; t++) {
        FILE *f = fopen(p, "r");
        long nr = -1;
        if (f) {
            if (fscanf(f, "%ld", &nr) != 1)
                nr = -1;
            fclose(f);
        }
#ifdef SYS_nanosleep
        if (nr == SYS_nanosleep)
            return 1;
#endif
        if (nr == SYS_clock_nanosleep)
            return 1;
        usleep(1000);
    }
    return 0;
}

/* A worker stopped (SIGSTOP) mid-task when the loader's process is killed:
 * nothing can run in it while it is stopped, and it dies by SIGKILL as soon
 * as it is continued (its watching thread finds the pidfd readable). */
START_TEST(test_stopped_worker_dies_when_continued)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t owner = fork();
    if (owner == 0) {
        close(fds[0]);
        pid_pipe = fds[1];
        user_ds d = {.n = 64, .sleep_ms = 20000};
        feeder_dataset *ds = make_user(&d);
        cfg c = train_cfg();
        c.workers = 1;
        feeder_loader *ld = make_loader(ds, &c);
        feeder_loader_set_worker_init(ld, report_pid, NULL);
        feeder_batch *b;
        feeder_next(ld, &b); /* blocks: every sample sleeps 20 s */
        _exit(9);
    }
    close(fds[1]);
    int v[2];
    ck_assert_int_eq(read(fds[0], v, sizeof(v)), (ssize_t)sizeof(v));
    close(fds[0]);
    int pid = v[1];
    /* Into its first sample (the callback's sleep) before it is stopped:
     * stopped earlier, its first send would fail when continued and it
     * would exit by itself. */
    ck_assert(in_sleep(pid));
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    /* Stopped before its loader's process goes: /proc says 'T'. */
    char p[64], line[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", pid);
    for (char state = 0; state != 'T';) {
        FILE *f = fopen(p, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        fclose(f);
        state = strrchr(line, ')')[2];
        if (state != 'T')
            usleep(1000);
    }
    ck_assert_int_eq(kill(owner, SIGKILL), 0);
    int ost;
    ck_assert_int_eq(waitpid(owner, &ost, 0), owner);
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    int st[1], want[1] = {pid};
    double t0 = (double)bu_now_ns() / 1e9;
    ck_assert_int_eq(reap_all(want, 1, st, 3000), 1);
    ck_assert_double_lt((double)bu_now_ns() / 1e9 - t0, 3.0);
    ck_assert_msg(WIFSIGNALED(st[0]) && WTERMSIG(st[0]) == SIGKILL, "status %x", st[0]);
}
END_TEST

/* The race PDEATHSIG cannot cover: the parent dies between fork and prctl.
 * A grandchild waits until its parent is gone, then runs the worker's check
 * with the parent's pid read before the fork: it must exit. */
START_TEST(test_parent_died_before_prctl)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t mid = fork();
    if (mid == 0) {
        pid_t parent = getpid();
        pid_t g = fork();
        if (g == 0) {
            while (getppid() == parent)
                usleep(1000);
            int pfd;
            _exit(feeder__worker_watch_parent(parent, &pfd) ? FEEDER__EXIT_ORPHAN : 0);
        }
        ck_assert_int_eq(write(fds[1], &g, sizeof(g)), (ssize_t)sizeof(g));
        _exit(0);
    }
    pid_t g;
    ck_assert_int_eq(read(fds[0], &g, sizeof(g)), (ssize_t)sizeof(g));
    int st;
    ck_assert_int_eq(waitpid(mid, &st, 0), mid);
    int gs[1], want[1] = {g};
    ck_assert_int_eq(reap_all(want, 1, gs, 3000), 1);
    ck_assert(WIFEXITED(gs[0]));
    ck_assert_int_eq(WEXITSTATUS(gs[0]), FEEDER__EXIT_ORPHAN);
    /* And with the parent alive the check passes. */
    int pfd = -1;
    ck_assert_int_eq(feeder__worker_watch_parent(getppid(), &pfd), 0);
    if (pfd >= 0)
        close(pfd);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Resource limits                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    uint64_t k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        k += e->d_name[0] != '.';
    closedir(d);
    return k - 1;
}

/* RLIMIT_NOFILE lowered in a child: start fails at once, naming the limit
 * and the count; with the limit back up the same loader starts. */
START_TEST(test_nofile_limit)
{
    tu_folder("imgs", 1, 4);
    feeder_dataset *ds = open_folder("imgs");
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit old, rl;
        getrlimit(RLIMIT_NOFILE, &old);
        rl = old;
        uint64_t lim = count_fds() + 10;
        rl.rlim_cur = lim;
        if (setrlimit(RLIMIT_NOFILE, &rl))
            _exit(10);
        cfg c = train_cfg();
        c.workers = 4;
        c.batch = 64;  /* 4 parts of 16 files */
        feeder_loader *ld = make_loader(ds, &c);
        uint64_t open_now = count_fds();
        char want[1024];
        snprintf(want, sizeof(want),
                 "RLIMIT_NOFILE is %llu (hard limit %llu), too low: the loader's process needs "
                 "%llu descriptors (%llu open + 2 for each of 4 workers + 3) and each worker "
                 "%llu (%llu inherited + 3 + 16 files of a task opened at once); raise it "
                 "(ulimit -n, setrlimit) or lower batch_size / raise split",
                 (unsigned long long)lim, (unsigned long long)old.rlim_max, (unsigned long long)(open_now + 11),
                 (unsigned long long)open_now, (unsigned long long)(open_now + 19),
                 (unsigned long long)open_now);
        if (open_now + 10 != lim)
            _exit(11);
        if (feeder_loader_start(ld) != FEEDER_ELIMIT)
            _exit(12);
        if (strcmp(feeder_loader_errmsg(ld), want) != 0) {
            fprintf(stderr, "got:  %s\nwant: %s\n", feeder_loader_errmsg(ld), want);
            _exit(13);
        }
        /* Nothing was allocated: no memfd, no worker. */
        if (count_fds() != open_now || feeder_loader_worker_pid(ld, 0) != -1)
            _exit(14);
        /* Without workers the calling thread reads 64 files at once. */
        feeder_loader_destroy(ld);
        c.workers = 0;
        ld = make_loader(ds, &c);
        snprintf(want, sizeof(want),
                 "RLIMIT_NOFILE is %llu (hard limit %llu), too low: reading a batch needs %llu "
                 "descriptors (%llu open + 3 + 64 files opened at once); raise it (ulimit -n, "
                 "setrlimit) or lower batch_size",
                 (unsigned long long)lim, (unsigned long long)old.rlim_max, (unsigned long long)(open_now + 67),
                 (unsigned long long)open_now);
        if (feeder_loader_start(ld) != FEEDER_ELIMIT || strcmp(feeder_loader_errmsg(ld), want)) {
            fprintf(stderr, "got:  %s\nwant: %s\n", feeder_loader_errmsg(ld), want);
            _exit(15);
        }
        feeder_loader_destroy(ld);
        setrlimit(RLIMIT_NOFILE, &old);
        c.workers = 4;
        ld = make_loader(ds, &c);
        feeder_batch *b;
        if (feeder_next(ld, &b) != 0)
            _exit(16);
        feeder_loader_destroy(ld);
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %x", st);
    feeder_dataset_destroy(ds);
}
END_TEST

static uint64_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0 && line[strlen(key)] == ':')
            sscanf(line + strlen(key) + 1, "%llu", &kb);
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Slots that no machine can back: a clean FEEDER_ELIMIT at start naming the
 * sizes, not a worker killed by SIGBUS or the OOM killer mid-epoch. */
START_TEST(test_slot_memory_limit)
{
    user_ds d = {.n = 8};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    /* 2 slots of 65536 x 4096 x 4096 x 3 bytes (+ 2 MiB of labels,
     * indices, encoded lengths and places) = 6 PiB. */
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 65536), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 4096), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 4096), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 4096), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ELIMIT);
    const char *m = feeder_loader_errmsg(ld);
    size_t slot = (size_t)65536 * 32 + (size_t)65536 * 4096 * 4096 * 3;
    char want[256];
    snprintf(want, sizeof(want), "batch slots need %zu bytes (2 slots x %zu bytes), more than "
             "the memory that can back them: ", 2 * slot, slot);
    ck_assert_msg(strncmp(m, want, strlen(want)) == 0, "%s", m);
    ck_assert_msg(strstr(m, "; /dev/shm has ") && strstr(m, " free (the slots are a memfd, so "
                  "/dev/shm's size does not bound them); lower batch_size, prefetch_factor or "
                  "num_workers"), "%s", m);
    /* No cgroup limit this low here: the message gives the meminfo figures
     * (read again, so only their presence and shape are asserted). */
    if (!strstr(m, "memory cgroup")) {
        ck_assert_msg(strstr(m, "MemAvailable ") && strstr(m, " + SwapFree "), "%s", m);
        ck_assert_uint_gt(meminfo_bytes("MemTotal"), 0);
    }
    feeder_stats st;
    feeder_loader_stats(ld, &st);
    ck_assert_uint_eq(st.shm_bytes, 0); /* nothing allocated */
    /* A size that overflows is refused before that, as an overflow. */
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 1 << 20), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 65535), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 65535), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, 65535), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 1024), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 64), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_EOVERFLOW);
    size_t slot2 = (size_t)(1 << 20) * 32 + (size_t)(1 << 20) * 65535 * 65535 * 3;
    snprintf(want, sizeof(want), "65536 slots of %zu bytes overflow a size", slot2);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Sizes at their edges                                                      */
/* ------------------------------------------------------------------------ */

START_TEST(test_slot_layout_edges)
{
    feeder__slot_layout l;
    /* batch 1: 4096 bytes of labels+indices, then data. The largest slot a
     * size_t holds is 2^64 - 4096; data of 2^64 - 8192 reaches it exactly. */
    ck_assert_int_eq(feeder__slot_layout_init(&l, 1, 8192u * 7 * 103, 2143u * 11119, 131071, 0), 0);
    ck_assert_uint_eq(l.sample_bytes, SIZE_MAX - 8191);
    ck_assert_uint_eq(l.data_off, 4096);
    ck_assert_uint_eq(l.slot_bytes, SIZE_MAX - 4095);
    size_t total;
    ck_assert_int_eq(feeder__slot_total(&l, 1, &total), 0);
    ck_assert_uint_eq(total, SIZE_MAX - 4095);
    ck_assert_int_eq(feeder__slot_total(&l, 2, &total), FEEDER_EOVERFLOW);
    /* One page more of data: 2^64 - 4096 + 4096 does not fit. */
    ck_assert_int_eq(feeder__slot_layout_init(&l, 1, 4096u * 3 * 5 * 53, 157u * 1613 * 2731, 8191, 0),
                     FEEDER_EOVERFLOW);
    /* Data that is not a page multiple and rounds past the top. */
    ck_assert_int_eq(feeder__slot_layout_init(&l, 1, 3u * 5 * 17 * 257, 641u * 65537, 6700417, 0),
                     FEEDER_EOVERFLOW); /* 2^64 - 1 bytes */
    /* The product itself overflowing, at the batch factor. */
    ck_assert_int_eq(feeder__slot_layout_init(&l, 2, 65536, 65536, 1u << 31, 0), FEEDER_EOVERFLOW);
    ck_assert_int_eq(feeder__slot_layout_init(&l, 1, 65536, 65536, 1u << 31, 0), 0);
    ck_assert_int_eq(feeder__slot_layout_init(&l, 0, 1, 1, 1, 0), FEEDER_EINVAL);
    /* slots x slot bytes exactly at SIZE_MAX's page-rounded edge. */
    ck_assert_int_eq(feeder__slot_layout_init(&l, 1, 4096, 4096, 1, 0), 0);
    ck_assert_uint_eq(l.slot_bytes, 4096 + 4096 * 4096);
    ck_assert_int_eq(feeder__slot_total(&l, UINT32_MAX, &total), 0);
    ck_assert_uint_eq(total, (size_t)UINT32_MAX * (4096 + 4096 * 4096));
}
END_TEST

/* The pixel limit: an image of exactly max_pixels decodes; one pixel over
 * is refused from the header, dst untouched, in both decoders. */
START_TEST(test_pixel_limit_edges)
{
    uint8_t *j;
    size_t len;
    ck_assert_int_eq(bu_make_jpeg(tu_photos, 1, 123, 77, 90, -1, 5, &j, &len), 0);
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    uint8_t dst[32 * 32 * 3];
    for (int dec = 0; dec <= 1; dec++) {
        feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = dec, .height = 32,
                               .width = 32, .resize = 32, .max_pixels = 123 * 77};
        char err[256];
        ck_assert_int_eq(feeder__decode_sample(d, &t, j, len, 0, 0, 0, dst, NULL, err, sizeof(err)), 0);
        t.max_pixels = 123 * 77 - 1;
        memset(dst, 0xa5, sizeof(dst));
        ck_assert_int_eq(feeder__decode_sample(d, &t, j, len, 0, 0, 0, dst, NULL, err, sizeof(err)),
                         FEEDER_ETOOBIG);
        ck_assert_str_eq(err, "image is 123x77 = 9471 pixels, over the limit of 9470");
        for (size_t i = 0; i < sizeof(dst); i++)
            ck_assert_uint_eq(dst[i], 0xa5);
    }
    feeder__decoder_destroy(d);
    free(j);
}
END_TEST

/* A valid progressive greyscale JPEG of 16x16 with 1 + 63 x `per_coef`
 * scans: each AC coefficient alone, sent in `per_coef` successive
 * approximation passes. Every scan is legal, so no warning stops it early. */
static void many_scans_jpeg(int per_coef, unsigned char **out, unsigned long *len)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    *out = NULL;
    *len = 0;
    jpeg_mem_dest(&ci, out, len);
    ci.image_width = 16;
    ci.image_height = 16;
    ci.input_components = 1;
    ci.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    int n = 1 + 63 * per_coef;
    jpeg_scan_info *scans = calloc((size_t)n, sizeof(*scans));
    scans[0] = (jpeg_scan_info){.comps_in_scan = 1, .component_index = {0}};
    int k = 1;
    for (int c = 1; c <= 63; c++)
        for (int a = per_coef - 1; a >= 0; a--, k++)
            scans[k] = (jpeg_scan_info){.comps_in_scan = 1, .component_index = {0}, .Ss = c,
                                        .Se = c, .Ah = a == per_coef - 1 ? 0 : a + 1, .Al = a};
    ci.scan_info = scans;
    ci.num_scans = n;
    jpeg_start_compress(&ci, TRUE);
    unsigned char row[16];
    for (int y = 0; y < 16; y++) {
        for (int x = 0; x < 16; x++)
            row[x] = (unsigned char)(x * 13 + y * 7);
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(scans);
}

/* A few KB of legal scans can take minutes to decode: both decoders stop
 * past 500 scans. 379 scans decode; 631 are refused. */
START_TEST(test_progressive_scan_limit)
{
    feeder__decoder *d;
    ck_assert_int_eq(feeder__decoder_create(&d), 0);
    uint8_t dst[8 * 8 * 3];
    for (int per = 6; per <= 10; per += 4) {
        unsigned char *j;
        unsigned long len;
        many_scans_jpeg(per, &j, &len);
        for (int dec = 0; dec <= 1; dec++) {
            feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = dec,
                                   .height = 8, .width = 8, .resize = 8};
            char err[256];
            int rc = feeder__decode_sample(d, &t, j, len, 0, 0, 0, dst, NULL, err, sizeof(err));
            if (per == 6) {
                ck_assert_msg(rc == 0, "decoder %d: %s", dec, err);
            } else {
                ck_assert_int_eq(rc, FEEDER_EDECODE);
                ck_assert_str_eq(err, dec == FEEDER_DECODER_ROI
                                          ? "progressive JPEG has more than 500 scans"
                                          : "Progressive JPEG image has more than 500 scans");
            }
        }
        free(j);
    }
    feeder__decoder_destroy(d);
}
END_TEST

/* One file over the reader's 1 GiB limit (sparse: nothing is written) fails
 * alone, before anything is read, on both read paths; the others load. */
START_TEST(test_file_over_size_limit)
{
    tu_folder("imgs", 1, 3);
    char p[512];
    tu_path(p, sizeof(p), "imgs/c0/001.jpg");
    int fd = open(p, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)FEEDER__MAX_FILE_BYTES + 1), 0);
    close(fd);
    feeder_dataset *ds = open_folder("imgs");
    for (int io = FEEDER_IO_URING; io <= FEEDER_IO_PREAD; io++) {
        cfg c = train_cfg();
        c.shuffle = 0;
        c.workers = 1;
        c.batch = 3;
        feeder_loader *ld = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, io), 0);
        feeder_batch *b;
        int rc = feeder_next(ld, &b);
        if (rc == -ENOSYS || (rc && strstr(feeder_loader_errmsg(ld), "io = uring was asked")))
            continue; /* no io_uring here */
        ck_assert_int_eq(rc, -EFBIG);
        char want[700];
        snprintf(want, sizeof(want),
                 "batch 0 of epoch 0: sample 1 (%s): size over the 1 GiB limit: File too large", p);
        ck_assert_str_eq(feeder_loader_errmsg(ld), want);
        feeder_loader_destroy(ld);
        c.policy = FEEDER_ON_ERROR_SKIP;
        ld = make_loader(ds, &c);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_IO, io), 0);
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->indices[1], 2);
        ck_assert_uint_eq(b->skipped, 1);
        feeder_batch_release(b, NULL);
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Hostile list paths                                                        */
/* ------------------------------------------------------------------------ */
/* Serving the workers while the GPU layer waits                             */
/* ------------------------------------------------------------------------ */

static int slots_ready(const feeder_loader *ld)
{
    int n = 0;
    for (uint32_t s = 0; s < ld->shm.nslots; s++)
        n += ld->shm.slots[s].state == SLOT_READY;
    return n;
}

/* feeder__host_serve, which the GPU layer's thread runs while it waits for
 * a decode lane: with no workers running there is nothing to serve; else
 * it hands the workers the parts queued behind their queues and takes in
 * their results with no feeder_next, so the workers, stopped then, still
 * leave every slot's batch ready (without it the last slot's parts were
 * never sent); a readable wake_fd ends its wait and stays readable; the
 * batches are the reference's, byte for byte; a death past the limit is its
 * error, named. */
START_TEST(test_host_serve)
{
    user_ds d = {.n = 48, .sleep_ms = 30};
    feeder_dataset *ds = make_user(&d);
    cfg c = train_cfg(); /* 2 workers, 4 slots, batches of 4 in two parts */
    ref r;
    reference(ds, &c, &r);
    ck_assert_uint_eq(r.n, 12);
    feeder_loader *ld = make_loader(ds, &c);
    ck_assert_int_eq(feeder__host_serve(ld, -1, 10), FEEDER__HOST_AGAIN); /* not started */
    uint32_t nw = 9;
    ck_assert_uint_eq(feeder__loader_work_ns(ld, &nw), 0);
    ck_assert_uint_eq(nw, 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    feeder__loader_work_ns(ld, &nw);
    ck_assert_uint_eq(nw, 2);

    feeder_batch *b0, *b;
    ck_assert_int_eq(feeder_next(ld, &b0), 0);
    ck_assert_uint_eq(b0->number, 0);
    ck_assert_uint_eq(batch_hash(b0), r.h[0][0]);
    /* Slots 1-3 fill while batch 0 is held, the calls below the only ones. */
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ck_assert_int_ge(efd, 0);
    uint64_t one = 1;
    ck_assert_int_eq(write(efd, &one, sizeof(one)), (ssize_t)sizeof(one));
    double t0 = (bu_now_ns() / 1e9);
    ck_assert_int_eq(feeder__host_serve(ld, efd, 5000), 0);
    ck_assert_msg((bu_now_ns() / 1e9) - t0 < 2.5, "a readable wake_fd did not end the wait");
    struct pollfd pf = {.fd = efd, .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 1); /* not read */
    close(efd);
    for (t0 = (bu_now_ns() / 1e9); slots_ready(ld) < 3 && (bu_now_ns() / 1e9) - t0 < 20;)
        ck_assert_int_eq(feeder__host_serve(ld, -1, 50), 0);
    ck_assert_int_eq(slots_ready(ld), 3);
    for (int w = 0; w < 2; w++)
        ck_assert_int_eq(kill(feeder_loader_worker_pid(ld, w), SIGSTOP), 0);
    for (uint64_t k = 1; k <= 3; k++) {
        ck_assert_int_eq(feeder__host_next(ld, &b, 1), 0);
        ck_assert_uint_eq(b->number, k);
        ck_assert_uint_eq(batch_hash(b), r.h[0][k]);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(feeder__host_next(ld, &b, 1), FEEDER__HOST_AGAIN);
    for (int w = 0; w < 2; w++)
        ck_assert_int_eq(kill(feeder_loader_worker_pid(ld, w), SIGCONT), 0);
    feeder_batch_release(b0, NULL);
    uint64_t k = 4;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->number, k);
        ck_assert_uint_eq(batch_hash(b), r.h[0][k]);
        k++;
        feeder_batch_release(b, NULL);
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    ck_assert_uint_eq(k, 12);
    /* HYBRID's third signal (host op work_ns): the workers' time, here their
     * 48 calls of the dataset's 30 ms get (how many run: 2 above). */
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    uint64_t work = feeder__loader_work_ns(ld, &nw);
    ck_assert_uint_ge(work, st.read_ns + st.decode_ns + st.transform_ns);
    ck_assert_uint_ge(work, 48ull * 30 * 1000000);

    /* Epoch 1: a worker killed with no restarts left is serve's error. */
    ck_assert_int_eq(feeder_next(ld, &b0), 0);
    ck_assert_uint_eq(batch_hash(b0), r.h[1][0]);
    pid_t pid = feeder_loader_worker_pid(ld, 1);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    for (t0 = (bu_now_ns() / 1e9); (rc = feeder__host_serve(ld, -1, 50)) == 0 && (bu_now_ns() / 1e9) - t0 < 20;)
        ;
    ck_assert_int_eq(rc, FEEDER_EWORKER);
    char want[64];
    snprintf(want, sizeof(want), "worker 1 (pid %d)", (int)pid);
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), want), "%s", feeder_loader_errmsg(ld));
    ck_assert_int_eq(feeder__host_serve(ld, -1, 10), FEEDER__HOST_AGAIN); /* the epoch ended */
    feeder_batch_release(b0, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST


/* ------------------------------------------------------------------------ */

START_TEST(test_list_paths_escaping_root)
{
    char lst[512], root[512], err[700], want[2400];
    tu_path(root, sizeof(root), "l");
    ck_assert_int_eq(bu_mkdirs(root), 0);
    tu_path(lst, sizeof(lst), "l/list.txt");
    feeder_dataset *ds;
    struct {
        const char *line2;
        const char *why;
    } bad[] = {
        {"/etc/passwd 1", "absolute path"},
        {"../secret.jpg 1", "'..' climbs above the root"},
        {"a/../../secret.jpg 1", "'..' climbs above the root"},
        {"./a/./../../x y.jpg 2", "'..' climbs above the root"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "ok.jpg 0\n%s\n", bad[i].line2);
        write_text("l/list.txt", text);
        ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EPATH);
        char path[128];
        snprintf(path, sizeof(path), "%.*s", (int)(strrchr(bad[i].line2, ' ') - bad[i].line2),
                 bad[i].line2);
        snprintf(want, sizeof(want),
                 "%s:2: path '%s' escapes the root %s (%s); FEEDER_LIST_ALLOW_ESCAPE allows it", lst,
                 path, root, bad[i].why);
        ck_assert_str_eq(err, want);
        /* Allowed on request, the path kept as written. */
        ck_assert_int_eq(feeder_dataset_open_list2(lst, NULL, FEEDER_LIST_ALLOW_ESCAPE, &ds, err,
                                                   sizeof(err)),
                         0);
        char full[700];
        if (path[0] == '/')
            snprintf(full, sizeof(full), "%s", path);
        else
            snprintf(full, sizeof(full), "%s/%s", root, path);
        ck_assert_str_eq(feeder_dataset_path(ds, 1), full);
        feeder_dataset_destroy(ds);
    }
    /* '..' that stays inside is fine, and so is a name that merely starts
     * with dots. */
    write_text("l/list.txt", "a/../b.jpg 0\n..hidden/c.jpg 1\n.../d.jpg 2\na/b/../../e.jpg 3\n");
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_size(ds), 4);
    feeder_dataset_destroy(ds);
    /* Unknown flags, long lines, NUL bytes. */
    ck_assert_int_eq(feeder_dataset_open_list2(lst, NULL, 6, &ds, err, sizeof(err)), FEEDER_EINVAL);
    snprintf(want, sizeof(want), "%s: unknown flags 0x6", lst);
    ck_assert_str_eq(err, want);
    char *longline = malloc(FEEDER__LIST_LINE_MAX + 16);
    memset(longline, 'a', FEEDER__LIST_LINE_MAX - 2);
    memcpy(longline + FEEDER__LIST_LINE_MAX - 2, " 1\n", 4);
    write_text("l/list.txt", longline); /* exactly the limit: accepted */
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    feeder_dataset_destroy(ds);
    memset(longline, 'a', FEEDER__LIST_LINE_MAX - 1);
    memcpy(longline + FEEDER__LIST_LINE_MAX - 1, " 1\n", 4);
    write_text("l/list.txt", longline); /* one over */
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:1: line is longer than the limit of %d bytes", lst,
             FEEDER__LIST_LINE_MAX);
    ck_assert_str_eq(err, want);
    free(longline);
    char nul[] = "a.jpg 1\nb\0.jpg 2\n";
    char p[512];
    tu_path(p, sizeof(p), "l/list.txt");
    ck_assert_int_eq(bu_write_file(p, nul, sizeof(nul) - 1), 0);
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    snprintf(want, sizeof(want), "%s:2: line holds a NUL byte", lst);
    ck_assert_str_eq(err, want);
    /* The largest label; one more is refused. */
    write_text("l/list.txt", "a.jpg 9223372036854775807\n");
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), 0);
    ck_assert_uint_eq(feeder_dataset_num_classes(ds), (uint64_t)INT64_MAX + 1);
    feeder_dataset_destroy(ds);
    write_text("l/list.txt", "a.jpg 9223372036854775808\n");
    ck_assert_int_eq(feeder_dataset_open_list(lst, NULL, &ds, err, sizeof(err)), FEEDER_EDATASET);
    /* The buffer parser directly: no file needed. */
    const char buf[] = "x.jpg 3\n";
    ck_assert_int_eq(feeder__list_parse(buf, sizeof(buf) - 1, "mem", "/r", 0, &ds, err, sizeof(err)), 0);
    ck_assert_str_eq(feeder_dataset_path(ds, 0), "/r/x.jpg");
    feeder_dataset_destroy(ds);
    ck_assert_int_eq(feeder__list_parse(buf, 0, "mem", "/r", 0, &ds, err, sizeof(err)),
                     FEEDER_EDATASET);
    ck_assert_str_eq(err, "mem: no samples");
}
END_TEST

START_TEST(test_error_names)
{
    ck_assert_str_eq(feeder_err_name(FEEDER_ELIMIT), "FEEDER_ELIMIT");
    ck_assert_str_eq(feeder_strerror(FEEDER_ELIMIT), "a system limit is too low for this configuration");
    ck_assert_str_eq(feeder_err_name(FEEDER_EPATH), "FEEDER_EPATH");
    ck_assert_str_eq(feeder_err_name(FEEDER_ESTATEBLOB), "FEEDER_ESTATEBLOB");
    ck_assert_str_eq(feeder_err_name(FEEDER_EMISMATCH), "FEEDER_EMISMATCH");
    ck_assert_str_eq(feeder_option_name(FEEDER_OPT_MAX_RESTARTS), "max_restarts");
    double lo, hi;
    ck_assert_int_eq(feeder_option_bounds(FEEDER_OPT_MAX_RESTARTS, &lo, &hi), 0);
    ck_assert_double_eq(lo, 0);
    ck_assert_double_eq(hi, 1000000);
}
END_TEST

static Suite *harden_suite(void)
{
    Suite *s = suite_create("harden");
    TCase *tc = tcase_create("harden");
    tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_resume_in_order_any_workers);
    tcase_add_test(tc, test_resume_out_of_order_delivers_the_rest);
    tcase_add_test(tc, test_resume_positions_outside_an_epoch);
    tcase_add_test(tc, test_resume_refuses_another_loader);
    tcase_add_test(tc, test_resume_blob_damage);
    tcase_add_test(tc, test_restart_sigkill_loses_nothing);
    tcase_add_test(tc, test_restart_jpeg_skip_policy);
    tcase_add_test(tc, test_restart_over_limit_lists_deaths);
#if WATCH_MID_TASK
    tcase_add_test(tc, test_parent_death_kills_workers);
    tcase_add_test(tc, test_stopped_worker_dies_when_continued);
#endif
    tcase_add_test(tc, test_parent_died_before_prctl);
    tcase_add_test(tc, test_nofile_limit);
    tcase_add_test(tc, test_slot_memory_limit);
    tcase_add_test(tc, test_slot_layout_edges);
    tcase_add_test(tc, test_pixel_limit_edges);
    tcase_add_test(tc, test_progressive_scan_limit);
    tcase_add_test(tc, test_file_over_size_limit);
    tcase_add_test(tc, test_list_paths_escaping_root);
    tcase_add_test(tc, test_host_serve);
    tcase_add_test(tc, test_error_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(harden_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
