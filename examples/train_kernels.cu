/*
 * Hand-written kernels of examples/train_loop.c (see train_kernels.h). They
 * favour being obviously right over being fast: at batch 64 a whole step is a
 * few tens of microseconds on an H100, far below what the loader needs to
 * decode the next batch, so none of them is the bottleneck.
 */
#include "train_kernels.h"

#define TK_THREADS 256 /* every kernel's block size; a multiple of 32 */

/* Sum of v over the block, returned to every thread. `shm` holds one value
 * per warp. Deterministic: the same inputs give the same bits. */
template <typename T> __device__ T block_sum(T v, T *shm)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* a previous call may still be reading shm[0] */
    if (lane == 0)
        shm[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T r = lane < (int)(blockDim.x >> 5) ? shm[lane] : T(0);
        for (int o = 16; o > 0; o >>= 1)
            r += __shfl_down_sync(0xffffffffu, r, o);
        if (lane == 0)
            shm[0] = r;
    }
    __syncthreads();
    return shm[0];
}

/* One block per image. */
__global__ void features_kernel(const float *__restrict__ x, int c, int h, int w, int nchw,
                                int pool, float *__restrict__ feat)
{
    __shared__ double shm[TK_THREADS / 32];
    const int ph = h / pool, pw = w / pool, F = c * ph * pw;
    const size_t img = (size_t)blockIdx.x * c * h * w;
    float *out = feat + (size_t)blockIdx.x * F;
    const float inv_area = 1.0f / (float)(pool * pool);
    double s = 0, ss = 0;
    for (int f = threadIdx.x; f < F; f += blockDim.x) {
        const int ci = f / (ph * pw), r = f % (ph * pw), py = r / pw, px = r % pw;
        float acc = 0;
        for (int dy = 0; dy < pool; dy++) {
            const int y = py * pool + dy;
            for (int dx = 0; dx < pool; dx++) {
                const int xx = px * pool + dx;
                const size_t at = nchw ? img + ((size_t)ci * h + y) * w + xx
                                       : img + ((size_t)y * w + xx) * c + ci;
                acc += x[at];
            }
        }
        const float v = acc * inv_area;
        out[f] = v;
        s += v;
        ss += (double)v * v;
    }
    s = block_sum(s, shm);
    ss = block_sum(ss, shm);
    /* Standardising each image removes the brightness every image shares,
     * which otherwise dominates the gradient and forces a far smaller
     * learning rate. Each thread rereads only what it wrote itself. */
    const double mean = s / F, var = ss / F - mean * mean;
    const float m = (float)mean, inv = (float)(1.0 / sqrt((var > 0 ? var : 0) + 1e-5));
    for (int f = threadIdx.x; f < F; f += blockDim.x)
        out[f] = (out[f] - m) * inv;
}

/* One block per sample; one block-wide dot product per class. */
__global__ void logits_kernel(const float *__restrict__ feat, const float *__restrict__ W,
                              const float *__restrict__ b, int F, int K,
                              float *__restrict__ logits)
{
    __shared__ float shm[TK_THREADS / 32];
    const float *xi = feat + (size_t)blockIdx.x * F;
    for (int k = 0; k < K; k++) {
        const float *wk = W + (size_t)k * F;
        float a = 0;
        for (int f = threadIdx.x; f < F; f += blockDim.x)
            a += wk[f] * xi[f];
        a = block_sum(a, shm);
        if (threadIdx.x == 0)
            logits[(size_t)blockIdx.x * K + k] = a + b[k];
    }
}

/* One block for the whole batch, so the totals are added by one thread in
 * stream order: no atomics, the same sums on every run. */
__global__ void softmax_xent_kernel(const float *__restrict__ logits,
                                    const int64_t *__restrict__ labels, int n, int K,
                                    float *__restrict__ dlogits, float *batch_loss,
                                    tk_totals *totals)
{
    __shared__ double shm[TK_THREADS / 32];
    double loss = 0, correct = 0, good = 0, bad = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float *z = logits + (size_t)i * K;
        float *d = dlogits + (size_t)i * K;
        const int64_t y = labels[i];
        if (y < 0 || y >= K) {
            for (int k = 0; k < K; k++)
                d[k] = 0;
            bad += 1;
            continue;
        }
        float m = z[0];
        int am = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > m) {
                m = z[k];
                am = k;
            }
        float se = 0;
        for (int k = 0; k < K; k++)
            se += expf(z[k] - m);
        const float lse = m + logf(se);
        loss += lse - z[y];
        correct += am == y;
        good += 1;
        for (int k = 0; k < K; k++)
            d[k] = (expf(z[k] - lse) - (k == y ? 1.0f : 0.0f)) / (float)n;
    }
    loss = block_sum(loss, shm);
    correct = block_sum(correct, shm);
    good = block_sum(good, shm);
    bad = block_sum(bad, shm);
    if (threadIdx.x == 0) {
        *batch_loss = good > 0 ? (float)(loss / good) : 0.0f;
        totals->loss_sum += loss;
        totals->correct += (uint64_t)correct;
        totals->samples += (uint64_t)good;
        totals->bad_labels += (uint64_t)bad;
    }
}

/* One thread per weight; threads k < K also do bias k. */
__global__ void grad_kernel(const float *__restrict__ dlogits, const float *__restrict__ feat,
                            int n, int F, int K, float *__restrict__ gW, float *__restrict__ gb)
{
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)K * F) {
        const int k = (int)(idx / F), f = (int)(idx % F);
        float a = 0;
        for (int i = 0; i < n; i++)
            a += dlogits[(size_t)i * K + k] * feat[(size_t)i * F + f];
        gW[idx] = a;
    }
    if (idx < (size_t)K) {
        float a = 0;
        for (int i = 0; i < n; i++)
            a += dlogits[(size_t)i * K + idx];
        gb[idx] = a;
    }
}

__global__ void sgd_kernel(float *__restrict__ p, float *__restrict__ v,
                           const float *__restrict__ g, size_t count, float lr, float momentum)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const float vi = momentum * v[i] + g[i];
        v[i] = vi;
        p[i] -= lr * vi;
    }
}

static unsigned blocks_for(size_t count)
{
    const size_t b = (count + TK_THREADS - 1) / TK_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

extern "C" cudaError_t tk_features(const float *x, int n, int c, int h, int w, int nchw,
                                   int pool, float *feat, cudaStream_t s)
{
    if (n <= 0 || pool <= 0 || h % pool || w % pool)
        return cudaErrorInvalidValue;
    features_kernel<<<n, TK_THREADS, 0, s>>>(x, c, h, w, nchw, pool, feat);
    return cudaGetLastError();
}

extern "C" cudaError_t tk_logits(const float *feat, const float *W, const float *b, int n,
                                 int F, int K, float *logits, cudaStream_t s)
{
    if (n <= 0)
        return cudaErrorInvalidValue;
    logits_kernel<<<n, TK_THREADS, 0, s>>>(feat, W, b, F, K, logits);
    return cudaGetLastError();
}

extern "C" cudaError_t tk_softmax_xent(const float *logits, const int64_t *labels, int n, int K,
                                       float *dlogits, float *batch_loss, tk_totals *totals,
                                       cudaStream_t s)
{
    if (n <= 0)
        return cudaErrorInvalidValue;
    softmax_xent_kernel<<<1, TK_THREADS, 0, s>>>(logits, labels, n, K, dlogits, batch_loss,
                                                 totals);
    return cudaGetLastError();
}

extern "C" cudaError_t tk_grad(const float *dlogits, const float *feat, int n, int F, int K,
                               float *gW, float *gb, cudaStream_t s)
{
    const size_t count = (size_t)K * F;
    const size_t blocks = (count + TK_THREADS - 1) / TK_THREADS;
    if (n <= 0 || blocks > 0x7fffffff)
        return cudaErrorInvalidValue;
    grad_kernel<<<(unsigned)blocks, TK_THREADS, 0, s>>>(dlogits, feat, n, F, K, gW, gb);
    return cudaGetLastError();
}

extern "C" cudaError_t tk_sgd(float *p, float *v, const float *g, size_t count, float lr,
                              float momentum, cudaStream_t s)
{
    sgd_kernel<<<blocks_for(count), TK_THREADS, 0, s>>>(p, v, g, count, lr, momentum);
    return cudaGetLastError();
}
