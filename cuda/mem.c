/*
 * Device selection (feeder's calls run on its device and leave the caller's
 * current device as it was), device and pinned memory with the user's
 * allocators, errors and the layer's counters.
 */
#include "cuda/layer.h"

int feeder__cuda_fail(feeder__gpu *gpu, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gpu->errmsg, sizeof(gpu->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

int feeder__cuda_host_release(feeder__gpu *gpu, feeder_batch *host)
{
    return gpu->cfg.host.release(gpu->cfg.host.ctx, host);
}

void feeder__cuda_set_cpu_share(feeder__gpu *gpu, uint32_t permille)
{
    gpu->cpu_share = permille > 1000 ? 1000 : permille;
    gpu->st.hybrid_cpu_permille = gpu->cpu_share;
    gpu->cfg.host.set_cpu_share(gpu->cfg.host.ctx, gpu->cpu_share);
}

/* Add one batch's (or drop's) counters to the layer's. */
void feeder__cuda_stats_add(feeder__gpu *gpu, const feeder_stats *d)
{
    gpu->st.pin_ns += d->pin_ns;
    gpu->st.h2d_ns += d->h2d_ns;
    gpu->st.h2d_bytes += d->h2d_bytes;
    gpu->st.gpu_batches += d->gpu_batches;
    gpu->st.wait_ns += d->wait_ns;
    gpu->st.gpu_decoded += d->gpu_decoded;
    gpu->st.gpu_fallback += d->gpu_fallback;
    gpu->st.gpu_decode_ns += d->gpu_decode_ns;
}

const char *feeder__cuda_errtext(cudaError_t e) { return cudaGetErrorString(e); }

cudaError_t feeder__cuda_enter(const feeder__gpu *gpu, devguard *d)
{
    d->changed = 0;
    cudaError_t e = cudaGetDevice(&d->prev);
    if (e != cudaSuccess)
        return e;
    if (d->prev != gpu->cfg.device) {
        if ((e = cudaSetDevice(gpu->cfg.device)) != cudaSuccess)
            return e;
        d->changed = 1;
    }
    return cudaSuccess;
}

void feeder__cuda_leave(const devguard *d)
{
    if (d->changed)
        cudaSetDevice(d->prev);
}

int feeder__gpu_probe(int device, char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        feeder__fmt(why, whylen, "no CUDA device: cudaGetDeviceCount: %s", feeder__cuda_errtext(e));
        cudaGetLastError(); /* not sticky: clear it for the user */
        return FEEDER_EUNSUPPORTED;
    }
    if (n == 0) {
        feeder__fmt(why, whylen, "no CUDA device: cudaGetDeviceCount found none");
        return FEEDER_EUNSUPPORTED;
    }
    if (device >= n) {
        feeder__fmt(why, whylen, "device = %d, but this machine has %d CUDA device%s (0..%d)",
                    device, n, n == 1 ? "" : "s", n - 1);
        return FEEDER_ERANGE;
    }
    return 0;
}

void *feeder__cuda_dev_alloc(feeder__gpu *gpu, size_t bytes, cudaError_t *err)
{
    void *p = NULL;
    if (gpu->cfg.dev_alloc.alloc) {
        p = gpu->cfg.dev_alloc.alloc(gpu->cfg.dev_alloc.user, bytes);
        *err = p ? cudaSuccess : cudaErrorMemoryAllocation;
    } else {
        *err = cudaMalloc(&p, bytes);
        if (*err != cudaSuccess)
            p = NULL;
    }
    if (p)
        gpu->device_bytes += bytes;
    return p;
}

void feeder__cuda_dev_free(feeder__gpu *gpu, void *p)
{
    if (!p)
        return;
    if (gpu->cfg.dev_alloc.alloc)
        gpu->cfg.dev_alloc.free(gpu->cfg.dev_alloc.user, p);
    else
        cudaFree(p);
}

void *feeder__cuda_pin_alloc(feeder__gpu *gpu, size_t bytes, cudaError_t *err)
{
    void *p = NULL;
    if (gpu->cfg.pin_alloc.alloc) {
        p = gpu->cfg.pin_alloc.alloc(gpu->cfg.pin_alloc.user, bytes);
        *err = p ? cudaSuccess : cudaErrorMemoryAllocation;
    } else {
        *err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        if (*err != cudaSuccess)
            p = NULL;
    }
    if (p)
        gpu->pinned_bytes += bytes;
    return p;
}

void feeder__cuda_pin_free(feeder__gpu *gpu, void *p)
{
    if (!p)
        return;
    if (gpu->cfg.pin_alloc.alloc)
        gpu->cfg.pin_alloc.free(gpu->cfg.pin_alloc.user, p);
    else
        cudaFreeHost(p);
}

int feeder__cuda_setup_fail(feeder__gpu *gpu, char *why, size_t whylen, const char *what, cudaError_t e)
{
    feeder__fmt(why, whylen, "GPU path on device %d: %s: %s", gpu->cfg.device, what, feeder__cuda_errtext(e));
    return FEEDER_ECUDA;
}
