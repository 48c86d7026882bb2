/*
 * The Loader's state that its methods (loader.c), its iteration (iter.c)
 * and its batches (batch.c) share: whether it can be used now, its destroy,
 * and an epoch's resume state saved, also when its iterator is dropped.
 */
#include "feederpy.h"

int loader_ready(LoaderObject *self)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->closing ? "the loader is closed" : "the loader is not initialised");
        return 0;
    }
    if (self->closing) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return 0;
    }
    if (self->in_next) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the loader is waiting for a batch in another thread (a loader is used by "
                        "one thread at a time)");
        return 0;
    }
    return 1;
}

void loader_destroy_now(LoaderObject *self)
{
    feeder_loader *ld = self->ld;
    self->ld = NULL;
    if (!ld)
        return;
    Py_BEGIN_ALLOW_THREADS
    feeder_loader_destroy(ld);
    Py_END_ALLOW_THREADS
}

PyObject *state_save(LoaderObject *self, uint64_t epoch)
{
    size_t len = 0;
    int rc = feeder_loader_state_save(self->ld, NULL, 0, &len);
    if (rc) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
    PyObject *blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (!blob)
        return NULL;
    rc = feeder_loader_state_save(self->ld, PyBytes_AS_STRING(blob), len, &len);
    if (rc) {
        Py_DECREF(blob);
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        return NULL;
    }
    PyObject *d = Py_BuildValue("{s:N,s:K,s:i}", "feeder_state", blob, "epoch",
                                (unsigned long long)epoch, "version", 1);
    return d;
}

/* The running epoch stops being iterated (its iterator was dropped: break,
 * an exception, Ctrl-C): remember where it stood. The C epoch is ended by
 * the next iter() (feeder_loader_set_epoch) or by close(), not here: ending
 * it waits for the parts in flight, and a dealloc (at exit, in a traceback)
 * must not block on a stuck worker. */
void abandon_epoch(LoaderObject *self)
{
    if (!self->in_epoch || !self->ld || self->in_next)
        return;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    Py_XSETREF(self->abandoned_state, state_save(self, self->cur_epoch));
    PyErr_Clear();
    self->in_epoch = 0;
    PyErr_Restore(exc_type, exc_value, exc_tb);
}
