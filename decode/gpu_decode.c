/*
 * The nvJPEG batched decoder (see gpu_decode.h for the flow and why).
 *
 * Memory: one device scratch buffer holds the batch's decoded images, full
 * size, one after another (256-byte aligned); it grows to the largest batch
 * seen and is then reused. Growing waits for the stream (the previous batch's
 * resize may still read the old buffer), which happens only in the first
 * batches of a run. The resize jobs live in a second small device buffer.
 * Both are used in stream order only, so one of each serves every batch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include "decode/gpu_decode.h"

struct feeder__gpu_decoder {
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    nvjpegJpegStream_t js;
    int hardware;
    int batch_init; /* batch size nvjpegDecodeBatchedInitialize was last called with, or -1 */
    char name[96];
    uint8_t *buf;   /* decoded images */
    size_t buf_cap;
    void *jobs_dev;
    size_t jobs_cap; /* in jobs */
    /* host arrays, grown to the largest batch */
    uint32_t cap;
    const unsigned char **data;
    size_t *lens;
    nvjpegImage_t *out;
    feeder__gpu_resize_job *jobs;
    uint32_t *which; /* img[] number of each accepted image */
};

static const char *njerr(nvjpegStatus_t s)
{
    switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    default: return "nvJPEG error";
    }
}

int feeder__gpu_decoder_create(feeder__gpu_decoder **out, char *why, size_t whylen)
{
    feeder__gpu_decoder *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->batch_init = -1;
    /* The hardware engine first; nvjpegCreateEx fails with it on GPUs that
     * have none, and a handle that has it reports its engines. */
    nvjpegStatus_t s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_DEFAULT,
                                      &d->h);
    unsigned engines = 0, cores = 0;
    if (s == NVJPEG_STATUS_SUCCESS &&
        (nvjpegGetHardwareDecoderInfo(d->h, &engines, &cores) != NVJPEG_STATUS_SUCCESS ||
         engines == 0)) {
        nvjpegDestroy(d->h);
        d->h = NULL;
        s = NVJPEG_STATUS_ARCH_MISMATCH;
    }
    if (s == NVJPEG_STATUS_SUCCESS) {
        d->hardware = 1;
        snprintf(d->name, sizeof(d->name), "nvJPEG hardware (%u engines, %u cores)", engines,
                 cores);
    } else {
        s = nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &d->h);
        if (s != NVJPEG_STATUS_SUCCESS) {
            free(d);
            return feeder__decode_fail(why, whylen, FEEDER_EUNSUPPORTED,
                                       "nvjpegCreateEx: %s", njerr(s));
        }
        snprintf(d->name, sizeof(d->name), "nvJPEG GPU hybrid");
    }
    if ((s = nvjpegJpegStateCreate(d->h, &d->st)) != NVJPEG_STATUS_SUCCESS ||
        (s = nvjpegJpegStreamCreate(d->h, &d->js)) != NVJPEG_STATUS_SUCCESS) {
        feeder__gpu_decoder_destroy(d);
        return feeder__decode_fail(why, whylen, FEEDER_EUNSUPPORTED, "nvJPEG state: %s", njerr(s));
    }
    *out = d;
    return 0;
}

void feeder__gpu_decoder_destroy(feeder__gpu_decoder *d)
{
    if (!d)
        return;
    if (d->js)
        nvjpegJpegStreamDestroy(d->js);
    if (d->st)
        nvjpegJpegStateDestroy(d->st);
    if (d->h)
        nvjpegDestroy(d->h);
    cudaFree(d->buf);
    cudaFree(d->jobs_dev);
    free(d->data);
    free(d->lens);
    free(d->out);
    free(d->jobs);
    free(d->which);
    free(d);
}

const char *feeder__gpu_decoder_name(const feeder__gpu_decoder *d) { return d ? d->name : ""; }

static int grow_host(feeder__gpu_decoder *d, uint32_t n)
{
    if (n <= d->cap)
        return 0;
    void *a = realloc(d->data, n * sizeof(*d->data));
    if (a)
        d->data = a;
    void *b = realloc(d->lens, n * sizeof(*d->lens));
    if (b)
        d->lens = b;
    void *c = realloc(d->out, n * sizeof(*d->out));
    if (c)
        d->out = c;
    void *e = realloc(d->jobs, n * sizeof(*d->jobs));
    if (e)
        d->jobs = e;
    void *f = realloc(d->which, n * sizeof(*d->which));
    if (f)
        d->which = f;
    if (!a || !b || !c || !e || !f)
        return -ENOMEM;
    d->cap = n;
    return 0;
}

/* Make the device buffers big enough; waits for the stream when they grow. */
static cudaError_t grow_dev(feeder__gpu_decoder *d, size_t bytes, uint32_t njobs,
                            cudaStream_t s)
{
    cudaError_t e;
    if (bytes > d->buf_cap || njobs > d->jobs_cap) {
        if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
            return e;
    }
    if (bytes > d->buf_cap) {
        cudaFree(d->buf);
        d->buf = NULL;
        d->buf_cap = 0;
        size_t want = bytes + bytes / 4; /* room for the next batch's larger images */
        if ((e = cudaMalloc((void **)&d->buf, want)) != cudaSuccess)
            return e;
        d->buf_cap = want;
    }
    if (njobs > d->jobs_cap) {
        cudaFree(d->jobs_dev);
        d->jobs_dev = NULL;
        d->jobs_cap = 0;
        if ((e = cudaMalloc(&d->jobs_dev, njobs * sizeof(feeder__gpu_resize_job))) != cudaSuccess)
            return e;
        d->jobs_cap = njobs;
    }
    return cudaSuccess;
}

int feeder__gpu_decode(feeder__gpu_decoder *d, const feeder__transform *t, uint64_t seed,
                       uint64_t epoch, const feeder__gpu_image *img, uint32_t n, uint8_t *dst,
                       size_t sample_bytes, void *stream, uint32_t *refused,
                       uint32_t *nrefused, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    *nrefused = 0;
    if (n == 0)
        return 0;
    if (grow_host(d, n))
        return feeder__decode_fail(err, errlen, -ENOMEM,
                                   "GPU decoder: out of memory for %u images", n);
    /* 1. Headers, on the host. */
    uint32_t m = 0;
    size_t total = 0;
    for (uint32_t k = 0; k < n; k++) {
        const feeder__gpu_image *im = &img[k];
        unsigned w = 0, h = 0;
        int ok = 0;
        if (nvjpegJpegStreamParseHeader(d->h, im->jpeg, im->len, d->js) == NVJPEG_STATUS_SUCCESS &&
            nvjpegJpegStreamGetFrameDimensions(d->js, &w, &h) == NVJPEG_STATUS_SUCCESS &&
            w > 0 && h > 0 && (!t->max_pixels || (uint64_t)w * h <= t->max_pixels)) {
            int unsupported = 1;
            ok = nvjpegDecodeBatchedSupported(d->h, d->js, &unsupported) ==
                     NVJPEG_STATUS_SUCCESS &&
                 unsupported == 0;
        }
        if (!ok) {
            /* The CPU decoder takes it, or names what is wrong with it. */
            refused[(*nrefused)++] = k;
            continue;
        }
        feeder__crop c;
        feeder__crop_compute(t, w, h, seed, epoch, im->index, &c);
        d->data[m] = im->jpeg;
        d->lens[m] = im->len;
        memset(&d->out[m], 0, sizeof(d->out[m]));
        d->out[m].pitch[0] = (size_t)w * 3;
        /* channel[0] is an offset until the buffer is known */
        d->out[m].channel[0] = (unsigned char *)(uintptr_t)total;
        total += ((size_t)w * 3 * h + 255) & ~(size_t)255;
        d->jobs[m] = (feeder__gpu_resize_job){
            .src = NULL, .src_w = w, .src_h = h, .src_pitch = w * 3, .pos = im->pos,
            .bx = (float)c.fx, .by = (float)c.fy, .bw = (float)c.fw, .bh = (float)c.fh,
            .flip = c.flip};
        d->which[m] = k;
        m++;
    }
    if (m == 0)
        return 0;
    cudaError_t e = grow_dev(d, total, m, s);
    if (e != cudaSuccess)
        return feeder__decode_fail(err, errlen, FEEDER_ECUDA,
                                   "GPU decoder: %zu bytes of device memory for %u "
                                   "decoded images: %s", total, m, cudaGetErrorString(e));
    for (uint32_t i = 0; i < m; i++) {
        uintptr_t off = (uintptr_t)d->out[i].channel[0];
        d->out[i].channel[0] = d->buf + off;
        d->jobs[i].src = d->buf + off;
    }
    /* 2. One batched decode. The batched API decodes exactly the batch size
     * it was initialised with. */
    nvjpegStatus_t ns = NVJPEG_STATUS_SUCCESS;
    if (d->batch_init != (int)m) {
        ns = nvjpegDecodeBatchedInitialize(d->h, d->st, (int)m, 1, NVJPEG_OUTPUT_RGBI);
        d->batch_init = ns == NVJPEG_STATUS_SUCCESS ? (int)m : -1;
    }
    if (ns == NVJPEG_STATUS_SUCCESS)
        ns = nvjpegDecodeBatched(d->h, d->st, d->data, d->lens, d->out, s);
    if (ns != NVJPEG_STATUS_SUCCESS) {
        /* One bad bitstream fails the call: every image goes to the CPU,
         * which names the bad one. The state is initialised again next time. */
        d->batch_init = -1;
        for (uint32_t i = 0; i < m; i++)
            refused[(*nrefused)++] = d->which[i];
        return 0;
    }
    /* 3. Crop, resize, flip, layout. */
    e = (cudaError_t)feeder__gpu_resize_launch(d->jobs, m, d->jobs_dev, dst, sample_bytes,
                                               t->width, t->height, t->layout, s);
    if (e != cudaSuccess)
        return feeder__decode_fail(err, errlen, FEEDER_ECUDA, "GPU decoder: resize kernel: %s",
                                   cudaGetErrorString(e));
    return 0;
}
