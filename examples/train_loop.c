/*
 * train_loop: a small but real training loop in C and CUDA on feeder's
 * device batches. A linear softmax classifier learns the dataset's classes
 * with SGD; every step runs on one user stream and uses each batch exactly as
 * feeder_cuda.h says: wait on its event, run the kernels, release it on the
 * stream.
 *
 *   train_loop                                  (the default dataset)
 *   train_loop --data /data/imagefolder --epochs 10 --batch 128 --workers 8
 *
 * The model. feeder delivers float32 batches of 224x224x3, normalised on the
 * GPU with ImageNet's mean and std. train_kernels.cu average-pools each image
 * over 4x4 squares to 56x56x3 = 9,408 features, standardises them per image,
 * and computes logits = W x + b, softmax cross-entropy, the gradient and an SGD
 * (momentum) update. Pooling on the GPU was chosen over asking feeder for
 * 64x64 images so the example moves the batches a real 224x224 model would,
 * through the same copy and normalise path; the pooled model stays small
 * (10 x 9,408 weights) and a step costs microseconds.
 *
 * What it learns. In the default dataset (bench/benchutil.c) image k of the
 * 2,000 is cut from photo k mod 6 at a random place and scale, whatever its
 * class folder: the label says nothing about the picture, and the only way to
 * lower the loss is to tell the 2,000 images apart and remember each one's
 * label. A linear model over 9,408 features can (there are more features than
 * images), so the training loss falls. The same algorithm in double precision
 * on the CPU, on the same batches (host batches, seed 0), gave a loss of 2.38,
 * 2.21, 2.03, 1.94, 1.85 and an accuracy of 9% to 40% over five epochs; this
 * program should print close to that. The eval pipeline (resize 256, centre
 * crop 224) is used for the same reason: each image is the same every epoch,
 * where random crops would make every epoch a new set of images. On a dataset
 * whose classes differ in content the same loop learns the content.
 *
 * Reported per epoch: mean training loss and accuracy over the epoch's batches
 * (as computed before each step's update), images/s from the first request of
 * the epoch to the end-of-epoch synchronisation (epoch 1 includes starting the
 * workers), and how long feeder_next blocked (the loader's stall).
 *
 * Unless --no-check is given, the first step's features, logits, loss and
 * gradient are compared with a CPU computation on the same batch, copied back
 * from the device, so a kernel bug cannot hide behind a falling loss.
 *
 * Exit status: 0 done and the loss fell; 1 an error; 2 bad arguments; 3 the
 * loss did not fall from the first epoch to the last; 77 no CUDA device, or
 * feeder delivers host batches here (it says why).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <feeder.h>
#include <feeder_cuda.h>

#include "benchutil.h"
#include "benchutil_cuda.h"
#include "cli.h"
#include "train_model.h"

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif

#define PROG "train_loop"
#define DEFAULT_IMAGES 2000
#define SIDE 224

#define die(...) cli_die(PROG, __VA_ARGS__)
#define die_usage(...) cli_die_usage(PROG, __VA_ARGS__)

/* Every CUDA call and kernel launch goes through this. */
#define CK(call) BU_CK(PROG, call)

/* Every feeder call that can fail goes through this. */
#define FK(ld, call) fk((ld), (call), #call, __FILE__, __LINE__)
static void fk(const feeder_loader *ld, int rc, const char *what, const char *file, int line)
{
    if (rc >= 0)
        return;
    die("%s:%d: %s failed: %s (%s)%s%s", file, line, what, feeder_strerror(rc),
        feeder_err_name(rc), ld && *feeder_loader_errmsg(ld) ? ": " : "",
        ld ? feeder_loader_errmsg(ld) : "");
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct opts {
    const char *data;
    unsigned epochs;
    uint32_t batch;
    int workers;
    double lr, momentum;
    int device;
    int pool;
    int layout;
    uint64_t seed;
    int check;
} opts;

static void parse_args(opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->epochs = 5;
    o->batch = 64;
    o->workers = 4;
    o->lr = 5e-4;
    o->momentum = 0.9;
    o->pool = 4;
    o->layout = FEEDER_LAYOUT_NCHW;
    o->check = 1;
    cli_opt t[] = {
        CLI_STRING("data", "DIR", o->data,
                   "image folder, one sub-folder per class (default: make or\n"
                   "reuse 2,000 JPEGs in $FEEDER_DATA or\n~/.cache/feeder/default-2000)"),
        CLI_UINT("epochs", "N", o->epochs, 1, 100000, "epochs (5)"),
        CLI_UINT("batch", "N", o->batch, 1, 65536, "samples per batch (64)"),
        CLI_UINT("workers", "N", o->workers, 0, 1024, "feeder worker processes (4)"),
        CLI_DOUBLE("lr", "X", o->lr, 0, 100, "learning rate (5e-4)"),
        CLI_DOUBLE("momentum", "X", o->momentum, 0, 1, "SGD momentum, 0 = plain SGD (0.9)"),
        CLI_UINT("device", "N", o->device, 0, 1023, "CUDA device (0)"),
        CLI_UINT("pool", "N", o->pool, 1, SIDE,
                 "average-pool N x N squares of the 224x224 image (4: 56x56x3\n"
                 "features); N divides 224"),
        CLI_OPTION("layout", o->layout, FEEDER_OPT_LAYOUT,
                   "layout feeder delivers (nchw); the model is the same"),
        CLI_UINT("seed", "N", o->seed, 0, UINT64_MAX,
                 "seed of the order and of the initial weights (0)"),
        CLI_FLAGV("no-check", o->check, 0,
                  "skip comparing the first step with a CPU computation"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = t,
                     .epilog = "Exit status: 0 done and the loss fell, 1 error, 2 bad arguments, "
                               "3 the loss did\nnot fall, 77 no CUDA device or feeder delivers "
                               "host batches here.\n"};
    cli_parse(&spec, argc, argv);
    if (o->lr == 0)
        die_usage("--lr 0: nothing would be learnt");
    if (o->momentum >= 1)
        die_usage("--momentum '%g': expected a number in [0, 1)", o->momentum);
    if (SIDE % o->pool)
        die_usage("--pool %d does not divide the image side %d", o->pool, SIDE);
}

/* ------------------------------------------------------------------------ */

static feeder_dataset *open_data(const opts *o, char *dir, size_t dirlen)
{
    char err[1024] = "";
    if (o->data) {
        snprintf(dir, dirlen, "%s", o->data);
    } else {
        bu_default_dataset_dir(dir, dirlen, DEFAULT_IMAGES);
        if (bu_ensure_default_dataset(dir, DEFAULT_IMAGES, FEEDER_BENCH_PHOTOS, err,
                                      sizeof(err)))
            die("%s", err);
    }
    feeder_dataset *ds;
    int rc = feeder_dataset_open_folder(dir, &ds, err, sizeof(err));
    if (rc)
        die("opening %s: %s (%s): %s", dir, feeder_strerror(rc), feeder_err_name(rc), err);
    return ds;
}

/* What the training steps share. */
typedef struct train {
    const opts *o;
    feeder_loader *ld;
    cudaStream_t stream;
    tm_model m;
    tk_totals *host_totals; /* pinned, so the read-back is a true async copy */
    tm_check chk;
    int F, K;
} train;

/* The device, or exit 77 (skipped) when there is none. */
static int open_device(const opts *o, struct cudaDeviceProp *prop, cudaStream_t *stream)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        fprintf(stderr, PROG ": no CUDA device: %s; this example trains on the GPU "
                "(exit 77: skipped)\n",
                ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount found none");
        return 77;
    }
    if (o->device >= ndev)
        die_usage("--device %d: this machine has %d CUDA device%s (0..%d)", o->device, ndev,
                  ndev == 1 ? "" : "s", ndev - 1);
    CK(cudaSetDevice(o->device));
    CK(cudaGetDeviceProperties(prop, o->device));
    CK(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
    return 0;
}

/* A started loader of float32 device batches. */
static feeder_loader *start_loader(const opts *o, feeder_dataset *ds)
{
    feeder_loader *ld;
    FK(NULL, feeder_loader_create(ds, NULL, &ld));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, o->batch));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, o->workers));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, o->workers > 0));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)o->seed));
    /* Fixed crops: see the head of this file. */
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_HEIGHT, SIDE));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_WIDTH, SIDE));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_LAYOUT, o->layout));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 120000));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DEVICE, o->device));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32));
    FK(ld, feeder_loader_start(ld));
    return ld;
}

static void check_batch(const opts *o, const feeder_batch *b)
{
    if (!b->device_data || b->dtype != FEEDER_DTYPE_FLOAT32 || b->device != o->device ||
        b->channels != 3 || b->height != SIDE || b->width != SIDE || b->layout != o->layout ||
        b->count == 0 || b->count > o->batch ||
        b->device_bytes != (size_t)b->count * 3 * SIDE * SIDE * sizeof(float))
        die("batch %llu is not what was asked for: device_data %p, dtype %d, device "
            "%d, %u x %u x %u x %u, layout %d, %zu bytes", (unsigned long long)b->number,
            b->device_data, b->dtype, b->device, b->count, b->height, b->width, b->channels,
            b->layout, b->device_bytes);
}

/* The first step's comparison with the CPU, after its backward pass. */
static void check_first_step(train *t)
{
    const opts *o = t->o;
    char report[512];
    CK(tm_check_end(&t->chk, &t->m, t->stream));
    int bad = tm_check_compare(&t->chk, &t->m, SIDE, SIDE, o->layout == FEEDER_LAYOUT_NCHW,
                               o->pool, report, sizeof(report));
    printf("%s\n", report);
    if (bad == -2)
        die("%s", report);
    if (bad)
        die("the GPU's first step differs from the CPU's (see above)");
    CK(tm_check_free(&t->chk));
}

/* One step on batch b: forward, release, backward, update. */
static void step(train *t, feeder_batch *b, int first)
{
    const opts *o = t->o;
    check_batch(o, b);
    const int n = (int)b->count;
    /* The stream waits for the batch's copy; the host does not. */
    CK(feeder_batch_wait(b, t->stream));
    CK(tm_forward(&t->m, (const float *)b->device_data, b->device_labels, n, SIDE, SIDE,
                  o->layout == FEEDER_LAYOUT_NCHW, o->pool, t->stream));
    if (first)
        CK(tm_check_begin(&t->chk, &t->m, b, t->stream));
    /* Nothing after this reads the batch: hand its buffers back now, so
     * feeder can copy the next batch into them while the rest of the step
     * runs. feeder reuses them only after `stream` passes this point. */
    FK(t->ld, feeder_batch_release(b, t->stream));
    CK(tm_backward(&t->m, n, t->stream));
    if (first)
        check_first_step(t);
    CK(tk_sgd(t->m.W, t->m.vW, t->m.gW, (size_t)t->K * t->F, (float)o->lr, (float)o->momentum,
              t->stream));
    CK(tk_sgd(t->m.b, t->m.vb, t->m.gb, (size_t)t->K, (float)o->lr, (float)o->momentum,
              t->stream));
}

/* Epoch e; its mean loss. */
static double epoch(train *t, unsigned e)
{
    const opts *o = t->o;
    feeder_stats s0, s1;
    FK(t->ld, feeder_loader_stats(t->ld, &s0));
    const uint64_t t0 = bu_now_ns();
    uint64_t images = 0, steps = 0;
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(t->ld, &b)) == 0) {
        images += b->count;
        step(t, b, e == 0 && steps == 0 && o->check);
        steps++;
    }
    if (rc != FEEDER_DONE)
        FK(t->ld, rc);
    /* The epoch's totals: copied into pinned memory and read only after the
     * stream has finished, never before. */
    CK(cudaMemcpyAsync(t->host_totals, t->m.totals, sizeof(*t->host_totals),
                       cudaMemcpyDeviceToHost, t->stream));
    CK(cudaStreamSynchronize(t->stream));
    const uint64_t ns = bu_now_ns() - t0;
    const tk_totals tt = *t->host_totals;
    CK(cudaMemsetAsync(t->m.totals, 0, sizeof(tk_totals), t->stream));
    FK(t->ld, feeder_loader_stats(t->ld, &s1));
    if (tt.bad_labels)
        die("epoch %u: %llu labels outside [0, %d)", e + 1, (unsigned long long)tt.bad_labels,
            t->K);
    if (tt.samples != images)
        die("epoch %u: the GPU counted %llu samples, feeder delivered %llu", e + 1,
            (unsigned long long)tt.samples, (unsigned long long)images);
    const double loss = tt.samples ? tt.loss_sum / tt.samples : NAN;
    printf("epoch %u/%u  loss %.4f  accuracy %5.1f%%  %llu images in %llu steps  %.2f s  "
           "%.0f images/s  loader wait %.1f ms\n", e + 1, o->epochs, loss,
           tt.samples ? 100.0 * tt.correct / tt.samples : 0.0, (unsigned long long)images,
           (unsigned long long)steps, ns / 1e9, ns ? images * 1e9 / ns : 0.0,
           (s1.wait_ns - s0.wait_ns) / 1e6);
    fflush(stdout);
    if (!isfinite(loss))
        die("epoch %u: the loss is %g; try a smaller --lr", e + 1, loss);
    return loss;
}

/* The loader's totals and whether the loss fell: the exit status. */
static int finish(const train *t, double first_loss, double last_loss)
{
    feeder_stats st;
    FK(t->ld, feeder_loader_stats(t->ld, &st));
    printf(PROG ": feeder delivered %llu batches on the GPU, %.1f MB host to device in %.1f ms "
           "of copies; %.1f MB pinned or registered, %.1f MB of device buffers\n",
           (unsigned long long)st.gpu_batches, st.h2d_bytes / 1e6, st.h2d_ns / 1e6,
           st.pinned_bytes / 1e6, st.device_bytes / 1e6);
    if (t->o->epochs < 2)
        return 0;
    printf(PROG ": loss %.4f -> %.4f over %u epochs\n", first_loss, last_loss, t->o->epochs);
    if (last_loss < first_loss)
        return 0;
    fprintf(stderr, PROG ": the loss did not fall (exit 3)\n");
    return 3;
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);
    struct cudaDeviceProp prop;
    train t = {.o = &o};
    if (open_device(&o, &prop, &t.stream))
        return 77;
    char dir[4096];
    feeder_dataset *ds = open_data(&o, dir, sizeof(dir));
    const uint64_t nclasses = feeder_dataset_num_classes(ds);
    if (nclasses < 2 || nclasses > 1024)
        die("%s: %llu classes; this example handles 2 to 1024", dir,
            (unsigned long long)nclasses);
    t.ld = start_loader(&o, ds);
    const char *why = NULL;
    if (!feeder_loader_gpu_status(t.ld, &why)) {
        fprintf(stderr, PROG ": feeder delivers host batches here (%s); this example needs "
                "device batches (exit 77: skipped)\n", why && *why ? why : "no reason given");
        feeder_loader_destroy(t.ld);
        feeder_dataset_destroy(ds);
        return 77;
    }
    const int pooled = SIDE / o.pool;
    t.F = 3 * pooled * pooled;
    t.K = (int)nclasses;
    printf(PROG ": %s: %llu images, %d classes; GPU %d %s; feeder: %s\n", dir,
           (unsigned long long)feeder_dataset_size(ds), t.K, o.device, prop.name,
           why && *why ? why : "device batches");
    printf(PROG ": batch %u, %d workers, %s float32 %dx%dx3 pooled %dx%d to %d features, "
           "lr %g, momentum %g, seed %llu\n", o.batch, o.workers,
           o.layout == FEEDER_LAYOUT_NCHW ? "NCHW" : "NHWC", SIDE, SIDE, o.pool, o.pool, t.F,
           o.lr, o.momentum, (unsigned long long)o.seed);
    fflush(stdout);
    CK(tm_model_init(&t.m, t.F, t.K, o.batch, o.seed, t.stream));
    CK(cudaMallocHost((void **)&t.host_totals, sizeof(*t.host_totals)));
    double first_loss = NAN, last_loss = NAN;
    for (unsigned e = 0; e < o.epochs; e++) {
        last_loss = epoch(&t, e);
        if (e == 0)
            first_loss = last_loss;
    }
    int status = finish(&t, first_loss, last_loss);
    feeder_loader_destroy(t.ld);
    feeder_dataset_destroy(ds);
    CK(tm_model_free(&t.m));
    CK(cudaFreeHost(t.host_totals));
    CK(cudaStreamDestroy(t.stream));
    return status;
}
