/*
 * feeder/dist.h: distributed jobs: rank, world size and device from the launcher's
 * environment.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_DIST_H
#define FEEDER_PUBLIC_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Distributed jobs                                                          */
/* ------------------------------------------------------------------------ */

/* Where this process stands in a data-parallel job that an existing launcher
 * (mpirun, srun, torchrun) started, one process per GPU. Each rank runs its
 * own loader over its share of the dataset:
 *
 *     feeder_dist d = FEEDER_DIST_INIT;
 *     if (feeder_dist_from_env(&d, err, sizeof(err))) ...
 *     feeder_sampler_distributed(n, d.rank, d.world_size, 1, seed, 1, &s);
 *
 * and the GPU layer picks its device with feeder_dist_device(). A plain value:
 * copy it freely, it holds nothing to release. Thread-safety: as any struct. */
typedef struct feeder_dist {
    int32_t rank;       /* this process, 0 .. world_size-1 */
    int32_t world_size; /* processes in the job, >= 1 */
    int32_t local_rank; /* this process among those on its machine, 0 .. local_size-1 */
    int32_t local_size; /* processes on this machine, 1 .. world_size */
    int32_t device;     /* the GPU wanted, before wrapping onto the visible ones:
                           local_rank unless the caller preset it (see feeder_dist_device) */
    const char *source; /* where rank came from: "explicit" (caller or FEEDER_RANK), "OMPI",
                           "PMI", "torchrun", "SLURM", or "default"; static storage */
    uint32_t reserved_[8];
} feeder_dist;

/* The initialiser that leaves every field to feeder_dist_from_env(). */
#define FEEDER_DIST_INIT {-1, -1, -1, -1, -1, NULL, {0}}

/* Fill rank, world_size, local_rank, local_size, device and source: each
 * number is the caller's preset value, else FEEDER_RANK etc., else the first
 * launcher found (Open MPI, PMI, torchrun, Slurm), else rank 0 of 1; device
 * is the preset value, else local_rank. A malformed or inconsistent value
 * fails with FEEDER_EINVAL and a message in `err` (may be NULL) naming the
 * variables. Precedence, variables and messages: docs/api/dist.md.
 * On failure *d is left unchanged. Lifetime: `source` is static.
 * Thread-safety: reads the environment, so it must not race a setenv or
 * putenv in another thread; otherwise thread-safe. */
FEEDER_API int feeder_dist_from_env(feeder_dist *d, char *err, size_t errlen);

/* The device ordinal for a process that sees `device_count` GPUs: d->device
 * modulo device_count, so ranks of one machine spread over its GPUs, and a
 * launcher that gives each rank one GPU (CUDA_VISIBLE_DEVICES of a single
 * device) yields 0. -1 when d is NULL, d->device < 0 or device_count <= 0
 * (no GPU: the CPU path). The core never includes CUDA: the count comes from
 * cudaGetDeviceCount(), as feeder_dist_cuda_device() in feeder_cuda.h does,
 * and the result is the value for FEEDER_OPT_DEVICE. Pure function.
 * Thread-safe. */
FEEDER_API int feeder_dist_device(const feeder_dist *d, int device_count);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_DIST_H */
