/*
 * The module feeder._feeder: its exception classes, types and constants
 * (library_version, header_version, cuda), strerror, and convert.c's functions.
 */
#include "feederpy.h"

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(feeder_strerror((int)rc));
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_O, "strerror(code): feeder's text for a result code."},
    {NULL}};

static struct PyModuleDef feeder_module = {
    PyModuleDef_HEAD_INIT, "_feeder",
    "feeder's C extension; import feeder instead.", -1, module_methods};

static PyObject *new_exc(PyObject *m, const char *name, PyObject *bases, const char *doc)
{
    char full[128];
    snprintf(full, sizeof(full), "feeder.%s", name);
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (e && PyModule_AddObjectRef(m, name, e) < 0)
        Py_CLEAR(e);
    return e;
}

PyMODINIT_FUNC PyInit__feeder(void)
{
    PyTypeObject *types[] = {&DatasetType, &LoaderType, &LoaderIterType, &BatchType, &ArrayType,
                             &BatchLoaderType};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    if (batches_ready_types() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&feeder_module);
    if (!m)
        return NULL;
    if (PyModule_AddFunctions(m, convert_methods) < 0)
        goto fail;
    if (!(FeederError = new_exc(m, "FeederError", Py_BuildValue("(O)", PyExc_RuntimeError),
                                "An error from feeder; .code and .code_name give its result "
                                "code.")) ||
        !(SampleError = new_exc(m, "SampleError", Py_BuildValue("(O)", FeederError),
                                "A sample failed (unreadable or undecodable file); the message "
                                "names it. The next batch can still be asked for.")) ||
        !(WorkerError = new_exc(m, "WorkerError", Py_BuildValue("(O)", FeederError),
                                "A worker process died; the epoch is over.")) ||
        !(LoaderTimeoutError = new_exc(m, "LoaderTimeoutError",
                                       Py_BuildValue("(OO)", FeederError, PyExc_TimeoutError),
                                       "No batch within the Loader's timeout.")) ||
        !(BusyError = new_exc(m, "BusyError", Py_BuildValue("(O)", FeederError),
                              "Every batch slot is held by live tensors.")) ||
        !(OptionError = new_exc(m, "OptionError",
                                Py_BuildValue("(OO)", FeederError, PyExc_ValueError),
                                "An option value feeder refuses; the message gives the bounds.")) ||
        !(StateError = new_exc(m, "StateError",
                               Py_BuildValue("(OO)", FeederError, PyExc_ValueError),
                               "A state_dict that does not fit this loader, or loaded too late.")) ||
        !(DatasetError = new_exc(m, "DatasetError",
                                 Py_BuildValue("(OO)", FeederError, PyExc_ValueError),
                                 "An empty, malformed or unsafe dataset.")))
        goto fail;
    if (PyModule_AddObjectRef(m, "Dataset", (PyObject *)&DatasetType) < 0 ||
        PyModule_AddObjectRef(m, "Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObjectRef(m, "Array", (PyObject *)&ArrayType) < 0 ||
        PyModule_AddObjectRef(m, "BatchLoader", (PyObject *)&BatchLoaderType) < 0 ||
        PyModule_AddStringConstant(m, "library_version", feeder_version_string()) < 0 ||
        PyModule_AddIntConstant(m, "header_version", FEEDER_VERSION_NUMBER) < 0 ||
#ifdef FEEDER_PY_CUDA
        PyModule_AddObjectRef(m, "cuda", Py_True) < 0
#else
        PyModule_AddObjectRef(m, "cuda", Py_False) < 0
#endif
    )
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
