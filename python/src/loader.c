/*
 * feeder._feeder.Loader: its methods (set_epoch, state_dict and
 * load_state_dict, stats, worker_pids, gpu_status, backends, close once no
 * lent batch is alive, the context manager), its attributes and its type.
 * __init__ is in options.c, iteration in iter.c, what they share in
 * loader_state.c.
 */
#include "feederpy.h"

static void loader_dealloc(LoaderObject *self)
{
    /* Every Batch holds its Loader: none is alive here. */
    loader_destroy_now(self);
    loader_sampler_free(self); /* after the loader that borrowed it */
    Py_XDECREF(self->dataset);
    Py_XDECREF(self->to_torch);
    Py_XDECREF(self->cap_to_torch);
    Py_XDECREF(self->raw_stream);
    Py_XDECREF(self->resume_state);
    Py_XDECREF(self->abandoned_state);
    PyMem_RawFree(self->pending);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t loader_len(LoaderObject *self)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return -1;
    }
    double bs = 0, dl = 0;
    feeder_loader_get(self->ld, FEEDER_OPT_BATCH_SIZE, &bs);
    feeder_loader_get(self->ld, FEEDER_OPT_DROP_LAST, &dl);
    uint64_t n = feeder_dataset_size(self->dataset->ds);
    if (self->smp_batched) /* as torch: len(batch_sampler) batches */
        return loader_sampler_len(self);
    if (self->py_sampler) { /* as torch: len(sampler) samples an epoch */
        Py_ssize_t sn = loader_sampler_len(self);
        if (sn < 0)
            return -1;
        n = (uint64_t)sn;
    }
    return (Py_ssize_t)feeder_batch_count(n, (uint32_t)bs, dl != 0);
}

static PyObject *loader_set_epoch(LoaderObject *self, PyObject *arg)
{
    unsigned long long e = PyLong_AsUnsignedLongLong(arg);
    if (e == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (self->resume_pending && e != self->resume_epoch) {
        self->resume_pending = 0;
        Py_CLEAR(self->resume_state);
    }
    self->next_epoch = e;
    Py_RETURN_NONE;
}

static PyObject *loader_state_dict(LoaderObject *self, PyObject *unused)
{
    if (!loader_ready(self))
        return NULL;
    if (self->resume_pending)
        return PyDict_Copy(self->resume_state);
    if (self->in_epoch)
        return state_save(self, self->cur_epoch);
    if (self->abandoned_state)
        return PyDict_Copy(self->abandoned_state);
    if (loader_sampler_push(self, self->next_epoch, 1))
        return NULL;
    int rc = feeder_loader_set_epoch(self->ld, self->next_epoch);
    if (rc) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
    return state_save(self, self->next_epoch);
}

static PyObject *loader_load_state_dict(LoaderObject *self, PyObject *sd)
{
    if (!loader_ready(self))
        return NULL;
    if (!PyDict_Check(sd)) {
        PyErr_Format(StateError, "load_state_dict: expected the dict state_dict() returned, got %R",
                     (PyObject *)Py_TYPE(sd));
        return NULL;
    }
    PyObject *blob = PyDict_GetItemString(sd, "feeder_state");
    PyObject *epoch = PyDict_GetItemString(sd, "epoch");
    if (!blob || !PyBytes_Check(blob) || !epoch || !PyLong_Check(epoch)) {
        PyErr_SetString(StateError, "load_state_dict: the dict needs 'feeder_state' (bytes) and "
                                    "'epoch' (int), as state_dict() returns");
        return NULL;
    }
    unsigned long long e = PyLong_AsUnsignedLongLong(epoch);
    if (e == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (loader_sampler_push(self, e, 1)) /* the state's epoch, drawn for its check */
        return NULL;
    int rc = feeder_loader_state_load(self->ld, PyBytes_AS_STRING(blob),
                                      (size_t)PyBytes_GET_SIZE(blob));
    if (rc == FEEDER_ESTATE) {
        raise_as(StateError, rc,
                 "load_state_dict: the loader has already started (it delivered batches); load "
                 "the state into a new Loader before iterating it");
        return NULL;
    }
    if (rc) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
    self->resume_pending = 1;
    self->resume_epoch = e;
    Py_XSETREF(self->resume_state, PyDict_Copy(sd));
    Py_CLEAR(self->abandoned_state);
    Py_RETURN_NONE;
}

static PyObject *loader_stats(LoaderObject *self, PyObject *unused)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    feeder_stats s;
    int rc = feeder_loader_stats(self->ld, &s);
    if (rc) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
#define F(name) #name, (unsigned long long)s.name
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:K,s:K}",
        F(batches), F(samples), F(skipped), F(failed_batches), F(bytes_read), F(read_ns),
        F(decode_ns), F(transform_ns), F(wait_ns), F(first_batch_ns), F(shm_bytes), F(slots),
        F(worker_restarts), F(pin_ns), F(h2d_ns), F(h2d_bytes), F(gpu_batches), F(pinned_bytes),
        F(device_bytes), F(gpu_decoded), F(gpu_fallback), F(gpu_decode_ns),
        F(hybrid_cpu_permille), F(dropped), F(batches_ahead));
#undef F
}

static PyObject *loader_worker_pids(LoaderObject *self, PyObject *unused)
{
    if (!self->ld)
        return PyList_New(0);
    double n = 0;
    feeder_loader_get(self->ld, FEEDER_OPT_NUM_WORKERS, &n);
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < (int)n; i++) {
        int pid = feeder_loader_worker_pid(self->ld, i);
        if (pid > 0) {
            PyObject *p = PyLong_FromLong(pid);
            if (!p || PyList_Append(l, p)) {
                Py_XDECREF(p);
                Py_CLEAR(l);
                break;
            }
            Py_DECREF(p);
        }
    }
    return l;
}

static PyObject *loader_gpu_status(LoaderObject *self, PyObject *unused)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    const char *why = "";
    int on = feeder_loader_gpu_status(self->ld, &why);
    return Py_BuildValue("(Os)", on == 1 ? Py_True : Py_False, why ? why : "");
}

static const char *decoder_name(int d)
{
    const char *name = feeder_option_value_name(FEEDER_OPT_DECODER, d);
    return name ? name : "?";
}

static PyObject *loader_decoder(LoaderObject *self, PyObject *unused)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    const char *why = "";
    int d = feeder_loader_decoder(self->ld, &why);
    const char *io_why = "";
    const char *io = feeder_loader_io_backend(self->ld, &io_why);
    return Py_BuildValue("{s:s,s:s,s:s,s:s}", "decoder", decoder_name(d),
                         "decoder_reason", why ? why : "", "io", io ? io : "", "io_reason",
                         io_why ? io_why : "");
}

static PyObject *loader_close(LoaderObject *self, PyObject *unused)
{
    if (!self->ld)
        Py_RETURN_NONE;
    if (self->in_next) {
        PyErr_SetString(PyExc_RuntimeError, "close(): the loader is waiting for a batch in "
                                            "another thread");
        return NULL;
    }
    abandon_epoch(self);
    self->closing = 1;
    if (self->outstanding == 0) {
        /* Kills the workers (SIGKILL at worst): bounded. */
        loader_destroy_now(self);
        Py_RETURN_NONE;
    }
    /* Live tensors view the slots, which destroy would unmap: end the epoch
     * instead (the workers stop once their parts in flight are done, even
     * persistent ones at destroy) and destroy when the last batch dies. */
    feeder_loader *ld = self->ld;
    uint64_t next = self->next_epoch;
    Py_BEGIN_ALLOW_THREADS
    feeder_loader_set_epoch(ld, next);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *loader_enter(LoaderObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *loader_exit(LoaderObject *self, PyObject *args)
{
    PyObject *r = loader_close(self, NULL);
    Py_XDECREF(r);
    if (!r)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *loader_get_last_batch(LoaderObject *self, void *c)
{
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:I,s:n,s:K}", "data_ptr",
                         (unsigned long long)self->last_data, "labels_ptr",
                         (unsigned long long)self->last_labels, "epoch",
                         (unsigned long long)self->last_epoch, "number",
                         (unsigned long long)self->last_number, "count", self->last_count,
                         "outstanding", self->outstanding, "next_ns",
                         (unsigned long long)self->last_next_ns);
}

static PyObject *loader_get_dataset(LoaderObject *self, void *c)
{
    return Py_NewRef(self->dataset ? (PyObject *)self->dataset : Py_None);
}

static PyObject *loader_get_epoch(LoaderObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->in_epoch ? self->cur_epoch : self->next_epoch);
}

static PyObject *loader_get_opt(LoaderObject *self, void *c)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    double v = 0;
    feeder_loader_get(self->ld, (feeder_option)(intptr_t)c, &v);
    return PyLong_FromLongLong((long long)v);
}

static PyMethodDef loader_methods[] = {
    {"set_epoch", (PyCFunction)loader_set_epoch, METH_O,
     "set_epoch(n): the next iter() runs epoch n (order and random crops are keyed by it)."},
    {"state_dict", (PyCFunction)loader_state_dict, METH_NOARGS,
     "state_dict(): where the loader stands, {'feeder_state': bytes, 'epoch': int, 'version': 1}."},
    {"load_state_dict", (PyCFunction)loader_load_state_dict, METH_O,
     "load_state_dict(d): resume from state_dict() on a loader that has not started."},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "stats(): feeder's counters as a dict."},
    {"worker_pids", (PyCFunction)loader_worker_pids, METH_NOARGS,
     "worker_pids(): pids of the running workers."},
    {"gpu_status", (PyCFunction)loader_gpu_status, METH_NOARGS,
     "gpu_status(): (device batches?, reason), valid after the first batch."},
    {"backends", (PyCFunction)loader_decoder, METH_NOARGS,
     "backends(): the decoder and read path in use, and why."},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "close(): end the epoch and stop the workers; the loader is destroyed once no batch it "
     "lent is alive."},
    {"__enter__", (PyCFunction)loader_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)loader_exit, METH_VARARGS, NULL},
    {NULL}};

static PyObject *loader_get_outstanding(LoaderObject *self, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(self->outstanding);
}

static PyObject *loader_get_slots(LoaderObject *self, void *c)
{
    (void)c;
    feeder_stats st;
    if (!self->ld || feeder_loader_stats(self->ld, &st))
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong(st.slots);
}

static PyGetSetDef loader_getset[] = {
    {"dataset", (getter)loader_get_dataset, NULL, "the dataset", NULL},
    {"epoch", (getter)loader_get_epoch, NULL, "the running epoch, else the next one", NULL},
    {"batch_size", (getter)loader_get_opt, NULL, "samples per batch",
     (void *)(intptr_t)FEEDER_OPT_BATCH_SIZE},
    {"num_workers", (getter)loader_get_opt, NULL, "worker processes",
     (void *)(intptr_t)FEEDER_OPT_NUM_WORKERS},
    {"_last_batch", (getter)loader_get_last_batch, NULL,
     "debug: the C pointers and numbers of the last batch lent", NULL},
    {"outstanding", (getter)loader_get_outstanding, NULL,
     "batches alive (each holds its slot while any of its tensors lives)", NULL},
    {"slots", (getter)loader_get_slots, NULL,
     "batch slots (num_workers x prefetch_factor); 0 before the first batch", NULL},
    {NULL}};

static PySequenceMethods loader_as_seq = {.sq_length = (lenfunc)loader_len};

PyTypeObject LoaderType = {
    FPY_TYPE_HEAD("feeder._feeder.Loader", LoaderObject,
                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, loader_dealloc),
    .tp_doc = "Loader(dataset, batch_size=64, shuffle=False, num_workers=0, ...): see feeder.Loader.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)loader_init,
    .tp_iter = (getiterfunc)loader_iter,
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_as_sequence = &loader_as_seq,
};
