/*
 * A fields packed file's batches: a dict of one array (or torch tensor) per
 * field, with NAME_lengths and NAME_offsets where the field is padded or
 * ragged.
 */
#include "feederpy.h"

static DLDataType elem_dl(int elem)
{
    static const DLDataType t[] = {{kDLUInt, 8, 1},  {kDLInt, 16, 1},   {kDLInt, 32, 1},
                                   {kDLInt, 64, 1},  {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                   {kDLFloat, 32, 1}};
    return t[elem >= 0 && elem <= FEEDER_ELEM_F32 ? elem : 0];
}

/* A contiguous view of `data` in the batch's slot (or device buffer). */
static ArrayObject *view(BatchObject *bo, void *data, uint32_t ndim, const uint64_t *shape,
                         DLDataType dt, int device)
{
    ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
    if (!a)
        return NULL;
    a->batch = (BatchObject *)Py_NewRef(bo);
    a->data = data;
    a->ndim = (int)ndim;
    a->dtype = dt;
    a->device = (DLDevice){device >= 0 ? kDLCUDA : kDLCPU, device >= 0 ? device : 0};
    int64_t st = 1;
    for (int i = (int)ndim - 1; i >= 0; i--) {
        a->shape[i] = (int64_t)shape[i];
        a->strides[i] = st;
        st *= a->shape[i];
    }
    return a;
}

/* d[key] = the array, as a torch tensor when the loader yields them. */
static int put_view(LoaderObject *self, PyObject *d, const char *key, const char *suffix,
                    ArrayObject *a)
{
    if (!a)
        return -1;
    PyObject *v = self->to_torch ? to_torch(self, a) : Py_NewRef(a);
    Py_DECREF(a);
    PyObject *k = v ? PyUnicode_FromFormat("%s%s", key, suffix) : NULL;
    int rc = k ? PyDict_SetItem(d, k, v) : -1;
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

/* One field: its values, and NAME_lengths / NAME_offsets where it has them
 * (on the device for a device batch, as its values). */
static int put_field(LoaderObject *self, PyObject *d, BatchObject *bo, const feeder_tensor *t)
{
    int dev = t->device;
    uint64_t n = bo->b->count, n1 = n + 1;
    DLDataType i64 = {kDLInt, 64, 1};
    if (put_view(self, d, t->name, "", view(bo, t->data, t->ndim, t->shape, elem_dl(t->elem),
                                             dev)))
        return -1;
    if (t->lengths &&
        put_view(self, d, t->name, "_lengths",
                 view(bo, dev >= 0 ? (void *)t->device_lengths : t->lengths, 1, &n, i64, dev)))
        return -1;
    if (t->offsets &&
        put_view(self, d, t->name, "_offsets",
                 view(bo, dev >= 0 ? (void *)t->device_offsets : t->offsets, 1, &n1, i64, dev)))
        return -1;
    return 0;
}

PyObject *fields_batch(LoaderObject *self, BatchObject *bo)
{
    PyObject *d = PyDict_New();
    int n = feeder_dataset_field(self->dataset->ds, 0, NULL);
    for (int k = 0; d && k < n; k++) {
        feeder_tensor t;
        int rc = feeder_batch_field_at(bo->b, (uint32_t)k, &t);
        if (rc) {
            raise_rc(rc, "feeder_batch_field_at");
            Py_CLEAR(d);
        } else if (put_field(self, d, bo, &t)) {
            Py_CLEAR(d);
        }
    }
    Py_DECREF(bo);
    return d;
}
