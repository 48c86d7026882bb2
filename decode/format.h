/*
 * decode/format.h: the image formats decode/ reads, one table row each: the
 * name shown to users, the file extensions that hold it, how its first bytes
 * are recognised (never its name) and how it is decoded. The folder scan,
 * the tar index and every message that lists formats or extensions read them
 * from here. A new format is one file in decode/ (its sniff and its decode)
 * and one row in format.c.
 */
#ifndef FEEDER_DECODE_FORMAT_H
#define FEEDER_DECODE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "decode/transform.h"
#include "decode/image.h"

/* Decode one sample with the format's own decoders (JPEG: t->decoder), with
 * feeder__decode_sample's arguments and results; `d` checked already. */
typedef int (*feeder__sample_fn)(feeder__decoder *d, const feeder__transform *t,
                                 const uint8_t *p, size_t len, uint64_t seed, uint64_t epoch,
                                 uint64_t index, uint8_t *dst, feeder__decode_times *times,
                                 char *err, size_t errlen);

typedef struct feeder__format {
    const char *name;                      /* "JPEG": in messages */
    const char *const *extensions;         /* lower case, no dot, NULL-ended: folders and
                                              tar shards take them, in this order */
    const char *const *folder_extensions;  /* folders take these too (NULL: none) */
    int (*sniff)(const uint8_t *p, size_t len); /* 1: the bytes are this format */
    int gpu;                               /* the GPU decoders (nvJPEG) take it */
    /* One of the two: a decoder of its own, or a whole-image decode that then
     * takes TURBO's crop box, resize, flip and layout (feeder__decode_sample). */
    feeder__sample_fn decode;
    feeder__whole_fn whole;
} feeder__format;

/* The table, in the order messages list it; n rows. */
const feeder__format *feeder__formats(size_t *n);

/* The row whose sniff takes `len` bytes at p, or NULL. */
const feeder__format *feeder__format_of(const uint8_t *p, size_t len);

/* FEEDER_EDECODE with "not a JPEG, PNG or WebP file (starts 47 49 46 38:
 * GIF)" in err: the formats of the table, the first bytes and a guess at
 * what they are. */
int feeder__format_unknown(const uint8_t *p, size_t len, char *err, size_t errlen);

/* Where a file name extension is taken: image folders take the folder
 * extensions too, tar shards (WebDataset's names) only the others. */
enum { FEEDER__EXT_TAR = 0, FEEDER__EXT_FOLDER = 1 };

/* Rank of extension `ext` (no dot, any case) among those `where` takes, from
 * 1 in table order ("jpg" 1, "jpeg" 2, ...), or 0 when it is no image's. */
int feeder__format_ext_rank(const char *ext, int where);

/* The extensions `where` takes as users read them, ".jpg, .jpeg, .png or
 * .webp", into buf (n bytes, always terminated). */
void feeder__format_ext_list(int where, char *buf, size_t n);

#endif
