/*
 * The GPU half of the GPU decoders: crop, resize, flip and lay out decoded
 * images into their places in a device batch. One thread per output pixel
 * (all its channels: 3 for RGB, 1 for gray output), one grid for the whole
 * batch (blockIdx.z = image).
 *
 * The filter is the CPU resizer's (decode/resize.c, Pillow's BILINEAR with
 * antialiasing): for output i along an axis the taps are the input pixels
 * around centre = box0 + (i + 0.5) * scale, weighted by a triangle as wide
 * as max(scale, 1), normalised to sum 1; pixels outside the box but inside
 * the image take part at the edges, as on the CPU. It runs in float with no
 * intermediate rounding, straight in 2-D (taps_x x taps_y reads per pixel):
 * with the output 224 x 224 and sources of a few hundred pixels that is
 * 9-25 taps, and the kernel takes a small share of the decode's time, so
 * the separable two-pass form (and its intermediate buffer) is not worth it.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/gpu_decode.h"
#include "feeder.h"

namespace {

struct taps {
    int first, n;
    float centre, fscale, inv_sum;
};

/* decode/resize.c axis_taps, in float. */
__device__ taps axis(uint32_t in_len, float box0, float scale, uint32_t i)
{
    taps a;
    a.fscale = scale > 1.0f ? scale : 1.0f;
    float support = a.fscale;
    a.centre = box0 + (i + 0.5f) * scale;
    float lo = a.centre - support + 0.5f, hi = a.centre + support + 0.5f;
    int xmin = lo < 0.0f ? 0 : (int)lo;
    int xmax = hi > (float)in_len ? (int)in_len : (int)hi;
    if (xmin >= (int)in_len)
        xmin = (int)in_len - 1;
    if (xmax <= xmin)
        xmax = xmin + 1;
    a.first = xmin;
    a.n = xmax - xmin;
    float sum = 0.0f;
    for (int x = 0; x < a.n; x++)
        sum += fmaxf(0.0f, 1.0f - fabsf((x + xmin - a.centre + 0.5f) / a.fscale));
    a.inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
    return a;
}

__device__ float weight(const taps &a, int x)
{
    if (a.inv_sum == 0.0f) /* a box outside the pixels: the nearest one */
        return x == 0 ? 1.0f : 0.0f;
    return fmaxf(0.0f, 1.0f - fabsf((x + a.first - a.centre + 0.5f) / a.fscale)) * a.inv_sum;
}

/* One output pixel of job blockIdx.z: CH channels (3: RGB, 1: gray) read
 * interleaved from the source and written in NHWC or NCHW (one plane: the
 * same bytes). The sums run in the same order for every CH. */
template <int CH>
__global__ void resize_kernel(const feeder__gpu_resize_job *jobs, uint8_t *dst,
                              size_t sample_bytes, uint32_t out_w, uint32_t out_h, int nchw)
{
    const feeder__gpu_resize_job j = jobs[blockIdx.z];
    uint32_t ox = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= out_w || oy >= out_h)
        return;
    /* A flipped sample mirrors the output: column ox shows the box's column
     * out_w - 1 - ox. */
    uint32_t sx = j.flip ? out_w - 1 - ox : ox;
    taps ax = axis(j.src_w, j.bx, j.bw / out_w, sx);
    taps ay = axis(j.src_h, j.by, j.bh / out_h, oy);
    float acc[CH];
#pragma unroll
    for (int c = 0; c < CH; c++)
        acc[c] = 0.0f;
    for (int y = 0; y < ay.n; y++) {
        float wy = weight(ay, y);
        const uint8_t *row = j.src + (size_t)(ay.first + y) * j.src_pitch + (size_t)ax.first * CH;
        float line[CH];
#pragma unroll
        for (int c = 0; c < CH; c++)
            line[c] = 0.0f;
        for (int x = 0; x < ax.n; x++) {
            float wx = weight(ax, x);
#pragma unroll
            for (int c = 0; c < CH; c++)
                line[c] += wx * row[CH * x + c];
        }
#pragma unroll
        for (int c = 0; c < CH; c++)
            acc[c] += wy * line[c];
    }
    uint8_t *out = dst + (size_t)j.pos * sample_bytes;
    size_t plane = (size_t)out_w * out_h, p = (size_t)oy * out_w + ox;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        uint8_t v = (uint8_t)fminf(fmaxf(acc[c] + 0.5f, 0.0f), 255.0f);
        if (nchw)
            out[c * plane + p] = v;
        else
            out[CH * p + c] = v;
    }
}

} // namespace

extern "C" int feeder__gpu_resize_launch(const feeder__gpu_resize_job *jobs, uint32_t n,
                                         void *scratch, uint8_t *dst, size_t sample_bytes,
                                         uint32_t out_w, uint32_t out_h, int layout,
                                         int channels, void *stream)
{
    if (channels != 1 && channels != 3)
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    cudaStream_t s = (cudaStream_t)stream;
    /* From pageable memory: the call returns once the bytes are staged, so
     * the caller may reuse `jobs` at once. */
    cudaError_t e = cudaMemcpyAsync(scratch, jobs, (size_t)n * sizeof(*jobs),
                                    cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess)
        return e;
    dim3 block(32, 8);
    /* gridDim.z stops at 65,535 images a launch. */
    for (uint32_t at = 0; at < n; at += 65535) {
        uint32_t m = n - at < 65535 ? n - at : 65535;
        dim3 grid((out_w + block.x - 1) / block.x, (out_h + block.y - 1) / block.y, m);
        const feeder__gpu_resize_job *js = (const feeder__gpu_resize_job *)scratch + at;
        int nchw = layout == FEEDER_LAYOUT_NCHW;
        if (channels == 1)
            resize_kernel<1><<<grid, block, 0, s>>>(js, dst, sample_bytes, out_w, out_h, nchw);
        else
            resize_kernel<3><<<grid, block, 0, s>>>(js, dst, sample_bytes, out_w, out_h, nchw);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}
