/*
 * Fields (include/feeder.h, "Fields"): the schema's checks, fields datasets
 * padded, ragged and fixed, every value of every sample once and in order
 * for 0, 1 and 3 workers, the per-sample checks (too long, wrong dtype, no
 * length) under FAIL, SKIP and DROP, the collate callback, resume, worker
 * restarts, the built-in image schema, and the three examples.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "collate/fields.h"
#include "feeder.h"
#include "testutil.h"

#define MAXT 12 /* the token field's maximum */

/* ---- a token dataset: sample i has tok_len(i) tokens i * 1000 + j ---- */

typedef struct tok_ds {
    uint64_t n;
    int64_t too_long;  /* index whose length is set past the maximum, or -1 */
    int64_t bad_dtype; /* index put with f32, or -1 */
    int64_t no_len;    /* index that sets no length, or -1 */
    int64_t kill_at;   /* index at which a worker dies once (marker file), or -1 */
    char marker[256];
} tok_ds;

static uint64_t tok_len(uint64_t i) { return 1 + (i * 7919) % MAXT; }
static int32_t tok_val(uint64_t i, uint64_t j) { return (int32_t)(i * 1000 + j); }

static uint64_t tok_count(void *user) { return ((tok_ds *)user)->n; }

static int tok_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                   size_t errlen)
{
    tok_ds *d = user;
    uint64_t i = ctx->index, n = tok_len(i);
    if ((int64_t)i == d->kill_at && ctx->worker_id >= 0 && access(d->marker, F_OK) != 0) {
        FILE *f = fopen(d->marker, "w");
        if (f)
            fclose(f);
        raise(SIGKILL);
    }
    if ((int64_t)i == d->no_len)
        return 0;
    if ((int64_t)i == d->too_long) {
        out->rows[0] = MAXT + 1;
        return 0;
    }
    if ((int64_t)i == d->bad_dtype) {
        float f[MAXT] = {0};
        return feeder_sample_put(out, 0, FEEDER_ELEM_F32, f, n);
    }
    int32_t v[MAXT];
    for (uint64_t j = 0; j < n; j++)
        v[j] = tok_val(i, j);
    int rc = feeder_sample_put(out, 0, FEEDER_ELEM_I32, v, n);
    if (rc)
        snprintf(err, errlen, "put failed");
    int64_t id = (int64_t)i;
    return rc ? rc : feeder_sample_put(out, 1, FEEDER_ELEM_I64, &id, 1);
}

static const feeder_field TOK_FIELDS[2] = {
    {"tokens", FEEDER_ELEM_I32, FEEDER_FIELD_PADDED, 1, {MAXT}, {0}},
    {"id", FEEDER_ELEM_I64, FEEDER_FIELD_FIXED, 0, {0}, {0}},
};

static feeder_dataset *tok_open(tok_ds *d, uint64_t n)
{
    memset(d, 0, sizeof(*d));
    d->n = n;
    d->too_long = d->bad_dtype = d->no_len = d->kill_at = -1;
    feeder_fields_callbacks cb = {.len = tok_count, .get = tok_get};
    feeder_dataset *ds;
    char err[256];
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, TOK_FIELDS, 2, d, &ds, err, sizeof(err)),
                     0);
    return ds;
}

static feeder_loader *fields_loader(feeder_dataset *ds, int workers, int batch, int shuffle)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, shuffle), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SPLIT, workers > 1 ? 3 : 0), 0);
    return ld;
}

/* Check one token batch value by value against the generator; a hash of
 * every byte of every field. `pad8`: the collate callback padded to 8s. */
static uint64_t check_tok_batch(const feeder_batch *b, int pad8)
{
    feeder_tensor t, id;
    ck_assert_int_eq(feeder_batch_field(b, "tokens", &t), 0);
    ck_assert_int_eq(feeder_batch_field(b, "id", &id), 0);
    ck_assert_ptr_null(b->data);
    ck_assert_uint_eq(t.ndim, 2);
    ck_assert_uint_eq(t.shape[0], b->count);
    uint64_t longest = 0;
    for (uint32_t s = 0; s < b->count; s++)
        longest = tok_len(b->indices[s]) > longest ? tok_len(b->indices[s]) : longest;
    uint64_t want = pad8 ? (longest + 7) / 8 * 8 : longest;
    if (want > MAXT)
        want = MAXT;
    ck_assert_uint_eq(t.shape[1], want);
    ck_assert_uint_eq(t.bytes, (size_t)b->count * want * 4);
    ck_assert_uint_eq(id.ndim, 1);
    const int32_t *v = t.data;
    for (uint32_t s = 0; s < b->count; s++) {
        uint64_t i = b->indices[s];
        ck_assert_int_eq(((int64_t *)id.data)[s], (int64_t)i);
        ck_assert_int_eq(t.lengths[s], (int64_t)tok_len(i));
        for (uint64_t j = 0; j < want; j++)
            ck_assert_int_eq(v[s * want + j], j < tok_len(i) ? tok_val(i, j) : 0);
    }
    uint64_t h = bu_hash64(0, t.data, t.bytes);
    h = bu_hash64(h, t.lengths, b->count * 8);
    h = bu_hash64(h, id.data, id.bytes);
    return bu_hash64(h, b->indices, b->count * 8);
}

/* Every batch of two epochs hashed, every sample seen once an epoch. */
static uint64_t run_tokens(feeder_loader *ld, uint64_t n, int pad8)
{
    uint64_t h = 0;
    for (int e = 0; e < 2; e++) {
        uint8_t seen[256] = {0};
        feeder_batch *b;
        int rc;
        uint64_t k = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_eq(b->number, k++);
            h = bu_hash64(h, &(uint64_t){check_tok_batch(b, pad8)}, 8);
            for (uint32_t s = 0; s < b->count; s++)
                seen[b->indices[s]]++;
            feeder_batch_release(b, NULL);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%d %s", rc, feeder_loader_errmsg(ld));
        for (uint64_t i = 0; i < n; i++)
            ck_assert_int_eq(seen[i], 1);
    }
    return h;
}

START_TEST(test_tokens_any_workers)
{
    tok_ds d;
    feeder_dataset *ds = tok_open(&d, 53);
    uint64_t h[3];
    int workers[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        feeder_loader *ld = fields_loader(ds, workers[k], 8, 1);
        h[k] = run_tokens(ld, 53, 0);
        feeder_loader_destroy(ld);
    }
    ck_assert_uint_eq(h[0], h[1]);
    ck_assert_uint_eq(h[0], h[2]);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- the schema's checks ---- */

static int create_err(const feeder_field *f, uint32_t n, char *err, size_t len)
{
    tok_ds d = {.n = 4};
    feeder_fields_callbacks cb = {.len = tok_count, .get = tok_get};
    feeder_dataset *ds = NULL;
    int rc = feeder_dataset_create_fields(&cb, f, n, &d, &ds, err, len);
    feeder_dataset_destroy(ds);
    return rc;
}

START_TEST(test_schema_checks)
{
    char err[256];
    static const struct {
        feeder_field f;
        const char *want;
    } bad[] = {
        {{"", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 1, {4}, {0}},
         "field 0 (''): a name of 1 to 31 characters is needed"},
        {{"x", 7, FEEDER_FIELD_FIXED, 1, {4}, {0}}, "field 0 ('x'): elem 7 is no feeder_elem (0 .. 6)"},
        {{"x", FEEDER_ELEM_U8, 3, 1, {4}, {0}},
         "field 0 ('x'): batching 3 is none of FIXED, PADDED, RAGGED"},
        {{"x", FEEDER_ELEM_U8, FEEDER_FIELD_RAGGED, 0, {0}, {0}},
         "field 0 ('x'): ragged needs ndim >= 1 (shape[0] is the maximum rows)"},
        {{"x", FEEDER_ELEM_U8, FEEDER_FIELD_PADDED, 2, {4, 0}, {0}}, "field 0 ('x'): shape[1] is 0"},
        {{"x", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 5, {1, 1, 1, 1}, {0}},
         "field 0 ('x'): ndim 5 is more than 4"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        ck_assert_int_eq(create_err(&bad[k].f, 1, err, sizeof(err)), FEEDER_EINVAL);
        ck_assert_str_eq(err, bad[k].want);
    }
    feeder_field two[2] = {TOK_FIELDS[0], TOK_FIELDS[0]};
    ck_assert_int_eq(create_err(two, 2, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "field 1 ('tokens'): the name of field 0 too");
    ck_assert_int_eq(create_err(TOK_FIELDS, 0, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "a schema needs 1 to 16 fields (got 0)");
    feeder_fields_callbacks cb = {.len = tok_count};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, TOK_FIELDS, 2, NULL, &ds, err, sizeof(err)),
                     FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_dataset_create_fields: cb->get is NULL");
    /* The copy is the dataset's: the caller's names may go. */
    char name[8] = "tokens";
    feeder_field f = TOK_FIELDS[0];
    f.name = name;
    tok_ds d;
    cb.get = tok_get;
    d.n = 3;
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, &f, 1, &d, &ds, err, sizeof(err)), 0);
    strcpy(name, "zzz");
    feeder_field got;
    ck_assert_int_eq(feeder_dataset_field(ds, 0, &got), 1);
    ck_assert_str_eq(got.name, "tokens");
    ck_assert_uint_eq(got.shape[0], MAXT);
    ck_assert_uint_eq(feeder_elem_size(FEEDER_ELEM_BF16), 2);
    ck_assert_str_eq(feeder_elem_name(FEEDER_ELEM_I64), "i64");
    ck_assert_ptr_null(feeder_elem_name(9));
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- bad samples ---- */

/* The error of the batch holding `index` (sequential, batches of 4). */
static void expect_sample_error(tok_ds *dd, int workers, int expect_rc, const char *want)
{
    (void)dd;
    feeder_dataset *ds;
    feeder_fields_callbacks cb = {.len = tok_count, .get = tok_get};
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, TOK_FIELDS, 2, dd, &ds, NULL, 0), 0);
    feeder_loader *ld = fields_loader(ds, workers, 4, 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0); /* samples 0-3 */
    feeder_batch_release(b, NULL);
    int rc = feeder_next(ld, &b);
    ck_assert_msg(rc == expect_rc, "rc %d: %s", rc, feeder_loader_errmsg(ld));
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), want), "%s", feeder_loader_errmsg(ld));
    ck_assert_int_eq(feeder_next(ld, &b), 0); /* the next batch goes on */
    check_tok_batch(b, 0);
    feeder_batch_release(b, NULL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}

START_TEST(test_bad_samples_fail)
{
    for (int workers = 0; workers <= 2; workers += 2) {
        tok_ds d;
        feeder_dataset_destroy(tok_open(&d, 16));
        d.too_long = 5;
        expect_sample_error(&d, workers, FEEDER_ERANGE,
                            "batch 1 of epoch 0: sample 5, field 'tokens': 13 rows, more than "
                            "its maximum 12");
        d.too_long = -1;
        d.bad_dtype = 6;
        expect_sample_error(&d, workers, FEEDER_EINVAL,
                            "sample 6, field 'tokens': feeder_sample_put with dtype f32, the "
                            "field holds i32");
        d.bad_dtype = -1;
        d.no_len = 7;
        expect_sample_error(&d, workers, FEEDER_EINVAL,
                            "sample 7, field 'tokens': the callback set no length (out->rows[0])");
    }
}
END_TEST

/* A put past the maximum writes nothing: the next sample's values stay. */
static int long_put_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out,
                        char *err, size_t errlen)
{
    (void)user, (void)err, (void)errlen;
    int32_t v[2 * MAXT];
    for (int j = 0; j < 2 * MAXT; j++)
        v[j] = -1;
    if (ctx->index == 1) {
        ck_assert_int_eq(feeder_sample_put(out, 0, FEEDER_ELEM_I32, v, 2 * MAXT), FEEDER_ERANGE);
        return 0; /* ignoring the error does not save the sample */
    }
    for (int j = 0; j < MAXT; j++)
        v[j] = (int32_t)(ctx->index * 1000 + (uint64_t)j);
    int64_t id = (int64_t)ctx->index;
    feeder_sample_put(out, 1, FEEDER_ELEM_I64, &id, 1);
    return feeder_sample_put(out, 0, FEEDER_ELEM_I32, v, tok_len(ctx->index));
}

START_TEST(test_long_put_skip_drop)
{
    tok_ds d;
    feeder_dataset_destroy(tok_open(&d, 8));
    feeder_fields_callbacks cb = {.len = tok_count, .get = long_put_get};
    for (int policy = FEEDER_ON_ERROR_SKIP; policy <= FEEDER_ON_ERROR_DROP; policy++) {
        feeder_dataset *ds;
        ck_assert_int_eq(feeder_dataset_create_fields(&cb, TOK_FIELDS, 2, &d, &ds, NULL, 0), 0);
        feeder_loader *ld = fields_loader(ds, 2, 4, 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, policy), 0);
        feeder_batch *b;
        ck_assert_msg(feeder_next(ld, &b) == 0, "%s", feeder_loader_errmsg(ld));
        uint64_t want_skip[4] = {0, 2, 2, 3}, want_drop[3] = {0, 2, 3};
        ck_assert_uint_eq(b->count, policy == FEEDER_ON_ERROR_SKIP ? 4 : 3);
        ck_assert_uint_eq(b->skipped, 1);
        for (uint32_t s = 0; s < b->count; s++)
            ck_assert_uint_eq(b->indices[s],
                              policy == FEEDER_ON_ERROR_SKIP ? want_skip[s] : want_drop[s]);
        check_tok_batch(b, 0);
        feeder_batch_release(b, NULL);
        feeder_stats st;
        feeder_loader_stats(ld, &st);
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
    }
}
END_TEST

/* ---- detection: an image, boxes f32 [n, 4] and classes i64 [n], ragged ---- */

#define MAXBOX 5
static uint64_t box_count(uint64_t i) { return (i * 3) % (MAXBOX + 1); }
static float box_val(uint64_t i, uint64_t r, int c) { return (float)(i * 100 + r * 10) + (float)c * 0.25f; }

static int det_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                   size_t errlen)
{
    (void)user, (void)err, (void)errlen;
    uint64_t i = ctx->index, n = box_count(i);
    uint8_t *img = out->data[0];
    for (size_t p = 0; p < out->capacity[0]; p++)
        img[p] = (uint8_t)(i * 31 + p);
    float boxes[MAXBOX][4];
    int64_t cls[MAXBOX];
    for (uint64_t r = 0; r < n; r++) {
        for (int c = 0; c < 4; c++)
            boxes[r][c] = box_val(i, r, c);
        cls[r] = (int64_t)(i + r);
    }
    int rc = feeder_sample_put(out, 1, FEEDER_ELEM_F32, boxes, n);
    return rc ? rc : feeder_sample_put(out, 2, FEEDER_ELEM_I64, cls, n);
}

static const feeder_field DET_FIELDS[3] = {
    {"image", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 3, {6, 5, 3}, {0}},
    {"boxes", FEEDER_ELEM_F32, FEEDER_FIELD_RAGGED, 2, {MAXBOX, 4}, {0}},
    {"classes", FEEDER_ELEM_I64, FEEDER_FIELD_RAGGED, 1, {MAXBOX}, {0}},
};

static uint64_t check_det_batch(const feeder_batch *b)
{
    feeder_tensor img, box, cls;
    ck_assert_int_eq(feeder_batch_field_at(b, 0, &img), 0);
    ck_assert_int_eq(feeder_batch_field(b, "boxes", &box), 0);
    ck_assert_int_eq(feeder_batch_field(b, "classes", &cls), 0);
    ck_assert_int_eq(feeder_batch_field_at(b, 3, &cls) == FEEDER_EINVAL, 1);
    ck_assert_int_eq(feeder_batch_field(b, "classes", &cls), 0);
    ck_assert_uint_eq(img.ndim, 4);
    ck_assert_uint_eq(img.shape[1] * img.shape[2] * img.shape[3], 90);
    uint64_t total = 0;
    for (uint32_t s = 0; s < b->count; s++) {
        uint64_t i = b->indices[s];
        const uint8_t *p = (const uint8_t *)img.data + (size_t)s * 90;
        for (size_t q = 0; q < 90; q++)
            ck_assert_uint_eq(p[q], (uint8_t)(i * 31 + q));
        ck_assert_int_eq(box.offsets[s], (int64_t)total);
        ck_assert_int_eq(box.lengths[s], (int64_t)box_count(i));
        ck_assert_int_eq(cls.offsets[s], (int64_t)total);
        for (uint64_t r = 0; r < box_count(i); r++) {
            for (int c = 0; c < 4; c++)
                ck_assert(((float *)box.data)[(total + r) * 4 + (uint64_t)c] == box_val(i, r, c));
            ck_assert_int_eq(((int64_t *)cls.data)[total + r], (int64_t)(i + r));
        }
        total += box_count(i);
    }
    ck_assert_int_eq(box.offsets[b->count], (int64_t)total);
    ck_assert_uint_eq(box.ndim, 2);
    ck_assert_uint_eq(box.shape[0], total);
    ck_assert_uint_eq(box.shape[1], 4);
    ck_assert_uint_eq(box.bytes, total * 16);
    ck_assert_uint_eq(cls.shape[0], total);
    uint64_t h = bu_hash64(0, img.data, img.bytes);
    h = bu_hash64(h, box.data, box.bytes);
    h = bu_hash64(h, box.offsets, (b->count + 1) * 8);
    return bu_hash64(h, cls.data, cls.bytes);
}

START_TEST(test_detection_ragged)
{
    static uint64_t n = 29;
    feeder_fields_callbacks cb = {.len = tok_count, .get = det_get};
    tok_ds d = {.n = n};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, DET_FIELDS, 3, &d, &ds, NULL, 0), 0);
    uint64_t h[3];
    int workers[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        feeder_loader *ld = fields_loader(ds, workers[k], 6, 1);
        feeder_batch *b;
        int rc;
        h[k] = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            h[k] = bu_hash64(h[k], &(uint64_t){check_det_batch(b)}, 8);
            feeder_batch_release(b, NULL);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        feeder_loader_destroy(ld);
    }
    ck_assert_uint_eq(h[0], h[1]);
    ck_assert_uint_eq(h[0], h[2]);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- the collate callback ---- */

static int pad8_collate(void *user, feeder_batch *b, char *err, size_t errlen)
{
    (void)user;
    feeder_tensor t;
    if (feeder_batch_field(b, "tokens", &t))
        return snprintf(err, errlen, "no tokens"), -1;
    uint64_t rows = (t.shape[1] + 7) / 8 * 8;
    if (rows > MAXT)
        rows = MAXT;
    if (b->number == 3 && b->epoch == 1)
        return snprintf(err, errlen, "batch three refused"), -7;
    return feeder_batch_pad_field(b, 0, rows);
}

START_TEST(test_collate_callback)
{
    tok_ds d;
    feeder_dataset *ds = tok_open(&d, 40);
    uint64_t h[3];
    int workers[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        feeder_loader *ld = fields_loader(ds, workers[k], 8, 1);
        ck_assert_int_eq(feeder_loader_set_collate(ld, pad8_collate, NULL), 0);
        feeder_batch *b;
        int rc;
        h[k] = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            h[k] = bu_hash64(h[k], &(uint64_t){check_tok_batch(b, 1)}, 8);
            /* Outside a collate callback the batch is read-only in shape. */
            ck_assert_int_eq(feeder_batch_pad_field(b, 0, MAXT), FEEDER_EINVAL);
            float soft[8 * 4];
            ck_assert_int_eq(feeder_batch_soft_labels(b, 4, soft), FEEDER_EINVAL); /* no labels */
            feeder_batch_release(b, NULL);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        for (uint64_t k2 = 0; k2 < 3; k2++) {
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            feeder_batch_release(b, NULL);
        }
        rc = feeder_next(ld, &b);
        ck_assert_int_eq(rc, FEEDER_ECALLBACK);
        ck_assert_str_eq(feeder_loader_errmsg(ld),
                         "batch 3 of epoch 1: collate callback returned -7: "
                         "batch three refused");
        feeder_loader_destroy(ld);
    }
    ck_assert_uint_eq(h[0], h[1]);
    ck_assert_uint_eq(h[0], h[2]);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- what a fields loader refuses at start ---- */

START_TEST(test_start_refusals)
{
    tok_ds d;
    feeder_dataset *ds = tok_open(&d, 8);
    feeder_loader *ld = fields_loader(ds, 0, 4, 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "dtype 3: a fields dataset's tensors ('tokens', ...) reach the device as the "
                     "dataset wrote them; dtype (and mean, std) apply to image batches only");
    feeder_loader_destroy(ld);
    ld = fields_loader(ds, 0, 4, 0);
    feeder_augment *aug;
    ck_assert_int_eq(feeder_augment_create(&aug), 0);
    ck_assert_int_eq(feeder_augment_flip(aug, 0, 0.5), 0);
    ck_assert_int_eq(feeder_loader_set_augment(ld, aug), 0);
    feeder_augment_destroy(aug);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_EINVAL);
    ck_assert(strstr(feeder_loader_errmsg(ld), "a fields dataset takes none"));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- resume and restarts ---- */

START_TEST(test_resume_and_restart)
{
    tok_ds d;
    feeder_dataset *ds = tok_open(&d, 60);
    feeder_loader *ld = fields_loader(ds, 2, 8, 1);
    uint64_t ref = run_tokens(ld, 60, 0);
    feeder_loader_destroy(ld);

    /* A worker dies at sample 17 once; MAX_RESTARTS re-runs its parts. */
    char dir[] = "/tmp/feeder-fields-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(d.marker, sizeof(d.marker), "%s/died", dir);
    d.kill_at = 17;
    ld = fields_loader(ds, 2, 8, 1);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 2), 0);
    ck_assert_uint_eq(run_tokens(ld, 60, 0), ref);
    ck_assert_int_eq(access(d.marker, F_OK), 0);
    feeder_loader_destroy(ld);
    unlink(d.marker);
    rmdir(dir);
    d.kill_at = -1;

    /* Stop after 3 batches of epoch 0, resume in a new loader. */
    ld = fields_loader(ds, 2, 8, 1);
    feeder_batch *b;
    uint64_t want[8], got[8];
    for (int k = 0; k < 8; k++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        want[k] = check_tok_batch(b, 0);
        feeder_batch_release(b, NULL);
    }
    feeder_loader_destroy(ld);
    ld = fields_loader(ds, 3, 8, 1);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        feeder_batch_release(b, NULL);
    }
    uint8_t blob[4096];
    size_t len;
    ck_assert_int_eq(feeder_loader_state_save(ld, blob, sizeof(blob), &len), 0);
    feeder_loader_destroy(ld);
    ld = fields_loader(ds, 1, 8, 1);
    ck_assert_msg(feeder_loader_state_load(ld, blob, len) == 0, "%s", feeder_loader_errmsg(ld));
    for (int k = 3; k < 8; k++) {
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_uint_eq(b->number, (uint64_t)k);
        got[k] = check_tok_batch(b, 0);
        ck_assert_uint_eq(got[k], want[k]);
        feeder_batch_release(b, NULL);
    }
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A collate callback that kills its worker once, at batch 1: the part is
 * re-run (MAX_RESTARTS), finds every sample counted and packs nothing, and
 * the batch fails naming the death instead of arriving half-packed. */
static char kill_marker[256];

static int killing_collate(void *user, feeder_batch *b, char *err, size_t errlen)
{
    (void)user, (void)err, (void)errlen;
    if (b->number == 1 && access(kill_marker, F_OK) != 0) {
        FILE *f = fopen(kill_marker, "w");
        if (f)
            fclose(f);
        raise(SIGKILL);
    }
    return 0;
}

START_TEST(test_death_while_packing)
{
    tok_ds d;
    feeder_dataset *ds = tok_open(&d, 32);
    char dir[] = "/tmp/feeder-fields-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(kill_marker, sizeof(kill_marker), "%s/died", dir);
    feeder_loader *ld = fields_loader(ds, 2, 8, 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_MAX_RESTARTS, 2), 0);
    ck_assert_int_eq(feeder_loader_set_collate(ld, killing_collate, NULL), 0);
    feeder_batch *b;
    for (uint64_t k = 0; k < 4; k++) {
        int rc = feeder_next(ld, &b);
        if (k == 1) {
            ck_assert_msg(rc == FEEDER_EWORKER, "%d %s", rc, feeder_loader_errmsg(ld));
            ck_assert_str_eq(feeder_loader_errmsg(ld),
                             "batch 1 of epoch 0: the worker packing its fields (and running the "
                             "collate callback) died; the batch is lost");
            continue;
        }
        ck_assert_msg(rc == 0, "%d %s", rc, feeder_loader_errmsg(ld));
        ck_assert_uint_eq(b->number, k);
        check_tok_batch(b, 0);
        feeder_batch_release(b, NULL);
    }
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    unlink(kill_marker);
    rmdir(dir);
}
END_TEST

/* ---- collate/fields.c on a slot of exactly its bytes (malloc), so that
 * AddressSanitizer sees any write or read past the last field's room ---- */

START_TEST(test_slot_bounds)
{
    /* The last field's room ends the slot with no slack: 4 x 1024 x 4 bytes. */
    static const feeder_field f[2] = {
        {"n", FEEDER_ELEM_I64, FEEDER_FIELD_FIXED, 0, {0}, {0}},
        {"v", FEEDER_ELEM_I32, FEEDER_FIELD_RAGGED, 1, {1024}, {0}},
    };
    feeder__fields_layout fl;
    feeder__slot_layout l;
    ck_assert_int_eq(feeder__fields_layout_init(&fl, &l, f, 2, 4), 0);
    ck_assert_uint_eq(fl.a[1].values_off + 4 * 4096, l.slot_bytes);
    uint8_t *slot = malloc(l.slot_bytes);
    ck_assert_ptr_nonnull(slot);
    memset(slot, 0xee, l.slot_bytes);
    memset(slot, 0, (size_t)4 * 8); /* labels: no DROP mark */
    feeder__fields_reset(&fl, slot);
    static int32_t src[1025];
    for (int j = 0; j < 1025; j++)
        src[j] = j;
    char msg[256];
    for (uint32_t i = 0; i < 4; i++) {
        feeder__sample_buf buf;
        feeder_sample_out o;
        feeder__fields_sample_out(&fl, slot, i, &buf, &o);
        int64_t n = i;
        ck_assert_int_eq(feeder_sample_put(&o, 0, FEEDER_ELEM_I64, &n, 1), 0);
        if (i == 3) { /* one row too many: refused, nothing written */
            ck_assert_int_eq(feeder_sample_put(&o, 1, FEEDER_ELEM_I32, src, 1025), FEEDER_ERANGE);
            ck_assert_uint_eq(((uint8_t *)o.data[1])[0], 0xee);
            ck_assert_int_eq(feeder__fields_accept(&fl, slot, i, 30 + i, &o, msg, sizeof(msg)),
                             FEEDER_ERANGE);
            ck_assert_str_eq(msg, "sample 33, field 'v': feeder_sample_put of 1025 rows, the "
                                  "field takes at most 1024");
            o.put_error = 0;
        }
        /* The last sample fills its room to the slot's last byte. */
        uint64_t rows = i == 3 ? 1024 : i + 1;
        ck_assert_int_eq(feeder_sample_put(&o, 1, FEEDER_ELEM_I32, src, rows), 0);
        ck_assert_int_eq(feeder__fields_accept(&fl, slot, i, 30 + i, &o, msg, sizeof(msg)), 0);
    }
    ck_assert_int_eq(feeder__fields_part_done(&fl, slot, 0, 2, 4, 0), 0);
    ck_assert_int_eq(feeder__fields_part_done(&fl, slot, 0, 2, 4, 0), 0); /* a re-run */
    ck_assert_int_eq(feeder__fields_part_done(&fl, slot, 2, 2, 4, 0), 1);
    feeder__fields_pack(&fl, slot, 4);
    feeder__fields_view v = {.fl = &fl, .slot = slot};
    feeder_tensor t;
    feeder__fields_tensor(&v, 4, 1, &t);
    ck_assert_uint_eq(t.shape[0], 1 + 2 + 3 + 1024);
    int64_t want_off[5] = {0, 1, 3, 6, 1030};
    for (int k = 0; k < 5; k++)
        ck_assert_int_eq(t.offsets[k], want_off[k]);
    for (uint32_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < t.lengths[i]; j++)
            ck_assert_int_eq(((int32_t *)t.data)[t.offsets[i] + j], (int32_t)j);
    free(slot);
}
END_TEST

/* ---- paired transforms ---- */

START_TEST(test_pair_crop_draw)
{
    feeder_pair_crop a, b;
    /* Whole-area crops of a 2:1 source cannot have an aspect in [3/4, 4/3]:
     * the fallback, the centre crop of the output's 2:1. */
    ck_assert_int_eq(feeder_pair_crop_draw(1, 0, 5, 100, 50, 20, 10, 1.0, 1.0, 0.0, &a), 0);
    ck_assert_uint_eq(a.x, 0);
    ck_assert_uint_eq(a.y, 0);
    ck_assert_uint_eq(a.width, 100);
    ck_assert_uint_eq(a.height, 50);
    ck_assert_uint_eq(a.out_width, 20);
    ck_assert_int_eq(a.flip, 0);
    ck_assert_int_eq(feeder_pair_crop_draw(1, 0, 5, 100, 50, 20, 10, 1.0, 1.0, 1.0, &a), 0);
    ck_assert_int_eq(a.flip, 1);
    int differ = 0;
    for (uint64_t i = 0; i < 50; i++) {
        ck_assert_int_eq(feeder_pair_crop_draw(7, 2, i, 300, 200, 64, 64, 0.1, 0.9, 0.5, &a), 0);
        ck_assert_int_eq(feeder_pair_crop_draw(7, 2, i, 300, 200, 64, 64, 0.1, 0.9, 0.5, &b), 0);
        ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0); /* a pure function of its arguments */
        ck_assert_uint_le(a.x + a.width, 300);
        ck_assert_uint_le(a.y + a.height, 200);
        double share = (double)a.width * a.height / (300.0 * 200.0);
        ck_assert_msg(share > 0.09 && share < 0.92, "share %g", share);
        ck_assert_int_eq(feeder_pair_crop_draw(7, 3, i, 300, 200, 64, 64, 0.1, 0.9, 0.5, &b), 0);
        differ += memcmp(&a, &b, sizeof(a)) != 0;
    }
    ck_assert_int_gt(differ, 40); /* another epoch, other crops */
    ck_assert_int_eq(feeder_pair_crop_draw(1, 0, 0, 0, 50, 20, 10, 0.5, 1.0, 0.5, &a), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_pair_crop_draw(1, 0, 0, 9, 9, 9, 9, 0.6, 0.5, 0.5, &a), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_pair_crop_draw(1, 0, 0, 9, 9, 9, 9, 0.5, 1.0, 1.5, &a), FEEDER_EINVAL);
}
END_TEST

START_TEST(test_pair_crop_image_and_boxes)
{
    enum { SW = 40, SH = 30 };
    static uint8_t src[SH][SW][3], out[20][20][3];
    for (int y = 0; y < SH; y++)
        for (int x = 0; x < SW; x++) {
            src[y][x][0] = (uint8_t)x;
            src[y][x][1] = (uint8_t)y;
            src[y][x][2] = 7;
        }
    /* Nearest, half size: output (ox, oy) is source (10 + 2ox + 1, 5 + 2oy + 1). */
    feeder_pair_crop c = {10, 5, 20, 10, 10, 5, 0, {0}};
    for (int flip = 0; flip < 2; flip++) {
        c.flip = flip;
        ck_assert_int_eq(feeder_pair_crop_image(&c, &src[0][0][0], SW, SH, 3,
                                                FEEDER_INTERP_NEAREST, &out[0][0][0]), 0);
        for (int oy = 0; oy < 5; oy++)
            for (int ox = 0; ox < 10; ox++) {
                const uint8_t *px = &out[0][0][0] + (oy * 10 + ox) * 3;
                int dx = flip ? 9 - ox : ox;
                ck_assert_uint_eq(px[0], 10 + 2 * dx + 1);
                ck_assert_uint_eq(px[1], 5 + 2 * oy + 1);
                ck_assert_uint_eq(px[2], 7);
            }
    }
    /* Bilinear, half size: pixel centres fall between two source pixels:
     * x = 10 + 2ox + 0.5, rounded half away from zero. */
    c.flip = 0;
    ck_assert_int_eq(feeder_pair_crop_image(&c, &src[0][0][0], SW, SH, 3,
                                            FEEDER_INTERP_BILINEAR, &out[0][0][0]), 0);
    for (int oy = 0; oy < 5; oy++)
        for (int ox = 0; ox < 10; ox++) {
            const uint8_t *px = &out[0][0][0] + (oy * 10 + ox) * 3;
            ck_assert_uint_eq(px[0], 10 + 2 * ox + 1);
            ck_assert_uint_eq(px[1], 5 + 2 * oy + 1);
        }
    /* Bilinear at scale 1 is the crop itself. */
    feeder_pair_crop same = {3, 4, 20, 20, 20, 20, 1, {0}};
    ck_assert_int_eq(feeder_pair_crop_image(&same, &src[0][0][0], SW, SH, 3,
                                            FEEDER_INTERP_BILINEAR, &out[0][0][0]), 0);
    for (int oy = 0; oy < 20; oy++)
        for (int ox = 0; ox < 20; ox++)
            ck_assert_int_eq(memcmp(out[oy][ox], src[4 + oy][3 + 19 - ox], 3), 0);
    feeder_pair_crop outside = {30, 0, 20, 10, 10, 5, 0, {0}};
    ck_assert_int_eq(feeder_pair_crop_image(&outside, &src[0][0][0], SW, SH, 3,
                                            FEEDER_INTERP_NEAREST, &out[0][0][0]), FEEDER_EINVAL);
    /* Boxes: crop (10, 5, 20 x 10) to 40 x 20 (scale 2), mirrored. */
    feeder_pair_crop b = {10, 5, 20, 10, 40, 20, 1, {0}};
    float boxes[3][4] = {{12, 6, 20, 10}, {0, 0, 5, 5}, {25, 12, 40, 30}};
    int64_t cls[3] = {4, 5, 6};
    ck_assert_uint_eq(feeder_pair_crop_boxes(&b, &boxes[0][0], cls, 3), 2);
    float want[2][4] = {{20, 2, 36, 10}, {0, 14, 10, 20}};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++)
            ck_assert_msg(boxes[k][j] == want[k][j], "box %d coord %d: %g", k, j,
                          (double)boxes[k][j]);
    ck_assert_int_eq(cls[0], 4);
    ck_assert_int_eq(cls[1], 6);
}
END_TEST

/* ---- the built-in image schema ---- */

START_TEST(test_image_schema)
{
    char dir[] = "/tmp/feeder-fields-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    bu_photos *photos;
    char err[256];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
    tu_make_folder(photos, dir, "d", 2, 3, "c", 80, 40, 60, 40);
    feeder_dataset *ds = tu_open_folder(dir, "d");
    feeder_field f;
    ck_assert_int_eq(feeder_dataset_field(ds, 1, &f), 2);
    ck_assert_str_eq(f.name, "label");
    feeder_loader *ld = tu_small_loader(ds, 1, 4);
    for (int k2 = 0; k2 < 2; k2++) {
        feeder_batch *b;
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        feeder_tensor img, lab;
        ck_assert_int_eq(feeder_batch_field(b, "image", &img), 0);
        ck_assert_int_eq(feeder_batch_field(b, "label", &lab), 0);
        ck_assert_int_eq(feeder_batch_field(b, "boxes", &lab) == FEEDER_EINVAL, 1);
        ck_assert_int_eq(feeder_batch_field(b, "label", &lab), 0);
        ck_assert_ptr_eq(img.data, b->data);
        ck_assert_ptr_eq(lab.data, b->labels);
        ck_assert_uint_eq(img.ndim, 4);
        uint64_t want[4] = {b->count, 32, 32, 3};
        for (int k = 0; k < 4; k++)
            ck_assert_uint_eq(img.shape[k], want[k]);
        ck_assert_uint_eq(img.bytes, (size_t)b->count * b->sample_bytes);
        ck_assert_uint_eq(lab.shape[0], b->count);
        ck_assert_uint_eq(lab.bytes, b->count * 8);
        ck_assert_int_eq(img.elem, FEEDER_ELEM_U8);
        ck_assert_int_eq(lab.elem, FEEDER_ELEM_I64);
        feeder_batch_release(b, NULL);
    }
    /* A collate callback needs a fields dataset. */
    feeder_loader_destroy(ld);
    ld = tu_small_loader(ds, 0, 4);
    ck_assert_int_eq(feeder_loader_set_collate(ld, pad8_collate, NULL), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "feeder_loader_set_collate: the dataset has no "
                                               "fields (feeder_dataset_create_fields)");
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    bu_photos_free(photos);
    bu_rm_rf(dir);
}
END_TEST

/* ---- the examples: each checks every value itself; the same checksum
 * for 0, 1 and 3 workers ---- */

#ifdef FEEDER_EXAMPLES_DIR
/* Run an example; its stdout in out (len bytes). The exit status. */
static int run_example(const char *name, const char *args, int workers, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s/%s --check --workers %d %s", FEEDER_EXAMPLES_DIR, name,
             workers, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void example_case(const char *name, const char *args, const char *line1,
                         const char *checked)
{
    char first[1024] = "", out[1024];
    int workers[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(run_example(name, args, workers[k], out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, line1) == out, "%s", out);
        char *sum = strstr(out, checked);
        ck_assert_msg(sum && strlen(sum) >= strlen(checked) + 17 &&
                          sum[strlen(checked) + 16] == '\n', "%s", out);
        sum[strlen(checked) + 16] = 0; /* the checksum line alone */
        if (k == 0)
            snprintf(first, sizeof(first), "%s", sum);
        ck_assert_str_eq(sum, first);
    }
}
#endif

START_TEST(test_examples)
{
#ifdef FEEDER_EXAMPLES_DIR
    example_case("fields_tokens", "--docs 300 --max 100 --batch 16 --epochs 2", "38 batches, ",
                 "checked: every token, length and mask; checksum ");
    example_case("fields_detection", "--images 70 --batch 8", "2 epochs: 18 batches, ",
                 "checked: every image, box and class; checksum ");
    example_case("fields_segmentation", "--images 20 --batch 8",
                 "2 epochs: 6 batches, 163840 mask pixels\n",
                 "checked: every pixel of every image and mask; checksum ");
#endif
}
END_TEST

static Suite *fields_suite(void)
{
    Suite *s = suite_create("fields");
    TCase *tc = tcase_create("fields");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_schema_checks);
    tcase_add_test(tc, test_tokens_any_workers);
    tcase_add_test(tc, test_bad_samples_fail);
    tcase_add_test(tc, test_long_put_skip_drop);
    tcase_add_test(tc, test_detection_ragged);
    tcase_add_test(tc, test_collate_callback);
    tcase_add_test(tc, test_start_refusals);
    tcase_add_test(tc, test_resume_and_restart);
    tcase_add_test(tc, test_image_schema);
    tcase_add_test(tc, test_death_while_packing);
    tcase_add_test(tc, test_slot_bounds);
    tcase_add_test(tc, test_pair_crop_draw);
    tcase_add_test(tc, test_pair_crop_image_and_boxes);
    tcase_add_test(tc, test_examples);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fields_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
