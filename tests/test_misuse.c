/*
 * Misuse is diagnosed, never undefined: a dataset destroyed
 * before its loader lives on until the loader goes; a batch released twice
 * is named; a loader or batch used after destroy is refused in debug
 * builds; the error message is always the last call's; and a loader
 * without a seed draws one from the system, readable, saved in the resume
 * state and taken back from it.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"

typedef struct user_ds {
    uint64_t n;
    int destroyed;
} user_ds;

static uint64_t user_len(void *u) { return ((user_ds *)u)->n; }

static int user_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                    int64_t *label, char *err, size_t errlen)
{
    (void)u, (void)err, (void)errlen;
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(ctx->index * 31 + i);
    *label = (int64_t)ctx->index;
    return 0;
}

static void user_destroy(void *u) { ((user_ds *)u)->destroyed++; }

static feeder_dataset *make_user(user_ds *d)
{
    feeder_dataset_callbacks cb = {.len = user_len, .get = user_get, .destroy = user_destroy};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, d, &ds), 0);
    return ds;
}

static feeder_loader *make_loader(feeder_dataset *ds, int workers, int shuffle)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 4), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, shuffle), 0);
    return ld;
}

/* The indices of a whole epoch, in delivery order. */
static void epoch_order(feeder_loader *ld, uint64_t *out, uint64_t n)
{
    feeder_batch *b;
    uint64_t k = 0;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t i = 0; i < b->count && k < n; i++)
            out[k++] = b->indices[i];
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(k, n);
}

START_TEST(dataset_destroyed_before_its_loader)
{
    user_ds d = {.n = 10};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld = make_loader(ds, 2, 1);
    feeder_dataset_destroy(ds); /* the loader still holds it */
    ck_assert_int_eq(d.destroyed, 0);
    uint64_t order[10];
    for (int e = 0; e < 3; e++) /* new workers every epoch: they read the dataset */
        epoch_order(ld, order, 10);
    ck_assert_int_eq(d.destroyed, 0);
    feeder_loader_destroy(ld); /* the last hold: now it goes, once */
    ck_assert_int_eq(d.destroyed, 1);
}
END_TEST

START_TEST(two_loaders_share_a_dataset)
{
    user_ds d = {.n = 8};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *a = make_loader(ds, 0, 0), *b = make_loader(ds, 1, 0);
    feeder_loader_destroy(a);
    feeder_dataset_destroy(ds);
    uint64_t order[8];
    epoch_order(b, order, 8);
    for (uint64_t i = 0; i < 8; i++)
        ck_assert_uint_eq(order[i], i);
    ck_assert_int_eq(d.destroyed, 0);
    feeder_loader_destroy(b);
    ck_assert_int_eq(d.destroyed, 1);
}
END_TEST

START_TEST(second_release_is_named)
{
    user_ds d = {.n = 12};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld = make_loader(ds, 1, 0);
    feeder_batch *b1, *b2;
    ck_assert_int_eq(feeder_next(ld, &b1), 0);
    ck_assert_int_eq(feeder_next(ld, &b2), 0);
    ck_assert_uint_eq(b2->number, 1);
    ck_assert_int_eq(feeder_batch_release(b2, NULL), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "");
    ck_assert_int_eq(feeder_batch_release(b2, NULL), FEEDER_EINVAL);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "feeder_batch_release: batch 1 of epoch 0 is not lent: released twice?");
    ck_assert_int_eq(feeder_batch_release(b1, NULL), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), ""); /* the last call's message */
    ck_assert_int_eq(feeder_batch_release(NULL, NULL), FEEDER_EINVAL);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* Using a loader or its batch after feeder_loader_destroy is undefined; a
 * debug build (no NDEBUG, or FEEDER_DEBUG: the asan build) refuses the
 * common cases with FEEDER_ESTATE and a message, reading none of the freed
 * memory (ASan would report it), and leaks nothing (LeakSanitizer). With
 * NDEBUG there is nothing to test. */
START_TEST(use_after_destroy_refused_in_debug_builds)
{
#if !defined(NDEBUG) || defined(FEEDER_DEBUG)
    user_ds d = {.n = 12};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld = make_loader(ds, 1, 0);
    feeder_batch *b, *held;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_int_eq(feeder_next(ld, &held), 0);
    feeder_loader_destroy(ld); /* with `held` still lent */
    char want[256];
    ck_assert_int_eq(feeder_batch_release(held, NULL), FEEDER_ESTATE);
    snprintf(want, sizeof(want), "feeder_batch_release: batch %p was not lent by a live loader "
             "(its loader was destroyed?)", (void *)held);
    ck_assert_str_eq(feeder_loader_errmsg(NULL), want);
    ck_assert_int_eq(feeder_batch_release(b, NULL), FEEDER_ESTATE); /* released, then destroyed */
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ESTATE);
    snprintf(want, sizeof(want), "feeder_next: loader %p is not a live loader (destroyed "
             "already?)", (void *)ld);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld); /* a second destroy does nothing */
    snprintf(want, sizeof(want), "feeder_loader_destroy: loader %p is not a live loader "
             "(destroyed twice?)", (void *)ld);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    ck_assert_int_eq(d.destroyed, 0); /* the dataset is the caller's */
    feeder_dataset_destroy(ds);
    ck_assert_int_eq(d.destroyed, 1);
#endif
}
END_TEST

START_TEST(errmsg_is_the_last_calls)
{
    user_ds d = {.n = 4};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *ld = make_loader(ds, 0, 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 0), FEEDER_ERANGE);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "batch_size = 0 is out of range [1, 1048576]");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 2), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "");
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_BATCH_SIZE, 2.0), FEEDER_EINVAL);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "takes an integer"));
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "");
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 3), FEEDER_ESTATE);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(ld), "cannot change after the loader "
                                                           "started"));
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "");
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 2), 0);
    ck_assert_str_eq(feeder_loader_errmsg(ld), "");
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(seed_drawn_from_the_system)
{
    user_ds d = {.n = 64};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *a = make_loader(ds, 0, 1), *b = make_loader(ds, 0, 1);
    uint64_t sa, sb;
    ck_assert_int_eq(feeder_loader_seed(a, &sa), 0);
    ck_assert_int_eq(feeder_loader_seed(b, &sb), 0);
    ck_assert_uint_ne(sa, sb); /* 53 random bits each */
    ck_assert_uint_lt(sa, (uint64_t)1 << 53);
    double v;
    ck_assert_int_eq(feeder_loader_get(a, FEEDER_OPT_SEED, &v), 0);
    ck_assert_uint_eq((uint64_t)v, sa);
    uint64_t oa[64], ob[64], oc[64];
    epoch_order(a, oa, 64);
    epoch_order(b, ob, 64);
    ck_assert_int_ne(memcmp(oa, ob, sizeof(oa)), 0); /* two runs, two orders */
    /* The drawn seed reproduces the run when set. */
    feeder_loader *c = make_loader(ds, 2, 1);
    ck_assert_int_eq(feeder_loader_set(c, FEEDER_OPT_SEED, (int64_t)sa), 0);
    epoch_order(c, oc, 64);
    ck_assert_int_eq(memcmp(oa, oc, sizeof(oa)), 0);
    ck_assert_int_eq(feeder_loader_seed(NULL, &sa), FEEDER_EINVAL);
    feeder_loader_destroy(a);
    feeder_loader_destroy(b);
    feeder_loader_destroy(c);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(resume_takes_the_saved_seed)
{
    user_ds d = {.n = 40};
    feeder_dataset *ds = make_user(&d);
    feeder_loader *a = make_loader(ds, 1, 1);
    uint64_t seed;
    ck_assert_int_eq(feeder_loader_seed(a, &seed), 0);
    uint64_t full[40];
    epoch_order(a, full, 40); /* epoch 0 */
    feeder_batch *b;
    for (int i = 0; i < 3; i++) { /* three batches of epoch 1, then save */
        ck_assert_int_eq(feeder_next(a, &b), 0);
        ck_assert_uint_eq(b->epoch, 1);
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    size_t len;
    ck_assert_int_eq(feeder_loader_state_save(a, NULL, 0, &len), 0);
    uint8_t *blob = malloc(len);
    ck_assert_int_eq(feeder_loader_state_save(a, blob, len, &len), 0);
    uint64_t rest_a[40], ka = 0;
    int rc;
    while ((rc = feeder_next(a, &b)) == 0) {
        for (uint32_t j = 0; j < b->count; j++)
            rest_a[ka++] = b->indices[j];
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    /* A new loader with no seed set: it draws its own, then takes the blob's. */
    feeder_loader *r = make_loader(ds, 2, 1);
    uint64_t drawn;
    ck_assert_int_eq(feeder_loader_seed(r, &drawn), 0);
    ck_assert_uint_ne(drawn, seed);
    ck_assert_int_eq(feeder_loader_state_load(r, blob, len), 0);
    uint64_t now;
    ck_assert_int_eq(feeder_loader_seed(r, &now), 0);
    ck_assert_uint_eq(now, seed);
    uint64_t kr = 0;
    while ((rc = feeder_next(r, &b)) == 0) {
        for (uint32_t j = 0; j < b->count; j++) {
            ck_assert_uint_lt(kr, ka);
            ck_assert_uint_eq(b->indices[j], rest_a[kr++]);
        }
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(kr, ka);
    /* A loader whose seed was set keeps it, and the blob then does not match. */
    feeder_loader *s = make_loader(ds, 0, 1);
    ck_assert_int_eq(feeder_loader_set(s, FEEDER_OPT_SEED, (int64_t)(seed ^ 1)), 0);
    ck_assert_int_eq(feeder_loader_state_load(s, blob, len), FEEDER_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(feeder_loader_errmsg(s), "seed is"));
    free(blob);
    feeder_loader_destroy(a);
    feeder_loader_destroy(r);
    feeder_loader_destroy(s);
    feeder_dataset_destroy(ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("misuse");
    TCase *tc = tcase_create("misuse");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dataset_destroyed_before_its_loader);
    tcase_add_test(tc, two_loaders_share_a_dataset);
    tcase_add_test(tc, second_release_is_named);
    tcase_add_test(tc, use_after_destroy_refused_in_debug_builds);
    tcase_add_test(tc, errmsg_is_the_last_calls);
    tcase_add_test(tc, seed_drawn_from_the_system);
    tcase_add_test(tc, resume_takes_the_saved_seed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
