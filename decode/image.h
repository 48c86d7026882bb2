/*
 * What the decoders (jpeg.c, png.c, webp.c) share with the format table
 * (format.c) and the dispatch (decode.c): the decoded image's shape, each
 * format's entry points, the pixel-limit check and the error exit
 * (image.c). image.c is the lowest file of decode/'s decoders: it calls
 * none of them.
 */
#ifndef FEEDER_DECODE_IMAGE_H
#define FEEDER_DECODE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "decode/transform.h"

/* A decoded image in a scratch buffer: w x h pixels of `channels` (1, 3 or 4)
 * bytes, rows `stride` bytes apart. */
typedef struct feeder__image {
    uint32_t w, h;
    size_t stride;
    int channels;
} feeder__image;

/* A whole-image decode (a format row's `whole`, decode/format.h): the image
 * into pix, growing it, and in *c the crop box of (seed, epoch, index) in the
 * pixels of the image it decoded. Returns 0, FEEDER_EDECODE (err holds the
 * library's text), FEEDER_ETOOBIG or -ENOMEM. */
typedef int (*feeder__whole_fn)(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                                size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                                feeder__image *img, feeder__crop *c, char *err, size_t errlen);

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

/* feeder__png_decode as a feeder__whole_fn: the crop box of the whole image. */
int feeder__png_whole(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                      size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                      feeder__image *img, feeder__crop *c, char *err, size_t errlen);

/* Format rows' sniffs: 1 when `len` bytes at p start with the format's magic
 * (JPEG FF D8, PNG's 8-byte signature, WebP "RIFF" size "WEBP"), else 0. */
int feeder__jpeg_sniff(const uint8_t *p, size_t len);
int feeder__png_sniff(const uint8_t *p, size_t len);
int feeder__webp_sniff(const uint8_t *p, size_t len);

/* JPEG's row decoder (jpeg.c): TURBO or ROI as t->decoder says. */
int feeder__jpeg_sample(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                        size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                        uint8_t *dst, feeder__decode_times *times, char *err, size_t errlen);

/* A decoder's scratch for the whole-image formats: its pixel buffer and its
 * resizer (jpeg.c owns the decoder). */
void feeder__decoder_scratch(feeder__decoder *d, feeder__buf **pix, feeder__resizer **rs);

/* Free whatever scratch grew past what a decoder keeps between images. */
void feeder__decoder_shed(feeder__decoder *d);

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
