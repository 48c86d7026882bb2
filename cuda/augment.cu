/*
 * The augment plan's photometric steps, Gaussian blur and batch mixes on a
 * device batch (cuda/augment.h). Each kernel ports augment/color.c or augment/mix.c op
 * for op: float products and sums in the order color.c makes them, each
 * rounded on its own (__fmul_rn / __fadd_rn: nvcc would otherwise fuse a
 * product and a sum into one fused multiply-add, which color.c's C11 build
 * never does), IEEE division and the same truncations; the contrast mean is
 * an exact integer sum of the lumas, divided in double as color.c does.
 *
 * A step's position (one op per sample) is one launch over every pixel of
 * the batch, each thread one pixel's three channels, reading its sample's
 * op from the parameters; contrast first sums its sample's lumas (one block
 * row per sample, a warp reduction, one atomic add per warp). The mixes
 * read the partner from a copy of the batch, so no sample reads bytes
 * another thread is rewriting. The blur runs blur.c's two passes channel by
 * channel through a float plane of the batch, one thread an output value,
 * each sum in blur.c's order.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "augment/pixel.h"
#include "cuda/augment.h"

static const int THREADS = 256;
static const uint64_t MAX_BLOCKS = 65535u * 16u; /* grid-stride loops cover the rest */

static unsigned blocks_for(uint64_t n)
{
    uint64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* color.c's luma: (0.2989 r + 0.587 g) + 0.114 b, each product rounded. */
__device__ __forceinline__ uint8_t luma(uint8_t r, uint8_t g, uint8_t b)
{
    float l = __fmul_rn(0.2989f, (float)r);
    l = __fadd_rn(l, __fmul_rn(0.587f, (float)g));
    l = __fadd_rn(l, __fmul_rn(0.114f, (float)b));
    return (uint8_t)(int)feeder__clamp255(l);
}

/* blend_const's table entry: r v + q other. */
__device__ __forceinline__ uint8_t blend(float r, float q, uint8_t v, float other)
{
    return feeder__trunc_u8(__fadd_rn(__fmul_rn(r, (float)v), __fmul_rn(q, other)));
}

/* saturate's blend_chunk: a v + (b luma), clamped and truncated. */
__device__ __forceinline__ uint8_t sat(float a, uint8_t v, float gl)
{
    return (uint8_t)(int)feeder__clamp255(__fadd_rn(__fmul_rn(a, (float)v), gl));
}

__device__ __forceinline__ float clamp01(float v) { return fminf(fmaxf(v, 0.0f), 1.0f); }

/* color.c's hue_pixel: _rgb2hsv, the shift, _hsv2rgb, in float. */
__device__ void hue_pixel(float *rgb, float shift)
{
    float r = rgb[0], g = rgb[1], b = rgb[2];
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    bool eqc = maxc == minc;
    float cr = __fsub_rn(maxc, minc);
    float s = __fdiv_rn(cr, eqc ? 1.0f : maxc);
    float crd = eqc ? 1.0f : cr;
    float rc = __fdiv_rn(__fsub_rn(maxc, r), crd);
    float gc = __fdiv_rn(__fsub_rn(maxc, g), crd);
    float bc = __fdiv_rn(__fsub_rn(maxc, b), crd);
    float h;
    if (maxc == r)
        h = __fsub_rn(bc, gc);
    else if (maxc == g)
        h = __fsub_rn(__fadd_rn(2.0f, rc), bc);
    else
        h = __fsub_rn(__fadd_rn(4.0f, gc), rc);
    h = fmodf(__fadd_rn(__fdiv_rn(h, 6.0f), 1.0f), 1.0f);
    h = __fadd_rn(h, shift);
    h = __fsub_rn(h, floorf(h));
    float v = maxc;
    float h6 = __fmul_rn(h, 6.0f);
    float i = floorf(h6), f = __fsub_rn(h6, i);
    int ii = ((int)i % 6 + 6) % 6;
    float p = clamp01(__fmul_rn(v, __fsub_rn(1.0f, s)));
    float q = clamp01(__fmul_rn(v, __fsub_rn(1.0f, __fmul_rn(s, f))));
    float t = clamp01(__fmul_rn(v, __fsub_rn(1.0f, __fmul_rn(s, __fsub_rn(1.0f, f)))));
    float vals[4] = {v, p, q, t};
    const uint8_t sel[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    rgb[0] = vals[sel[ii][0]];
    rgb[1] = vals[sel[ii][1]];
    rgb[2] = vals[sel[ii][2]];
}

/* One pixel through op `op` of its sample's parameters. */
__device__ void pixel_op(uint8_t *p0, uint8_t *p1, uint8_t *p2, int op, const feeder__daug_px *pr,
                         const unsigned long long *sums, uint32_t n, uint32_t hw)
{
    uint8_t r = *p0, g = *p1, b = *p2;
    switch (op) {
    case FEEDER__DAUG_BRIGHTNESS:
        *p0 = blend(pr->r[0], pr->q[0], r, 0.0f);
        *p1 = blend(pr->r[0], pr->q[0], g, 0.0f);
        *p2 = blend(pr->r[0], pr->q[0], b, 0.0f);
        break;
    case FEEDER__DAUG_CONTRAST: {
        float mean = hw ? (float)((double)sums[n] / (double)hw) : 0.0f;
        *p0 = blend(pr->r[1], pr->q[1], r, mean);
        *p1 = blend(pr->r[1], pr->q[1], g, mean);
        *p2 = blend(pr->r[1], pr->q[1], b, mean);
        break;
    }
    case FEEDER__DAUG_SATURATION: {
        float gl = __fmul_rn(pr->q[2], (float)luma(r, g, b));
        *p0 = sat(pr->r[2], r, gl);
        *p1 = sat(pr->r[2], g, gl);
        *p2 = sat(pr->r[2], b, gl);
        break;
    }
    case FEEDER__DAUG_HUE: {
        float rgb[3] = {__fdiv_rn((float)r, 255.0f), __fdiv_rn((float)g, 255.0f),
                        __fdiv_rn((float)b, 255.0f)};
        hue_pixel(rgb, pr->hue);
        *p0 = feeder__trunc_u8(__fmul_rn(rgb[0], 255.0f));
        *p1 = feeder__trunc_u8(__fmul_rn(rgb[1], 255.0f));
        *p2 = feeder__trunc_u8(__fmul_rn(rgb[2], 255.0f));
        break;
    }
    case FEEDER__DAUG_GRAY: {
        uint8_t l = luma(r, g, b);
        *p0 = l;
        *p1 = l;
        *p2 = l;
        break;
    }
    default: break;
    }
}

template <bool NCHW>
__global__ void position_kernel(uint8_t *__restrict__ data, uint64_t pixels, uint32_t hw,
                                const feeder__daug_px *__restrict__ params, int pos,
                                const unsigned long long *__restrict__ sums)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < pixels;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t n = (uint32_t)(i / hw);
        uint64_t q = i % hw;
        const feeder__daug_px *pr = &params[n];
        int op = pr->op[pos];
        if (op == FEEDER__DAUG_NONE)
            continue;
        uint8_t *s = data + (uint64_t)n * 3 * hw;
        if (NCHW)
            pixel_op(s + q, s + hw + q, s + 2 * (uint64_t)hw + q, op, pr, sums, n, hw);
        else
            pixel_op(s + 3 * q, s + 3 * q + 1, s + 3 * q + 2, op, pr, sums, n, hw);
    }
}

/* The luma sum of every sample whose op at `pos` is contrast: block row y
 * takes samples y, y + gridDim.y, ...; integer sums, so any order gives
 * color.c's exact total. */
template <bool NCHW>
__global__ void luma_sum_kernel(const uint8_t *__restrict__ data, uint32_t count, uint32_t hw,
                                const feeder__daug_px *__restrict__ params, int pos,
                                unsigned long long *__restrict__ sums)
{
    for (uint32_t n = blockIdx.y; n < count; n += gridDim.y) {
        if (params[n].op[pos] != FEEDER__DAUG_CONTRAST)
            continue; /* the same for the whole block */
        const uint8_t *s = data + (uint64_t)n * 3 * hw;
        uint32_t acc = 0; /* at most hw / (threads in the row) lumas of 255 each */
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < hw;
             q += gridDim.x * blockDim.x) {
            if (NCHW)
                acc += luma(s[q], s[hw + q], s[2 * (uint64_t)hw + q]);
            else
                acc += luma(s[3 * (uint64_t)q], s[3 * (uint64_t)q + 1], s[3 * (uint64_t)q + 2]);
        }
        unsigned long long v = acc;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xFFFFFFFFu, v, o);
        if ((threadIdx.x & 31) == 0 && v)
            atomicAdd(&sums[n], v);
    }
}

extern "C" int feeder__daug_position_launch(uint8_t *data, uint32_t count, uint32_t h, uint32_t w,
                                            int nchw, const feeder__daug_px *params, int pos,
                                            int contrast, unsigned long long *sums, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    uint32_t hw = h * w;
    uint64_t pixels = (uint64_t)count * hw;
    if (pixels == 0 || pos < 0 || pos > 3)
        return pos < 0 || pos > 3 ? (int)cudaErrorInvalidValue : 0;
    cudaError_t e;
    if (contrast) {
        if ((e = cudaMemsetAsync(sums, 0, (size_t)count * sizeof(*sums), s)) != cudaSuccess)
            return (int)e;
        uint32_t bx = (hw + THREADS - 1) / THREADS;
        dim3 grid(bx > 64 ? 64 : bx, count > 65535 ? 65535 : count);
        if (nchw)
            luma_sum_kernel<true><<<grid, THREADS, 0, s>>>(data, count, hw, params, pos, sums);
        else
            luma_sum_kernel<false><<<grid, THREADS, 0, s>>>(data, count, hw, params, pos, sums);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return (int)e;
    }
    if (nchw)
        position_kernel<true><<<blocks_for(pixels), THREADS, 0, s>>>(data, pixels, hw, params, pos,
                                                                     sums);
    else
        position_kernel<false><<<blocks_for(pixels), THREADS, 0, s>>>(data, pixels, hw, params,
                                                                      pos, sums);
    return (int)cudaGetLastError();
}

struct mix_args {
    uint32_t count, w, hw;
    uint64_t sb; /* bytes of a sample */
    int kind;
    uint32_t A, B;
    uint32_t x1, y1, x2, y2;
};

template <bool NCHW>
__global__ void mix_kernel(uint8_t *__restrict__ data, const uint8_t *__restrict__ tmp,
                           mix_args a)
{
    uint64_t bytes = (uint64_t)a.count * a.sb;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < bytes;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t n = (uint32_t)(i / a.sb);
        uint64_t j = i % a.sb;
        uint32_t partner = n ? n - 1 : a.count - 1;
        uint8_t y = tmp[(uint64_t)partner * a.sb + j];
        if (a.kind == 1) {
            uint32_t x = data[i];
            data[i] = (uint8_t)((a.A * x + a.B * (uint32_t)y + 32768u) >> 16);
            continue;
        }
        uint32_t pix = (uint32_t)(NCHW ? j % a.hw : j / 3);
        uint32_t px = pix % a.w, py = pix / a.w;
        if (px >= a.x1 && px < a.x2 && py >= a.y1 && py < a.y2)
            data[i] = y;
    }
}

extern "C" int feeder__daug_mix_launch(uint8_t *data, uint8_t *tmp, uint32_t count, uint32_t h,
                                       uint32_t w, int nchw, int kind, uint32_t A, uint32_t B,
                                       const uint32_t box[4], void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    mix_args a = {count, w, h * w, (uint64_t)h * w * 3, kind, A, B, box[0], box[1], box[2], box[3]};
    uint64_t bytes = (uint64_t)count * a.sb;
    if (bytes == 0 || (kind != 1 && kind != 2))
        return bytes == 0 ? 0 : (int)cudaErrorInvalidValue;
    cudaError_t e = cudaMemcpyAsync(tmp, data, bytes, cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess)
        return (int)e;
    if (nchw)
        mix_kernel<true><<<blocks_for(bytes), THREADS, 0, s>>>(data, tmp, a);
    else
        mix_kernel<false><<<blocks_for(bytes), THREADS, 0, s>>>(data, tmp, a);
    return (int)cudaGetLastError();
}

struct blur_args {
    uint32_t count, h, w, hw, ksize;
    int c;
};

/* Where channel c of pixel q (y * w + x) lies in a sample's bytes. */
template <bool NCHW> __device__ __forceinline__ uint64_t channel_at(const blur_args &a, uint64_t q)
{
    return NCHW ? (uint64_t)a.c * a.hw + q : q * 3 + a.c;
}

/* One output of either pass: sum_j k[j] * src[reflect(pos + j - r, len) *
 * step], in j order, each product and sum rounded on its own, as blur.c's
 * float passes. */
template <typename T>
__device__ __forceinline__ float blur_sum(const T *src, uint64_t step, uint32_t pos, uint32_t len,
                                          const float *k, uint32_t ksize)
{
    uint32_t r = ksize / 2;
    float acc = 0.0f;
    for (uint32_t j = 0; j < ksize; j++) {
        uint32_t at = feeder__reflect((int64_t)pos + j - r, len);
        acc = __fadd_rn(acc, __fmul_rn(k[j], (float)src[(uint64_t)at * step]));
    }
    return acc;
}

/* One of blur.c's passes over channel c of every sample, one thread an
 * output value. Rows (blur_rows_ps): plane = sum_j k[j] * src(reflect(x + j
 * - r), y). Columns (blur_cols + store_row): sum_j k[j] * plane(x, reflect(y
 * + j - r)), rounded half to even (nearbyintf), clamped, into channel c. */
template <bool NCHW, bool COLS>
__global__ void blur_kernel(uint8_t *__restrict__ data, float *__restrict__ plane,
                            const float *__restrict__ kw, blur_args a)
{
    uint64_t total = (uint64_t)a.count * a.hw;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t n = (uint32_t)(i / a.hw), q = (uint32_t)(i % a.hw);
        uint32_t y = q / a.w, x = q % a.w;
        uint8_t *s = data + (uint64_t)n * 3 * a.hw;
        const float *k = kw + (uint64_t)n * FEEDER__DAUG_KMAX;
        if (!COLS) {
            const uint8_t *row = s + channel_at<NCHW>(a, (uint64_t)y * a.w);
            plane[i] = blur_sum(row, NCHW ? 1 : 3, x, a.w, k, a.ksize);
        } else {
            float v = rintf(blur_sum(plane + (uint64_t)n * a.hw + x, a.w, y, a.h, k, a.ksize));
            s[channel_at<NCHW>(a, q)] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
        }
    }
}

extern "C" int feeder__daug_blur_launch(uint8_t *data, uint32_t count, uint32_t h, uint32_t w,
                                        int nchw, const float *kw, uint32_t ksize, float *plane,
                                        void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    uint64_t total = (uint64_t)count * h * w;
    if (total == 0)
        return 0;
    if (ksize < 2 || ksize > FEEDER__DAUG_KMAX || ksize / 2 >= w || ksize / 2 >= h)
        return (int)cudaErrorInvalidValue;
    unsigned blocks = blocks_for(total);
    for (int c = 0; c < 3; c++) {
        blur_args a = {count, h, w, h * w, ksize, c};
        if (nchw) {
            blur_kernel<true, false><<<blocks, THREADS, 0, s>>>(data, plane, kw, a);
            blur_kernel<true, true><<<blocks, THREADS, 0, s>>>(data, plane, kw, a);
        } else {
            blur_kernel<false, false><<<blocks, THREADS, 0, s>>>(data, plane, kw, a);
            blur_kernel<false, true><<<blocks, THREADS, 0, s>>>(data, plane, kw, a);
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return (int)e;
    }
    return 0;
}
