/*
 * cuda/: the GPU layer between the host loader and the user. It takes the
 * host loader's finished batches (shared-memory slots), moves them to the
 * device on a copy stream (registered slots, or a pin-thread copy into
 * pinned buffers, or pageable), optionally decodes JPEGs (nvJPEG) and
 * normalises there, and lends device batches. The room is two things:
 * libfeeder holds only plugin.c, which implements this header by forwarding
 * to the GPU plugin, libfeeder_cuda.so.0 (plugin.h), loaded at the first
 * probe; the plugin is the rest of the room, built when a CUDA toolkit is
 * found. No plugin (no toolkit at build time, none installed, no CUDA
 * runtime) reads as a machine without a device.
 *
 * The narrow interface: only the public entry points (api/) call this
 * header, and this room includes nothing of loader/ or worker/. Everything
 * it needs of the host loader comes in feeder__gpu_config: the slots' fixed
 * facts, and the host loader's batches through the callbacks of
 * feeder__host_ops. Errors leave their message in feeder__gpu_errmsg().
 *
 * Threading: every function here runs in the thread that uses the loader;
 * the PIN_COPY threads live inside this room and touch only pinned buffers,
 * slot memory they are handed and the copy stream.
 */
#ifndef FEEDER_CUDA_GPU_H
#define FEEDER_CUDA_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "collate/slot.h"
#include "common/trace.h"
#include "decode/decode.h"
#include "feeder.h"

struct feeder__pack; /* dataset/pack.h */
struct feeder__augment_plan; /* augment/augment.h */

typedef struct feeder__gpu feeder__gpu;

/* feeder__host_ops.next(try_only = 1): nothing is ready yet. Never returned
 * to users. */
#define FEEDER__AGAIN 100

/* The host loader as the GPU layer sees it. Every callback runs in the
 * loader's thread. */
typedef struct feeder__host_ops {
    void *ctx;
    /* Lend the next finished host batch (a slot). With try_only, return
     * FEEDER__AGAIN at once instead of waiting (and, with no workers, instead
     * of loading in the calling thread). Statuses and errors as feeder_next;
     * the message through errmsg. */
    int (*next)(void *ctx, feeder_batch **out, int try_only);
    /* Give a host batch's slot back. */
    int (*release)(void *ctx, feeder_batch *b);
    /* The message of the last failed next. */
    const char *(*errmsg)(void *ctx);
    /* The batch number whose error the last next returned, or -1 (a status
     * that is no batch's: DONE, a death, a timeout). */
    int64_t (*status_batch)(void *ctx);
    /* The epoch the host loader is in (or was last in). */
    uint64_t (*epoch)(void *ctx);
    /* HYBRID: the share of each batch (1/1000) the workers decode, from the
     * next dispatched batch on. */
    void (*set_cpu_share)(void *ctx, uint32_t permille);
    /* The workers' time in reading, decoding and transforming so far (ns,
     * summed over them, counted as each part ends), and how many run. */
    uint64_t (*work_ns)(void *ctx, uint32_t *workers);
    /* While the layer waits for its decode threads: hand the workers their
     * next parts and take in their results, for up to ms or until wake_fd is
     * readable. 0; FEEDER__AGAIN when there is nothing to serve; or an error
     * as next's. */
    int (*serve)(void *ctx, int wake_fd, int ms);
    /* Decode one sample the way the workers do it (errors name index and
     * path), into dst: the GPU decoder's CPU fallback. `who`: the decode
     * thread (0 .. FEEDER__GPU_DECODE_THREADS_MAX - 1); calls with
     * different `who` may run at once. */
    int (*decode_cpu)(void *ctx, unsigned who, const uint8_t *jpeg, size_t len, uint64_t epoch,
                      uint64_t index, uint8_t *dst, char *msg, size_t msglen);
} feeder__host_ops;

/* FEEDER_OPT_GPU_DECODE_THREADS' upper bound: the decode threads of a GPU
 * decoder, each with a CPU fallback decoder of its own in the host loader. */
#define FEEDER__GPU_DECODE_THREADS_MAX 4

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
    int decoder;      /* feeder_decoder in use (the plan's): NVJPEG and HYBRID decode here */
    uint32_t cpu_share; /* HYBRID: the workers' first share (1/1000) */
    int warmup;         /* the workers decode everything while nvJPEG starts */
    int decode_threads; /* FEEDER_OPT_GPU_DECODE_THREADS: nvJPEG decoders side by side, 0 = automatic */

    /* The host loader's facts, fixed at start. Borrowed: they outlive the layer. */
    feeder__host_ops host;
    const feeder__slot_layout *layout;
    uint8_t *slot_mem;               /* the parent's mapping of every slot */
    size_t slot_mem_bytes;
    uint32_t nslots;
    const feeder__transform *transform; /* the crop boxes and sizes the workers use */
    uint64_t seed;
    /* A RAW packed file the layer may copy from directly (its mapping), with
     * the read mode and CRC option that allow it; NULL for other datasets. */
    const struct feeder__pack *pack;
    int packed_mmap;                 /* read by MMAP (the workers check CRCs there) */
    feeder__trace *trace;            /* or NULL */
    /* A fields dataset's slot layout (collate/fields.h): each field's
     * tensor, lengths and offsets are copied to the device as they are; NULL
     * for image datasets. */
    const struct feeder__fields_layout *fields;
    /* FEEDER_OPT_AUGMENT_ON_DEVICE: steps [aug_first, aug->nsteps) of the
     * plan and its mixes run as kernels on every device batch (cuda/
     * augment.cu), with the draws the CPU ops make. Copied at start; NULL:
     * the host runs the whole plan. */
    const struct feeder__augment_plan *aug;
    uint32_t aug_first;
} feeder__gpu_config;

/* Can device batches be delivered on `device` here? 0, or FEEDER_EUNSUPPORTED
 * with the reason in `why` (no GPU plugin, no device), or FEEDER_ERANGE (a bad
 * ordinal). The first call loads the GPU plugin (plugin.c). Run
 * before the slots are laid out: the float dtypes need NHWC slots. */
int feeder__gpu_probe(int device, char *why, size_t whylen);

/* Start the GPU layer. 0 on success. FEEDER_EUNSUPPORTED (with `why`) when
 * this build or machine cannot deliver device batches: the loader then goes
 * on with host batches. Any other error fails the start and leaves its
 * message in `why`. */
int feeder__gpu_start(const feeder__gpu_config *cfg, feeder__gpu **out, char *why,
                      size_t whylen);

/* Once the workers are forked and have their first tasks
 * (feeder__host_kick): the start-up steps that would otherwise hold them
 * back. The slots are registered with the driver here (the first now, the
 * rest on a thread): a registration holds the process's memory map, which a
 * fork waits for, and the driver, which the loader's first dispatch waited
 * for (docs/ARCHITECTURE.md, "The first batch"). Where registration fails,
 * the layer copies through pinned buffers (or pageable memory). Never
 * fails. */
void feeder__gpu_finish_start(feeder__gpu *gpu);

/* feeder_next() with the GPU layer on. An error leaves its message in
 * feeder__gpu_errmsg(). */
int feeder__gpu_next(feeder__gpu *gpu, feeder_batch **out);

/* feeder_batch_release() of a device batch (feeder__gpu_owns(b)). An error
 * leaves its message in feeder__gpu_errmsg() of the batch's layer. */
int feeder__gpu_release(feeder_batch *b, void *stream);
/* The layer a device batch belongs to (feeder__gpu_owns(b)). */
feeder__gpu *feeder__gpu_of(const feeder_batch *b);
/* The host loader the layer serves (its feeder__host_ops ctx). */
void *feeder__gpu_host(const feeder__gpu *gpu);

/* The message of the layer's last failed call. */
const char *feeder__gpu_errmsg(const feeder__gpu *gpu);

/* Drop every prefetched batch (set_epoch): wait for their copies, give their
 * host slots back. Lent batches stay valid until released. */
void feeder__gpu_drop(feeder__gpu *gpu);

/* How the layer runs ("pin register", "pin copy (cudaHostRegister failed: ...)"). */
const char *feeder__gpu_describe(const feeder__gpu *gpu);

/* Add the layer's counters (pin_ns, h2d_ns, h2d_bytes, gpu_batches, wait_ns,
 * the GPU decode counters) to *st and set its levels pinned_bytes and
 * device_bytes. NULL gpu: nothing. */
void feeder__gpu_stats(const feeder__gpu *gpu, feeder_stats *st);

/* Stop the pin threads, wait for the copy stream, free everything the layer
 * allocated and unregister the slots. Before the loader unmaps them. NULL ok. */
void feeder__gpu_destroy(feeder__gpu *gpu);

/* The batch numbers of `epoch` the layer has taken from the host loader but
 * not yet handed to the user (prefetched batches, and failed batches whose
 * error is still queued): at most cap of them into out, and their count.
 * The loader's state leaves them undelivered. *open: the layer holds
 * anything of `epoch` (FEEDER_DONE too): for the user the epoch still runs. */
int feeder__gpu_pending(const feeder__gpu *gpu, uint64_t epoch, uint64_t *out, int cap, int *open);

/* Does the layer decode JPEGs on the GPU (cfg.decoder NVJPEG or HYBRID and
 * nvJPEG started)? If it was asked to and cannot, feeder__gpu_decode_why says
 * why, and the loader decodes on the CPU. */
int feeder__gpu_decodes(const feeder__gpu *gpu);
const char *feeder__gpu_decode_why(const feeder__gpu *gpu);
/* Does the layer copy a RAW packed file's records to the device straight from
 * the file's registered mapping (the workers then write only labels)? */
int feeder__gpu_packed_direct(const feeder__gpu *gpu);

/* Trace a span of GPU work between two timing events (cudaEvent_t) that have
 * both passed, mapped to the host clock, on main-process track `track`.
 * `name` must be static. Nothing when there is no trace or an event has not
 * passed; never waits. CUDA builds only. */
void feeder__gpu_trace_events(feeder__gpu *gpu, int track, const char *name, void *ev0, void *ev1,
                              int64_t epoch, int64_t batch);

/* Does a batch's internal_ point at a device batch of this layer? */
int feeder__gpu_owns(const feeder_batch *b);

#endif
