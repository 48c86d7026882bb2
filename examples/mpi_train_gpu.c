/*
 * The GPU path of examples/mpi_train.c: each rank takes device batches from
 * its own loader on its own GPU (float32, NCHW, normalised on the GPU),
 * computes the gradient of train_loop's model (train_model.h) on that GPU,
 * averages it across the job and takes the same SGD step, so every rank ends
 * with the same weights, bit for bit (checked: a hash of the weights, MAX and
 * MIN over the ranks).
 *
 * The model: the image (--size, 224 by default) average-pooled to 16 x 16 x 3,
 * standardised per image, and a linear softmax classifier; the CPU path's
 * model without the per-image standardisation, which train_loop's kernels do.
 *
 * Averaging the gradient (K x 768 + K floats), in order of preference:
 *  - NCCL (when CMake found it): ncclAllReduce on the device buffer, on the
 *    step's stream; the communicator is made from a unique id that rank 0
 *    broadcasts over MPI;
 *  - MPI_Allreduce on the device pointer, when Open MPI says at run time
 *    that it is CUDA-aware (MPIX_Query_cuda_support);
 *  - else staged: D2H into a pinned host buffer, MPI_Allreduce there, H2D.
 * --allreduce picks one; auto takes the first that this build and this MPI
 * allow (not NCCL where ranks share a GPU: it takes one rank per GPU), the
 * same on every rank (the most conservative rank's choice).
 *
 * Each step synchronises the stream after the backward pass, so the time
 * split (load wait / compute / allreduce) is measured rather than guessed
 * ("compute" runs from feeder_next's return to the gradient being ready, so
 * it includes any part of the batch's host-to-device copy still in flight); a
 * real trainer overlaps the averaging with the backward pass instead. At this
 * model's size a step is tens of microseconds of GPU time, far below what the
 * loader needs per batch, so the sync costs nothing that matters here.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif
#endif
#ifdef MT_HAVE_NCCL
#include <nccl.h>
#endif

#include "benchutil.h"
#include "feeder_cuda.h"
#include "mpi_train.h"
#include "train_model.h"

#define CK(call) ck((call), #call, __LINE__)
static void ck(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess)
        mt_die("mpi_train_gpu.c:%d: %s failed: %s (%s)", line, what, cudaGetErrorString(e),
               cudaGetErrorName(e));
}

#define FK(ld, call) fk((ld), (call), #call, __LINE__)
static void fk(const feeder_loader *ld, int rc, const char *what, int line)
{
    if (rc < 0)
        mt_die("mpi_train_gpu.c:%d: %s failed: %s (%s): %s", line, what, feeder_strerror(rc),
               feeder_err_name(rc), feeder_loader_errmsg(ld));
}

int mt_gpu_pick(const mt_opts *o, const feeder_dist *d, const char **why)
{
    if (o->device == -1) {
        *why = "--device -1";
        return -1;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        n = 0;
    if (o->device == -2) {
        int dev = feeder_dist_cuda_device(d);
        if (dev < 0)
            *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
        return dev;
    }
    if (o->device >= n)
        mt_die("--device %d: this machine has %d CUDA device%s%s%s", o->device, n,
               n == 1 ? "" : "s", e != cudaSuccess ? ": " : "",
               e != cudaSuccess ? cudaGetErrorString(e) : "");
    return o->device;
}

void mt_gpu_configure(feeder_loader *ld, int device)
{
    /* The rank's stream, model and averaging live on this device. */
    CK(cudaSetDevice(device));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DEVICE, device));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_DTYPE, FEEDER_DTYPE_FLOAT32));
    FK(ld, feeder_loader_set(ld, FEEDER_OPT_LAYOUT, FEEDER_LAYOUT_NCHW));
}

/* ------------------------------------------------------------------------ */
/* Gradient averaging                                                        */
/* ------------------------------------------------------------------------ */

typedef struct averager {
    mt_allreduce kind;
    float *dev;   /* the gradient, on the device */
    size_t count; /* floats */
    float *host;  /* MT_AR_MPI_HOST: pinned staging buffer */
#ifdef MT_HAVE_NCCL
    ncclComm_t comm;
#endif
    char name[160];
} averager;

/* Whether this MPI takes device pointers, asked at run time: Open MPI's
 * compile-time MPIX_CUDA_AWARE_SUPPORT says only what it was built with. */
static int mpi_cuda_aware(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    return MPIX_Query_cuda_support() == 1;
#else
    return 0;
#endif
}

#ifdef MT_HAVE_NCCL
#define NK(call) nk((call), #call, __LINE__)
static void nk(ncclResult_t r, const char *what, int line)
{
    if (r != ncclSuccess)
        mt_die("mpi_train_gpu.c:%d: %s failed: %s%s", line, what, ncclGetErrorString(r),
               " (try --allreduce mpi-host)");
}
#endif

/* Whether another rank on this machine uses the same GPU (NCCL refuses a
 * communicator with two ranks on one device). */
static int gpu_shared(int device)
{
    MPI_Comm node;
    int n, dup = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &n);
    int *devs = malloc((size_t)n * sizeof(*devs));
    if (!devs)
        mt_die("out of memory");
    MPI_Allgather(&device, 1, MPI_INT, devs, 1, MPI_INT, node);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            dup |= devs[i] == devs[j];
    free(devs);
    MPI_Comm_free(&node);
    return dup;
}

static void averager_init(averager *a, mt_allreduce want, const feeder_dist *d, int device,
                          float *dev, size_t count)
{
    memset(a, 0, sizeof(*a));
    a->dev = dev;
    a->count = count;
    if (count > (size_t)0x7fffffff)
        mt_die("a gradient of %zu floats is too large for one MPI_Allreduce", count);
    int cuda_aware = mpi_cuda_aware();
    int kind = want;
    const int shared = gpu_shared(device);
    if (want == MT_AR_AUTO) {
#ifdef MT_HAVE_NCCL
        kind = shared ? (cuda_aware ? MT_AR_MPI_CUDA : MT_AR_MPI_HOST) : MT_AR_NCCL;
#else
        kind = cuda_aware ? MT_AR_MPI_CUDA : MT_AR_MPI_HOST;
#endif
    }
    if (kind == MT_AR_NCCL && shared)
        mt_die("--allreduce nccl: ranks of this machine share GPU %d, and NCCL takes one rank "
               "per GPU (use mpi-host, or as many ranks as GPUs)", device);
#ifndef MT_HAVE_NCCL
    if (kind == MT_AR_NCCL)
        mt_die("--allreduce nccl: this mpi_train was built without NCCL (CMake found no "
               "nccl.h and libnccl)");
#endif
    if (kind == MT_AR_MPI_CUDA && !cuda_aware)
        mt_die("--allreduce mpi-cuda: this MPI does not take device pointers "
               "(MPIX_Query_cuda_support() is 0%s)",
#if defined(MPIX_CUDA_AWARE_SUPPORT)
               ""
#else
               "; mpi-ext.h has no CUDA extension"
#endif
        );
    /* Every rank must run the same collective: take the most conservative
     * choice of any rank (the enum grows from NCCL to staged). */
    int agreed;
    MPI_Allreduce(&kind, &agreed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    a->kind = (mt_allreduce)agreed;
    switch (a->kind) {
#ifdef MT_HAVE_NCCL
    case MT_AR_NCCL: {
        ncclUniqueId id;
        if (d->rank == 0)
            NK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NK(ncclCommInitRank(&a->comm, d->world_size, id, d->rank));
        int v = 0;
        ncclGetVersion(&v);
        snprintf(a->name, sizeof(a->name), "NCCL %d.%d.%d ncclAllReduce on the device buffer",
                 v / 10000, v / 100 % 100, v % 100);
        break;
    }
#endif
    case MT_AR_MPI_CUDA:
        snprintf(a->name, sizeof(a->name), "MPI_Allreduce on device pointers (CUDA-aware MPI)");
        break;
    default:
        a->kind = MT_AR_MPI_HOST;
        CK(cudaMallocHost((void **)&a->host, count * sizeof(float)));
        snprintf(a->name, sizeof(a->name),
                 "MPI_Allreduce staged through pinned host memory (MPI %s CUDA-aware)",
                 cuda_aware ? "is" : "not");
        break;
    }
}

/* Sum the gradient over the job, in place; returns with the sum on the
 * device and, for every path, the stream idle. */
static void averager_run(averager *a, cudaStream_t s)
{
    switch (a->kind) {
#ifdef MT_HAVE_NCCL
    case MT_AR_NCCL:
        NK(ncclAllReduce(a->dev, a->dev, a->count, ncclFloat, ncclSum, a->comm, s));
        CK(cudaStreamSynchronize(s));
        break;
#endif
    case MT_AR_MPI_CUDA:
        /* MPI knows nothing of streams: the gradient must be complete. */
        CK(cudaStreamSynchronize(s));
        MPI_Allreduce(MPI_IN_PLACE, a->dev, (int)a->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    default:
        CK(cudaMemcpyAsync(a->host, a->dev, a->count * sizeof(float), cudaMemcpyDeviceToHost,
                           s));
        /* A D2H copy is read only after a synchronisation. */
        CK(cudaStreamSynchronize(s));
        MPI_Allreduce(MPI_IN_PLACE, a->host, (int)a->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        CK(cudaMemcpyAsync(a->dev, a->host, a->count * sizeof(float), cudaMemcpyHostToDevice,
                           s));
        /* The next write of `host` is the next step's D2H copy, which the
         * stream orders after this one: the pinned buffer is never written
         * while this copy reads it. Synchronised so the time counts here. */
        CK(cudaStreamSynchronize(s));
        break;
    }
}

static void averager_free(averager *a)
{
#ifdef MT_HAVE_NCCL
    if (a->kind == MT_AR_NCCL && a->comm)
        ncclCommDestroy(a->comm);
#endif
    if (a->host)
        CK(cudaFreeHost(a->host));
}

/* ------------------------------------------------------------------------ */

/* What the GPU path's steps share. */
typedef struct gpu_train {
    const mt_opts *o;
    feeder_loader *ld;
    int device, S, pool, F, K;
    size_t nw;              /* weights: K x F */
    float lr;
    cudaStream_t stream;
    tm_model m;
    averager ar;
    tk_totals *host_totals; /* pinned: the per-epoch read-back is a true async copy */
} gpu_train;

static void check_batch(const gpu_train *g, const feeder_batch *b)
{
    const mt_opts *o = g->o;
    if (!b->device_data || b->dtype != FEEDER_DTYPE_FLOAT32 || b->device != g->device ||
        b->channels != 3 || b->height != o->size || b->width != o->size ||
        b->layout != FEEDER_LAYOUT_NCHW || b->count == 0 || b->count > o->batch ||
        b->device_bytes != (size_t)b->count * 3 * g->S * g->S * sizeof(float))
        mt_die("batch %llu is not what was asked for: device_data %p, dtype %d, device "
               "%d, %u x %u x %u x %u, layout %d, %zu bytes",
               (unsigned long long)b->number, b->device_data, b->dtype, b->device,
               b->count, b->height, b->width, b->channels, b->layout, b->device_bytes);
}

/* The first step's comparison with the CPU, after its backward pass. */
static void check_first_step(gpu_train *g, tm_check *chk)
{
    char report[512];
    CK(tm_check_end(chk, &g->m, g->stream));
    int bad = tm_check_compare(chk, &g->m, g->S, g->S, 1, g->pool, report, sizeof(report));
    printf("%s\n", report);
    fflush(stdout);
    if (bad)
        mt_die("%s", bad == -1 ? "the GPU's first step differs from the CPU's" : report);
    CK(tm_check_free(chk));
}

/* One step on batch b; adds its compute and averaging seconds to t[0], t[1]
 * (tc: when feeder_next returned). */
static void step(gpu_train *g, feeder_batch *b, int check, double tc, double *t)
{
    const int n = (int)b->count;
    tm_check chk;
    /* The stream waits for the batch's copy; the host does not. */
    CK(feeder_batch_wait(b, g->stream));
    CK(tm_forward(&g->m, (const float *)b->device_data, b->device_labels, n, g->S, g->S, 1,
                  g->pool, g->stream));
    if (check)
        CK(tm_check_begin(&chk, &g->m, b, g->stream));
    /* Nothing after this reads the batch: feeder refills its buffer once the
     * stream has passed this point. */
    FK(g->ld, feeder_batch_release(b, g->stream));
    CK(tm_backward(&g->m, n, g->stream));
    if (check)
        check_first_step(g, &chk);
    CK(cudaStreamSynchronize(g->stream));
    double ta = mt_now_s();
    averager_run(&g->ar, g->stream);
    double tb = mt_now_s();
    CK(tk_sgd(g->m.W, g->m.vW, g->m.gW, g->nw, g->lr, 0, g->stream));
    CK(tk_sgd(g->m.b, g->m.vb, g->m.gb, (size_t)g->K, g->lr, 0, g->stream));
    t[0] += (ta - tc) + (mt_now_s() - tb);
    t[1] += tb - ta;
}

/* The epoch's totals, read only after the stream has finished; checked
 * against what feeder delivered. */
static tk_totals epoch_totals(gpu_train *g, unsigned e, uint64_t mine)
{
    CK(cudaMemcpyAsync(g->host_totals, g->m.totals, sizeof(*g->host_totals),
                       cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    const tk_totals t = *g->host_totals;
    CK(cudaMemsetAsync(g->m.totals, 0, sizeof(tk_totals), g->stream));
    if (t.bad_labels)
        mt_die("epoch %u: %llu labels outside [0, %d)", e, (unsigned long long)t.bad_labels,
               g->K);
    if (t.samples != mine)
        mt_die("epoch %u: the GPU counted %llu samples, feeder delivered %llu", e,
               (unsigned long long)t.samples, (unsigned long long)mine);
    return t;
}

/* Epoch e; the job's mean loss. */
static double epoch(gpu_train *g, unsigned e, mt_epoch *ep, mt_result *res)
{
    double t0 = mt_now_s(), wait = 0, t[2] = {0, 0};
    uint64_t mine = 0, steps = 0;
    feeder_batch *b;
    int rc;
    for (;;) {
        double tw = mt_now_s();
        rc = feeder_next(g->ld, &b);
        double tc = mt_now_s();
        wait += tc - tw;
        if (rc != 0)
            break;
        check_batch(g, b);
        for (uint32_t i = 0; i < b->count; i++)
            res->index_sum += mt_mix64(b->indices[i]);
        mine += b->count;
        step(g, b, g->o->check && mt_rank == 0 && e == 0 && steps == 0, tc, t);
        steps++;
    }
    if (rc != FEEDER_DONE)
        mt_die("epoch %u: %s: %s", e, feeder_strerror(rc), feeder_loader_errmsg(g->ld));
    const tk_totals tt = epoch_totals(g, e, mine);
    double dt = mt_now_s() - t0;
    ep[e] = (mt_epoch){{dt, wait, t[0], t[1], (double)mine}};
    res->batches += steps;
    res->samples += mine;
    /* The job's loss and hits, on every rank, so all agree on the exit status. */
    double job[3] = {tt.loss_sum, (double)tt.correct, (double)tt.samples};
    MPI_Allreduce(MPI_IN_PLACE, job, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    mt_epoch_line(e, job[0], (uint64_t)job[2], (uint64_t)job[1], dt, mine);
    const double loss = job[2] > 0 ? job[0] / job[2] : NAN;
    if (!isfinite(loss))
        mt_die("epoch %u: the loss is %g; try a smaller --lr", e, loss);
    return loss;
}

/* Identical weights: a hash of this rank's, compared over the job. */
static void compare_weights(gpu_train *g, mt_result *res)
{
    const size_t nw = g->nw, K = (size_t)g->K;
    float *hw = malloc((nw + K) * sizeof(float));
    if (!hw)
        mt_die("out of memory");
    CK(cudaMemcpyAsync(hw, g->m.W, nw * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaMemcpyAsync(hw + nw, g->m.b, K * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CK(cudaStreamSynchronize(g->stream));
    uint64_t h = bu_hash64(0, hw, (nw + K) * sizeof(float)), hmax, hmin;
    free(hw);
    MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    res->weights_hash = h;
    res->weights_differ = hmax != hmin;
}

void mt_gpu_train(const mt_opts *o, const feeder_dist *d, feeder_loader *ld, int device,
                  int classes, mt_epoch *ep, mt_result *res)
{
    gpu_train g = {.o = o, .ld = ld, .device = device, .S = (int)o->size,
                   .pool = (int)o->size / MT_GRID, .F = 3 * MT_GRID * MT_GRID, .K = classes};
    g.nw = (size_t)g.K * g.F;
    /* The gradient is the mean over each rank's batch; the ranks' batches
     * are the same size at every step (the distributed sampler gives every
     * rank the same samples count), so the mean over the job is the sum over
     * the ranks divided by the world size. */
    g.lr = (float)(o->lr / d->world_size);
    CK(cudaSetDevice(device));
    CK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    CK(tm_model_init(&g.m, g.F, g.K, o->batch, o->seed, g.stream));
    averager_init(&g.ar, o->allreduce, d, device, g.m.grad, g.nw + g.K);
    snprintf(res->allreduce, sizeof(res->allreduce), "%s", g.ar.name);
    if (mt_rank == 0) {
        printf(MT_PROG ": gradient averaging: %s, %zu floats per step\n", g.ar.name,
               g.nw + g.K);
        fflush(stdout);
    }
    CK(cudaMallocHost((void **)&g.host_totals, sizeof(*g.host_totals)));
    double first_loss = NAN, last_loss = NAN;
    for (unsigned e = 0; e < o->epochs; e++) {
        last_loss = epoch(&g, e, ep, res);
        if (e == 0)
            first_loss = last_loss;
    }
    compare_weights(&g, res);
    if (!o->bench && o->epochs >= 2 && mt_rank == 0)
        printf(MT_PROG ": loss %.4f -> %.4f over %u epochs%s\n", first_loss, last_loss,
               o->epochs, last_loss < first_loss ? "" : ": it did not fall (exit 3)");
    if (!o->bench && o->epochs >= 2 && !(last_loss < first_loss))
        res->status = 3;
    averager_free(&g.ar);
    CK(cudaFreeHost(g.host_totals));
    CK(tm_model_free(&g.m));
    CK(cudaStreamDestroy(g.stream));
}
