/*
 * Samplers: the epoch's order of dataset indices, as a pure function of the
 * sampler's parameters and the epoch (invariant 1).
 *
 * Every random choice comes from feeder_random(seed, epoch, index, counter)
 * with the counter in the sampler's own range, STREAM(s) + retry, which has
 * the top bit set. Transforms and user datasets draw with small counters
 * under (seed, epoch, sample index), and the loader hands samplers and
 * transforms the same seed: with counter 0 here, the draw that picks the
 * sample for shuffle position i would be the very draw that sets sample i's
 * crop, coupling one sample's augmentation to another's place in the order.
 *
 * Keys, for a sampler with seed s in epoch e:
 *   shuffle (random, subset, distributed): permutation p of n elements, step i
 *     of the forward Fisher-Yates draws under index p*n + i, STREAM_SHUFFLE;
 *   draws with replacement (random, weighted): output position i, STREAM_DRAW,
 *     and for the alias table's coin STREAM_COIN;
 *   weighted without replacement: the key of item i under index i, STREAM_KEY;
 *   shards: the shard permutation as a shuffle (permutation 0 of nshards),
 *     then the draw from the window for output position i of the rank's
 *     stream under index i, STREAM_WINDOW.
 * Bounded integers use Lemire's multiply-and-reject, the retries taking the
 * next counters, so they are exactly uniform and still pure.
 *
 * fill() writes straight into the caller's array and allocates only where the
 * result is shorter than the population it is drawn from (a prefix of a
 * permutation of n; one rank's share of it), and the key heap of weighted
 * sampling without replacement.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"
#include "loader/host.h"

enum {
    SAMPLER_SEQUENTIAL = 1,
    SAMPLER_RANDOM = 2,
    SAMPLER_SUBSET = 3,
    SAMPLER_WEIGHTED = 4,
    SAMPLER_DISTRIBUTED = 5,
    SAMPLER_USER = 6,
    SAMPLER_SHARDS = 7,
    SAMPLER_BATCHES = 8
};

enum { STREAM_SHUFFLE = 0, STREAM_DRAW = 1, STREAM_COIN = 2, STREAM_KEY = 3, STREAM_WINDOW = 4 };
#define STREAM(s) ((UINT64_C(1) << 63) | ((uint64_t)(s) << 32))

/* One column of the alias table: its own index is drawn when the coin falls
 * below prob, `alias` otherwise. Together so a draw misses the cache once. */
typedef struct alias_cell {
    double prob;
    uint64_t alias;
} alias_cell;

struct feeder_sampler {
    int kind;
    uint64_t n;    /* population: indices are drawn from 0..n-1 (subset: count) */
    uint64_t len;  /* indices per epoch (all kinds but user) */
    uint64_t seed;
    int replacement;
    int shuffle;
    uint32_t rank, world;
    uint64_t *indices; /* subset: the caller's indices */
    double *weights;   /* weighted without replacement: the caller's weights */
    uint64_t nonzero;  /* weighted: how many of them are not zero */
    alias_cell *table; /* weighted with replacement: Vose's alias table */
    feeder_sampler_callbacks cb;
    feeder_batch_sampler_callbacks bcb; /* SAMPLER_BATCHES */
    void *user;
    uint64_t *shard_first; /* shards: nshards + 1 running counts */
    uint32_t nshards, window;
};

/* ---- draws ---- */

static inline uint64_t mul_hi(uint64_t a, uint64_t b, uint64_t *lo)
{
#if defined(__SIZEOF_INT128__)
    __extension__ unsigned __int128 p = (unsigned __int128)a * b;
    *lo = (uint64_t)p;
    return (uint64_t)(p >> 64);
#else
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    *lo = (mid << 32) | (uint32_t)p00;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* Uniform in [0, range), range >= 1 (Lemire, "Fast random integer generation
 * in an interval", 2019). The threshold's division is paid only when the
 * first draw lands in the rejection zone, which is rare unless range is
 * near 2^64. */
static uint64_t draw_below(uint64_t range, uint64_t seed, uint64_t epoch, uint64_t index,
                           int stream)
{
    uint64_t ctr = STREAM(stream), lo;
    uint64_t hi = mul_hi(feeder_random(seed, epoch, index, ctr), range, &lo);
    if (lo < range) {
        uint64_t t = -range % range;
        while (lo < t)
            hi = mul_hi(feeder_random(seed, epoch, index, ++ctr), range, &lo);
    }
    return hi;
}

/* ---- permutations ---- */

/* How many Fisher-Yates steps are computed ahead, so the element each swap
 * touches is already on its way from memory: a step's target depends only on
 * its key, never on the array, and at n ~ 10^7 nearly every swap misses the
 * cache. */
#define SHUFFLE_AHEAD 16

/* The forward Fisher-Yates shuffle of a[0..n), stopped after `steps` steps:
 * step i swaps a[i] with a[j], j uniform in [i, n), so a[0..steps) is then a
 * prefix of the full shuffle and the rest need not be computed. */
static void shuffle_prefix(uint64_t *a, uint64_t n, uint64_t steps, uint64_t seed,
                           uint64_t epoch, uint64_t base)
{
    if (n < 2)
        return;
    if (steps > n - 1)
        steps = n - 1;
    uint64_t js[SHUFFLE_AHEAD];
    for (uint64_t i = 0; i < steps && i < SHUFFLE_AHEAD; i++) {
        js[i] = i + draw_below(n - i, seed, epoch, base + i, STREAM_SHUFFLE);
#if defined(__GNUC__)
        __builtin_prefetch(&a[js[i]], 1);
#endif
    }
    for (uint64_t i = 0; i < steps; i++) {
        uint64_t j = js[i % SHUFFLE_AHEAD];
        uint64_t k = i + SHUFFLE_AHEAD;
        if (k < steps) {
            uint64_t jk = k + draw_below(n - k, seed, epoch, base + k, STREAM_SHUFFLE);
            js[k % SHUFFLE_AHEAD] = jk;
#if defined(__GNUC__)
            __builtin_prefetch(&a[jk], 1);
#endif
        }
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* The first k entries of permutation number `perm` of 0..n-1 into a[0..k);
 * a has room for n. */
static void perm_prefix(uint64_t *a, uint64_t n, uint64_t k, uint64_t seed, uint64_t epoch,
                        uint64_t perm)
{
    for (uint64_t i = 0; i < n; i++)
        a[i] = i;
    shuffle_prefix(a, n, k, seed, epoch, perm * n);
}

/* ---- fill, per kind ---- */

/* NULL when n elements do not fit size_t: the caller reports -ENOMEM. */
static uint64_t *alloc_u64(uint64_t n)
{
    return n > SIZE_MAX / sizeof(uint64_t) ? NULL : malloc(n * sizeof(uint64_t));
}

static int fill_random(const feeder_sampler *s, uint64_t epoch, uint64_t *out)
{
    uint64_t n = s->n, len = s->len;
    if (s->replacement) {
        for (uint64_t i = 0; i < len; i++)
            out[i] = draw_below(n, s->seed, epoch, i, STREAM_DRAW);
        return 0;
    }
    uint64_t full = len / n, rem = len % n;
    if (rem && full == 0) {
        /* A prefix of one permutation (PyTorch: randperm(n)[:num_samples]):
         * the shuffle needs all n elements. */
        uint64_t *tmp = alloc_u64(n);
        if (!tmp)
            return -ENOMEM;
        perm_prefix(tmp, n, rem, s->seed, epoch, 0);
        memcpy(out, tmp, rem * sizeof(*out));
        free(tmp);
        return 0;
    }
    if (rem) {
        /* The truncated last permutation is shuffled in the last n places of
         * `out` (which overlap the full permutation before it, written after)
         * and its prefix moved to the end. */
        uint64_t *w = out + len - n;
        perm_prefix(w, n, rem, s->seed, epoch, full);
        memmove(out + len - rem, w, rem * sizeof(*out));
    }
    for (uint64_t p = 0; p < full; p++)
        perm_prefix(out + p * n, n, n, s->seed, epoch, p);
    return 0;
}

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

static int fill_weighted(const feeder_sampler *s, uint64_t epoch, uint64_t *out)
{
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

/* PyTorch's DistributedSampler: the padded order is order[k % n] for
 * k < total (its "indices += indices[:pad]", repeated when pad > n), and
 * this rank takes k = rank, rank + world, ... */
static int fill_distributed(const feeder_sampler *s, uint64_t epoch, uint64_t *out)
{
    uint64_t n = s->n, len = s->len;
    if (len == 0)
        return 0;
    uint64_t pos = s->rank % n, step = s->world % n;
    if (!s->shuffle) {
        for (uint64_t t = 0; t < len; t++) {
            out[t] = pos;
            pos += step;
            if (pos >= n)
                pos -= n;
        }
        return 0;
    }
    if (s->world == 1 && len == n) {
        perm_prefix(out, n, n, s->seed, epoch, 0);
        return 0;
    }
    /* Positions beyond the last one this rank reads need no shuffling. */
    uint64_t last = s->rank + (len - 1) * (uint64_t)s->world;
    uint64_t *perm = alloc_u64(n);
    if (!perm)
        return -ENOMEM;
    perm_prefix(perm, n, last < n ? last + 1 : n, s->seed, epoch, 0);
    for (uint64_t t = 0; t < len; t++) {
        out[t] = perm[pos];
        pos += step;
        if (pos >= n)
            pos -= n;
    }
    free(perm);
    return 0;
}

/* ---- shards ---- */

/* This rank's shards, in the epoch's shard order: positions rank, rank +
 * world, ... of a permutation of all shards keyed by (seed, epoch). */
static uint64_t *rank_shards(const feeder_sampler *s, uint64_t epoch, uint64_t *count)
{
    uint64_t *perm = alloc_u64(s->nshards);
    if (!perm)
        return NULL;
    perm_prefix(perm, s->nshards, s->nshards, s->seed, epoch, 0);
    uint64_t k = 0;
    for (uint64_t p = s->rank; p < s->nshards; p += s->world)
        perm[k++] = perm[p]; /* p >= k: reads ahead of writes */
    *count = k;
    return perm;
}

/* The sliding window: the pool holds every not-yet-drawn sample of at most
 * `window` shards; each output draws one uniformly from the pool, and a
 * shard whose last sample was drawn makes room for the next shard. */
static uint64_t window_stream(const feeder_sampler *s, uint64_t epoch, const uint64_t *mine,
                              uint64_t nmine, uint64_t *pool, uint64_t *left, uint64_t *out,
                              uint64_t cap)
{
    uint64_t w = s->window ? s->window : nmine, open = 0, next = 0, lo = 0, size = 0, t = 0;
    for (;;) {
        for (; open < w && next < nmine; next++) {
            uint64_t sh = mine[next], a = s->shard_first[sh], b = s->shard_first[sh + 1];
            left[next] = b - a;
            open += a < b; /* an empty shard takes no room */
            for (uint64_t i = a; i < b; i++)
                pool[size++] = i;
        }
        if (!size || t == cap)
            return t;
        uint64_t j = draw_below(size, s->seed, epoch, t, STREAM_WINDOW);
        uint64_t x = pool[j];
        pool[j] = pool[--size];
        out[t++] = x;
        /* Which open shard x came from (shards are contiguous index ranges). */
        for (uint64_t q = lo; q < next; q++) {
            uint64_t sh = mine[q];
            if (left[q] && x >= s->shard_first[sh] && x < s->shard_first[sh + 1]) {
                open -= --left[q] == 0;
                break;
            }
        }
        while (lo < next && !left[lo])
            lo++;
    }
}

/* The rank's stream, cut or repeated from its start to the common length. */
static int fill_shards(const feeder_sampler *s, uint64_t epoch, uint64_t *out)
{
    uint64_t nmine = 0, most = 0, total = 0;
    uint64_t *mine = rank_shards(s, epoch, &nmine);
    if (!mine)
        return -ENOMEM;
    for (uint64_t q = 0; q < nmine; q++) {
        uint64_t c = s->shard_first[mine[q] + 1] - s->shard_first[mine[q]];
        most = c > most ? c : most;
        total += c;
    }
    uint64_t w = s->window && s->window < nmine ? s->window : nmine;
    uint64_t *pool = alloc_u64(w * most + 1), *left = alloc_u64(nmine + 1);
    uint64_t *stream = total < s->len ? alloc_u64(total + 1) : out;
    int rc = 0;
    if (!pool || !left || !stream) {
        rc = -ENOMEM;
    } else {
        uint64_t got = window_stream(s, epoch, mine, nmine, pool, left, stream, s->len);
        for (uint64_t t = got; t < s->len && stream != out; t++)
            out[t] = stream[t % (got ? got : 1)];
        if (stream != out)
            memcpy(out, stream, (got < s->len ? got : s->len) * sizeof(*out));
        if (!got && s->len)
            rc = FEEDER_EDATASET; /* only empty shards: nothing to repeat */
    }
    if (stream != out)
        free(stream);
    free(pool);
    free(left);
    free(mine);
    return rc;
}

/* ---- create ---- */

static int make(int kind, feeder_sampler **out, feeder_sampler **s)
{
    if (!out)
        return FEEDER_EINVAL;
    *s = calloc(1, sizeof(**s));
    if (!*s)
        return -ENOMEM;
    (*s)->kind = kind;
    return 0;
}

int feeder_sampler_sequential(uint64_t n, feeder_sampler **out)
{
    feeder_sampler *s;
    int rc = make(SAMPLER_SEQUENTIAL, out, &s);
    if (rc)
        return rc;
    s->n = s->len = n;
    *out = s;
    return 0;
}

int feeder_sampler_random(uint64_t n, int replacement, uint64_t num_samples, uint64_t seed,
                          feeder_sampler **out)
{
    /* Nothing to draw from: PyTorch's RandomSampler refuses it too. */
    if (n == 0)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = make(SAMPLER_RANDOM, out, &s);
    if (rc)
        return rc;
    s->n = n;
    s->len = num_samples ? num_samples : n;
    s->replacement = replacement != 0;
    s->seed = seed;
    *out = s;
    return 0;
}

int feeder_sampler_subset(const uint64_t *indices, uint64_t count, int shuffle, uint64_t seed,
                          feeder_sampler **out)
{
    if (!indices && count)
        return FEEDER_EINVAL;
    if (count > SIZE_MAX / sizeof(uint64_t))
        return FEEDER_EOVERFLOW;
    feeder_sampler *s;
    int rc = make(SAMPLER_SUBSET, out, &s);
    if (rc)
        return rc;
    if (count) {
        s->indices = malloc(count * sizeof(*s->indices));
        if (!s->indices) {
            free(s);
            return -ENOMEM;
        }
        memcpy(s->indices, indices, count * sizeof(*s->indices));
    }
    s->n = s->len = count;
    s->shuffle = shuffle != 0;
    s->seed = seed;
    *out = s;
    return 0;
}

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
    int rc = make(SAMPLER_WEIGHTED, out, &s);
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

int feeder_sampler_distributed(uint64_t n, uint32_t rank, uint32_t world_size, int shuffle,
                               uint64_t seed, int drop_last, feeder_sampler **out)
{
    if (world_size == 0 || rank >= world_size)
        return FEEDER_EINVAL;
    uint64_t len = n / world_size;
    if (!drop_last && n % world_size) {
        len++;
        /* PyTorch's total_size, len * world, bounds every padded position. */
        if (len > UINT64_MAX / world_size)
            return FEEDER_EOVERFLOW;
    }
    feeder_sampler *s;
    int rc = make(SAMPLER_DISTRIBUTED, out, &s);
    if (rc)
        return rc;
    s->n = n;
    s->len = len;
    s->rank = rank;
    s->world = world_size;
    s->shuffle = shuffle != 0;
    s->seed = seed;
    *out = s;
    return 0;
}

int feeder_sampler_shards(const uint64_t *counts, uint32_t nshards, uint32_t rank,
                          uint32_t world_size, uint32_t window, uint64_t seed, int drop_last,
                          feeder_sampler **out)
{
    if (!counts || nshards == 0 || world_size == 0 || rank >= world_size ||
        nshards < world_size)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = make(SAMPLER_SHARDS, out, &s);
    if (rc)
        return rc;
    if (!(s->shard_first = alloc_u64((uint64_t)nshards + 1))) {
        free(s);
        return -ENOMEM;
    }
    s->shard_first[0] = 0;
    for (uint32_t k = 0; k < nshards; k++)
        if (__builtin_add_overflow(s->shard_first[k], counts[k], &s->shard_first[k + 1])) {
            feeder_sampler_destroy(s);
            return FEEDER_EOVERFLOW;
        }
    uint64_t total = s->shard_first[nshards];
    s->n = total;
    s->len = total / world_size + (!drop_last && total % world_size != 0);
    s->nshards = nshards;
    s->rank = rank;
    s->world = world_size;
    s->window = window;
    s->seed = seed;
    *out = s;
    return 0;
}

int feeder_sampler_create(const feeder_sampler_callbacks *cb, void *user, feeder_sampler **out)
{
    if (!cb || !cb->len || !cb->fill)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = make(SAMPLER_USER, out, &s);
    if (rc)
        return rc;
    s->cb = *cb;
    s->user = user;
    *out = s;
    return 0;
}

int feeder_sampler_create_batches(const feeder_batch_sampler_callbacks *cb, void *user,
                                  feeder_sampler **out)
{
    if (!cb || !cb->nbatches || !cb->len || !cb->fill)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = make(SAMPLER_BATCHES, out, &s);
    if (rc)
        return rc;
    s->bcb = *cb;
    s->user = user;
    *out = s;
    return 0;
}

void feeder_sampler_destroy(feeder_sampler *s)
{
    if (!s)
        return;
    if (s->kind == SAMPLER_USER && s->cb.destroy)
        s->cb.destroy(s->user);
    if (s->kind == SAMPLER_BATCHES && s->bcb.destroy)
        s->bcb.destroy(s->user);
    free(s->indices);
    free(s->weights);
    free(s->table);
    free(s->shard_first);
    free(s);
}

/* ---- use ---- */

uint64_t feeder_sampler_len(const feeder_sampler *s, uint64_t epoch)
{
    if (!s)
        return 0;
    if (s->kind == SAMPLER_USER)
        return s->cb.len(s->user, epoch);
    if (s->kind == SAMPLER_BATCHES)
        return s->bcb.len(s->user, epoch);
    return s->len;
}

int feeder_sampler_fill(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    if (!s || (!out && count))
        return FEEDER_EINVAL;
    if (count != feeder_sampler_len(s, epoch))
        return FEEDER_EINVAL;
    if (count == 0)
        return 0;
    switch (s->kind) {
    case SAMPLER_SEQUENTIAL:
        for (uint64_t i = 0; i < count; i++)
            out[i] = i;
        return 0;
    case SAMPLER_RANDOM:
        return fill_random(s, epoch, out);
    case SAMPLER_SUBSET:
        memcpy(out, s->indices, count * sizeof(*out));
        /* Shuffling the copy is SubsetRandomSampler's indices[randperm(count)]:
         * the same swaps applied to other contents. */
        if (s->shuffle)
            shuffle_prefix(out, count, count, s->seed, epoch, 0);
        return 0;
    case SAMPLER_WEIGHTED:
        return fill_weighted(s, epoch, out);
    case SAMPLER_DISTRIBUTED:
        return fill_distributed(s, epoch, out);
    case SAMPLER_SHARDS:
        return fill_shards(s, epoch, out);
    case SAMPLER_USER: {
        int rc = s->cb.fill(s->user, epoch, out, count);
        /* A positive value would read as a status, not a failure. */
        return rc > 0 ? FEEDER_ECALLBACK : rc;
    }
    case SAMPLER_BATCHES: {
        uint32_t *lengths;
        int32_t *workers;
        uint64_t nb;
        int rc = feeder__sampler_batches(s, epoch, out, count, &lengths, &workers, &nb);
        free(lengths);
        free(workers);
        return rc;
    }
    }
    return FEEDER_EINVAL;
}

uint64_t feeder_batch_count(uint64_t len, uint32_t batch_size, int drop_last)
{
    if (batch_size == 0)
        return 0;
    return len / batch_size + (!drop_last && len % batch_size != 0);
}

int feeder__sampler_pure(const feeder_sampler *s)
{
    return s && s->kind != SAMPLER_USER && s->kind != SAMPLER_BATCHES;
}

int feeder__sampler_batched(const feeder_sampler *s) { return s && s->kind == SAMPLER_BATCHES; }

int feeder__sampler_batches(const feeder_sampler *s, uint64_t epoch, uint64_t *indices,
                            uint64_t len, uint32_t **lengths, int32_t **workers, uint64_t *nb)
{
    *lengths = NULL;
    *workers = NULL;
    *nb = s->bcb.nbatches(s->user, epoch);
    size_t n = *nb ? (size_t)*nb : 1;
    if (*nb > SIZE_MAX / sizeof(uint32_t) || !(*lengths = malloc(n * sizeof(uint32_t))) ||
        !(*workers = malloc(n * sizeof(int32_t))))
        return -ENOMEM;
    int rc = s->bcb.fill(s->user, epoch, indices, len, *lengths, *workers, *nb);
    if (rc)
        return rc > 0 ? FEEDER_ECALLBACK : rc;
    uint64_t total = 0;
    for (uint64_t b = 0; b < *nb; b++)
        total += (*lengths)[b];
    return total == len ? 0 : FEEDER_EINVAL; /* the lengths must cover the indices */
}
