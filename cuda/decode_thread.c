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

/* The next queued entry, or NULL once the layer stops. Under g->lock. */
static entry *take_job(feeder__gpu *g)
{
    while (!g->stop && !g->jlen)
        pthread_cond_wait(&g->cv_work, &g->lock);
    if (g->stop)
        return NULL;
    entry *en = &g->e[g->jobs[g->jhead]];
    g->jhead = (g->jhead + 1) % (g->depth + 1);
    g->jlen--;
    return en;
}

void *feeder__cuda_decode_thread(void *arg)
{
    feeder__gpu *g = arg;
    cudaSetDevice(g->cfg.device); /* the runtime's current device is per thread */
    char msg[sizeof(((entry *)0)->errmsg)];
    pthread_mutex_lock(&g->lock);
    entry *en;
    while ((en = take_job(g))) {
        feeder_batch *hb = en->hb;
        pthread_mutex_unlock(&g->lock);
        int sample_err = 0;
        msg[0] = 0;
        int rc = feeder__cuda_enqueue_decode(g, en, hb, &sample_err, msg, sizeof(msg));
        pthread_mutex_lock(&g->lock);
        en->err = rc;
        en->sample_err = sample_err;
        memcpy(en->errmsg, msg, sizeof(msg));
        en->pin = PIN_ENQUEUED;
        pthread_cond_broadcast(&g->cv_done);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}
