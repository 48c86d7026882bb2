/*
 * The GPU layer of a build without CUDA: there is no device to deliver to,
 * so every loader says why (feeder_loader_gpu_status) and delivers host
 * batches. Nothing here can be reached with a batch of its own.
 */
#include "common/common.h"
#include "cuda/gpu.h"

int feeder__gpu_probe(int device, char *why, size_t whylen)
{
    feeder__fmt(why, whylen, "device = %d, but feeder was built without CUDA: host batches",
                device);
    return FEEDER_EUNSUPPORTED;
}

int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen)
{
    return feeder__gpu_probe(cfg->device, why, whylen);
}

int feeder__gpu_next(feeder__gpu *g, feeder_batch **out) { return FEEDER_EUNSUPPORTED; }
int feeder__gpu_release(feeder_batch *b, void *stream) { return FEEDER_EINVAL; }
void feeder__gpu_drop(feeder__gpu *g) {}
const char *feeder__gpu_describe(const feeder__gpu *g) { return ""; }
const char *feeder__gpu_errmsg(const feeder__gpu *g) { return ""; }
void feeder__gpu_stats(const feeder__gpu *g, feeder_stats *st) {}
void feeder__gpu_destroy(feeder__gpu *g) {}
int feeder__gpu_owns(const feeder_batch *b) { return 0; }
int feeder__gpu_pending(const feeder__gpu *g, uint64_t epoch, uint64_t *out, int cap, int *open)
{
    *open = 0;
    return 0;
}

int feeder__gpu_decodes(const feeder__gpu *g)
{
    (void)g;
    return 0;
}

const char *feeder__gpu_decode_why(const feeder__gpu *g)
{
    (void)g;
    return "built without CUDA";
}

int feeder__gpu_packed_direct(const feeder__gpu *g)
{
    (void)g;
    return 0;
}
feeder__gpu *feeder__gpu_of(const feeder_batch *b) { return NULL; }
void *feeder__gpu_host(const feeder__gpu *g) { return NULL; }
