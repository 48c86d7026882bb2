/*
 * feeder's result codes as Python exceptions: which class a code raises
 * (FeederError and its subclasses, made by PyInit__feeder in module.c), its
 * message "<detail> [FEEDER_E...]" with .code and .code_name, and dataset
 * opens' -errno as the matching OSError.
 */
#include "feederpy.h"

/* Made by PyInit__feeder (module.c). */
PyObject *FeederError, *SampleError, *WorkerError, *LoaderTimeoutError, *BusyError, *OptionError,
    *StateError, *DatasetError;

void raise_as(PyObject *cls, int rc, const char *detail)
{
    const char *text = detail && detail[0] ? detail : feeder_strerror(rc);
    PyObject *msg = PyUnicode_FromFormat("%s [%s]", text, feeder_err_name(rc));
    if (!msg)
        return;
    PyObject *exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (!exc)
        return;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(feeder_err_name(rc));
    if (code && name) {
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "code_name", name);
    }
    Py_XDECREF(code);
    Py_XDECREF(name);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
}

/* The exception class for a result of an option or state call. */
static PyObject *class_for(int rc, const char *detail)
{
    switch (rc) {
    case FEEDER_EINVAL:
    case FEEDER_ERANGE:
        return OptionError;
    case FEEDER_ESTATEBLOB:
    case FEEDER_EMISMATCH:
        return StateError;
    case FEEDER_EDATASET:
    case FEEDER_EPATH:
    case FEEDER_EFORMAT:
    case FEEDER_ECHECKSUM:
    case FEEDER_ESHAPE:
        return DatasetError;
    case FEEDER_EDECODE:
    case FEEDER_ETOOBIG:
    case FEEDER_ECALLBACK:
        return SampleError;
    case FEEDER_EWORKER:
        return WorkerError;
    case FEEDER_ETIMEDOUT:
        return LoaderTimeoutError;
    case FEEDER_EBUSY:
        return BusyError;
    default:
        /* -errno: a sample's file (the message names it) or the system. */
        if (rc < 0 && rc > -4096 && detail && strncmp(detail, "sample ", 7) == 0)
            return SampleError;
        return FeederError;
    }
}

void raise_rc(int rc, const char *detail) { raise_as(class_for(rc, detail), rc, detail); }

/* Dataset opens: -errno becomes the matching OSError (FileNotFoundError, ...). */
void raise_open(int rc, const char *err, const char *path)
{
    if (rc < 0 && rc > -4096) {
        PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iss", -rc, err[0] ? err : strerror(-rc),
                                              path);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return;
    }
    raise_rc(rc, err);
}
