/*
 * Packed files of fields (dataset/pack_fields.c, format version 3): a fields
 * dataset written by feeder_pack_fields and opened by
 * feeder_dataset_open_packed gives the same schema and, through a loader,
 * the same bytes in every field for any worker count; bad files and bad
 * samples fail naming the file, record, sample and field.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"
#include "dataset/pack.h"
#include "feeder.h"

static char dir[256];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/feeder-packfields-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { bu_rm_rf(dir); }

/* Sample i: tokens i32 PADDED up to 12 (i % 12 + 1 values i * 1000 + j),
 * boxes f32 [<=3, 4] RAGGED (i % 4 boxes), mask u8 [2, 3] FIXED, label i64
 * scalar (i % 7). fail_at: the sample whose callback fails (-1: none);
 * too_long: the sample that claims 13 tokens. */
typedef struct src {
    uint64_t n;
    int64_t fail_at, too_long;
} src;

static const feeder_field FIELDS[4] = {
    {"tokens", FEEDER_ELEM_I32, FEEDER_FIELD_PADDED, 1, {12, 0, 0, 0}, {0}},
    {"boxes", FEEDER_ELEM_F32, FEEDER_FIELD_RAGGED, 2, {3, 4, 0, 0}, {0}},
    {"mask", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 2, {2, 3, 0, 0}, {0}},
    {"label", FEEDER_ELEM_I64, FEEDER_FIELD_FIXED, 0, {0}, {0}},
};

static uint64_t src_len(void *user) { return ((src *)user)->n; }

static int src_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                   size_t errlen)
{
    const src *s = user;
    uint64_t i = ctx->index;
    if ((int64_t)i == s->fail_at) {
        snprintf(err, errlen, "no such sample today");
        return -5;
    }
    int32_t tok[13];
    float box[12];
    uint8_t mask[6];
    for (int j = 0; j < 13; j++)
        tok[j] = (int32_t)(i * 1000 + (uint64_t)j);
    for (int j = 0; j < 12; j++)
        box[j] = (float)i + (float)j / 8;
    for (int j = 0; j < 6; j++)
        mask[j] = (uint8_t)(i * 3 + (uint64_t)j);
    int64_t label = (int64_t)(i % 7);
    uint64_t ntok = (int64_t)i == s->too_long ? 13 : i % 12 + 1;
    feeder_sample_put(out, 0, FEEDER_ELEM_I32, tok, ntok);
    feeder_sample_put(out, 1, FEEDER_ELEM_F32, box, i % 4);
    feeder_sample_put(out, 2, FEEDER_ELEM_U8, mask, 2);
    feeder_sample_put(out, 3, FEEDER_ELEM_I64, &label, 1);
    return 0;
}

static feeder_dataset *source(src *s)
{
    feeder_fields_callbacks cb = {src_len, src_get, NULL};
    feeder_dataset *ds;
    char err[256];
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, FIELDS, 4, s, &ds, err, sizeof(err)), 0);
    return ds;
}

static void pack_path(char *p, size_t len, const char *name)
{
    snprintf(p, len, "%s/%s", dir, name);
}

/* Pack `s` into dir/name and open it. */
static feeder_dataset *packed(src *s, const char *name)
{
    char p[512], err[512];
    pack_path(p, sizeof(p), name);
    feeder_dataset *ds = source(s), *pk;
    ck_assert_msg(feeder_pack_fields(ds, p, err, sizeof(err)) == 0, "%s", err);
    feeder_dataset_destroy(ds);
    ck_assert_msg(feeder_dataset_open_packed(p, &pk, err, sizeof(err)) == 0, "%s", err);
    return pk;
}

/* A hash of every field's tensor, lengths and offsets of every batch. */
static uint64_t run_hash(feeder_dataset *ds, int workers, uint64_t *batches)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 6), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 5), 0);
    uint64_t h = 1;
    feeder_batch *b;
    int rc;
    *batches = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        h = bu_hash(h, b->indices, b->count * sizeof(uint64_t));
        for (uint32_t k = 0; k < 4; k++) {
            feeder_tensor t;
            ck_assert_int_eq(feeder_batch_field_at(b, k, &t), 0);
            h = bu_hash(h, t.data, t.bytes);
            h = bu_hash(h, t.shape, sizeof(t.shape));
            if (t.lengths)
                h = bu_hash(h, t.lengths, b->count * 8);
            if (t.offsets)
                h = bu_hash(h, t.offsets, (b->count + 1) * 8);
        }
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        (*batches)++;
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    return h;
}

START_TEST(test_round_trip_any_workers)
{
    src s = {41, -1, -1};
    feeder_dataset *orig = source(&s), *pk = packed(&s, "f.pack");
    ck_assert_uint_eq(feeder_dataset_size(pk), 41);
    ck_assert_int_eq(feeder_dataset_field(pk, 0, NULL), 4);
    for (uint32_t k = 0; k < 4; k++) {
        feeder_field f;
        feeder_dataset_field(pk, k, &f);
        ck_assert_str_eq(f.name, FIELDS[k].name);
        ck_assert_int_eq(f.elem, FIELDS[k].elem);
        ck_assert_int_eq(f.batching, FIELDS[k].batching);
        ck_assert_uint_eq(f.ndim, FIELDS[k].ndim);
        ck_assert_mem_eq(f.shape, FIELDS[k].shape, sizeof(f.shape));
    }
    feeder_packed_info info;
    ck_assert_int_eq(feeder_dataset_packed_info(pk, &info), 0);
    ck_assert_int_eq(info.kind, FEEDER_RECORD_FIELDS);
    ck_assert_uint_eq(info.version, 3);
    ck_assert_uint_eq(info.records, 41);
    uint64_t nb, want = run_hash(orig, 0, &nb);
    ck_assert_uint_eq(nb, 7);
    for (int w = 0; w <= 3; w += 3) {
        ck_assert_uint_eq(run_hash(pk, w, &nb), want);
        ck_assert_uint_eq(nb, 7);
    }
    feeder_dataset_destroy(orig);
    feeder_dataset_destroy(pk);
}
END_TEST

/* One record's first byte after its rows header, in the file. */
static uint64_t record_data_at(const char *p, uint64_t i)
{
    feeder_dataset *ds;
    char err[256];
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), 0);
    feeder_dataset_destroy(ds);
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(bu_read_file(p, &buf, &len), 0);
    feeder__pack_view v;
    ck_assert_int_eq(feeder__pack_parse(buf, len, p, &v, err, sizeof(err)), 0);
    uint64_t off, size;
    uint32_t crc;
    feeder__pack_entry(&v, i, &off, &size, &crc);
    free(buf);
    return off;
}

static void patch(const char *p, uint64_t at, const void *bytes, size_t n)
{
    int fd = open(p, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, bytes, n, (off_t)at), (ssize_t)n);
    close(fd);
}

/* The error of the first failing batch of an in-order epoch. */
static void expect_batch_error(feeder_dataset *ds, int rc_want, const char *text)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0)
        feeder_batch_release(b, NULL);
    ck_assert_int_eq(rc, rc_want);
    ck_assert_msg(strstr(feeder_loader_errmsg(ld), text), "'%s' lacks '%s'",
                  feeder_loader_errmsg(ld), text);
    feeder_loader_destroy(ld);
}

START_TEST(test_damaged_records_fail_their_batch)
{
    src s = {9, -1, -1};
    feeder_dataset_destroy(packed(&s, "d.pack"));
    char p[512], want[700];
    pack_path(p, sizeof(p), "d.pack");
    uint64_t at = record_data_at(p, 5);
    uint8_t x = 0xEE;
    patch(p, at + 16, &x, 1); /* a token of record 5 (after its 16-byte rows header) */
    feeder_dataset *ds, *ds2;
    char err[256];
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "record 5 of %s: crc32c mismatch", p);
    expect_batch_error(ds, FEEDER_ECHECKSUM, want);
    feeder_dataset_destroy(ds);
    uint8_t rows[4] = {13, 0, 0, 0}; /* record 2 claims 13 tokens */
    patch(p, record_data_at(p, 2), rows, 4);
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds2, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "record 2 of %s, field 'tokens': 13 rows (maximum 12)", p);
    expect_batch_error(ds2, FEEDER_EFORMAT, want);
    feeder_dataset_destroy(ds2);
}
END_TEST

START_TEST(test_damaged_schema_and_cut_file_fail_open)
{
    src s = {5, -1, -1};
    feeder_dataset_destroy(packed(&s, "s.pack"));
    char p[512], err[512];
    pack_path(p, sizeof(p), "s.pack");
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(bu_read_file(p, &buf, &len), 0);
    feeder__pack_view v;
    ck_assert_int_eq(feeder__pack_parse(buf, len, p, &v, err, sizeof(err)), 0);
    uint64_t fields_off = v.h.fields_off;
    free(buf);
    uint8_t elem[4] = {99, 0, 0, 0};
    patch(p, fields_off + 8 + 72 + 32, elem, 4); /* field 1's elem */
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), FEEDER_EFORMAT);
    ck_assert_msg(strstr(err, "schema: field 1 ('boxes'): elem 99 is no feeder_elem"), "%s", err);
    ck_assert_int_eq(truncate(p, 8192), 0);
    ck_assert_int_eq(feeder_dataset_open_packed(p, &ds, err, sizeof(err)), FEEDER_EFORMAT);
    ck_assert_msg(strstr(err, "runs past the end of the file"), "%s", err);
}
END_TEST

START_TEST(test_bad_samples_and_paths_fail_the_write)
{
    char p[512], err[512];
    pack_path(p, sizeof(p), "bad.pack");
    src s1 = {6, 3, -1}, s2 = {6, -1, 4};
    feeder_dataset *a = source(&s1), *b = source(&s2), *img;
    ck_assert_int_eq(feeder_pack_fields(a, p, err, sizeof(err)), -5);
    ck_assert_str_eq(err, "sample 3: dataset callback returned -5: no such sample today");
    ck_assert_int_eq(access(p, F_OK), -1); /* nothing left behind */
    ck_assert_int_eq(feeder_pack_fields(b, p, err, sizeof(err)), FEEDER_ERANGE);
    ck_assert_str_eq(err, "sample 4, field 0: feeder_sample_put failed: option value out of "
                          "range");
    char q[600];
    snprintf(q, sizeof(q), "%s/no/such/dir/x.pack", dir);
    ck_assert_int_eq(feeder_pack_fields(a, q, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, "cannot create its .tmp"), "%s", err);
    ck_assert_int_eq(feeder_pack_fields(NULL, p, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_pack_fields: ds and path must not be NULL");
    /* An image dataset has no fields of its own to pack. */
    FILE *f = fopen(p, "w");
    fputs("x.jpg 0\n", f);
    fclose(f);
    ck_assert_int_eq(feeder_dataset_open_list(p, NULL, &img, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_pack_fields(img, q, err, sizeof(err)), FEEDER_EINVAL);
    ck_assert_str_eq(err, "feeder_pack_fields: the dataset has no fields "
                          "(feeder_dataset_create_fields)");
    feeder_dataset_destroy(img);
    feeder_dataset_destroy(a);
    feeder_dataset_destroy(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pack_fields");
    TCase *tc = tcase_create("pack_fields");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_trip_any_workers);
    tcase_add_test(tc, test_damaged_records_fail_their_batch);
    tcase_add_test(tc, test_damaged_schema_and_cut_file_fail_open);
    tcase_add_test(tc, test_bad_samples_and_paths_fail_the_write);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
