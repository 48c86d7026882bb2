/*
 * The host side of the examples' GPU model (train_model.h): shared by
 * train_loop and mpi_train, so the two train and check exactly the same
 * thing.
 */
#include "train_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return e_;                                                                             \
    } while (0)

cudaError_t tm_model_init(tm_model *m, int F, int K, uint32_t B, uint64_t seed, cudaStream_t s)
{
    memset(m, 0, sizeof(*m));
    m->F = F;
    m->K = K;
    m->B = B;
    const size_t wn = (size_t)K * F;
    TRY(cudaMalloc((void **)&m->W, wn * sizeof(float)));
    TRY(cudaMalloc((void **)&m->vW, wn * sizeof(float)));
    TRY(cudaMalloc((void **)&m->grad, (wn + K) * sizeof(float)));
    m->gW = m->grad;
    m->gb = m->grad + wn;
    TRY(cudaMalloc((void **)&m->b, K * sizeof(float)));
    TRY(cudaMalloc((void **)&m->vb, K * sizeof(float)));
    TRY(cudaMalloc((void **)&m->feat, (size_t)B * F * sizeof(float)));
    TRY(cudaMalloc((void **)&m->logits, (size_t)B * K * sizeof(float)));
    TRY(cudaMalloc((void **)&m->dlogits, (size_t)B * K * sizeof(float)));
    TRY(cudaMalloc((void **)&m->batch_loss, sizeof(float)));
    TRY(cudaMalloc((void **)&m->totals, sizeof(tk_totals)));
    /* Small random weights rather than zeros, so the first step's logits
     * differ between classes and the check compares something; drawn from
     * the same counter-based generator as the loader's order, so every rank
     * of a job starts from the same bits. */
    m->W0 = malloc(wn * sizeof(float));
    if (!m->W0)
        return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < wn; i++)
        m->W0[i] = (float)(1e-3 * (2 * feeder_random_uniform(seed, 0, i, 0xfeed) - 1));
    TRY(cudaMemcpy(m->W, m->W0, wn * sizeof(float), cudaMemcpyHostToDevice));
    TRY(cudaMemsetAsync(m->b, 0, K * sizeof(float), s));
    TRY(cudaMemsetAsync(m->vW, 0, wn * sizeof(float), s));
    TRY(cudaMemsetAsync(m->vb, 0, K * sizeof(float), s));
    TRY(cudaMemsetAsync(m->totals, 0, sizeof(tk_totals), s));
    return cudaSuccess;
}

cudaError_t tm_model_free(tm_model *m)
{
    void *dev[] = {m->W, m->b, m->vW, m->vb, m->grad, m->feat, m->logits, m->dlogits,
                   m->batch_loss, m->totals};
    cudaError_t first = cudaSuccess;
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
        cudaError_t e = dev[i] ? cudaFree(dev[i]) : cudaSuccess;
        if (first == cudaSuccess)
            first = e;
    }
    free(m->W0);
    memset(m, 0, sizeof(*m));
    return first;
}

cudaError_t tm_forward(tm_model *m, const float *x, const int64_t *labels, int n, int h, int w,
                       int nchw, int pool, cudaStream_t s)
{
    TRY(tk_features(x, n, 3, h, w, nchw, pool, m->feat, s));
    TRY(tk_logits(m->feat, m->W, m->b, n, m->F, m->K, m->logits, s));
    return tk_softmax_xent(m->logits, labels, n, m->K, m->dlogits, m->batch_loss, m->totals, s);
}

cudaError_t tm_backward(tm_model *m, int n, cudaStream_t s)
{
    return tk_grad(m->dlogits, m->feat, n, m->F, m->K, m->gW, m->gb, s);
}

/* ------------------------------------------------------------------------ */
/* The first step, again on the CPU                                          */
/* ------------------------------------------------------------------------ */

cudaError_t tm_check_begin(tm_check *c, const tm_model *m, const feeder_batch *b, cudaStream_t s)
{
    memset(c, 0, sizeof(*c));
    const uint32_t n = b->count;
    c->n = n;
    void *p;
    TRY(cudaMallocHost(&p, b->device_bytes));
    c->x = p;
    TRY(cudaMallocHost(&p, n * sizeof(int64_t)));
    c->labels = p;
    TRY(cudaMallocHost(&p, (size_t)n * m->F * sizeof(float)));
    c->feat = p;
    TRY(cudaMallocHost(&p, (size_t)n * m->K * sizeof(float)));
    c->logits = p;
    TRY(cudaMallocHost(&p, (size_t)m->K * m->F * sizeof(float)));
    c->gW = p;
    TRY(cudaMallocHost(&p, m->K * sizeof(float)));
    c->gb = p;
    TRY(cudaMallocHost(&p, sizeof(float)));
    c->loss = p;
    TRY(cudaMemcpyAsync(c->x, b->device_data, b->device_bytes, cudaMemcpyDeviceToHost, s));
    return cudaMemcpyAsync(c->labels, b->device_labels, n * sizeof(int64_t),
                           cudaMemcpyDeviceToHost, s);
}

cudaError_t tm_check_end(tm_check *c, const tm_model *m, cudaStream_t s)
{
    const size_t n = c->n, F = (size_t)m->F, K = (size_t)m->K;
    TRY(cudaMemcpyAsync(c->feat, m->feat, n * F * sizeof(float), cudaMemcpyDeviceToHost, s));
    TRY(cudaMemcpyAsync(c->logits, m->logits, n * K * sizeof(float), cudaMemcpyDeviceToHost,
                        s));
    TRY(cudaMemcpyAsync(c->gW, m->gW, K * F * sizeof(float), cudaMemcpyDeviceToHost, s));
    TRY(cudaMemcpyAsync(c->gb, m->gb, K * sizeof(float), cudaMemcpyDeviceToHost, s));
    TRY(cudaMemcpyAsync(c->loss, m->batch_loss, sizeof(float), cudaMemcpyDeviceToHost, s));
    /* Device-to-host copies are read only after this. */
    return cudaStreamSynchronize(s);
}

cudaError_t tm_check_free(tm_check *c)
{
    void *p[] = {c->x, c->labels, c->feat, c->logits, c->gW, c->gb, c->loss};
    cudaError_t first = cudaSuccess;
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        cudaError_t e = p[i] ? cudaFreeHost(p[i]) : cudaSuccess;
        if (first == cudaSuccess)
            first = e;
    }
    memset(c, 0, sizeof(*c));
    return first;
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

/* Sample i's pooled, standardised features into fi[F]. */
static void cpu_features(const float *img, int h, int w, int nchw, int pool, int F, double *fi)
{
    const int ph = h / pool, pw = w / pool;
    double s = 0, ss = 0;
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
}

/* Logits z[K] of features fi under the initial weights, and the loss's
 * gradient with respect to them (di[K], divided by n); returns the sample's loss. */
static double cpu_logits(const tm_model *m, const double *fi, int y, uint32_t n, double *z,
                         double *di)
{
    const int F = m->F, K = m->K;
    double mx = -INFINITY;
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
    for (int k = 0; k < K; k++)
        di[k] = (exp(z[k] - lse) - (k == y)) / n;
    return lse - z[y];
}

/* The CPU's relative errors against the GPU's step, in the report. */
static int compare(const tm_check *c, const tm_model *m, const double *feat,
                   const double *logits, double loss, const double *gW, const double *gb,
                   char *report, size_t len)
{
    const int F = m->F, K = m->K;
    const uint32_t n = c->n;
    double e_feat = rel_err(c->feat, feat, (size_t)n * F);
    double e_logits = rel_err(c->logits, logits, (size_t)n * K);
    double e_loss = fabs(*c->loss - loss) / loss;
    double e_gW = rel_err(c->gW, gW, (size_t)K * F);
    double e_gb = rel_err(c->gb, gb, (size_t)K);
    /* float against double over sums of ~10^4 terms: 1e-3 is generous for
     * rounding and far too tight for an indexing or layout bug. */
    const double tol = 1e-3;
    int ok = e_feat < tol && e_logits < tol && e_loss < tol && e_gW < tol && e_gb < tol;
    snprintf(report, len,
             "check: first step (%u samples) against the CPU: features %.1e, logits %.1e, "
             "loss %.1e (%.6f), weight gradient %.1e, bias gradient %.1e (relative errors, "
             "tolerance %.0e): %s", n, e_feat, e_logits, e_loss, loss, e_gW, e_gb, tol,
             ok ? "ok" : "MISMATCH");
    return ok ? 0 : -1;
}

int tm_check_compare(const tm_check *c, const tm_model *m, int h, int w, int nchw, int pool,
                     char *report, size_t len)
{
    const int F = m->F, K = m->K;
    const uint32_t n = c->n;
    double *feat = malloc((size_t)n * F * sizeof(double));
    double *logits = malloc((size_t)n * K * sizeof(double));
    double *d = malloc((size_t)n * K * sizeof(double));
    double *gW = calloc((size_t)K * F, sizeof(double));
    double *gb = calloc((size_t)K, sizeof(double));
    int rc = -2;
    if (!feat || !logits || !d || !gW || !gb) {
        snprintf(report, len, "check: out of memory");
        goto out;
    }
    double loss = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (c->labels[i] < 0 || c->labels[i] >= K) {
            snprintf(report, len, "check: sample %u of the first batch has label %lld, outside "
                     "[0, %d)", i, (long long)c->labels[i], K);
            goto out;
        }
        double *fi = feat + (size_t)i * F;
        cpu_features(c->x + (size_t)i * 3 * h * w, h, w, nchw, pool, F, fi);
        loss += cpu_logits(m, fi, (int)c->labels[i], n, logits + (size_t)i * K,
                           d + (size_t)i * K);
    }
    loss /= n;
    for (int k = 0; k < K; k++)
        for (uint32_t i = 0; i < n; i++) {
            double dk = d[(size_t)i * K + k];
            gb[k] += dk;
            for (int f = 0; f < F; f++)
                gW[(size_t)k * F + f] += dk * feat[(size_t)i * F + f];
        }
    rc = compare(c, m, feat, logits, loss, gW, gb, report, len);
out:
    free(feat);
    free(logits);
    free(d);
    free(gW);
    free(gb);
    return rc;
}
