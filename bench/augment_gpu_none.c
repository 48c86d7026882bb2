/* bench_augment's GPU rows without a CUDA build: none (augment_gpu.h). */
#include <stdio.h>

#include "augment_gpu.h"

const char *const bench_gpu_names[BENCH_GPU_NOPS] = {0};
const char *const bench_gpu_params[BENCH_GPU_NOPS] = {0};

int bench_gpu_augment(const uint8_t *hwc, const uint8_t *chw, uint32_t w, uint32_t h,
                      double seconds, double us[BENCH_GPU_NOPS][2], char *device, size_t len,
                      char *why, size_t whylen)
{
    (void)hwc, (void)chw, (void)w, (void)h, (void)seconds, (void)us, (void)device, (void)len;
    snprintf(why, whylen, "built without CUDA");
    return -1;
}
