/*
 * bench_augment's GPU rows: the augment kernels (cuda/augment.cu) on a
 * device batch, per image, timed with CUDA events. augment_gpu.c with a
 * CUDA build, augment_gpu_none.c without.
 */
#ifndef FEEDER_BENCH_AUGMENT_GPU_H
#define FEEDER_BENCH_AUGMENT_GPU_H

#include <stddef.h>
#include <stdint.h>

enum { BENCH_GPU_NOPS = 9, BENCH_GPU_BATCH = 256 };

/* The rows' names (as bench_augment's CPU rows name the same ops) and
 * parameters. */
extern const char *const bench_gpu_names[BENCH_GPU_NOPS];
extern const char *const bench_gpu_params[BENCH_GPU_NOPS];

/* Time every row on device 0 in both layouts (the image `hwc` and `chw`,
 * w x h, copied to each of BENCH_GPU_BATCH samples): us[k][layout] the
 * median over 5 rounds of at least seconds / 5 each, in microseconds of
 * GPU time per image. 0, or -1 with `why` (no CUDA build, no device, a CUDA
 * error). The device name into `device` (len bytes). */
int bench_gpu_augment(const uint8_t *hwc, const uint8_t *chw, uint32_t w, uint32_t h,
                      double seconds, double us[BENCH_GPU_NOPS][2], char *device, size_t len,
                      char *why, size_t whylen);

#endif
