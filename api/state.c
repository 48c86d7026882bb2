/*
 * The resume state's entry points: the loader describes where it stands
 * (loader.c), the GPU layer says which of those batches it holds back
 * (prefetched or with an error not yet seen: a resumed loader must give them
 * again), and the codec (loader/state.c) writes or reads the blob.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gpu.h"
#include "loader/loader.h"

/* The loader's description, less what the GPU layer holds back. */
static int describe_for_save(const feeder_loader *ld, int want_hash, feeder__state *st)
{
    const feeder__loader_gpu *gv = feeder__loader_gpu_view(ld);
    uint64_t held[66];
    int open = 0, nheld = 0;
    if (gv->gpu)
        nheld = feeder__gpu_pending(gv->gpu, feeder__loader_epoch(ld), held, 66, &open);
    int rc = feeder__loader_describe(ld, NULL, want_hash, open, st);
    if (rc || nheld <= 0 || !st->map)
        return rc;
    /* A scratch copy of the map in the loader's GPU part (the description
     * borrows it until the next call). */
    feeder__loader_gpu *g = feeder__loader_gpu_part((feeder_loader *)ld);
    size_t bytes = (size_t)(st->nbatches / 8 + 1);
    if (bytes > g->map_cap) {
        uint8_t *m = realloc(g->map, bytes);
        if (!m)
            return feeder__loader_fail(ld, -ENOMEM, "out of memory for the state's map");
        g->map = m;
        g->map_cap = bytes;
    }
    memcpy(g->map, st->map, (size_t)((st->nbatches + 7) / 8));
    for (int i = 0; i < nheld; i++) {
        uint64_t b = held[i];
        if (b < st->nbatches && ((g->map[b / 8] >> (b % 8)) & 1)) {
            g->map[b / 8] &= (uint8_t)~(1u << (b % 8));
            st->delivered--;
        }
    }
    st->map = g->map;
    return 0;
}

size_t feeder_loader_state_size(const feeder_loader *ld)
{
    feeder__state st;
    size_t len;
    if (!ld || feeder__loader_forked(ld) || feeder__host_no_resume(ld) ||
        describe_for_save(ld, 0, &st) ||
        feeder__state_size(&st, &len))
        return 0;
    return len;
}

int feeder_loader_state_save(const feeder_loader *ld, void *buf, size_t cap, size_t *len)
{
    if (!ld || !len)
        return FEEDER_EINVAL;
    feeder__loader_clear_error((feeder_loader *)ld);
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    const char *why = feeder__host_no_resume(ld);
    if (why)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_state_save: %s", why);
    feeder__state st;
    int rc = describe_for_save(ld, buf != NULL, &st);
    if (rc)
        return rc;
    size_t need;
    if ((rc = feeder__state_size(&st, &need)))
        return feeder__loader_fail(ld, rc, "feeder_loader_state_save: %llu batches overflow a blob",
                                   (unsigned long long)st.nbatches);
    *len = need;
    if (!buf)
        return 0;
    if (cap < need)
        return feeder__loader_fail(ld, -ENOSPC,
                                   "feeder_loader_state_save: the blob needs %zu bytes, the "
                                   "buffer holds %zu",
                                   need, cap);
    feeder__state_encode(&st, buf, need);
    return 0;
}

int feeder_loader_state_load(feeder_loader *ld, const void *buf, size_t len)
{
    if (!ld)
        return FEEDER_EINVAL;
    feeder__loader_clear_error(ld);
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    if (!buf)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_state_load: buf is NULL");
    const char *why = feeder__host_no_resume(ld);
    if (why)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_state_load: %s", why);
    if (feeder__loader_started(ld))
        return feeder__loader_fail(ld, FEEDER_ESTATE,
                                   "feeder_loader_state_load: the loader started; load the state "
                                   "into a new loader before its first feeder_next");
    return feeder__loader_keep_resume(ld, buf, len);
}
