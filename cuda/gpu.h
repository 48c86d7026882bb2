/*
 * cuda/: the GPU layer between the host loader and the user. It takes the
 * host loader's finished batches (shared-memory slots), moves them to the
 * device on a copy stream (registered slots, or a pin-thread copy into
 * pinned buffers, or pageable), optionally normalises them there, and lends
 * device batches. Built as prefetch.c + normalize.cu with CUDA, nogpu.c
 * without; the loader calls only what this header declares.
 *
 * Threading: every function here runs in the thread that uses the loader;
 * the PIN_COPY threads live inside prefetch.c and touch only pinned buffers,
 * slot memory they are handed and the copy stream.
 */
#ifndef FEEDER_CUDA_GPU_H
#define FEEDER_CUDA_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "feeder.h"

typedef struct feeder__gpu feeder__gpu;

typedef struct feeder__gpu_config {
    int device;
    int pin_mode;     /* feeder_pin_mode */
    int depth;        /* device buffers in the ring */
    int dtype;        /* feeder_dtype */
    int pin_threads;
    int out_layout;   /* feeder_layout of device batches */
    float mean[3], std[3];
    feeder_allocator dev_alloc, pin_alloc; /* alloc NULL: the CUDA default */
    void *copy_stream;                     /* cudaStream_t, or NULL: make one */
    int decoder;      /* feeder_decoder: NVJPEG and HYBRID decode here */
    int sequential;   /* the order is 0, 1, 2, ... (no sampler given, no shuffle) */
} feeder__gpu_config;

/* Can device batches be delivered on `device` here? 0, or FEEDER_EUNSUPPORTED
 * with the reason in `why` (built without CUDA, no device, bad ordinal). Run
 * before the slots are laid out: the float dtypes need NHWC slots. */
int feeder__gpu_probe(int device, char *why, size_t whylen);

/* Start the GPU layer over a started loader. 0 on success. FEEDER_EUNSUPPORTED
 * (with `why`) when this build or machine cannot deliver device batches: the
 * loader then goes on with host batches. Any other error fails the start and
 * leaves its message in `why`. */
int feeder__gpu_start(feeder_loader *ld, const feeder__gpu_config *cfg, feeder__gpu **out,
                      char *why, size_t whylen);

/* feeder_next() with the GPU layer on. */
int feeder__gpu_next(feeder__gpu *g, feeder_batch **out);

/* feeder_batch_release() of a device batch (feeder__gpu_owns(b)). */
int feeder__gpu_release(feeder_batch *b, void *stream);

/* Drop every prefetched batch (set_epoch): wait for their copies, give their
 * host slots back. Lent batches stay valid until released. */
void feeder__gpu_drop(feeder__gpu *g);

/* How the layer runs ("pin register", "pin copy (cudaHostRegister failed: ...)"). */
const char *feeder__gpu_describe(const feeder__gpu *g);

/* Stop the pin threads, wait for the copy stream, free everything the layer
 * allocated and unregister the slots. Before the loader unmaps them. NULL ok. */
void feeder__gpu_destroy(feeder__gpu *g);

/* The batch numbers of `epoch` the layer has taken from the host loader but
 * not yet handed to the user (prefetched batches, and failed batches whose
 * error is still queued): at most cap of them into out, and their count.
 * The loader's state leaves them undelivered. *open: the layer holds
 * anything of `epoch` (FEEDER_DONE too): for the user the epoch still runs. */
int feeder__gpu_pending(const feeder__gpu *g, uint64_t epoch, uint64_t *out, int cap, int *open);

/* Does the layer decode JPEGs on the GPU (cfg.decoder NVJPEG or HYBRID and
 * nvJPEG started)? If it was asked to and cannot, feeder__gpu_decode_why says
 * why, and the loader decodes on the CPU. */
int feeder__gpu_decodes(const feeder__gpu *g);
/* Does the layer copy a RAW packed file's records to the device straight from
 * the file's registered mapping (the workers then write only labels)? */
int feeder__gpu_packed_direct(const feeder__gpu *g);
const char *feeder__gpu_decode_why(const feeder__gpu *g);

/* Trace a span of GPU work between two timing events (cudaEvent_t) that have
 * both passed, mapped to the host clock, on main-process track `track`
 * (feeder__trace_track(feeder__loader_trace(ld), "gpu decode (GPU)"), say).
 * `name` must be static. Nothing when the loader has no trace or an event
 * has not passed; never waits. CUDA builds only. */
void feeder__gpu_trace_events(feeder__gpu *g, int track, const char *name, void *ev0, void *ev1,
                              int64_t epoch, int64_t batch);

/* Does a batch's internal_ point at a device batch of this layer? */
int feeder__gpu_owns(const feeder_batch *b);

#endif
