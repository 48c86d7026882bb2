/*
 * An epoch's iteration: iter(loader) begins the next epoch (or the resumed
 * one) and returns a LoaderIterator; each next() waits for a batch without
 * the GIL (polling for signals and the user's timeout, one garbage
 * collection when every slot is held), then lends it (batch_result,
 * batch.c). Releases that arrive while feeder_next runs are queued by
 * loader_release (batch.c) and made here as soon as it returns.
 */
#include "feederpy.h" /* first: it includes Python.h */

#include <time.h>

typedef struct {
    PyObject_HEAD
    LoaderObject *loader;
    uint64_t generation;
} LoaderIterObject;

/* The releases loader_release (batch.c) queued while feeder_next ran. */
static void drain_pending(LoaderObject *self)
{
    for (Py_ssize_t i = 0; i < self->npending; i++)
        if (self->ld)
            feeder_batch_release(self->pending[i].b, self->pending[i].stream);
    self->npending = 0;
}

PyObject *loader_iter(LoaderObject *self)
{
    if (!loader_ready(self))
        return NULL;
    if (self->resume_pending) {
        self->cur_epoch = self->resume_epoch;
        self->next_epoch = self->resume_epoch + 1;
        self->resume_pending = 0;
        Py_CLEAR(self->resume_state);
    } else {
        int rc;
        feeder_loader *ld = self->ld;
        uint64_t e = self->next_epoch;
        Py_BEGIN_ALLOW_THREADS
        rc = feeder_loader_set_epoch(ld, e);
        Py_END_ALLOW_THREADS
        if (rc) {
            raise_rc(rc, feeder_loader_errmsg(self->ld));
            return NULL;
        }
        self->cur_epoch = e;
        self->next_epoch = e + 1;
    }
    Py_CLEAR(self->abandoned_state);
    self->in_epoch = 1;
    self->generation++;
    LoaderIterObject *it = PyObject_New(LoaderIterObject, &LoaderIterType);
    if (!it)
        return NULL;
    it->loader = (LoaderObject *)Py_NewRef(self);
    it->generation = self->generation;
    return (PyObject *)it;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* feeder_next without the GIL, its time added to last_next_ns. */
static int timed_next(LoaderObject *self, feeder_batch **b)
{
    int rc;
    feeder_loader *ld = self->ld;
    uint64_t ns = 0;
    self->in_next = 1;
    Py_BEGIN_ALLOW_THREADS
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = feeder_next(ld, b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t1.tv_nsec -
         (uint64_t)t0.tv_nsec;
    Py_END_ALLOW_THREADS
    self->last_next_ns += ns;
    self->in_next = 0;
    drain_pending(self);
    return rc;
}

/* The next batch in *b: 1; or 0 with an exception set, or with none at the
 * epoch's end (StopIteration). Waits come back every FPY_POLL_MS for
 * signals and the user's timeout; a full set of slots tries the garbage
 * collector once. */
static int wait_batch(LoaderObject *self, feeder_batch **b)
{
    double deadline = self->timeout_s > 0 ? now_s() + self->timeout_s : 0;
    int tried_gc = 0;
    self->last_next_ns = 0;
    for (;;) {
        int rc = timed_next(self, b);
        if (rc == 0)
            return 1;
        if (rc == FEEDER_DONE) {
            self->in_epoch = 0;
            return 0; /* StopIteration */
        }
        if (rc == FEEDER_ETIMEDOUT) {
            if (PyErr_CheckSignals()) {
                abandon_epoch(self);
                return 0;
            }
            if (deadline && now_s() >= deadline) {
                char msg[160];
                snprintf(msg, sizeof(msg), "no batch within timeout=%g s (epoch %llu)",
                         self->timeout_s, (unsigned long long)self->cur_epoch);
                raise_as(LoaderTimeoutError, rc, msg);
                return 0;
            }
            continue;
        }
        if (rc == FEEDER_EBUSY && !tried_gc) {
            /* Tensors caught in reference cycles (a traceback, an autograd
             * graph) may be what holds the slots. */
            tried_gc = 1;
            PyGC_Collect();
            continue;
        }
        if (rc == FEEDER_EBUSY) {
            PyObject *msg = PyUnicode_FromFormat(
                "%s: every batch slot is held by live tensors (num_workers x prefetch_factor "
                "slots; %zd batches are alive). Drop references to old batches, or copy the ones "
                "you keep (tensor.clone()), or raise prefetch_factor",
                feeder_loader_errmsg(self->ld), self->outstanding);
            raise_as(BusyError, rc, msg ? PyUnicode_AsUTF8(msg) : NULL);
            Py_XDECREF(msg);
            return 0;
        }
        if (rc == FEEDER_EWORKER)
            self->in_epoch = 0;
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return 0;
    }
}

static PyObject *loader_next_batch(LoaderObject *self)
{
    if (!loader_ready(self))
        return NULL;
    drain_pending(self);
    feeder_batch *b = NULL;
    if (!wait_batch(self, &b))
        return NULL;
    return batch_result(self, b);
}

static PyObject *loaderiter_next(LoaderIterObject *it)
{
    LoaderObject *ld = it->loader;
    if (it->generation != ld->generation || !ld->in_epoch)
        return NULL;
    return loader_next_batch(ld);
}

static void loaderiter_dealloc(LoaderIterObject *it)
{
    LoaderObject *ld = it->loader;
    /* Dropped before the end of its epoch (break, an exception, Ctrl-C):
     * end the epoch, as PyTorch's iterator shuts its workers down. */
    if (it->generation == ld->generation && ld->in_epoch)
        abandon_epoch(ld);
    Py_DECREF(ld);
    PyObject_Free(it);
}

PyTypeObject LoaderIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder._feeder.LoaderIterator",
    .tp_basicsize = sizeof(LoaderIterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One epoch of a Loader.",
    .tp_dealloc = (destructor)loaderiter_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)loaderiter_next,
};
