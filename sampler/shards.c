/*
 * The shard-aware sampler: this rank's shards in the epoch's shard order, their
 * samples drawn through a sliding window of open shards.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/kind.h"

/* This rank's shards, in the epoch's shard order: positions rank, rank +
 * world, ... of a permutation of all shards keyed by (seed, epoch). */
static uint64_t *rank_shards(const feeder_sampler *s, uint64_t epoch, uint64_t *count)
{
    uint64_t *perm = feeder__alloc_u64(s->nshards);
    if (!perm)
        return NULL;
    feeder__perm_prefix(perm, s->nshards, s->nshards, s->seed, epoch, 0);
    uint64_t k = 0;
    for (uint64_t p = s->rank; p < s->nshards; p += s->world)
        perm[k++] = perm[p]; /* p >= k: reads ahead of writes */
    *count = k;
    return perm;
}

/* The sliding window: the pool holds every not-yet-drawn sample of at most
 * `window` shards; each output draws one uniformly from the pool, and a
 * shard whose last sample was drawn makes room for the next shard. */
static uint64_t window_stream(const feeder_sampler *s, uint64_t epoch, const uint64_t *mine,
                              uint64_t nmine, uint64_t *pool, uint64_t *left, uint64_t *out,
                              uint64_t cap)
{
    uint64_t w = s->window ? s->window : nmine, open = 0, next = 0, lo = 0, size = 0, t = 0;
    for (;;) {
        for (; open < w && next < nmine; next++) {
            uint64_t sh = mine[next], a = s->shard_first[sh], b = s->shard_first[sh + 1];
            left[next] = b - a;
            open += a < b; /* an empty shard takes no room */
            for (uint64_t i = a; i < b; i++)
                pool[size++] = i;
        }
        if (!size || t == cap)
            return t;
        uint64_t j = draw_below(size, s->seed, epoch, t, STREAM_WINDOW);
        uint64_t x = pool[j];
        pool[j] = pool[--size];
        out[t++] = x;
        /* Which open shard x came from (shards are contiguous index ranges). */
        for (uint64_t q = lo; q < next; q++) {
            uint64_t sh = mine[q];
            if (left[q] && x >= s->shard_first[sh] && x < s->shard_first[sh + 1]) {
                open -= --left[q] == 0;
                break;
            }
        }
        while (lo < next && !left[lo])
            lo++;
    }
}

/* The rank's stream, cut or repeated from its start to the common length. */
static int fill_shards(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    (void)count;
    uint64_t nmine = 0, most = 0, total = 0;
    uint64_t *mine = rank_shards(s, epoch, &nmine);
    if (!mine)
        return -ENOMEM;
    for (uint64_t q = 0; q < nmine; q++) {
        uint64_t c = s->shard_first[mine[q] + 1] - s->shard_first[mine[q]];
        most = c > most ? c : most;
        total += c;
    }
    uint64_t w = s->window && s->window < nmine ? s->window : nmine;
    uint64_t *pool = feeder__alloc_u64(w * most + 1), *left = feeder__alloc_u64(nmine + 1);
    uint64_t *stream = total < s->len ? feeder__alloc_u64(total + 1) : out;
    int rc = 0;
    if (!pool || !left || !stream) {
        rc = -ENOMEM;
    } else {
        uint64_t got = window_stream(s, epoch, mine, nmine, pool, left, stream, s->len);
        for (uint64_t t = got; t < s->len && stream != out; t++)
            out[t] = stream[t % (got ? got : 1)];
        if (stream != out)
            memcpy(out, stream, (got < s->len ? got : s->len) * sizeof(*out));
        if (!got && s->len)
            rc = FEEDER_EDATASET; /* only empty shards: nothing to repeat */
    }
    if (stream != out)
        free(stream);
    free(pool);
    free(left);
    free(mine);
    return rc;
}

static void destroy_shards(feeder_sampler *s) { free(s->shard_first); }

const feeder__sampler_kind feeder__sampler_shards_kind = {
    .name = "shards", .pure = 1, .fill = fill_shards, .destroy = destroy_shards};

int feeder_sampler_shards(const uint64_t *counts, uint32_t nshards, uint32_t rank,
                          uint32_t world_size, uint32_t window, uint64_t seed, int drop_last,
                          feeder_sampler **out)
{
    if (!counts || nshards == 0 || world_size == 0 || rank >= world_size ||
        nshards < world_size)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_shards_kind, out, &s);
    if (rc)
        return rc;
    if (!(s->shard_first = feeder__alloc_u64((uint64_t)nshards + 1))) {
        free(s);
        return -ENOMEM;
    }
    s->shard_first[0] = 0;
    for (uint32_t k = 0; k < nshards; k++)
        if (__builtin_add_overflow(s->shard_first[k], counts[k], &s->shard_first[k + 1])) {
            feeder_sampler_destroy(s);
            return FEEDER_EOVERFLOW;
        }
    uint64_t total = s->shard_first[nshards];
    s->n = total;
    s->len = total / world_size + (!drop_last && total % world_size != 0);
    s->nshards = nshards;
    s->rank = rank;
    s->world = world_size;
    s->window = window;
    s->seed = seed;
    *out = s;
    return 0;
}
