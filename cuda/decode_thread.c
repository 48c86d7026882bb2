/*
 * GPU decoders: one thread submits every batch's work (the copies of the
 * workers' pixels, nvJPEG, the resize kernel, the events). nvJPEG's batched
 * decode on the hardware engine returns only once the engine is done with
 * the batch (in a trace, the loader thread's "nvJPEG submit" spans are as
 * long as the GPU's decode spans), so in the loader's thread it held back,
 * for the whole decode, the workers' next tasks and the user's feeder_next.
 * The loader's thread hands a batch over (the entry's `pin` goes PIN_QUEUED
 * on the job FIFO that PIN_COPY's threads use; GPU decoders never pin by
 * copy) and goes on; feeder_next waits for the hand-back (PIN_ENQUEUED)
 * only when it lends that batch. Entries the thread holds are the thread's:
 * the loader's thread touches none of their fields or events until then.
 */
#include "cuda/layer.h"

/* The next queued entry, or NULL once the layer stops. Under gpu->lock. */
static ring_entry *take_job(feeder__gpu *gpu)
{
    while (!gpu->stop && !gpu->jlen)
        pthread_cond_wait(&gpu->cv_work, &gpu->lock);
    if (gpu->stop)
        return NULL;
    ring_entry *entry = &gpu->ring[gpu->jobs[gpu->jhead]];
    gpu->jhead = (gpu->jhead + 1) % (gpu->depth + 1);
    gpu->jlen--;
    return entry;
}

void *feeder__cuda_decode_thread(void *arg)
{
    feeder__gpu *gpu = arg;
    cudaSetDevice(gpu->cfg.device); /* the runtime's current device is per thread */
    char msg[sizeof(((ring_entry *)0)->errmsg)];
    pthread_mutex_lock(&gpu->lock);
    ring_entry *entry;
    while ((entry = take_job(gpu))) {
        feeder_batch *host = entry->host;
        pthread_mutex_unlock(&gpu->lock);
        int sample_err = 0;
        msg[0] = 0;
        int rc = feeder__cuda_enqueue_decode(gpu, entry, host, &sample_err, msg, sizeof(msg));
        pthread_mutex_lock(&gpu->lock);
        entry->err = rc;
        entry->sample_err = sample_err;
        memcpy(entry->errmsg, msg, sizeof(msg));
        entry->pin = PIN_ENQUEUED;
        pthread_cond_broadcast(&gpu->cv_done);
    }
    pthread_mutex_unlock(&gpu->lock);
    return NULL;
}
