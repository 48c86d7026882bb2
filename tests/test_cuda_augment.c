/*
 * FEEDER_OPT_AUGMENT_ON_DEVICE: the augment plan's trailing colour jitter /
 * random grayscale / Gaussian blur steps and its mixup / cutmix as kernels on the device
 * batch (cuda/augment.cu), against host batches of the same loader
 * settings (device -1: the workers' CPU ops): every byte within +-1 (equal
 * for the ops whose arithmetic has no rounding to differ in), the labels,
 * indices and mix entries equal, for both layouts, every pin mode and
 * worker counts 0..2, the short last batch included; and behind a training
 * loop whose slow steps hold the copy stream back (lag_step), with nvJPEG
 * decoding too (its batches the same bytes as without the steps). Needs a
 * CUDA device: without one the program exits 77 (skipped); as in
 * test_cuda, only forked children touch CUDA.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "augment/augment.h"
#include "benchutil.h"
#include "cuda_kernels.h"
#include "feeder.h"
#include "feeder_cuda.h"

#define CK_CUDA(call)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));       \
    } while (0)

enum { MAXB = 64, MAXC = 16, SEED = 3, BATCH = 5 };
enum { LAGB = 16 }; /* batches a run behind training steps may have */

static char tmpdir[256];
static feeder_dataset *jpegs;

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/feeder-cuda-aug-XXXXXX");
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

typedef struct cfg {
    int device, on_device, pin, layout, workers, decoder, size;
    int gray; /* FEEDER_OPT_CHANNELS 1 */
    uint64_t lag_ns; /* device runs: each batch's training step (see lag_step), or 0 */
} cfg;

static cfg host_cfg(int layout)
{
    return (cfg){.device = -1, .on_device = 1, .pin = FEEDER_PIN_REGISTER, .layout = layout,
                 .workers = 2, .decoder = FEEDER_DECODER_ROI, .size = 0};
}

/* Every batch of two epochs: bytes (device batches copied back after the
 * ready event), labels, indices, mix entries. */
typedef struct run {
    uint32_t nb;
    uint32_t count[MAXB];
    uint64_t epoch[MAXB], number[MAXB];
    uint8_t *bytes[MAXB];
    size_t nbytes[MAXB];
    int64_t labels[MAXB][MAXC];
    uint64_t idx[MAXB][MAXC];
    int mixed[MAXB];
    feeder_mix mix[MAXB][MAXC];
    int decoder;
    feeder_stats st;
    char decoder_why[512];
} run;

static void run_free(run *r)
{
    for (uint32_t i = 0; i < r->nb; i++)
        free(r->bytes[i]);
    free(r);
}

static feeder_loader *make(const cfg *c, const feeder_augment *aug)
{
    feeder_loader *ld;
    ck_assert_int_eq(feeder_loader_create(jpegs, NULL, &ld), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, BATCH), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, c->workers), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_SEED, SEED), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_HEIGHT, c->size ? c->size : 40), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_WIDTH, c->size ? c->size : 56), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_RESIZE, c->size ? c->size : 64), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DECODER, c->decoder), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_LAYOUT, c->layout), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_DEVICE, c->device), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_PIN_MODE, c->pin), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_GPU_WARMUP, 0), 0);
    ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_AUGMENT_ON_DEVICE, c->on_device), 0);
    if (c->gray)
        ck_assert_int_eq(feeder_loader_set(ld, FEEDER_OPT_CHANNELS, 1), 0);
    if (aug)
        ck_assert_int_eq(feeder_loader_set_augment(ld, aug), 0);
    return ld;
}

/* cfg.lag_ns: a training loop on the device batches, which never waits on
 * the host: each batch's step goes on a stream of its own (the batch is
 * released there), waits for the batch, copies it back into pinned memory
 * (read once the run is over), spins lag_ns and sums its bytes and labels
 * (tk_spin_sum). The steps queue up, and the copy stream, which waits for a
 * release before it refills an entry, runs behind the loader's and the
 * decode thread's calls by as many steps as the ring and the host slots let
 * the loader run ahead: the timing under which host-side work that is not
 * in stream order (nvJPEG's hardware decode, docs/RELIABILITY.md) or a
 * buffer rewritten too early lands in a batch the stream has not finished. */
typedef struct lag {
    cudaStream_t s;           /* the steps' stream; NULL: no steps */
    unsigned long long *sums; /* device: batch i's sum at [i] */
    uint8_t *host;            /* pinned: batch i's bytes, as its step saw them, at [i * per] */
    size_t per;
} lag;

/* Everything the steps use, allocated first: an allocation in the loop
 * might wait for the device. */
static void lag_start(lag *g, const cfg *c, int on)
{
    memset(g, 0, sizeof(*g));
    if (!on || !c->lag_ns)
        return;
    g->per = (size_t)BATCH * (c->size ? c->size : 40) * (c->size ? c->size : 56) * 3;
    CK_CUDA(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
    CK_CUDA(cudaMalloc((void **)&g->sums, LAGB * sizeof(*g->sums)));
    CK_CUDA(cudaMemset(g->sums, 0, LAGB * sizeof(*g->sums)));
    CK_CUDA(cudaMallocHost((void **)&g->host, LAGB * g->per));
}

/* Batch i's step. */
static void lag_step(lag *g, uint32_t i, const feeder_batch *b, size_t nbytes, uint64_t ns)
{
    ck_assert_uint_lt(i, LAGB);
    ck_assert_uint_le(nbytes, g->per);
    CK_CUDA(feeder_batch_wait(b, g->s));
    CK_CUDA(cudaMemcpyAsync(g->host + i * g->per, b->device_data, nbytes, cudaMemcpyDeviceToHost,
                            g->s));
    CK_CUDA((cudaError_t)tk_spin_sum(b->device_data, nbytes, b->device_labels, b->count, ns,
                                     &g->sums[i], g->s));
}

/* The bytes every step copied back, and every step's sum of the batch: the
 * same bytes, so nothing rewrote a batch before its release had passed. */
static void lag_end(lag *g, run *r)
{
    if (!g->s)
        return;
    unsigned long long got[LAGB];
    CK_CUDA(cudaStreamSynchronize(g->s));
    CK_CUDA(cudaMemcpy(got, g->sums, r->nb * sizeof(*got), cudaMemcpyDeviceToHost));
    for (uint32_t i = 0; i < r->nb; i++) {
        memcpy(r->bytes[i], g->host + i * g->per, r->nbytes[i]);
        ck_assert_msg(got[i] == tk_host_sum(r->bytes[i], r->nbytes[i], r->labels[i], r->count[i]),
                      "batch %u changed while its training step read it", i);
    }
    CK_CUDA(cudaFreeHost(g->host));
    CK_CUDA(cudaFree(g->sums));
    CK_CUDA(cudaStreamDestroy(g->s));
}

/* A batch's facts and bytes into r: host bytes now; device bytes now on
 * `s`, or through its step (g). The stream to release it on. */
static cudaStream_t take_batch(run *r, const feeder_batch *b, int on, cudaStream_t s, lag *g,
                               uint64_t lag_ns)
{
    uint32_t i = r->nb++;
    ck_assert_uint_lt(i, MAXB);
    ck_assert_uint_le(b->count, MAXC);
    r->count[i] = b->count;
    r->epoch[i] = b->epoch;
    r->number[i] = b->number;
    memcpy(r->labels[i], b->labels, b->count * sizeof(int64_t));
    memcpy(r->idx[i], b->indices, b->count * sizeof(uint64_t));
    r->mixed[i] = b->mix != NULL;
    if (b->mix)
        memcpy(r->mix[i], b->mix, b->count * sizeof(feeder_mix));
    r->nbytes[i] = (size_t)b->count * b->sample_bytes;
    r->bytes[i] = malloc(r->nbytes[i]);
    if (!on) {
        ck_assert_ptr_nonnull(b->data);
        memcpy(r->bytes[i], b->data, r->nbytes[i]);
        return s;
    }
    ck_assert_ptr_nonnull(b->device_data);
    ck_assert_uint_eq(b->device_bytes, r->nbytes[i]);
    if (g->s) {
        lag_step(g, i, b, r->nbytes[i], lag_ns);
        return g->s;
    }
    CK_CUDA(feeder_batch_wait(b, s));
    CK_CUDA(cudaMemcpyAsync(r->bytes[i], b->device_data, r->nbytes[i], cudaMemcpyDeviceToHost,
                            s));
    CK_CUDA(cudaStreamSynchronize(s));
    return s;
}

static run *collect(const cfg *c, const feeder_augment *aug)
{
    feeder_loader *ld = make(c, aug);
    ck_assert_int_eq(feeder_loader_start(ld), 0);
    const char *why;
    int on = feeder_loader_gpu_status(ld, &why);
    ck_assert_msg(on == (c->device >= 0), "gpu_status %d: %s", on, why);
    cudaStream_t s = NULL;
    if (on)
        CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    lag g;
    lag_start(&g, c, on);
    run *r = calloc(1, sizeof(*r));
    for (int e = 0; e < 2; e++) {
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0)
            ck_assert_int_eq(feeder_batch_release(b, take_batch(r, b, on, s, &g, c->lag_ns)), 0);
        ck_assert_msg(rc == FEEDER_DONE, "%s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    }
    lag_end(&g, r);
    ck_assert_int_eq(feeder_loader_stats(ld, &r->st), 0);
    const char *dwhy;
    r->decoder = feeder_loader_decoder(ld, &dwhy);
    snprintf(r->decoder_why, sizeof(r->decoder_why), "%s", dwhy);
    feeder_loader_destroy(ld);
    if (s)
        CK_CUDA(cudaStreamDestroy(s));
    return r;
}

/* Same batches, labels, indices and mixes; bytes within `tol`. */
static void close_runs(const run *a, const run *b, int tol, const char *what)
{
    ck_assert_uint_eq(a->nb, b->nb);
    for (uint32_t i = 0; i < a->nb; i++) {
        ck_assert_uint_eq(a->count[i], b->count[i]);
        ck_assert_uint_eq(a->epoch[i], b->epoch[i]);
        ck_assert_uint_eq(a->number[i], b->number[i]);
        ck_assert_mem_eq(a->labels[i], b->labels[i], a->count[i] * sizeof(int64_t));
        ck_assert_mem_eq(a->idx[i], b->idx[i], a->count[i] * sizeof(uint64_t));
        ck_assert_msg(a->mixed[i] == b->mixed[i], "%s: batch %u mixed %d on the host, %d here",
                      what, i, a->mixed[i], b->mixed[i]);
        for (uint32_t k = 0; a->mixed[i] && k < a->count[i]; k++) {
            ck_assert_uint_eq(a->mix[i][k].partner, b->mix[i][k].partner);
            ck_assert_msg(a->mix[i][k].lambda == b->mix[i][k].lambda,
                          "%s: batch %u sample %u lambda %.9g on the host, %.9g here", what, i, k,
                          (double)a->mix[i][k].lambda, (double)b->mix[i][k].lambda);
        }
        ck_assert_uint_eq(a->nbytes[i], b->nbytes[i]);
        size_t worst = 0;
        int maxd = 0;
        for (size_t j = 0; j < a->nbytes[i]; j++) {
            int d = abs((int)a->bytes[i][j] - (int)b->bytes[i][j]);
            if (d > maxd) {
                maxd = d;
                worst = j;
            }
        }
        ck_assert_msg(maxd <= tol,
                      "%s: batch %u byte %zu is %u on the host, %u on the device (tolerance %d)",
                      what, i, worst, a->bytes[i][worst], b->bytes[i][worst], tol);
    }
}

/* The device runs against the host run of `aug`, for both layouts, each
 * pin mode with its own worker count; behind training steps of lag_ns. */
static void matches_host_behind(const feeder_augment *aug, int tol, const char *what,
                                uint64_t lag_ns)
{
    static const int pins[] = {FEEDER_PIN_REGISTER, FEEDER_PIN_COPY, FEEDER_PIN_NONE};
    static const int workers[] = {2, 0, 1};
    for (int layout = 0; layout < 2; layout++) {
        cfg h = host_cfg(layout);
        run *ref = collect(&h, aug);
        ck_assert_uint_eq(ref->nb, 8); /* 18 images, batch 5: the last of each epoch has 3 */
        ck_assert_uint_eq(ref->count[3], 3);
        for (int p = 0; p < 3; p++) {
            cfg d = h;
            d.device = 0;
            d.pin = pins[p];
            d.workers = workers[p];
            d.lag_ns = lag_ns;
            run *got = collect(&d, aug);
            close_runs(ref, got, tol, what);
            run_free(got);
        }
        run_free(ref);
    }
}

static void device_matches_host(const feeder_augment *aug, int tol, const char *what)
{
    matches_host_behind(aug, tol, what, 0);
}

/* A training step of 50 ms: the copy stream falls steps behind the host's
 * calls (with nvJPEG, from the third batch of an epoch on, a ring of 2: a
 * step behind when the decode thread makes its next nvJPEG call). */
#define STEP_NS 50000000ull

static feeder_augment *new_aug(void)
{
    feeder_augment *a;
    ck_assert_int_eq(feeder_augment_create(&a), 0);
    return a;
}

/* ---- each op ---- */

START_TEST(test_brightness)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.6, 0, 0, 0), 0);
    device_matches_host(a, 0, "brightness");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_contrast)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0, 0.6, 0, 0), 0);
    device_matches_host(a, 1, "contrast");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_saturation)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0, 0, 0.8, 0), 0);
    device_matches_host(a, 1, "saturation");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_hue)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0, 0, 0, 0.4), 0);
    device_matches_host(a, 1, "hue");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_jitter_all_four_in_random_order)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    device_matches_host(a, 1, "colour jitter");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_grayscale)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.5), 0);
    device_matches_host(a, 0, "grayscale");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_gaussian_blur)
{
    /* Each sample its own sigma; a kernel of 9 on 56 x 40 reflects at every
     * edge, one of 63 (the largest) reflects 31 pixels deep, after a jitter
     * on the device too. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_blur(a, 9, 0.1, 3.0), 0);
    device_matches_host(a, 1, "gaussian blur");
    feeder_augment_destroy(a);
    a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_blur(a, 63, 0.5, 9.0), 0);
    device_matches_host(a, 1, "jitter + blur of 63");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_mixup)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    device_matches_host(a, 0, "mixup");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_cutmix)
{
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_cutmix(a, 1.0, 1.0), 0);
    device_matches_host(a, 0, "cutmix");
    feeder_augment_destroy(a);
}
END_TEST

/* ---- plans ---- */

START_TEST(test_jitter_gray_mixup_plan)
{
    /* Two mixes with p < 1: some batches mixed, some not, each by its draw. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_int_eq(feeder_augment_blur(a, 5, 0.1, 2.0), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 0.8), 0);
    ck_assert_int_eq(feeder_augment_cutmix(a, 1.0, 0.8), 0);
    device_matches_host(a, 1, "jitter + grayscale + blur + mixup/cutmix");
    /* The per-layer parameter, sum, blur and mix buffers and the entries'
     * pinned parameters are reused only in stream order, with the copy
     * stream steps behind the draws. */
    matches_host_behind(a, 1, "the same behind slow steps", STEP_NS);
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_photometric_before_geometric_stays_on_cpu)
{
    /* Jitter before a flip cannot move behind it: the workers run jitter
     * and flip, the device only the trailing grayscale and the mix; the
     * bytes are the host's all the same. A plan ending in a geometric step
     * leaves the device only the mix. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_flip(a, 1, 0.5), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.5), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    device_matches_host(a, 0, "jitter, flip (CPU), grayscale, mixup");
    feeder_augment_destroy(a);

    a = new_aug();
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.5), 0);
    ck_assert_int_eq(feeder_augment_rotate(a, 20, FEEDER_INTERP_BILINEAR, 0), 0);
    ck_assert_int_eq(feeder_augment_cutmix(a, 1.0, 1.0), 0);
    device_matches_host(a, 0, "grayscale, rotate (CPU), cutmix");
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_option_off_workers_augment_and_mix_is_lent)
{
    /* The default: the workers run the whole plan; device batches are the
     * host's byte for byte and carry the host's mix entries. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    cfg h = host_cfg(FEEDER_LAYOUT_NHWC);
    h.on_device = 0;
    run *ref = collect(&h, a);
    cfg d = h;
    d.device = 0;
    run *got = collect(&d, a);
    close_runs(ref, got, 0, "option off");
    ck_assert(got->mixed[0]);
    run_free(ref);
    run_free(got);
    feeder_augment_destroy(a);
}
END_TEST

START_TEST(test_gray_output_augments_on_the_host)
{
    /* Gray (1-channel) samples: the kernels take RGB, so the workers run
     * the plan and the loader the mix, with the option on: the device
     * batches are the host's byte for byte. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0, 0), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    cfg h = host_cfg(FEEDER_LAYOUT_NHWC);
    h.gray = 1;
    run *ref = collect(&h, a);
    ck_assert_uint_eq(ref->nbytes[0], (size_t)ref->count[0] * 40 * 56); /* one channel */
    cfg d = h;
    d.device = 0;
    run *got = collect(&d, a);
    close_runs(ref, got, 0, "gray output, option on");
    ck_assert(got->mixed[0]);
    run_free(ref);
    run_free(got);
    feeder_augment_destroy(a);
}
END_TEST

/* ---- with a GPU decoder ---- */

/* The host's CPU augment of a run's bytes, sample by sample with the
 * plan's draws, then the batch mix: what the device should have made of the
 * same decoded pixels. */
static void augment_on_host(run *r, const feeder_augment *a, uint32_t w, uint32_t h, int layout)
{
    size_t sb = (size_t)w * h * 3;
    uint8_t *scratch = malloc(sb);
    for (uint32_t i = 0; i < r->nb; i++) {
        for (uint32_t k = 0; k < r->count[i]; k++)
            ck_assert_int_eq(feeder_augment_apply(a, r->bytes[i] + k * sb, w, h, layout, SEED,
                                                  r->epoch[i], r->idx[i][k]),
                             0);
        r->mixed[i] = feeder__augment_mix(&a->plan, r->bytes[i], r->count[i], w, h, layout,
                                          SEED, r->epoch[i], r->number[i], r->mix[i], scratch);
    }
    free(scratch);
}

/* nvJPEG's batches of `layout` at 224 x 224 (every test JPEG fits its
 * sample's place), with the plan `a` (or none) on the device, behind
 * training steps of lag_ns; NULL, with nothing collected, when this build
 * has no nvJPEG. */
static run *nvjpeg_run(int layout, const feeder_augment *a, uint64_t lag_ns)
{
    cfg d = host_cfg(layout);
    d.device = 0;
    d.decoder = FEEDER_DECODER_NVJPEG;
    d.size = 224;
    d.lag_ns = lag_ns;
    run *r = collect(&d, a);
    if (r->decoder != FEEDER_DECODER_NVJPEG) { /* built without nvJPEG */
        run_free(r);
        return NULL;
    }
    ck_assert_uint_eq(r->st.gpu_decoded, 36); /* 18 images, 2 epochs */
    return r;
}

START_TEST(test_nvjpeg_batches_whole_behind_slow_steps)
{
    /* nvJPEG's hardware decode writes its scratch when called, not in
     * stream order: without the host's wait for the last batch's resize
     * (cuda/enqueue.c), the next batch's images land in a batch whose
     * resize still waits for a release. Behind slow steps the batches are
     * the same bytes as without them. */
    for (int layout = 0; layout < 2; layout++) {
        run *ref = nvjpeg_run(layout, NULL, 0);
        if (!ref)
            return;
        run *slow = nvjpeg_run(layout, NULL, STEP_NS);
        ck_assert_ptr_nonnull(slow);
        close_runs(ref, slow, 0, "nvJPEG behind slow steps");
        run_free(slow);
        run_free(ref);
    }
}
END_TEST

START_TEST(test_nvjpeg_keeps_decoding_with_device_augment)
{
    /* Every per-sample step photometric: nvJPEG keeps decoding and the
     * device augments after it, with and without slow steps. Reference:
     * nvJPEG's batches without the plan, augmented on the host. Without the
     * option the loader decodes on the CPU as before. */
    feeder_augment *a = new_aug();
    ck_assert_int_eq(feeder_augment_color_jitter(a, 0.4, 0.4, 0.4, 0.1), 0);
    ck_assert_int_eq(feeder_augment_grayscale(a, 0.2), 0);
    ck_assert_int_eq(feeder_augment_mixup(a, 0.4, 1.0), 0);
    for (int layout = 0; layout < 2; layout++) {
        run *plain = nvjpeg_run(layout, NULL, 0);
        if (!plain)
            break;
        run *got = nvjpeg_run(layout, a, 0);
        run *slow = nvjpeg_run(layout, a, STEP_NS);
        ck_assert_ptr_nonnull(got);
        ck_assert_ptr_nonnull(slow);
        augment_on_host(plain, a, 224, 224, layout);
        close_runs(plain, got, 1, "nvJPEG + device augment");
        close_runs(plain, slow, 1, "nvJPEG + device augment behind slow steps");
        run_free(slow);
        run_free(got);
        run_free(plain);

        cfg d = host_cfg(layout);
        d.device = 0;
        d.decoder = FEEDER_DECODER_NVJPEG;
        d.size = 224;
        d.on_device = 0;
        run *cpu = collect(&d, a);
        ck_assert_int_eq(cpu->decoder, FEEDER_DECODER_ROI);
        ck_assert_msg(strstr(cpu->decoder_why, "augment") != NULL, "%s", cpu->decoder_why);
        run_free(cpu);
    }
    feeder_augment_destroy(a);
}
END_TEST

static Suite *cuda_augment_suite(void)
{
    Suite *s = suite_create("cuda_augment");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_brightness);
    tcase_add_test(tc, test_contrast);
    tcase_add_test(tc, test_saturation);
    tcase_add_test(tc, test_hue);
    tcase_add_test(tc, test_jitter_all_four_in_random_order);
    tcase_add_test(tc, test_grayscale);
    tcase_add_test(tc, test_gaussian_blur);
    tcase_add_test(tc, test_mixup);
    tcase_add_test(tc, test_cutmix);
    tcase_add_test(tc, test_jitter_gray_mixup_plan);
    tcase_add_test(tc, test_photometric_before_geometric_stays_on_cpu);
    tcase_add_test(tc, test_option_off_workers_augment_and_mix_is_lent);
    tcase_add_test(tc, test_gray_output_augments_on_the_host);
    tcase_add_test(tc, test_nvjpeg_batches_whole_behind_slow_steps);
    tcase_add_test(tc, test_nvjpeg_keeps_decoding_with_device_augment);
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
        printf("test_cuda_augment: no CUDA device here: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(cuda_augment_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
