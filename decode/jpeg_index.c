/*
 * The shared table of MCU-row starts (decode/jpeg_index.h says why).
 *
 * Layout of the mapping: the header, a word per sample (0: no block, else
 * the block's offset in the arena + 1), then the arena. A block is its key,
 * its row count and the rows. Blocks are taken from the arena with one
 * fetch-add and never freed; a sample whose index grows (a later crop
 * reached lower rows) gets a new block and the old one stays unused.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "common/common.h"
#include "decode/jpeg_index.h"

typedef struct block {
    uint64_t key;
    uint32_t nrows;
    uint32_t pad;
    feeder__jrow rows[];
} block;

struct feeder__jindex {
    uint64_t nsamples, budget, map_bytes;
    _Atomic uint64_t used; /* taken from the arena, past the budget too */
    _Atomic uint64_t kept; /* bytes of the blocks published */
    _Atomic uint64_t *word; /* nsamples of them, after the header */
    uint8_t *arena;         /* budget bytes, after the words */
};

int feeder__jindex_create(uint64_t nsamples, uint64_t budget, feeder__jindex **out)
{
    *out = NULL;
    if (!nsamples || !budget)
        return -EINVAL;
    uint64_t head = (sizeof(feeder__jindex) + 63) & ~(uint64_t)63, words, bytes;
    if (__builtin_mul_overflow(nsamples, sizeof(uint64_t), &words) ||
        __builtin_add_overflow(head, words, &bytes) ||
        __builtin_add_overflow(bytes, budget + 64, &bytes) || bytes > (uint64_t)SIZE_MAX)
        return -ENOMEM;
    void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return -errno;
    feeder__jindex *ix = m;
    ix->nsamples = nsamples;
    ix->budget = budget;
    ix->map_bytes = bytes;
    atomic_init(&ix->used, 0);
    atomic_init(&ix->kept, 0);
    ix->word = (_Atomic uint64_t *)(void *)((uint8_t *)m + head);
    ix->arena = (uint8_t *)m + ((head + words + 63) & ~(uint64_t)63);
    *out = ix;
    return 0;
}

void feeder__jindex_destroy(feeder__jindex *ix)
{
    if (ix)
        munmap(ix, (size_t)ix->map_bytes);
}

uint64_t feeder__jindex_key(const uint8_t *p, size_t len)
{
    return (uint64_t)len << 32 ^ feeder__crc32c(0, p, len);
}

const feeder__jrow *feeder__jindex_find(const feeder__jindex *ix, uint64_t i, uint64_t key,
                                        uint32_t *nrows)
{
    *nrows = 0;
    if (!ix || i >= ix->nsamples)
        return NULL;
    uint64_t w = atomic_load_explicit(&ix->word[i], memory_order_acquire);
    if (!w)
        return NULL;
    const block *b = (const block *)(const void *)(ix->arena + (w - 1));
    if (b->key != key)
        return NULL;
    *nrows = b->nrows;
    return b->rows;
}

void feeder__jindex_put(feeder__jindex *ix, uint64_t i, uint64_t key, const feeder__jrow *rows,
                        uint32_t nrows)
{
    if (!ix || i >= ix->nsamples || !nrows)
        return;
    uint32_t have = 0;
    if (feeder__jindex_find(ix, i, key, &have) && have >= nrows)
        return;
    uint64_t need = (sizeof(block) + (uint64_t)nrows * sizeof(feeder__jrow) + 7) & ~(uint64_t)7;
    /* Past the budget `used` keeps growing, harmlessly: every later put
     * fails the same test. */
    uint64_t at = atomic_fetch_add_explicit(&ix->used, need, memory_order_relaxed);
    if (at + need > ix->budget)
        return;
    block *b = (block *)(void *)(ix->arena + at);
    b->key = key;
    b->nrows = nrows;
    memcpy(b->rows, rows, (size_t)nrows * sizeof(*rows));
    atomic_store_explicit(&ix->word[i], at + 1, memory_order_release);
    atomic_fetch_add_explicit(&ix->kept, need, memory_order_relaxed);
}

uint64_t feeder__jindex_used(const feeder__jindex *ix)
{
    if (!ix)
        return 0;
    return atomic_load_explicit(&ix->kept, memory_order_relaxed);
}
