/*
 * An epoch's iteration: iter(loader) begins the next epoch (or the resumed
 * one) and returns a LoaderIterator; one begun while another's epoch runs
 * ends that epoch, and the old iterator warns once and stops; each next() waits for a batch without
 * the GIL (polling for signals and the user's timeout, one garbage
 * collection when every slot is held), then lends it: a Batch and its two
 * Arrays (or torch tensors), or a fields batch's dict (fields.c). Releases
 * that arrive while feeder_next runs are queued by loader_release (batch.c)
 * and made here as soon as it returns.
 */
#include "feederpy.h" /* first: it includes Python.h */

#include <time.h>

typedef struct {
    PyObject_HEAD
    LoaderObject *loader;
    uint64_t generation;
    uint64_t epoch;
    int finished; /* its epoch ended as it iterated, or it said why it stopped */
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
    if (loader_sampler_push(self, self->resume_pending ? self->resume_epoch : self->next_epoch, 0))
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
    it->epoch = self->cur_epoch;
    it->finished = 0;
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

/* An image batch's images (labels 0) or labels as an Array. */
static ArrayObject *make_array(BatchObject *batch, int labels)
{
    ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
    if (!a)
        return NULL;
    const feeder_batch *b = batch->b;
    a->batch = (BatchObject *)Py_NewRef(batch);
    int on_device = b->device >= 0 && b->device_data;
    a->device = (DLDevice){on_device ? kDLCUDA : kDLCPU, on_device ? b->device : 0};
    if (labels) {
        a->data = (void *)(on_device ? b->device_labels : b->labels);
        a->ndim = 1;
        a->shape[0] = b->count;
        a->dtype = (DLDataType){kDLInt, 64, 1};
    } else {
        a->data = on_device ? b->device_data : b->data;
        a->ndim = 4;
        a->shape[0] = b->count;
        if (b->layout == FEEDER_LAYOUT_NCHW) {
            a->shape[1] = b->channels;
            a->shape[2] = b->height;
            a->shape[3] = b->width;
        } else {
            a->shape[1] = b->height;
            a->shape[2] = b->width;
            a->shape[3] = b->channels;
        }
        switch (on_device ? b->dtype : FEEDER_DTYPE_UINT8) {
        case FEEDER_DTYPE_FLOAT16:
            a->dtype = (DLDataType){kDLFloat, 16, 1};
            break;
        case FEEDER_DTYPE_BFLOAT16:
            a->dtype = (DLDataType){kDLBfloat, 16, 1};
            break;
        case FEEDER_DTYPE_FLOAT32:
            a->dtype = (DLDataType){kDLFloat, 32, 1};
            break;
        default:
            a->dtype = (DLDataType){kDLUInt, 8, 1};
        }
    }
    int64_t st = 1;
    for (int i = a->ndim - 1; i >= 0; i--) {
        a->strides[i] = st;
        st *= a->shape[i];
    }
    return a;
}

static void warn_host_batches(LoaderObject *self)
{
    self->warned_host = 1;
    const char *why = "";
    feeder_loader_gpu_status(self->ld, &why);
    PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                     "feeder: device=cuda:%d was asked for, but batches are on the host: %s",
                     self->device, why && why[0] ? why : "no reason given");
}

/* Lend batch b to Python: a fields batch's dict, or (images, labels) as
 * arrays or torch tensors. NULL with the exception set (b released). */
static PyObject *batch_result(LoaderObject *self, feeder_batch *b)
{
#ifndef FEEDER_PY_CUDA
    if (b->device_data) {
        feeder_batch_release(b, NULL);
        PyErr_SetString(FeederError,
                        "feeder delivered a CUDA batch, but this build of feeder's Python module "
                        "has no CUDA (cuda_runtime_api.h was not found when it was compiled): "
                        "rebuild it with CUDA_HOME set (python/setup.py)");
        return NULL;
    }
#endif
    self->last_data = (uintptr_t)(b->device_data ? b->device_data : b->data);
    self->last_labels = (uintptr_t)(b->device_data ? (const void *)b->device_labels
                                                   : (const void *)b->labels);
    self->last_epoch = b->epoch;
    self->last_number = b->number;
    self->last_count = b->count;

    BatchObject *bo = PyObject_New(BatchObject, &BatchType);
    if (!bo) {
        feeder_batch_release(b, NULL);
        return NULL;
    }
    bo->loader = (LoaderObject *)Py_NewRef(self);
    bo->b = b;
    bo->nstreams = 0;
    self->outstanding++;
    if (self->device >= 0 && !b->device_data && !self->warned_host)
        warn_host_batches(self);
    if (self->fields)
        return fields_batch(self, bo);
    ArrayObject *images = make_array(bo, 0);
    ArrayObject *labels = images ? make_array(bo, 1) : NULL;
    Py_DECREF(bo);
    if (!labels) {
        Py_XDECREF(images);
        return NULL;
    }
    if (!self->to_torch)
        return Py_BuildValue("(NN)", images, labels);
    PyObject *ti = to_torch(self, images);
    Py_DECREF(images);
    PyObject *tl = ti ? to_torch(self, labels) : NULL;
    Py_DECREF(labels);
    if (!tl) {
        Py_XDECREF(ti);
        return NULL;
    }
    return Py_BuildValue("(NN)", ti, tl);
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

/* A Loader runs one epoch at a time: an iterator whose epoch a newer
 * iter(loader) ended says so once (RuntimeWarning), then stops. */
static PyObject *superseded(LoaderIterObject *it)
{
    if (it->finished)
        return NULL;
    it->finished = 1;
    PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                     "feeder: a newer iter(loader) ended this iterator's epoch %llu early, so it "
                     "stops here (a Loader runs one epoch at a time; finish or drop an iterator "
                     "before starting the next)",
                     (unsigned long long)it->epoch);
    return NULL;
}

static PyObject *loaderiter_next(LoaderIterObject *it)
{
    LoaderObject *ld = it->loader;
    if (it->generation != ld->generation)
        return superseded(it);
    if (!ld->in_epoch) {
        it->finished = 1;
        return NULL;
    }
    PyObject *r = loader_next_batch(ld);
    if (!r && !PyErr_Occurred())
        it->finished = 1;
    return r;
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
    FPY_TYPE_HEAD("feeder._feeder.LoaderIterator", LoaderIterObject,
                  Py_TPFLAGS_DEFAULT, loaderiter_dealloc),
    .tp_doc = "One epoch of a Loader.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)loaderiter_next,
};
