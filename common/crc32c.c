/*
 * CRC32C (Castagnoli, the iSCSI/ext4 polynomial), the checksum of packed
 * records and headers.
 *
 * Written by hand because it is a few lines and nothing in Debian 12 does it
 * better: no C library there offers CRC32C (only python3-crc32c), zlib's crc32
 * is the other polynomial and has no hardware path for this one. On x86-64
 * the SSE4.2 instruction does 8 bytes per step (about 8 GB/s on one core,
 * bounded by its 3-cycle latency); other CPUs use a byte-wise table, which is
 * slow (~0.5 GB/s) but only matters where VERIFY_CRC is on.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/common.h"

#define POLY 0x82F63B78u /* reflected 0x1EDC6F41 */

static uint32_t table[256];
static int have_sse42;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n)
{
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                           size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

uint32_t feeder__crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&once, init);
    uint32_t c = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_sse42)
        return ~crc_sse42(c, data, len);
#endif
    return ~crc_table(c, data, len);
}

int feeder__crc32c_hardware(void)
{
    pthread_once(&once, init);
    return have_sse42;
}

uint32_t feeder__crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&once, init);
    return ~crc_table(~crc, data, len);
}
