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
#include <getopt.h>
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np N " PROG " [options]\n"
            "  --data DIR       image folder, one sub-folder per class (default: make --images\n"
            "                   JPEGs under /tmp/feeder-mpi-<images>, a class per photo)\n"
            "  --images N       size of the dataset made when --data is not given (420)\n"
            "  --cache DIR      where to make it instead (reused when it is already there)\n"
            "  --epochs N       epochs (3)\n"
            "  --batch N        samples per batch per rank (32)\n"
            "  --workers N      feeder workers per rank (default: the CPUs this rank may use,\n"
            "                   shared with the ranks of its machine when it is not bound)\n"
            "  --size N         loader output side, a multiple of 16 (224: RandomResizedCrop\n"
            "                   + flip, then pooled to 16 x 16 for the model)\n"
            "  --lr X           SGD learning rate (0.05)\n"
            "  --seed N         seed of the order, the crops and the initial weights (1)\n"
            "  --shuffle 0|1    shuffle every epoch (1)\n"
            "  --drop-last 0|1  drop the uneven tail, in the sampler and in the batches (1)\n"
            "  --device auto|N|-1  the GPU path on this rank's GPU (auto: the one its local\n"
            "                   rank picks, or the CPU path when it has none), on device N,\n"
            "                   or the CPU path (-1) (auto)\n"
            "  --allreduce auto|nccl|mpi-cuda|mpi-host  how the GPU path averages gradients\n"
            "                   (auto: NCCL if built with it, else MPI on device pointers\n"
            "                   if CUDA-aware, else staged through pinned host memory)\n"
            "  --bench          report the median of the epochs after the first; no\n"
            "                   learning check\n"
            "  --json           rank 0 also prints the report as one JSON line\n"
            "  --no-check       GPU path: skip comparing the first step with the CPU\n"
            "Exit status: 0 done, 1 error or the ranks' weights differ, 2 bad arguments,\n"
            "3 the GPU path's loss did not fall (not with --bench).\n");
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        if (mt_rank == 0)
            fprintf(stderr, PROG ": %s '%s': expected an integer in [%ld, %ld]\n", opt, s, lo,
                    hi);
        MPI_Finalize();
        exit(2);
    }
    return v;
}

static opts parse_args(int argc, char **argv)
{
    opts o = {.images = 420, .epochs = 3, .batch = 32, .workers = -1, .size = 224, .lr = 0.05,
              .seed = 1, .shuffle = 1, .drop_last = 1, .device = -2, .check = 1};
    static const struct option longs[] = {
        {"data", required_argument, 0, 'd'},    {"images", required_argument, 0, 'i'},
        {"epochs", required_argument, 0, 'e'},  {"batch", required_argument, 0, 'b'},
        {"workers", required_argument, 0, 'w'}, {"size", required_argument, 0, 's'},
        {"lr", required_argument, 0, 'l'},      {"seed", required_argument, 0, 'S'},
        {"shuffle", required_argument, 0, 'x'}, {"drop-last", required_argument, 0, 'D'},
        {"cache", required_argument, 0, 'c'},   {"help", no_argument, 0, 'h'},
        {"device", required_argument, 0, 'g'},  {"allreduce", required_argument, 0, 'a'},
        {"bench", no_argument, 0, 'B'},         {"json", no_argument, 0, 'j'},
        {"no-check", no_argument, 0, 'n'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 'd': o.data = optarg; break;
        case 'c': o.cache = optarg; break;
        case 'i': o.images = (unsigned)parse_num("--images", optarg, 10, 10000000); break;
        case 'e': o.epochs = (unsigned)parse_num("--epochs", optarg, 1, 100000); break;
        case 'b': o.batch = (uint32_t)parse_num("--batch", optarg, 1, 1 << 16); break;
        case 'w': o.workers = (int)parse_num("--workers", optarg, 0, 1024); break;
        case 's': o.size = (uint32_t)parse_num("--size", optarg, GRID, 4096); break;
        case 'S': o.seed = (uint64_t)parse_num("--seed", optarg, 0, 1L << 62); break;
        case 'x': o.shuffle = (int)parse_num("--shuffle", optarg, 0, 1); break;
        case 'D': o.drop_last = (int)parse_num("--drop-last", optarg, 0, 1); break;
        case 'g':
            o.device = strcmp(optarg, "auto") == 0 ? -2
                                                   : (int)parse_num("--device", optarg, -1, 1023);
            break;
        case 'a': {
            static const char *const names[] = {"auto", "nccl", "mpi-cuda", "mpi-host"};
            int k = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(optarg, names[i]) == 0)
                    k = i;
            if (k < 0) {
                if (mt_rank == 0)
                    fprintf(stderr, PROG ": --allreduce '%s': expected auto, nccl, mpi-cuda or "
                            "mpi-host\n", optarg);
                MPI_Finalize();
                exit(2);
            }
            o.allreduce = (mt_allreduce)k;
            break;
        }
        case 'B': o.bench = 1; break;
        case 'j': o.json = 1; break;
        case 'n': o.check = 0; break;
        case 'l': {
            char *end;
            o.lr = strtod(optarg, &end);
            if (*end || !(o.lr > 0) || !isfinite(o.lr)) {
                if (mt_rank == 0)
                    fprintf(stderr, PROG ": --lr '%s': expected a positive number\n", optarg);
                MPI_Finalize();
                exit(2);
            }
            break;
        }
        case 'h':
            if (mt_rank == 0)
                usage(stdout);
            MPI_Finalize();
            exit(0);
        default:
            if (mt_rank == 0)
                usage(stderr);
            MPI_Finalize();
            exit(2);
        }
    }
    if (optind != argc || o.size % GRID) {
        if (mt_rank == 0)
            fprintf(stderr, PROG ": %s\n",
                    optind != argc ? "unexpected argument" : "--size must be a multiple of 16");
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
    char stamp[4200], want[128];
    snprintf(stamp, sizeof(stamp), "%s/.complete", dir);
    snprintf(want, sizeof(want), "mpi_train images=%u seed=%llu v1\n", images,
             (unsigned long long)seed);
    uint8_t *have;
    size_t hl;
    if (bu_read_file(stamp, &have, &hl) == 0) {
        int same = hl == strlen(want) && memcmp(have, want, hl) == 0;
        free(have);
        if (same) {
            bu_photos_free(photos);
            return 0;
        }
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
    return rc ? rc : bu_write_file(stamp, want, strlen(want));
}

static feeder_dataset *open_data(const opts *o, const feeder_dist *d, char *dir, size_t dirlen)
{
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
static void report(const opts *o, const feeder_dist *d, int workers, int device,
                   const mt_epoch *ep, const mt_result *res, uint64_t n)
{
    const int world = d->world_size;
    const unsigned E = o->epochs;
    const int ints[2] = {device, workers};
    mt_epoch *all = mt_rank == 0 ? malloc((size_t)world * E * sizeof(*all)) : NULL;
    int *allint = mt_rank == 0 ? malloc((size_t)world * 2 * sizeof(int)) : NULL;
    if (mt_rank == 0 && (!all || !allint))
        mt_die("out of memory");
    MPI_Gather(ep, (int)(E * MT_FIELDS), MPI_DOUBLE, all, (int)(E * MT_FIELDS), MPI_DOUBLE, 0,
               MPI_COMM_WORLD);
    MPI_Gather(ints, 2, MPI_INT, allint, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (mt_rank != 0)
        return;

    const unsigned e0 = o->bench && E >= 2 ? 1 : 0, ne = E - e0;
    double *v = malloc(ne * sizeof(*v)), *per = malloc((size_t)world * MT_FIELDS * sizeof(*per));
    if (!v || !per)
        mt_die("out of memory");
    /* per[r][f]: rank r's images/s (MT_IMAGES) and its seconds per epoch in
     * each part (the rest). */
    for (int r = 0; r < world; r++) {
        const mt_epoch *er = all + (size_t)r * E;
        for (int f = 0; f < MT_FIELDS; f++) {
            double sum = 0;
            for (unsigned k = 0; k < ne; k++) {
                const double *x = er[e0 + k].v;
                v[k] = f == MT_IMAGES ? (x[MT_WALL] > 0 ? x[MT_IMAGES] / x[MT_WALL] : 0) : x[f];
                sum += f == MT_IMAGES ? x[MT_IMAGES] : x[f];
            }
            if (o->bench)
                per[r * MT_FIELDS + f] = bu_median(v, ne);
            else if (f == MT_IMAGES) {
                double wall = 0;
                for (unsigned k = 0; k < ne; k++)
                    wall += er[e0 + k].v[MT_WALL];
                per[r * MT_FIELDS + f] = wall > 0 ? sum / wall : 0;
            } else
                per[r * MT_FIELDS + f] = sum / ne;
        }
    }
    /* The job: every epoch's images over its slowest rank's time. */
    double images_all = 0, wall_all = 0;
    for (unsigned k = 0; k < ne; k++) {
        double img = 0, slowest = 0;
        for (int r = 0; r < world; r++) {
            const double *x = all[(size_t)r * E + e0 + k].v;
            img += x[MT_IMAGES];
            slowest = x[MT_WALL] > slowest ? x[MT_WALL] : slowest;
        }
        v[k] = slowest > 0 ? img / slowest : 0;
        images_all += img;
        wall_all += slowest;
    }
    const double total = o->bench ? bu_median(v, ne) : wall_all > 0 ? images_all / wall_all : 0;
    char what[96];
    if (o->bench && ne < E)
        snprintf(what, sizeof(what), "median of epochs %u..%u", e0, E - 1);
    else if (o->bench)
        snprintf(what, sizeof(what), "the only epoch");
    else
        snprintf(what, sizeof(what), "all %u epochs", E);

    printf(PROG ": report, %s path, %d rank%s, %s; seconds per epoch:\n",
           device >= 0 ? "GPU" : "CPU", world, world == 1 ? "" : "s", what);
    printf("| rank | device | workers | images/s | epoch s | load wait s | compute s | "
           "allreduce s |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int r = 0; r < world; r++) {
        const double *x = per + r * MT_FIELDS;
        char dev[32];
        if (allint[2 * r] >= 0)
            snprintf(dev, sizeof(dev), "GPU %d", allint[2 * r]);
        else
            snprintf(dev, sizeof(dev), "CPU");
        printf("| %d | %s | %d | %.1f | %.3f | %.3f (%.0f%%) | %.3f (%.0f%%) | %.3f (%.0f%%) |\n",
               r, dev, allint[2 * r + 1], x[MT_IMAGES], x[MT_WALL], x[MT_WAIT],
               x[MT_WALL] > 0 ? 100 * x[MT_WAIT] / x[MT_WALL] : 0, x[MT_COMPUTE],
               x[MT_WALL] > 0 ? 100 * x[MT_COMPUTE] / x[MT_WALL] : 0, x[MT_ALLREDUCE],
               x[MT_WALL] > 0 ? 100 * x[MT_ALLREDUCE] / x[MT_WALL] : 0);
    }
    printf(PROG ": total %.1f images/s over %d rank%s; gradient averaging: %s\n", total, world,
           world == 1 ? "" : "s", res->allreduce);
    if (o->json) {
        bu_sbuf j = {0};
        bu_sb_printf(&j, "{\"program\": \"mpi_train\", \"path\": \"%s\", \"allreduce\": ",
                     device >= 0 ? "gpu" : "cpu");
        bu_sb_json_str(&j, res->allreduce);
        bu_sb_printf(&j, ", \"world\": %d, \"bench\": %s, \"epochs\": %u, \"measured\": ", world,
                     o->bench ? "true" : "false", E);
        bu_sb_json_str(&j, what);
        bu_sb_printf(&j, ", \"n\": %llu, \"batch\": %u, \"size\": %u, \"ranks\": [",
                     (unsigned long long)n, o->batch, o->size);
        for (int r = 0; r < world; r++) {
            const double *x = per + r * MT_FIELDS;
            bu_sb_printf(&j, "%s{\"rank\": %d, \"device\": %d, \"workers\": %d, "
                         "\"images_per_s\": %.1f, \"epoch_s\": %.4f, \"wait_s\": %.4f, "
                         "\"compute_s\": %.4f, \"allreduce_s\": %.4f}", r ? ", " : "", r,
                         allint[2 * r], allint[2 * r + 1], x[MT_IMAGES], x[MT_WALL], x[MT_WAIT],
                         x[MT_COMPUTE], x[MT_ALLREDUCE]);
        }
        bu_sb_printf(&j, "], \"total_images_per_s\": %.1f, \"weights_identical\": %s, "
                     "\"status\": %d}\n", total, res->weights_differ ? "false" : "true",
                     res->status);
        /* One write, so mpirun forwards the line whole. */
        fwrite(j.p, 1, j.len, stdout);
        free(j.p);
    }
    fflush(stdout);
    free(v);
    free(per);
    free(all);
    free(allint);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    opts o = parse_args(argc, argv);

    /* feeder reads its place from the launcher's environment; it must agree
     * with what MPI says, or the shards would overlap or leave gaps. */
    char err[512];
    feeder_dist d = FEEDER_DIST_INIT;
    int rc = feeder_dist_from_env(&d, err, sizeof(err));
    if (rc)
        mt_die("%s", err);
    if (d.rank != mt_rank || d.world_size != world)
        mt_die("feeder_dist_from_env found rank %d of %d (from %s), MPI says %d of %d", d.rank,
            d.world_size, d.source, mt_rank, world);

    char dir[4096];
    feeder_dataset *ds = open_data(&o, &d, dir, sizeof(dir));
    uint64_t n = feeder_dataset_size(ds);
    int classes = (int)feeder_dataset_num_classes(ds);

    /* This rank's shard: drop_last in the sampler cuts the dataset to a
     * multiple of the world size, and in the batch sampler drops the short
     * batch, so every rank takes the same number of equal steps. */
    feeder_sampler *s;
    if ((rc = feeder_sampler_distributed(n, (uint32_t)d.rank, (uint32_t)d.world_size, o.shuffle,
                                         o.seed, o.drop_last, &s)))
        mt_die("feeder_sampler_distributed: %s", feeder_strerror(rc));
    int workers = o.workers >= 0 ? o.workers : default_workers(&d);
    const char *why = NULL;
    int device = mt_gpu_pick(&o, &d, &why);
    feeder_loader *ld;
    if ((rc = feeder_loader_create(ds, s, &ld)))
        mt_die("feeder_loader_create: %s", feeder_strerror(rc));
    struct {
        feeder_option opt;
        int64_t v;
    } set[] = {
        {FEEDER_OPT_BATCH_SIZE, o.batch},         {FEEDER_OPT_DROP_LAST, o.drop_last},
        {FEEDER_OPT_NUM_WORKERS, workers},        {FEEDER_OPT_SEED, (int64_t)o.seed},
        {FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_TRAIN}, {FEEDER_OPT_HEIGHT, o.size},
        {FEEDER_OPT_WIDTH, o.size},               {FEEDER_OPT_PERSISTENT_WORKERS, 1},
        {FEEDER_OPT_TIMEOUT_MS, 300000},
    };
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
        if ((rc = feeder_loader_set(ld, set[i].opt, set[i].v)))
            mt_die("option %s = %lld: %s", feeder_option_name(set[i].opt), (long long)set[i].v,
                feeder_loader_errmsg(ld));
    if (device >= 0)
        mt_gpu_configure(ld, device);
    if ((rc = feeder_loader_start(ld)))
        mt_die("feeder_loader_start: %s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));
    if (device >= 0 && !feeder_loader_gpu_status(ld, &why)) {
        /* feeder could not deliver device batches (it says why); its host
         * batches suit the CPU path, which auto falls back to. */
        if (o.device >= 0)
            mt_die("--device %d: feeder delivers host batches here: %s", o.device,
                why && *why ? why : "no reason given");
        device = -1;
    }
    /* The paths run different collectives: every rank must take the same. */
    int gpu = device >= 0, all_gpu, any_gpu;
    MPI_Allreduce(&gpu, &all_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&gpu, &any_gpu, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all_gpu != any_gpu)
        mt_die("some ranks have a GPU and some do not (this one: %s%s%s); pass --device -1 to "
            "run all on the CPU", gpu ? "GPU" : "none", gpu ? "" : ", ", gpu ? "" : why);

    uint64_t per = feeder_sampler_len(s, 0);
    printf("rank %d of %d (local %d of %d, from %s): %llu of %llu samples, %llu batches of %u, "
           "num_workers %d, ",
           d.rank, d.world_size, d.local_rank, d.local_size, d.source, (unsigned long long)per,
           (unsigned long long)n,
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
