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
 *
 * Where the next epoch's order can be drawn without touching anything the
 * user sees (a sequence, torch's SequentialSampler, or torch's
 * DistributedSampler, whose order is a pure function of its seed and epoch:
 * a copy of it is set to the next epoch and drawn), it is drawn as this
 * epoch begins, and the C sampler may be asked for it early
 * (feeder_sampler_set_ahead): with persistent workers the next epoch then
 * begins in the slots this one frees, as with feeder's own samplers. The
 * C loader keeps those batches only when the order iter() draws for that
 * epoch is the same, so a loop that never calls set_epoch, or calls it
 * with another number, gets exactly its sampler's order.
 *
 * Loader(batch_sampler=...) takes an iterable of batches (torch's
 * BatchSampler, a list of lists) the same way: drawn whole at iter(), its
 * batches handed to the C loader's batch sampler with their lengths. Such
 * an epoch never begins early, and has no resume state (the C loader's
 * rules for batch samplers).
 */
#include <limits.h>

#include "feederpy.h"

/* How the next epoch's order can be guessed without side effects. */
enum { GUESS_NONE, GUESS_SAME, GUESS_DISTRIBUTED };

/* The order pushed for `epoch` (drawn, or guessed): NULL when none. */
static const uint64_t *pushed(const LoaderObject *self, uint64_t epoch, uint64_t *len)
{
    if (self->smp_have && self->smp_epoch == epoch) {
        *len = self->smp_len;
        return self->smp_idx;
    }
    if (self->spec_have && self->spec_epoch == epoch) {
        *len = self->spec_len;
        return self->spec_idx;
    }
    return NULL;
}

static uint64_t ps_len(void *user, uint64_t epoch)
{
    uint64_t len = 0;
    return pushed(user, epoch, &len) ? len : 0;
}

static int ps_fill(void *user, uint64_t epoch, uint64_t *out, uint64_t count)
{
    uint64_t len = 0;
    const uint64_t *idx = pushed(user, epoch, &len);
    if (!idx || count != len)
        return FEEDER_EINVAL;
    if (count)
        memcpy(out, idx, count * sizeof(*out));
    return 0;
}

static uint64_t pb_nbatches(void *user, uint64_t epoch)
{
    const LoaderObject *self = user;
    return self->smp_have && self->smp_epoch == epoch ? self->smp_nb : 0;
}

static int pb_fill(void *user, uint64_t epoch, uint64_t *idx, uint64_t len, uint32_t *lengths,
                   int32_t *workers, uint64_t nb)
{
    const LoaderObject *self = user;
    if (!self->smp_have || self->smp_epoch != epoch || len != self->smp_len ||
        nb != self->smp_nb)
        return FEEDER_EINVAL;
    if (len)
        memcpy(idx, self->smp_idx, len * sizeof(*idx));
    for (uint64_t b = 0; b < nb; b++) {
        lengths[b] = self->smp_lens[b];
        workers[b] = -1;
    }
    return 0;
}

/* Whether `type` is torch.utils.data's class `name` itself (a subclass may
 * draw its order any way). */
static int is_torch_class(PyObject *o, const char *module, const char *name)
{
    PyTypeObject *t = Py_TYPE(o);
    PyObject *mod = PyObject_GetAttrString((PyObject *)t, "__module__");
    int same = mod && PyUnicode_Check(mod) && !strcmp(PyUnicode_AsUTF8(mod), module) &&
               !strcmp(t->tp_name, name);
    Py_XDECREF(mod);
    PyErr_Clear();
    return same;
}

static int guess_kind(PyObject *sampler)
{
    if (PyList_CheckExact(sampler) || PyTuple_CheckExact(sampler) || PyRange_Check(sampler) ||
        is_torch_class(sampler, "torch.utils.data.sampler", "SequentialSampler"))
        return GUESS_SAME;
    if (is_torch_class(sampler, "torch.utils.data.distributed", "DistributedSampler"))
        return GUESS_DISTRIBUTED;
    return GUESS_NONE;
}

int loader_sampler_create(LoaderObject *self, PyObject *sampler, PyObject *batch_sampler,
                          feeder_sampler **out)
{
    *out = NULL;
    if (batch_sampler && batch_sampler != Py_None) {
        if (!PyObject_HasAttrString(batch_sampler, "__iter__")) {
            PyErr_Format(PyExc_TypeError,
                         "batch_sampler: expected an iterable of batches of dataset indices "
                         "(torch's BatchSampler, a list of lists), got %R",
                         (PyObject *)Py_TYPE(batch_sampler));
            return -1;
        }
        feeder_batch_sampler_callbacks cb = {.nbatches = pb_nbatches, .len = ps_len,
                                             .fill = pb_fill};
        int rc = feeder_sampler_create_batches(&cb, self, out);
        if (rc) {
            raise_rc(rc, "batch_sampler");
            return -1;
        }
        self->py_sampler = Py_NewRef(batch_sampler);
        self->smp_batched = 1;
        return 0;
    }
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
    self->smp_guess = guess_kind(sampler);
    if (self->smp_guess != GUESS_NONE)
        feeder_sampler_set_ahead(*out, 1);
    return 0;
}

/* One index, checked against the dataset's size: 0, or -1 with an
 * IndexError naming where it stood (position i of the epoch, or of batch
 * `batch` of a batch sampler's epoch when batch >= 0). */
static int take_index(uint64_t size, PyObject *o, Py_ssize_t batch, Py_ssize_t i, uint64_t *out)
{
    PyObject *num = PyNumber_Index(o);
    long long v = num ? PyLong_AsLongLong(num) : -1;
    Py_XDECREF(num);
    if (!num || (v == -1 && PyErr_Occurred()) || v < 0 || (uint64_t)v >= size) {
        PyErr_Clear();
        if (batch < 0)
            PyErr_Format(PyExc_IndexError,
                         "sampler: index %R at position %zd of the epoch is not a dataset index "
                         "(0 <= i < %llu)", o, i, (unsigned long long)size);
        else
            PyErr_Format(PyExc_IndexError,
                         "batch_sampler: index %R at position %zd of batch %zd is not a dataset "
                         "index (0 <= i < %llu)", o, i, batch, (unsigned long long)size);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* Iterate `src` once into a new array of dataset indices (*idx, PyMem_Raw,
 * *n of them). 0, or -1 with the error set (a bad index names its position). */
static int draw(const LoaderObject *self, PyObject *src, uint64_t **idx, uint64_t *n_out)
{
    PyObject *seq = PySequence_List(src);
    if (!seq)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(seq);
    uint64_t *a = PyMem_RawMalloc(((size_t)n + 1) * sizeof(*a));
    if (!a) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    uint64_t size = feeder_dataset_size(self->dataset->ds);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (take_index(size, PyList_GET_ITEM(seq, i), -1, i, &a[i])) {
            PyMem_RawFree(a);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *idx = a;
    *n_out = (uint64_t)n;
    return 0;
}

/* Iterate the batch sampler `src` once: every batch's indices one after
 * another (*idx, *n of them) and each batch's length (*lens, *nb of them),
 * both PyMem_Raw. 0, or -1 with the error set. */
static int draw_batches(const LoaderObject *self, PyObject *src, uint64_t **idx, uint64_t *n_out,
                        uint32_t **lens, uint64_t *nb_out)
{
    PyObject *seq = PySequence_List(src);
    if (!seq)
        return -1;
    Py_ssize_t nb = PyList_GET_SIZE(seq), n = 0, cap = 0;
    uint64_t *a = NULL;
    uint32_t *l = PyMem_RawMalloc(((size_t)nb + 1) * sizeof(*l));
    uint64_t size = feeder_dataset_size(self->dataset->ds);
    int ok = l != NULL;
    if (!ok)
        PyErr_NoMemory();
    for (Py_ssize_t b = 0; ok && b < nb; b++) {
        PyObject *batch = PySequence_List(PyList_GET_ITEM(seq, b));
        if (!batch) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "batch_sampler: batch %zd is %R, not a sequence of "
                         "dataset indices", b, (PyObject *)Py_TYPE(PyList_GET_ITEM(seq, b)));
            ok = 0;
            break;
        }
        Py_ssize_t k = PyList_GET_SIZE(batch);
        if (k > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "batch_sampler: batch %zd has %zd indices", b, k);
            ok = 0;
        } else if (n + k > cap) {
            cap = (n + k) * 2;
            uint64_t *g = PyMem_RawRealloc(a, ((size_t)cap + 1) * sizeof(*a));
            if (!g) {
                PyErr_NoMemory();
                ok = 0;
            } else {
                a = g;
            }
        }
        for (Py_ssize_t i = 0; ok && i < k; i++)
            ok = !take_index(size, PyList_GET_ITEM(batch, i), b, i, &a[n + i]);
        Py_DECREF(batch);
        if (ok) {
            l[b] = (uint32_t)k;
            n += k;
        }
    }
    Py_DECREF(seq);
    if (ok && !a)
        ok = (a = PyMem_RawMalloc(sizeof(*a))) != NULL || (PyErr_NoMemory(), 0);
    if (!ok) {
        PyMem_RawFree(a);
        PyMem_RawFree(l);
        return -1;
    }
    *idx = a;
    *n_out = (uint64_t)n;
    *lens = l;
    *nb_out = (uint64_t)nb;
    return 0;
}

/* The guess of epoch + 1's order: this one's again (a sequence, a
 * SequentialSampler), or a copy of the DistributedSampler set to its next
 * epoch. A guess that fails is no guess: the epoch then begins at its
 * iter(), as without one. */
static void guess_next(LoaderObject *self, uint64_t epoch)
{
    self->spec_have = 0;
    uint64_t *idx = NULL, n = 0;
    if (self->smp_guess == GUESS_SAME) {
        if (!(idx = PyMem_RawMalloc(((size_t)self->smp_len + 1) * sizeof(*idx))))
            return;
        memcpy(idx, self->smp_idx, (size_t)self->smp_len * sizeof(*idx));
        n = self->smp_len;
    } else if (self->smp_guess == GUESS_DISTRIBUTED) {
        PyObject *copy = PyImport_ImportModule("copy"), *next = NULL, *e = NULL, *r = NULL;
        next = copy ? PyObject_CallMethod(copy, "copy", "O", self->py_sampler) : NULL;
        e = next ? PyObject_GetAttrString(next, "epoch") : NULL;
        long long ev = e ? PyLong_AsLongLong(e) : -1;
        if (e && !(ev == -1 && PyErr_Occurred()) && ev < LLONG_MAX)
            r = PyObject_CallMethod(next, "set_epoch", "L", ev + 1);
        int ok = r && !draw(self, next, &idx, &n);
        Py_XDECREF(r);
        Py_XDECREF(e);
        Py_XDECREF(next);
        Py_XDECREF(copy);
        if (!ok) {
            PyErr_Clear();
            return;
        }
    } else {
        return;
    }
    PyMem_RawFree(self->spec_idx);
    self->spec_idx = idx;
    self->spec_len = n;
    self->spec_epoch = epoch + 1;
    self->spec_have = 1;
}

/* Draw the sampler's order for `epoch` (iterating it once) into the pushed
 * epoch: each iter() draws anew, as torch's DataLoader does, except after a
 * state_dict() that drew the same epoch first (`keep`: that order is the
 * state's). Then guess the next epoch's. 0, or -1 with the error set (a bad
 * index names its position). */
int loader_sampler_push(LoaderObject *self, uint64_t epoch, int keep)
{
    if (!self->py_sampler)
        return 0;
    int kept = self->smp_keep && self->smp_have && self->smp_epoch == epoch;
    self->smp_keep = keep;
    if (kept)
        return 0;
    uint64_t *idx, n, nb = 0;
    uint32_t *lens = NULL;
    if (self->smp_batched ? draw_batches(self, self->py_sampler, &idx, &n, &lens, &nb)
                          : draw(self, self->py_sampler, &idx, &n))
        return -1;
    PyMem_RawFree(self->smp_idx);
    PyMem_RawFree(self->smp_lens);
    self->smp_idx = idx;
    self->smp_len = n;
    self->smp_lens = lens;
    self->smp_nb = nb;
    self->smp_epoch = epoch;
    self->smp_have = 1;
    if (!self->smp_batched)
        guess_next(self, epoch);
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
    PyMem_RawFree(self->smp_lens);
    self->smp_lens = NULL;
    self->smp_have = 0;
    PyMem_RawFree(self->spec_idx);
    self->spec_idx = NULL;
    self->spec_have = 0;
    Py_CLEAR(self->py_sampler);
}
