/*
 * The model of examples/train_loop.c and of the GPU path of
 * examples/mpi_train.c, on the host side: a linear softmax classifier whose
 * weights, gradient and scratch live on the device, trained by the kernels of
 * train_kernels.cu; and the check of a first step against the same step in
 * double precision on the CPU, so a kernel bug cannot hide behind a falling
 * loss.
 *
 * Every function enqueues on `s` and returns the first CUDA error (the
 * programs die on it); only tm_check_end synchronises. Not part of the
 * library: examples only, one model per thread.
 */
#ifndef TRAIN_MODEL_H
#define TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "feeder.h"
#include "train_kernels.h"

typedef struct tm_model {
    int F, K;          /* features, classes */
    uint32_t B;        /* largest batch */
    float *W, *b;      /* K x F, K */
    float *vW, *vb;    /* momentum */
    float *grad;       /* the step's gradient, K x F + K floats: gW then gb, one
                          buffer so averaging it across ranks is one call */
    float *gW, *gb;    /* into grad */
    float *feat;       /* B x F */
    float *logits;     /* B x K */
    float *dlogits;    /* B x K */
    float *batch_loss; /* 1 */
    tk_totals *totals; /* the epoch's running sums */
    float *W0;         /* host: the initial weights, for the check */
} tm_model;

/* Allocate the model for F features, K classes and batches of up to B, with
 * small random weights drawn from `seed` (the same on every rank) and zero
 * bias, momentum and totals. */
cudaError_t tm_model_init(tm_model *m, int F, int K, uint32_t B, uint64_t seed, cudaStream_t s);
/* Free what tm_model_init allocated (a zeroed model is fine). */
cudaError_t tm_model_free(tm_model *m);

/* The forward pass and the loss of n images x (3 x h x w floats each, NCHW
 * when nchw, else NHWC) pooled over pool x pool squares: feat, logits,
 * dlogits, batch_loss and totals. */
cudaError_t tm_forward(tm_model *m, const float *x, const int64_t *labels, int n, int h, int w,
                       int nchw, int pool, cudaStream_t s);
/* The gradient of the batch's mean loss into m->grad (reads feat and dlogits
 * only, so the batch may be released before it). */
cudaError_t tm_backward(tm_model *m, int n, cudaStream_t s);

/* Host copies of what the first step read and wrote, filled by D2H copies on
 * the step's stream and read only after tm_check_end has synchronised. */
typedef struct tm_check {
    float *x;        /* pinned: the batch */
    int64_t *labels; /* pinned */
    float *feat, *logits, *gW, *gb, *loss; /* pinned: the GPU's results */
    uint32_t n;
} tm_check;

/* Before the batch is released: allocate the host copies and enqueue the
 * copies of batch b's samples and labels. */
cudaError_t tm_check_begin(tm_check *c, const tm_model *m, const feeder_batch *b, cudaStream_t s);
/* After tm_backward (and before the gradient is changed by anything else):
 * enqueue the copies of the step's results and wait for all of them. */
cudaError_t tm_check_end(tm_check *c, const tm_model *m, cudaStream_t s);
/* The same step in double precision, from m->W0 and zero bias. Writes a
 * one-line report (the relative error of each result) into `report`. Returns
 * 0 when the GPU agrees, -1 when it does not, -2 on a label outside [0, K) or
 * out of memory (the report says which). */
int tm_check_compare(const tm_check *c, const tm_model *m, int h, int w, int nchw, int pool,
                     char *report, size_t len);
/* Free the host copies (a zeroed tm_check is fine). */
cudaError_t tm_check_free(tm_check *c);

#endif
