/*
 * PIN_COPY: the pin threads share each job (every thread copies a chunk of the
 * slot into the entry's pinned buffer; the last one to finish enqueues the
 * H2D and the events). They never touch the host loader.
 */
#include "cuda/layer.h"

void *feeder__cuda_pin_thread(void *arg)
{
    feeder__gpu *gpu = arg;
    pthread_setname_np(pthread_self(), "feeder-pin"); /* for ps, top -H and gdb */
    /* The runtime's current device is per thread. */
    cudaSetDevice(gpu->cfg.device);
    int track = feeder__trace_track_next(gpu->tr, "pin thread");
    pthread_mutex_lock(&gpu->lock);
    for (;;) {
        ring_entry *entry = NULL;
        unsigned chunk = 0;
        while (!gpu->stop) {
            if (gpu->jlen) {
                entry = &gpu->ring[gpu->jobs[gpu->jhead]];
                if (entry->chunks_taken < (unsigned)gpu->nthr)
                    break;
            }
            entry = NULL;
            pthread_cond_wait(&gpu->cv_work, &gpu->lock);
        }
        if (gpu->stop)
            break;
        chunk = entry->chunks_taken++;
        /* Once every chunk is taken the next job may start: the head moves. */
        if (entry->chunks_taken == (unsigned)gpu->nthr) {
            gpu->jhead = (gpu->jhead + 1) % (gpu->depth + 1);
            gpu->jlen--;
            if (gpu->jlen)
                pthread_cond_broadcast(&gpu->cv_work);
        }
        pthread_mutex_unlock(&gpu->lock);

        /* Chunks are page multiples so threads never share a page. */
        size_t per = (entry->in_bytes + (size_t)gpu->nthr - 1) / (size_t)gpu->nthr;
        per = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
        size_t lo = (size_t)chunk * per, hi = lo + per;
        if (hi > entry->in_bytes)
            hi = entry->in_bytes;
        uint64_t t0 = feeder__now_ns();
        FEEDER_NVTX_PUSH("pin copy");
        if (lo < hi)
            memcpy(entry->pinned + lo, entry->src + lo, hi - lo);
        if (chunk == 0)
            memcpy(entry->pinned + gpu->in_bytes, entry->src_labels, entry->count * sizeof(int64_t));
        FEEDER_NVTX_POP();
        uint64_t t1 = feeder__now_ns(), dt = t1 - t0;
        feeder__trace_span_e(gpu->tr, track, "pin copy", t0, t1, (int64_t)entry->pub.epoch,
                             (int64_t)entry->pub.number, -1);

        pthread_mutex_lock(&gpu->lock);
        gpu->pin_ns += dt;
        if (++entry->chunks_done == (unsigned)gpu->nthr) {
            entry->slot_done = 1;
            /* The last one enqueues, under the lock: the stream is shared by
             * the pin threads. Two jobs may reach the stream out of order;
             * that is harmless, each batch has its own events. */
            cudaError_t e = feeder__cuda_enqueue(gpu, entry, entry->pinned,
                                                 (const int64_t *)(entry->pinned + gpu->in_bytes));
            if (e != cudaSuccess) {
                entry->err = FEEDER_ECUDA;
                feeder__fmt(entry->errmsg, sizeof(entry->errmsg), "copying batch %llu to device %d: %s",
                            (unsigned long long)entry->pub.number, gpu->cfg.device, feeder__cuda_errtext(e));
            }
            entry->pin = PIN_ENQUEUED;
            pthread_cond_broadcast(&gpu->cv_done);
        }
    }
    pthread_mutex_unlock(&gpu->lock);
    return NULL;
}

/* Wait until the pin (or decode) threads are done with every queued entry;
 * -1, or the decode lane whose nvJPEG call is stuck (the wait ends there). */
int feeder__cuda_pin_quiesce(feeder__gpu *gpu)
{
    int stuck = -1;
    if (gpu->pin_mode != FEEDER_PIN_COPY && !gpu->decode_thread)
        return -1;
    pthread_mutex_lock(&gpu->lock);
    for (int i = 0; i < gpu->depth && stuck < 0; i++)
        while (gpu->ring[i].pin == PIN_QUEUED && !gpu->stop && !gpu->wedged &&
               (stuck = feeder__cuda_stuck_lane(gpu, feeder__now_ns(), gpu->stuck_ns)) < 0)
            feeder__cuda_wait_done_slice(gpu);
    pthread_mutex_unlock(&gpu->lock);
    return stuck;
}
