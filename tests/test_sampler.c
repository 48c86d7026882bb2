/*
 * Samplers: exact sequences, determinism in (seed, epoch), PyTorch's
 * semantics (RandomSampler, SubsetRandomSampler, WeightedRandomSampler,
 * DistributedSampler), distributions within stated tolerances, every error
 * path, the batch count, and the counter-based generator's basic statistics.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"

/* ---- helpers ---- */

static uint64_t *fill_new(const feeder_sampler *s, uint64_t epoch, uint64_t *len)
{
    *len = feeder_sampler_len(s, epoch);
    uint64_t *v = malloc((*len ? *len : 1) * sizeof(*v));
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(feeder_sampler_fill(s, epoch, v, *len), 0);
    return v;
}

/* v[0..len) holds each of 0..n-1 exactly once (len == n). */
static int is_permutation(const uint64_t *v, uint64_t len, uint64_t n)
{
    if (len != n)
        return 0;
    unsigned char *seen = calloc(n ? n : 1, 1);
    ck_assert_ptr_nonnull(seen);
    int ok = 1;
    for (uint64_t i = 0; i < len && ok; i++) {
        if (v[i] >= n || seen[v[i]])
            ok = 0;
        else
            seen[v[i]] = 1;
    }
    free(seen);
    return ok;
}

/* No value repeats and every value is below n. */
static int all_distinct(const uint64_t *v, uint64_t len, uint64_t n)
{
    unsigned char *seen = calloc(n ? n : 1, 1);
    ck_assert_ptr_nonnull(seen);
    int ok = 1;
    for (uint64_t i = 0; i < len && ok; i++) {
        if (v[i] >= n || seen[v[i]])
            ok = 0;
        else
            seen[v[i]] = 1;
    }
    free(seen);
    return ok;
}

/* An independent reference of the documented shuffle (sampler/sampler.c):
 * forward Fisher-Yates, step i of permutation p drawing j in [i, n) under
 * feeder_random(seed, epoch, p*n + i, 2^63 + retry) by Lemire's method, here
 * written as plain threshold rejection on the 128-bit product. */
static uint64_t ref_below(uint64_t range, uint64_t seed, uint64_t epoch, uint64_t index)
{
    uint64_t threshold = (0 - range) % range;
    for (uint64_t retry = 0;; retry++) {
        __extension__ unsigned __int128 m =
            (unsigned __int128)feeder_random(seed, epoch, index, (UINT64_C(1) << 63) + retry) *
            range;
        if ((uint64_t)m >= threshold)
            return (uint64_t)(m >> 64);
    }
}

static void ref_perm(uint64_t *a, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t p)
{
    for (uint64_t i = 0; i < n; i++)
        a[i] = i;
    for (uint64_t i = 0; i + 1 < n; i++) {
        uint64_t j = i + ref_below(n - i, seed, epoch, p * n + i);
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- sequential ---- */

START_TEST(test_sequential)
{
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_sequential(9, &s), 0);
    for (uint64_t e = 0; e < 3; e++) {
        uint64_t len, *v = fill_new(s, e, &len);
        ck_assert_uint_eq(len, 9);
        for (uint64_t i = 0; i < 9; i++)
            ck_assert_uint_eq(v[i], i);
        free(v);
    }
    feeder_sampler_destroy(s);
    /* An empty sampler is a valid, empty order. */
    ck_assert_int_eq(feeder_sampler_sequential(0, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), 0);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, NULL, 0), 0);
    feeder_sampler_destroy(s);
}
END_TEST

/* ---- random ---- */

START_TEST(test_random_permutation_and_determinism)
{
    const uint64_t n = 1000;
    feeder_sampler *a, *b, *c;
    ck_assert_int_eq(feeder_sampler_random(n, 0, 0, 42, &a), 0);
    ck_assert_int_eq(feeder_sampler_random(n, 0, 0, 42, &b), 0);
    ck_assert_int_eq(feeder_sampler_random(n, 0, 0, 43, &c), 0);
    uint64_t la, lb, lc, l1, l2;
    uint64_t *va = fill_new(a, 0, &la), *vb = fill_new(b, 0, &lb), *vc = fill_new(c, 0, &lc);
    uint64_t *va1 = fill_new(a, 1, &l1), *va0 = fill_new(a, 0, &l2);
    ck_assert(is_permutation(va, la, n));
    ck_assert(is_permutation(vc, lc, n));
    ck_assert(is_permutation(va1, l1, n));
    /* Same (seed, epoch): identical, from another sampler and on a second call. */
    ck_assert_int_eq(memcmp(va, vb, n * sizeof(*va)), 0);
    ck_assert_int_eq(memcmp(va, va0, n * sizeof(*va)), 0);
    /* Other epoch, other seed: different, and not merely shifted. */
    ck_assert_int_ne(memcmp(va, va1, n * sizeof(*va)), 0);
    ck_assert_int_ne(memcmp(va, vc, n * sizeof(*va)), 0);
    uint64_t same = 0, fixed = 0;
    for (uint64_t i = 0; i < n; i++) {
        same += va[i] == va1[i];
        fixed += va[i] == i;
    }
    ck_assert_uint_lt(same, 10); /* expected 1 */
    ck_assert_uint_lt(fixed, 10);
    /* The whole permutation matches the independent reference. */
    uint64_t *ref = malloc(n * sizeof(*ref));
    ref_perm(ref, n, 42, 0, 0);
    ck_assert_int_eq(memcmp(va, ref, n * sizeof(*va)), 0);
    ref_perm(ref, n, 42, 1, 0);
    ck_assert_int_eq(memcmp(va1, ref, n * sizeof(*va)), 0);
    free(ref);
    free(va);
    free(vb);
    free(vc);
    free(va1);
    free(va0);
    feeder_sampler_destroy(a);
    feeder_sampler_destroy(b);
    feeder_sampler_destroy(c);
}
END_TEST

/* Pinned so that a change to the generator, the keying or the shuffle (which
 * would silently change every user's training order) fails here. Computed
 * once from this implementation; test_random_permutation_and_determinism
 * checks the same construction against an independent reference. */
START_TEST(test_random_golden)
{
    static const uint64_t golden_e0[12] = {9, 51, 72, 88, 31, 30, 67, 66, 15, 5, 65, 38};
    static const uint64_t golden_e5[12] = {66, 60, 41, 72, 12, 26, 0, 73, 7, 63, 70, 69};
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_random(100, 0, 0, 1234, &s), 0);
    uint64_t len, *v = fill_new(s, 0, &len);
    ck_assert(is_permutation(v, len, 100));
    for (int i = 0; i < 12; i++)
        ck_assert_uint_eq(v[i], golden_e0[i]);
    free(v);
    v = fill_new(s, 5, &len);
    ck_assert(is_permutation(v, len, 100));
    for (int i = 0; i < 12; i++)
        ck_assert_uint_eq(v[i], golden_e5[i]);
    free(v);
    feeder_sampler_destroy(s);
}
END_TEST

START_TEST(test_random_num_samples)
{
    const uint64_t n = 10;
    feeder_sampler *s;
    /* More than n: two whole permutations, then the first 5 of a third, each
     * keyed apart (PyTorch's RandomSampler). */
    ck_assert_int_eq(feeder_sampler_random(n, 0, 25, 9, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), 25);
    uint64_t len, *v = fill_new(s, 3, &len);
    ck_assert(is_permutation(v, 10, n));
    ck_assert(is_permutation(v + 10, 10, n));
    ck_assert(all_distinct(v + 20, 5, n));
    ck_assert_int_ne(memcmp(v, v + 10, 10 * sizeof(*v)), 0);
    uint64_t ref[10];
    for (uint64_t p = 0; p < 3; p++) {
        ref_perm(ref, n, 9, 3, p);
        ck_assert_int_eq(memcmp(v + p * n, ref, (p < 2 ? 10 : 5) * sizeof(*v)), 0);
    }
    free(v);
    feeder_sampler_destroy(s);

    /* An exact multiple. */
    ck_assert_int_eq(feeder_sampler_random(n, 0, 30, 9, &s), 0);
    v = fill_new(s, 3, &len);
    for (uint64_t p = 0; p < 3; p++) {
        ref_perm(ref, n, 9, 3, p);
        ck_assert_int_eq(memcmp(v + p * n, ref, 10 * sizeof(*v)), 0);
    }
    free(v);
    feeder_sampler_destroy(s);

    /* Fewer than n: the first num_samples of the epoch's permutation
     * (randperm(n)[:num_samples]). */
    feeder_sampler *full;
    ck_assert_int_eq(feeder_sampler_random(1000, 0, 0, 9, &full), 0);
    ck_assert_int_eq(feeder_sampler_random(1000, 0, 37, 9, &s), 0);
    uint64_t lf, *vf = fill_new(full, 2, &lf);
    v = fill_new(s, 2, &len);
    ck_assert_uint_eq(len, 37);
    ck_assert_int_eq(memcmp(v, vf, 37 * sizeof(*v)), 0);
    free(v);
    free(vf);
    feeder_sampler_destroy(s);
    feeder_sampler_destroy(full);

    /* n == 1 and n == 2 edge cases. */
    ck_assert_int_eq(feeder_sampler_random(1, 0, 3, 9, &s), 0);
    v = fill_new(s, 0, &len);
    ck_assert_uint_eq(v[0] + v[1] + v[2], 0);
    free(v);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(feeder_sampler_random(2, 0, 5, 9, &s), 0);
    v = fill_new(s, 0, &len);
    ck_assert(is_permutation(v, 2, 2));
    ck_assert(is_permutation(v + 2, 2, 2));
    ck_assert_uint_lt(v[4], 2);
    free(v);
    feeder_sampler_destroy(s);
}
END_TEST

/* Over many epochs every value of a small permutation lands in every position
 * about equally often. */
START_TEST(test_random_permutation_uniform)
{
    enum { N = 5, EPOCHS = 60000 };
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_random(N, 0, 0, 77, &s), 0);
    uint64_t count[N][N] = {{0}};
    for (uint64_t e = 0; e < EPOCHS; e++) {
        uint64_t v[N];
        ck_assert_int_eq(feeder_sampler_fill(s, e, v, N), 0);
        for (int i = 0; i < N; i++)
            count[i][v[i]]++;
    }
    /* 25 cells, expected 12000 each, sd ~98: 600 is ~6 sd. */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            ck_assert_msg(fabs((double)count[i][j] - EPOCHS / N) < 600,
                          "value %d at position %d: %llu times", j, i,
                          (unsigned long long)count[i][j]);
    feeder_sampler_destroy(s);
}
END_TEST

START_TEST(test_random_replacement)
{
    enum { N = 10, DRAWS = 100000 };
    feeder_sampler *s, *s2;
    ck_assert_int_eq(feeder_sampler_random(N, 1, DRAWS, 5, &s), 0);
    ck_assert_int_eq(feeder_sampler_random(N, 1, DRAWS, 5, &s2), 0);
    uint64_t len, *v = fill_new(s, 0, &len), l2, *v2 = fill_new(s2, 0, &l2), l3,
                  *v3 = fill_new(s, 1, &l3);
    ck_assert_uint_eq(len, DRAWS);
    ck_assert_int_eq(memcmp(v, v2, DRAWS * sizeof(*v)), 0);
    ck_assert_int_ne(memcmp(v, v3, DRAWS * sizeof(*v)), 0);
    uint64_t count[N] = {0};
    for (uint64_t i = 0; i < len; i++) {
        ck_assert_uint_lt(v[i], N);
        count[v[i]]++;
    }
    /* Chi-square with 9 degrees of freedom: mean 9; 40 has p ~ 5e-6. */
    double chi2 = 0, expect = (double)DRAWS / N;
    for (int i = 0; i < N; i++)
        chi2 += ((double)count[i] - expect) * ((double)count[i] - expect) / expect;
    ck_assert_msg(chi2 < 40, "chi-square %g", chi2);
    free(v);
    free(v2);
    free(v3);
    feeder_sampler_destroy(s);
    feeder_sampler_destroy(s2);

    /* num_samples 0 means n. */
    ck_assert_int_eq(feeder_sampler_random(N, 1, 0, 5, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), N);
    feeder_sampler_destroy(s);
}
END_TEST

/* n = 2/3 of 2^64: a modulo reduction would put 2/3 of the draws in the
 * lower half, a multiply without rejection 2/3 of them on even values; an
 * unbiased draw puts half in each. It also makes a third of the first draws
 * retry, which exercises the retry counters. */
START_TEST(test_random_replacement_unbiased_huge_n)
{
    enum { DRAWS = 60000 };
    const uint64_t n = UINT64_C(0xAAAAAAAAAAAAAAAA);
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_random(n, 1, DRAWS, 3, &s), 0);
    uint64_t len, *v = fill_new(s, 0, &len);
    uint64_t low = 0, even = 0;
    for (uint64_t i = 0; i < len; i++) {
        ck_assert_uint_lt(v[i], n);
        low += v[i] < n / 2;
        even += v[i] % 2 == 0;
    }
    /* sd of the fraction: 0.002; bias would show as 0.667. */
    ck_assert_msg(fabs((double)low / DRAWS - 0.5) < 0.015, "low %llu", (unsigned long long)low);
    ck_assert_msg(fabs((double)even / DRAWS - 0.5) < 0.015, "even %llu", (unsigned long long)even);
    free(v);
    feeder_sampler_destroy(s);
}
END_TEST

/* The loader fills 10^7-sample epochs; check a large one is a permutation. */
START_TEST(test_random_large)
{
    const uint64_t n = 2000003;
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_random(n, 0, 0, 11, &s), 0);
    uint64_t len, *v = fill_new(s, 4, &len);
    ck_assert(is_permutation(v, len, n));
    free(v);
    feeder_sampler_destroy(s);
}
END_TEST

/* ---- subset ---- */

START_TEST(test_subset)
{
    uint64_t idx[] = {50, 3, 3, 17, 99, 0, 8};
    const uint64_t k = sizeof(idx) / sizeof(idx[0]);
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_subset(idx, k, 0, 0, &s), 0);
    /* The indices are copied. */
    idx[0] = 1000;
    uint64_t len, *v = fill_new(s, 7, &len);
    ck_assert_uint_eq(len, k);
    uint64_t want[] = {50, 3, 3, 17, 99, 0, 8};
    ck_assert_int_eq(memcmp(v, want, sizeof(want)), 0);
    free(v);
    feeder_sampler_destroy(s);
    idx[0] = 50;

    /* Shuffled: SubsetRandomSampler's indices[randperm(k)], the permutation
     * being the random sampler's for (seed, epoch). */
    feeder_sampler *perm;
    ck_assert_int_eq(feeder_sampler_subset(idx, k, 1, 21, &s), 0);
    ck_assert_int_eq(feeder_sampler_random(k, 0, 0, 21, &perm), 0);
    int differs = 0;
    uint64_t *first = NULL;
    for (uint64_t e = 0; e < 5; e++) {
        uint64_t lp, *p = fill_new(perm, e, &lp);
        v = fill_new(s, e, &len);
        ck_assert_uint_eq(len, k);
        for (uint64_t i = 0; i < k; i++)
            ck_assert_uint_eq(v[i], idx[p[i]]);
        uint64_t again[7];
        ck_assert_int_eq(feeder_sampler_fill(s, e, again, k), 0);
        ck_assert_int_eq(memcmp(v, again, sizeof(again)), 0);
        if (!first)
            first = v;
        else {
            differs |= memcmp(first, v, k * sizeof(*v)) != 0;
            free(v);
        }
        free(p);
    }
    ck_assert(differs);
    free(first);
    feeder_sampler_destroy(s);
    feeder_sampler_destroy(perm);

    /* Empty subset, NULL indices: an empty order. */
    ck_assert_int_eq(feeder_sampler_subset(NULL, 0, 1, 0, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), 0);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, NULL, 0), 0);
    feeder_sampler_destroy(s);
}
END_TEST

/* ---- weighted ---- */

START_TEST(test_weighted_replacement_frequencies)
{
    enum { N = 6, DRAWS = 200000 };
    const double w[N] = {1, 2, 3, 0, 4, 0.5};
    const double sum = 10.5;
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_weighted(w, N, DRAWS, 1, 8, &s), 0);
    uint64_t len, *v = fill_new(s, 0, &len);
    ck_assert_uint_eq(len, DRAWS);
    uint64_t count[N] = {0};
    for (uint64_t i = 0; i < len; i++) {
        ck_assert_uint_lt(v[i], N);
        count[v[i]]++;
    }
    ck_assert_uint_eq(count[3], 0);
    /* Tolerance 0.005 absolute on each frequency: sd is at most 0.0011. */
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs((double)count[i] / DRAWS - w[i] / sum) < 0.005,
                      "index %d: %g, want %g", i, (double)count[i] / DRAWS, w[i] / sum);
    uint64_t l1, *v1 = fill_new(s, 1, &l1), l0, *v0 = fill_new(s, 0, &l0);
    ck_assert_int_ne(memcmp(v, v1, DRAWS * sizeof(*v)), 0);
    ck_assert_int_eq(memcmp(v, v0, DRAWS * sizeof(*v)), 0);
    free(v);
    free(v1);
    free(v0);
    feeder_sampler_destroy(s);
}
END_TEST

/* Mostly zeros, wildly different scales, huge values: zero weights are never
 * drawn and the sum does not overflow. */
START_TEST(test_weighted_replacement_zeros_and_scales)
{
    enum { N = 1000, DRAWS = 200000 };
    double w[N];
    for (int i = 0; i < N; i++)
        w[i] = i % 7 == 0 ? 1e300 : 0;
    w[1] = 1e-300; /* positive, but never drawn in practice */
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_weighted(w, N, DRAWS, 1, 8, &s), 0);
    uint64_t len, *v = fill_new(s, 2, &len);
    uint64_t count[N] = {0};
    for (uint64_t i = 0; i < len; i++)
        count[v[i]]++;
    const int nz = (N + 6) / 7;
    for (int i = 0; i < N; i++) {
        if (i % 7)
            ck_assert_msg(count[i] == 0, "zero-weight index %d drawn %llu times", i,
                          (unsigned long long)count[i]);
        else
            ck_assert(fabs((double)count[i] - (double)DRAWS / nz) < 0.3 * DRAWS / nz);
    }
    free(v);
    feeder_sampler_destroy(s);

    /* A single non-zero weight. */
    double one[5] = {0, 0, 0, 2.5, 0};
    ck_assert_int_eq(feeder_sampler_weighted(one, 5, 100, 1, 8, &s), 0);
    v = fill_new(s, 0, &len);
    for (uint64_t i = 0; i < len; i++)
        ck_assert_uint_eq(v[i], 3);
    free(v);
    feeder_sampler_destroy(s);
}
END_TEST

START_TEST(test_weighted_no_replacement)
{
    enum { N = 8 };
    const double w[N] = {1, 0, 2, 3, 0, 4, 1e-3, 5};
    feeder_sampler *s;
    /* All six non-zero ones: a permutation of them, never a zero weight. */
    ck_assert_int_eq(feeder_sampler_weighted(w, N, 6, 0, 13, &s), 0);
    for (uint64_t e = 0; e < 50; e++) {
        uint64_t len, *v = fill_new(s, e, &len);
        ck_assert_uint_eq(len, 6);
        ck_assert(all_distinct(v, len, N));
        for (uint64_t i = 0; i < len; i++)
            ck_assert(w[v[i]] > 0);
        free(v);
    }
    feeder_sampler_destroy(s);

    /* The first pick is index i with probability w[i] / sum, the second
     * follows sampling without replacement: P(second = j | first = i) =
     * w[j] / (sum - w[i]). Over 40000 epochs, tolerance 0.012 (sd <= 0.0025). */
    enum { E = 40000 };
    const double w4[4] = {1, 2, 3, 4};
    ck_assert_int_eq(feeder_sampler_weighted(w4, 4, 2, 0, 17, &s), 0);
    uint64_t first[4] = {0}, second[4] = {0};
    for (uint64_t e = 0; e < E; e++) {
        uint64_t v[2];
        ck_assert_int_eq(feeder_sampler_fill(s, e, v, 2), 0);
        ck_assert_uint_ne(v[0], v[1]);
        first[v[0]]++;
        second[v[1]]++;
    }
    for (int i = 0; i < 4; i++) {
        double p1 = w4[i] / 10, p2 = 0;
        for (int j = 0; j < 4; j++)
            if (j != i)
                p2 += w4[j] / 10 * w4[i] / (10 - w4[j]);
        ck_assert_msg(fabs((double)first[i] / E - p1) < 0.012, "first %d: %g want %g", i,
                      (double)first[i] / E, p1);
        ck_assert_msg(fabs((double)second[i] / E - p2) < 0.012, "second %d: %g want %g", i,
                      (double)second[i] / E, p2);
    }
    feeder_sampler_destroy(s);

    /* Large n, a few picks. */
    enum { BIG = 100000 };
    double *wb = malloc(BIG * sizeof(*wb));
    for (int i = 0; i < BIG; i++)
        wb[i] = i % 3 ? 1.0 + i % 5 : 0;
    ck_assert_int_eq(feeder_sampler_weighted(wb, BIG, 5000, 0, 1, &s), 0);
    uint64_t len, *v = fill_new(s, 0, &len);
    ck_assert(all_distinct(v, len, BIG));
    for (uint64_t i = 0; i < len; i++)
        ck_assert(wb[v[i]] > 0);
    free(v);
    feeder_sampler_destroy(s);
    free(wb);
}
END_TEST

/* The documented construction, independently: item i's key is
 * log1p(-u) / w[i], u = feeder_random_uniform(seed, epoch, i, 2^63 + 3 * 2^32),
 * and the sample is the k largest keys, largest first, ties to the lower index. */
typedef struct ref_key {
    double key;
    uint64_t idx;
} ref_key;

static int ref_key_cmp(const void *a, const void *b)
{
    const ref_key *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static void check_es_reference(const double *w, uint64_t n, uint64_t k, uint64_t seed,
                               uint64_t epoch)
{
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_weighted(w, n, k, 0, seed, &s), 0);
    uint64_t len, *v = fill_new(s, epoch, &len);
    ck_assert_uint_eq(len, k);
    ref_key *r = malloc(n * sizeof(*r));
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (w[i] == 0)
            continue;
        double u = feeder_random_uniform(seed, epoch, i, (UINT64_C(1) << 63) + (UINT64_C(3) << 32));
        r[m++] = (ref_key){log1p(-u) / w[i], i};
    }
    qsort(r, m, sizeof(*r), ref_key_cmp);
    for (uint64_t i = 0; i < k; i++)
        ck_assert_msg(v[i] == r[i].idx, "n %llu k %llu position %llu: %llu, want %llu",
                      (unsigned long long)n, (unsigned long long)k, (unsigned long long)i,
                      (unsigned long long)v[i], (unsigned long long)r[i].idx);
    free(r);
    free(v);
    feeder_sampler_destroy(s);
}

START_TEST(test_weighted_no_replacement_order)
{
    enum { N = 3000 };
    double *w = malloc(N * sizeof(*w));
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < N; i++) {
        w[i] = i % 4 == 1 ? 0 : 0.1 + (double)(feeder_random(1, 0, i, 0) % 1000);
        nonzero += w[i] > 0;
    }
    /* All of them (the sort alone), many, a few (the heap), one. */
    check_es_reference(w, N, nonzero, 4, 0);
    check_es_reference(w, N, nonzero, 4, 1);
    check_es_reference(w, N, 1000, 4, 0);
    check_es_reference(w, N, 20, 4, 2);
    check_es_reference(w, N, 1, 4, 3);
    /* Subnormal next to huge weights: their keys all overflow to -inf, and
     * ties go by index. */
    for (uint64_t i = 0; i < N; i++)
        w[i] = i % 10 == 0 ? 1e300 : 5e-324;
    check_es_reference(w, N, N, 4, 0);
    check_es_reference(w, N, 500, 4, 0);
    free(w);
}
END_TEST

/* ---- distributed ---- */

/* PyTorch's DistributedSampler.__iter__ over `order` (length n), written the
 * way it is in torch/utils/data/distributed.py. Returns this rank's count. */
static uint64_t ref_distributed(const uint64_t *order, uint64_t n, uint64_t rank, uint64_t world,
                                int drop_last, uint64_t *out)
{
    uint64_t num_samples;
    if (drop_last && n % world != 0) {
        /* math.ceil((n - world) / world), as a real number */
        double x = ((double)n - (double)world) / (double)world;
        num_samples = (uint64_t)fmax(0, ceil(x));
    } else {
        num_samples = (n + world - 1) / world;
    }
    uint64_t total = num_samples * world;
    uint64_t *ind = malloc((n + total + 1) * sizeof(*ind));
    memcpy(ind, order, n * sizeof(*ind));
    uint64_t m = n;
    if (!drop_last) {
        uint64_t pad = total - n;
        if (pad <= n) {
            memcpy(ind + m, order, pad * sizeof(*ind)); /* indices += indices[:pad] */
            m += pad;
        } else {
            /* indices += (indices * ceil(pad / n))[:pad] */
            uint64_t reps = (pad + n - 1) / n;
            for (uint64_t r = 0; r < reps; r++)
                for (uint64_t i = 0; i < n && m < n + pad; i++)
                    ind[m++] = order[i];
        }
    } else {
        m = total; /* indices[:total_size] */
    }
    ck_assert_uint_eq(m, total);
    uint64_t c = 0;
    for (uint64_t k = rank; k < total; k += world) /* indices[rank:total:world] */
        out[c++] = ind[k];
    free(ind);
    ck_assert_uint_eq(c, num_samples);
    return c;
}

START_TEST(test_distributed)
{
    static const uint64_t cases[][2] = {
        {10, 1}, {10, 2}, {10, 3}, {10, 4}, {12, 4}, {3, 4}, {1, 8}, {5, 16},
        {7, 7},  {17, 5}, {100, 7}, {2, 3}, {1000, 9}, {6, 4}, {0, 3},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint64_t n = cases[c][0];
        uint32_t world = (uint32_t)cases[c][1];
        for (int shuffle = 0; shuffle <= 1; shuffle++) {
            for (int drop = 0; drop <= 1; drop++) {
                uint64_t epoch = 3;
                /* The whole order before padding: 0..n-1, or the random
                 * sampler's permutation for (seed, epoch). */
                uint64_t *order = malloc((n ? n : 1) * sizeof(*order));
                if (shuffle && n) {
                    feeder_sampler *r;
                    ck_assert_int_eq(feeder_sampler_random(n, 0, 0, 99, &r), 0);
                    ck_assert_int_eq(feeder_sampler_fill(r, epoch, order, n), 0);
                    feeder_sampler_destroy(r);
                } else {
                    for (uint64_t i = 0; i < n; i++)
                        order[i] = i;
                }
                uint64_t per = drop ? n / world : (n + world - 1) / world;
                uint64_t total = per * world;
                uint64_t *seen = calloc(n ? n : 1, sizeof(*seen));
                uint64_t *want = malloc((per + 1) * sizeof(*want));
                for (uint32_t r = 0; r < world; r++) {
                    feeder_sampler *s;
                    ck_assert_int_eq(
                        feeder_sampler_distributed(n, r, world, shuffle, 99, drop, &s), 0);
                    uint64_t len, *v = fill_new(s, epoch, &len);
                    /* Equal counts, so equal batch counts on every rank. */
                    ck_assert_uint_eq(len, per);
                    for (uint32_t b = 1; b <= 7; b++)
                        for (int dl = 0; dl <= 1; dl++)
                            ck_assert_uint_eq(feeder_batch_count(len, b, dl),
                                              feeder_batch_count(per, b, dl));
                    uint64_t wl = ref_distributed(order, n, r, world, drop, want);
                    ck_assert_uint_eq(wl, len);
                    for (uint64_t i = 0; i < len; i++) {
                        ck_assert_msg(v[i] == want[i],
                                      "n %llu world %u rank %u shuffle %d drop %d pos %llu",
                                      (unsigned long long)n, world, r, shuffle, drop,
                                      (unsigned long long)i);
                        seen[v[i]]++;
                    }
                    free(v);
                    feeder_sampler_destroy(s);
                }
                /* Coverage, independent of the reference: dropping, every
                 * index at most once and exactly `total` of them; padding,
                 * every index at least once and the multiset of the padded
                 * order order[k % n], k < total. */
                uint64_t sum = 0;
                for (uint64_t i = 0; i < n; i++) {
                    sum += seen[i];
                    if (drop) {
                        ck_assert_uint_le(seen[i], 1);
                    } else {
                        uint64_t pos = 0;
                        while (order[pos] != i)
                            pos++;
                        uint64_t expect = total / n + (pos < total % n);
                        ck_assert_uint_eq(seen[i], expect);
                    }
                }
                ck_assert_uint_eq(sum, total);
                if (drop && n % world == 0)
                    for (uint64_t i = 0; i < n; i++)
                        ck_assert_uint_eq(seen[i], 1);
                /* Dropping takes the head of the order: the tail is missing. */
                if (drop)
                    for (uint64_t k = 0; k < n; k++)
                        ck_assert_uint_eq(seen[order[k]], k < total);
                free(seen);
                free(want);
                free(order);
            }
        }
    }
}
END_TEST

START_TEST(test_distributed_epochs_and_seeds)
{
    feeder_sampler *a, *b;
    ck_assert_int_eq(feeder_sampler_distributed(1000, 1, 4, 1, 5, 0, &a), 0);
    ck_assert_int_eq(feeder_sampler_distributed(1000, 1, 4, 1, 6, 0, &b), 0);
    uint64_t l, *e0 = fill_new(a, 0, &l), *e1 = fill_new(a, 1, &l), *e0b = fill_new(a, 0, &l),
                *s6 = fill_new(b, 0, &l);
    ck_assert_int_eq(memcmp(e0, e0b, l * sizeof(*e0)), 0);
    ck_assert_int_ne(memcmp(e0, e1, l * sizeof(*e0)), 0);
    ck_assert_int_ne(memcmp(e0, s6, l * sizeof(*e0)), 0);
    free(e0);
    free(e1);
    free(e0b);
    free(s6);
    feeder_sampler_destroy(a);
    feeder_sampler_destroy(b);
}
END_TEST

/* ---- user sampler ---- */

static int user_destroyed;

typedef struct user_sampler {
    uint64_t base;
    int fail;
} user_sampler;

static uint64_t us_len(void *u, uint64_t epoch)
{
    (void)u;
    return 3 + epoch;
}

static int us_fill(void *u, uint64_t epoch, uint64_t *out, uint64_t count)
{
    user_sampler *us = u;
    if (us->fail)
        return us->fail;
    for (uint64_t i = 0; i < count; i++)
        out[i] = us->base + epoch * 100 + i;
    return 0;
}

static void us_destroy(void *u)
{
    (void)u;
    user_destroyed++;
}

START_TEST(test_user_sampler)
{
    user_sampler us = {.base = 7};
    feeder_sampler_callbacks cb = {.len = us_len, .fill = us_fill, .destroy = us_destroy};
    feeder_sampler *s;
    ck_assert_int_eq(feeder_sampler_create(&cb, &us, &s), 0);
    ck_assert_uint_eq(feeder_sampler_len(s, 0), 3);
    ck_assert_uint_eq(feeder_sampler_len(s, 2), 5);
    uint64_t v[8];
    ck_assert_int_eq(feeder_sampler_fill(s, 2, v, 5), 0);
    for (uint64_t i = 0; i < 5; i++)
        ck_assert_uint_eq(v[i], 7 + 200 + i);
    /* The count must be the epoch's length. */
    ck_assert_int_eq(feeder_sampler_fill(s, 2, v, 4), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_fill(s, 2, v, 6), FEEDER_EINVAL);
    /* Errors pass through; a positive return is not a status. */
    us.fail = -EIO;
    ck_assert_int_eq(feeder_sampler_fill(s, 0, v, 3), -EIO);
    us.fail = 3;
    ck_assert_int_eq(feeder_sampler_fill(s, 0, v, 3), FEEDER_ECALLBACK);
    ck_assert_int_eq(user_destroyed, 0);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(user_destroyed, 1);

    /* destroy is optional. */
    cb.destroy = NULL;
    ck_assert_int_eq(feeder_sampler_create(&cb, &us, &s), 0);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(user_destroyed, 1);
}
END_TEST

/* ---- errors ---- */

START_TEST(test_errors)
{
    feeder_sampler *const sentinel = (feeder_sampler *)&user_destroyed;
    feeder_sampler *s = sentinel;
    const double nan_w[3] = {1, NAN, 1}, inf_w[3] = {1, INFINITY, 1}, neg_w[3] = {1, -1, 1},
                 zero_w[3] = {0, 0, 0}, ok_w[4] = {1, 0, 2, 0}, negzero_w[2] = {-0.0, 1};
    const uint64_t idx[2] = {1, 2};
    feeder_sampler_callbacks cb = {.len = us_len, .fill = us_fill};

    /* NULL out. */
    ck_assert_int_eq(feeder_sampler_sequential(3, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_random(3, 0, 0, 0, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_subset(idx, 2, 0, 0, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 4, 1, 1, 0, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_distributed(3, 0, 1, 0, 0, 0, NULL), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_create(&cb, NULL, NULL), FEEDER_EINVAL);

    /* random: nothing to draw from. */
    ck_assert_int_eq(feeder_sampler_random(0, 0, 0, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_random(0, 1, 5, 0, &s), FEEDER_EINVAL);
    /* subset: NULL indices with a count. */
    ck_assert_int_eq(feeder_sampler_subset(NULL, 2, 0, 0, &s), FEEDER_EINVAL);
    /* weighted. */
    ck_assert_int_eq(feeder_sampler_weighted(NULL, 3, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 0, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 4, 0, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(nan_w, 3, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(inf_w, 3, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(neg_w, 3, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(zero_w, 3, 1, 1, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_weighted(zero_w, 3, 1, 0, 0, &s), FEEDER_EINVAL);
    /* Without replacement, more than the non-zero weights. */
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 4, 3, 0, 0, &s), FEEDER_EINVAL);
    /* distributed. */
    ck_assert_int_eq(feeder_sampler_distributed(10, 0, 0, 0, 0, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_distributed(10, 4, 4, 0, 0, 0, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_distributed(10, 9, 4, 1, 0, 1, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_distributed(UINT64_MAX, 1, 2, 0, 0, 0, &s), FEEDER_EOVERFLOW);
    /* user: missing callbacks. */
    feeder_sampler_callbacks no_len = {.fill = us_fill}, no_fill = {.len = us_len};
    ck_assert_int_eq(feeder_sampler_create(NULL, NULL, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_create(&no_len, NULL, &s), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_create(&no_fill, NULL, &s), FEEDER_EINVAL);
    /* *out untouched by every failure. */
    ck_assert_ptr_eq(s, sentinel);

    /* Accepted edge cases: limits that are just valid. */
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 4, 2, 0, 0, &s), 0);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(feeder_sampler_weighted(ok_w, 4, 50, 1, 0, &s), 0);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(feeder_sampler_weighted(negzero_w, 2, 1, 0, 0, &s), 0);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(feeder_sampler_distributed(10, 3, 4, 0, 0, 1, &s), 0);
    feeder_sampler_destroy(s);

    /* fill: wrong count, NULL out, NULL sampler. */
    uint64_t v[16];
    ck_assert_int_eq(feeder_sampler_sequential(5, &s), 0);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, v, 4), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, v, 6), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, NULL, 5), FEEDER_EINVAL);
    ck_assert_int_eq(feeder_sampler_fill(NULL, 0, v, 0), FEEDER_EINVAL);
    feeder_sampler_destroy(s);
    ck_assert_int_eq(feeder_sampler_random(5, 0, 8, 0, &s), 0);
    ck_assert_int_eq(feeder_sampler_fill(s, 0, v, 5), FEEDER_EINVAL);
    feeder_sampler_destroy(s);
    ck_assert_uint_eq(feeder_sampler_len(NULL, 0), 0);
    feeder_sampler_destroy(NULL);
}
END_TEST

/* ---- batch count ---- */

START_TEST(test_batch_count)
{
    static const struct {
        uint64_t len;
        uint32_t batch;
        int drop;
        uint64_t want;
    } t[] = {
        {0, 4, 0, 0},   {0, 4, 1, 0},   {1, 4, 0, 1},       {1, 4, 1, 0},
        {4, 4, 0, 1},   {4, 4, 1, 1},   {5, 4, 0, 2},       {5, 4, 1, 1},
        {23, 4, 0, 6},  {23, 4, 1, 5},  {24, 4, 0, 6},      {24, 4, 1, 6},
        {7, 1, 0, 7},   {7, 1, 1, 7},   {3, 10, 0, 1},      {3, 10, 1, 0},
        {10, 0, 0, 0},  {10, 0, 1, 0},  {UINT64_MAX, 1, 0, UINT64_MAX},
        {UINT64_MAX, 2, 0, UINT64_MAX / 2 + 1},             {UINT64_MAX, 2, 1, UINT64_MAX / 2},
        {UINT64_MAX, UINT32_MAX, 0, UINT64_MAX / UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        ck_assert_msg(feeder_batch_count(t[i].len, t[i].batch, t[i].drop) == t[i].want,
                      "row %zu", i);
}
END_TEST

/* ---- the generator ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

START_TEST(test_random_uniform_stats)
{
    enum { N = 100000 };
    double *u = malloc(N * sizeof(*u));
    uint64_t *bits = malloc(N * sizeof(*bits));
    double sum = 0, sum2 = 0;
    /* Distinct counters along every axis of the key. */
    for (uint64_t i = 0; i < N; i++) {
        uint64_t seed = 5, epoch = i % 3, index = i / 3 % 1000, ctr = i / 3000;
        u[i] = feeder_random_uniform(seed, epoch, index, ctr);
        bits[i] = feeder_random(seed, epoch, index, ctr);
        ck_assert(u[i] >= 0 && u[i] < 1);
        ck_assert(u[i] == (double)(bits[i] >> 11) * 0x1.0p-53);
        sum += u[i];
        sum2 += u[i] * u[i];
    }
    double mean = sum / N, var = sum2 / N - mean * mean;
    /* sd of the mean: 0.0009; variance 1/12. */
    ck_assert_msg(fabs(mean - 0.5) < 0.005, "mean %g", mean);
    ck_assert_msg(fabs(var - 1.0 / 12) < 0.003, "variance %g", var);
    qsort(bits, N, sizeof(*bits), cmp_u64);
    for (uint64_t i = 1; i < N; i++)
        ck_assert_msg(bits[i] != bits[i - 1], "a repeated 64-bit output");
    qsort(u, N, sizeof(*u), cmp_double);
    for (uint64_t i = 1; i < N; i++)
        ck_assert_msg(u[i] != u[i - 1], "a repeated uniform");
    /* Every bit is set about half the time. */
    for (int b = 0; b < 64; b++) {
        uint64_t ones = 0;
        for (uint64_t i = 0; i < N; i++)
            ones += bits[i] >> b & 1;
        ck_assert_msg(fabs((double)ones / N - 0.5) < 0.01, "bit %d: %llu", b,
                      (unsigned long long)ones);
    }
    /* Pure: the same key, the same value. */
    ck_assert_uint_eq(feeder_random(1, 2, 3, 4), feeder_random(1, 2, 3, 4));
    ck_assert_uint_ne(feeder_random(1, 2, 3, 4), feeder_random(1, 2, 3, 5));
    ck_assert_uint_ne(feeder_random(1, 2, 3, 4), feeder_random(1, 3, 3, 4));
    ck_assert_uint_ne(feeder_random(1, 2, 3, 4), feeder_random(2, 2, 3, 4));
    free(u);
    free(bits);
}
END_TEST

static Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampler");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sequential);
    tcase_add_test(tc, test_random_permutation_and_determinism);
    tcase_add_test(tc, test_random_golden);
    tcase_add_test(tc, test_random_num_samples);
    tcase_add_test(tc, test_random_permutation_uniform);
    tcase_add_test(tc, test_random_replacement);
    tcase_add_test(tc, test_random_replacement_unbiased_huge_n);
    tcase_add_test(tc, test_random_large);
    tcase_add_test(tc, test_subset);
    tcase_add_test(tc, test_weighted_replacement_frequencies);
    tcase_add_test(tc, test_weighted_replacement_zeros_and_scales);
    tcase_add_test(tc, test_weighted_no_replacement);
    tcase_add_test(tc, test_weighted_no_replacement_order);
    tcase_add_test(tc, test_distributed);
    tcase_add_test(tc, test_distributed_epochs_and_seeds);
    tcase_add_test(tc, test_user_sampler);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_batch_count);
    tcase_add_test(tc, test_random_uniform_stats);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sampler_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
