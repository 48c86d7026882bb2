/*
 * decode/transform.h: what every decoder of decode/ shares: the transform
 * each sample takes, its crop box, the decoder handle, the scratch buffers,
 * the resizer and the error exit. Included by decode.h for the rooms above;
 * the files of decode/ include this one, so decode.h's dispatcher
 * (decode.c) stands above them.
 */
#ifndef FEEDER_DECODE_TRANSFORM_H
#define FEEDER_DECODE_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h" /* feeder__fail, every decoder's error exit */
#include "feeder.h"

/* What to make of every image; fixed when the loader starts. */
typedef struct feeder__transform {
    int pipeline;          /* feeder_pipeline */
    int decoder;           /* feeder_decoder */
    int layout;            /* feeder_layout */
    uint32_t height;       /* output height */
    uint32_t width;        /* output width */
    uint32_t resize;       /* eval: shorter side before the centre crop */
    double scale_min, scale_max; /* train: RandomResizedCrop area share */
    double ratio_min, ratio_max; /* train: aspect ratio range */
    double flip_prob;      /* train: horizontal flip probability */
    uint64_t max_pixels;   /* largest width*height accepted, 0 = no limit */
    uint32_t channels;     /* 1: grayscale output; anything else (0 included): RGB */
    uint64_t max_decode_bytes; /* largest memory one image's decode may take, 0 = no limit */
    uint32_t max_side;     /* largest width or height accepted, 0 = no limit */
} feeder__transform;

/* Channels of the samples `t` makes: 1 or 3. */
static inline int feeder__transform_channels(const feeder__transform *t)
{
    return t->channels == 1 ? 1 : 3;
}

/* Where one image sits in the source and how it lands in the output:
 * the crop box in source pixels and whether it is mirrored. Computed from the
 * image size alone and (seed, epoch, index) alone, so every worker and every
 * decoder agrees. */
typedef struct feeder__crop {
    uint32_t x, y, w, h;  /* crop box in source pixels */
    int flip;             /* mirror horizontally */
    /* The same box before rounding to whole pixels (EVAL's box is a rational
     * number of source pixels; TRAIN and RESIZE boxes are whole already).
     * The decoders resize from this one, so EVAL lands on torchvision's
     * sampling grid exactly; x, y, w, h is it rounded (see crop.c). */
    double fx, fy, fw, fh;
} feeder__crop;

/* Does `decoder` (feeder_decoder) decode on the GPU (NVJPEG, HYBRID)? */
static inline int feeder__decoder_on_gpu(int decoder)
{
    return decoder == FEEDER_DECODER_NVJPEG || decoder == FEEDER_DECODER_HYBRID;
}

/* Compute the crop for an image of src_w x src_h under `t`:
 *  EVAL: torchvision Resize(resize) + CenterCrop(height, width), expressed as
 *        the source box that maps onto the output;
 *  TRAIN: torchvision RandomResizedCrop(scale, ratio) with 10 attempts and the
 *        same fallback, drawing from feeder_random(seed, epoch, index, k), then
 *        a flip with flip_prob;
 *  RESIZE: the whole image. */
void feeder__crop_compute(const feeder__transform *t, uint32_t src_w, uint32_t src_h,
                          uint64_t seed, uint64_t epoch, uint64_t index, feeder__crop *out);

/* The ROI decoder's DCT scaling for crop `c` under `t`, as M of libjpeg's
 * M/8: 1, 2 or 4 when the crop box scaled by M/8 is still at least 3/4 of the
 * output on both axes (the smallest such), else 8. */
unsigned feeder__roi_scale(const feeder__crop *c, const feeder__transform *t);

/* One axis of the region the ROI decoder decodes, in scaled pixels: the crop
 * box [b0, b0 + blen) plus the resizer's reach for an `out`-pixel output,
 * plus one, clamped to [0, n): rows or columns [*r0, *r1). */
void feeder__roi_axis(double b0, double blen, uint32_t out, uint32_t n, uint32_t *r0,
                      uint32_t *r1);

/* One per worker (or per thread): TurboJPEG handle, libjpeg state, scratch
 * buffers that grow to the largest image seen and are then reused. */
typedef struct feeder__decoder feeder__decoder;

/* 0 or -ENOMEM; *out set only on success. */
int feeder__decoder_create(feeder__decoder **out);
/* Accepts NULL. */
void feeder__decoder_destroy(feeder__decoder *d);

/* The shared table of MCU-row starts (decode/jpeg_index.h) the ROI decoder
 * reads and adds to, keyed by the `index` of feeder__decode_sample; NULL (the
 * default): none. Where libjpeg-turbo's private entropy state cannot be
 * relied on (see decode/jpeg.c), it is not used. */
struct feeder__jindex;
void feeder__decoder_set_index(feeder__decoder *d, struct feeder__jindex *ix);
/* How many decodes so far started from the index. */
uint64_t feeder__decoder_index_jumps(const feeder__decoder *d);

/* Per-stage time of the last feeder__decode_sample call, in ns. */
typedef struct feeder__decode_times {
    uint64_t decode_ns;
    uint64_t transform_ns;
} feeder__decode_times;

/* ------------------------------------------------------------------------ */
/* Scratch memory and the resizer (resize.c)                                 */
/* ------------------------------------------------------------------------ */

/* A growable scratch buffer, 64-byte aligned. Zero-initialised is empty. */
typedef struct feeder__buf {
    uint8_t *p;
    size_t cap;
} feeder__buf;

/* Make room for n bytes (contents not kept). 0 or -ENOMEM. */
int feeder__buf_reserve(feeder__buf *b, size_t n);
void feeder__buf_free(feeder__buf *b);

/* Which code path feeder__resize may use: the best the CPU has (AVX2, else
 * SSE2, else portable C), or a lower one for tests and benchmarks. Every path
 * gives byte-identical output. */
enum { FEEDER__RESIZE_AUTO = 0, FEEDER__RESIZE_SSE2 = 1, FEEDER__RESIZE_PORTABLE = 2 };

/* The resizer's reusable scratch (weight tables, intermediate rows). A
 * zero-initialised struct is ready to use; one per thread. */
typedef struct feeder__resizer {
    feeder__buf coef, tmp, row;
    int force; /* FEEDER__RESIZE_*: the highest code path allowed */
} feeder__resizer;

void feeder__resizer_free(feeder__resizer *r);

/* Resize the box (bx, by, bw, bh) of an RGB (src_channels 3) or RGBX (4)
 * image of src_w x src_h pixels, rows src_stride bytes apart, to
 * out_w x out_h RGB in `layout` (a gray image, src_channels 1, to out_w x
 * out_h gray: one plane, the same bytes in either layout) (FEEDER_LAYOUT_NHWC: interleaved rows;
 * FEEDER_LAYOUT_NCHW: three planes of out_h*out_w), mirrored left-right when
 * `flip`, into dst (out_w*out_h*3 bytes). The box is in source pixels and may
 * be fractional; it must lie inside the image. Pixels outside the box but
 * inside the image are used by the filter at the box's edges (pass a
 * sub-image to forbid that). Filter: antialiased triangle (Pillow BILINEAR /
 * torchvision antialias=True), fixed point; see resize.c for why this one.
 * Returns 0, FEEDER_EINVAL (bad sizes or box) or -ENOMEM. */
int feeder__resize(feeder__resizer *r, const uint8_t *src, uint32_t src_w, uint32_t src_h,
                   size_t src_stride, int src_channels, double bx, double by, double bw,
                   double bh, uint8_t *dst, uint32_t out_w, uint32_t out_h, int flip,
                   int layout);

/* The same filter in double precision with no intermediate rounding (NHWC,
 * no flip): the reference the tests measure against. Slow;
 * not used by the loader. 0, FEEDER_EINVAL or -ENOMEM. */
int feeder__resize_reference(const uint8_t *src, uint32_t src_w, uint32_t src_h,
                             size_t src_stride, int src_channels, double bx, double by,
                             double bw, double bh, uint8_t *dst, uint32_t out_w,
                             uint32_t out_h);

#endif
