/*
 * feeder_sampler_shards: disjoint equal rank shares, the window
 * bound on resident shards, purity in (seed, epoch), uneven shards (drop or
 * repeat), bad arguments; and a loader over a local shards dataset that
 * gives the same batches for 0, 1 and 2 workers and after a resume.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dataset/pack.h"
#include "feeder.h"
#include "testutil.h"

static uint64_t *order(feeder_sampler *s, uint64_t epoch, uint64_t *len)
{
    *len = feeder_sampler_len(s, epoch);
    uint64_t *o = malloc((*len + 1) * sizeof(*o));
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(feeder_sampler_fill(s, epoch, o, *len), 0);
    return o;
}

static uint32_t shard_of(const uint64_t *counts, uint32_t n, uint64_t x)
{
    for (uint32_t k = 0; k < n; k++) {
        if (x < counts[k])
            return k;
        x -= counts[k];
    }
    ck_abort_msg("index past the last shard");
    return 0;
}

/* 6 shards of 10 over 3 ranks: 20 each, disjoint, covering all 60. */
START_TEST(test_disjoint_equal)
{
    uint64_t counts[6] = {10, 10, 10, 10, 10, 10};
    int seen[60] = {0};
    for (uint32_t r = 0; r < 3; r++) {
        feeder_sampler *s;
        ck_assert_int_eq(feeder_sampler_shards(counts, 6, r, 3, 2, 5, 1, &s), 0);
        uint64_t len;
        uint64_t *o = order(s, 4, &len);
        ck_assert_uint_eq(len, 20);
        uint32_t shards[6] = {0};
        for (uint64_t t = 0; t < len; t++) {
            ck_assert_uint_lt(o[t], 60);
            seen[o[t]]++;
            shards[shard_of(counts, 6, o[t])] = 1;
        }
        uint32_t used = 0;
        for (int k = 0; k < 6; k++)
            used += shards[k];
        ck_assert_uint_eq(used, 2); /* whole shards, two per rank */
        free(o);
        feeder_sampler_destroy(s);
    }
    for (int i = 0; i < 60; i++)
        ck_assert_int_eq(seen[i], 1);
}
END_TEST

/* At no point does the stream have more than `window` shards started and
 * not finished; window 1 gives each shard's samples in one block. */
START_TEST(test_window_bound)
{
    uint64_t counts[7] = {9, 4, 12, 7, 1, 8, 5};
    for (uint32_t w = 1; w <= 4; w++) {
        feeder_sampler *s;
        ck_assert_int_eq(feeder_sampler_shards(counts, 7, 0, 1, w, 99, 1, &s), 0);
        uint64_t len;
        uint64_t *o = order(s, 2, &len);
        ck_assert_uint_eq(len, 46);
        uint64_t left[7];
        memcpy(left, counts, sizeof(left));
        int started[7] = {0}, hit[46] = {0};
        for (uint64_t t = 0; t < len; t++) {
            ck_assert_int_eq(hit[o[t]]++, 0);
            uint32_t k = shard_of(counts, 7, o[t]);
            started[k] = 1;
            left[k]--;
            uint32_t open = 0;
            for (int q = 0; q < 7; q++)
                open += started[q] && left[q];
            ck_assert_uint_le(open, w);
        }
        free(o);
        feeder_sampler_destroy(s);
    }
}
END_TEST

/* A pure function of (seed, epoch): the same twice, another epoch or seed
 * differs; window 0 is a full shuffle of the rank's shards. */
START_TEST(test_pure)
{
    uint64_t counts[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    feeder_sampler *a, *b, *c;
    ck_assert_int_eq(feeder_sampler_shards(counts, 8, 1, 2, 2, 7, 1, &a), 0);
    ck_assert_int_eq(feeder_sampler_shards(counts, 8, 1, 2, 2, 7, 1, &b), 0);
    ck_assert_int_eq(feeder_sampler_shards(counts, 8, 1, 2, 2, 8, 1, &c), 0);
    uint64_t n1, n2, n3, n4;
    uint64_t *o1 = order(a, 3, &n1), *o2 = order(b, 3, &n2), *o3 = order(a, 4, &n3),
             *o4 = order(c, 3, &n4);
    ck_assert_uint_eq(n1, 64);
    ck_assert_int_eq(memcmp(o1, o2, n1 * sizeof(*o1)), 0);
    ck_assert_int_ne(memcmp(o1, o3, n1 * sizeof(*o1)), 0);
    ck_assert_int_ne(memcmp(o1, o4, n1 * sizeof(*o1)), 0);
    free(o1);
    free(o2);
    free(o3);
    free(o4);
    feeder_sampler_destroy(a);
    feeder_sampler_destroy(b);
    feeder_sampler_destroy(c);
}
END_TEST

/* Uneven shards: every rank the same length; drop_last 1 cuts to
 * floor(total / world), 0 rounds up and repeats a short rank's stream. */
START_TEST(test_uneven)
{
    uint64_t counts[3] = {5, 1, 1};
    for (int drop = 0; drop <= 1; drop++) {
        for (uint32_t r = 0; r < 2; r++) {
            feeder_sampler *s;
            ck_assert_int_eq(feeder_sampler_shards(counts, 3, r, 2, 1, 3, drop, &s), 0);
            uint64_t len;
            uint64_t *o = order(s, 0, &len);
            ck_assert_uint_eq(len, drop ? 3 : 4);
            /* A rank holds either shard 0 (5 samples: cut) or two one-sample
             * shards (or one): repeated from its start. */
            uint32_t k0 = shard_of(counts, 3, o[0]);
            for (uint64_t t = 1; t < len; t++) {
                uint32_t k = shard_of(counts, 3, o[t]);
                ck_assert((k0 == 0) == (k == 0));
            }
            if (k0 != 0) {
                uint64_t period = len;
                for (uint64_t t = 1; t < len; t++)
                    if (o[t] == o[0]) {
                        period = t;
                        break;
                    }
                for (uint64_t t = period; t < len; t++)
                    ck_assert_uint_eq(o[t], o[t - period]);
            }
            free(o);
            feeder_sampler_destroy(s);
        }
    }
}
END_TEST

START_TEST(test_bad_arguments)
{
    uint64_t counts[2] = {3, 3};
    feeder_sampler *s = NULL;
    ck_assert_int_eq(feeder_sampler_shards(NULL, 2, 0, 1, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_shards(counts, 0, 0, 1, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_shards(counts, 2, 2, 2, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_shards(counts, 2, 0, 3, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_shards(counts, 2, 0, 0, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_shards(counts, 2, 0, 1, 1, 0, 1, NULL), FEEDER_EINVAL);
    uint64_t huge[2] = {UINT64_MAX, 2};
    ck_assert_int_eq(feeder_sampler_shards(huge, 2, 0, 1, 1, 0, 1, &s), FEEDER_EOVERFLOW);
    ck_assert_ptr_null(s);
    uint64_t empty[2] = {0, 0};
    ck_assert_int_eq(feeder_sampler_shards(empty, 2, 0, 1, 1, 0, 0, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), 0);
    feeder_sampler_destroy(s);
}
END_TEST

/* ---- with a loader ---- */

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-shardsmp-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    bu_rm_rf(tmpdir);
}

static feeder_dataset *local_shards(void)
{
    const uint64_t n[4] = {24, 24, 24, 24};
    for (int k = 0; k < 4; k++) {
        char p[400];
        snprintf(p, sizeof(p), "%s/s-%d.pack", tmpdir, k);
        feeder__pack_header h;
        tu_write_raw_pack(p, n[k], 8, 8, 2, &h);
    }
    char pat[400], err[512];
    snprintf(pat, sizeof(pat), "%s/s-{0..3}.pack", tmpdir);
    feeder_dataset *ds;
    ck_assert_msg(feeder_dataset_open_shards(pat, NULL, &ds, err, sizeof(err)) == 0, "%s", err);
    return ds;
}

static feeder_loader *loader(feeder_dataset *ds, feeder_sampler *s, int workers)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, s, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 3), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 8), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 8), 0);
    return ld;
}

/* Batches `from`.. of the loader's epoch 0, as one CRC over data, labels
 * and indices; `stop` > 0 saves the state after that many batches and stops. */
static uint32_t run(feeder_loader *ld, int stop, void *state, size_t *state_len)
{
    feeder_batch *b;
    int rc, k = 0;
    uint32_t crc = 0;
    while ((rc = feeder_next(ld, &b)) == 0) {
        crc = feeder__crc32c(crc, b->data, (size_t)b->count * b->sample_bytes);
        crc = feeder__crc32c(crc, b->labels, b->count * sizeof(int64_t));
        crc = feeder__crc32c(crc, b->indices, b->count * sizeof(uint64_t));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        if (++k == stop) {
            ck_assert_int_eq(feeder_loader_state_save(ld, state, 4096, state_len), 0);
            return crc;
        }
    }
    ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
    return crc;
}

START_TEST(test_loader_workers_and_resume)
{
    feeder_dataset *ds = local_shards();
    uint64_t counts[4];
    uint32_t ns;
    ck_assert_int_eq(feeder_dataset_shard_counts(ds, counts, 4, &ns), 0);
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_shards(counts, ns, 0, 1, 2, 3, 1, &s), 0);
    uint32_t crc[3];
    for (int w = 0; w <= 2; w++) {
        feeder_loader *ld = loader(ds, s, w);
        crc[w] = run(ld, 0, NULL, NULL);
        feeder_loader_destroy(ld);
    }
    ck_assert_uint_eq(crc[0], crc[1]);
    ck_assert_uint_eq(crc[0], crc[2]);
    /* Resume after 5 of 12 batches, with another worker count: the CRC of
     * the first 5 continued over the rest is the whole epoch's. */
    static uint8_t state[4096];
    size_t len = 0;
    feeder_loader *ld = loader(ds, s, 2);
    uint32_t head = run(ld, 5, state, &len);
    feeder_loader_destroy(ld);
    ld = loader(ds, s, 1);
    ck_assert_msg(feeder_loader_state_load(ld, state, len) == 0, "%s", feeder_loader_errmsg(ld));
    feeder_batch *b;
    int rc;
    uint32_t c = head;
    while ((rc = feeder_next(ld, &b)) == 0) {
        c = feeder__crc32c(c, b->data, (size_t)b->count * b->sample_bytes);
        c = feeder__crc32c(c, b->labels, b->count * sizeof(int64_t));
        c = feeder__crc32c(c, b->indices, b->count * sizeof(uint64_t));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(c, crc[0]);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(s);
    feeder_dataset_destroy(ds);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("shard_sampler");
    TCase *tc = tcase_create("shard_sampler");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_disjoint_equal);
    tcase_add_test(tc, test_window_bound);
    tcase_add_test(tc, test_pure);
    tcase_add_test(tc, test_uneven);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_loader_workers_and_resume);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
