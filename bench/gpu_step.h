/*
 * bench_loader's GPU side (gpu_step.cu): a stand-in for a training step that
 * reads every byte of the batch and then spins for a set time on the user's
 * stream, timed with events so the GPU's busy share is measured, not assumed.
 * Plain C types only, so bench_loader.c builds with or without CUDA.
 */
#ifndef FEEDER_BENCH_GPU_STEP_H
#define FEEDER_BENCH_GPU_STEP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bg_ctx bg_ctx;

/* CUDA devices this process sees; 0 without CUDA, without a driver or on an
 * error (bench_loader's default --device for the GPU decoders). */
int bg_device_count(void);

/* 0, or -1 with a message. */
int bg_create(int device, bg_ctx **out, char *err, size_t errlen);
void bg_destroy(bg_ctx *g);
/* The user's stream (cudaStream_t). */
void *bg_stream(bg_ctx *g);
const char *bg_device_name(bg_ctx *g);
/* Step `i` of the epoch: the stream waits on `ready_event` (may be NULL), then
 * a kernel reads `bytes` at `data` (device memory) and spins `ms`. */
int bg_step(bg_ctx *g, unsigned i, const void *ready_event, const void *data, size_t bytes,
            double ms, char *err, size_t errlen);
/* Wait until step `i` has finished. */
int bg_wait_step(bg_ctx *g, unsigned i, char *err, size_t errlen);
/* Wait for the stream; the sum of the steps' kernel times 0..n-1 in ms. */
int bg_busy_ms(bg_ctx *g, unsigned n, double *ms, char *err, size_t errlen);
/* Seconds that n steps over a resident buffer of `bytes` take with nothing
 * else running: the compute-alone baseline. */
int bg_compute_alone(bg_ctx *g, size_t bytes, double ms, unsigned n, double *seconds, char *err,
                     size_t errlen);
/* Copy `bytes` of device memory to the host after the stream has passed
 * `ready_event` (for --checksum). */
int bg_to_host(bg_ctx *g, const void *ready_event, void *dst, const void *src, size_t bytes,
               char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
