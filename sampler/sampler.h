/*
 * sampler/: the samplers (the epoch's order of dataset indices, each kind one
 * file and one table) and rank discovery (dist_env.c). Their public face is
 * include/feeder.h; this is what rooms above may use besides.
 */
#ifndef FEEDER_SAMPLER_H
#define FEEDER_SAMPLER_H

#include <stdint.h>

#include "feeder.h"

/* Whether the sampler's order is a pure function of the epoch (every kind
 * but a user's callbacks), so it may be asked for an epoch early. */
int feeder__sampler_pure(const feeder_sampler *s);
/* Whether a user's callbacks may be asked for an epoch early, their order
 * asked again and compared when that epoch begins (feeder_sampler_set_ahead). */
int feeder__sampler_checked_ahead(const feeder_sampler *s);
/* A batch sampler (feeder_sampler_create_batches). */
int feeder__sampler_batched(const feeder_sampler *s);
/* A batch sampler's epoch: indices[0..len) and, allocated for the caller
 * to free (also on failure), each batch's length and worker; *nb batches.
 * 0, -ENOMEM, FEEDER_EINVAL when the lengths do not add up to len, or the
 * callback's error. */
int feeder__sampler_batches(const feeder_sampler *s, uint64_t epoch, uint64_t *indices,
                            uint64_t len, uint32_t **lengths, int32_t **workers, uint64_t *nb);

#endif
