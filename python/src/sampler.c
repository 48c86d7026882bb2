/*
 * Loader(sampler=...): any Python sampler (torch's DistributedSampler,
 * SubsetRandomSampler, a list of indices) drives the C pipeline's order.
 *
 * As torch's DataLoader does, the sampler is iterated once when an epoch
 * begins (iter(loader), and state_dict() before the first batch); the
 * indices are pushed here and the C loader's callback sampler copies them.
 * Nothing calls Python from the loader's own threads. The sampler is
 * iterated as it is: sampler.set_epoch(epoch) stays the caller's, as with
 * torch.
 */
#include "feederpy.h"

static uint64_t ps_len(void *user, uint64_t epoch)
{
    LoaderObject *self = user;
    return self->smp_have && self->smp_epoch == epoch ? self->smp_len : 0;
}

static int ps_fill(void *user, uint64_t epoch, uint64_t *out, uint64_t count)
{
    LoaderObject *self = user;
    if (!self->smp_have || self->smp_epoch != epoch || count != self->smp_len)
        return FEEDER_EINVAL;
    if (count)
        memcpy(out, self->smp_idx, count * sizeof(*out));
    return 0;
}

int loader_sampler_create(LoaderObject *self, PyObject *sampler, feeder_sampler **out)
{
    *out = NULL;
    if (!sampler || sampler == Py_None)
        return 0;
    if (!PyObject_HasAttrString(sampler, "__iter__")) {
        PyErr_Format(PyExc_TypeError,
                     "sampler: expected an iterable of dataset indices (a torch sampler, a "
                     "list), got %R", (PyObject *)Py_TYPE(sampler));
        return -1;
    }
    feeder_sampler_callbacks cb = {.len = ps_len, .fill = ps_fill};
    int rc = feeder_sampler_create(&cb, self, out);
    if (rc) {
        raise_rc(rc, "sampler");
        return -1;
    }
    self->py_sampler = Py_NewRef(sampler);
    return 0;
}

/* Draw the sampler's order for `epoch` (iterating it once) into the pushed
 * epoch: each iter() draws anew, as torch's DataLoader does, except after a
 * state_dict() that drew the same epoch first (`keep`: that order is the
 * state's). 0, or -1 with the error set (a bad index names its position). */
int loader_sampler_push(LoaderObject *self, uint64_t epoch, int keep)
{
    if (!self->py_sampler)
        return 0;
    int kept = self->smp_keep && self->smp_have && self->smp_epoch == epoch;
    self->smp_keep = keep;
    if (kept)
        return 0;
    PyObject *seq = PySequence_List(self->py_sampler);
    if (!seq)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(seq);
    uint64_t *idx = PyMem_RawMalloc(((size_t)n + 1) * sizeof(*idx));
    if (!idx) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    uint64_t size = feeder_dataset_size(self->dataset->ds);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(seq, i);
        PyObject *num = PyNumber_Index(o);
        long long v = num ? PyLong_AsLongLong(num) : -1;
        Py_XDECREF(num);
        if (!num || (v == -1 && PyErr_Occurred()) || v < 0 || (uint64_t)v >= size) {
            PyErr_Clear();
            PyErr_Format(PyExc_IndexError,
                         "sampler: index %R at position %zd of the epoch is not a dataset index "
                         "(0 <= i < %llu)",
                         o, i, (unsigned long long)size);
            PyMem_RawFree(idx);
            Py_DECREF(seq);
            return -1;
        }
        idx[i] = (uint64_t)v;
    }
    Py_DECREF(seq);
    PyMem_RawFree(self->smp_idx);
    self->smp_idx = idx;
    self->smp_len = (uint64_t)n;
    self->smp_epoch = epoch;
    self->smp_have = 1;
    return 0;
}

/* len(sampler), or -1 with the error set. */
Py_ssize_t loader_sampler_len(LoaderObject *self)
{
    return PyObject_Length(self->py_sampler);
}

void loader_sampler_free(LoaderObject *self)
{
    feeder_sampler_destroy(self->smp);
    self->smp = NULL;
    PyMem_RawFree(self->smp_idx);
    self->smp_idx = NULL;
    self->smp_have = 0;
    Py_CLEAR(self->py_sampler);
}
