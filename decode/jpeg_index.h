/*
 * Where each MCU row of a JPEG's entropy-coded data begins, kept per sample
 * and shared by every worker of a loader (decode/jpeg_index.c).
 *
 * WHY. The ROI decoder must entropy-decode every MCU before the last one it
 * needs: the rows above the crop and the columns right of it, whose pixels
 * it never computes (Huffman codes have no byte boundaries, and each block's
 * DC is coded against the one before). That is about half of a random crop's
 * decode time. The bit position and the DC predictors at the start of each
 * MCU row, recorded the first time a sample is decoded, let every later
 * decode of it start at the crop's first row and leave each row after the
 * crop's last column. libjpeg-turbo has no API for this (restart markers
 * would give the same jumps, but few files carry them, and with them
 * libjpeg-turbo leaves its fast Huffman path).
 *
 * The table lives in one shared anonymous mapping made before the workers
 * fork: a word per sample that names its block, and blocks allocated from a
 * byte budget, never freed. A block is written whole and then published
 * with a release store; a reader that finds none, or one made from other
 * bytes (the key is the file's length and CRC32C), decodes without it and
 * records a new one. When the budget is spent, later samples go without.
 */
#ifndef FEEDER_DECODE_JPEG_INDEX_H
#define FEEDER_DECODE_JPEG_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* The entropy decoder's state at the start of one MCU row. */
typedef struct feeder__jrow {
    uint64_t bits;   /* libjpeg's bit buffer (its low `nbits` bits are unread) */
    uint32_t off;    /* bytes of the file read into it */
    uint8_t nbits;   /* bits left in it */
    uint8_t pad;
    int16_t dc[3];   /* each component's last DC value */
} feeder__jrow;

typedef struct feeder__jindex feeder__jindex;

/* A table for `nsamples` samples with `budget` bytes of rows, in a shared
 * anonymous mapping (pages are backed as they are written). 0, -EINVAL for
 * a zero count or budget, or -ENOMEM / -errno of mmap. */
int feeder__jindex_create(uint64_t nsamples, uint64_t budget, feeder__jindex **out);
void feeder__jindex_destroy(feeder__jindex *ix);

/* The key of a file's bytes: its length and CRC32C. */
uint64_t feeder__jindex_key(const uint8_t *p, size_t len);

/* Sample i's rows recorded from a file with this key: the row count in
 * *nrows, or NULL (none, another file, i out of range). */
const feeder__jrow *feeder__jindex_find(const feeder__jindex *ix, uint64_t i, uint64_t key,
                                        uint32_t *nrows);

/* Publish `nrows` rows of sample i, unless as many are there already or the
 * budget is spent. Safe from any number of processes at once. */
void feeder__jindex_put(feeder__jindex *ix, uint64_t i, uint64_t key, const feeder__jrow *rows,
                        uint32_t nrows);

/* Bytes of the blocks published so far (at most the budget). */
uint64_t feeder__jindex_used(const feeder__jindex *ix);

#endif
