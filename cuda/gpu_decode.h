/*
 * cuda/gpu_decode.h: the GPU decoder behind FEEDER_DECODER_NVJPEG and HYBRID. Whole
 * batches of JPEG bitstreams (host memory: the batch slot) in, transformed
 * uint8 samples out, written straight into their places in a device batch,
 * all on one CUDA stream:
 *
 *   1. every header is parsed on the host (nvjpegJpegStreamParseHeader) to
 *      learn the size, check the pixel limit and ask whether the batched
 *      decoder takes it (the hardware engine refuses progressive JPEGs,
 *      4:1:0 and 4:1:1, among others);
 *   2. the accepted ones are decoded with one nvjpegDecodeBatched call into a
 *      device scratch buffer, full size: interleaved RGB (NVJPEG_OUTPUT_RGBI),
 *      or with grayscale output (t->channels 1) the Y plane alone
 *      (NVJPEG_OUTPUT_Y: the luma of a YCbCr JPEG, the plane of a gray one,
 *      as libjpeg's JCS_GRAYSCALE gives the CPU decoders); on the hardware
 *      JPEG engine where the GPU has one (A100, H100, ...), else nvJPEG's GPU
 *      hybrid backend;
 *   3. one kernel crops, resizes (the CPU resizer's antialiased triangle
 *      filter, in float), flips and lays out every sample (3 channels or 1),
 *      with the crop boxes computed on the host by feeder__crop_compute, so
 *      the same samples and boxes as the CPU decoders.
 *
 * What the decoder refuses is handed back to the caller, which decodes it
 * on the CPU. Depends on transform.h, nvJPEG and the CUDA runtime; built only
 * when nvJPEG is found (gpu_decode_none.c otherwise).
 *
 * Threading: a decoder is one thread's (each GPU decode thread has its
 * own); decoders on one device share the JPEG engines' lock
 * (feeder__gpu_decoder_share_engines); the stream is the caller's.
 */
#ifndef FEEDER_CUDA_GPU_DECODE_H
#define FEEDER_CUDA_GPU_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "decode/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct feeder__gpu_decoder feeder__gpu_decoder;

/* 1 when this build has nvJPEG (feeder__gpu_decoder_create may work), else 0. */
int feeder__gpu_decoder_built(void);

/* Make a decoder on the current CUDA device: the hardware backend when the
 * device has JPEG engines, else the GPU hybrid backend. 0, or
 * FEEDER_EUNSUPPORTED (built without nvJPEG, or nvJPEG cannot start here)
 * with the reason in `why`, or -ENOMEM. */
int feeder__gpu_decoder_create(feeder__gpu_decoder **out, char *why, size_t whylen);
void feeder__gpu_decoder_destroy(feeder__gpu_decoder *d);
/* Decoders that share the device's JPEG engines hold `lock` around each
 * batched decode call (the header parse and set-up stay outside it): two
 * hardware decode calls at once have hung nvJPEG for good on the web set
 * (docs/RELIABILITY.md). NULL: no lock. */
void feeder__gpu_decoder_share_engines(feeder__gpu_decoder *d, void *lock);
/* A watchdog's stamp (an _Atomic uint64_t, CLOCK_MONOTONIC ns): set when a
 * batched hardware call (with its wait for the engines' lock) begins, 0 when
 * it returns; the header parse and the buffers' growth, which may wait for
 * the stream (and so for a user's slow step), stay outside it. NULL: none. */
void feeder__gpu_decoder_watch(feeder__gpu_decoder *d, void *stamp);
/* "nvJPEG hardware (N engines)" or "nvJPEG GPU hybrid". Static or owned. */
const char *feeder__gpu_decoder_name(const feeder__gpu_decoder *d);

/* The scratch buffers the decoded images go through, used one call each in
 * turn. The hardware engine writes one when feeder__gpu_decode is called,
 * not in stream order: before a call, the caller waits on the host until
 * the work it enqueued after the call FEEDER__GPU_SCRATCH calls back (its
 * resize, the last reader of the same buffer) has run. Which buffer the
 * next call takes: 0 .. FEEDER__GPU_SCRATCH - 1. */
#define FEEDER__GPU_SCRATCH 2
unsigned feeder__gpu_decoder_scratch(const feeder__gpu_decoder *d);

/* One image of a batch for the GPU. */
typedef struct feeder__gpu_image {
    const uint8_t *jpeg;  /* host bytes (pinned or registered memory is faster) */
    size_t len;
    uint64_t index;       /* dataset index: picks the random crop and flip */
    uint32_t pos;         /* place in the output batch */
} feeder__gpu_image;

/* Decode `n` images and write each transformed sample (t->height x t->width x
 * feeder__transform_channels(t) uint8, t->layout) to dst + pos * sample_bytes
 * (device memory), on `stream`.
 * Images the decoder does not take are not written: their numbers in
 * img[] go to refused[] (capacity n), their count to *nrefused. Returns 0
 * once the work is enqueued (the host bytes may be reused only after the
 * stream has passed it), or FEEDER_ECUDA / -ENOMEM with `err` set; after an
 * error nothing of this call is on the stream except what failed. A batched
 * decode that nvJPEG fails as a whole refuses every image of the call.
 * `stream` is a cudaStream_t. */
int feeder__gpu_decode(feeder__gpu_decoder *d, const feeder__transform *t, uint64_t seed,
                       uint64_t epoch, const feeder__gpu_image *img, uint32_t n, uint8_t *dst,
                       size_t sample_bytes, void *stream, uint32_t *refused,
                       uint32_t *nrefused, char *err, size_t errlen);

/* The crop, resize, flip and layout kernel on its own (resize_gpu.cu), for
 * decoded images already on the device. */
typedef struct feeder__gpu_resize_job {
    const uint8_t *src;   /* device: interleaved RGB, or one gray plane (the launch's channels) */
    uint32_t src_w, src_h;
    uint32_t src_pitch;   /* bytes between rows */
    uint32_t pos;         /* output place */
    float bx, by, bw, bh; /* crop box in source pixels (feeder__crop's fx, fy, fw, fh) */
    int flip;
} feeder__gpu_resize_job;

/* Launch the kernel for `n` jobs (host array, copied). `channels` is every
 * source's and every sample's: 3 (RGB in, out_h x out_w x 3 in `layout`) or
 * 1 (a gray plane in, one plane out, the same bytes in either layout); any
 * other count is cudaErrorInvalidValue. `scratch` is a device buffer of at
 * least n * sizeof(feeder__gpu_resize_job) bytes that the stream owns until
 * the kernel ends. Returns a cudaError_t. */
int feeder__gpu_resize_launch(const feeder__gpu_resize_job *jobs, uint32_t n, void *scratch,
                              uint8_t *dst, size_t sample_bytes, uint32_t out_w,
                              uint32_t out_h, int layout, int channels, void *stream);

#ifdef __cplusplus
}
#endif
#endif
