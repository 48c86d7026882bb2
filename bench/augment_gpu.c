/*
 * bench_augment's GPU rows (augment_gpu.h): each op of the device augment
 * (cuda/augment.cu) on a device batch of BENCH_GPU_BATCH copies of the
 * bench image, launched as the GPU layer launches it (the parameters
 * already on the device; contrast's luma sums and the mixes' batch copy
 * included), timed with CUDA events around back-to-back launches. The
 * batch is not restored between launches (the kernels' work does not
 * depend on the values, bar hue's branches); it is reset to the image
 * before each op. The blur convolves each sample with the kernel of sigma
 * 2, as bench_augment's CPU row. colour jitter draws each sample's order and factors
 * with augment/draw.c, as the loader does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "augment/augment.h"
#include "augment_gpu.h"
#include "benchutil.h"
#include "cuda/augment.h"

enum { ROUNDS = 5, JITTER = 5, MIXUP = 6, CUTMIX = 7, BLUR = 8, BLUR_K = 9 };

const char *const bench_gpu_names[BENCH_GPU_NOPS] = {
    "brightness", "contrast", "saturation", "hue",         "grayscale",
    "color_jitter", "mixup",  "cutmix",     "gaussian_blur"};
const char *const bench_gpu_params[BENCH_GPU_NOPS] = {
    "1.3", "1.3", "1.3", "0.1", "3 channels", "0.4, 0.4, 0.4, 0.1",
    "alpha 0.2, per image", "alpha 1.0, per image", "k 9, sigma 2"};

typedef struct gctx {
    uint8_t *data, *tmp;
    feeder__daug_px *px; /* device, one per sample */
    unsigned long long *sums;
    float *kw, *plane;   /* the blur's kernels (device) and float plane */
    uint8_t mask;        /* positions run (bits 0-3), with contrast (4-7) */
    feeder__mix_draw mix;
    uint32_t w, h;
    int nchw;
    cudaStream_t s;
} gctx;

/* Op f (FEEDER__DAUG_*) with factor (hue: shift) v at position pos, as
 * the GPU layer packs it. */
static void set_op(feeder__daug_px *p, int pos, int f, double v, uint8_t *mask)
{
    p->op[pos] = (uint8_t)f;
    *mask |= (uint8_t)((1u << pos) | (f == FEEDER__DAUG_CONTRAST ? 16u << pos : 0));
    if (f == FEEDER__DAUG_HUE) {
        p->hue = (float)v;
    } else if (f != FEEDER__DAUG_GRAY) {
        p->r[f] = (float)v;
        p->q[f] = (float)(1.0 - v);
    }
}

/* Every sample's parameters for row k < MIXUP (host), and which positions
 * run: rows 0..4 one op (FEEDER__DAUG_* k) at position 0, JITTER each
 * sample's own draws. */
static void fill_params(int k, feeder__daug_px *px, uint8_t *mask)
{
    feeder__aug_step st;
    memset(&st, 0, sizeof(st));
    st.op = FEEDER__AUG_JITTER;
    st.a[0] = st.a[1] = st.a[2] = 0.4;
    st.a[3] = 0.1;
    *mask = 0;
    for (uint32_t n = 0; n < BENCH_GPU_BATCH; n++) {
        feeder__daug_px *p = &px[n];
        memset(p, 0, sizeof(*p));
        memset(p->op, FEEDER__DAUG_NONE, sizeof(p->op));
        if (k < JITTER) {
            set_op(p, 0, k, k == FEEDER__DAUG_HUE ? 0.1 : 1.3, mask);
            continue;
        }
        feeder__jitter_draw j;
        feeder__aug_jitter_draw(&st, 1, 0, n, 0, &j);
        for (int i = 0; i < 4; i++)
            if (j.on[j.order[i]])
                set_op(p, i, j.order[i], j.value[j.order[i]], mask);
    }
}

static cudaError_t launch(const gctx *g, int k)
{
    if (k == BLUR)
        return (cudaError_t)feeder__daug_blur_launch(g->data, BENCH_GPU_BATCH, g->h, g->w, g->nchw,
                                                     g->kw, BLUR_K, g->plane, g->s);
    if (k >= MIXUP) {
        uint32_t box[4] = {g->mix.x1, g->mix.y1, g->mix.x2, g->mix.y2};
        return (cudaError_t)feeder__daug_mix_launch(g->data, g->tmp, BENCH_GPU_BATCH, g->h, g->w,
                                                    g->nchw, g->mix.kind, g->mix.A, g->mix.B,
                                                    box, g->s);
    }
    for (int pos = 0; pos < 4; pos++) {
        if (!(g->mask & (1u << pos)))
            continue;
        cudaError_t e = (cudaError_t)feeder__daug_position_launch(
            g->data, BENCH_GPU_BATCH, g->h, g->w, g->nchw, g->px, pos, (g->mask >> (4 + pos)) & 1,
            g->sums, g->s);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Median over ROUNDS of the GPU time per image (us). */
static cudaError_t time_row(const gctx *g, int k, double seconds, double *us)
{
    cudaEvent_t a, b;
    cudaError_t e;
    if ((e = cudaEventCreate(&a)) != cudaSuccess || (e = cudaEventCreate(&b)) != cudaSuccess)
        return e;
    double per[ROUNDS];
    for (int r = 0; r < ROUNDS && e == cudaSuccess; r++) {
        uint64_t n = 0;
        float ms = 0;
        do {
            if ((e = cudaEventRecord(a, g->s)) != cudaSuccess)
                break;
            for (int i = 0; i < 10 && e == cudaSuccess; i++)
                e = launch(g, k);
            if (e != cudaSuccess || (e = cudaEventRecord(b, g->s)) != cudaSuccess ||
                (e = cudaEventSynchronize(b)) != cudaSuccess)
                break;
            float d = 0;
            if ((e = cudaEventElapsedTime(&d, a, b)) != cudaSuccess)
                break;
            ms += d;
            n += 10;
        } while (ms < seconds * 1e3 / ROUNDS);
        per[r] = (double)ms * 1e3 / (double)n / BENCH_GPU_BATCH;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (e == cudaSuccess)
        *us = bu_median(per, ROUNDS);
    return e;
}

static cudaError_t run_layout(gctx *g, const uint8_t *img, double seconds,
                              double us[BENCH_GPU_NOPS][2], int l)
{
    size_t sb = (size_t)g->w * g->h * 3;
    feeder__daug_px host[BENCH_GPU_BATCH];
    cudaError_t e = cudaSuccess;
    g->nchw = l;
    feeder__augment_plan mp;
    memset(&mp, 0, sizeof(mp));
    for (int k = 0; k < BENCH_GPU_NOPS && e == cudaSuccess; k++) {
        for (uint32_t n = 0; n < BENCH_GPU_BATCH && e == cudaSuccess; n++)
            e = cudaMemcpy(g->data + n * sb, img, sb, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            break;
        if (k == BLUR) {
            static float kw[BENCH_GPU_BATCH * FEEDER__DAUG_KMAX];
            for (uint32_t n = 0; n < BENCH_GPU_BATCH; n++)
                feeder__aug_gauss_kernel(kw + n * FEEDER__DAUG_KMAX, BLUR_K, 2.0);
            e = cudaMemcpy(g->kw, kw, sizeof(kw), cudaMemcpyHostToDevice);
        } else if (k < MIXUP) {
            fill_params(k, host, &g->mask);
            e = cudaMemcpy(g->px, host, sizeof(host), cudaMemcpyHostToDevice);
        } else {
            mp.mixup_alpha = k == MIXUP ? 0.2 : 0;
            mp.cutmix_alpha = k == CUTMIX ? 1.0 : 0;
            mp.mixup_p = mp.cutmix_p = 1.0;
            feeder__aug_mix_draw(&mp, BENCH_GPU_BATCH, g->w, g->h, 1, 0, 0, &g->mix);
        }
        if (e == cudaSuccess)
            e = time_row(g, k, seconds, &us[k][l]);
    }
    return e;
}

int bench_gpu_augment(const uint8_t *hwc, const uint8_t *chw, uint32_t w, uint32_t h,
                      double seconds, double us[BENCH_GPU_NOPS][2], char *device, size_t len,
                      char *why, size_t whylen)
{
    int n = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        snprintf(why, whylen, "no CUDA device");
        return -1;
    }
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    snprintf(device, len, "%s", e == cudaSuccess ? prop.name : "device 0");
    gctx g;
    memset(&g, 0, sizeof(g));
    g.w = w;
    g.h = h;
    size_t bytes = (size_t)BENCH_GPU_BATCH * w * h * 3;
    if ((e = cudaStreamCreate(&g.s)) == cudaSuccess &&
        (e = cudaMalloc((void **)&g.data, bytes)) == cudaSuccess &&
        (e = cudaMalloc((void **)&g.tmp, bytes)) == cudaSuccess &&
        (e = cudaMalloc((void **)&g.px, BENCH_GPU_BATCH * sizeof(feeder__daug_px))) ==
            cudaSuccess &&
        (e = cudaMalloc((void **)&g.sums, BENCH_GPU_BATCH * sizeof(unsigned long long))) ==
            cudaSuccess &&
        (e = cudaMalloc((void **)&g.kw, BENCH_GPU_BATCH * FEEDER__DAUG_KMAX * sizeof(float))) ==
            cudaSuccess &&
        (e = cudaMalloc((void **)&g.plane, bytes / 3 * sizeof(float))) == cudaSuccess &&
        (e = run_layout(&g, hwc, seconds, us, 0)) == cudaSuccess)
        e = run_layout(&g, chw, seconds, us, 1);
    cudaFree(g.data);
    cudaFree(g.tmp);
    cudaFree(g.px);
    cudaFree(g.sums);
    cudaFree(g.kw);
    cudaFree(g.plane);
    if (g.s)
        cudaStreamDestroy(g.s);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "%s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
