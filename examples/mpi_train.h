/*
 * What the two halves of examples/mpi_train share: mpi_train.c (options, the
 * CPU path, the report) and mpi_train_gpu.c (the GPU path, built when CMake
 * finds CUDA). Example code, not part of the library.
 */
#ifndef MPI_TRAIN_H
#define MPI_TRAIN_H

#include <stdint.h>

#include "feeder.h"

#define MT_PROG "mpi_train"
#define MT_GRID 16 /* the model sees GRID x GRID x 3 */

/* How the GPU path averages gradients across ranks. */
typedef enum mt_allreduce {
    MT_AR_AUTO = 0, /* NCCL when built with it, else MPI on device pointers when
                       Open MPI is CUDA-aware at run time, else staged */
    MT_AR_NCCL,     /* ncclAllReduce on the device buffer, on the step's stream */
    MT_AR_MPI_CUDA, /* MPI_Allreduce on the device buffer (CUDA-aware MPI) */
    MT_AR_MPI_HOST  /* D2H into a pinned buffer, MPI_Allreduce there, H2D */
} mt_allreduce;

typedef struct mt_opts {
    const char *data;
    const char *shards; /* a brace range of packs (paths or URLs): a shards dataset */
    unsigned window;    /* --shards: the shard sampler's window (shards) */
    const char *cache;
    unsigned images;
    unsigned epochs;
    uint32_t batch;
    int workers; /* -1: from the CPUs this rank may use */
    uint32_t size;
    double lr;
    uint64_t seed;
    int shuffle;
    int drop_last;
    int device;     /* -2: auto (feeder_dist_cuda_device), -1: CPU, else the device */
    mt_allreduce allreduce;
    int bench;      /* time steady epochs, no learning check */
    int json;       /* rank 0 prints the report as one JSON line too */
    int check;      /* GPU path: compare the first step with the CPU */
} mt_opts;

/* One rank's epoch, in seconds: the wall time from the first feeder_next to
 * the end of the epoch, and the parts of it spent blocked in feeder_next
 * (wait), in the model (compute) and averaging the gradient (allreduce). */
enum { MT_WALL, MT_WAIT, MT_COMPUTE, MT_ALLREDUCE, MT_IMAGES, MT_FIELDS };
typedef struct mt_epoch {
    double v[MT_FIELDS];
} mt_epoch;

/* What a path hands back to main for the summary line and the exit status. */
typedef struct mt_result {
    uint64_t batches, samples, index_sum;
    uint64_t weights_hash; /* XXH64 of the final weights */
    int weights_differ;    /* the ranks' weights are not bit-identical */
    int status;            /* 0, or 3: the loss did not fall (GPU path, not --bench) */
    char allreduce[160];   /* the averaging that ran, in words */
} mt_result;

extern int mt_rank;

/* Print "mpi_train rank R: message" and take the job down (MPI_Abort): the
 * other ranks would otherwise wait forever at their next collective. */
void mt_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* splitmix64's finaliser: the index_sum of the summary line adds this over
 * every sample index a rank saw (scripts/mpi_check.sh). */
static inline uint64_t mt_mix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double mt_now_s(void);

/* Rank 0 prints the epoch's line (the job's loss and accuracy from the sums
 * given, the images/s of every rank and of the job); every rank calls it,
 * with its own dt (seconds) and mine (images), since it gathers them. */
void mt_epoch_line(unsigned e, double loss_sum, uint64_t seen, uint64_t correct, double dt,
                   uint64_t mine);

/* The CUDA device this rank should use for o->device (-2 auto, -1, N), or -1
 * for the CPU path; `why` says why not a GPU. Dies when a device was named
 * and cannot be had. Built without CUDA: always -1. */
int mt_gpu_pick(const mt_opts *o, const feeder_dist *d, const char **why);

/* Set the loader options of the GPU path (device, float32 NCHW normalised on
 * the GPU) on `ld` before start. */
void mt_gpu_configure(feeder_loader *ld, int device);

/* Train o->epochs epochs on device batches from the started loader `ld`,
 * averaging gradients across the job, filling ep[0 .. epochs) and *res. */
void mt_gpu_train(const mt_opts *o, const feeder_dist *d, feeder_loader *ld, int device,
                  int classes, mt_epoch *ep, mt_result *res);

#endif
