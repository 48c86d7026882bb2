/*
 * decode/: image bytes in, one transformed sample out, written straight into
 * its place in a batch slot. Depends only on include/feeder.h (for
 * feeder_random and the enums), libjpeg-turbo, libspng, libwebp and the
 * resizer; never on loader/, collate/ or cuda/. The room's face: what the
 * rooms above use, the dispatcher (decode.c) and, through transform.h, the
 * transform, the crop, the decoder handle and the resizer.
 */
#ifndef FEEDER_DECODE_H
#define FEEDER_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "decode/transform.h"

/* Decode `len` bytes of an image and write the transformed sample (height x
 * width x 3 uint8 RGB, in t->layout; height x width x 1 gray when
 * t->channels is 1: libjpeg's gray decode for JPEG, Pillow's L of the RGB
 * decode for CMYK JPEGs, PNG and WebP) to `dst`. The format comes from the
 * first bytes (decode/format.h's table): JPEG goes to t->decoder; PNG (libspng) and
 * WebP (libwebp) are decoded whole and take the same crop and resize as
 * TURBO, alpha dropped; anything else fails with FEEDER_EDECODE naming what
 * its first bytes look like. Grayscale, CMYK/YCCK (as Pillow
 * converts them) and progressive JPEGs come out as RGB. Returns 0, or:
 *   FEEDER_EDECODE  empty, not a JPEG, corrupt or truncated (err holds
 *                   libjpeg's text); every libjpeg warning counts as an error.
 *                   FEEDER_DECODER_ROI reads only down to the crop's last row,
 *                   so damage below it goes unseen there;
 *   FEEDER_ETOOBIG  width*height over t->max_pixels, a side over t->max_side,
 *                   or the memory the decode takes over t->max_decode_bytes
 *                   (TURBO's whole image, PNG, WebP; the ROI decoder's region
 *                   is not counted), all checked from the header, before any
 *                   pixel is decoded; dst untouched. Scratch over 32 MiB is
 *                   freed before the call returns,
 *   FEEDER_EINVAL   NULL d, t or dst, a zero output size, an unknown decoder,
 *   -ENOMEM.
 * On error `err` (errlen bytes; may be NULL) holds the decoder's own text,
 * without the path (the caller adds path and index). dst may have been partly
 * written. The decoder stays usable after any error. `times` may be NULL.
 * Thread-safety: one decoder per thread. */
int feeder__decode_sample(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                          size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                          uint8_t *dst, feeder__decode_times *times, char *err,
                          size_t errlen);

/* Where a GPU decoder sends `len` bytes (FEEDER__ROUTE_*, decode/jpeg_header.h):
 * a format of the table the engine does not take (PNG, WebP) is
 * FEEDER__ROUTE_FORMAT; anything else goes by its JPEG header under the
 * pixel limit `max_pixels` (0: none): CORRUPT when none is found (the CPU
 * decoder then names what the bytes are). Pure: reads only the buffer. */
int feeder__decode_route(const uint8_t *p, size_t len, uint64_t max_pixels);

#endif
