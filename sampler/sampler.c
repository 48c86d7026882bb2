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
 *
 * Each kind is a table (kind.h) in a file of its own; this file holds what
 * they share and the entry points that go through the table.
 */
#include <errno.h>
#include <stdlib.h>

#include "sampler/kind.h"
#include "sampler/sampler.h"

/* ---- permutations ---- */

void feeder__shuffle_prefix(uint64_t *a, uint64_t n, uint64_t steps, uint64_t seed,
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

void feeder__perm_prefix(uint64_t *a, uint64_t n, uint64_t k, uint64_t seed, uint64_t epoch,
                         uint64_t perm)
{
    for (uint64_t i = 0; i < n; i++)
        a[i] = i;
    feeder__shuffle_prefix(a, n, k, seed, epoch, perm * n);
}

uint64_t *feeder__alloc_u64(uint64_t n)
{
    return n > SIZE_MAX / sizeof(uint64_t) ? NULL : malloc(n * sizeof(uint64_t));
}

/* ---- create, destroy ---- */

int feeder__sampler_make(const feeder__sampler_kind *kind, feeder_sampler **out,
                         feeder_sampler **s)
{
    if (!out)
        return FEEDER_EINVAL;
    *s = calloc(1, sizeof(**s));
    if (!*s)
        return -ENOMEM;
    (*s)->kind = kind;
    return 0;
}

void feeder_sampler_destroy(feeder_sampler *s)
{
    if (!s)
        return;
    if (s->kind->destroy)
        s->kind->destroy(s);
    free(s);
}

/* ---- use ---- */

uint64_t feeder_sampler_len(const feeder_sampler *s, uint64_t epoch)
{
    if (!s)
        return 0;
    return s->kind->len ? s->kind->len(s, epoch) : s->len;
}

int feeder_sampler_fill(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    if (!s || (!out && count))
        return FEEDER_EINVAL;
    if (count != feeder_sampler_len(s, epoch))
        return FEEDER_EINVAL;
    if (count == 0)
        return 0;
    return s->kind->fill(s, epoch, out, count);
}

uint64_t feeder_batch_count(uint64_t len, uint32_t batch_size, int drop_last)
{
    if (batch_size == 0)
        return 0;
    return len / batch_size + (!drop_last && len % batch_size != 0);
}

int feeder__sampler_pure(const feeder_sampler *s) { return s && s->kind->pure; }

int feeder__sampler_checked_ahead(const feeder_sampler *s) { return s && s->ahead; }
