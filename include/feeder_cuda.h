/*
 * feeder_cuda.h: the part of feeder's API that needs CUDA types.
 *
 * With FEEDER_OPT_DEVICE >= 0, feeder_next() lends device batches: the
 * batch's samples are in device_data (dtype, layout as set) and its labels in
 * device_labels, and ready_event is the cudaEvent_t recorded on feeder's copy
 * stream after both were written. The copy of the next batch is already
 * under way when feeder_next() returns. Use a batch like this:
 *
 *     feeder_batch *b;
 *     while (feeder_next(ld, &b) == 0) {
 *         feeder_batch_wait(b, stream);        // the stream waits; the host does not
 *         my_step<<<grid, block, 0, stream>>>(b->device_data, b->device_labels, b->count);
 *         feeder_batch_release(b, stream);     // buffer reused only after `stream` passes here
 *     }
 *
 * Never read device_data on another stream without waiting on ready_event,
 * and never from the host: it is device memory.
 *
 * Building: this header includes cuda_runtime_api.h, so a program that uses
 * it compiles with the CUDA toolkit's include path and links cudart; the core
 * header feeder.h needs neither. libfeeder itself links no CUDA library: its
 * GPU layer is a plugin, libfeeder_cuda.so.0, loaded from beside libfeeder
 * (or $FEEDER_CUDA_PLUGIN) when a loader first asks for a device.
 */
#ifndef FEEDER_CUDA_H
#define FEEDER_CUDA_H

#include <cuda_runtime_api.h>

#include "feeder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copy batches on `stream` (the user's, e.g. a high-priority stream shared
 * with other copies) instead of a non-blocking stream feeder makes for
 * itself. The stream is borrowed and must outlive the loader; it must belong
 * to FEEDER_OPT_DEVICE. Before start, else FEEDER_ESTATE. */
FEEDER_API int feeder_loader_set_copy_stream(feeder_loader *ld, cudaStream_t stream);

/* Make `stream` wait for the batch's copy (and normalisation) to finish,
 * without blocking the host. A host batch has no event: returns cudaSuccess.
 * Thread-safe. */
static inline cudaError_t feeder_batch_wait(const feeder_batch *b, cudaStream_t stream)
{
    return b->ready_event ? cudaStreamWaitEvent(stream, (cudaEvent_t)b->ready_event, 0)
                          : cudaSuccess;
}

/* The batch's ready event, or NULL for a host batch. Borrowed until
 * feeder_batch_release(). */
static inline cudaEvent_t feeder_batch_event(const feeder_batch *b)
{
    return (cudaEvent_t)b->ready_event;
}

/* This rank's CUDA device in a distributed job: feeder_dist_device() over the
 * devices this process sees (its local rank modulo their count), or -1 when
 * it sees none or cudaGetDeviceCount() fails. The value for
 * FEEDER_OPT_DEVICE and cudaSetDevice(). Thread-safe. */
static inline int feeder_dist_cuda_device(const feeder_dist *d)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    return feeder_dist_device(d, n);
}

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_CUDA_H */
