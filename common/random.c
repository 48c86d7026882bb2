/*
 * The counter-based generator behind every random choice (invariant 1):
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11), the generator cuRAND and JAX use. A counter-based generator has
 * no state to carry between calls, so a sample's random numbers depend only on
 * (seed, epoch, index, counter) and never on which worker drew them, or in
 * what order.
 */
#include "feeder.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* The 128-bit counter is (index, counter); the 64-bit key is the seed with
 * the epoch folded in (Philox's keys need not be random). Folding 128 bits of
 * (seed, epoch) into 64 cannot be injective: the pair (seed ^ f(e) ^ f(e'),
 * e') gives the same stream as (seed, e). Seeds are chosen by people, so this
 * only matters for adversarial seeds. The two 64-bit halves of the output are
 * combined into one 64-bit value. */
uint64_t feeder_random(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t counter)
{
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)counter, c3 = (uint32_t)(counter >> 32);
    uint64_t key = seed ^ (epoch * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return ((uint64_t)c1 << 32 | c0) ^ ((uint64_t)c3 << 32 | c2) * 0x9E3779B97F4A7C15ull;
}

double feeder_random_uniform(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t counter)
{
    return (double)(feeder_random(seed, epoch, index, counter) >> 11) * 0x1.0p-53;
}
