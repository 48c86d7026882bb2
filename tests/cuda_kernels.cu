/* Kernels the GPU tests use as a "training step": spin, then read every byte
 * of the batch into a checksum, so a buffer overwritten before the step
 * finished shows as a wrong checksum. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_kernels.h"

__device__ __forceinline__ uint64_t now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin_sum(const uint8_t *data, size_t bytes, const int64_t *labels, uint32_t count,
                         uint64_t spin_ns, unsigned long long *out)
{
    if (threadIdx.x == 0 && spin_ns) {
        uint64_t t0 = now_ns();
        while (now_ns() - t0 < spin_ns) {
        }
    }
    __syncthreads();
    unsigned long long s = 0;
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
        s += (unsigned long long)data[i] * (i % 251 + 1);
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x)
        s += (unsigned long long)labels[i] * 1000003ull * (i + 1);
    atomicAdd(out, s);
}

extern "C" int tk_spin_sum(const uint8_t *data, size_t bytes, const int64_t *labels,
                           uint32_t count, uint64_t spin_ns, unsigned long long *out, void *stream)
{
    spin_sum<<<1, 256, 0, (cudaStream_t)stream>>>(data, bytes, labels, count, spin_ns, out);
    return (int)cudaGetLastError();
}

extern "C" unsigned long long tk_host_sum(const uint8_t *data, size_t bytes, const int64_t *labels,
                                          uint32_t count)
{
    unsigned long long s = 0;
    for (size_t i = 0; i < bytes; i++)
        s += (unsigned long long)data[i] * (i % 251 + 1);
    for (uint32_t i = 0; i < count; i++)
        s += (unsigned long long)labels[i] * 1000003ull * (i + 1);
    return s;
}
