/*
 * feeder: a data loader for C training loops.
 *
 * feeder turns a dataset (an image folder, a list file, a packed file, tar
 * shards, or C callbacks) into a stream of collated batches. Worker processes
 * read files with io_uring, decode with libjpeg-turbo (PNG with libspng, WebP
 * with libwebp) and write every sample straight into its place in a batch
 * slot in shared memory; the calling thread borrows finished batches with
 * feeder_next() and gives them back with feeder_batch_release().
 *
 * This header includes the whole public API, one header per concern:
 *   feeder/core.h     conventions, version, results, feeder_strerror, feeder_random
 *   feeder/dataset.h  folder, list, packed, tar and shard datasets; callback datasets
 *   feeder/sampler.h  samplers
 *   feeder/dist.h     rank, world size and device from the launcher's environment
 *   feeder/loader.h   options and their value names, start, feeder_next, errors,
 *                     the resume state, stats, the timeline trace
 *   feeder/augment.h  the augment pipeline and the batch mixes
 *   feeder/fields.h   fields datasets, batch datasets, user collate
 * Each may be included alone. Long rules are in docs/api/ (docs/api/README.md).
 * None includes a CUDA, libjpeg or liburing header; feeder_cuda.h holds what
 * needs CUDA types.
 */
#ifndef FEEDER_H
#define FEEDER_H

#include "feeder/core.h"
#include "feeder/dataset.h"
#include "feeder/sampler.h"
#include "feeder/dist.h"
#include "feeder/loader.h"
#include "feeder/augment.h"
#include "feeder/fields.h"

#endif /* FEEDER_H */
