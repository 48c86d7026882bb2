/*
 * The GPU path (cuda/): device batches against host batches, the normalise
 * kernel against a CPU reference, a slow consumer against the smallest
 * rings, allocators, errors. Needs a CUDA device: without one the program
 * exits 77 (skipped). The runner process never touches CUDA (Check forks
 * every test; a child decides whether a device exists), so each test starts
 * with a fresh CUDA context, as a forked child must.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <turbojpeg.h>

#include "benchutil.h"
#include "cuda/normalize.h"
#include "cuda_kernels.h"
#include "feeder.h"
#include "feeder_cuda.h"
#include "testutil.h"
#include "dataset/pack.h"

#define CK_CUDA(call)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));       \
    } while (0)

static char tmpdir[256];
static feeder_dataset *jpegs;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-cuda-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    bu_photos *photos;
    char err[256];
    ck_assert_int_eq(bu_photos_load(FEEDER_TEST_PHOTOS, &photos, err, sizeof(err)), 0);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/imgs", tmpdir);
    ck_assert_int_eq(bu_make_dataset(photos, dir, 3, 6, 11, 0), 0);
    bu_photos_free(photos);
    ck_assert_int_eq(feeder_dataset_open_folder(dir, &jpegs, err, sizeof(err)), 0);
}

static void teardown(void)
{
    feeder_dataset_destroy(jpegs);
    jpegs = NULL;
    bu_rm_rf(tmpdir);
}

/* ---- runs ---- */

typedef struct cfg {
    int device, pin, dtype, layout, workers, prefetch, gpu_prefetch, pipeline, batch, epochs;
    int decoder, size;
    int warmup; /* FEEDER_OPT_GPU_WARMUP: off unless a test is about it (exact counts) */
    int channels; /* FEEDER_OPT_CHANNELS; 0 leaves the default (3) */
    int room;     /* FEEDER_OPT_GPU_ROOM; 0 leaves the default (192 KiB) */
    int policy;   /* FEEDER_OPT_ERROR_POLICY; 0 leaves the default (FAIL) */
    int threads;  /* FEEDER_OPT_GPU_DECODE_THREADS; 0 leaves the default (automatic) */
    const char *trace; /* feeder_loader_set_trace's path, or NULL */
} cfg;

static cfg base(void)
{
    return (cfg){.device = -1, .pin = FEEDER_PIN_REGISTER, .dtype = FEEDER_DTYPE_UINT8,
                 .layout = FEEDER_LAYOUT_NHWC, .workers = 2, .prefetch = 2, .gpu_prefetch = 2,
                 .pipeline = FEEDER_PIPELINE_TRAIN, .batch = 5, .epochs = 2,
                 .decoder = FEEDER_DECODER_ROI, .size = 0};
}

/* base() with nvJPEG on device 0 and 224x224 samples (150,528 bytes: every
 * test JPEG fits its place). */
static cfg nvjpeg_cfg(void)
{
    cfg c = base();
    c.size = 224;
    c.device = 0;
    c.decoder = FEEDER_DECODER_NVJPEG;
    return c;
}

static int poison_allocs;
static void *poison_alloc(void *user, size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        return NULL;
    /* Every byte feeder does not write shows as 0xA5. */
    if (cudaMemset(p, 0xA5, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    (*(int *)user)++;
    return p;
}
static void poison_free(void *user, void *p) { cudaFree(p); }

static int pinned_allocs;
static void *pinned_alloc(void *user, size_t n)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, n, cudaHostAllocPortable) != cudaSuccess)
        return NULL;
    memset(p, 0x5A, n);
    (*(int *)user)++;
    return p;
}
static void pinned_free(void *user, void *p) { cudaFreeHost(p); }

static feeder_loader *make(feeder_dataset *ds, const cfg *c)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, c->batch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, c->workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, c->prefetch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, 3), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, c->pipeline), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, c->size ? c->size : 40), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, c->size ? c->size : 56), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, c->size ? c->size : 64), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, c->decoder), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, c->layout), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, c->device), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, c->pin), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, c->dtype), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_PREFETCH, c->gpu_prefetch), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_THREADS, 3), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_WARMUP, c->warmup), 0);
    if (c->channels)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, c->channels), 0);
    if (c->room)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_ROOM, c->room), 0);
    if (c->policy)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_ERROR_POLICY, c->policy), 0);
    if (c->threads)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_DECODE_THREADS, c->threads), 0);
    if (c->trace)
        ck_assert_int_eq(feeder_loader_set_trace(ld, c->trace), 0);
    return ld;
}

/* Every batch of c->epochs epochs: bytes (host batches: data; device
 * batches: device_data copied back after the ready event), labels (host and
 * device copies, which must agree), indices. */
typedef struct run {
    uint32_t nb;
    uint32_t count[64];
    uint64_t epoch[64], number[64];
    uint8_t *bytes[64];
    size_t nbytes[64];
    int64_t labels[64][16];
    uint64_t idx[64][16];
} run;

static void run_free(run *r)
{
    for (uint32_t i = 0; i < r->nb; i++)
        free(r->bytes[i]);
    free(r);
}

/* What the last collect() saw at its end. */
static feeder_stats last_stats;
static int last_decoder;
static char last_reason[512];
static char last_gpu_how[1024]; /* feeder_loader_gpu_status's text, at start */

static run *collect(feeder_dataset *ds, const cfg *c, const feeder_allocator *dev,
                    const feeder_allocator *pin)
{
    feeder_loader *ld = make(ds, c);
    if (dev || pin)
        ck_assert_int_eq(feeder_loader_set_allocators(ld, dev, pin), 0);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why;
    int on = feeder_loader_gpu_status(ld, &why);
    ck_assert_msg(on == (c->device >= 0), "gpu_status %d: %s", on, why);
    snprintf(last_gpu_how, sizeof(last_gpu_how), "%s", why);
    cudaStream_t s = NULL;
    if (on)
        CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    run *r = calloc(1, sizeof(*r));
    for (int e = 0; e < c->epochs; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            uint32_t i = r->nb++;
            ck_assert_uint_lt(i, 64);
            ck_assert_uint_le(b->count, 16);
            r->count[i] = b->count;
            r->epoch[i] = b->epoch;
            r->number[i] = b->number;
            memcpy(r->labels[i], b->labels, b->count * sizeof(int64_t));
            memcpy(r->idx[i], b->indices, b->count * sizeof(uint64_t));
            if (!on) {
                ck_assert_ptr_nonnull(b->data);
                ck_assert_ptr_null(b->device_data);
                r->nbytes[i] = (size_t)b->count * b->sample_bytes;
                r->bytes[i] = malloc(r->nbytes[i]);
                memcpy(r->bytes[i], b->data, r->nbytes[i]);
            } else {
                ck_assert_ptr_null(b->data);
                ck_assert_ptr_nonnull(b->device_data);
                ck_assert_ptr_nonnull(b->ready_event);
                ck_assert_int_eq(b->device, c->device);
                ck_assert_int_eq(b->dtype, c->dtype);
                ck_assert_uint_eq(b->device_bytes, (size_t)b->count * b->sample_bytes);
                r->nbytes[i] = b->device_bytes;
                r->bytes[i] = malloc(r->nbytes[i]);
                int64_t dl[16];
                /* As a user would: the stream waits on the event; the host
                 * reads only after synchronising that stream. */
                CK_CUDA(feeder_batch_wait(b, s));
                CK_CUDA(cudaMemcpyAsync(r->bytes[i], b->device_data, r->nbytes[i],
                                        cudaMemcpyDeviceToHost, s));
                CK_CUDA(cudaMemcpyAsync(dl, b->device_labels, b->count * sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, s));
                CK_CUDA(cudaStreamSynchronize(s));
                ck_assert_mem_eq(dl, b->labels, b->count * sizeof(int64_t));
            }
            ck_assert_int_eq(feeder_batch_release(b, s), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    }
    feeder_stats st;
    ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
    last_stats = st;
    const char *dwhy;
    last_decoder = feeder_loader_decoder(ld, &dwhy);
    snprintf(last_reason, sizeof(last_reason), "%s", dwhy);
    if (on) {
        ck_assert_uint_eq(st.gpu_batches, r->nb);
        ck_assert_uint_gt(st.h2d_bytes, 0);
        ck_assert_uint_gt(st.device_bytes, 0);
    }
    feeder_loader_destroy(ld);
    if (s)
        CK_CUDA(cudaStreamDestroy(s));
    return r;
}

static void same_batches(const run *a, const run *b)
{
    ck_assert_uint_eq(a->nb, b->nb);
    for (uint32_t i = 0; i < a->nb; i++) {
        ck_assert_uint_eq(a->count[i], b->count[i]);
        ck_assert_uint_eq(a->epoch[i], b->epoch[i]);
        ck_assert_uint_eq(a->number[i], b->number[i]);
        ck_assert_mem_eq(a->labels[i], b->labels[i], a->count[i] * sizeof(int64_t));
        ck_assert_mem_eq(a->idx[i], b->idx[i], a->count[i] * sizeof(uint64_t));
        ck_assert_uint_eq(a->nbytes[i], b->nbytes[i]);
        ck_assert_msg(memcmp(a->bytes[i], b->bytes[i], a->nbytes[i]) == 0,
                      "batch %u: device bytes differ from host bytes", i);
    }
}

/* ---- device batches are the host batches ---- */

/* h on device 0 with pin mode `pin` and `workers` workers, through the
 * counting allocators (poison_allocs, pinned_allocs: reset here). */
static run *collect_counted(const cfg *h, int pin, int workers)
{
    cfg d = *h;
    d.device = 0;
    d.pin = pin;
    d.workers = workers;
    poison_allocs = pinned_allocs = 0;
    feeder_allocator dev = {poison_alloc, poison_free, &poison_allocs};
    feeder_allocator pinned = {pinned_alloc, pinned_free, &pinned_allocs};
    return collect(jpegs, &d, &dev, &pinned);
}

START_TEST(test_device_matches_host)
{
    static const int pins[] = {FEEDER_PIN_NONE, FEEDER_PIN_COPY, FEEDER_PIN_REGISTER};
    for (int layout = 0; layout < 2; layout++) {
        cfg h = base();
        h.layout = layout;
        run *ref = collect(jpegs, &h, NULL, NULL);
        ck_assert_uint_eq(ref->nb, 8); /* 18 images, batch 5: 4 a epoch, the last short */
        ck_assert_uint_eq(ref->count[3], 3);
        for (int p = 0; p < 3; p++) {
            for (int w = 0; w <= 2; w += 2) {
                run *got = collect_counted(&h, pins[p], w);
                same_batches(ref, got);
                /* Data and labels for each of the gpu_prefetch buffers. */
                ck_assert_int_eq(poison_allocs, 2 * h.gpu_prefetch);
                ck_assert_int_eq(pinned_allocs, pins[p] == FEEDER_PIN_COPY ? h.gpu_prefetch : 0);
                run_free(got);
            }
        }
        run_free(ref);
    }
}
END_TEST

START_TEST(test_register_refused_copies_through_pinned_buffers)
{
    /* Where the first slot cannot be registered (after the workers fork),
     * the layer copies through pinned buffers it makes then: the same
     * batches, one pinned buffer per device buffer, and the status says why. */
    cfg h = base();
    run *ref = collect(jpegs, &h, NULL, NULL);
    setenv("FEEDER_GPU_REGISTER_FAIL", "1", 1);
    for (int w = 0; w <= 2; w += 2) {
        run *got = collect_counted(&h, FEEDER_PIN_REGISTER, w);
        same_batches(ref, got);
        ck_assert_int_eq(pinned_allocs, h.gpu_prefetch);
        ck_assert_msg(strstr(last_gpu_how, "pin copy (") &&
                          strstr(last_gpu_how, "slot failed: "),
                      "status: %s", last_gpu_how);
        run_free(got);
    }
    unsetenv("FEEDER_GPU_REGISTER_FAIL");
    run_free(ref);
}
END_TEST

/* ---- the normalise kernel against the CPU ---- */

static uint16_t f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - exp;
        uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (m & 1)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)h;
}

static uint16_t f2bf(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

START_TEST(test_normalize_matches_cpu)
{
    static const size_t esize[] = {1, 2, 2, 4};
    cfg h = base();
    h.layout = FEEDER_LAYOUT_NHWC;
    run *ref = collect(jpegs, &h, NULL, NULL);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float scale[3], shift[3];
    feeder__normalize_params(mean, std, scale, shift);
    const uint32_t H = 40, W = 56, hw = H * W;
    for (int dt = FEEDER_DTYPE_FLOAT16; dt <= FEEDER_DTYPE_FLOAT32; dt++) {
        for (int layout = 0; layout < 2; layout++) {
            cfg d = h;
            d.device = 0;
            d.dtype = dt;
            d.layout = layout;
            run *got = collect(jpegs, &d, NULL, NULL);
            ck_assert_uint_eq(got->nb, ref->nb);
            for (uint32_t b = 0; b < ref->nb; b++) {
                ck_assert_uint_eq(got->nbytes[b], ref->nbytes[b] * esize[dt]);
                ck_assert_mem_eq(got->labels[b], ref->labels[b], ref->count[b] * sizeof(int64_t));
                for (uint64_t px = 0; px < (uint64_t)ref->count[b] * hw; px++) {
                    for (int c = 0; c < 3; c++) {
                        float v = fmaf((float)ref->bytes[b][px * 3 + c], scale[c], shift[c]);
                        uint64_t n = px / hw, q = px % hw;
                        uint64_t o = layout == FEEDER_LAYOUT_NCHW ? (n * 3 + (uint64_t)c) * hw + q
                                                                  : px * 3 + (uint64_t)c;
                        const uint8_t *g = got->bytes[b] + o * esize[dt];
                        if (dt == FEEDER_DTYPE_FLOAT32) {
                            float gv;
                            memcpy(&gv, g, 4);
                            ck_assert_msg(memcmp(&gv, &v, 4) == 0,
                                          "float32 batch %u px %llu c %d: %.9g vs %.9g", b,
                                          (unsigned long long)px, c, gv, v);
                        } else {
                            uint16_t gv, want = dt == FEEDER_DTYPE_FLOAT16 ? f2h(v) : f2bf(v);
                            memcpy(&gv, g, 2);
                            ck_assert_msg(gv == want, "dtype %d batch %u px %llu c %d: %04x vs %04x",
                                          dt, b, (unsigned long long)px, c, gv, want);
                        }
                    }
                }
            }
            run_free(got);
        }
    }
    run_free(ref);
}
END_TEST

/* The default mean/std can be replaced per channel. */
START_TEST(test_normalize_custom_mean_std)
{
    cfg d = base();
    d.device = 0;
    d.dtype = FEEDER_DTYPE_FLOAT32;
    d.epochs = 1;
    feeder_loader *ld = make(jpegs, &d);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_MEAN_R, 0.0), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_MEAN_G, 0.5), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_MEAN_B, 1.0), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_R, 1.0), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_G, 0.5), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_B, 2.0), 0);
    ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_B, 0.0), FEEDER_ERANGE);
    cfg h = d;
    h.device = -1;
    h.dtype = FEEDER_DTYPE_UINT8;
    run *ref = collect(jpegs, &h, NULL, NULL);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    size_t n = (size_t)b->count * 40 * 56 * 3;
    float *out = malloc(n * sizeof(float));
    CK_CUDA(cudaEventSynchronize(feeder_batch_event(b)));
    CK_CUDA(cudaMemcpy(out, b->device_data, n * sizeof(float), cudaMemcpyDeviceToHost));
    const float mean[3] = {0, 0.5f, 1}, std[3] = {1, 0.5f, 2};
    float scale[3], shift[3];
    feeder__normalize_params(mean, std, scale, shift);
    for (size_t i = 0; i < n; i++) {
        float want = fmaf((float)ref->bytes[0][i], scale[i % 3], shift[i % 3]);
        ck_assert_msg(out[i] == want, "element %zu: %g vs %g", i, out[i], want);
    }
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    free(out);
    run_free(ref);
    feeder_loader_destroy(ld);
}
END_TEST

/* ---- grayscale (FEEDER_OPT_CHANNELS 1) on the device ---- */

/* uint8 gray device batches are the host's, for every pin mode and layout,
 * with and without workers (the GPU decoders' gray output:
 * test_nvjpeg_gray_close_to_cpu). */
START_TEST(test_gray_device_matches_host)
{
    static const int pins[] = {FEEDER_PIN_NONE, FEEDER_PIN_COPY, FEEDER_PIN_REGISTER};
    for (int layout = 0; layout < 2; layout++) {
        cfg h = base();
        h.layout = layout;
        h.channels = 1;
        run *ref = collect(jpegs, &h, NULL, NULL);
        ck_assert_uint_eq(ref->nb, 8);
        ck_assert_uint_eq(ref->nbytes[0], 5u * 40 * 56); /* one byte a pixel */
        for (int p = 0; p < 3; p++)
            for (int w = 0; w <= 2; w += 2) {
                cfg d = h;
                d.device = 0;
                d.pin = pins[p];
                d.workers = w;
                run *got = collect(jpegs, &d, NULL, NULL);
                same_batches(ref, got);
                run_free(got);
            }
        run_free(ref);
    }
}
END_TEST

/* One float gray batch against the host batch's bytes through channel 0's
 * scale and shift. */
static void check_gray_float(feeder_batch *b, const run *ref, uint32_t bi, int dt,
                             const float *scale, const float *shift)
{
    static const size_t esize[] = {1, 2, 2, 4};
    ck_assert_uint_eq(b->channels, 1);
    ck_assert_uint_eq(b->count, ref->count[bi]);
    ck_assert_mem_eq(b->labels, ref->labels[bi], b->count * sizeof(int64_t));
    size_t n = ref->nbytes[bi];
    ck_assert_uint_eq(b->device_bytes, n * esize[dt]);
    uint8_t *out = malloc(b->device_bytes);
    CK_CUDA(cudaEventSynchronize(feeder_batch_event(b)));
    CK_CUDA(cudaMemcpy(out, b->device_data, b->device_bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        float v = fmaf((float)ref->bytes[bi][i], scale[0], shift[0]);
        if (dt == FEEDER_DTYPE_FLOAT32) {
            float gv;
            memcpy(&gv, out + 4 * i, 4);
            ck_assert_msg(memcmp(&gv, &v, 4) == 0, "float32 batch %u byte %zu: %.9g vs %.9g", bi,
                          i, gv, v);
        } else {
            uint16_t gv, want = dt == FEEDER_DTYPE_FLOAT16 ? f2h(v) : f2bf(v);
            memcpy(&gv, out + 2 * i, 2);
            ck_assert_msg(gv == want, "dtype %d batch %u byte %zu: %04x vs %04x", dt, bi, i, gv,
                          want);
        }
    }
    free(out);
}

/* Float gray batches: every byte through channel 0's mean and std (the
 * G and B settings are not used), the same in either layout. */
START_TEST(test_gray_normalize_matches_cpu)
{
    cfg h = base();
    h.channels = 1;
    run *ref = collect(jpegs, &h, NULL, NULL);
    const float mean[3] = {0.25f, 0.456f, 0.406f}, std[3] = {0.5f, 0.224f, 0.225f};
    float scale[3], shift[3];
    feeder__normalize_params(mean, std, scale, shift);
    for (int dt = FEEDER_DTYPE_FLOAT16; dt <= FEEDER_DTYPE_FLOAT32; dt++)
        for (int layout = 0; layout < 2; layout++) {
            cfg d = h;
            d.device = 0;
            d.dtype = dt;
            d.layout = layout;
            feeder_loader *ld = make(jpegs, &d);
            ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_MEAN_R, 0.25), 0);
            ck_assert_int_eq(feeder_loader_set_double(ld, FEEDER_OPT_STD_R, 0.5), 0);
            uint32_t bi = 0;
            int rc = FEEDER_DONE;
            for (int e = 0; e < h.epochs && rc == FEEDER_DONE; e++) {
                feeder_batch *b;
                while ((rc = feeder_next(ld, &b)) == 0) {
                    ck_assert_uint_lt(bi, ref->nb);
                    check_gray_float(b, ref, bi++, dt, scale, shift);
                    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
                }
            }
            ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
            ck_assert_uint_eq(bi, ref->nb);
            feeder_loader_destroy(ld);
        }
    run_free(ref);
}
END_TEST

/* ---- a fast producer, a slow consumer, the smallest rings ---- */

typedef struct pattern {
    uint64_t n;
} pattern;

static uint64_t pat_len(void *u) { return ((pattern *)u)->n; }
static int pat_get(void *u, const feeder_sample_ctx *ctx, uint8_t *dst, size_t bytes,
                   int64_t *label, char *err, size_t errlen)
{
    for (size_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(ctx->index * 131 + i * 7 + ctx->epoch * 17);
    *label = (int64_t)(ctx->index % 1000);
    return 0;
}

/* The sum the user's step must read from batch b of `epoch`: its samples
 * rebuilt from the pattern into buf (room for the batch), labels checked. */
static unsigned long long expected_sum(const feeder_batch *b, uint64_t epoch, uint8_t *buf)
{
    for (uint32_t k = 0; k < b->count; k++) {
        feeder_sample_ctx ctx = {.index = b->indices[k], .epoch = epoch};
        int64_t lab;
        pat_get(NULL, &ctx, buf + k * b->sample_bytes, b->sample_bytes, &lab, NULL, 0);
        ck_assert_int_eq(lab, b->labels[k]);
    }
    return tk_host_sum(buf, (size_t)b->count * b->sample_bytes, b->labels, b->count);
}

/* The user's step on s: wait for the batch, spin, sum every byte into *sum;
 * then release the batch at once, before the step has run. */
static void step_and_release(feeder_batch *b, cudaStream_t s, uint64_t spin_ns,
                             unsigned long long *sum)
{
    CK_CUDA(feeder_batch_wait(b, s));
    ck_assert_int_eq(tk_spin_sum(b->device_data, b->device_bytes, b->device_labels, b->count,
                                 spin_ns, sum, s),
                     0);
    ck_assert_int_eq(feeder_batch_release(b, s), 0);
}

/* After s has run every step: the n device sums equal the host ones. */
static void check_sums(cudaStream_t s, const unsigned long long *dev,
                       const unsigned long long *want, uint32_t n, int pin)
{
    CK_CUDA(cudaStreamSynchronize(s));
    unsigned long long *got = calloc(n, sizeof(*got));
    CK_CUDA(cudaMemcpy(got, dev, n * sizeof(*got), cudaMemcpyDeviceToHost));
    for (uint32_t k = 0; k < n; k++)
        ck_assert_msg(got[k] == want[k], "pin mode %d, batch %u: device read %llu, expected %llu",
                      pin, k, got[k], want[k]);
    free(got);
}

START_TEST(test_slow_consumer_smallest_rings)
{
    /* The user's step spins, then reads every byte; it releases the batch on
     * its stream at once. A buffer rewritten before the step has read it
     * gives a wrong sum. */
    static const int pins[] = {FEEDER_PIN_NONE, FEEDER_PIN_COPY, FEEDER_PIN_REGISTER};
    /* FEEDER_TEST_STRESS_BATCHES shortens the run under compute-sanitizer. */
    const char *env = getenv("FEEDER_TEST_STRESS_BATCHES");
    const uint32_t nb = env && atoi(env) > 0 && atoi(env) <= 1500 ? (uint32_t)atoi(env) : 1500;
    pattern pat = {.n = 2ull * nb}; /* 2 samples a batch */
    feeder_dataset_callbacks cb = {.len = pat_len, .get = pat_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, &pat, &ds), 0);
    for (int p = 0; p < 3; p++) {
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, 16), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, 16), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_PREFETCH, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, pins[p]), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_THREADS, 2), 0);
        cudaStream_t s;
        CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        unsigned long long *sums;
        CK_CUDA(cudaMalloc((void **)&sums, nb * sizeof(*sums)));
        CK_CUDA(cudaMemset(sums, 0, nb * sizeof(*sums)));
        unsigned long long *want = calloc(nb, sizeof(*want));
        uint8_t buf[2 * 16 * 16 * 3];
        feeder_batch *b;
        uint32_t i = 0;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_uint_lt(i, nb);
            ck_assert_uint_eq(b->number, i);
            want[i] = expected_sum(b, 0, buf);
            step_and_release(b, s, i % 7 == 0 ? 200000 : 20000, sums + i);
            i++;
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
        ck_assert_uint_eq(i, nb);
        check_sums(s, sums, want, nb, pins[p]);
        free(want);
        CK_CUDA(cudaFree(sums));
        CK_CUDA(cudaStreamDestroy(s));
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* A consumer that releases at once while large copies are still in flight:
 * an entry is refilled before its last copy ended, and the slot that copy
 * read must still go back to the workers. With 2 slots, one lost slot stalls
 * the loader (timeout) within a few batches. */
START_TEST(test_fast_consumer_large_copies_keep_slots)
{
    static const int pins[] = {FEEDER_PIN_NONE, FEEDER_PIN_COPY, FEEDER_PIN_REGISTER};
    pattern pat = {.n = 32 * 40};
    feeder_dataset_callbacks cb = {.len = pat_len, .get = pat_get};
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_create(&cb, &pat, &ds), 0);
    for (int p = 0; p < 3; p++) {
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 32), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PREFETCH_FACTOR, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 20000), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, pins[p]), 0);
        cudaStream_t s;
        CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        unsigned long long *sums;
        CK_CUDA(cudaMalloc((void **)&sums, 120 * sizeof(*sums)));
        CK_CUDA(cudaMemset(sums, 0, 120 * sizeof(*sums)));
        unsigned long long want[120];
        const size_t sb = 224 * 224 * 3;
        uint8_t *buf = malloc(32 * sb);
        uint32_t i = 0;
        for (int e = 0; e < 3; e++) {
            feeder_batch *b;
            int rc;
            while ((rc = feeder_next(ld, &b)) == 0) {
                ck_assert_uint_lt(i, 120);
                want[i] = expected_sum(b, (uint64_t)e, buf);
                step_and_release(b, s, 0, sums + i);
                i++;
            }
            ck_assert_msg(rc == FEEDER_DONE, "pin mode %d, epoch %d: %s: %s", pins[p], e,
                          feeder_strerror(rc), feeder_loader_errmsg(ld));
        }
        ck_assert_uint_eq(i, 120);
        check_sums(s, sums, want, 120, pins[p]);
        free(buf);
        CK_CUDA(cudaFree(sums));
        CK_CUDA(cudaStreamDestroy(s));
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
}
END_TEST

/* ---- errors and lifetimes ---- */

START_TEST(test_device_ring_borrowed)
{
    cfg d = base();
    d.device = 0;
    feeder_loader *ld = make(jpegs, &d);
    feeder_batch *a, *b, *c;
    ck_assert_int_eq(feeder_next(ld, &a), 0);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_next(ld, &c), FEEDER_EBUSY);
    ck_assert_str_eq(feeder_loader_errmsg(ld),
                     "all 2 device buffers are borrowed; release a batch first (gpu_prefetch = 2)");
    ck_assert_uint_eq(a->number, 0);
    ck_assert_uint_eq(b->number, 1);
    ck_assert_int_eq(feeder_batch_release(a, NULL), 0);
    ck_assert_int_eq(feeder_batch_release(a, NULL), FEEDER_EINVAL); /* twice */
    ck_assert_int_eq(feeder_next(ld, &c), 0);
    ck_assert_uint_eq(c->number, 2);
    /* Destroy with two batches lent and copies in flight. */
    feeder_loader_destroy(ld);
}
END_TEST

START_TEST(test_device_out_of_range)
{
    int n = 0;
    CK_CUDA(cudaGetDeviceCount(&n));
    cfg d = base();
    d.device = n;
    feeder_loader *ld = make(jpegs, &d);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ERANGE);
    char want[160];
    snprintf(want, sizeof(want), "device = %d, but this machine has %d CUDA device%s (0..%d)", n, n,
             n == 1 ? "" : "s", n - 1);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
}
END_TEST

START_TEST(test_set_epoch_drops_prefetched)
{
    cfg d = base();
    d.device = 0;
    d.pin = FEEDER_PIN_COPY;
    cfg h = d;
    h.device = -1;
    run *ref = collect(jpegs, &h, NULL, NULL);
    feeder_loader *ld = make(jpegs, &d);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    /* Batches 1 and 2 are being prefetched; epoch 1 starts over. */
    ck_assert_int_eq(feeder_loader_set_epoch(ld, 1), 0);
    uint32_t k = 4; /* epoch 1 starts at ref batch 4 */
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        ck_assert_uint_eq(b->epoch, 1);
        ck_assert_uint_eq(b->number, ref->number[k]);
        ck_assert_mem_eq(b->indices, ref->idx[k], b->count * sizeof(uint64_t));
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        k++;
    }
    ck_assert_int_eq(rc, FEEDER_DONE);
    ck_assert_uint_eq(k, 8);
    run_free(ref);
    feeder_loader_destroy(ld);
}
END_TEST

START_TEST(test_status_describes_path)
{
    cfg d = base();
    d.device = 0;
    d.pin = FEEDER_PIN_COPY;
    d.dtype = FEEDER_DTYPE_BFLOAT16;
    d.layout = FEEDER_LAYOUT_NCHW;
    feeder_loader *ld = make(jpegs, &d);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why;
    ck_assert_int_eq(feeder_loader_gpu_status(ld, &why), 1);
    ck_assert_str_eq(why, "device 0, pin copy (3 threads), 2 device buffers of 67200 bytes, "
                          "bfloat16 NCHW");
    feeder_loader_destroy(ld);
}
END_TEST

/* ---- packed RAW records on the device ---- */

/* A RAW pack of n 40x56x3 records in `layout`: byte k of record i is
 * (i * 7 + k) & 255, label i % 4. */
/* The offset of the first record. */
static uint64_t write_raw_pack(const char *path, uint64_t n, int layout)
{
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    h.version = FEEDER__PACK_VERSION;
    h.header_bytes = FEEDER__PACK_HEADER_BYTES;
    h.kind = FEEDER_RECORD_RAW;
    h.dtype = FEEDER__PACK_DTYPE_UINT8;
    h.label_type = FEEDER__PACK_LABEL_INT64;
    h.layout = (uint32_t)layout;
    h.height = 40;
    h.width = 56;
    h.channels = 3;
    h.record_bytes = 40 * 56 * 3;
    h.count = n;
    h.shard_count = 1;
    h.total_records = n;
    size_t len = feeder__pack_layout(&h, 0, n * h.record_bytes);
    uint8_t *buf = calloc(1, len);
    ck_assert_ptr_nonnull(buf);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *rec = buf + h.records_off + i * h.record_bytes;
        for (uint64_t k = 0; k < h.record_bytes; k++)
            rec[k] = (uint8_t)(i * 7 + k);
        int64_t lab = (int64_t)(i % 4);
        /* Version 2: the record's crc32c covers its label too. */
        feeder__pack_entry_encode(buf + h.index_off + i * FEEDER__PACK_ENTRY_BYTES,
                                  h.records_off + i * h.record_bytes, h.record_bytes,
                                  feeder__crc32c(feeder__pack_crc_seed(h.version, lab), rec,
                                                 h.record_bytes));
        memcpy(buf + h.labels_off + i * 8, &lab, 8);
    }
    feeder__pack_header_encode(&h, buf);
    ck_assert_int_eq(bu_write_file(path, buf, len), 0);
    free(buf);
    return h.records_off;
}

/* RAW records reach the device as they are (uint8, every pin mode), and an
 * NCHW pack is refused for float batches, which the GPU makes from NHWC
 * slots. */
START_TEST(test_packed_raw_on_device)
{
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/raw.pack", tmpdir);
    write_raw_pack(path, 13, FEEDER_LAYOUT_NHWC);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    static const int pins[] = {FEEDER_PIN_NONE, FEEDER_PIN_COPY, FEEDER_PIN_REGISTER};
    cudaStream_t s;
    CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint8_t *host = malloc(5 * 40 * 56 * 3);
    /* v 0: shuffled, straight from the registered file by each way of
     * gathering (FEEDER_PACKED_GATHER); v 1: in order, one copy per batch
     * straight from the file; v 2: shuffled with CRC checks (by the
     * workers), straight from the file too. */
    static const char *const modes[] = {"kernel", "batch", "copies"};
    for (int pv = 0; pv < 27; pv++) {
        int p = pv % 3, v = (pv / 3) % 3, m = pv / 9;
        setenv("FEEDER_PACKED_GATHER", modes[m], 1);
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, v != 1), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, v == 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, pins[p]), 0);
        ck_assert_msg(feeder_loader_start(ld) == 0, "%s", feeder_loader_errmsg(ld));
        const char *how;
        ck_assert_int_eq(feeder_loader_gpu_status(ld, &how), 1);
        ck_assert_msg((strstr(how, "records straight from the registered packed file") != NULL) ==
                          1,
                      "v %d: %s", v, how);
        feeder_batch *b;
        int rc;
        uint64_t seen = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            ck_assert_ptr_nonnull(b->device_data);
            ck_assert_uint_eq(b->sample_bytes, 40 * 56 * 3);
            CK_CUDA(feeder_batch_wait(b, s));
            CK_CUDA(cudaMemcpyAsync(host, b->device_data, b->device_bytes,
                                    cudaMemcpyDeviceToHost, s));
            CK_CUDA(cudaStreamSynchronize(s));
            for (uint32_t j = 0; j < b->count; j++) {
                uint64_t i = b->indices[j];
                ck_assert_int_eq(b->labels[j], (int64_t)(i % 4));
                for (size_t k = 0; k < b->sample_bytes; k++)
                    ck_assert_uint_eq(host[j * b->sample_bytes + k], (uint8_t)(i * 7 + k));
            }
            seen += b->count;
            ck_assert_int_eq(feeder_batch_release(b, s), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(seen, 13);
        {
            feeder_stats st;
            ck_assert_int_eq(feeder_loader_stats(ld, &st), 0);
            ck_assert_uint_eq(st.h2d_bytes, 13 * (40 * 56 * 3 + sizeof(int64_t)));
        }
        feeder_loader_destroy(ld);
    }
    unsetenv("FEEDER_PACKED_GATHER");
    /* Float batches in NCHW from the NHWC pack: fine (the kernel lays them out). */
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, FEEDER_LAYOUT_NCHW), 0);
    ck_assert_msg(feeder_loader_start(ld) == 0, "%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);

    write_raw_pack(path, 13, FEEDER_LAYOUT_NCHW);
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32), 0);
    ck_assert_int_eq(feeder_loader_start(ld), FEEDER_ESHAPE);
    char want[700];
    snprintf(want, sizeof(want), "%s holds NCHW records, but float batches are made on the GPU "
             "from NHWC slots: pack the file with --layout nhwc", path);
    ck_assert_str_eq(feeder_loader_errmsg(ld), want);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    free(host);
    CK_CUDA(cudaStreamDestroy(s));
}
END_TEST

/* A state saved while the GPU layer holds prefetched batches leaves them
 * undelivered: a new loader (host batches here) gives exactly the rest. */
/* VERIFY_CRC on the direct path: the workers check each record where it
 * lies, and a bad one fails its batch, naming the record, before the batch
 * is lent; the other batches arrive. */
/* Every sampler's order takes the straight-from-the-file path: a rank's
 * share, a subset and weighted draws (with repeats) reach the device with
 * each record's exact bytes at its place. */
START_TEST(test_packed_raw_direct_samplers)
{
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/raw-samplers.pack", tmpdir);
    write_raw_pack(path, 13, FEEDER_LAYOUT_NHWC);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    cudaStream_t s;
    CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint8_t *host = malloc(4 * 40 * 56 * 3);
    static const uint64_t subset[] = {12, 3, 7, 0, 5, 11};
    double weights[13];
    for (int i = 0; i < 13; i++)
        weights[i] = i % 3 == 0 ? 0.0 : 1.0 + i;
    for (int kind = 0; kind < 3; kind++) {
        feeder_sampler *smp;
        if (kind == 0)
            ck_assert_int_eq(feeder_sampler_distributed(13, 1, 2, 1, 5, 0, &smp), 0);
        else if (kind == 1)
            ck_assert_int_eq(feeder_sampler_subset(subset, 6, 1, 5, &smp), 0);
        else
            ck_assert_int_eq(feeder_sampler_weighted(weights, 13, 17, 1, 5, &smp), 0);
        uint64_t len = feeder_sampler_len(smp, 0), order[32];
        ck_assert_int_eq(feeder_sampler_fill(smp, 0, order, len), 0);
        feeder_loader *ld;
        ck_assert_int_eq(feeder_loader_create(ds, smp, &ld), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 4), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
        ck_assert_msg(feeder_loader_start(ld) == 0, "%s", feeder_loader_errmsg(ld));
        const char *how;
        ck_assert_int_eq(feeder_loader_gpu_status(ld, &how), 1);
        ck_assert_msg(strstr(how, "records straight from the registered packed file") != NULL,
                      "sampler %d: %s", kind, how);
        feeder_batch *b;
        int rc;
        uint64_t seen = 0;
        while ((rc = feeder_next(ld, &b)) == 0) {
            CK_CUDA(feeder_batch_wait(b, s));
            CK_CUDA(cudaMemcpyAsync(host, b->device_data, b->device_bytes,
                                    cudaMemcpyDeviceToHost, s));
            CK_CUDA(cudaStreamSynchronize(s));
            for (uint32_t j = 0; j < b->count; j++) {
                uint64_t i = b->indices[j];
                ck_assert_uint_eq(i, order[seen + j]);
                ck_assert_int_eq(b->labels[j], (int64_t)(i % 4));
                for (size_t k = 0; k < b->sample_bytes; k++)
                    ck_assert_uint_eq(host[j * b->sample_bytes + k], (uint8_t)(i * 7 + k));
            }
            seen += b->count;
            ck_assert_int_eq(feeder_batch_release(b, s), 0);
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
        ck_assert_uint_eq(seen, len);
        feeder_loader_destroy(ld);
        feeder_sampler_destroy(smp);
    }
    free(host);
    CK_CUDA(cudaStreamDestroy(s));
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_packed_raw_direct_crc)
{
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/raw-crc.pack", tmpdir);
    uint64_t rec0 = write_raw_pack(path, 13, FEEDER_LAYOUT_NHWC);
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(bu_read_file(path, &buf, &len), 0);
    buf[rec0 + 13 * 40 * 56 * 3 - 1] ^= 0x40; /* the last byte of the last record, 12 */
    ck_assert_int_eq(bu_write_file(path, buf, len), 0);
    free(buf);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 5), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, 2), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_VERIFY_CRC, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_msg(feeder_loader_start(ld) == 0, "%s", feeder_loader_errmsg(ld));
    const char *how;
    ck_assert_int_eq(feeder_loader_gpu_status(ld, &how), 1);
    ck_assert_msg(strstr(how, "records straight from the registered packed file"), "%s", how);
    feeder_batch *b;
    int rc, good = 0, bad = 0;
    while ((rc = feeder_next(ld, &b)) != FEEDER_DONE) {
        if (rc == 0) {
            good += (int)b->count;
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
            continue;
        }
        ck_assert_int_eq(rc, FEEDER_ECHECKSUM);
        ck_assert_msg(strstr(feeder_loader_errmsg(ld), "record 12 of") &&
                          strstr(feeder_loader_errmsg(ld), "crc32c mismatch"),
                      "%s", feeder_loader_errmsg(ld));
        bad++;
    }
    ck_assert_int_eq(good, 10); /* batches 0 and 1; batch 2 (records 10-12) failed */
    ck_assert_int_eq(bad, 1);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_resume_after_device_batches)
{
    cfg h = base();
    h.epochs = 1;
    run *ref = collect(jpegs, &h, NULL, NULL); /* 4 batches: 5, 5, 5, 3 */
    for (uint32_t taken = 1; taken <= 3; taken++) {
        cfg d = h;
        d.device = 0;
        d.gpu_prefetch = 3;
        feeder_loader *ld = make(jpegs, &d);
        feeder_batch *b;
        for (uint32_t k = 0; k < taken; k++) {
            ck_assert_int_eq(feeder_next(ld, &b), 0);
            ck_assert_uint_eq(b->number, k);
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        }
        /* Let the prefetcher take what it can before the save. */
        usleep(200000);
        ck_assert_int_eq(feeder_next(ld, &b), 0);
        ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
        /* b (batch `taken`) was delivered; what follows is held or loading. */
        size_t len = 0;
        ck_assert_int_eq(feeder_loader_state_save(ld, NULL, 0, &len), 0);
        uint8_t *blob = malloc(len);
        ck_assert_int_eq(feeder_loader_state_save(ld, blob, len, &len), 0);
        feeder_loader_destroy(ld);

        cfg r = h;
        r.workers = 1;
        feeder_loader *ld2 = make(jpegs, &r);
        ck_assert_int_eq(feeder_loader_state_load(ld2, blob, len), 0);
        uint32_t k = taken + 1;
        int rc;
        while ((rc = feeder_next(ld2, &b)) == 0) {
            ck_assert_uint_lt(k, ref->nb);
            ck_assert_uint_eq(b->number, ref->number[k]);
            ck_assert_mem_eq(b->indices, ref->idx[k], b->count * sizeof(uint64_t));
            ck_assert_mem_eq(b->data, ref->bytes[k], ref->nbytes[k]);
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
            k++;
        }
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld2));
        ck_assert_uint_eq(k, ref->nb);
        feeder_loader_destroy(ld2);
        free(blob);
    }
    run_free(ref);
}
END_TEST


/* ---- the GPU decoders ---- */

/* Same samples, labels and order as `a`, pixels close: nvJPEG's IDCT and
 * chroma upsampling and the float resizer differ from libjpeg's and the
 * fixed-point one by a level or two, a little more along sharp edges. */
static void close_batches(const run *a, const run *b)
{
    ck_assert_uint_eq(a->nb, b->nb);
    for (uint32_t i = 0; i < a->nb; i++) {
        ck_assert_uint_eq(a->count[i], b->count[i]);
        ck_assert_uint_eq(a->number[i], b->number[i]);
        ck_assert_mem_eq(a->labels[i], b->labels[i], a->count[i] * sizeof(int64_t));
        ck_assert_mem_eq(a->idx[i], b->idx[i], a->count[i] * sizeof(uint64_t));
        ck_assert_uint_eq(a->nbytes[i], b->nbytes[i]);
        uint64_t sum = 0, big = 0;
        for (size_t k = 0; k < a->nbytes[i]; k++) {
            int d = abs((int)a->bytes[i][k] - (int)b->bytes[i][k]);
            sum += (uint64_t)d;
            big += d > 24;
        }
        double mean = (double)sum / (double)a->nbytes[i];
        ck_assert_msg(mean < 3.0, "batch %u: mean difference %.2f levels", i, mean);
        ck_assert_msg(big * 100 < a->nbytes[i], "batch %u: %llu of %zu bytes differ by > 24", i,
                      (unsigned long long)big, a->nbytes[i]);
    }
}

/* A build or machine without nvJPEG runs the CPU decoder and says why. */
static int gpu_decoder_ran(int want)
{
    if (last_decoder == want)
        return 1;
    ck_assert_int_eq(last_decoder, FEEDER_DECODER_ROI);
    ck_assert_msg(last_reason[0], "the decoder fell back without a reason");
    fprintf(stderr, "GPU decoder not available here: %s\n", last_reason);
    return 0;
}

/* Host batches of the CPU decoder on `ds` under `h`, then device batches of
 * `decoder` under the same settings; whether the GPU decoder ran (else the
 * fallback's reason is checked). */
static int gpu_vs_cpu(feeder_dataset *ds, const cfg *h, int decoder, run **ref, run **got)
{
    *ref = collect(ds, h, NULL, NULL);
    cfg d = *h;
    d.device = 0;
    d.decoder = decoder;
    *got = collect(ds, &d, NULL, NULL);
    return gpu_decoder_ran(decoder);
}

START_TEST(test_nvjpeg_close_to_cpu)
{
    for (int pipeline = 0; pipeline < 2; pipeline++) {
        for (int layout = 0; layout < 2; layout++) {
            cfg h = base();
            h.pipeline = pipeline;
            h.layout = layout;
            h.size = 224; /* 150,528-byte samples: every test JPEG (< 113 KB) fits its place */
            h.workers = layout ? 0 : 2; /* the calling thread's loading too */
            run *ref, *got;
            if (gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_NVJPEG, &ref, &got)) {
                ck_assert_uint_eq(last_stats.gpu_decoded, 36); /* 18 images, 2 epochs */
                ck_assert_uint_eq(last_stats.gpu_fallback, 0);
                ck_assert_uint_gt(last_stats.gpu_decode_ns, 0);
                close_batches(ref, got);
            } else {
                same_batches(ref, got);
            }
            run_free(ref);
            run_free(got);
        }
    }
}
END_TEST

START_TEST(test_nvjpeg_warmup_decodes_on_workers_first)
{
    /* With warm-up the workers decode every image until nvJPEG is ready:
     * each image is decoded exactly once, by one side or the other, and the
     * batches are the CPU decoder's within the GPU tolerance. */
    cfg h = base();
    h.size = 224;
    h.warmup = 1;
    run *ref, *got;
    if (gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_NVJPEG, &ref, &got)) {
        ck_assert_uint_eq(last_stats.gpu_decoded + last_stats.cpu_shared, 36);
        ck_assert_uint_gt(last_stats.cpu_shared, 0); /* the first batch comes before nvJPEG */
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        close_batches(ref, got);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(got);
}
END_TEST

START_TEST(test_nvjpeg_oversize_files_decode_on_cpu)
{
    /* 8 x 8 x 3 = 192 bytes a sample and no more room (FEEDER_OPT_GPU_ROOM
     * under a sample means a sample): no JPEG fits, the workers decode every
     * one as the CPU decoder would, byte for byte. */
    cfg h = base();
    h.size = 8;
    h.room = 1;
    run *ref, *got;
    if (gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_NVJPEG, &ref, &got)) {
        ck_assert_uint_eq(last_stats.gpu_decoded, 0);
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_ROOM], 36);
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_SIZE], 0);
    }
    same_batches(ref, got);
    run_free(ref);
    run_free(got);
}
END_TEST

START_TEST(test_nvjpeg_files_have_room_of_their_own)
{
    /* 64 x 64 x 3 = 12,288 bytes a sample, smaller than the 292 x 292 test
     * JPEGs: with a sample's room some move to the workers; with the default
     * room (192 KiB a sample) every one is decoded by nvJPEG, from its
     * place past the samples' pixel size, and the batches match the CPU's.
     * The reference is TURBO's full decode: at this reduction ROI's DCT
     * scaling differs from a full decode by more than the GPU does. */
    cfg h = base();
    h.size = 64;
    h.room = 1;
    h.decoder = FEEDER_DECODER_TURBO;
    run *ref, *got;
    if (!gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_NVJPEG, &ref, &got)) {
        run_free(ref); /* ROI against TURBO: nothing of the room to test */
        run_free(got);
        return;
    }
    /* (The workers decode the moved files with ROI: their pixels are
     * test_nvjpeg_oversize_files_decode_on_cpu's subject.) */
    uint64_t moved = last_stats.cpu_routed[FEEDER_ROUTE_ROOM];
    ck_assert_uint_gt(moved, 0);
    ck_assert_uint_eq(last_stats.gpu_decoded + moved, 36);
    run_free(got);
    h.room = 0;
    h.device = 0;
    h.decoder = FEEDER_DECODER_NVJPEG;
    got = collect(jpegs, &h, NULL, NULL);
    ck_assert_uint_eq(last_stats.gpu_decoded, 36); /* 18 images, 2 epochs */
    ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_ROOM], 0);
    ck_assert_uint_eq(last_stats.gpu_fallback, 0);
    close_batches(ref, got);
    run_free(ref);
    run_free(got);
}
END_TEST

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Make tmpdir/name with one class folder, whose path goes into dir (the
 * test writes its files there). */
static void class_dir(const char *name, char *dir, size_t len)
{
    snprintf(dir, len, "%s/%s", tmpdir, name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(dir, len, "%s/%s/c", tmpdir, name);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
}

/* The folder dataset tmpdir/name. */
static feeder_dataset *open_dir(const char *name)
{
    char dir[512], err[256];
    feeder_dataset *ds;
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
    ck_assert_msg(feeder_dataset_open_folder(dir, &ds, err, sizeof(err)) == 0, "%s: %s", dir, err);
    return ds;
}

/* Re-encode a photo crop of `jpegs` sample i with TurboJPEG: pf TJPF_RGB or
 * TJPF_CMYK (which TurboJPEG writes as YCCK), any subsampling and flags. */
static void write_kind(const char *path, uint64_t i, int pf, int subsamp, int flags)
{
    FILE *f = fopen(feeder_dataset_path(jpegs, i), "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    tjhandle d = tjInitDecompress(), c = tjInitCompress();
    int w, h, ss, cs;
    ck_assert_int_eq(tjDecompressHeader3(d, buf, n, &w, &h, &ss, &cs), 0);
    uint8_t *px = malloc((size_t)w * h * 4);
    ck_assert_int_eq(tjDecompress2(d, buf, n, px, w, 0, h, TJPF_RGB, 0), 0);
    if (pf == TJPF_CMYK) /* TurboJPEG decodes to CMYK only from CMYK files */
        for (size_t k = (size_t)w * h; k-- > 0;) {
            uint8_t r = px[k * 3], g = px[k * 3 + 1], b = px[k * 3 + 2];
            px[k * 4] = 255 - r, px[k * 4 + 1] = 255 - g, px[k * 4 + 2] = 255 - b,
            px[k * 4 + 3] = 0;
        }
    unsigned char *out = NULL;
    unsigned long len = 0;
    ck_assert_int_eq(tjCompress2(c, px, w, 0, h, pf, &out, &len, subsamp, 90, flags), 0);
    write_file(path, out, len);
    tjFree(out);
    free(px);
    tjDestroy(d);
    tjDestroy(c);
}

START_TEST(test_nvjpeg_routes_by_header)
{
    /* Nine files: 3 progressive, 2 YCCK, 1 4:1:1, 3 baseline 4:2:0. The
     * workers keep the first six (their header sends them to the CPU, each
     * counted by reason) and the GPU decodes the baseline ones; nothing
     * reaches nvJPEG that it refuses. */
    char dir[512], path[600];
    class_dir("kinds", dir, sizeof(dir));
    for (int i = 0; i < 9; i++) {
        snprintf(path, sizeof(path), "%s/%03d.jpg", dir, i);
        if (i < 3)
            write_kind(path, (uint64_t)i, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE);
        else if (i < 5)
            write_kind(path, (uint64_t)i, TJPF_CMYK, TJSAMP_420, 0);
        else if (i == 5)
            write_kind(path, (uint64_t)i, TJPF_RGB, TJSAMP_411, 0);
        else
            write_kind(path, (uint64_t)i, TJPF_RGB, TJSAMP_420, 0);
    }
    feeder_dataset *ds = open_dir("kinds");
    cfg h = base();
    h.size = 224;
    run *ref, *got;
    if (gpu_vs_cpu(ds, &h, FEEDER_DECODER_NVJPEG, &ref, &got)) {
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_PROGRESSIVE], 6); /* 2 epochs */
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_CMYK], 4);
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_SUBSAMPLING], 2);
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_SIZE], 0);
        ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_CORRUPT], 0);
        ck_assert_uint_eq(last_stats.gpu_decoded, 6);
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        close_batches(ref, got);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(got);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A JPEG pack of the files of `ds`, in dataset order, with its labels. */
static void write_jpeg_pack(const char *path, const feeder_dataset *ds)
{
    uint64_t n = feeder_dataset_size(ds);
    static uint8_t file[1 << 20];
    uint8_t **bytes = calloc(n, sizeof(*bytes));
    size_t *lens = calloc(n, sizeof(*lens));
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        FILE *f = fopen(feeder_dataset_path(ds, i), "rb");
        ck_assert_ptr_nonnull(f);
        lens[i] = fread(file, 1, sizeof(file), f);
        fclose(f);
        bytes[i] = malloc(lens[i]);
        memcpy(bytes[i], file, lens[i]);
        total += lens[i];
    }
    feeder__pack_header h;
    memset(&h, 0, sizeof(h));
    h.version = FEEDER__PACK_VERSION;
    h.header_bytes = FEEDER__PACK_HEADER_BYTES;
    h.kind = FEEDER_RECORD_JPEG;
    h.dtype = FEEDER__PACK_DTYPE_UINT8;
    h.label_type = FEEDER__PACK_LABEL_INT64;
    h.count = n;
    h.shard_count = 1;
    h.total_records = n;
    size_t len = feeder__pack_layout(&h, 0, total);
    uint8_t *buf = calloc(1, len);
    ck_assert_ptr_nonnull(buf);
    uint64_t off = h.records_off;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(buf + off, bytes[i], lens[i]);
        feeder__pack_entry_encode(buf + h.index_off + i * FEEDER__PACK_ENTRY_BYTES, off, lens[i],
                                  feeder__crc32c(0, bytes[i], lens[i]));
        int64_t lab = feeder_dataset_label(ds, i);
        memcpy(buf + h.labels_off + i * 8, &lab, 8);
        off += lens[i];
        free(bytes[i]);
    }
    feeder__pack_header_encode(&h, buf);
    ck_assert_int_eq(bu_write_file(path, buf, len), 0);
    free(buf);
    free(bytes);
    free(lens);
}

/* A JPEG pack through nvJPEG: the records go to the GPU as bytes (no CPU
 * decode), and the batches are the folder's within the decoders' tolerance;
 * with the CPU decoder the pack gives the folder's very bytes. */
START_TEST(test_packed_jpeg_on_gpu_decoder)
{
    char path[512], err[512];
    snprintf(path, sizeof(path), "%s/jpeg.pack", tmpdir);
    write_jpeg_pack(path, jpegs);
    feeder_dataset *ds;
    ck_assert_int_eq(feeder_dataset_open_packed(path, &ds, err, sizeof(err)), 0);
    cfg h = base();
    h.size = 224;
    run *ref = collect(jpegs, &h, NULL, NULL);
    run *cpu = collect(ds, &h, NULL, NULL);
    same_batches(ref, cpu);
    cfg d = h;
    d.device = 0;
    d.decoder = FEEDER_DECODER_NVJPEG;
    run *got = collect(ds, &d, NULL, NULL);
    if (gpu_decoder_ran(FEEDER_DECODER_NVJPEG)) {
        ck_assert_uint_eq(last_stats.gpu_decoded, 36); /* 18 records, 2 epochs */
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        close_batches(ref, got);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(cpu);
    run_free(got);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_nvjpeg_bad_files_fail_their_batches)
{
    /* Six images, two of them bad: one is no JPEG at all (a worker's CPU
     * decode names it), one starts like a JPEG and then is garbage (nvJPEG
     * refuses it, the CPU fallback names it). Batches of one: exactly those
     * two fail, the others arrive. (The garbage one is routed to the CPU by
     * its unreadable header, so the workers name both.) */
    char dir[512], path[600];
    class_dir("bad", dir, sizeof(dir));
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/%03d.jpg", dir, i);
        if (i == 2) {
            write_file(path, "hello, not a JPEG", 17);
        } else if (i == 4) {
            uint8_t junk[4096];
            for (size_t k = 0; k < sizeof(junk); k++)
                junk[k] = (uint8_t)(k * 131 + 7);
            junk[0] = 0xFF, junk[1] = 0xD8, junk[2] = 0xFF, junk[3] = 0xE0;
            write_file(path, junk, sizeof(junk));
        } else {
            FILE *f = fopen(feeder_dataset_path(jpegs, (uint64_t)i), "rb");
            ck_assert_ptr_nonnull(f);
            static uint8_t buf[1 << 20];
            size_t n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            write_file(path, buf, n);
        }
    }
    feeder_dataset *ds = open_dir("bad");
    cfg d = base();
    d.device = 0;
    d.decoder = FEEDER_DECODER_NVJPEG;
    d.batch = 1;
    feeder_loader *ld = make(ds, &d);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    cudaStream_t s;
    CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int ok = 0, failed = 0, rc;
    int seen2 = 0, seen4 = 0;
    feeder_batch *b;
    for (int k = 0; k < 6; k++) {
        rc = feeder_next(ld, &b);
        if (rc == 0) {
            ck_assert_uint_ne(b->indices[0], 2);
            ck_assert_uint_ne(b->indices[0], 4);
            CK_CUDA(feeder_batch_wait(b, s));
            ck_assert_int_eq(feeder_batch_release(b, s), 0);
            ok++;
            continue;
        }
        ck_assert_int_eq(rc, FEEDER_EDECODE);
        const char *msg = feeder_loader_errmsg(ld);
        seen2 += strstr(msg, "/002.jpg") != NULL;
        seen4 += strstr(msg, "/004.jpg") != NULL;
        failed++;
    }
    ck_assert_int_eq(feeder_next(ld, &b), FEEDER_DONE);
    ck_assert_int_eq(ok, 4);
    ck_assert_int_eq(failed, 2);
    ck_assert_int_eq(seen2, 1);
    ck_assert_int_eq(seen4, 1);
    CK_CUDA(cudaStreamDestroy(s));
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
}
END_TEST

/* A smooth w x h RGB gradient, baseline 4:2:0 at quality 92, to `path`. */
static void write_gradient(const char *path, int w, int h)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w - 1));
            p[1] = (uint8_t)(y * 255 / (h - 1));
            p[2] = (uint8_t)(255 - p[0] / 2 - p[1] / 2);
        }
    tjhandle c = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long len = 0;
    ck_assert_int_eq(tjCompress2(c, px, w, 0, h, TJPF_RGB, &out, &len, TJSAMP_420, 92, 0), 0);
    write_file(path, out, len);
    tjFree(out);
    tjDestroy(c);
    free(px);
}

START_TEST(test_nvjpeg_drop_keeps_each_file_its_bytes)
{
    /* Ten files of ten sizes, two of them not JPEGs. Under DROP the batch of
     * ten closes the gaps the bad ones leave: every entry the GPU decoder
     * reads (the bytes' length and place) moves with its sample, so each
     * image is decoded from its own bytes at its own size and the batches
     * match the CPU decoder's. */
    static const int sizes[10][2] = {{64, 48},  {200, 120}, {0, 0},    {96, 160},  {130, 130},
                                     {0, 0},    {48, 200},  {250, 90}, {112, 144}, {77, 61}};
    char dir[512], path[600];
    class_dir("drop", dir, sizeof(dir));
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof(path), "%s/%03d.jpg", dir, i);
        if (sizes[i][0])
            write_gradient(path, sizes[i][0], sizes[i][1]);
        else
            write_file(path, "not a JPEG at all", 17);
    }
    feeder_dataset *ds = open_dir("drop");
    cfg h = base();
    h.size = 96;
    h.batch = 10;
    h.policy = FEEDER_ON_ERROR_DROP;
    run *ref, *got;
    int ran = gpu_vs_cpu(ds, &h, FEEDER_DECODER_NVJPEG, &ref, &got);
    for (uint32_t i = 0; i < got->nb; i++) {
        ck_assert_uint_eq(got->count[i], 8);
        for (uint32_t k = 0; k < 8; k++)
            ck_assert(got->idx[i][k] != 2 && got->idx[i][k] != 5);
    }
    if (ran) {
        ck_assert_uint_eq(last_stats.gpu_decoded, 16); /* 8 images, 2 epochs */
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        close_batches(ref, got);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(got);
    feeder_dataset_destroy(ds);
}
END_TEST

START_TEST(test_hybrid_splits_every_batch)
{
    /* Batches of 16 in two parts of 8: a 10% share is one image a part. */
    cfg h = base();
    h.size = 224;
    h.batch = 16;
    run *ref, *got;
    if (gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_HYBRID, &ref, &got)) {
        /* Both sides decode part of the run; the GPU's samples are close to
         * the CPU's, the workers' ones are the CPU's. */
        ck_assert_uint_gt(last_stats.gpu_decoded, 0);
        ck_assert_uint_lt(last_stats.gpu_decoded, 36);
        ck_assert_uint_ge(last_stats.hybrid_cpu_permille, 20);
        ck_assert_uint_le(last_stats.hybrid_cpu_permille, 980);
        close_batches(ref, got);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(got);
}
END_TEST

/* ---- grayscale output on the GPU decoders ---- */

/* Gray GPU batch bytes against CPU ones: the sum and the largest of |gpu -
 * cpu|, how many exceed `limit`, and where the largest first is. */
typedef struct gray_diff {
    uint64_t sum, over, n;
    int max, cpu, gpu;  /* the largest difference and its two values */
    uint32_t batch, sample;
    size_t byte;        /* in the sample: row byte / width, column byte % width */
} gray_diff;

static gray_diff gray_compare(const run *a, const run *b, int limit)
{
    gray_diff g = {0};
    ck_assert_uint_eq(a->nb, b->nb);
    for (uint32_t i = 0; i < a->nb; i++) {
        ck_assert_uint_eq(a->count[i], b->count[i]);
        ck_assert_uint_eq(a->number[i], b->number[i]);
        ck_assert_mem_eq(a->labels[i], b->labels[i], a->count[i] * sizeof(int64_t));
        ck_assert_mem_eq(a->idx[i], b->idx[i], a->count[i] * sizeof(uint64_t));
        ck_assert_uint_eq(a->nbytes[i], b->nbytes[i]);
        size_t sb = a->nbytes[i] / a->count[i];
        for (size_t k = 0; k < a->nbytes[i]; k++) {
            int d = abs((int)a->bytes[i][k] - (int)b->bytes[i][k]);
            g.sum += (uint64_t)d;
            g.over += d > limit;
            if (d > g.max) {
                g.max = d, g.cpu = a->bytes[i][k], g.gpu = b->bytes[i][k];
                g.batch = i, g.sample = (uint32_t)(k / sb), g.byte = k % sb;
            }
        }
        g.n += a->nbytes[i];
    }
    return g;
}

/* The gray GPU run `got` is within (mean, permille of bytes over `limit`)
 * of the CPU run `ref`; the figures go to stderr either way, the worst byte
 * into the failure message. */
static void gray_close(const run *ref, const run *got, const char *what, uint32_t width,
                       double max_mean, int limit, uint64_t max_permille)
{
    gray_diff g = gray_compare(ref, got, limit);
    double mean = (double)g.sum / (double)g.n;
    char worst[200];
    snprintf(worst, sizeof(worst),
             "largest |d| %d at batch %u sample %u byte %zu (row %zu, column %zu): cpu %d, "
             "gpu %d", g.max, g.batch, g.sample, g.byte, g.byte / width, g.byte % width, g.cpu,
             g.gpu);
    fprintf(stderr, "gray nvJPEG vs %s: mean |d| %.3f, %llu of %llu bytes > %d; %s\n", what,
            mean, (unsigned long long)g.over, (unsigned long long)g.n, limit, worst);
    ck_assert_msg(mean < max_mean, "gray nvJPEG vs %s: mean |d| %.3f >= %.2f; %s", what, mean,
                  max_mean, worst);
    ck_assert_msg(g.over * 1000 <= g.n * max_permille,
                  "gray nvJPEG vs %s: %llu of %llu bytes differ by > %d (at most %llu per "
                  "mille); %s", what, (unsigned long long)g.over, (unsigned long long)g.n, limit,
                  (unsigned long long)max_permille, worst);
}

/* Gray output (CHANNELS 1) stays on nvJPEG, decoded to the Y plane
 * (NVJPEG_OUTPUT_Y), the CPU decoders' definition of gray for JPEG
 * (libjpeg's JCS_GRAYSCALE: a YCbCr file's Y, a gray file's plane). Against
 * TURBO (the same full-size plane) only the IDCTs (the engine's against
 * libjpeg's ISLOW) and the resamplers (float against fixed point, which
 * rounds between its passes) differ: mean |d| < 1 level, at most 5 bytes in
 * 1000 off by more than 4. An emulation on the CPU (the kernel's float
 * filter ported to C) put the resamplers alone at mean 0.14, max 1, and
 * with libjpeg's least accurate IDCT (IFAST) standing in for the engine's
 * at mean 0.56, 1.9 per 1000 over 4. Against ROI, the loader's CPU default
 * (and HYBRID's worker share), the RGB test's tolerance (close_batches':
 * mean < 3, at most 1 % off by more than 24) over the whole run.
 * 292 x 292 = 85,264-byte samples: every test JPEG (< 84 KB) fits its place,
 * so all 36 go to the engine. NHWC and NCHW are the same bytes. */
START_TEST(test_nvjpeg_gray_close_to_cpu)
{
    for (int pipeline = 0; pipeline < 2; pipeline++) {
        run *first = NULL;
        for (int layout = 0; layout < 2; layout++) {
            cfg h = base();
            h.pipeline = pipeline;
            h.layout = layout;
            h.channels = 1;
            h.size = 292;
            h.workers = layout ? 0 : 2;
            run *roi = collect(jpegs, &h, NULL, NULL);
            ck_assert_uint_eq(roi->nbytes[0], 5u * 292 * 292);
            cfg tj = h;
            tj.decoder = FEEDER_DECODER_TURBO;
            run *turbo = collect(jpegs, &tj, NULL, NULL);
            cfg d = h;
            d.device = 0;
            d.decoder = FEEDER_DECODER_NVJPEG;
            run *got = collect(jpegs, &d, NULL, NULL);
            if (!gpu_decoder_ran(FEEDER_DECODER_NVJPEG)) {
                same_batches(roi, got);
                run_free(roi), run_free(turbo), run_free(got);
                continue;
            }
            ck_assert_uint_eq(last_stats.gpu_decoded, 36); /* 18 images, 2 epochs */
            ck_assert_uint_eq(last_stats.gpu_fallback, 0);
            ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_SIZE], 0);
            ck_assert_uint_eq(last_stats.cpu_routed[FEEDER_ROUTE_ROOM], 0);
            gray_close(turbo, got, pipeline ? "TURBO (train)" : "TURBO (eval)", 292, 1.0, 4, 5);
            gray_close(roi, got, pipeline ? "ROI (train)" : "ROI (eval)", 292, 3.0, 24, 10);
            if (first)
                same_batches(first, got); /* one plane: the layouts are the same bytes */
            run_free(roi), run_free(turbo);
            if (first)
                run_free(got);
            else
                first = got;
        }
        if (first)
            run_free(first);
    }
}
END_TEST

/* HYBRID with gray output: the workers' share is ROI's gray samples, the
 * rest nvJPEG's Y, every sample where it belongs. */
START_TEST(test_hybrid_gray_splits_every_batch)
{
    cfg h = base();
    h.size = 292;
    h.batch = 16;
    h.channels = 1;
    run *ref, *got;
    if (gpu_vs_cpu(jpegs, &h, FEEDER_DECODER_HYBRID, &ref, &got)) {
        ck_assert_uint_gt(last_stats.gpu_decoded, 0);
        ck_assert_uint_lt(last_stats.gpu_decoded, 36);
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        gray_close(ref, got, "ROI (HYBRID)", 292, 3.0, 24, 10);
    } else {
        same_batches(ref, got);
    }
    run_free(ref);
    run_free(got);
}
END_TEST

/* ---- trace ---- */

/* The tid of the thread named `name` in a trace file, or -1. */
static int trace_tid(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"args\":{\"name\":\"%s\"}", name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        const char *hit = strstr(l, pat);
        int tid;
        if (hit && (!end || hit < end) && strstr(l, "thread_name") &&
            sscanf(strstr(l, "\"tid\":"), "\"tid\":%d", &tid) == 1)
            return tid;
    }
    return -1;
}

/* How many "nvJPEG submit" spans each decode thread's track of the trace at
 * `path` holds (lanes tracks, into per[]); their sum. */
static int submits_per_lane(const char *path, int lanes, int *per)
{
    uint8_t *data;
    size_t len;
    ck_assert_int_eq(bu_read_file(path, &data, &len), 0);
    char *text = realloc(data, len + 1);
    text[len] = 0;
    int tid[4], sum = 0;
    for (int k = 0; k < lanes; k++) {
        char name[64];
        snprintf(name, sizeof(name), "nvJPEG calls (decode thread %d)", k);
        tid[k] = trace_tid(text, lanes > 1 ? name : "nvJPEG calls (decode thread)");
        ck_assert_msg(tid[k] >= 0, "no track %s", name);
        per[k] = 0;
    }
    for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char *end = strchr(l, '\n');
        if (end)
            *end = 0;
        int t = -1;
        if (strstr(l, "\"name\":\"nvJPEG submit\"")) {
            ck_assert(strstr(l, "\"tid\":") && sscanf(strstr(l, "\"tid\":"), "\"tid\":%d", &t) == 1);
            for (int k = 0; k < lanes; k++)
                if (t == tid[k]) {
                    per[k]++;
                    sum++;
                }
        }
        if (end)
            *end = '\n';
    }
    free(text);
    return sum;
}

/* FEEDER_OPT_GPU_DECODE_THREADS: one to four decode threads, each with its
 * own nvJPEG decoder and stream, give the same bytes, labels, indices and
 * order (nvJPEG is deterministic; the tails go on the copy stream one at a
 * time); every image is decoded once, on the GPU; every batch's nvJPEG call
 * is on one thread's track, and with four threads more than one takes
 * batches (no warm-up: the loader waits until every thread has its
 * decoder). */
START_TEST(test_nvjpeg_decode_threads_same_batches)
{
    cfg h = nvjpeg_cfg();
    h.batch = 2; /* 9 batches an epoch */
    run *ref = NULL;
    for (int t = 1; t <= 4; t++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/lanes-%d.json", tmpdir, t);
        cfg d = h;
        d.threads = t;
        d.trace = path;
        run *got = collect(jpegs, &d, NULL, NULL);
        if (!gpu_decoder_ran(FEEDER_DECODER_NVJPEG)) {
            run_free(got);
            break;
        }
        ck_assert_uint_eq(last_stats.gpu_decoded, 36); /* 18 images, 2 epochs */
        ck_assert_uint_eq(last_stats.gpu_fallback, 0);
        int per[4], used = 0;
        ck_assert_int_eq(submits_per_lane(path, t, per), 18);
        for (int k = 0; k < t; k++)
            used += per[k] > 0;
        if (t == 4)
            ck_assert_msg(used >= 2, "4 decode threads, %d took batches", used);
        if (!ref) {
            ref = got;
            continue;
        }
        same_batches(ref, got);
        run_free(got);
    }
    if (ref)
        run_free(ref);
}
END_TEST

/* The watchdog on nvJPEG's calls: with FEEDER_NVJPEG_STUCK_MS=1 every call
 * outlasts it, the path a hardware call that never returns takes
 * (docs/RELIABILITY.md): feeder_next fails with FEEDER_ETIMEDOUT naming the
 * batch and the thread, every later call fails the same way, and destroy
 * returns (the calls do return here, so the threads are joined). */
START_TEST(test_nvjpeg_watchdog_fails_a_stuck_call)
{
    ck_assert_int_eq(setenv("FEEDER_NVJPEG_STUCK_MS", "1", 1), 0);
    cfg d = nvjpeg_cfg();
    feeder_loader *ld = make(jpegs, &d);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    feeder_batch *b;
    int rc;
    for (int e = 0; e < 2; e++)
        while ((rc = feeder_next(ld, &b)) == 0)
            ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    const char *why;
    if (feeder_loader_decoder(ld, &why) != FEEDER_DECODER_NVJPEG) {
        ck_assert_int_eq(rc, FEEDER_DONE);
        fprintf(stderr, "GPU decoder not available here: %s\n", why);
    } else {
        ck_assert_msg(rc == FEEDER_ETIMEDOUT, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
        const char *msg = feeder_loader_errmsg(ld);
        ck_assert_msg(strstr(msg, "nvJPEG's hardware decode of batch ") &&
                          strstr(msg, " on device 0 has not returned in 1 ms (decode thread ") &&
                          strstr(msg, "the JPEG engines stopped answering"),
                      "%s", msg);
        ck_assert_int_eq(feeder_next(ld, &b), FEEDER_ETIMEDOUT);
    }
    feeder_loader_destroy(ld);
    ck_assert_int_eq(unsetenv("FEEDER_NVJPEG_STUCK_MS"), 0);
}
END_TEST

/* A GPU loader's trace: an "H2D" span on the copy-stream track for every
 * batch of every epoch, inside the run (GPU times mapped to the host clock),
 * one "pin copy" per pin thread and batch with PIN_COPY, and the normalise
 * kernel's spans for float batches. */
/* The GPU layer's threads carry names that say what they are (ps, top -H,
 * gdb): each decode thread its lane's, each pin thread "feeder-pin", and
 * the pin threads are joined by destroy. */
START_TEST(test_threads_carry_names)
{
    cfg d = nvjpeg_cfg();
    d.threads = 2;
    feeder_loader *ld = make(jpegs, &d);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    const char *why;
    if (feeder_loader_decoder(ld, &why) == FEEDER_DECODER_NVJPEG) {
        /* at least: threads nvJPEG starts from a decode thread inherit its name */
        ck_assert_int_ge(tu_threads_named("feeder-dec0"), 1);
        ck_assert_int_ge(tu_threads_named("feeder-dec1"), 1);
        ck_assert_int_eq(tu_threads_named("feeder-pin"), 0);
    }
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    feeder_loader_destroy(ld);
    d = base();
    d.device = 0;
    d.pin = FEEDER_PIN_COPY;
    ld = make(jpegs, &d); /* 3 pin threads (make) */
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    ck_assert_int_eq(tu_threads_named("feeder-pin"), 3);
    ck_assert_int_eq(tu_threads_named("feeder-dec0"), 0);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    feeder_loader_destroy(ld);
    ck_assert_int_eq(tu_threads_named("feeder-pin"), 0);
}
END_TEST

START_TEST(test_trace_gpu_spans)
{
    for (int pin = FEEDER_PIN_COPY; pin <= FEEDER_PIN_REGISTER; pin++) {
        cfg d = base();
        d.device = 0;
        d.pin = pin;
        d.dtype = FEEDER_DTYPE_FLOAT32;
        feeder_loader *ld = make(jpegs, &d);
        char path[512];
        snprintf(path, sizeof(path), "%s/gpu-%d.json", tmpdir, pin);
        ck_assert_int_eq(feeder_loader_set_trace(ld, path), 0);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t_start = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        int per_epoch = 0;
        for (int e = 0; e < 2; e++) {
            feeder_batch *b;
            int rc, n = 0;
            while ((rc = feeder_next(ld, &b)) == 0) {
                ck_assert_int_eq(b->device, 0);
                n++;
                ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
            }
            ck_assert_msg(rc == FEEDER_DONE, "%s", feeder_loader_errmsg(ld));
            per_epoch = n;
        }
        ck_assert_int_eq(per_epoch, 4); /* 18 images, batches of 5 */
        feeder_loader_destroy(ld);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t_end = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;

        uint8_t *data;
        size_t len;
        ck_assert_int_eq(bu_read_file(path, &data, &len), 0);
        char *text = realloc(data, len + 1);
        text[len] = 0;
        int copy = trace_tid(text, "copy stream (GPU)");
        ck_assert_int_ge(copy, 0);
        int h2d[2][4] = {{0}}, norm = 0, pins = 0;
        for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
            char *end = strchr(l, '\n');
            if (end)
                *end = 0;
            int tid, e, bn;
            unsigned long long us0, us1;
            unsigned f0, f1;
            if (strstr(l, "\"name\":\"pin copy\""))
                pins++;
            if (strstr(l, "\"name\":\"normalise\""))
                norm++;
            if (strstr(l, "\"name\":\"H2D\"")) {
                ck_assert_int_eq(sscanf(strstr(l, "\"tid\":"), "\"tid\":%d", &tid), 1);
                ck_assert_int_eq(tid, copy);
                ck_assert_int_eq(sscanf(strstr(l, "\"ts\":"), "\"ts\":%llu.%u,\"dur\":%llu.%u",
                                        &us0, &f0, &us1, &f1), 4);
                uint64_t t0 = us0 * 1000 + f0, t1 = t0 + us1 * 1000 + f1;
                ck_assert_msg(t0 >= t_start && t1 <= t_end, "H2D at %llu..%llu outside the run",
                              (unsigned long long)t0, (unsigned long long)t1);
                ck_assert_int_eq(sscanf(strstr(l, "\"args\":"), "\"args\":{\"epoch\":%d,\"batch\":%d",
                                        &e, &bn), 2);
                ck_assert(e >= 0 && e < 2 && bn >= 0 && bn < 4);
                h2d[e][bn]++;
            }
            if (end)
                *end = '\n';
        }
        for (int e = 0; e < 2; e++)
            for (int b = 0; b < 4; b++)
                ck_assert_msg(h2d[e][b] == 1, "pin %d: epoch %d batch %d has %d H2D spans", pin,
                              e, b, h2d[e][b]);
        ck_assert_int_ge(norm, 1);
        ck_assert_int_le(norm, 8);
        ck_assert_int_eq(pins, pin == FEEDER_PIN_COPY ? 8 * 3 : 0);
        free(text);
    }
}
END_TEST

/* ---- a fields dataset on the device ---- */

/* Sample i: tokens (i32, PADDED, up to 12 rows): i % 12 + 1 values
 * i * 100 + j; boxes (f32 [n, 4], RAGGED, up to 3): i % 4 boxes of
 * i + j / 4; label (i64 scalar): i % 5. */
static const feeder_field DEV_FIELDS[3] = {
    {"tokens", FEEDER_ELEM_I32, FEEDER_FIELD_PADDED, 1, {12, 0, 0, 0}, {0}},
    {"boxes", FEEDER_ELEM_F32, FEEDER_FIELD_RAGGED, 2, {3, 4, 0, 0}, {0}},
    {"label", FEEDER_ELEM_I64, FEEDER_FIELD_FIXED, 0, {0}, {0}},
};

static uint64_t dev_len(void *user) { return 23; }

static int dev_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                   size_t errlen)
{
    uint64_t i = ctx->index;
    int32_t tok[12];
    float box[12];
    for (uint32_t j = 0; j < 12; j++) {
        tok[j] = (int32_t)(i * 100 + j);
        box[j] = (float)i + (float)j / 4;
    }
    int64_t label = (int64_t)(i % 5);
    if (feeder_sample_put(out, 0, FEEDER_ELEM_I32, tok, i % 12 + 1) ||
        feeder_sample_put(out, 1, FEEDER_ELEM_F32, box, i % 4) ||
        feeder_sample_put(out, 2, FEEDER_ELEM_I64, &label, 1))
        return -1;
    return 0;
}

/* Pad the tokens to a multiple of 4 rows, as a user's collate would. */
static int dev_collate(void *user, feeder_batch *b, char *err, size_t errlen)
{
    feeder_tensor t;
    if (feeder_batch_field_at(b, 0, &t))
        return -1;
    uint64_t rows = (t.shape[1] + 3) / 4 * 4;
    return feeder_batch_pad_field(b, 0, rows > 12 ? 12 : rows);
}

/* Every field of every batch, as bytes on the host: field tensors of a host
 * batch, or of a device batch copied back after its ready event. */
static void field_bytes(const feeder_batch *b, uint32_t k, uint8_t **bytes, size_t *n,
                        int64_t *lens, int64_t *offs, uint64_t *shape)
{
    feeder_tensor t;
    ck_assert_int_eq(feeder_batch_field_at(b, k, &t), 0);
    ck_assert_int_eq(t.device, b->device);
    memcpy(shape, t.shape, sizeof(t.shape));
    *n = t.bytes;
    *bytes = malloc(t.bytes ? t.bytes : 1);
    if (t.device >= 0) {
        CK_CUDA(cudaEventSynchronize((cudaEvent_t)b->ready_event));
        CK_CUDA(cudaMemcpy(*bytes, t.data, t.bytes, cudaMemcpyDeviceToHost));
        if (t.lengths) {
            int64_t dl[16];
            CK_CUDA(cudaMemcpy(dl, t.device_lengths, b->count * 8, cudaMemcpyDeviceToHost));
            ck_assert_mem_eq(dl, t.lengths, b->count * 8);
        }
        if (t.offsets) {
            int64_t dof[17];
            CK_CUDA(cudaMemcpy(dof, t.device_offsets, (b->count + 1) * 8,
                               cudaMemcpyDeviceToHost));
            ck_assert_mem_eq(dof, t.offsets, (b->count + 1) * 8);
        }
    } else {
        memcpy(*bytes, t.data, t.bytes);
        ck_assert_ptr_null(t.device_lengths);
    }
    if (t.lengths)
        memcpy(lens, t.lengths, b->count * 8);
    if (t.offsets)
        memcpy(offs, t.offsets, (b->count + 1) * 8);
}

START_TEST(test_fields_on_device)
{
    feeder_fields_callbacks cb = {dev_len, dev_get, NULL};
    feeder_dataset *ds;
    char err[256];
    ck_assert_int_eq(feeder_dataset_create_fields(&cb, DEV_FIELDS, 3, NULL, &ds, err, sizeof err),
                     0);
    static const int pins[] = {FEEDER_PIN_REGISTER, FEEDER_PIN_COPY, FEEDER_PIN_NONE};
    for (int v = 0; v < 6; v++) {
        feeder_loader *ld[2];
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(feeder_loader_create(ds, NULL, &ld[d]), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_BATCH_SIZE, 5), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_NUM_WORKERS, v % 2 ? 2 : 0), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_SHUFFLE, 1), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_SEED, 9), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_DEVICE, d ? 0 : -1), 0);
            ck_assert_int_eq(feeder_loader_set(ld[d], FEEDER_OPT_PIN_MODE, pins[v / 2]), 0);
            ck_assert_int_eq(feeder_loader_set_collate(ld[d], dev_collate, NULL), 0);
        }
        const char *why;
        ck_assert_int_eq(feeder_loader_start(ld[1]), 0);
        ck_assert_msg(feeder_loader_gpu_status(ld[1], &why) == 1, "v %d: %s", v, why);
        feeder_batch *hb, *db;
        int rc, batches = 0;
        while ((rc = feeder_next(ld[0], &hb)) == 0) {
            ck_assert_int_eq(feeder_next(ld[1], &db), 0);
            ck_assert_int_eq(db->device, 0);
            ck_assert_uint_eq(db->count, hb->count);
            ck_assert_mem_eq(db->indices, hb->indices, hb->count * 8);
            for (uint32_t k = 0; k < 3; k++) {
                uint8_t *a, *b;
                size_t na, nb;
                int64_t la[16] = {0}, lb[16] = {0}, oa[17] = {0}, ob[17] = {0};
                uint64_t sa[FEEDER_FIELD_MAX_DIMS + 1], sb[FEEDER_FIELD_MAX_DIMS + 1];
                field_bytes(hb, k, &a, &na, la, oa, sa);
                field_bytes(db, k, &b, &nb, lb, ob, sb);
                ck_assert_msg(na == nb && memcmp(a, b, na) == 0,
                              "v %d batch %d field %u: device bytes differ", v, batches, k);
                ck_assert_mem_eq(sa, sb, sizeof(sa));
                ck_assert_mem_eq(la, lb, sizeof(la));
                ck_assert_mem_eq(oa, ob, sizeof(oa));
                free(a);
                free(b);
            }
            ck_assert_int_eq(feeder_batch_release(hb, NULL), 0);
            ck_assert_int_eq(feeder_batch_release(db, NULL), 0);
            batches++;
        }
        ck_assert_int_eq(rc, FEEDER_DONE);
        ck_assert_int_eq(feeder_next(ld[1], &db), FEEDER_DONE);
        ck_assert_int_eq(batches, 5);
        feeder_loader_destroy(ld[0]);
        feeder_loader_destroy(ld[1]);
    }
    /* A float dtype is refused: the fields reach the device as written. */
    feeder_loader *bad;
    ck_assert_int_eq(feeder_loader_create(ds, NULL, &bad), 0);
    ck_assert_int_eq(feeder_loader_set(bad, FEEDER_OPT_DEVICE, 0), 0);
    ck_assert_int_eq(feeder_loader_set(bad, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT16), 0);
    ck_assert_int_eq(feeder_loader_start(bad), FEEDER_EINVAL);
    feeder_loader_destroy(bad);
    feeder_dataset_destroy(ds);
}
END_TEST

/* The image schema's fields of a device batch are its device buffers. */
START_TEST(test_image_fields_of_device_batch)
{
    cfg d = base();
    d.device = 0;
    feeder_loader *ld = make(jpegs, &d);
    feeder_batch *b;
    ck_assert_int_eq(feeder_next(ld, &b), 0);
    feeder_tensor t;
    ck_assert_int_eq(feeder_batch_field(b, "image", &t), 0);
    ck_assert_ptr_eq(t.data, b->device_data);
    ck_assert_int_eq(t.device, 0);
    ck_assert_uint_eq(t.bytes, b->device_bytes);
    ck_assert_int_eq(feeder_batch_field(b, "label", &t), 0);
    ck_assert_ptr_eq(t.data, b->device_labels);
    ck_assert_int_eq(feeder_batch_release(b, NULL), 0);
    feeder_loader_destroy(ld);
}
END_TEST

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_device_matches_host);
    tcase_add_test(tc, test_register_refused_copies_through_pinned_buffers);
    tcase_add_test(tc, test_normalize_matches_cpu);
    tcase_add_test(tc, test_normalize_custom_mean_std);
    tcase_add_test(tc, test_gray_device_matches_host);
    tcase_add_test(tc, test_gray_normalize_matches_cpu);
    tcase_add_test(tc, test_slow_consumer_smallest_rings);
    tcase_add_test(tc, test_fast_consumer_large_copies_keep_slots);
    tcase_add_test(tc, test_device_ring_borrowed);
    tcase_add_test(tc, test_device_out_of_range);
    tcase_add_test(tc, test_set_epoch_drops_prefetched);
    tcase_add_test(tc, test_status_describes_path);
    tcase_add_test(tc, test_packed_raw_on_device);
    tcase_add_test(tc, test_packed_raw_direct_crc);
    tcase_add_test(tc, test_packed_raw_direct_samplers);
    tcase_add_test(tc, test_resume_after_device_batches);
    tcase_add_test(tc, test_nvjpeg_close_to_cpu);
    tcase_add_test(tc, test_nvjpeg_decode_threads_same_batches);
    tcase_add_test(tc, test_nvjpeg_watchdog_fails_a_stuck_call);
    tcase_add_test(tc, test_nvjpeg_oversize_files_decode_on_cpu);
    tcase_add_test(tc, test_nvjpeg_files_have_room_of_their_own);
    tcase_add_test(tc, test_nvjpeg_warmup_decodes_on_workers_first);
    tcase_add_test(tc, test_nvjpeg_routes_by_header);
    tcase_add_test(tc, test_packed_jpeg_on_gpu_decoder);
    tcase_add_test(tc, test_nvjpeg_bad_files_fail_their_batches);
    tcase_add_test(tc, test_nvjpeg_drop_keeps_each_file_its_bytes);
    tcase_add_test(tc, test_hybrid_splits_every_batch);
    tcase_add_test(tc, test_nvjpeg_gray_close_to_cpu);
    tcase_add_test(tc, test_hybrid_gray_splits_every_batch);
    tcase_add_test(tc, test_trace_gpu_spans);
    tcase_add_test(tc, test_threads_carry_names);
    tcase_add_test(tc, test_fields_on_device);
    tcase_add_test(tc, test_image_fields_of_device_batch);
    suite_add_tcase(s, tc);
    return s;
}

/* Ask a child whether a CUDA device exists, so this process never holds a
 * CUDA context that Check's forked children would inherit. */
static int have_device(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
    if (!have_device()) {
        printf("test_cuda: no CUDA device here: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(cuda_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
