/*
 * augment/pixel.h: small pixel functions that the CPU ops (augment/) and
 * their GPU ports (cuda/augment.cu) share, so both compute the same values
 * from one definition. Plain C; nvcc compiles them for host and device.
 * Includes nothing of CUDA.
 */
#ifndef FEEDER_AUGMENT_PIXEL_H
#define FEEDER_AUGMENT_PIXEL_H

#include <stdint.h>

#ifdef __CUDACC__
#define FEEDER__PIXEL_FN static __host__ __device__ __forceinline__
#else
#define FEEDER__PIXEL_FN static inline
#endif

/* torch's float-to-uint8 cast after a clamp to [0, 255]: truncation, NaN
 * and negatives to 0 (the blends' and blur's final step). */
FEEDER__PIXEL_FN uint8_t feeder__trunc_u8(float v)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

/* v clamped to [0, 255], still a float. */
FEEDER__PIXEL_FN float feeder__clamp255(float v)
{
    v = v > 0.0f ? v : 0.0f;
    return v < 255.0f ? v : 255.0f;
}

/* Reflect padding's source position of i on an axis of n pixels (no edge
 * repeat), for i within n - 1 of the axis. */
FEEDER__PIXEL_FN uint32_t feeder__reflect(int64_t i, uint32_t n)
{
    if (n == 1)
        return 0;
    while (i < 0 || i >= (int64_t)n)
        i = i < 0 ? -i : 2 * ((int64_t)n - 1) - i;
    return (uint32_t)i;
}

#endif
