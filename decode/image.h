/*
 * What the whole-image decoders (png.c, webp.c) share with the dispatch
 * (format.c) and the JPEG decoders (jpeg.c): the decoded image's shape, the
 * pixel-limit check and the error exit (image.c). The lowest file of
 * decode/'s decoders: it calls none of them.
 */
#ifndef FEEDER_DECODE_IMAGE_H
#define FEEDER_DECODE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "decode/decode.h"

/* A decoded image in a scratch buffer: w x h pixels of `channels` (1, 3 or 4)
 * bytes, rows `stride` bytes apart. */
typedef struct feeder__image {
    uint32_t w, h;
    size_t stride;
    int channels;
} feeder__image;

/* Decode a PNG (libspng) or a WebP (libwebp) into pix, growing it; the pixel
 * limit is checked from the header before anything is allocated. Returns 0,
 * FEEDER_EDECODE (corrupt, truncated, animated WebP; err holds the library's
 * text), FEEDER_ETOOBIG or -ENOMEM. */
int feeder__png_decode(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                       size_t len, feeder__image *img, char *err, size_t errlen);
/* A WebP also takes the sample's (seed, epoch, index) and leaves in *c the
 * crop box in the pixels of the image it decoded: one whose whole decode
 * would pass t->max_decode_bytes is decoded at a reduced scale (libwebp's
 * own rescaler) that still leaves the box twice the output on both axes,
 * when that fits. */
int feeder__webp_decode(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                        size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                        feeder__image *img, feeder__crop *c, char *err, size_t errlen);

/* The limits every decoder checks from the header, before it allocates
 * anything: 0, FEEDER_EDECODE for no pixels, FEEDER_ETOOBIG for more than
 * t->max_pixels, a side over t->max_side, or `need` (the bytes the decode
 * takes, reckoned from the header; `what` says what they are) over
 * t->max_decode_bytes. */
int feeder__check_image(const feeder__transform *t, uint32_t w, uint32_t h, uint64_t need,
                        const char *what, char *err, size_t errlen);
/* feeder__check_image without the byte limit. */
int feeder__check_pixels(const feeder__transform *t, uint32_t w, uint32_t h, char *err,
                         size_t errlen);

/* Grayscale in place, as Pillow's convert("L") (torchvision's Grayscale on
 * a PIL image): L = (19595 R + 38470 G + 7471 B + 32768) >> 16, the ITU-R
 * 601-2 weights 0.299/0.587/0.114 in 16-bit fixed point. Each row of w
 * pixels of `channels` (3 or 4) bytes becomes w gray bytes at the row's
 * start; rows stay `stride` bytes apart. */
void feeder__rgb_to_gray(uint8_t *p, uint32_t w, uint32_t h, size_t stride, int channels);

#endif
