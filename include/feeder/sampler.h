/*
 * feeder/sampler.h: samplers: the order of an epoch's indices.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_SAMPLER_H
#define FEEDER_PUBLIC_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Samplers                                                                  */
/* ------------------------------------------------------------------------ */

/* A sampler yields, for each epoch, a sequence of dataset indices. Every
 * sampler is a pure function of its parameters and the epoch: feeder_sampler_fill
 * gives the same sequence every time it is asked. Create functions return
 * FEEDER_EINVAL for a bad argument (n == 0 for random and weighted samplers,
 * which have nothing to draw from; sequential, subset and distributed samplers
 * of 0 indices yield an empty order) and set *out only on success.
 * Lifetime: a sampler given to a loader is borrowed and must outlive it.
 * Thread-safety: built-in samplers are read-only after create, so len and
 * fill may be called from any thread; a user sampler is as safe as its
 * callbacks. */
typedef struct feeder_sampler feeder_sampler;

/* 0, 1, ..., n-1 every epoch. */
FEEDER_API int feeder_sampler_sequential(uint64_t n, feeder_sampler **out);

/* A random order of 0..n-1 keyed by (seed, epoch). Without replacement
 * (`replacement` 0) it is a permutation, num_samples 0 meaning n, a larger
 * num_samples concatenating further permutations (as PyTorch does); with
 * replacement, num_samples independent uniform draws (0 meaning n). */
FEEDER_API int feeder_sampler_random(uint64_t n, int replacement, uint64_t num_samples,
                                     uint64_t seed, feeder_sampler **out);

/* The given indices (copied), in that order (`shuffle` 0) or in a random
 * order keyed by (seed, epoch) (`shuffle` 1, PyTorch's SubsetRandomSampler). */
FEEDER_API int feeder_sampler_subset(const uint64_t *indices, uint64_t count, int shuffle,
                                     uint64_t seed, feeder_sampler **out);

/* Index i drawn with probability weights[i] / sum(weights) (copied; finite,
 * non-negative, not all zero; num_samples > 0). Note the argument order
 * differs from feeder_sampler_random. With replacement: num_samples independent
 * draws. Without: num_samples (<= number of non-zero weights) distinct
 * indices, in the order of the weighted random keys (Efraimidis-Spirakis). */
FEEDER_API int feeder_sampler_weighted(const double *weights, uint64_t n,
                                       uint64_t num_samples, int replacement,
                                       uint64_t seed, feeder_sampler **out);

/* This rank's share of 0..n-1, like PyTorch's DistributedSampler: the whole
 * order (shuffled by (seed, epoch) or not) is cut to a multiple of world_size
 * (`drop_last` 1) or padded by repeating it from its start (`drop_last` 0),
 * then rank r takes positions r, r + world, r + 2*world, ... Every rank gets
 * the same count, so the same number of batches. */
FEEDER_API int feeder_sampler_distributed(uint64_t n, uint32_t rank, uint32_t world_size,
                                          int shuffle, uint64_t seed, int drop_last,
                                          feeder_sampler **out);

/* Shard-aware order for a shards dataset (feeder_dataset_shard_counts gives
 * `counts`, nshards >= world_size): the shards are shuffled by (seed, epoch)
 * and dealt round-robin to the ranks (rank r takes shuffled shards r, r +
 * world_size, ...: disjoint sets); each rank draws its samples uniformly
 * from a sliding window holding the not-yet-drawn samples of at most
 * `window` of its shards (0: all of them, a full shuffle), a shard leaving
 * the window when its last sample is drawn and the next one entering, so a
 * process needs at most `window` shards resident at once. Every rank yields
 * the same number of samples, total / world_size (`drop_last` 1) or rounded
 * up (`drop_last` 0): a rank whose shards hold more stops early (the rest
 * of its stream is dropped for this epoch), one whose shards hold fewer
 * repeats its stream from its start, as DistributedSampler pads; shards of
 * equal size with nshards a multiple of world_size need neither. A pure
 * function of (counts, rank, world_size, window, seed, epoch): the same
 * order for any number of workers and after resume. `counts` copied.
 * FEEDER_EINVAL for a bad argument, FEEDER_EOVERFLOW, -ENOMEM; fill gives
 * FEEDER_EDATASET when every shard of the rank is empty. */
FEEDER_API int feeder_sampler_shards(const uint64_t *counts, uint32_t nshards, uint32_t rank,
                                     uint32_t world_size, uint32_t window, uint64_t seed,
                                     int drop_last, feeder_sampler **out);

/* A sampler given as callbacks: `len` gives the epoch's length, `fill` writes
 * that many indices. Both must be pure functions of (user, epoch) for the
 * loader's determinism to hold. `cb` copied, `user` borrowed. */
typedef struct feeder_sampler_callbacks {
    uint64_t (*len)(void *user, uint64_t epoch);
    int (*fill)(void *user, uint64_t epoch, uint64_t *out, uint64_t count);
    void (*destroy)(void *user);
} feeder_sampler_callbacks;
FEEDER_API int feeder_sampler_create(const feeder_sampler_callbacks *cb, void *user,
                                     feeder_sampler **out);

/* Let the loader ask a callback sampler for an epoch's order before that
 * epoch begins (on: 1), as it does with the built-in samplers, whose orders
 * are pure functions of the epoch: with persistent workers the next epoch
 * then begins in the slots the ending one frees. When that epoch begins, the
 * loader asks for its order again and keeps what it began only if the two
 * orders are equal; otherwise it drops those batches and begins the epoch
 * with the later order. For callbacks that may be called twice an epoch and
 * early (no side effects); off by default. 0, or FEEDER_EINVAL when `s` is
 * not a callback sampler. */
FEEDER_API int feeder_sampler_set_ahead(feeder_sampler *s, int on);

FEEDER_API void feeder_sampler_destroy(feeder_sampler *s);

/* Number of indices the sampler yields in `epoch`. */
FEEDER_API uint64_t feeder_sampler_len(const feeder_sampler *s, uint64_t epoch);
/* Write the epoch's indices to out[0 .. count), count == feeder_sampler_len().
 * Returns 0, FEEDER_EINVAL on a count mismatch, -ENOMEM (some samplers need
 * scratch memory of count entries), or a user callback's error (a positive
 * callback result becomes FEEDER_ECALLBACK). */
FEEDER_API int feeder_sampler_fill(const feeder_sampler *s, uint64_t epoch, uint64_t *out,
                                   uint64_t count);
/* The batch sampler: how many batches `len` indices make with batch_size and
 * drop_last (the last, shorter batch is kept unless drop_last). */
FEEDER_API uint64_t feeder_batch_count(uint64_t len, uint32_t batch_size, int drop_last);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_SAMPLER_H */
