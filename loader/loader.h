/*
 * loader/: options, the worker pool, samplers, epochs, dispatch and delivery
 * order, the resume state, distributed ranks. What other rooms and the tools
 * may use of it.
 */
#ifndef FEEDER_LOADER_H
#define FEEDER_LOADER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/worker.h"

/* ---- saved state (state.c) and the loader's side of it (loader.c) ---- */

/* Everything a state blob records: a position in an epoch and every setting
 * that shapes the bytes of its batches. */
typedef struct feeder__state {
    uint64_t seed, epoch, delivered, dataset_size, sampler_len, nbatches, order_hash;
    uint64_t max_pixels;
    uint32_t batch_size, drop_last, shuffle, user_sampler;
    uint32_t pipeline, decoder, layout, height, width, resize, policy;
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    /* (nbatches + 7) / 8 bytes, bit b (LSB first) = batch b delivered; NULL
     * when nothing was. Borrowed. */
    const uint8_t *map;
} feeder__state;

/* A hash of an epoch's order: two loaders with the same one draw the same
 * samples in the same order. */
uint64_t feeder__order_hash(const uint64_t *v, uint64_t n);

/* Describe the loader in feeder__state terms. `at` NULL: where it stands
 * (the epoch the next feeder_next works in, and which of its batches were
 * delivered); otherwise epoch *at with nothing delivered. want_hash fills
 * order_hash, which fills the epoch's order when the loader is not in it.
 * st->map may point into the loader: use it before the next call on it.
 * 0, or an error with the loader's message set. */
int feeder__loader_describe(const feeder_loader *ld, const uint64_t *at, int want_hash,
                            feeder__state *st);
int feeder__loader_started(const feeder_loader *ld);
/* Keep a checked blob (copied) to resume from: start checks it again against
 * the final options, the first epoch applies it. */
int feeder__loader_keep_resume(feeder_loader *ld, const void *buf, size_t len);
/* Leave a message in the loader's errmsg and return rc. */
int feeder__loader_fail(const feeder_loader *ld, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Decode a blob and compare it with the loader: 0 and *st (st->map points
 * into buf), or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message set. */
int feeder__state_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st);

/* ---- resource limits (limits.c) ---- */

/* Can the machine back `slots` batch slots of `slot_bytes`? 0, or
 * FEEDER_ELIMIT with "batch slots need ..." in msg. */
int feeder__check_slot_memory(uint32_t slots, size_t slot_bytes, char *msg, size_t msglen);
/* Is RLIMIT_NOFILE high enough for `workers` workers, each opening up to
 * `files_per_task` files at once? 0, or FEEDER_ELIMIT with the message. */
int feeder__check_nofile(int workers, uint32_t files_per_task, char *msg, size_t msglen);

/* ---- what the GPU layer (cuda/) uses of the loader ---- */

/* feeder__host_next(try_only = 1): nothing is ready yet. Never returned to users. */
#define FEEDER__AGAIN 100

/* The host loader's feeder_next: lend the next host batch (slot). With
 * try_only, return FEEDER__AGAIN at once instead of waiting (and, with no
 * workers, instead of loading in the calling thread). Statuses and errors as
 * feeder_next, with the message in the loader's errmsg. */
int feeder__host_next(feeder_loader *ld, feeder_batch **out, int try_only);
/* Give a host batch's slot back. */
int feeder__host_release(feeder_batch *b);
const feeder__slot_layout *feeder__loader_layout(const feeder_loader *ld);
/* The parent's mapping of every slot, and its length. */
uint8_t *feeder__loader_mem(const feeder_loader *ld, size_t *bytes);
uint32_t feeder__loader_nslots(const feeder_loader *ld);
/* The batch number whose error the last feeder__host_next returned, or -1
 * (a status that is no batch's: DONE, a death, a timeout). */
int64_t feeder__loader_status_batch(const feeder_loader *ld);
/* The current (or last) epoch. */
uint64_t feeder__loader_epoch(const feeder_loader *ld);
/* The loader's trace (feeder_loader_set_trace), or NULL: every
 * feeder__trace_* call takes NULL (loader/trace.h). */
struct feeder__trace *feeder__loader_trace(const feeder_loader *ld);
/* Add the GPU counters of `d` (pin_ns, h2d_ns, h2d_bytes, gpu_batches, wait_ns)
 * to the loader's; set its levels pinned_bytes and device_bytes. */
void feeder__loader_stats_add(feeder_loader *ld, const feeder_stats *d);
void feeder__loader_stats_mem(feeder_loader *ld, uint64_t pinned_bytes, uint64_t device_bytes);
/* HYBRID: the share of each batch (1/1000) the workers decode from the next
 * dispatched batch on. */
void feeder__loader_set_cpu_share(feeder_loader *ld, uint32_t permille);
uint32_t feeder__loader_cpu_share(const feeder_loader *ld);
/* Run sample decoding the way the workers do it (errors name index and
 * path); for the GPU layer's CPU fallback. `t` must be a CPU decoder's. */
int feeder__loader_decode_cpu(feeder_loader *ld, const feeder__transform *t, const uint8_t *jpeg,
                              size_t len, uint64_t epoch, uint64_t index, uint8_t *dst,
                              char *msg, size_t msglen);
const feeder__job *feeder__loader_job(const feeder_loader *ld);

#endif
