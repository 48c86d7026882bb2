/*
 * decode/format.h: which image format a file holds, read from its first
 * bytes (never its name), and the decoders for the formats other than JPEG
 * (png.c, webp.c). Each of those decodes the whole image into the JPEG
 * decoder's scratch, then takes the same crop box, resize, flip and layout as
 * the TURBO path, so a picture comes out the same whatever file it came from.
 */
#ifndef FEEDER_DECODE_FORMAT_H
#define FEEDER_DECODE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "decode/decode.h"
#include "decode/image.h"

enum { FEEDER__FMT_UNKNOWN = 0, FEEDER__FMT_JPEG = 1, FEEDER__FMT_PNG = 2, FEEDER__FMT_WEBP = 3 };

/* The format of `len` bytes at p from their magic bytes: JPEG FF D8, PNG's
 * 8-byte signature, WebP "RIFF" size "WEBP". */
int feeder__format_sniff(const uint8_t *p, size_t len);

/* feeder__decode_sample for every format but JPEG (`fmt` from
 * feeder__format_sniff, FEEDER__FMT_UNKNOWN included: that one fails with
 * FEEDER_EDECODE naming what the first bytes look like). pix and rs are the
 * calling decoder's scratch and resizer. Same results as
 * feeder__decode_sample. */
int feeder__decode_other(int fmt, feeder__buf *pix, feeder__resizer *rs,
                         const feeder__transform *t, const uint8_t *p, size_t len,
                         uint64_t seed, uint64_t epoch, uint64_t index, uint8_t *dst,
                         feeder__decode_times *times, char *err, size_t errlen);

#endif
