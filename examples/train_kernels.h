/*
 * The kernels of examples/train_loop.c: a linear softmax classifier trained
 * with SGD on feeder's device batches. Each launcher enqueues its kernel on
 * `s` and returns the launch's error (cudaGetLastError), so the caller can
 * check every step; none of them synchronises.
 */
#ifndef TRAIN_KERNELS_H
#define TRAIN_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Running totals of an epoch, kept on the device and read back once per
 * epoch (after a synchronisation). Written by one block only, in stream
 * order, so the sums do not depend on scheduling. */
typedef struct tk_totals {
    double loss_sum;     /* cross-entropy summed over samples */
    uint64_t correct;    /* samples whose largest logit is their label */
    uint64_t samples;    /* samples with a valid label */
    uint64_t bad_labels; /* labels outside [0, classes): left out of loss and gradient */
} tk_totals;

/* Features of n images: each image (c x h x w floats, NCHW when `nchw`, else
 * NHWC) is average-pooled over pool x pool squares to c x (h/pool) x (w/pool)
 * values, ordered (channel, row, column) whatever the input layout, then
 * standardised to mean 0 and variance 1 over the image's features.
 * feat: n x features floats. h and w must be multiples of pool. */
cudaError_t tk_features(const float *x, int n, int c, int h, int w, int nchw, int pool,
                        float *feat, cudaStream_t s);

/* logits[i][k] = b[k] + sum_f W[k][f] * feat[i][f], for n samples, K classes,
 * F features. W is K x F, row-major. */
cudaError_t tk_logits(const float *feat, const float *W, const float *b, int n, int F, int K,
                      float *logits, cudaStream_t s);

/* Softmax cross-entropy of n samples against `labels` (int64, on the
 * device): dlogits[i][k] = (softmax(logits[i])[k] - [k == label]) / n, the
 * gradient of the batch's mean loss; *batch_loss = that mean; the batch is
 * added to *totals. A label outside [0, K) gets a zero gradient row and is
 * counted in totals->bad_labels. */
cudaError_t tk_softmax_xent(const float *logits, const int64_t *labels, int n, int K,
                            float *dlogits, float *batch_loss, tk_totals *totals,
                            cudaStream_t s);

/* gW[k][f] = sum_i dlogits[i][k] * feat[i][f]; gb[k] = sum_i dlogits[i][k]. */
cudaError_t tk_grad(const float *dlogits, const float *feat, int n, int F, int K, float *gW,
                    float *gb, cudaStream_t s);

/* SGD with momentum over `count` parameters: v = momentum * v + g;
 * p -= lr * v (momentum 0 is plain SGD). */
cudaError_t tk_sgd(float *p, float *v, const float *g, size_t count, float lr, float momentum,
                   cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
