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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include "common/common.h"
#include "cuda/gpu_decode.h"

/* The batched API decodes exactly the batch size it was initialised with,
 * and initialising again reallocates nvJPEG's buffers and waits for the
 * device. So the size is fixed at the largest batch offered, and a batch with
 * fewer accepted images is filled up with this 16x16 grey JPEG (TurboJPEG,
 * 4:2:0, quality 50), decoded into a scrap area nobody reads (room for RGB;
 * its Y plane takes a third). */
static const unsigned char filler_jpeg[] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01,
    0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43,
    0x00, 0x10, 0x0b, 0x0c, 0x0e, 0x0c, 0x0a, 0x10, 0x0e, 0x0d, 0x0e, 0x12,
    0x11, 0x10, 0x13, 0x18, 0x28, 0x1a, 0x18, 0x16, 0x16, 0x18, 0x31, 0x23,
    0x25, 0x1d, 0x28, 0x3a, 0x33, 0x3d, 0x3c, 0x39, 0x33, 0x38, 0x37, 0x40,
    0x48, 0x5c, 0x4e, 0x40, 0x44, 0x57, 0x45, 0x37, 0x38, 0x50, 0x6d, 0x51,
    0x57, 0x5f, 0x62, 0x67, 0x68, 0x67, 0x3e, 0x4d, 0x71, 0x79, 0x70, 0x64,
    0x78, 0x5c, 0x65, 0x67, 0x63, 0xff, 0xdb, 0x00, 0x43, 0x01, 0x11, 0x12,
    0x12, 0x18, 0x15, 0x18, 0x2f, 0x1a, 0x1a, 0x2f, 0x63, 0x42, 0x38, 0x42,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63, 0x63,
    0x63, 0x63, 0xff, 0xc0, 0x00, 0x11, 0x08, 0x00, 0x10, 0x00, 0x10, 0x03,
    0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01, 0xff, 0xc4, 0x00,
    0x1f, 0x00, 0x00, 0x01, 0x05, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0xff, 0xc4, 0x00, 0xb5, 0x10, 0x00,
    0x02, 0x01, 0x03, 0x03, 0x02, 0x04, 0x03, 0x05, 0x05, 0x04, 0x04, 0x00,
    0x00, 0x01, 0x7d, 0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21,
    0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81,
    0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24,
    0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25,
    0x26, 0x27, 0x28, 0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a,
    0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56,
    0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
    0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86,
    0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99,
    0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3,
    0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6,
    0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9,
    0xda, 0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1,
    0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xff, 0xc4, 0x00,
    0x1f, 0x01, 0x00, 0x03, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0xff, 0xc4, 0x00, 0xb5, 0x11, 0x00,
    0x02, 0x01, 0x02, 0x04, 0x04, 0x03, 0x04, 0x07, 0x05, 0x04, 0x04, 0x00,
    0x01, 0x02, 0x77, 0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31,
    0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71, 0x13, 0x22, 0x32, 0x81, 0x08,
    0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0, 0x15,
    0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18,
    0x19, 0x1a, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39,
    0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55,
    0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84,
    0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97,
    0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa,
    0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4,
    0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
    0xd8, 0xd9, 0xda, 0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea,
    0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xff, 0xda, 0x00,
    0x0c, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3f, 0x00, 0x28,
    0xa2, 0x8a, 0x00, 0xff, 0xd9
};
#define FILLER_SIDE 16u
#define FILLER_BYTES (FILLER_SIDE * FILLER_SIDE * 3u)

struct feeder__gpu_decoder {
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    nvjpegJpegStream_t js;
    int hardware;
    int batch_init; /* batch size nvjpegDecodeBatchedInitialize was last called with, or -1 */
    int batch_fmt;  /* and its output format (nvjpegOutputFormat_t) */
    pthread_mutex_t *engines; /* held around each batched call, or NULL */
    _Atomic uint64_t *stamp;  /* the watchdog's: the call's start, 0 outside it; or NULL */
    char name[96];
    /* Decoded images: two scratch buffers, one call each in turn. The
     * engine writes a buffer when it is called, not in stream order, so
     * the caller waits until the resize of the call before last has read
     * this one (FEEDER__GPU_SCRATCH, feeder__gpu_decoder_scratch). */
    uint8_t *buf[FEEDER__GPU_SCRATCH];
    size_t buf_cap[FEEDER__GPU_SCRATCH];
    unsigned cur;   /* the buffer of the next call */
    void *jobs_dev;
    size_t jobs_cap; /* in jobs */
    uint8_t *scrap;  /* FILLER_BYTES per filler image */
    uint32_t scrap_cap;
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
            return feeder__fail(why, whylen, FEEDER_EUNSUPPORTED, "nvjpegCreateEx: %s", njerr(s));
        }
        snprintf(d->name, sizeof(d->name), "nvJPEG GPU hybrid");
    }
    /* nvJPEG grows its buffers to the largest image seen, and each growth
     * is a cudaMalloc or cudaHostAlloc (a device-wide wait) in the decode
     * call: padding makes the few growths of a run's first batches the last. */
    nvjpegSetDeviceMemoryPadding(64u << 20, d->h);
    nvjpegSetPinnedMemoryPadding(16u << 20, d->h);
    if ((s = nvjpegJpegStateCreate(d->h, &d->st)) != NVJPEG_STATUS_SUCCESS ||
        (s = nvjpegJpegStreamCreate(d->h, &d->js)) != NVJPEG_STATUS_SUCCESS) {
        feeder__gpu_decoder_destroy(d);
        return feeder__fail(why, whylen, FEEDER_EUNSUPPORTED, "nvJPEG state: %s", njerr(s));
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
    for (unsigned k = 0; k < FEEDER__GPU_SCRATCH; k++)
        cudaFree(d->buf[k]);
    cudaFree(d->jobs_dev);
    cudaFree(d->scrap);
    free(d->data);
    free(d->lens);
    free(d->out);
    free(d->jobs);
    free(d->which);
    free(d);
}

const char *feeder__gpu_decoder_name(const feeder__gpu_decoder *d) { return d ? d->name : ""; }

void feeder__gpu_decoder_share_engines(feeder__gpu_decoder *d, void *lock) { d->engines = lock; }

void feeder__gpu_decoder_watch(feeder__gpu_decoder *d, void *stamp) { d->stamp = stamp; }

static void stamp_call(feeder__gpu_decoder *d, int begin)
{
    if (d->stamp)
        atomic_store(d->stamp, begin ? feeder__now_ns() : 0);
}

unsigned feeder__gpu_decoder_scratch(const feeder__gpu_decoder *d)
{
    return (d->cur + 1) % FEEDER__GPU_SCRATCH;
}

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
                            uint32_t nfill, cudaStream_t s)
{
    cudaError_t e;
    unsigned k = d->cur;
    if (bytes > d->buf_cap[k] || njobs > d->jobs_cap || nfill > d->scrap_cap) {
        if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
            return e;
    }
    if (bytes > d->buf_cap[k]) {
        cudaFree(d->buf[k]);
        d->buf[k] = NULL;
        d->buf_cap[k] = 0;
        /* Twice the batch: growing waits for the stream and frees, so it
         * should happen a few times in a run, not every time a batch of
         * larger images comes. */
        size_t want = bytes * 2;
        if ((e = cudaMalloc((void **)&d->buf[k], want)) != cudaSuccess)
            return e;
        d->buf_cap[k] = want;
    }
    if (njobs > d->jobs_cap) {
        cudaFree(d->jobs_dev);
        d->jobs_dev = NULL;
        d->jobs_cap = 0;
        if ((e = cudaMalloc(&d->jobs_dev, njobs * sizeof(feeder__gpu_resize_job))) != cudaSuccess)
            return e;
        d->jobs_cap = njobs;
    }
    if (nfill > d->scrap_cap) {
        cudaFree(d->scrap);
        d->scrap = NULL;
        d->scrap_cap = 0;
        if ((e = cudaMalloc((void **)&d->scrap, (size_t)nfill * FILLER_BYTES)) != cudaSuccess)
            return e;
        d->scrap_cap = nfill;
    }
    return cudaSuccess;
}

/* Does the batched decoder take this image? Its size into *w, *h. */
static int takes(feeder__gpu_decoder *d, const feeder__transform *t, const feeder__gpu_image *im,
                 unsigned *w, unsigned *h)
{
    if (nvjpegJpegStreamParseHeader(d->h, im->jpeg, im->len, d->js) != NVJPEG_STATUS_SUCCESS ||
        nvjpegJpegStreamGetFrameDimensions(d->js, w, h) != NVJPEG_STATUS_SUCCESS || *w == 0 ||
        *h == 0 || (t->max_pixels && (uint64_t)*w * *h > t->max_pixels))
        return 0;
    int unsupported = 1;
    return nvjpegDecodeBatchedSupported(d->h, d->js, &unsupported) == NVJPEG_STATUS_SUCCESS &&
           unsupported == 0;
}

/* Step 1, on the host: parse every header, refuse what the batched decoder
 * does not take, and list the rest with their scratch offsets (in
 * out[].channel[0] until the buffer is known) and resize jobs; each decoded
 * image is `ch` bytes a pixel (3: RGB, 1: the Y plane). The number listed;
 * their scratch bytes into *total. */
static uint32_t list_images(feeder__gpu_decoder *d, const feeder__transform *t, uint64_t seed,
                            uint64_t epoch, const feeder__gpu_image *img, uint32_t n, uint32_t ch,
                            uint32_t *refused, uint32_t *nrefused, size_t *total)
{
    uint32_t m = 0;
    *total = 0;
    for (uint32_t k = 0; k < n; k++) {
        const feeder__gpu_image *im = &img[k];
        unsigned w = 0, h = 0;
        if (!takes(d, t, im, &w, &h)) {
            /* The CPU decoder takes it, or names what is wrong with it. */
            refused[(*nrefused)++] = k;
            continue;
        }
        feeder__crop c;
        feeder__crop_compute(t, w, h, seed, epoch, im->index, &c);
        d->data[m] = im->jpeg;
        d->lens[m] = im->len;
        memset(&d->out[m], 0, sizeof(d->out[m]));
        d->out[m].pitch[0] = (size_t)w * ch;
        d->out[m].channel[0] = (unsigned char *)(uintptr_t)*total;
        *total += ((size_t)w * ch * h + 255) & ~(size_t)255;
        d->jobs[m] = (feeder__gpu_resize_job){
            .src = NULL, .src_w = w, .src_h = h, .src_pitch = w * ch, .pos = im->pos,
            .bx = (float)c.fx, .by = (float)c.fy, .bw = (float)c.fw, .bh = (float)c.fh,
            .flip = c.flip};
        d->which[m] = k;
        m++;
    }
    return m;
}

/* Step 2: point the m listed images into the scratch buffer and fill the
 * batch up to `size` with filler images (`ch` bytes a pixel). */
static void place_outputs(feeder__gpu_decoder *d, uint32_t m, uint32_t size, uint32_t ch)
{
    for (uint32_t i = 0; i < m; i++) {
        uintptr_t off = (uintptr_t)d->out[i].channel[0];
        d->out[i].channel[0] = d->buf[d->cur] + off;
        d->jobs[i].src = d->buf[d->cur] + off;
    }
    for (uint32_t i = m; i < size; i++) {
        d->data[i] = filler_jpeg;
        d->lens[i] = sizeof(filler_jpeg);
        memset(&d->out[i], 0, sizeof(d->out[i]));
        d->out[i].pitch[0] = FILLER_SIDE * ch;
        d->out[i].channel[0] = d->scrap + (size_t)(i - m) * FILLER_BYTES;
    }
}

/* Step 3: one batched decode of `size` images to interleaved RGB (ch 3) or
 * the Y plane (ch 1: a YCbCr JPEG's luma, a gray JPEG's plane), initialising
 * the batch again only when its size or format changed. */
static nvjpegStatus_t decode_batch(feeder__gpu_decoder *d, uint32_t size, uint32_t ch,
                                   cudaStream_t s)
{
    nvjpegStatus_t ns = NVJPEG_STATUS_SUCCESS;
    nvjpegOutputFormat_t fmt = ch == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    stamp_call(d, 1);
    if (d->engines)
        pthread_mutex_lock(d->engines);
    if (d->batch_init != (int)size || d->batch_fmt != (int)fmt) {
        ns = nvjpegDecodeBatchedInitialize(d->h, d->st, (int)size, 1, fmt);
        d->batch_init = ns == NVJPEG_STATUS_SUCCESS ? (int)size : -1;
        d->batch_fmt = (int)fmt;
    }
    if (ns == NVJPEG_STATUS_SUCCESS)
        ns = nvjpegDecodeBatched(d->h, d->st, d->data, d->lens, d->out, s);
    if (d->engines)
        pthread_mutex_unlock(d->engines);
    stamp_call(d, 0);
    if (ns != NVJPEG_STATUS_SUCCESS)
        d->batch_init = -1; /* initialised again next time */
    return ns;
}

int feeder__gpu_decode(feeder__gpu_decoder *d, const feeder__transform *t, uint64_t seed,
                       uint64_t epoch, const feeder__gpu_image *img, uint32_t n, uint8_t *dst,
                       size_t sample_bytes, void *stream, uint32_t *refused,
                       uint32_t *nrefused, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    *nrefused = 0;
    /* Every call takes the next buffer, whatever it does with it, so the
     * caller's count of calls says which one (feeder__gpu_decoder_scratch). */
    d->cur = (d->cur + 1) % FEEDER__GPU_SCRATCH;
    if (n == 0)
        return 0;
    if (grow_host(d, n))
        return feeder__fail(err, errlen, -ENOMEM, "GPU decoder: out of memory for %u images", n);
    size_t total;
    uint32_t ch = (uint32_t)feeder__transform_channels(t);
    uint32_t m = list_images(d, t, seed, epoch, img, n, ch, refused, nrefused, &total);
    if (m == 0)
        return 0;
    /* The batch size stays at the largest batch offered (see filler_jpeg). */
    uint32_t size = d->batch_init > 0 && (uint32_t)d->batch_init >= n ? (uint32_t)d->batch_init : n;
    cudaError_t e = grow_dev(d, total, m, size - m, s);
    if (e != cudaSuccess)
        return feeder__fail(err, errlen, FEEDER_ECUDA,
                            "GPU decoder: %zu bytes of device memory for %u "
                            "decoded images: %s",
                            total, m, cudaGetErrorString(e));
    place_outputs(d, m, size, ch);
    if (decode_batch(d, size, ch, s) != NVJPEG_STATUS_SUCCESS) {
        /* One bad bitstream fails the call: every image goes to the CPU,
         * which names the bad one. */
        for (uint32_t i = 0; i < m; i++)
            refused[(*nrefused)++] = d->which[i];
        return 0;
    }
    /* Step 4: crop, resize, flip, layout. */
    e = (cudaError_t)feeder__gpu_resize_launch(d->jobs, m, d->jobs_dev, dst, sample_bytes,
                                               t->width, t->height, t->layout, (int)ch, s);
    if (e != cudaSuccess)
        return feeder__fail(err, errlen, FEEDER_ECUDA, "GPU decoder: resize kernel: %s",
                            cudaGetErrorString(e));
    return 0;
}

int feeder__gpu_decoder_built(void) { return 1; }
