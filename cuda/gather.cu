/*
 * Shuffled records of a RAW packed file straight from the file's pages to
 * the device batch: the GPU's threads read the registered, mapped file over
 * PCIe (zero-copy) and write each record to its place.
 *
 * Reads of host memory reach PCIe's bandwidth when each warp reads whole,
 * aligned 128-byte lines and enough of them are in flight (EMOGI, VLDB
 * 2021): every thread moves 16-byte words, a warp 512 contiguous bytes, and
 * each thread issues UNROLL loads before its stores. A record is split over
 * a few blocks so that even a small batch fills the SMs.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/gather.h"

#define THREADS 256
#define UNROLL 4

__global__ void gather16(const uint8_t *base, const uint64_t *src_off, uint8_t *dst,
                         size_t words)
{
    const uint4 *s = (const uint4 *)(base + src_off[blockIdx.y]);
    uint4 *d = (uint4 *)(dst + (size_t)blockIdx.y * words * 16);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += stride * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            if (i + k * stride < words)
                v[k] = s[i + k * stride];
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            if (i + k * stride < words)
                d[i + k * stride] = v[k];
    }
}

/* Records or offsets that are not 16-byte aligned: byte by byte. */
__global__ void gather1(const uint8_t *base, const uint64_t *src_off, uint8_t *dst,
                        size_t rec_bytes)
{
    const uint8_t *s = base + src_off[blockIdx.y];
    uint8_t *d = dst + (size_t)blockIdx.y * rec_bytes;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rec_bytes; i += stride)
        d[i] = s[i];
}

extern "C" int feeder__gather_launch(const uint8_t *base, const uint64_t *src_off, uint8_t *dst,
                                     size_t rec_bytes, uint32_t n, int aligned16,
                                     void *stream)
{
    if (n == 0 || rec_bytes == 0)
        return cudaSuccess;
    cudaStream_t s = (cudaStream_t)stream;
    size_t words = rec_bytes / 16;
    size_t per_block = (size_t)THREADS * UNROLL;
    unsigned bx = (unsigned)((words + per_block - 1) / per_block);
    if (bx > 16)
        bx = 16;
    if (bx == 0)
        bx = 1;
    dim3 grid(bx, n);
    if (aligned16)
        gather16<<<grid, THREADS, 0, s>>>(base, src_off, dst, words);
    else
        gather1<<<grid, THREADS, 0, s>>>(base, src_off, dst, rec_bytes);
    return (int)cudaGetLastError();
}
