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
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <feeder.h>
#include <feeder_cuda.h>

#include "benchutil.h"
#include "train_kernels.h"

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif

#define PROG "train_loop"
#define DEFAULT_IMAGES 2000
#define SIDE 224

#define die(...) bu_die(PROG, __VA_ARGS__)

#define die_usage(...) bu_die_usage(PROG, __VA_ARGS__)

/* Every CUDA call and kernel launch goes through this. */
#define CK(call) ck((call), #call, __FILE__, __LINE__)
static void ck(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess)
        return;
    die("%s:%d: %s failed: %s (%s)", file, line, what, cudaGetErrorString(e),
        cudaGetErrorName(e));
}

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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options]\n"
            "  --data DIR        image folder, one sub-folder per class (default: make or\n"
            "                    reuse 2,000 JPEGs in $FEEDER_DATA or\n"
            "                    ~/.cache/feeder/default-2000)\n"
            "  --epochs N        epochs (5)\n"
            "  --batch N         samples per batch (64)\n"
            "  --workers N       feeder worker processes (4)\n"
            "  --lr X            learning rate (5e-4)\n"
            "  --momentum X      SGD momentum, 0 = plain SGD (0.9)\n"
            "  --device N        CUDA device (0)\n"
            "  --pool N          average-pool N x N squares of the 224x224 image (4: 56x56x3\n"
            "                    features); N divides 224\n"
            "  --layout nchw|nhwc  layout feeder delivers (nchw); the model is the same\n"
            "  --seed N          seed of the order and of the initial weights (0)\n"
            "  --no-check        skip comparing the first step with a CPU computation\n"
            "  -h, --help        this text\n"
            "Exit status: 0 done and the loss fell, 1 error, 2 bad arguments, 3 the loss did\n"
            "not fall, 77 no CUDA device or feeder delivers host batches here.\n");
}

#define parse_uint(opt, s, min, max) bu_parse_uint(PROG, opt, s, min, max)

/* A finite number in [min, max) (max_incl: [min, max]). */
static double parse_real(const char *opt, const char *s, double min, double max, int max_incl)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max ||
        (!max_incl && v == max))
        die_usage("%s '%s': expected a number in [%g, %g%s", opt, s, min, max,
                  max_incl ? "]" : ")");
    return v;
}

enum { OPT_DATA = 256, OPT_EPOCHS, OPT_BATCH, OPT_WORKERS, OPT_LR, OPT_MOMENTUM, OPT_DEVICE,
       OPT_POOL, OPT_LAYOUT, OPT_SEED, OPT_NO_CHECK };

static void parse_args(opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"data", required_argument, 0, OPT_DATA},
        {"epochs", required_argument, 0, OPT_EPOCHS},
        {"batch", required_argument, 0, OPT_BATCH},
        {"workers", required_argument, 0, OPT_WORKERS},
        {"lr", required_argument, 0, OPT_LR},
        {"momentum", required_argument, 0, OPT_MOMENTUM},
        {"device", required_argument, 0, OPT_DEVICE},
        {"pool", required_argument, 0, OPT_POOL},
        {"layout", required_argument, 0, OPT_LAYOUT},
        {"seed", required_argument, 0, OPT_SEED},
        {"no-check", no_argument, 0, OPT_NO_CHECK},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof(*o));
    o->epochs = 5;
    o->batch = 64;
    o->workers = 4;
    o->lr = 5e-4;
    o->momentum = 0.9;
    o->pool = 4;
    o->layout = FEEDER_LAYOUT_NCHW;
    o->check = 1;

    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
        if (optarg && strncmp(optarg, "--", 2) == 0 && c != '?' && c != ':' && li >= 0)
            die_usage("--%s needs a value, got the option '%s'", longopts[li].name, optarg);
        li = -1;
        switch (c) {
        case OPT_DATA:
            o->data = optarg;
            break;
        case OPT_EPOCHS:
            o->epochs = (unsigned)parse_uint("--epochs", optarg, 1, 100000);
            break;
        case OPT_BATCH:
            o->batch = (uint32_t)parse_uint("--batch", optarg, 1, 65536);
            break;
        case OPT_WORKERS:
            o->workers = (int)parse_uint("--workers", optarg, 0, 1024);
            break;
        case OPT_LR:
            o->lr = parse_real("--lr", optarg, 0, 100, 1);
            if (o->lr == 0)
                die_usage("--lr 0: nothing would be learnt");
            break;
        case OPT_MOMENTUM:
            o->momentum = parse_real("--momentum", optarg, 0, 1, 0);
            break;
        case OPT_DEVICE:
            o->device = (int)parse_uint("--device", optarg, 0, 1023);
            break;
        case OPT_POOL:
            o->pool = (int)parse_uint("--pool", optarg, 1, SIDE);
            if (SIDE % o->pool)
                die_usage("--pool %d does not divide the image side %d", o->pool, SIDE);
            break;
        case OPT_LAYOUT:
            if (strcmp(optarg, "nchw") == 0)
                o->layout = FEEDER_LAYOUT_NCHW;
            else if (strcmp(optarg, "nhwc") == 0)
                o->layout = FEEDER_LAYOUT_NHWC;
            else
                die_usage("--layout '%s': expected nchw or nhwc", optarg);
            break;
        case OPT_SEED:
            o->seed = parse_uint("--seed", optarg, 0, UINT64_MAX);
            break;
        case OPT_NO_CHECK:
            o->check = 0;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case ':':
            die_usage("%s needs a value", argv[optind - 1]);
        default:
            die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_usage("unexpected argument '%s' (options start with --)", argv[optind]);
}

/* ------------------------------------------------------------------------ */
/* The model                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct model {
    int F, K;          /* features, classes */
    uint32_t B;        /* largest batch */
    float *W, *b;      /* K x F, K */
    float *vW, *vb;    /* momentum */
    float *gW, *gb;    /* gradient of the current step */
    float *feat;       /* B x F */
    float *logits;     /* B x K */
    float *dlogits;    /* B x K */
    float *batch_loss; /* 1 */
    tk_totals *totals; /* the epoch's running sums */
    float *W0;         /* host: the initial weights, for --check */
} model;

static void *dalloc(size_t bytes)
{
    void *p;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static void model_init(model *m, int F, int K, uint32_t B, uint64_t seed, cudaStream_t s)
{
    memset(m, 0, sizeof(*m));
    m->F = F;
    m->K = K;
    m->B = B;
    const size_t wn = (size_t)K * F;
    m->W = dalloc(wn * sizeof(float));
    m->vW = dalloc(wn * sizeof(float));
    m->gW = dalloc(wn * sizeof(float));
    m->b = dalloc(K * sizeof(float));
    m->vb = dalloc(K * sizeof(float));
    m->gb = dalloc(K * sizeof(float));
    m->feat = dalloc((size_t)B * F * sizeof(float));
    m->logits = dalloc((size_t)B * K * sizeof(float));
    m->dlogits = dalloc((size_t)B * K * sizeof(float));
    m->batch_loss = dalloc(sizeof(float));
    m->totals = dalloc(sizeof(tk_totals));
    /* Small random weights rather than zeros, so the first step's logits
     * differ between classes and --check compares something; drawn from the
     * same counter-based generator as the loader's order. */
    m->W0 = malloc(wn * sizeof(float));
    if (!m->W0)
        die("out of memory");
    for (size_t i = 0; i < wn; i++)
        m->W0[i] = (float)(1e-3 * (2 * feeder_random_uniform(seed, 0, i, 0xfeed) - 1));
    CK(cudaMemcpy(m->W, m->W0, wn * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemsetAsync(m->b, 0, K * sizeof(float), s));
    CK(cudaMemsetAsync(m->vW, 0, wn * sizeof(float), s));
    CK(cudaMemsetAsync(m->vb, 0, K * sizeof(float), s));
    CK(cudaMemsetAsync(m->totals, 0, sizeof(tk_totals), s));
}

static void model_free(model *m)
{
    float *dev[] = {m->W, m->b, m->vW, m->vb, m->gW, m->gb, m->feat, m->logits, m->dlogits,
                    m->batch_loss};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
        CK(cudaFree(dev[i]));
    CK(cudaFree(m->totals));
    free(m->W0);
}

/* ------------------------------------------------------------------------ */
/* --check: the first step, again on the CPU                                 */
/* ------------------------------------------------------------------------ */

/* Host copies of what the first step read and wrote, filled by D2H copies on
 * the step's stream; read only after cudaStreamSynchronize. */
typedef struct check_buf {
    float *x;       /* pinned: the batch */
    int64_t *labels;/* pinned */
    float *feat, *logits, *gW, *gb, *loss; /* pinned: the GPU's results */
    size_t x_bytes;
} check_buf;

static void check_alloc(check_buf *c, const model *m, size_t x_bytes, uint32_t n)
{
    memset(c, 0, sizeof(*c));
    c->x_bytes = x_bytes;
    void *p;
    CK(cudaMallocHost(&p, x_bytes));
    c->x = p;
    CK(cudaMallocHost(&p, n * sizeof(int64_t)));
    c->labels = p;
    CK(cudaMallocHost(&p, (size_t)n * m->F * sizeof(float)));
    c->feat = p;
    CK(cudaMallocHost(&p, (size_t)n * m->K * sizeof(float)));
    c->logits = p;
    CK(cudaMallocHost(&p, (size_t)m->K * m->F * sizeof(float)));
    c->gW = p;
    CK(cudaMallocHost(&p, m->K * sizeof(float)));
    c->gb = p;
    CK(cudaMallocHost(&p, sizeof(float)));
    c->loss = p;
}

static void check_free(check_buf *c)
{
    void *p[] = {c->x, c->labels, c->feat, c->logits, c->gW, c->gb, c->loss};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        if (p[i])
            CK(cudaFreeHost(p[i]));
}

/* Largest |a - b| over n values, relative to the largest |b| (at least tiny). */
static double rel_err(const float *a, const double *b, size_t n)
{
    double e = 0, mag = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        e = d > e ? d : e;
        mag = fabs(b[i]) > mag ? fabs(b[i]) : mag;
    }
    return e / mag;
}

/* The same step in double precision. Returns 0 when the GPU agrees. */
static int check_step(const check_buf *c, const model *m, uint32_t n, int h, int w, int nchw,
                      int pool)
{
    const int F = m->F, K = m->K, ph = h / pool, pw = w / pool;
    double *feat = malloc((size_t)n * F * sizeof(double));
    double *logits = malloc((size_t)n * K * sizeof(double));
    double *d = malloc((size_t)n * K * sizeof(double));
    double *gW = calloc((size_t)K * F, sizeof(double));
    double gb[1024] = {0};
    if (!feat || !logits || !d || !gW)
        die("out of memory");
    double loss = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (c->labels[i] < 0 || c->labels[i] >= K)
            die("check: sample %u of the first batch has label %lld, outside [0, %d)", i,
                (long long)c->labels[i], K);
        const float *img = c->x + (size_t)i * 3 * h * w;
        double *fi = feat + (size_t)i * F, s = 0, ss = 0;
        for (int f = 0; f < F; f++) {
            int ci = f / (ph * pw), r = f % (ph * pw), py = r / pw, px = r % pw;
            double acc = 0;
            for (int dy = 0; dy < pool; dy++)
                for (int dx = 0; dx < pool; dx++) {
                    int y = py * pool + dy, xx = px * pool + dx;
                    acc += nchw ? img[((size_t)ci * h + y) * w + xx]
                                : img[((size_t)y * w + xx) * 3 + ci];
                }
            fi[f] = acc / (pool * pool);
            s += fi[f];
            ss += fi[f] * fi[f];
        }
        double mean = s / F, var = ss / F - mean * mean;
        double inv = 1 / sqrt((var > 0 ? var : 0) + 1e-5);
        for (int f = 0; f < F; f++)
            fi[f] = (fi[f] - mean) * inv;
        double *z = logits + (size_t)i * K, mx = -INFINITY;
        for (int k = 0; k < K; k++) {
            double a = 0; /* b is 0 before the first update */
            for (int f = 0; f < F; f++)
                a += (double)m->W0[(size_t)k * F + f] * fi[f];
            z[k] = a;
            mx = a > mx ? a : mx;
        }
        double se = 0;
        for (int k = 0; k < K; k++)
            se += exp(z[k] - mx);
        double lse = mx + log(se);
        int y = (int)c->labels[i];
        loss += lse - z[y];
        for (int k = 0; k < K; k++)
            d[(size_t)i * K + k] = (exp(z[k] - lse) - (k == y)) / n;
    }
    loss /= n;
    for (int k = 0; k < K; k++)
        for (uint32_t i = 0; i < n; i++) {
            double dk = d[(size_t)i * K + k];
            gb[k] += dk;
            for (int f = 0; f < F; f++)
                gW[(size_t)k * F + f] += dk * feat[(size_t)i * F + f];
        }
    double e_feat = rel_err(c->feat, feat, (size_t)n * F);
    double e_logits = rel_err(c->logits, logits, (size_t)n * K);
    double e_loss = fabs(*c->loss - loss) / loss;
    double e_gW = rel_err(c->gW, gW, (size_t)K * F);
    double e_gb = rel_err(c->gb, gb, (size_t)K);
    /* float against double over sums of ~10^4 terms: 1e-3 is generous for
     * rounding and far too tight for an indexing or layout bug. */
    const double tol = 1e-3;
    int ok = e_feat < tol && e_logits < tol && e_loss < tol && e_gW < tol && e_gb < tol;
    printf("check: first step (%u samples) against the CPU: features %.1e, logits %.1e, "
           "loss %.1e (%.6f), weight gradient %.1e, bias gradient %.1e (relative errors, "
           "tolerance %.0e): %s\n", n, e_feat, e_logits, e_loss, loss, e_gW, e_gb, tol,
           ok ? "ok" : "MISMATCH");
    free(feat);
    free(logits);
    free(d);
    free(gW);
    return ok ? 0 : -1;
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

int main(int argc, char **argv)
{
    opts o;
    parse_args(&o, argc, argv);

    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        fprintf(stderr, PROG ": no CUDA device: %s; this example trains on the GPU "
                "(exit 77: skipped)\n",
                ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount found none");
        return 77;
    }
    if (o.device >= ndev)
        die_usage("--device %d: this machine has %d CUDA device%s (0..%d)", o.device, ndev,
                  ndev == 1 ? "" : "s", ndev - 1);
    CK(cudaSetDevice(o.device));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, o.device));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    char dir[4096];
    feeder_dataset *ds = open_data(&o, dir, sizeof(dir));
    const uint64_t nclasses = feeder_dataset_num_classes(ds);
    if (nclasses < 2 || nclasses > 1024)
        die("%s: %llu classes; this example handles 2 to 1024", dir,
            (unsigned long long)nclasses);

    feeder_loader *ld;
    FK(NULL, feeder_loader_create(ds, NULL, &ld));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, o.batch));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, o.workers));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, o.workers > 0));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_SHUFFLE, 1));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_SEED, (int64_t)o.seed));
    /* Fixed crops: see the head of this file. */
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_HEIGHT, SIDE));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_WIDTH, SIDE));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_LAYOUT, o.layout));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_TIMEOUT_MS, 120000));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DEVICE, o.device));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32));
    FK(ld, feeder_loader_start(ld));

    const char *why = NULL;
    if (!feeder_loader_gpu_status(ld, &why)) {
        fprintf(stderr, PROG ": feeder delivers host batches here (%s); this example needs "
                "device batches (exit 77: skipped)\n", why && *why ? why : "no reason given");
        feeder_loader_destroy(ld);
        feeder_dataset_destroy(ds);
        return 77;
    }
    const int pooled = SIDE / o.pool;
    const int F = 3 * pooled * pooled, K = (int)nclasses;
    printf(PROG ": %s: %llu images, %d classes; GPU %d %s; feeder: %s\n", dir,
           (unsigned long long)feeder_dataset_size(ds), K, o.device, prop.name,
           why && *why ? why : "device batches");
    printf(PROG ": batch %u, %d workers, %s float32 %dx%dx3 pooled %dx%d to %d features, "
           "lr %g, momentum %g, seed %llu\n", o.batch, o.workers,
           o.layout == FEEDER_LAYOUT_NCHW ? "NCHW" : "NHWC", SIDE, SIDE, o.pool, o.pool, F,
           o.lr, o.momentum, (unsigned long long)o.seed);
    fflush(stdout);

    model m;
    model_init(&m, F, K, o.batch, o.seed, stream);
    tk_totals *host_totals; /* pinned, so the read-back is a true async copy */
    CK(cudaMallocHost((void **)&host_totals, sizeof(*host_totals)));
    check_buf chk;
    memset(&chk, 0, sizeof(chk));

    double first_loss = NAN, last_loss = NAN;
    for (unsigned e = 0; e < o.epochs; e++) {
        feeder_stats s0, s1;
        FK(ld, feeder_loader_stats(ld, &s0));
        const uint64_t t0 = bu_now_ns();
        uint64_t images = 0, steps = 0;
        feeder_batch *b;
        int rc;
        while ((rc = feeder_next(ld, &b)) == 0) {
            if (!b->device_data || b->dtype != FEEDER_DTYPE_FLOAT32 || b->device != o.device ||
                b->channels != 3 || b->height != SIDE || b->width != SIDE ||
                b->layout != o.layout || b->count == 0 || b->count > o.batch ||
                b->device_bytes != (size_t)b->count * 3 * SIDE * SIDE * sizeof(float))
                die("batch %llu is not what was asked for: device_data %p, dtype %d, device "
                    "%d, %u x %u x %u x %u, layout %d, %zu bytes", (unsigned long long)b->number,
                    b->device_data, b->dtype, b->device, b->count, b->height, b->width,
                    b->channels, b->layout, b->device_bytes);
            const int n = (int)b->count;
            const int first = e == 0 && steps == 0 && o.check;
            /* The stream waits for the batch's copy; the host does not. */
            CK(feeder_batch_wait(b, stream));
            CK(tk_features((const float *)b->device_data, n, 3, SIDE, SIDE,
                           o.layout == FEEDER_LAYOUT_NCHW, o.pool, m.feat, stream));
            CK(tk_logits(m.feat, m.W, m.b, n, F, K, m.logits, stream));
            CK(tk_softmax_xent(m.logits, b->device_labels, n, K, m.dlogits, m.batch_loss,
                               m.totals, stream));
            if (first) {
                check_alloc(&chk, &m, b->device_bytes, (uint32_t)n);
                CK(cudaMemcpyAsync(chk.x, b->device_data, b->device_bytes,
                                   cudaMemcpyDeviceToHost, stream));
                CK(cudaMemcpyAsync(chk.labels, b->device_labels, n * sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, stream));
            }
            /* Nothing after this reads the batch: hand its buffers back now,
             * so feeder can copy the next batch into them while the rest of
             * the step runs. feeder reuses them only after `stream` passes
             * this point. */
            FK(ld, feeder_batch_release(b, stream));
            CK(tk_grad(m.dlogits, m.feat, n, F, K, m.gW, m.gb, stream));
            if (first) {
                CK(cudaMemcpyAsync(chk.feat, m.feat, (size_t)n * F * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
                CK(cudaMemcpyAsync(chk.logits, m.logits, (size_t)n * K * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
                CK(cudaMemcpyAsync(chk.gW, m.gW, (size_t)K * F * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
                CK(cudaMemcpyAsync(chk.gb, m.gb, K * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream));
                CK(cudaMemcpyAsync(chk.loss, m.batch_loss, sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
                /* Device-to-host copies are read only after this. */
                CK(cudaStreamSynchronize(stream));
                if (check_step(&chk, &m, (uint32_t)n, SIDE, SIDE,
                               o.layout == FEEDER_LAYOUT_NCHW, o.pool))
                    die("the GPU's first step differs from the CPU's (see above)");
                check_free(&chk);
            }
            CK(tk_sgd(m.W, m.vW, m.gW, (size_t)K * F, (float)o.lr, (float)o.momentum, stream));
            CK(tk_sgd(m.b, m.vb, m.gb, (size_t)K, (float)o.lr, (float)o.momentum, stream));
            images += (uint64_t)n;
            steps++;
        }
        if (rc != FEEDER_DONE)
            FK(ld, rc);
        /* The epoch's totals: copied into pinned memory and read only after
         * the stream has finished, never before. */
        CK(cudaMemcpyAsync(host_totals, m.totals, sizeof(*host_totals), cudaMemcpyDeviceToHost,
                           stream));
        CK(cudaStreamSynchronize(stream));
        const uint64_t ns = bu_now_ns() - t0;
        const tk_totals t = *host_totals;
        CK(cudaMemsetAsync(m.totals, 0, sizeof(tk_totals), stream));
        FK(ld, feeder_loader_stats(ld, &s1));
        if (t.bad_labels)
            die("epoch %u: %llu labels outside [0, %d)", e + 1,
                (unsigned long long)t.bad_labels, K);
        if (t.samples != images)
            die("epoch %u: the GPU counted %llu samples, feeder delivered %llu", e + 1,
                (unsigned long long)t.samples, (unsigned long long)images);
        const double loss = t.samples ? t.loss_sum / t.samples : NAN;
        if (e == 0)
            first_loss = loss;
        last_loss = loss;
        printf("epoch %u/%u  loss %.4f  accuracy %5.1f%%  %llu images in %llu steps  %.2f s  "
               "%.0f images/s  loader wait %.1f ms\n", e + 1, o.epochs, loss,
               t.samples ? 100.0 * t.correct / t.samples : 0.0, (unsigned long long)images,
               (unsigned long long)steps, ns / 1e9, ns ? images * 1e9 / ns : 0.0,
               (s1.wait_ns - s0.wait_ns) / 1e6);
        fflush(stdout);
        if (!isfinite(loss))
            die("epoch %u: the loss is %g; try a smaller --lr", e + 1, loss);
    }

    feeder_stats st;
    FK(ld, feeder_loader_stats(ld, &st));
    printf(PROG ": feeder delivered %llu batches on the GPU, %.1f MB host to device in %.1f ms "
           "of copies; %.1f MB pinned or registered, %.1f MB of device buffers\n",
           (unsigned long long)st.gpu_batches, st.h2d_bytes / 1e6, st.h2d_ns / 1e6,
           st.pinned_bytes / 1e6, st.device_bytes / 1e6);
    int status = 0;
    if (o.epochs >= 2) {
        printf(PROG ": loss %.4f -> %.4f over %u epochs\n", first_loss, last_loss, o.epochs);
        if (!(last_loss < first_loss)) {
            fprintf(stderr, PROG ": the loss did not fall (exit 3)\n");
            status = 3;
        }
    }

    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    model_free(&m);
    CK(cudaFreeHost(host_totals));
    CK(cudaStreamDestroy(stream));
    return status;
}
