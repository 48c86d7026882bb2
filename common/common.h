/*
 * common/: what every room shares and nothing else. The lowest room: it
 * includes only the public header, the C library and ISA-L (crc32c.c). Result
 * codes and their text (errors.c), the Philox generator behind every random
 * choice (random.c, public as feeder_random), CRC32C (crc32c.c), the clock,
 * message formatting and half-even rounding (util.c), the timeline trace (trace.c, trace.h) and the
 * NVTX macros (nvtx.h), brace ranges for shard sets (brace.c, brace.h), and
 * debug builds' record of live handles (handles.c).
 */
#ifndef FEEDER_COMMON_H
#define FEEDER_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "feeder.h"

/* snprintf into a fixed buffer, never failing (truncates). NULL or 0-length
 * buffers are ignored. */
void feeder__fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* feeder__fmt, then return rc: the error exit of a function that reports
 * into its caller's buffer (the decoders, the pack and state parsers). */
int feeder__fail(char *buf, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Debug builds (no NDEBUG, or FEEDER_DEBUG) keep a record of live loaders
 * and the batch structs they lent (handles.c), so that feeder_next,
 * feeder_batch_release and feeder_loader_destroy refuse a destroyed loader
 * or its batch (FEEDER_ESTATE, with feeder__handle_misuse's message, which
 * feeder_loader_errmsg then gives) instead of reading freed memory. */
#if !defined(NDEBUG) || defined(FEEDER_DEBUG)
#define FEEDER__CHECK_HANDLES 1
void feeder__handle_add_loader(const void *ld);
/* Forget a loader and every batch it lent. */
void feeder__handle_remove_loader(const void *ld);
int feeder__handle_loader_live(const void *ld);
void feeder__handle_add_batch(const void *ld, const void *b);
int feeder__handle_batch_live(const void *b);
/* Set this thread's misuse message; returns rc. */
int feeder__handle_misuse(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *feeder__handle_misuse_msg(void);
#else
#define FEEDER__CHECK_HANDLES 0
#endif

/* CLOCK_MONOTONIC in nanoseconds: the same clock in every process, so a
 * worker's spans and the parent's line up. */
uint64_t feeder__now_ns(void);

/* Python's round(): halves go to the even neighbour, as torchvision's crop
 * and erase sizes and affine shifts round. Written out rather than relying on
 * rint() so the result does not depend on the caller's fenv rounding mode. */
double feeder__round_half_even(double v);

/* Bytes [off, off + len) of fd into dst, pread again after a short read or
 * EINTR: how many it read (less than len only at the end of the file), or
 * -errno. */
long feeder__pread_full(int fd, uint64_t off, void *dst, size_t len);

/* Little-endian numbers of files and blobs, byte by byte: the same on any
 * host and at any alignment. */
static inline void feeder__put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void feeder__put_le64(uint8_t *p, uint64_t v)
{
    feeder__put_le32(p, (uint32_t)v);
    feeder__put_le32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t feeder__get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t feeder__get_le64(const uint8_t *p)
{
    return (uint64_t)feeder__get_le32(p) | (uint64_t)feeder__get_le32(p + 4) << 32;
}

/* CRC32C of `len` bytes, chained: feeder__crc32c(feeder__crc32c(0, a), b) is the
 * CRC of a followed by b. Start with 0. Thread-safe. */
uint32_t feeder__crc32c(uint32_t crc, const void *data, size_t len);
/* The same from a byte-wise table, independent of ISA-L (the tests compare
 * the two). */
uint32_t feeder__crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
