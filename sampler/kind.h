/*
 * sampler/: private to the room. A sampler is its kind's table and the
 * parameters it was made with; each kind is one file (sequential.c,
 * random.c, subset.c, weighted.c, distributed.c, shards.c, callback.c,
 * batches.c) with one table, and sampler.c holds what they share: the
 * draws and shuffles every random kind keys the same way (sampler.c's
 * opening comment), creation, and the public entry points that go through
 * the table.
 */
#ifndef FEEDER_SAMPLER_KIND_H
#define FEEDER_SAMPLER_KIND_H

#include <stdint.h>

#include "feeder.h"

/* What a kind does. */
typedef struct feeder__sampler_kind {
    const char *name;
    /* The order is a pure function of the parameters and the epoch, so it
     * may be asked for an epoch early (every kind but a user's callbacks). */
    int pure;
    /* Indices per epoch; NULL: the fixed s->len. */
    uint64_t (*len)(const feeder_sampler *s, uint64_t epoch);
    /* The epoch's order into out[0..count), count == the epoch's len > 0. */
    int (*fill)(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count);
    /* What the kind owns (its arrays, the user's data); NULL: nothing. */
    void (*destroy)(feeder_sampler *s);
} feeder__sampler_kind;

extern const feeder__sampler_kind feeder__sampler_sequential_kind;
extern const feeder__sampler_kind feeder__sampler_random_kind;
extern const feeder__sampler_kind feeder__sampler_subset_kind;
extern const feeder__sampler_kind feeder__sampler_weighted_kind;
extern const feeder__sampler_kind feeder__sampler_distributed_kind;
extern const feeder__sampler_kind feeder__sampler_shards_kind;
extern const feeder__sampler_kind feeder__sampler_callback_kind;
extern const feeder__sampler_kind feeder__sampler_batches_kind;

/* The counter ranges of the sampler's draws (sampler.c). */
enum { STREAM_SHUFFLE = 0, STREAM_DRAW = 1, STREAM_COIN = 2, STREAM_KEY = 3, STREAM_WINDOW = 4 };
#define STREAM(s) ((UINT64_C(1) << 63) | ((uint64_t)(s) << 32))

/* One column of the alias table: its own index is drawn when the coin falls
 * below prob, `alias` otherwise. Together so a draw misses the cache once. */
typedef struct alias_cell {
    double prob;
    uint64_t alias;
} alias_cell;

struct feeder_sampler {
    const feeder__sampler_kind *kind;
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
    feeder_sampler_callbacks cb;        /* callback */
    int ahead; /* callback: may be asked for an epoch early (feeder_sampler_set_ahead) */
    feeder_batch_sampler_callbacks bcb; /* batches */
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
static inline uint64_t draw_below(uint64_t range, uint64_t seed, uint64_t epoch, uint64_t index,
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

/* How many draws are computed ahead, so the element each one touches is
 * already on its way from memory (the shuffle's swaps, the alias table's
 * columns): at n ~ 10^7 nearly every one misses the cache. */
#define SHUFFLE_AHEAD 16

/* ---- sampler.c ---- */

/* The forward Fisher-Yates shuffle of a[0..n), stopped after `steps` steps:
 * step i swaps a[i] with a[j], j uniform in [i, n), so a[0..steps) is then a
 * prefix of the full shuffle and the rest need not be computed. */
void feeder__shuffle_prefix(uint64_t *a, uint64_t n, uint64_t steps, uint64_t seed,
                            uint64_t epoch, uint64_t base);
/* The first k entries of permutation number `perm` of 0..n-1 into a[0..k);
 * a has room for n. */
void feeder__perm_prefix(uint64_t *a, uint64_t n, uint64_t k, uint64_t seed, uint64_t epoch,
                         uint64_t perm);
/* NULL when n elements do not fit size_t: the caller reports -ENOMEM. */
uint64_t *feeder__alloc_u64(uint64_t n);
/* A zeroed sampler of `kind` into *s: 0, FEEDER_EINVAL (out NULL) or -ENOMEM. */
int feeder__sampler_make(const feeder__sampler_kind *kind, feeder_sampler **out,
                         feeder_sampler **s);

#endif
