/*
 * The timeline trace (feeder_loader_set_trace): spans recorded by the
 * workers, the consumer, the pin threads and the copy stream, written as
 * Chrome Trace Event JSON that Perfetto and chrome://tracing open.
 *
 * Every call takes a NULL trace and then does nothing, so a call site is one
 * line whether tracing is on or not. Recording never blocks and never fails
 * loudly: a full track counts the span as dropped.
 *
 * Tracks: one per worker id (its record area lives in shared memory made
 * before fork, so a forked worker appends to it and the parent reads it when
 * it writes the file), one for the calling thread when num_workers is 0, and
 * main-process tracks (consumer, pin threads, copy stream, GPU decode) made
 * with feeder__trace_track. Times are CLOCK_MONOTONIC ns (feeder__now_ns),
 * the same clock in every process.
 *
 * Threading: feeder__trace_span, feeder__trace_worker_span and
 * feeder__trace_track may be called from any thread (and the worker span
 * from any worker process) at once; write, hold/unhold and destroy belong to
 * the loader's thread.
 */
#ifndef FEEDER_COMMON_TRACE_H
#define FEEDER_COMMON_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct feeder__trace feeder__trace;

/* Spans of a worker (the kind a worker record carries). */
enum {
    FEEDER__SPAN_READ = 1,
    FEEDER__SPAN_DECODE = 2,
    FEEDER__SPAN_TRANSFORM = 3,
    FEEDER__SPAN_CALLBACK = 4,
};

/* Events kept per track before further ones are dropped (and counted). */
#define FEEDER__TRACE_CAP (1u << 18)

/* Tests only: the per-track cap of traces created from now on in this
 * process (0: FEEDER__TRACE_CAP). */
void feeder__trace_set_cap(uint32_t cap);

/* A trace for a loader with `nworkers` worker processes (0: one track for the
 * calling thread). `path` is copied. The worker areas are one memfd mapped
 * shared, made here, before any fork. NULL on failure with the reason in err. */
feeder__trace *feeder__trace_create(const char *path, int nworkers, char *err, size_t errlen);

/* Free the trace (after the workers are gone). Writes nothing. NULL ok. */
void feeder__trace_destroy(feeder__trace *tr);

/* A main-process track named `name` (copied); its id, or -1 when the trace is
 * NULL or every track is taken (spans on -1 are ignored). Tracks appear in the
 * order they were made. */
int feeder__trace_track(feeder__trace *tr, const char *name);
/* The same, named "`prefix` N" with N = 0, 1, ... per prefix (pin threads). */
int feeder__trace_track_next(feeder__trace *tr, const char *prefix);

/* The consumer's track (made at create). */
int feeder__trace_consumer(const feeder__trace *tr);

/* A span [t0_ns, t1_ns] on a main-process track. `name` must be static.
 * batch, index: -1 when not known. */
void feeder__trace_span(feeder__trace *tr, int track, const char *name, uint64_t t0_ns,
                        uint64_t t1_ns, int64_t batch, int64_t index);
/* The same with the epoch (-1: not known). */
void feeder__trace_span_e(feeder__trace *tr, int track, const char *name, uint64_t t0_ns,
                          uint64_t t1_ns, int64_t epoch, int64_t batch, int64_t index);

/* A span of worker `worker` (-1: the calling thread, num_workers 0); kind is
 * a FEEDER__SPAN_* value. Safe in a forked worker: it writes only the shared
 * area. */
void feeder__trace_worker_span(feeder__trace *tr, int worker, int kind, uint64_t t0_ns,
                               uint64_t t1_ns, int64_t epoch, int64_t batch, int64_t index);

/* A sample's decode and transform as two adjacent spans from `t0_ns` (taken
 * just before the sample's decode), split by the decoder's own times; the
 * transform span only when the decode succeeded. */
void feeder__trace_decode(feeder__trace *tr, int worker, uint64_t t0_ns, uint64_t decode_ns,
                          uint64_t transform_ns, int ok, uint64_t epoch, uint64_t batch,
                          uint64_t index);

/* A forked worker notes its pid in its area (a restarted one adds its own). */
void feeder__trace_worker_pid(feeder__trace *tr, int worker, int pid);

/* The consumer holds a batch from `t_ns` (feeder_next returned it) until
 * unhold (feeder_batch_release): then a "batch K held by user" span. `key`
 * tells lent batches apart. */
void feeder__trace_hold(feeder__trace *tr, const void *key, uint64_t t_ns, int64_t epoch,
                        int64_t batch);
void feeder__trace_unhold(feeder__trace *tr, const void *key, uint64_t t_ns);

/* Write everything recorded so far to the path: path.tmp, then rename. 0, or
 * -errno with err naming the file and the failing call. */
int feeder__trace_write(feeder__trace *tr, char *err, size_t errlen);

/* The path the trace is written to ("" for NULL). */
const char *feeder__trace_path(const feeder__trace *tr);

/* Spans dropped so far because a track was full (all tracks). */
uint64_t feeder__trace_dropped(const feeder__trace *tr);

#endif
