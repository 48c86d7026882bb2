/*
 * BatchLoader: the engine under feeder.DataLoader for Python datasets. A
 * feeder batch dataset (feeder_dataset_create_batches) whose get callback
 * calls a Python function in the worker process, a batch sampler whose
 * epochs Python pushes in before iterating them, and fork hooks that keep
 * the interpreter consistent across the workers' fork (the GIL held,
 * PyOS_BeforeFork / AfterFork_Parent / AfterFork_Child). Each lent batch
 * comes back as a Payload: the bytes the worker wrote into the slot (and a
 * second Payload for what overflowed into its memfd), readable through the
 * buffer protocol without a copy; the slot goes back when the last view of
 * them dies. The serialisation itself is Python's (feeder/_worker.py).
 *
 * Threads: the loader is used by the thread that iterates; a Payload may
 * die on any thread (torch frees tensors on its own threads), so a release
 * that arrives while feeder_next runs without the GIL is queued and made
 * when it returns, as for Loader (batch.c).
 */
#include "feederpy.h" /* first: it includes Python.h */

#include <errno.h>
#include <math.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    feeder_loader *ld;
    feeder_dataset *ds;
    feeder_sampler *smp;
    PyObject *fetch; /* fetch(epoch, number, worker_id, indices, room) -> (used, fd, bytes) */
    PyObject *init;  /* init(worker_id), in each worker after the fork; or None */
    uint64_t n;      /* the dataset's length (0: a stream) */
    int nworkers;
    double timeout_s;
    /* The batches of epoch ep_epoch, pushed by set_epoch_batches. */
    int ep_have;
    uint64_t ep_epoch, ep_len, ep_nb;
    uint64_t *ep_idx;
    uint32_t *ep_lens;
    int32_t *ep_workers;
    int in_next;
    int closing;
    Py_ssize_t outstanding;
    feeder_batch **pending;
    Py_ssize_t npending, cappending;
    PyGILState_STATE fork_gil;
    int fork_froze; /* hook_prepare froze the collector's objects (gc.freeze) */
} BatchLoaderObject;

/* A lent batch's bytes: the slot's room (loader and b set: it gives the
 * batch back when it dies), or its extra descriptor's mapping (owner set:
 * the room's Payload, which it keeps alive). */
typedef struct PayloadObject {
    PyObject_HEAD
    BatchLoaderObject *loader;
    feeder_batch *b;
    struct PayloadObject *owner;
    void *data;
    size_t len;
} PayloadObject;

static PyTypeObject PayloadType;

/* ---- the worker side: callbacks that run in the forked workers ---- */

static uint64_t bl_len(void *user) { return ((BatchLoaderObject *)user)->n; }

/* The Python exception as one line for feeder's message (the Python side
 * catches a dataset's own exceptions itself; what reaches here is the
 * machinery's). */
static void exc_text(char *err, size_t errlen)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *name = type ? ((PyTypeObject *)type)->tp_name : "error";
    const char *text = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(err, errlen, "%s: %s", name, text ? text : "");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

static int bl_get(void *user, const feeder_batch_ctx *ctx, feeder_batch_out *out, char *err,
                  size_t errlen)
{
    BatchLoaderObject *self = user;
    PyGILState_STATE st = PyGILState_Ensure();
    int rc = FEEDER_ECALLBACK;
    PyObject *idx = PyList_New(ctx->count), *room = NULL, *r = NULL;
    for (uint32_t i = 0; idx && i < ctx->count; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(ctx->indices[i]);
        if (!v) {
            Py_CLEAR(idx);
            break;
        }
        PyList_SET_ITEM(idx, i, v);
    }
    if (idx)
        room = PyMemoryView_FromMemory(out->data, (Py_ssize_t)out->capacity, PyBUF_WRITE);
    if (room)
        r = PyObject_CallFunction(self->fetch, "KKiOO", (unsigned long long)ctx->epoch,
                                  (unsigned long long)ctx->number, ctx->worker_id, idx, room);
    unsigned long long used = 0, bytes = 0;
    int fd = -1;
    if (r && PyArg_ParseTuple(r, "KiK", &used, &fd, &bytes)) {
        out->used = (size_t)used;
        out->extra_fd = fd;
        out->extra_bytes = (size_t)bytes;
        rc = 0;
    }
    if (rc)
        exc_text(err, errlen);
    if (room) { /* the room is the slot's: no view of it outlives the call */
        PyObject *x = PyObject_CallMethod(room, "release", NULL);
        if (!x)
            PyErr_Clear();
        Py_XDECREF(x);
    }
    Py_XDECREF(r);
    Py_XDECREF(room);
    Py_XDECREF(idx);
    PyGILState_Release(st);
    return rc;
}

static int bl_init(void *user, int worker_id)
{
    BatchLoaderObject *self = user;
    if (self->init == Py_None)
        return 0;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(self->init, "i", worker_id);
    int rc = r ? 0 : 1;
    if (!r)
        PyErr_Clear(); /* the Python side keeps the user's exception itself */
    Py_XDECREF(r);
    PyGILState_Release(st);
    return rc;
}

/* The fork: the forking thread holds the GIL across it, and CPython's own
 * before/after handlers run (os.register_at_fork's, the import lock, the
 * threads' state in the child). The child then gives the GIL back as the
 * parent does: its callbacks take it, and between them (the worker waiting
 * for its next part) threads the dataset started in the worker run, as they
 * do in a torch worker, which waits on its index queue without the GIL (a
 * multiprocessing Queue's feeder thread, say: without the GIL it never sent
 * what the dataset put).
 *
 * The collector's objects are frozen across it (gc.freeze, as Python's
 * documentation advises before a fork): garbage the parent has not collected
 * yet is then never collected in a worker, so no finaliser of the parent's
 * objects runs there. One that did could hang the worker: an abandoned
 * torch DataLoader iterator's __del__ puts to its index queues, whose lock
 * the fork may have copied held by the parent's queue thread, a thread the
 * child does not have (the dataloader suite caught it about once in 80
 * loaders, on two busy cores). The parent unfreezes at once; where the user
 * froze objects already (gc.get_freeze_count() > 0) nothing is frozen, since
 * unfreezing would take their freeze too. */
static int gc_call(const char *name, long *out)
{
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *r = gc ? PyObject_CallMethod(gc, name, NULL) : NULL;
    if (r && out)
        *out = PyLong_AsLong(r);
    int ok = r && !PyErr_Occurred();
    Py_XDECREF(r);
    Py_XDECREF(gc);
    PyErr_Clear();
    return ok;
}

static void hook_prepare(void *user)
{
    BatchLoaderObject *self = user;
    self->fork_gil = PyGILState_Ensure();
    long frozen = -1;
    self->fork_froze = gc_call("get_freeze_count", &frozen) && frozen == 0 && gc_call("freeze", NULL);
    PyOS_BeforeFork();
}

static void hook_parent(void *user)
{
    BatchLoaderObject *self = user;
    PyOS_AfterFork_Parent();
    if (self->fork_froze)
        gc_call("unfreeze", NULL);
    self->fork_froze = 0;
    PyGILState_Release(self->fork_gil);
}

static void hook_child(void *user)
{
    BatchLoaderObject *self = user;
    PyOS_AfterFork_Child(); /* the parent's objects stay frozen here */
    PyGILState_Release(self->fork_gil);
}

/* ---- the batch sampler: the epoch Python pushed ---- */

static uint64_t bs_nbatches(void *user, uint64_t epoch)
{
    BatchLoaderObject *self = user;
    return self->ep_have && self->ep_epoch == epoch ? self->ep_nb : 0;
}

static uint64_t bs_len(void *user, uint64_t epoch)
{
    BatchLoaderObject *self = user;
    return self->ep_have && self->ep_epoch == epoch ? self->ep_len : 0;
}

static int bs_fill(void *user, uint64_t epoch, uint64_t *indices, uint64_t len, uint32_t *lengths,
                   int32_t *workers, uint64_t nb)
{
    BatchLoaderObject *self = user;
    if (!self->ep_have || self->ep_epoch != epoch || len != self->ep_len || nb != self->ep_nb)
        return FEEDER_EINVAL;
    if (len)
        memcpy(indices, self->ep_idx, len * sizeof(*indices));
    if (nb) {
        memcpy(lengths, self->ep_lens, nb * sizeof(*lengths));
        memcpy(workers, self->ep_workers, nb * sizeof(*workers));
    }
    return 0;
}

/* ---- the loader object ---- */

static void bl_free_epoch(BatchLoaderObject *self)
{
    PyMem_RawFree(self->ep_idx);
    PyMem_RawFree(self->ep_lens);
    PyMem_RawFree(self->ep_workers);
    self->ep_idx = NULL;
    self->ep_lens = NULL;
    self->ep_workers = NULL;
    self->ep_have = 0;
}

static void bl_destroy_now(BatchLoaderObject *self)
{
    feeder_loader *ld = self->ld;
    self->ld = NULL;
    if (ld) {
        Py_BEGIN_ALLOW_THREADS
        feeder_loader_destroy(ld);
        Py_END_ALLOW_THREADS
    }
    feeder_sampler_destroy(self->smp);
    feeder_dataset_destroy(self->ds);
    self->smp = NULL;
    self->ds = NULL;
}

static int bl_set(BatchLoaderObject *self, feeder_option opt, int64_t v)
{
    int rc = feeder_loader_set(self->ld, opt, v);
    if (rc)
        raise_rc(rc, feeder_loader_errmsg(self->ld));
    return rc;
}

static int bl_init_obj(BatchLoaderObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fetch", "init", "length", "num_workers", "prefetch_factor",
                             "persistent_workers", "in_order", "timeout", "batch_room",
                             "max_batch", "seed", NULL};
    PyObject *fetch, *init;
    unsigned long long length, room, seed;
    int workers, prefetch, persistent, in_order;
    unsigned int max_batch;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOKiippdKIK", kwlist, &fetch, &init, &length,
                                     &workers, &prefetch, &persistent, &in_order, &timeout,
                                     &room, &max_batch, &seed))
        return -1;
    if (self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "BatchLoader.__init__ called twice");
        return -1;
    }
    if (workers < 1) {
        PyErr_SetString(PyExc_ValueError, "BatchLoader runs worker processes: num_workers >= 1");
        return -1;
    }
    self->fetch = Py_NewRef(fetch);
    self->init = Py_NewRef(init);
    self->n = length;
    self->nworkers = workers;
    self->timeout_s = timeout;
    feeder_batches_callbacks cb = {.len = bl_len, .get = bl_get};
    feeder_batch_sampler_callbacks sc = {.nbatches = bs_nbatches, .len = bs_len,
                                         .fill = bs_fill};
    int rc;
    if ((rc = feeder_dataset_create_batches(&cb, self, &self->ds)) ||
        (rc = feeder_sampler_create_batches(&sc, self, &self->smp)) ||
        (rc = feeder_loader_create(self->ds, self->smp, &self->ld))) {
        raise_rc(rc, "cannot create the loader");
        return -1;
    }
    feeder_fork_hooks h = {hook_prepare, hook_parent, hook_child, self};
    if (bl_set(self, FEEDER_OPT_BATCH_SIZE, max_batch) ||
        bl_set(self, FEEDER_OPT_NUM_WORKERS, workers) ||
        bl_set(self, FEEDER_OPT_PREFETCH_FACTOR, prefetch) ||
        bl_set(self, FEEDER_OPT_PERSISTENT_WORKERS, persistent) ||
        bl_set(self, FEEDER_OPT_IN_ORDER, in_order) ||
        bl_set(self, FEEDER_OPT_BATCH_ROOM, (int64_t)room) ||
        bl_set(self, FEEDER_OPT_SEED, (int64_t)(seed & ((1ull << 53) - 1))) ||
        /* Short waits, so Ctrl-C and the user's timeout are seen (next()). */
        bl_set(self, FEEDER_OPT_TIMEOUT_MS, FPY_POLL_MS))
        return -1;
    if ((rc = feeder_loader_set_fork_hooks(self->ld, &h)) ||
        (rc = feeder_loader_set_worker_init(self->ld, bl_init, self))) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return -1;
    }
    return 0;
}

static void bl_dealloc(BatchLoaderObject *self)
{
    bl_destroy_now(self);
    bl_free_epoch(self);
    PyMem_RawFree(self->pending);
    Py_XDECREF(self->fetch);
    Py_XDECREF(self->init);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int bl_usable(BatchLoaderObject *self)
{
    if (!self->ld || self->closing) {
        PyErr_SetString(StateError, "the loader is closed");
        return 0;
    }
    return 1;
}

/* Copy a buffer of `n` items of `size` bytes into *dst (PyMem_Raw). */
static int take_array(PyObject *obj, size_t size, void **dst, uint64_t *n)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (v.len % (Py_ssize_t)size) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "a buffer of %zu-byte items has %zd bytes", size, v.len);
        return -1;
    }
    *n = (uint64_t)v.len / size;
    *dst = PyMem_RawMalloc(v.len ? (size_t)v.len : 1);
    if (!*dst) {
        PyBuffer_Release(&v);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*dst, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    return 0;
}

/* set_epoch_batches(epoch, indices u64, lengths u32, workers i32): the
 * epoch's batches; then the loader begins that epoch (ending one that ran). */
static PyObject *bl_set_epoch_batches(BatchLoaderObject *self, PyObject *args)
{
    unsigned long long epoch;
    PyObject *idx, *lens, *workers;
    if (!PyArg_ParseTuple(args, "KOOO", &epoch, &idx, &lens, &workers) || !bl_usable(self))
        return NULL;
    uint64_t n_idx, n_lens, n_workers;
    void *a = NULL, *b = NULL, *c = NULL;
    if (take_array(idx, 8, &a, &n_idx) || take_array(lens, 4, &b, &n_lens) ||
        take_array(workers, 4, &c, &n_workers)) {
        PyMem_RawFree(a);
        PyMem_RawFree(b);
        return NULL;
    }
    if (n_lens != n_workers) {
        PyMem_RawFree(a);
        PyMem_RawFree(b);
        PyMem_RawFree(c);
        PyErr_SetString(PyExc_ValueError, "lengths and workers differ in length");
        return NULL;
    }
    int rc;
    feeder_loader *ld = self->ld;
    /* End the running epoch first: its sampler reads the arrays replaced next. */
    Py_BEGIN_ALLOW_THREADS
    rc = feeder_loader_set_epoch(ld, epoch);
    Py_END_ALLOW_THREADS
    bl_free_epoch(self);
    self->ep_idx = a;
    self->ep_lens = b;
    self->ep_workers = c;
    self->ep_len = n_idx;
    self->ep_nb = n_lens;
    self->ep_epoch = epoch;
    self->ep_have = 1;
    if (rc) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
    Py_RETURN_NONE;
}

static void drain_pending(BatchLoaderObject *self)
{
    for (Py_ssize_t i = 0; i < self->npending; i++)
        if (self->ld)
            feeder_batch_release(self->pending[i], NULL);
    self->npending = 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *make_payload(BatchLoaderObject *self, feeder_batch *b)
{
    void *data, *extra;
    size_t len, xlen;
    int rc = feeder_batch_payload(b, &data, &len, &extra, &xlen);
    if (rc) {
        feeder_batch_release(b, NULL);
        raise_rc(rc, "feeder_batch_payload");
        return NULL;
    }
    PayloadObject *p = PyObject_New(PayloadObject, &PayloadType);
    if (!p) {
        feeder_batch_release(b, NULL);
        return NULL;
    }
    p->loader = (BatchLoaderObject *)Py_NewRef(self);
    p->b = b;
    p->owner = NULL;
    p->data = data;
    p->len = len;
    self->outstanding++;
    PyObject *x = Py_None;
    if (extra) {
        PayloadObject *e = PyObject_New(PayloadObject, &PayloadType);
        if (!e) {
            Py_DECREF(p);
            return NULL;
        }
        e->loader = NULL;
        e->b = NULL;
        e->owner = (PayloadObject *)Py_NewRef(p);
        e->data = extra;
        e->len = xlen;
        x = (PyObject *)e;
    } else {
        Py_INCREF(x);
    }
    return Py_BuildValue("KKINN", (unsigned long long)b->epoch, (unsigned long long)b->number,
                         b->count, (PyObject *)p, x);
}

/* next_batch(): (epoch, number, count, payload, extra or None), or None at
 * the end of the epoch. */
static PyObject *bl_next(BatchLoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (!bl_usable(self))
        return NULL;
    double deadline = self->timeout_s > 0 ? now_s() + self->timeout_s : INFINITY;
    for (;;) {
        feeder_batch *b = NULL;
        int rc;
        feeder_loader *ld = self->ld;
        self->in_next = 1;
        Py_BEGIN_ALLOW_THREADS
        rc = feeder_next(ld, &b);
        Py_END_ALLOW_THREADS
        self->in_next = 0;
        drain_pending(self);
        if (rc == 0)
            return make_payload(self, b);
        if (rc == FEEDER_DONE)
            Py_RETURN_NONE;
        if (rc != FEEDER_ETIMEDOUT) {
            raise_rc(rc, feeder_loader_errmsg(self->ld));
            return NULL;
        }
        if (PyErr_CheckSignals() < 0)
            return NULL;
        if (now_s() >= deadline) {
            /* The loader's own wait is the short poll; keep only what it says
             * of the batch waited for and the worker holding it. */
            const char *m = feeder_loader_errmsg(self->ld);
            const char *a = strchr(m, '('), *z = strstr(m, "); call again");
            char msg[1200];
            if (a && z && z > a)
                snprintf(msg, sizeof(msg), "DataLoader timed out after %g seconds %.*s)",
                         self->timeout_s, (int)(z - a), a);
            else
                snprintf(msg, sizeof(msg), "DataLoader timed out after %g seconds",
                         self->timeout_s);
            raise_rc(FEEDER_ETIMEDOUT, msg);
            return NULL;
        }
    }
}

static PyObject *bl_close(BatchLoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (self->outstanding == 0)
        bl_destroy_now(self);
    else
        self->closing = 1; /* destroyed when the last payload dies */
    Py_RETURN_NONE;
}

static PyObject *bl_worker_pid(BatchLoaderObject *self, PyObject *arg)
{
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(self->ld ? feeder_loader_worker_pid(self->ld, (int)id) : -1);
}

static PyObject *bl_get_outstanding(BatchLoaderObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->outstanding);
}

static PyObject *bl_get_slots(BatchLoaderObject *self, void *closure)
{
    (void)closure;
    feeder_stats st;
    if (!self->ld || feeder_loader_stats(self->ld, &st))
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong(st.slots);
}

static PyMethodDef bl_methods[] = {
    {"set_epoch_batches", (PyCFunction)bl_set_epoch_batches, METH_VARARGS,
     "set_epoch_batches(epoch, indices, lengths, workers): the epoch's batches (uint64 indices, "
     "uint32 lengths, int32 workers, -1 for any); the running epoch ends."},
    {"next_batch", (PyCFunction)bl_next, METH_NOARGS,
     "next_batch() -> (epoch, number, count, payload, extra) or None at the epoch's end."},
    {"close", (PyCFunction)bl_close, METH_NOARGS,
     "Stop the workers (once the last payload is released)."},
    {"worker_pid", (PyCFunction)bl_worker_pid, METH_O, "Pid of worker `id`, or -1."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef bl_getset[] = {
    {"outstanding", (getter)bl_get_outstanding, NULL, "Payloads alive (slots lent).", NULL},
    {"slots", (getter)bl_get_slots, NULL, "Batch slots (num_workers x prefetch_factor).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject BatchLoaderType = {
    FPY_TYPE_HEAD("feeder._feeder.BatchLoader", BatchLoaderObject, Py_TPFLAGS_DEFAULT, bl_dealloc),
    .tp_doc = "BatchLoader(fetch, init, length, num_workers, prefetch_factor, persistent_workers, "
              "in_order, timeout, batch_room, max_batch, seed): feeder's workers running a "
              "Python fetch(epoch, number, worker_id, indices, room) -> (used, fd, bytes). "
              "The engine of feeder.DataLoader; not meant to be used directly.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)bl_init_obj,
    .tp_methods = bl_methods,
    .tp_getset = bl_getset,
};

/* ---- payloads ---- */

static void payload_dealloc(PayloadObject *self)
{
    BatchLoaderObject *l = self->loader;
    if (l && self->b) {
        l->outstanding--;
        if (l->ld && !l->in_next) {
            feeder_batch_release(self->b, NULL);
        } else if (l->ld) {
            if (l->npending == l->cappending) {
                Py_ssize_t cap = l->cappending ? 2 * l->cappending : 16;
                feeder_batch **p = PyMem_RawRealloc(l->pending, (size_t)cap * sizeof(*p));
                if (p) {
                    l->pending = p;
                    l->cappending = cap;
                }
            }
            if (l->npending < l->cappending) /* else the slot stays lent: EBUSY, no hang */
                l->pending[l->npending++] = self->b;
        }
        if (l->closing && l->outstanding == 0 && !l->in_next)
            bl_destroy_now(l);
    }
    Py_XDECREF(l);
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static int payload_getbuffer(PayloadObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, (Py_ssize_t)self->len, 0, flags);
}

static PyBufferProcs payload_buffer = {(getbufferproc)payload_getbuffer, NULL};

static Py_ssize_t payload_len(PayloadObject *self) { return (Py_ssize_t)self->len; }

static PySequenceMethods payload_seq = {.sq_length = (lenfunc)payload_len};

static PyTypeObject PayloadType = {
    FPY_TYPE_HEAD("feeder._feeder.Payload", PayloadObject, Py_TPFLAGS_DEFAULT, payload_dealloc),
    .tp_doc = "The bytes a worker wrote into a batch slot, or those past the slot's room (the "
              "worker's memfd, mapped); the batch is lent while any view of them lives.",
    .tp_as_buffer = &payload_buffer,
    .tp_as_sequence = &payload_seq,
};

int batches_ready_types(void)
{
    return PyType_Ready(&PayloadType) < 0 ? -1 : 0;
}
