/*
 * mpi_train: data-parallel training on feeder batches, one process per rank,
 * started by mpirun (or srun, or anything feeder_dist_from_env() knows).
 *
 *   mpirun -np 2 build/examples/mpi_train --epochs 3
 *   mpirun -np 4 --bind-to none build/examples/mpi_train --data /data/train --batch 64
 *
 * Each rank finds its place with feeder_dist_from_env(), takes its shard of
 * the dataset through the distributed sampler and runs its own loader with
 * its own worker processes. The model is small enough to train on the CPU in
 * plain C: each image of the batch is average-pooled to 16 x 16 x 3,
 * normalised, and fed to a linear softmax classifier. Every step the ranks
 * sum their gradients (and sample counts) with MPI_Allreduce, divide by the
 * job's sample count and take the same SGD step, so every rank ends with the
 * same weights; the program checks that against rank 0's copy (MPI_Bcast and
 * memcmp) and exits with 1 if any rank differs.
 *
 * Per epoch, rank 0 prints the job's loss and accuracy and the images/s of
 * every rank and of the job. At the end every rank prints one line for
 * scripts (scripts/mpi_check.sh reads it):
 *
 *   mpi_train: summary rank=R world=W n=N epochs=E batches=B samples=S
 *              index_sum=0x... weights=0x...
 *
 * batches and samples count this rank's over all epochs; index_sum is the sum
 * mod 2^64 of splitmix64(index) over every sample it saw, so the ranks' sums
 * add up to the sum over the set they read together, and equal that of
 * 0..N-1 (times the epochs) exactly when their shards were disjoint and
 * covered the dataset; weights is XXH64 of the final weights.
 *
 * With no --data, the first rank of each machine makes --images JPEGs under
 * /tmp/feeder-mpi-<images>, one class per photo in bench/photos (crops of one
 * photo, so the classes can be learnt), reused on later runs; on several
 * machines, pass --data on a shared file system instead.
 *
 * The GPU path (mpi_train_gpu.c, built when CMake finds CUDA): with --device
 * auto (the default) each rank takes the GPU feeder_dist_cuda_device() picks
 * for its local rank, has feeder deliver float32 batches normalised on that
 * GPU, computes the gradient of train_loop's model there (train_model.h) and
 * averages it with NCCL, or MPI_Allreduce on device pointers where Open MPI is
 * CUDA-aware, or MPI_Allreduce staged through pinned host memory; it prints
 * which. Where no rank-local GPU is found (or with --device -1) the job takes
 * the CPU path above, which CI runs. All ranks take the same path.
 *
 * At the end rank 0 prints every rank's images/s and where its time went
 * (blocked in feeder_next, computing, averaging), and the job's images/s:
 * over all epochs, or with --bench the median of the epochs after the first
 * (the first starts the workers and fills the page cache), without the
 * learning check. --json adds the same as one JSON line starting with
 * {"program": "mpi_train" (scripts/mpi_gpu_check.sh reads it).
 *
 * Cores: Open MPI spins on a core while a rank waits in MPI_Allreduce. When
 * ranks x (workers + 1) exceed the machine's cores that core is taken from
 * the feeder workers (it halved the job's rate on 2 cores, docs/BENCHMARKS.md):
 * give every rank a core of its own, or set OMPI_MCA_mpi_yield_when_idle=1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "cli.h"
#include "feeder.h"
#include "mpi_train.h"

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif

#define PROG MT_PROG
#define GRID MT_GRID
#define FEATURES (GRID * GRID * 3)

typedef mt_opts opts;

int mt_rank = 0;

/* Any rank that fails takes the job down: the others would wait forever at
 * their next collective. */
void mt_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG " rank %d: ", mt_rank);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static const char *const allreduce_names[] = {"auto", "nccl", "mpi-cuda", "mpi-host", NULL};

/* --device auto|N|-1. */
static void parse_device(const char *prog, const char *s, void *dest)
{
    if (strcmp(s, "auto") == 0) {
        *(int *)dest = -2;
        return;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < -1 || v > 1023)
        cli_die_usage(prog, "--device '%s': expected auto, -1 or a device in [0, 1023]", s);
    *(int *)dest = (int)v;
}

/* A usage error or --help ends the MPI job cleanly on every rank. */
static void finalize(int status)
{
    (void)status;
    MPI_Finalize();
}

static opts parse_args(int argc, char **argv)
{
    opts o = {.images = 420, .window = 2, .epochs = 3, .batch = 32, .workers = -1, .size = 224, .lr = 0.05,
              .seed = 1, .shuffle = 1, .drop_last = 1, .device = -2, .check = 1};
    int ar = MT_AR_AUTO;
    cli_opt t[] = {
        CLI_STRING("data", "DIR", o.data,
                   "image folder, one sub-folder per class (default: make --images\n"
                   "JPEGs under /tmp/feeder-mpi-<images>, a class per photo)"),
        CLI_UINT("images", "N", o.images, 10, 10000000,
                 "size of the dataset made when --data is not given (420)"),
        CLI_STRING("shards", "PATTERN", o.shards,
                   "read packs instead: a brace range of paths or http(s)://\n"
                   "or s3:// URLs (s-{0..7}.pack), one shards dataset, ordered\n"
                   "by feeder_sampler_shards (each rank whole shards)"),
        CLI_UINT("window", "W", o.window, 0, 1u << 20,
                 "--shards: samples drawn from W shards at a time (0: all) (2)"),
        CLI_STRING("cache", "DIR", o.cache,
                   "where to make it instead (reused when it is already there)"),
        CLI_UINT("epochs", "N", o.epochs, 1, 100000, "epochs (3)"),
        CLI_UINT("batch", "N", o.batch, 1, 1 << 16, "samples per batch per rank (32)"),
        CLI_UINT("workers", "N", o.workers, 0, 1024,
                 "feeder workers per rank (default: the CPUs this rank may use,\n"
                 "shared with the ranks of its machine when it is not bound)"),
        CLI_UINT("size", "N", o.size, GRID, 4096,
                 "loader output side, a multiple of 16 (224: RandomResizedCrop\n"
                 "+ flip, then pooled to 16 x 16 for the model)"),
        CLI_DOUBLE("lr", "X", o.lr, 1e-12, 1e6, "SGD learning rate (0.05)"),
        CLI_UINT("seed", "N", o.seed, 0, 1ull << 62,
                 "seed of the order, the crops and the initial weights (1)"),
        CLI_UINT("shuffle", "0|1", o.shuffle, 0, 1, "shuffle every epoch (1)"),
        CLI_UINT("drop-last", "0|1", o.drop_last, 0, 1,
                 "drop the uneven tail, in the sampler and in the batches (1)"),
        CLI_FUNC("device", "auto|N|-1", parse_device, &o.device,
                 "the GPU path on this rank's GPU (auto: the one its local\n"
                 "rank picks, or the CPU path when it has none), on device N,\n"
                 "or the CPU path (-1) (auto)"),
        CLI_ENUM("allreduce", ar, allreduce_names,
                 "how the GPU path averages gradients\n"
                 "(auto: NCCL if built with it, else MPI on device pointers\n"
                 "if CUDA-aware, else staged through pinned host memory)"),
        CLI_FLAG("bench", o.bench,
                 "report the median of the epochs after the first; no\nlearning check"),
        CLI_FLAG("json", o.json, "rank 0 also prints the report as one JSON line"),
        CLI_FLAGV("no-check", o.check, 0,
                  "GPU path: skip comparing the first step with the CPU"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = t, .quiet = mt_rank != 0, .before_exit = finalize,
                     .usage = "usage: mpirun -np N " PROG " [options]\n",
                     .epilog = "Exit status: 0 done, 1 error or the ranks' weights differ, 2 "
                               "bad arguments,\n3 the GPU path's loss did not fall (not with "
                               "--bench).\n"};
    cli_parse(&spec, argc, argv);
    o.allreduce = (mt_allreduce)ar;
    if (o.size % GRID) {
        if (mt_rank == 0)
            fprintf(stderr, PROG ": --size must be a multiple of 16\n");
        MPI_Finalize();
        exit(2);
    }
    return o;
}

/* Worker processes for this rank. A rank that mpirun bound to some cores
 * gets a worker per core it may use (its workers inherit the binding); an
 * unbound one shares the machine's cores with the other ranks on it. */
static int default_workers(const feeder_dist *d)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)online;
    int w = mine >= online ? mine / d->local_size : mine;
    return w > 0 ? w : 1;
}

double mt_now_s(void) { return (double)bu_now_ns() * 1e-9; }

/* The batch's images, average-pooled to GRID x GRID x 3 and normalised with
 * the ImageNet channel means and deviations. */
static void features(const feeder_batch *b, float *x)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    uint32_t cell = b->height / GRID;
    float scale = 1.0f / (255.0f * (float)(cell * cell));
    for (uint32_t i = 0; i < b->count; i++) {
        const uint8_t *img = b->data + (size_t)i * b->sample_bytes;
        float *xi = x + (size_t)i * FEATURES;
        for (uint32_t gy = 0; gy < GRID; gy++)
            for (uint32_t gx = 0; gx < GRID; gx++) {
                uint32_t acc[3] = {0, 0, 0};
                for (uint32_t y = gy * cell; y < (gy + 1) * cell; y++) {
                    const uint8_t *p = img + ((size_t)y * b->width + gx * cell) * 3;
                    for (uint32_t k = 0; k < cell; k++, p += 3) {
                        acc[0] += p[0];
                        acc[1] += p[1];
                        acc[2] += p[2];
                    }
                }
                for (int c = 0; c < 3; c++)
                    xi[(gy * GRID + gx) * 3 + c] = ((float)acc[c] * scale - mean[c]) / sd[c];
            }
    }
}

/* Forward and backward of softmax(W x + bias) with cross-entropy over the
 * batch: adds the summed gradient to g (classes x (FEATURES + 1), the bias
 * last in each row), and returns the summed loss and the correct count. */
static double step_grad(const double *w, int classes, const float *x, const int64_t *labels,
                        uint32_t count, double *g, uint64_t *correct)
{
    double loss = 0, *z = malloc((size_t)classes * sizeof(*z));
    if (!z)
        mt_die("out of memory");
    const size_t row = FEATURES + 1;
    for (uint32_t i = 0; i < count; i++) {
        const float *xi = x + (size_t)i * FEATURES;
        int best = 0;
        for (int c = 0; c < classes; c++) {
            const double *wc = w + (size_t)c * row;
            double s = wc[FEATURES];
            for (int f = 0; f < FEATURES; f++)
                s += wc[f] * xi[f];
            z[c] = s;
            if (s > z[best])
                best = c;
        }
        double zmax = z[best], sum = 0;
        for (int c = 0; c < classes; c++)
            sum += (z[c] = exp(z[c] - zmax));
        int y = (int)labels[i];
        loss += -log(z[y] / sum);
        *correct += best == y;
        for (int c = 0; c < classes; c++) {
            double d = z[c] / sum - (c == y);
            double *gc = g + (size_t)c * row;
            for (int f = 0; f < FEATURES; f++)
                gc[f] += d * xi[f];
            gc[FEATURES] += d;
        }
    }
    free(z);
    return loss;
}

/* A dataset the model can learn: one class per bundled photo, each image a
 * crop of that photo at a random place, scale and ImageNet-like size (short
 * side 256-512, aspect 3:4-4:3, quality 75-95), all from the seed. A stamp
 * file records the parameters, so a later run reuses the files. */
static int make_dataset(const char *dir, unsigned images, uint64_t seed)
{
    const char *photos_dir = getenv("FEEDER_BENCH_PHOTOS");
    if (!photos_dir || !*photos_dir)
        photos_dir = FEEDER_BENCH_PHOTOS;
    char err[512];
    bu_photos *photos;
    int rc = bu_photos_load(photos_dir, &photos, err, sizeof(err));
    if (rc)
        mt_die("loading the seed photos: %s (set FEEDER_BENCH_PHOTOS, or pass --data)", err);
    char want[128];
    snprintf(want, sizeof(want), "mpi_train images=%u seed=%llu v1\n", images,
             (unsigned long long)seed);
    if (bu_stamp_matches(dir, want) == 1) {
        bu_photos_free(photos);
        return 0;
    }
    bu_rm_rf(dir);
    for (unsigned k = 0; k < images && rc == 0; k++) {
        unsigned c = k % bu_photos_count(photos);
        char path[4300];
        snprintf(path, sizeof(path), "%s/photo_%u", dir, c);
        if ((rc = bu_mkdirs(path)))
            break;
        uint32_t side = 256 + (uint32_t)(feeder_random(seed, 2, k, 0) % 257);
        double ar = 0.75 + (4.0 / 3.0 - 0.75) * feeder_random_uniform(seed, 2, k, 1);
        uint32_t w = ar >= 1 ? (uint32_t)(side * ar) : side;
        uint32_t h = ar >= 1 ? side : (uint32_t)(side / ar);
        int q = 75 + (int)(feeder_random(seed, 2, k, 2) % 21);
        snprintf(path, sizeof(path), "%s/photo_%u/img_%05u.jpg", dir, c, k);
        rc = bu_write_jpeg(photos, path, c, w, h, q, -1, feeder_random(seed, 2, k, 3));
    }
    bu_photos_free(photos);
    return rc ? rc : bu_stamp_write(dir, want);
}

static feeder_dataset *open_data(const opts *o, const feeder_dist *d, char *dir, size_t dirlen)
{
    if (o->shards) {
        char err[1024] = "";
        feeder_dataset *ds;
        int rc = feeder_dataset_open_shards(o->shards, NULL, &ds, err, sizeof(err));
        if (rc)
            mt_die("%s: %s", feeder_strerror(rc), err);
        snprintf(dir, dirlen, "%s", o->shards);
        return ds;
    }
    if (o->data) {
        snprintf(dir, dirlen, "%s", o->data);
    } else {
        if (o->cache)
            snprintf(dir, dirlen, "%s", o->cache);
        else
            snprintf(dir, dirlen, "/tmp/feeder-mpi-%u", o->images);
        /* One maker per machine, the others wait for it. */
        int rc = 0, bad, any;
        if (d->local_rank == 0)
            rc = make_dataset(dir, o->images, 1);
        bad = rc != 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rc)
            mt_die("making the dataset in %s: %s", dir, strerror(-rc));
        if (any)
            mt_die("another rank failed to make the dataset");
    }
    char err[1024] = "";
    feeder_dataset *ds;
    int rc = feeder_dataset_open_folder(dir, &ds, err, sizeof(err));
    if (rc)
        mt_die("%s: %s", feeder_strerror(rc), err);
    return ds;
}

void mt_epoch_line(unsigned e, double loss_sum, uint64_t seen, uint64_t correct, double dt,
                   uint64_t mine)
{
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double *rates = malloc((size_t)world * sizeof(*rates));
    if (!rates)
        mt_die("out of memory");
    double rate = dt > 0 ? (double)mine / dt : 0;
    MPI_Gather(&rate, 1, MPI_DOUBLE, rates, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double slowest;
    MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (mt_rank == 0) {
        printf("epoch %u: loss %.4f accuracy %.3f | images/s per rank:", e,
               seen ? loss_sum / (double)seen : 0, seen ? (double)correct / (double)seen : 0);
        for (int r = 0; r < world; r++)
            printf(" %.1f", rates[r]);
        printf(" | total %.1f\n", slowest > 0 ? (double)seen / slowest : 0);
        fflush(stdout);
    }
    free(rates);
}

/* The CPU path: features and gradients in double precision on the host,
 * summed over the job with MPI_Allreduce. */
static void cpu_train(const opts *o, feeder_loader *ld, int classes, mt_epoch *ep,
                      mt_result *res)
{
    /* The same initial weights everywhere, from the seed alone. */
    const size_t row = FEATURES + 1, nw = (size_t)classes * row;
    double *w = calloc(nw, sizeof(*w)), *g = malloc((nw + 3) * sizeof(*g));
    float *x = malloc((size_t)o->batch * FEATURES * sizeof(*x));
    if (!w || !g || !x)
        mt_die("out of memory");
    for (size_t i = 0; i < nw; i++)
        w[i] = 0.01 * (feeder_random_uniform(o->seed, 0, i, 0) - 0.5);
    snprintf(res->allreduce, sizeof(res->allreduce), "MPI_Allreduce of the gradient in host "
             "memory (CPU path, double)");

    int rc;
    for (unsigned e = 0; e < o->epochs; e++) {
        double t0 = mt_now_s(), loss = 0, wait = 0, compute = 0, allr = 0;
        uint64_t seen = 0, correct = 0, mine = 0;
        feeder_batch *b;
        for (;;) {
            double tw = mt_now_s();
            rc = feeder_next(ld, &b);
            double tc = mt_now_s();
            wait += tc - tw;
            if (rc != 0)
                break;
            for (uint32_t i = 0; i < b->count; i++)
                res->index_sum += mt_mix64(b->indices[i]);
            features(b, x);
            memset(g, 0, (nw + 3) * sizeof(*g));
            uint64_t ok = 0;
            double l = step_grad(w, classes, x, b->labels, b->count, g, &ok);
            /* Gradients, loss, hits and count summed over the job in one
             * call: every rank gets the same sums, so takes the same step. */
            g[nw] = (double)b->count;
            g[nw + 1] = l;
            g[nw + 2] = (double)ok;
            uint32_t count = b->count;
            feeder_batch_release(b, NULL);
            double ta = mt_now_s();
            MPI_Allreduce(MPI_IN_PLACE, g, (int)(nw + 3), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            double tb = mt_now_s();
            double total = g[nw];
            for (size_t i = 0; i < nw; i++)
                w[i] -= o->lr * g[i] / total;
            loss += g[nw + 1];
            correct += (uint64_t)g[nw + 2];
            seen += (uint64_t)total;
            mine += count;
            res->batches++;
            compute += (ta - tc) + (mt_now_s() - tb);
            allr += tb - ta;
        }
        if (rc != FEEDER_DONE)
            mt_die("epoch %u: %s: %s", e, feeder_strerror(rc), feeder_loader_errmsg(ld));
        double dt = mt_now_s() - t0;
        res->samples += mine;
        ep[e] = (mt_epoch){{dt, wait, compute, allr, (double)mine}};
        mt_epoch_line(e, loss, seen, correct, dt, mine);
    }

    /* Identical weights: every rank compares its own with rank 0's, bit for
     * bit, and the job fails if any differs. */
    double *w0 = malloc(nw * sizeof(*w0));
    if (!w0)
        mt_die("out of memory");
    if (mt_rank == 0)
        memcpy(w0, w, nw * sizeof(*w));
    MPI_Bcast(w0, (int)nw, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int differs = memcmp(w0, w, nw * sizeof(*w)) != 0, any_differs;
    MPI_Allreduce(&differs, &any_differs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    res->weights_differ = any_differs;
    res->weights_hash = bu_hash64(0, w, nw * sizeof(*w));
    free(w0);
    free(x);
    free(g);
    free(w);
}

#ifndef MT_HAVE_CUDA
/* Built without CUDA: the CPU path only. */
int mt_gpu_pick(const mt_opts *o, const feeder_dist *d, const char **why)
{
    if (o->device >= 0)
        mt_die("--device %d: this mpi_train was built without CUDA (use --device auto or -1)",
            o->device);
    *why = o->device == -1 ? "--device -1" : "built without CUDA";
    return -1;
}
void mt_gpu_configure(feeder_loader *ld, int device) { mt_die("built without CUDA"); }
void mt_gpu_train(const mt_opts *o, const feeder_dist *d, feeder_loader *ld, int device,
                  int classes, mt_epoch *ep, mt_result *res)
{
    mt_die("built without CUDA");
}
#endif

/* The report: every rank's epochs gathered on rank 0, which prints the
 * per-rank and total images/s and the time split, and with --json the same
 * as one line of JSON. In --bench mode the figures are medians over the
 * epochs after the first (all of them when there is only one); otherwise
 * totals over all epochs. */
/* What rank 0 gathers for the report: every rank's epochs, device and workers. */
typedef struct gathered {
    int world;
    unsigned E, e0, ne;  /* epochs, the first measured, how many are */
    mt_epoch *all;       /* [world][E] */
    int *allint;         /* [world][2]: device, workers */
    double *per;         /* [world][MT_FIELDS]: images/s, seconds per epoch in each part */
    double total;        /* the job's images/s */
    char what[96];       /* which epochs the figures are of */
} gathered;

/* Rank r's figure f over the measured epochs: the median with --bench, else
 * images over wall time (MT_IMAGES) or the mean seconds. */
static double rank_figure(const opts *o, const gathered *g, int r, int f, double *v)
{
    const mt_epoch *er = g->all + (size_t)r * g->E;
    double sum = 0, wall = 0;
    for (unsigned k = 0; k < g->ne; k++) {
        const double *x = er[g->e0 + k].v;
        v[k] = f == MT_IMAGES ? (x[MT_WALL] > 0 ? x[MT_IMAGES] / x[MT_WALL] : 0) : x[f];
        sum += f == MT_IMAGES ? x[MT_IMAGES] : x[f];
        wall += x[MT_WALL];
    }
    if (o->bench)
        return bu_median(v, g->ne);
    if (f == MT_IMAGES)
        return wall > 0 ? sum / wall : 0;
    return sum / g->ne;
}

/* The job: every epoch's images over its slowest rank's time. */
static double job_rate(const opts *o, const gathered *g, double *v)
{
    double images_all = 0, wall_all = 0;
    for (unsigned k = 0; k < g->ne; k++) {
        double img = 0, slowest = 0;
        for (int r = 0; r < g->world; r++) {
            const double *x = g->all[(size_t)r * g->E + g->e0 + k].v;
            img += x[MT_IMAGES];
            slowest = x[MT_WALL] > slowest ? x[MT_WALL] : slowest;
        }
        v[k] = slowest > 0 ? img / slowest : 0;
        images_all += img;
        wall_all += slowest;
    }
    return o->bench ? bu_median(v, g->ne) : wall_all > 0 ? images_all / wall_all : 0;
}

static void figures(const opts *o, gathered *g)
{
    g->e0 = o->bench && g->E >= 2 ? 1 : 0;
    g->ne = g->E - g->e0;
    double *v = malloc(g->ne * sizeof(*v));
    g->per = malloc((size_t)g->world * MT_FIELDS * sizeof(*g->per));
    if (!v || !g->per)
        mt_die("out of memory");
    for (int r = 0; r < g->world; r++)
        for (int f = 0; f < MT_FIELDS; f++)
            g->per[r * MT_FIELDS + f] = rank_figure(o, g, r, f, v);
    g->total = job_rate(o, g, v);
    free(v);
    if (o->bench && g->ne < g->E)
        snprintf(g->what, sizeof(g->what), "median of epochs %u..%u", g->e0, g->E - 1);
    else if (o->bench)
        snprintf(g->what, sizeof(g->what), "the only epoch");
    else
        snprintf(g->what, sizeof(g->what), "all %u epochs", g->E);
}

static void print_table(const gathered *g, int device, const mt_result *res)
{
    printf(PROG ": report, %s path, %d rank%s, %s; seconds per epoch:\n",
           device >= 0 ? "GPU" : "CPU", g->world, g->world == 1 ? "" : "s", g->what);
    printf("| rank | device | workers | images/s | epoch s | load wait s | compute s | "
           "allreduce s |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int r = 0; r < g->world; r++) {
        const double *x = g->per + r * MT_FIELDS;
        char dev[32];
        if (g->allint[2 * r] >= 0)
            snprintf(dev, sizeof(dev), "GPU %d", g->allint[2 * r]);
        else
            snprintf(dev, sizeof(dev), "CPU");
        printf("| %d | %s | %d | %.1f | %.3f | %.3f (%.0f%%) | %.3f (%.0f%%) | %.3f (%.0f%%) |\n",
               r, dev, g->allint[2 * r + 1], x[MT_IMAGES], x[MT_WALL], x[MT_WAIT],
               x[MT_WALL] > 0 ? 100 * x[MT_WAIT] / x[MT_WALL] : 0, x[MT_COMPUTE],
               x[MT_WALL] > 0 ? 100 * x[MT_COMPUTE] / x[MT_WALL] : 0, x[MT_ALLREDUCE],
               x[MT_WALL] > 0 ? 100 * x[MT_ALLREDUCE] / x[MT_WALL] : 0);
    }
    printf(PROG ": total %.1f images/s over %d rank%s; gradient averaging: %s\n", g->total,
           g->world, g->world == 1 ? "" : "s", res->allreduce);
}

static void print_json(const opts *o, const gathered *g, int device, const mt_result *res,
                       uint64_t n)
{
    bu_sbuf j = {0};
    bu_sb_printf(&j, "{\"program\": \"mpi_train\", \"path\": \"%s\", \"allreduce\": ",
                 device >= 0 ? "gpu" : "cpu");
    bu_sb_json_str(&j, res->allreduce);
    bu_sb_printf(&j, ", \"world\": %d, \"bench\": %s, \"epochs\": %u, \"measured\": ",
                 g->world, o->bench ? "true" : "false", g->E);
    bu_sb_json_str(&j, g->what);
    bu_sb_printf(&j, ", \"n\": %llu, \"batch\": %u, \"size\": %u, \"ranks\": [",
                 (unsigned long long)n, o->batch, o->size);
    for (int r = 0; r < g->world; r++) {
        const double *x = g->per + r * MT_FIELDS;
        bu_sb_printf(&j, "%s{\"rank\": %d, \"device\": %d, \"workers\": %d, "
                     "\"images_per_s\": %.1f, \"epoch_s\": %.4f, \"wait_s\": %.4f, "
                     "\"compute_s\": %.4f, \"allreduce_s\": %.4f}", r ? ", " : "", r,
                     g->allint[2 * r], g->allint[2 * r + 1], x[MT_IMAGES], x[MT_WALL],
                     x[MT_WAIT], x[MT_COMPUTE], x[MT_ALLREDUCE]);
    }
    bu_sb_printf(&j, "], \"total_images_per_s\": %.1f, \"weights_identical\": %s, "
                 "\"status\": %d}\n", g->total, res->weights_differ ? "false" : "true",
                 res->status);
    /* One write, so mpirun forwards the line whole. */
    fwrite(j.p, 1, j.len, stdout);
    free(j.p);
}

/* Rank 0 gathers every rank's epochs and prints the table (and the JSON line). */
static void report(const opts *o, const feeder_dist *d, int workers, int device,
                   const mt_epoch *ep, const mt_result *res, uint64_t n)
{
    gathered g = {.world = d->world_size, .E = o->epochs};
    const int ints[2] = {device, workers};
    if (mt_rank == 0) {
        g.all = malloc((size_t)g.world * g.E * sizeof(*g.all));
        g.allint = malloc((size_t)g.world * 2 * sizeof(int));
        if (!g.all || !g.allint)
            mt_die("out of memory");
    }
    MPI_Gather(ep, (int)(g.E * MT_FIELDS), MPI_DOUBLE, g.all, (int)(g.E * MT_FIELDS),
               MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(ints, 2, MPI_INT, g.allint, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (mt_rank != 0)
        return;
    figures(o, &g);
    print_table(&g, device, res);
    if (o->json)
        print_json(o, &g, device, res, n);
    fflush(stdout);
    free(g.per);
    free(g.all);
    free(g.allint);
}

/* feeder reads its place from the launcher's environment; it must agree
 * with what MPI says, or the shards would overlap or leave gaps. */
static void check_place(feeder_dist *d, int world)
{
    char err[512];
    int rc = feeder_dist_from_env(d, err, sizeof(err));
    if (rc)
        mt_die("%s", err);
    if (d->rank != mt_rank || d->world_size != world)
        mt_die("feeder_dist_from_env found rank %d of %d (from %s), MPI says %d of %d", d->rank,
               d->world_size, d->source, mt_rank, world);
}

/* The rank's loader over its shard, started; *device becomes -1 when feeder
 * cannot deliver device batches and auto falls back to the CPU path. */
static feeder_loader *start_loader(const opts *o, feeder_dataset *ds, feeder_sampler *s,
                                   int workers, int *device, const char **why)
{
    feeder_loader *ld;
    int rc;
    if ((rc = feeder_loader_create(ds, s, &ld)))
        mt_die("feeder_loader_create: %s", feeder_strerror(rc));
    struct {
        feeder_option opt;
        int64_t v;
    } set[] = {
        {FEEDER_OPT_BATCH_SIZE, o->batch},         {FEEDER_OPT_DROP_LAST, o->drop_last},
        {FEEDER_OPT_NUM_WORKERS, workers},         {FEEDER_OPT_SEED, (int64_t)o->seed},
        {FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN}, {FEEDER_OPT_HEIGHT, o->size},
        {FEEDER_OPT_WIDTH, o->size},               {FEEDER_OPT_PERSISTENT_WORKERS, 1},
        {FEEDER_OPT_TIMEOUT_MS, 300000},
    };
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
        if ((rc = feeder_loader_set(ld, set[i].opt, set[i].v)))
            mt_die("option %s = %lld: %s", feeder_option_name(set[i].opt), (long long)set[i].v,
                   feeder_loader_errmsg(ld));
    if (*device >= 0)
        mt_gpu_configure(ld, *device);
    if ((rc = feeder_loader_start(ld)))
        mt_die("feeder_loader_start: %s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    if (*device >= 0 && !feeder_loader_gpu_status(ld, why)) {
        /* feeder could not deliver device batches (it says why); its host
         * batches suit the CPU path, which auto falls back to. */
        if (o->device >= 0)
            mt_die("--device %d: feeder delivers host batches here: %s", o->device,
                   *why && **why ? *why : "no reason given");
        *device = -1;
    }
    return ld;
}

/* The paths run different collectives: every rank must take the same. */
static void agree_on_path(int gpu, const char *why)
{
    int all_gpu, any_gpu;
    MPI_Allreduce(&gpu, &all_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&gpu, &any_gpu, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all_gpu != any_gpu)
        mt_die("some ranks have a GPU and some do not (this one: %s%s%s); pass --device -1 to "
               "run all on the CPU", gpu ? "GPU" : "none", gpu ? "" : ", ", gpu ? "" : why);
}

/* --shards: each rank whole shards, samples from a window of them. */
static feeder_sampler *shard_sampler(const opts *o, const feeder_dist *d, feeder_dataset *ds)
{
    uint32_t ns = 0;
    feeder_dataset_shard_counts(ds, NULL, 0, &ns);
    uint64_t *counts = calloc(ns ? ns : 1, sizeof(*counts));
    feeder_sampler *s = NULL;
    int rc = counts ? feeder_dataset_shard_counts(ds, counts, ns, &ns) : -ENOMEM;
    if (!rc)
        rc = feeder_sampler_shards(counts, ns, (uint32_t)d->rank, (uint32_t)d->world_size,
                                   o->window, o->seed, o->drop_last, &s);
    free(counts);
    if (rc)
        mt_die("feeder_sampler_shards (%u shards, world %d): %s", ns, d->world_size,
               feeder_strerror(rc));
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world, rc;
    MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    opts o = parse_args(argc, argv);
    feeder_dist d = FEEDER_DIST_INIT;
    check_place(&d, world);
    char dir[4096];
    feeder_dataset *ds = open_data(&o, &d, dir, sizeof(dir));
    uint64_t n = feeder_dataset_size(ds);
    int classes = (int)feeder_dataset_num_classes(ds);
    /* This rank's shard: drop_last in the sampler cuts the dataset to a
     * multiple of the world size, and in the batch sampler drops the short
     * batch, so every rank takes the same number of equal steps. */
    feeder_sampler *s = o.shards ? shard_sampler(&o, &d, ds) : NULL;
    if (!s && (rc = feeder_sampler_distributed(n, (uint32_t)d.rank, (uint32_t)d.world_size,
                                               o.shuffle, o.seed, o.drop_last, &s)))
        mt_die("feeder_sampler_distributed: %s", feeder_strerror(rc));
    int workers = o.workers >= 0 ? o.workers : default_workers(&d);
    const char *why = NULL;
    int device = mt_gpu_pick(&o, &d, &why);
    feeder_loader *ld = start_loader(&o, ds, s, workers, &device, &why);
    int gpu = device >= 0;
    agree_on_path(gpu, why);
    uint64_t per = feeder_sampler_len(s, 0);
    printf("rank %d of %d (local %d of %d, from %s): %llu of %llu samples, %llu batches of %u, "
           "num_workers %d, ", d.rank, d.world_size, d.local_rank, d.local_size, d.source,
           (unsigned long long)per, (unsigned long long)n,
           (unsigned long long)feeder_batch_count(per, o.batch, o.drop_last), o.batch, workers);
    if (gpu)
        printf("GPU %d\n", device);
    else
        printf("CPU (%s)\n", why ? why : "");
    fflush(stdout);
    mt_epoch *ep = calloc(o.epochs, sizeof(*ep));
    mt_result res;
    memset(&res, 0, sizeof(res));
    if (!ep)
        mt_die("out of memory");
    if (gpu)
        mt_gpu_train(&o, &d, ld, device, classes, ep, &res);
    else
        cpu_train(&o, ld, classes, ep, &res);
    printf(PROG ": summary rank=%d world=%d n=%llu epochs=%u batches=%llu samples=%llu "
           "index_sum=0x%016llx weights=0x%016llx\n",
           mt_rank, world, (unsigned long long)n, o.epochs, (unsigned long long)res.batches,
           (unsigned long long)res.samples, (unsigned long long)res.index_sum,
           (unsigned long long)res.weights_hash);
    fflush(stdout);
    report(&o, &d, workers, device, ep, &res, n);
    if (mt_rank == 0)
        printf(PROG ": final weights %s on all %d ranks\n",
               res.weights_differ ? "DIFFER" : "identical", world);
    free(ep);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(s);
    feeder_dataset_destroy(ds);
    MPI_Finalize();
    return res.weights_differ ? 1 : res.status;
}
