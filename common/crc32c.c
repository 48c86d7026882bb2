/*
 * CRC32C (Castagnoli, the iSCSI/ext4 polynomial), the checksum of packed
 * records and headers.
 *
 * Intel's ISA-L (libisal, Debian's libisal-dev) computes it: crc32_iscsi
 * picks at its first call the best code for the CPU: folding 64-byte blocks
 * with carry-less multiplies (AVX-512 VPCLMULQDQ) where the CPU has them, else
 * three interleaved SSE4.2 crc32 streams, its own code on other architectures.
 * One crc32 stream, what this file had, is bound by the instruction's latency
 * (3 cycles for 8 bytes); ISA-L is several times faster on one core, hot and
 * from memory (docs/BENCHMARKS.md, "CRC32C", has the figures).
 * ISA-L takes the register as it is: the inversions before and after are
 * ours, and so is cutting lengths to fit its int.
 *
 * The byte-wise table stays as feeder__crc32c_portable, the independent
 * reference the tests check ISA-L against.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <isa-l/crc.h>

#include "common/common.h"

#define POLY 0x82F63B78u /* reflected 0x1EDC6F41 */
#define ISAL_CHUNK ((size_t)1 << 30) /* crc32_iscsi's length is an int */

static uint32_t table[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

uint32_t feeder__crc32c(uint32_t crc, const void *data, size_t len)
{
    /* ISA-L's prototype lacks const; it only reads the buffer. */
    unsigned char *p = (unsigned char *)(uintptr_t)data;
    uint32_t c = ~crc;
    while (len) {
        size_t n = len < ISAL_CHUNK ? len : ISAL_CHUNK;
        c = crc32_iscsi(p, (int)n, c);
        p += n;
        len -= n;
    }
    return ~c;
}

uint32_t feeder__crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&once, init_table);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (len--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}
