/* The normalise kernel's launcher (normalize.cu), callable from C. */
#ifndef FEEDER_CUDA_NORMALIZE_H
#define FEEDER_CUDA_NORMALIZE_H

#include <stdint.h>

/* Mirrors of feeder_layout and feeder_dtype, so the .cu file needs no feeder.h. */
#define FEEDER__NCHW 1
#define FEEDER__F16 1
#define FEEDER__BF16 2
#define FEEDER__F32 3

#ifdef __cplusplus
extern "C" {
#endif

/* out = fmaf(pixel, scale[c], shift[c]) with scale = 1 / (255 std) and
 * shift = -mean / std, in float, then rounded to nearest-even for the
 * 16-bit types. A CPU reference that uses these parameters and fmaf gets
 * the same bits. */
void feeder__normalize_params(const float mean[3], const float std[3], float scale[3],
                              float shift[3]);

/* n samples of h x w x channels uint8 (NHWC; channels 3, or 1: gray, which
 * takes mean[0] and std[0] and is the same in either layout) at `in` to
 * `out` in out_layout and dtype, on `stream` (a cudaStream_t). Returns a
 * cudaError_t (0 = success; cudaErrorInvalidValue for other channels). */
int feeder__normalize_launch(const uint8_t *in, void *out, uint32_t n, uint32_t h, uint32_t w,
                             int channels, int out_layout, int dtype, const float mean[3],
                             const float std[3], void *stream);

#ifdef __cplusplus
}
#endif
#endif
