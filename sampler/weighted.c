/*
 * WeightedRandomSampler: with replacement, draws from Vose's alias table;
 * without, the num_samples largest Efraimidis-Spirakis keys.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/kind.h"


/* Weighted draws with replacement: one column uniform in [0, n), then its
 * coin. Columns are looked up SHUFFLE_AHEAD draws early for the same reason
 * as the shuffle's swaps. */
static void fill_alias(const feeder_sampler *s, uint64_t epoch, uint64_t *out)
{
    uint64_t n = s->n, len = s->len;
    const alias_cell *t = s->table;
    uint64_t cols[SHUFFLE_AHEAD];
    for (uint64_t i = 0; i < len && i < SHUFFLE_AHEAD; i++) {
        cols[i] = draw_below(n, s->seed, epoch, i, STREAM_DRAW);
#if defined(__GNUC__)
        __builtin_prefetch(&t[cols[i]]);
#endif
    }
    for (uint64_t i = 0; i < len; i++) {
        uint64_t col = cols[i % SHUFFLE_AHEAD];
        uint64_t k = i + SHUFFLE_AHEAD;
        if (k < len) {
            uint64_t ck = draw_below(n, s->seed, epoch, k, STREAM_DRAW);
            cols[k % SHUFFLE_AHEAD] = ck;
#if defined(__GNUC__)
            __builtin_prefetch(&t[ck]);
#endif
        }
        double u = feeder_random_uniform(s->seed, epoch, i, STREAM(STREAM_COIN));
        out[i] = u < t[col].prob ? col : t[col].alias;
    }
}

/* Efraimidis-Spirakis: item i gets the key u^(1/w), compared as log(u)/w,
 * which neither underflows nor loses the order of small weights the way the
 * power does. The len largest keys are the sample, largest first. Equal keys
 * (both -inf, for weights some 300 orders of magnitude below others) go to the
 * lower index, so the order is a function of the keys alone. */
typedef struct es_item {
    double key;
    uint64_t idx;
} es_item;

static inline int es_worse(const es_item *a, const es_item *b)
{
    return a->key < b->key || (a->key == b->key && a->idx > b->idx);
}

/* Heap with the worst item at the root: put x at `pos` and sift it down. */
static void es_sift(es_item *h, uint64_t m, uint64_t pos, es_item x)
{
    for (;;) {
        uint64_t c = 2 * pos + 1;
        if (c >= m)
            break;
        if (c + 1 < m && es_worse(&h[c + 1], &h[c]))
            c++;
        if (!es_worse(&h[c], &x))
            break;
        h[pos] = h[c];
        pos = c;
    }
    h[pos] = x;
}

static void es_heapify(es_item *h, uint64_t m)
{
    for (uint64_t i = m / 2; i-- > 0;)
        es_sift(h, m, i, h[i]);
}

/* Heapsort with the worst at the root leaves the best first. */
static void es_heapsort(es_item *a, uint64_t m)
{
    es_heapify(a, m);
    for (uint64_t end = m; end > 1; end--) {
        es_item x = a[end - 1];
        a[end - 1] = a[0];
        es_sift(a, end - 1, 0, x);
    }
}

/* Best first. Quicksort for its sequential passes over what can be 10^7
 * items (heapsort alone took seconds there, missing the cache on every
 * level), falling back to heapsort when a range stops shrinking (introsort),
 * so a pathological weight pattern costs O(n log n) still. Keys are distinct
 * once ties go by index, so the partition never sees equal elements. */
static void es_sort(es_item *a, uint64_t m, int depth)
{
    while (m > 16) {
        if (depth-- == 0) {
            es_heapsort(a, m);
            return;
        }
        /* Median of three to a[0], then Hoare's partition around it. */
        uint64_t mid = m / 2;
        es_item t;
#define ES_SWAP(x, y) (t = (x), (x) = (y), (y) = t)
        if (es_worse(&a[0], &a[mid]))
            ES_SWAP(a[0], a[mid]);
        if (es_worse(&a[mid], &a[m - 1]))
            ES_SWAP(a[mid], a[m - 1]);
        if (es_worse(&a[0], &a[mid]))
            ES_SWAP(a[0], a[mid]);
        ES_SWAP(a[0], a[mid]); /* the median is the pivot, at a[0] */
        es_item p = a[0];
        uint64_t i = 0, j = m;
        for (;;) {
            do
                i++;
            while (i < m && es_worse(&p, &a[i]));
            do
                j--;
            while (es_worse(&a[j], &p));
            if (i >= j)
                break;
            ES_SWAP(a[i], a[j]);
        }
        ES_SWAP(a[0], a[j]);
#undef ES_SWAP
        /* Recurse into the smaller side, loop on the larger. */
        if (j < m - j - 1) {
            es_sort(a, j, depth);
            a += j + 1;
            m -= j + 1;
        } else {
            es_sort(a + j + 1, m - j - 1, depth);
            m = j;
        }
    }
    for (uint64_t i = 1; i < m; i++) {
        es_item x = a[i];
        uint64_t j = i;
        for (; j > 0 && es_worse(&a[j - 1], &x); j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

static int fill_weighted(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    (void)count;
    uint64_t n = s->n, len = s->len;
    if (s->replacement) {
        fill_alias(s, epoch, out);
        return 0;
    }
    if (len > SIZE_MAX / sizeof(es_item))
        return -ENOMEM;
    es_item *h = malloc(len * sizeof(*h));
    if (!h)
        return -ENOMEM;
    /* The first len items fill the heap; after that an item enters only by
     * beating the worst kept, which, for random keys, fewer and fewer do. */
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        double w = s->weights[i];
        if (w == 0)
            continue;
        double u = feeder_random_uniform(s->seed, epoch, i, STREAM(STREAM_KEY));
        es_item x = {log1p(-u) / w, i}; /* u < 1: finite numerator, key <= 0 */
        if (m < len) {
            h[m++] = x;
            if (m == len && m < s->nonzero)
                es_heapify(h, m);
        } else if (es_worse(&h[0], &x)) {
            es_sift(h, m, 0, x);
        }
    }
    int depth = 0;
    for (uint64_t k = m; k > 1; k >>= 1)
        depth += 2;
    es_sort(h, m, depth);
    for (uint64_t i = 0; i < m; i++)
        out[i] = h[i].idx;
    free(h);
    return 0;
}

static void destroy_weighted(feeder_sampler *s)
{
    free(s->weights);
    free(s->table);
}

const feeder__sampler_kind feeder__sampler_weighted_kind = {
    .name = "weighted", .pure = 1, .fill = fill_weighted, .destroy = destroy_weighted};


/* Vose's alias table over weights already checked finite, non-negative and
 * not all zero. A column's prob holds its scaled weight while it is open. */
static int build_alias(const double *w, uint64_t n, alias_cell *t)
{
    /* Scaling by the largest weight first keeps the sum finite for any finite
     * weights (it is at most n). */
    double wmax = 0;
    uint64_t imax = 0;
    for (uint64_t i = 0; i < n; i++)
        if (w[i] > wmax) {
            wmax = w[i];
            imax = i;
        }
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += w[i] / wmax;
    double scale = (double)n / sum;
    /* One array for both work lists: small ones grow up from the front,
     * large ones down from the back. */
    uint64_t *work = malloc(n * sizeof(*work));
    if (!work)
        return -ENOMEM;
    uint64_t ns = 0, nl = 0;
    for (uint64_t i = 0; i < n; i++) {
        t[i].prob = w[i] / wmax * scale;
        t[i].alias = i;
        if (t[i].prob < 1)
            work[ns++] = i;
        else
            work[n - 1 - nl++] = i;
    }
    while (ns && nl) {
        uint64_t sm = work[--ns], lg = work[n - nl];
        nl--;
        t[sm].alias = lg;
        /* The form (p + q) - 1 loses the least (Schwarz, "Darts, dice and
         * coins"). */
        t[lg].prob = (t[lg].prob + t[sm].prob) - 1;
        if (t[lg].prob < 1)
            work[ns++] = lg;
        else
            work[n - 1 - nl++] = lg;
    }
    /* What rounding leaves over should be full columns. A column with no
     * weight left over (only by a rounding accident) must still never be
     * drawn: it points at the heaviest index instead. */
    while (nl) {
        uint64_t lg = work[n - nl--];
        t[lg].prob = 1;
    }
    while (ns) {
        uint64_t sm = work[--ns];
        if (t[sm].prob > 0) {
            t[sm].prob = 1;
        } else {
            t[sm].prob = 0;
            t[sm].alias = imax;
        }
    }
    free(work);
    return 0;
}

int feeder_sampler_weighted(const double *weights, uint64_t n, uint64_t num_samples,
                            int replacement, uint64_t seed, feeder_sampler **out)
{
    if (!weights || n == 0 || num_samples == 0 || !out)
        return FEEDER_EINVAL;
    if (n > SIZE_MAX / sizeof(double))
        return FEEDER_EOVERFLOW;
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < n; i++) {
        /* !(w >= 0) also catches NaN. */
        if (!(weights[i] >= 0) || isinf(weights[i]))
            return FEEDER_EINVAL;
        nonzero += weights[i] > 0;
    }
    if (nonzero == 0 || (!replacement && num_samples > nonzero))
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_weighted_kind, out, &s);
    if (rc)
        return rc;
    s->n = n;
    s->len = num_samples;
    s->nonzero = nonzero;
    s->replacement = replacement != 0;
    s->seed = seed;
    if (s->replacement) {
        s->table = n > SIZE_MAX / sizeof(alias_cell) ? NULL : malloc(n * sizeof(alias_cell));
        rc = s->table ? build_alias(weights, n, s->table) : -ENOMEM;
    } else {
        s->weights = malloc(n * sizeof(*s->weights));
        if (s->weights)
            memcpy(s->weights, weights, n * sizeof(*s->weights));
        rc = s->weights ? 0 : -ENOMEM;
    }
    if (rc) {
        feeder_sampler_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}
