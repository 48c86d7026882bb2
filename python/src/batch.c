/*
 * A lent batch in Python: Batch (the feeder_batch, given back when it
 * dies), Array (a view of its images, labels or a field in the slot), the
 * DLPack export (capsules, deleters, consumer streams) and the hand-off to
 * torch tensors. What next() returns is put together in iter.c.
 */
#include "feederpy.h"

/* A Batch died: give its slot back now, or after feeder_next returns. */
static void loader_release(LoaderObject *self, feeder_batch *b, void *stream)
{
    self->outstanding--;
    if (self->ld) {
        if (!self->in_next) {
            feeder_batch_release(b, stream);
        } else {
            if (self->npending == self->cappending) {
                Py_ssize_t cap = self->cappending ? 2 * self->cappending : 16;
                pending_release *p = PyMem_RawRealloc(self->pending, (size_t)cap * sizeof(*p));
                if (!p) {
                    /* Nothing to report to: the slot stays lent (feeder_next
                     * then says EBUSY rather than hanging). */
                    return;
                }
                self->pending = p;
                self->cappending = cap;
            }
            self->pending[self->npending++] = (pending_release){b, stream};
        }
    }
    if (self->closing && self->outstanding == 0 && !self->in_next)
        loader_destroy_now(self);
}

static void *release_stream(BatchObject *self)
{
    if (self->nstreams == 0)
        return NULL;
#ifdef FEEDER_PY_CUDA
    /* feeder takes one stream: make the first wait for the others. */
    if (self->nstreams > 1) {
        int prev = -1;
        cudaGetDevice(&prev);
        cudaSetDevice(self->b->device);
        for (int i = 1; i < self->nstreams; i++) {
            cudaEvent_t ev;
            if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
                break;
            cudaEventRecord(ev, (cudaStream_t)self->streams[i]);
            cudaStreamWaitEvent((cudaStream_t)self->streams[0], ev, 0);
            cudaEventDestroy(ev);
        }
        if (prev >= 0)
            cudaSetDevice(prev);
    }
#endif
    return self->streams[0];
}

static void batch_dealloc(BatchObject *self)
{
    if (self->b)
        loader_release(self->loader, self->b, release_stream(self));
    Py_XDECREF(self->loader);
    PyObject_Free(self);
}

static void array_dealloc(ArrayObject *self)
{
    Py_XDECREF(self->batch);
    PyObject_Free(self);
}

/* ---- DLPack export ---- */

typedef struct dl_export {
    union {
        DLManagedTensor m;
        DLManagedTensorVersioned v;
    } u;
    int64_t shape[FEEDER_FIELD_MAX_DIMS + 1], strides[FEEDER_FIELD_MAX_DIMS + 1];
    PyObject *owner; /* the Array */
} dl_export;

static void dl_free(dl_export *e)
{
    /* Consumers may free on any thread, even at exit. */
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF(e->owner);
    PyMem_RawFree(e);
    PyGILState_Release(st);
}

static void dl_deleter(DLManagedTensor *m) { dl_free((dl_export *)m->manager_ctx); }
static void dl_deleter_v(DLManagedTensorVersioned *m) { dl_free((dl_export *)m->manager_ctx); }

static void capsule_dtor(PyObject *cap)
{
    /* A consumer renames the capsule when it takes ownership. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        m->deleter(m);
    }
}

static PyObject *array_export(ArrayObject *self, int versioned)
{
    dl_export *e = PyMem_RawCalloc(1, sizeof(*e));
    if (!e)
        return PyErr_NoMemory();
    memcpy(e->shape, self->shape, sizeof(e->shape));
    memcpy(e->strides, self->strides, sizeof(e->strides));
    DLTensor t = {.data = self->data,
                  .device = self->device,
                  .ndim = self->ndim,
                  .dtype = self->dtype,
                  .shape = e->shape,
                  .strides = e->strides,
                  .byte_offset = 0};
    e->owner = Py_NewRef(self);
    PyObject *cap;
    if (versioned) {
        e->u.v.version = (DLPackVersion){FPY_DLPACK_MAJOR, FPY_DLPACK_MINOR};
        e->u.v.manager_ctx = e;
        e->u.v.deleter = dl_deleter_v;
        e->u.v.flags = 0;
        e->u.v.dl_tensor = t;
        cap = PyCapsule_New(&e->u.v, "dltensor_versioned", capsule_dtor);
    } else {
        e->u.m.dl_tensor = t;
        e->u.m.manager_ctx = e;
        e->u.m.deleter = dl_deleter;
        cap = PyCapsule_New(&e->u.m, "dltensor", capsule_dtor);
    }
    if (!cap) {
        Py_DECREF(self);
        PyMem_RawFree(e);
    }
    return cap;
}

static int array_stream_wait(ArrayObject *self, PyObject *stream)
{
    if (self->device.device_type != kDLCUDA)
        return 0;
    /* DLPack: None is the legacy default stream (1), -1 asks for no
     * synchronisation, 0 is ambiguous and refused. */
    long long s = 1;
    if (stream != Py_None) {
        s = PyLong_AsLongLong(stream);
        if (s == -1 && PyErr_Occurred())
            return -1;
    }
    if (s == 0) {
        PyErr_SetString(PyExc_BufferError,
                        "__dlpack__(stream=0): 0 is ambiguous for CUDA; pass 1 for the legacy "
                        "default stream, 2 for the per-thread one, or a cudaStream_t");
        return -1;
    }
    if (s == -1)
        return 0;
    void *sp = (void *)(intptr_t)s;
#ifdef FEEDER_PY_CUDA
    cudaError_t ce = feeder_batch_wait(self->batch->b, (cudaStream_t)sp);
    if (ce != cudaSuccess) {
        PyErr_Format(PyExc_BufferError, "feeder_batch_wait: %s", cudaGetErrorString(ce));
        return -1;
    }
#endif
    BatchObject *b = self->batch;
    int i;
    for (i = 0; i < b->nstreams && b->streams[i] != sp; i++)
        ;
    if (i == b->nstreams && b->nstreams < FPY_MAX_STREAMS)
        b->streams[b->nstreams++] = sp;
    return 0;
}

static PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError,
                        "feeder arrays are views of a batch slot: __dlpack__(copy=True) is not "
                        "supported; copy in the consumer");
        return NULL;
    }
    if (dl_device != Py_None) {
        int type, id;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id))
            return NULL;
        if (type != self->device.device_type || id != self->device.device_id) {
            PyErr_Format(PyExc_BufferError, "__dlpack__(dl_device=%R): the array is on (%d, %d)",
                         dl_device, self->device.device_type, self->device.device_id);
            return NULL;
        }
    }
    int versioned = 0;
    if (max_version != Py_None) {
        PyObject *major = PySequence_GetItem(max_version, 0);
        if (!major)
            return NULL;
        long m = PyLong_AsLong(major);
        Py_DECREF(major);
        if (m == -1 && PyErr_Occurred())
            return NULL;
        versioned = m >= 1;
    }
    if (array_stream_wait(self, stream))
        return NULL;
    return array_export(self, versioned);
}

static PyObject *array_dlpack_device(ArrayObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", self->device.device_type, self->device.device_id);
}

static const char *typestr(DLDataType t)
{
    if (t.code == kDLUInt)
        return "|u1";
    if (t.code == kDLInt)
        return "<i8";
    if (t.code == kDLFloat)
        return t.bits == 16 ? "<f2" : "<f4";
    return "|V2"; /* bfloat16: numpy has no such type */
}

static const char *dtype_name(DLDataType t)
{
    if (t.code == kDLUInt)
        return "uint8";
    if (t.code == kDLInt)
        return "int64";
    if (t.code == kDLFloat)
        return t.bits == 16 ? "float16" : "float32";
    return "bfloat16";
}

static PyObject *array_shape_tuple(ArrayObject *self)
{
    PyObject *t = PyTuple_New(self->ndim);
    for (int i = 0; t && i < self->ndim; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(self->shape[i]));
    return t;
}

static PyObject *array_get_shape(ArrayObject *self, void *c) { return array_shape_tuple(self); }

static PyObject *array_get_dtype(ArrayObject *self, void *c)
{
    return PyUnicode_FromString(dtype_name(self->dtype));
}

static PyObject *array_get_device(ArrayObject *self, void *c)
{
    if (self->device.device_type == kDLCUDA)
        return PyUnicode_FromFormat("cuda:%d", self->device.device_id);
    return PyUnicode_FromString("cpu");
}

static PyObject *array_get_data_ptr(ArrayObject *self, void *c)
{
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *array_get_nbytes(ArrayObject *self, void *c)
{
    int64_t n = self->dtype.bits / 8;
    for (int i = 0; i < self->ndim; i++)
        n *= self->shape[i];
    return PyLong_FromLongLong(n);
}

static PyObject *array_get_interface(ArrayObject *self, void *c)
{
    if (self->device.device_type != kDLCPU) {
        PyErr_SetString(PyExc_AttributeError,
                        "__array_interface__: a device array (use torch.from_dlpack or cupy)");
        return NULL;
    }
    PyObject *shape = array_shape_tuple(self);
    if (!shape)
        return NULL;
    return Py_BuildValue("{s:N,s:s,s:(NO),s:i}", "shape", shape, "typestr", typestr(self->dtype),
                         "data", PyLong_FromVoidPtr(self->data), Py_False, "version", 3);
}

static PyObject *array_get_epoch(ArrayObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->batch->b->epoch);
}

static PyObject *array_get_number(ArrayObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->batch->b->number);
}

static PyObject *array_get_indices(ArrayObject *self, void *c)
{
    const feeder_batch *b = self->batch->b;
    PyObject *l = PyList_New(b->count);
    for (uint32_t i = 0; l && i < b->count; i++)
        PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(b->indices[i]));
    return l;
}

static Py_ssize_t array_len(ArrayObject *self) { return (Py_ssize_t)self->shape[0]; }

static PyObject *array_repr(ArrayObject *self)
{
    PyObject *shape = array_shape_tuple(self);
    if (!shape)
        return NULL;
    PyObject *dev = array_get_device(self, NULL);
    PyObject *r = PyUnicode_FromFormat("<feeder.Array shape=%R dtype=%s device=%U>", shape,
                                       dtype_name(self->dtype), dev);
    Py_DECREF(shape);
    Py_XDECREF(dev);
    return r;
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a DLPack capsule "
     "viewing the batch slot (no copy). On CUDA, `stream` waits for the batch's ready event."},
    {"__dlpack_device__", (PyCFunction)array_dlpack_device, METH_NOARGS,
     "(device_type, device_id) as DLPack numbers them."},
    {NULL}};

static PyGetSetDef array_getset[] = {
    {"shape", (getter)array_get_shape, NULL, "shape tuple", NULL},
    {"dtype", (getter)array_get_dtype, NULL, "element type name", NULL},
    {"device", (getter)array_get_device, NULL, "'cpu' or 'cuda:N'", NULL},
    {"data_ptr", (getter)array_get_data_ptr, NULL, "address of the first element (in the slot)",
     NULL},
    {"nbytes", (getter)array_get_nbytes, NULL, "bytes viewed", NULL},
    {"epoch", (getter)array_get_epoch, NULL, "epoch of the batch", NULL},
    {"number", (getter)array_get_number, NULL, "batch number within the epoch", NULL},
    {"indices", (getter)array_get_indices, NULL, "dataset indices of the batch's samples", NULL},
    {"__array_interface__", (getter)array_get_interface, NULL, "numpy's view protocol (host)",
     NULL},
    {NULL}};

static PySequenceMethods array_as_seq = {.sq_length = (lenfunc)array_len};

PyTypeObject ArrayType = {
    FPY_TYPE_HEAD("feeder.Array", ArrayObject, Py_TPFLAGS_DEFAULT, array_dealloc),
    .tp_doc = "A view of a batch's images or labels in feeder's batch slot. torch.from_dlpack, "
              "numpy.from_dlpack and numpy.asarray take it without a copy; the slot goes back "
              "to the loader when the last view is freed.",
    .tp_methods = array_methods,
    .tp_getset = array_getset,
    .tp_as_sequence = &array_as_seq,
    .tp_repr = (reprfunc)array_repr,
};

PyTypeObject BatchType = {
    FPY_TYPE_HEAD("feeder._feeder.Batch", BatchObject, Py_TPFLAGS_DEFAULT, batch_dealloc),
    .tp_doc = "A lent batch slot (internal).",
};

/* torch's current stream on the array's device, as __dlpack__'s stream
 * argument (torch.from_dlpack passes 1 for the legacy default stream, 0),
 * or NULL with no error when torch has no such call here. */
static PyObject *torch_stream(LoaderObject *self, const ArrayObject *a)
{
    if (!self->raw_stream)
        return NULL;
    PyObject *dev = PyLong_FromLong(a->device.device_id);
    PyObject *s = dev ? PyObject_CallOneArg(self->raw_stream, dev) : NULL;
    Py_XDECREF(dev);
    if (!s) {
        PyErr_Clear();
        return NULL;
    }
    long long v = PyLong_AsLongLong(s);
    Py_DECREF(s);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    return PyLong_FromLongLong(v == 0 ? 1 : v);
}

PyObject *to_torch(LoaderObject *self, ArrayObject *a)
{
    /* Host arrays go to torch as a capsule (no Python-level protocol
     * calls). Device arrays too, once torch's current stream waits for the
     * batch (what torch.from_dlpack would ask __dlpack__ for); without
     * torch's raw-stream call, through torch.from_dlpack itself. */
    if (a->device.device_type != kDLCPU) {
        PyObject *stream = torch_stream(self, a);
        if (!stream)
            return PyObject_CallOneArg(self->to_torch, (PyObject *)a);
        int rc = array_stream_wait(a, stream);
        Py_DECREF(stream);
        if (rc)
            return NULL;
    }
    PyObject *cap = array_export(a, 0);
    if (!cap)
        return NULL;
    PyObject *t = PyObject_CallOneArg(self->cap_to_torch, cap);
    Py_DECREF(cap);
    return t;
}

