/*
 * The augment kernels' launchers (augment.cu), callable from C: the
 * photometric steps of the augment plan (colour jitter, random grayscale,
 * Gaussian blur) and the batch mixes, on a device batch of uint8 samples in place, on the
 * copy stream. The random parameters are drawn on the host with augment/'s
 * draws (augment/draw.c) and packed per sample (feeder__daug_px); the
 * kernels port color.c's and mix.c's arithmetic op for op (float products
 * and sums in torch's order, no fused multiply-adds, the same truncations),
 * so a device batch equals the host's within +-1, and exactly where the CPU
 * op is exact.
 */
#ifndef FEEDER_CUDA_AUGMENT_H
#define FEEDER_CUDA_AUGMENT_H

#include <stdint.h>

/* The ops a position of a step may hold (a jitter step's four positions are
 * its random order; a grayscale step uses position 0). */
enum {
    FEEDER__DAUG_BRIGHTNESS = 0,
    FEEDER__DAUG_CONTRAST = 1,
    FEEDER__DAUG_SATURATION = 2,
    FEEDER__DAUG_HUE = 3,
    FEEDER__DAUG_GRAY = 4,
    FEEDER__DAUG_NONE = 0xFF
};

/* One sample's parameters for one step: op[j] the op at position j; for
 * brightness, contrast and saturation (op o) the blend weights r[o] =
 * (float)factor and q[o] = (float)(1 - factor), as color.c computes them;
 * hue the shift, (float)shift. */
typedef struct feeder__daug_px {
    float r[3], q[3];
    float hue;
    uint8_t op[4];
} feeder__daug_px;

/* Room for one sample's Gaussian kernel (feeder_augment_blur: ksize <= 63). */
#define FEEDER__DAUG_KMAX 64

#ifdef __cplusplus
extern "C" {
#endif

/* Position `pos` (0..3) of one step on `count` samples of h x w x 3 at
 * `data` (nchw: planar, else interleaved): each sample n runs
 * params[n].op[pos]. `params` is on the device (count entries). `contrast`:
 * some sample runs contrast there: its grayscale mean is summed first into
 * `sums` (count unsigned long longs on the device). Returns a cudaError_t
 * (0 = success). */
int feeder__daug_position_launch(uint8_t *data, uint32_t count, uint32_t h, uint32_t w, int nchw,
                                 const feeder__daug_px *params, int pos, int contrast,
                                 unsigned long long *sums, void *stream);

/* The batch mix: kind 1 mixup (every byte (A x + B y + 2^15) >> 16), 2
 * cutmix (the box [x1, x2) x [y1, y2) from the partner), with sample n's
 * partner n - 1 (0's the last), read from `tmp`, a device copy of the batch
 * that this call makes first. Returns a cudaError_t. */
int feeder__daug_mix_launch(uint8_t *data, uint8_t *tmp, uint32_t count, uint32_t h, uint32_t w,
                            int nchw, int kind, uint32_t A, uint32_t B, const uint32_t box[4],
                            void *stream);

/* Gaussian blur (augment/blur.c's two float passes) of `count` samples:
 * sample n's channels one at a time, along rows into `plane` (count x h x
 * w floats on the device), then along columns back into `data`, with the
 * ksize weights at kw[n * FEEDER__DAUG_KMAX] (device), reflect padding
 * (ksize / 2 < w and < h: the caller skips other sizes, as blur.c does),
 * each sum from 0 in weight order, rounded half to even and clamped.
 * Returns a cudaError_t. */
int feeder__daug_blur_launch(uint8_t *data, uint32_t count, uint32_t h, uint32_t w, int nchw,
                             const float *kw, uint32_t ksize, float *plane, void *stream);

#ifdef __cplusplus
}
#endif
#endif
