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
 * The GPU path: feeder_dist_cuda_device(&d) (feeder_cuda.h) picks this rank's
 * GPU for FEEDER_OPT_DEVICE; this example stays on the CPU so it runs
 * anywhere MPI does.
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

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif

#define PROG "mpi_train"
#define GRID 16                      /* the model sees GRID x GRID x 3 */
#define FEATURES (GRID * GRID * 3)

typedef struct opts {
    const char *data;
    const char *cache;
    unsigned images;
    unsigned epochs;
    uint32_t batch;
    int workers; /* -1: from the CPUs this rank may use */
    uint32_t size;
    double lr;
    uint64_t seed;
    int shuffle;
    int drop_last;
} opts;

static int rank_ = 0;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Any rank that fails takes the job down: the others would wait forever at
 * their next collective. */
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG " rank %d: ", rank_);
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
            "  --drop-last 0|1  drop the uneven tail, in the sampler and in the batches (1)\n");
}

static long parse_num(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        if (rank_ == 0)
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
              .seed = 1, .shuffle = 1, .drop_last = 1};
    static const struct option longs[] = {
        {"data", required_argument, 0, 'd'},    {"images", required_argument, 0, 'i'},
        {"epochs", required_argument, 0, 'e'},  {"batch", required_argument, 0, 'b'},
        {"workers", required_argument, 0, 'w'}, {"size", required_argument, 0, 's'},
        {"lr", required_argument, 0, 'l'},      {"seed", required_argument, 0, 'S'},
        {"shuffle", required_argument, 0, 'x'}, {"drop-last", required_argument, 0, 'D'},
        {"cache", required_argument, 0, 'c'},   {"help", no_argument, 0, 'h'},
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
        case 'l': {
            char *end;
            o.lr = strtod(optarg, &end);
            if (*end || !(o.lr > 0) || !isfinite(o.lr)) {
                if (rank_ == 0)
                    fprintf(stderr, PROG ": --lr '%s': expected a positive number\n", optarg);
                MPI_Finalize();
                exit(2);
            }
            break;
        }
        case 'h':
            if (rank_ == 0)
                usage(stdout);
            MPI_Finalize();
            exit(0);
        default:
            if (rank_ == 0)
                usage(stderr);
            MPI_Finalize();
            exit(2);
        }
    }
    if (optind != argc || o.size % GRID) {
        if (rank_ == 0)
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

static double now_s(void) { return (double)bu_now_ns() * 1e-9; }

static uint64_t mix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

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
        die("out of memory");
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
        die("loading the seed photos: %s (set FEEDER_BENCH_PHOTOS, or pass --data)", err);
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
            die("making the dataset in %s: %s", dir, strerror(-rc));
        if (any)
            die("another rank failed to make the dataset");
    }
    char err[1024] = "";
    feeder_dataset *ds;
    int rc = feeder_dataset_open_folder(dir, &ds, err, sizeof(err));
    if (rc)
        die("%s: %s", feeder_strerror(rc), err);
    return ds;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    opts o = parse_args(argc, argv);

    /* feeder reads its place from the launcher's environment; it must agree
     * with what MPI says, or the shards would overlap or leave gaps. */
    char err[512];
    feeder_dist d = FEEDER_DIST_INIT;
    int rc = feeder_dist_from_env(&d, err, sizeof(err));
    if (rc)
        die("%s", err);
    if (d.rank != rank_ || d.world_size != world)
        die("feeder_dist_from_env found rank %d of %d (from %s), MPI says %d of %d", d.rank,
            d.world_size, d.source, rank_, world);

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
        die("feeder_sampler_distributed: %s", feeder_strerror(rc));
    int workers = o.workers >= 0 ? o.workers : default_workers(&d);
    feeder_loader *ld;
    if ((rc = feeder_loader_create(ds, s, &ld)))
        die("feeder_loader_create: %s", feeder_strerror(rc));
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
            die("option %s = %lld: %s", feeder_option_name(set[i].opt), (long long)set[i].v,
                feeder_loader_errmsg(ld));
    if ((rc = feeder_loader_start(ld)))
        die("feeder_loader_start: %s: %s", feeder_strerror(rc), feeder_loader_errmsg(ld));

    uint64_t per = feeder_sampler_len(s, 0);
    printf("rank %d of %d (local %d of %d, from %s): %llu of %llu samples, %llu batches of %u, "
           "num_workers %d, %s\n",
           d.rank, d.world_size, d.local_rank, d.local_size, d.source, (unsigned long long)per,
           (unsigned long long)n,
           (unsigned long long)feeder_batch_count(per, o.batch, o.drop_last), o.batch, workers,
           feeder_dist_device(&d, 0) < 0 ? "CPU" : "GPU");
    fflush(stdout);

    /* The same initial weights everywhere, from the seed alone. */
    const size_t row = FEATURES + 1, nw = (size_t)classes * row;
    double *w = calloc(nw, sizeof(*w)), *g = malloc((nw + 3) * sizeof(*g));
    float *x = malloc((size_t)o.batch * FEATURES * sizeof(*x));
    if (!w || !g || !x)
        die("out of memory");
    for (size_t i = 0; i < nw; i++)
        w[i] = 0.01 * (feeder_random_uniform(o.seed, 0, i, 0) - 0.5);

    uint64_t batches = 0, samples = 0, index_sum = 0;
    double *rates = malloc((size_t)world * sizeof(*rates));
    if (!rates)
        die("out of memory");
    for (unsigned e = 0; e < o.epochs; e++) {
        double t0 = now_s(), loss = 0;
        uint64_t seen = 0, correct = 0, mine = 0;
        feeder_batch *b;
        while ((rc = feeder_next(ld, &b)) == 0) {
            for (uint32_t i = 0; i < b->count; i++)
                index_sum += mix64(b->indices[i]);
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
            MPI_Allreduce(MPI_IN_PLACE, g, (int)(nw + 3), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            double total = g[nw];
            for (size_t i = 0; i < nw; i++)
                w[i] -= o.lr * g[i] / total;
            loss += g[nw + 1];
            correct += (uint64_t)g[nw + 2];
            seen += (uint64_t)total;
            mine += count;
            batches++;
        }
        if (rc != FEEDER_DONE)
            die("epoch %u: %s: %s", e, feeder_strerror(rc), feeder_loader_errmsg(ld));
        double dt = now_s() - t0;
        samples += mine;
        double rate = dt > 0 ? (double)mine / dt : 0;
        MPI_Gather(&rate, 1, MPI_DOUBLE, rates, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double slowest;
        MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank_ == 0) {
            printf("epoch %u: loss %.4f accuracy %.3f | images/s per rank:", e,
                   seen ? loss / (double)seen : 0, seen ? (double)correct / (double)seen : 0);
            for (int r = 0; r < world; r++)
                printf(" %.1f", rates[r]);
            printf(" | total %.1f\n", slowest > 0 ? (double)seen / slowest : 0);
            fflush(stdout);
        }
    }

    /* Identical weights: every rank compares its own with rank 0's, bit for
     * bit, and the job fails if any differs. */
    double *w0 = malloc(nw * sizeof(*w0));
    if (!w0)
        die("out of memory");
    if (rank_ == 0)
        memcpy(w0, w, nw * sizeof(*w));
    MPI_Bcast(w0, (int)nw, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int differs = memcmp(w0, w, nw * sizeof(*w)) != 0, any_differs;
    MPI_Allreduce(&differs, &any_differs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

    printf(PROG ": summary rank=%d world=%d n=%llu epochs=%u batches=%llu samples=%llu "
           "index_sum=0x%016llx weights=0x%016llx\n",
           rank_, world, (unsigned long long)n, o.epochs, (unsigned long long)batches,
           (unsigned long long)samples, (unsigned long long)index_sum,
           (unsigned long long)bu_hash64(0, w, nw * sizeof(*w)));
    fflush(stdout);
    if (rank_ == 0)
        printf(PROG ": final weights %s on all %d ranks\n", any_differs ? "DIFFER" : "identical",
               world);

    free(w0);
    free(rates);
    free(x);
    free(g);
    free(w);
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(s);
    feeder_dataset_destroy(ds);
    MPI_Finalize();
    return any_differs ? 1 : 0;
}
