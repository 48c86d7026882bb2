/* See gpu_step.h. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_step.h"

struct bg_ctx {
    int device;
    cudaStream_t s;
    cudaEvent_t *ev; /* 2 per step */
    unsigned nev;
    unsigned long long *sink;
    char name[256];
};

#define TRY(call)                                                                            \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));                  \
            return -1;                                                                       \
        }                                                                                    \
    } while (0)

__device__ __forceinline__ unsigned long long gtime(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Read every byte (16 at a time), then spin: a step that depends on the
 * whole batch and takes a known time. */
__global__ void step_kernel(const uint4 *data, size_t n16, const uint8_t *tail, size_t ntail,
                            unsigned long long spin_ns, unsigned long long *sink)
{
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = data[i];
        acc += v.x ^ v.y ^ v.z ^ v.w;
    }
    if (blockIdx.x == 0 && threadIdx.x < ntail)
        acc += tail[threadIdx.x];
    if (acc == 0x123456789ull)
        atomicAdd(sink, acc); /* keeps the loads alive */
    if (spin_ns && threadIdx.x == 0) {
        unsigned long long t0 = gtime();
        while (gtime() - t0 < spin_ns) {
        }
    }
}

extern "C" int bg_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for later calls */
        return 0;
    }
    return n;
}

extern "C" int bg_create(int device, bg_ctx **out, char *err, size_t errlen)
{
    bg_ctx *g = (bg_ctx *)calloc(1, sizeof(*g));
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    g->device = device;
    *out = g;
    TRY(cudaSetDevice(device));
    TRY(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    TRY(cudaMalloc((void **)&g->sink, sizeof(*g->sink)));
    cudaDeviceProp p;
    TRY(cudaGetDeviceProperties(&p, device));
    snprintf(g->name, sizeof(g->name), "%s", p.name);
    return 0;
}

extern "C" void bg_destroy(bg_ctx *g)
{
    if (!g)
        return;
    if (g->s)
        cudaStreamSynchronize(g->s);
    for (unsigned i = 0; i < g->nev; i++)
        cudaEventDestroy(g->ev[i]);
    free(g->ev);
    cudaFree(g->sink);
    if (g->s)
        cudaStreamDestroy(g->s);
    free(g);
}

extern "C" void *bg_stream(bg_ctx *g) { return g->s; }
extern "C" const char *bg_device_name(bg_ctx *g) { return g->name; }

static int launch(bg_ctx *g, const void *data, size_t bytes, double ms)
{
    size_t n16 = bytes / 16, ntail = bytes % 16;
    unsigned blocks = (unsigned)((n16 + 255) / 256);
    if (blocks > 1056)
        blocks = 1056; /* 132 SMs x 8 on an H100: enough to read at full rate */
    if (blocks == 0)
        blocks = 1;
    step_kernel<<<blocks, 256, 0, g->s>>>((const uint4 *)data, n16,
                                          (const uint8_t *)data + n16 * 16, ntail,
                                          (unsigned long long)(ms * 1e6), g->sink);
    return 0;
}

static int events_for(bg_ctx *g, unsigned i, char *err, size_t errlen)
{
    while (2 * i + 2 > g->nev) {
        unsigned n = g->nev ? g->nev * 2 : 256;
        cudaEvent_t *v = (cudaEvent_t *)realloc(g->ev, n * sizeof(*v));
        if (!v) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        g->ev = v;
        for (unsigned k = g->nev; k < n; k++)
            TRY(cudaEventCreate(&g->ev[k]));
        g->nev = n;
    }
    return 0;
}

extern "C" int bg_step(bg_ctx *g, unsigned i, const void *ready_event, const void *data,
                       size_t bytes, double ms, char *err, size_t errlen)
{
    if (events_for(g, i, err, errlen))
        return -1;
    if (ready_event)
        TRY(cudaStreamWaitEvent(g->s, (cudaEvent_t)ready_event, 0));
    TRY(cudaEventRecord(g->ev[2 * i], g->s));
    launch(g, data, bytes, ms);
    TRY(cudaGetLastError());
    TRY(cudaEventRecord(g->ev[2 * i + 1], g->s));
    return 0;
}

extern "C" int bg_wait_step(bg_ctx *g, unsigned i, char *err, size_t errlen)
{
    TRY(cudaEventSynchronize(g->ev[2 * i + 1]));
    return 0;
}

extern "C" int bg_busy_ms(bg_ctx *g, unsigned n, double *ms, char *err, size_t errlen)
{
    TRY(cudaStreamSynchronize(g->s));
    double sum = 0;
    for (unsigned i = 0; i < n; i++) {
        float t = 0;
        TRY(cudaEventElapsedTime(&t, g->ev[2 * i], g->ev[2 * i + 1]));
        sum += t;
    }
    *ms = sum;
    return 0;
}

extern "C" int bg_compute_alone(bg_ctx *g, size_t bytes, double ms, unsigned n, double *seconds,
                                char *err, size_t errlen)
{
    void *buf;
    TRY(cudaMalloc(&buf, bytes ? bytes : 1));
    TRY(cudaMemsetAsync(buf, 1, bytes, g->s));
    cudaEvent_t a, b;
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    launch(g, buf, bytes, ms); /* warm-up */
    TRY(cudaEventRecord(a, g->s));
    for (unsigned i = 0; i < n; i++)
        launch(g, buf, bytes, ms);
    TRY(cudaEventRecord(b, g->s));
    TRY(cudaEventSynchronize(b));
    float t = 0;
    TRY(cudaEventElapsedTime(&t, a, b));
    *seconds = t / 1e3;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(buf);
    return 0;
}

extern "C" int bg_to_host(bg_ctx *g, const void *ready_event, void *dst, const void *src,
                          size_t bytes, char *err, size_t errlen)
{
    if (ready_event)
        TRY(cudaStreamWaitEvent(g->s, (cudaEvent_t)ready_event, 0));
    TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g->s));
    TRY(cudaStreamSynchronize(g->s));
    return 0;
}
