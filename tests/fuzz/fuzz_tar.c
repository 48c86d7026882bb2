/*
 * libFuzzer target for the tar shard header walk and its cached index
 * (dataset/tar_index.c). Whatever the bytes:
 *  - the walk over them (as a shard) returns 0 or an error with a message
 *    naming the shard, reads nothing outside them (ASan watches the source,
 *    which hands out exact-size copies), and every sample it accepts points
 *    at bytes inside the shard, under the 1 GiB limit, with its names inside
 *    the name table; its index, written and read back, is the same index;
 *  - the bytes as an index file (parsed twice: as they are, and with both
 *    checksums recomputed to reach the checks behind them) are refused with
 *    FEEDER_EFORMAT and a reason, or accepted with every entry checked.
 */
#include <stdlib.h>
#include <string.h>

#include "dataset/tar.h"
#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct mem {
    const uint8_t *p;
    size_t n;
} mem;

/* Reads past the end are the walk's bug: abort, not a short read. */
static long mem_read(void *ctx, uint64_t off, uint8_t *dst, size_t len)
{
    const mem *m = ctx;
    if (off > m->n || len > m->n - off)
        abort();
    memcpy(dst, m->p + off, len);
    return (long)len;
}

static unsigned touch_index(const feeder__tar_index *ix, uint64_t size, const uint8_t *shard)
{
    unsigned sum = 0;
    for (uint64_t i = 0; i < ix->n; i++) {
        const feeder__tar_entry *e = &ix->e[i];
        if (e->name >= ix->names_len)
            abort();
        sum += (unsigned)strlen(feeder__tar_key(ix, i));
        sum += (unsigned)strlen(feeder__tar_detail(ix, i));
        if (e->bad)
            continue;
        if (e->off > size || e->len > size - e->off || e->len > FEEDER__MAX_FILE_BYTES ||
            e->label < 0)
            abort();
        if (shard && e->len)
            sum += shard[e->off] + shard[e->off + e->len - 1];
    }
    return sum;
}

static void walk(const uint8_t *data, size_t size)
{
    mem m = {data, size};
    feeder__tar_src src = {mem_read, &m, size};
    feeder__tar_index ix;
    char err[1024];
    int rc = feeder__tar_scan(&src, "fuzz.tar", &ix, err, sizeof(err));
    if (rc) {
        if (strncmp(err, "fuzz.tar: ", 10) != 0)
            abort();
        return;
    }
    if (touch_index(&ix, size, data) == 0xdeadbeef)
        abort();
    uint8_t *buf;
    size_t len;
    if (feeder__tar_index_encode(&ix, size, 1, &buf, &len) == 0) {
        feeder__tar_index back;
        if (feeder__tar_index_decode(buf, len, size, 1, &back, err, sizeof(err)) != 0 ||
            back.n != ix.n || back.names_len != ix.names_len ||
            (ix.n && memcmp(back.e, ix.e, ix.n * sizeof(*ix.e)) != 0) ||
            (ix.names_len && memcmp(back.names, ix.names, ix.names_len) != 0))
            abort();
        feeder__tar_index_free(&back);
        free(buf);
    }
    feeder__tar_index_free(&ix);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void as_index(const uint8_t *data, size_t size)
{
    feeder__tar_index ix;
    char err[256];
    /* The size and mtime it was made for: its own fields, to get past them. */
    uint64_t shard = size >= 32 ? le64(data + 16) : 0;
    int64_t mtime = size >= 32 ? (int64_t)le64(data + 24) : 0;
    int rc = feeder__tar_index_decode(data, size, shard, mtime, &ix, err, sizeof(err));
    if (rc) {
        if (rc != FEEDER_EFORMAT || !err[0])
            abort();
        return;
    }
    if (touch_index(&ix, shard, NULL) == 0xdeadbeef)
        abort();
    feeder__tar_index_free(&ix);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees a read past the end. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    walk(copy, size);
    as_index(copy, size);
    if (size >= FEEDER__TAR_IDX_HEADER) {
        put32(copy + 48, feeder__crc32c(0, copy + FEEDER__TAR_IDX_HEADER,
                                        size - FEEDER__TAR_IDX_HEADER));
        put32(copy + 52, feeder__crc32c(0, copy, 52));
        as_index(copy, size);
    }
    free(copy);
    return 0;
}
