/*
 * PIN_COPY: the pin threads share each job (every thread copies a chunk of the
 * slot into the entry's pinned buffer; the last one to finish enqueues the
 * H2D and the events). They never touch the host loader.
 */
#include "cuda/layer.h"

void *feeder__cuda_pin_thread(void *arg)
{
    feeder__gpu *g = arg;
    /* The runtime's current device is per thread. */
    cudaSetDevice(g->cfg.device);
    int track = feeder__trace_track_next(g->tr, "pin thread");
    pthread_mutex_lock(&g->lock);
    for (;;) {
        entry *en = NULL;
        unsigned chunk = 0;
        while (!g->stop) {
            if (g->jlen) {
                en = &g->e[g->jobs[g->jhead]];
                if (en->chunks_taken < (unsigned)g->nthr)
                    break;
            }
            en = NULL;
            pthread_cond_wait(&g->cv_work, &g->lock);
        }
        if (g->stop)
            break;
        chunk = en->chunks_taken++;
        /* Once every chunk is taken the next job may start: the head moves. */
        if (en->chunks_taken == (unsigned)g->nthr) {
            g->jhead = (g->jhead + 1) % (g->depth + 1);
            g->jlen--;
            if (g->jlen)
                pthread_cond_broadcast(&g->cv_work);
        }
        pthread_mutex_unlock(&g->lock);

        /* Chunks are page multiples so threads never share a page. */
        size_t per = (en->in_bytes + (size_t)g->nthr - 1) / (size_t)g->nthr;
        per = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
        size_t lo = (size_t)chunk * per, hi = lo + per;
        if (hi > en->in_bytes)
            hi = en->in_bytes;
        uint64_t t0 = feeder__now_ns();
        FEEDER_NVTX_PUSH("pin copy");
        if (lo < hi)
            memcpy(en->pinned + lo, en->src + lo, hi - lo);
        if (chunk == 0)
            memcpy(en->pinned + g->in_bytes, en->src_labels, en->count * sizeof(int64_t));
        FEEDER_NVTX_POP();
        uint64_t t1 = feeder__now_ns(), dt = t1 - t0;
        feeder__trace_span_e(g->tr, track, "pin copy", t0, t1, (int64_t)en->pub.epoch,
                             (int64_t)en->pub.number, -1);

        pthread_mutex_lock(&g->lock);
        g->pin_ns += dt;
        if (++en->chunks_done == (unsigned)g->nthr) {
            en->slot_done = 1;
            /* The last one enqueues, under the lock: the stream is shared by
             * the pin threads. Two jobs may reach the stream out of order;
             * that is harmless, each batch has its own events. */
            cudaError_t e = feeder__cuda_enqueue(g, en, en->pinned, (const int64_t *)(en->pinned + g->in_bytes));
            if (e != cudaSuccess) {
                en->err = FEEDER_ECUDA;
                feeder__fmt(en->errmsg, sizeof(en->errmsg), "copying batch %llu to device %d: %s",
                            (unsigned long long)en->pub.number, g->cfg.device, feeder__cuda_errtext(e));
            }
            en->pin = PIN_ENQUEUED;
            pthread_cond_broadcast(&g->cv_done);
        }
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* Wait until the pin threads are done with every queued entry. */
void feeder__cuda_pin_quiesce(feeder__gpu *g)
{
    if (g->pin_mode != FEEDER_PIN_COPY && !g->decode_thread)
        return;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->depth; i++)
        while (g->e[i].pin == PIN_QUEUED && !g->stop)
            pthread_cond_wait(&g->cv_done, &g->lock);
    pthread_mutex_unlock(&g->lock);
}
