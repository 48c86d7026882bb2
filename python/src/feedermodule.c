/*
 * feeder._feeder: the CPython face of feeder's public API (include/feeder.h).
 *
 * Objects and who keeps whom alive:
 *   Dataset   owns a feeder_dataset.
 *   Loader    owns a feeder_loader and holds its Dataset (feeder borrows it).
 *   Batch     one lent feeder_batch; holds its Loader; gives the slot back
 *             (feeder_batch_release) when it dies.
 *   Array     the images or the labels of a Batch; holds the Batch.
 *   DLPack    each exported DLManagedTensor holds its Array, so the slot
 *             returns to feeder when the last view (numpy, torch) is freed.
 * A Loader therefore outlives every batch it lent: feeder_loader_destroy
 * invalidates unreleased batches, so it never runs while one is alive.
 *
 * feeder's loader is used by one thread at a time, but a DLPack deleter may
 * run on any thread (torch frees tensors on its autograd threads). Deleters
 * take the GIL; the iterating thread gives the GIL up only inside
 * feeder_next and marks the loader `in_next` meanwhile, so a release that
 * arrives then is queued and made as soon as feeder_next returns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "feeder.h"
#ifdef FEEDER_PY_CUDA
#include "feeder_cuda.h"
#endif
#include "dlpack.h"

/* Each feeder_next waits at most this long, so Ctrl-C is seen promptly. */
#define FPY_POLL_MS 100
#define FPY_MAX_STREAMS 8

static PyObject *FeederError, *SampleError, *WorkerError, *LoaderTimeoutError, *BusyError,
    *OptionError, *StateError, *DatasetError;

static PyTypeObject DatasetType, LoaderType, LoaderIterType, BatchType, ArrayType;

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

static void raise_as(PyObject *cls, int rc, const char *detail)
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

static void raise_rc(int rc, const char *detail) { raise_as(class_for(rc, detail), rc, detail); }

/* Dataset opens: -errno becomes the matching OSError (FileNotFoundError, ...). */
static void raise_open(int rc, const char *err, const char *path)
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

/* ------------------------------------------------------------------------ */
/* Dataset                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    feeder_dataset *ds;
    int kind; /* 0 folder, 1 list, 2 packed, 3 tar shards */
    PyObject *source;
} DatasetObject;

static int dataset_init(DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kind", "path", "root", "allow_escape", NULL};
    int kind, allow_escape = 0;
    PyObject *path_o, *root_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO&|Op", kwlist, &kind, PyUnicode_FSConverter,
                                     &path_o, &root_o, &allow_escape))
        return -1;
    if (self->ds) {
        Py_DECREF(path_o);
        PyErr_SetString(PyExc_RuntimeError, "dataset already open");
        return -1;
    }
    PyObject *root_b = NULL;
    if (root_o != Py_None && !PyUnicode_FSConverter(root_o, &root_b)) {
        Py_DECREF(path_o);
        return -1;
    }
    const char *path = PyBytes_AS_STRING(path_o);
    const char *root = root_b ? PyBytes_AS_STRING(root_b) : NULL;
    char err[1024] = "";
    int rc;
    feeder_dataset *ds = NULL;
    Py_BEGIN_ALLOW_THREADS
    if (kind == 0)
        rc = feeder_dataset_open_folder(path, &ds, err, sizeof(err));
    else if (kind == 1)
        rc = feeder_dataset_open_list2(path, root, allow_escape ? FEEDER_LIST_ALLOW_ESCAPE : 0, &ds,
                                       err, sizeof(err));
    else if (kind == 2)
        rc = feeder_dataset_open_packed(path, &ds, err, sizeof(err));
    else if (kind == 3)
        rc = feeder_dataset_open_tar_pattern(path, &ds, err, sizeof(err));
    else
        rc = FEEDER_EINVAL;
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_open(rc, err, path);
    } else {
        self->ds = ds;
        self->kind = kind;
        self->source = PyUnicode_DecodeFSDefault(path);
    }
    Py_DECREF(path_o);
    Py_XDECREF(root_b);
    return rc ? -1 : 0;
}

static void dataset_dealloc(DatasetObject *self)
{
    feeder_dataset_destroy(self->ds);
    Py_XDECREF(self->source);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int dataset_ready(DatasetObject *self)
{
    if (!self->ds) {
        PyErr_SetString(PyExc_RuntimeError, "dataset is not open (its __init__ did not run)");
        return 0;
    }
    return 1;
}

static Py_ssize_t dataset_len(DatasetObject *self)
{
    return dataset_ready(self) ? (Py_ssize_t)feeder_dataset_size(self->ds) : -1;
}

static int dataset_index(DatasetObject *self, PyObject *arg, uint64_t *out)
{
    if (!dataset_ready(self))
        return 0;
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return 0;
    uint64_t n = feeder_dataset_size(self->ds);
    if (i < 0)
        i += (Py_ssize_t)n;
    if (i < 0 || (uint64_t)i >= n) {
        PyErr_SetString(PyExc_IndexError, "dataset index out of range");
        return 0;
    }
    *out = (uint64_t)i;
    return 1;
}

static PyObject *dataset_path(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (!dataset_index(self, arg, &i))
        return NULL;
    const char *p = feeder_dataset_path(self->ds, i);
    if (!p)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(p);
}

static PyObject *dataset_label(DatasetObject *self, PyObject *arg)
{
    uint64_t i;
    if (!dataset_index(self, arg, &i))
        return NULL;
    return PyLong_FromLongLong(feeder_dataset_label(self->ds, i));
}

static PyObject *dataset_get_num_classes(DatasetObject *self, void *c)
{
    return dataset_ready(self) ? PyLong_FromUnsignedLongLong(feeder_dataset_num_classes(self->ds))
                               : NULL;
}

static PyObject *dataset_get_classes(DatasetObject *self, void *c)
{
    if (!dataset_ready(self))
        return NULL;
    uint64_t n = feeder_dataset_num_classes(self->ds);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (uint64_t i = 0; list && i < n; i++) {
        const char *name = feeder_dataset_class_name(self->ds, i);
        PyObject *s = name ? PyUnicode_DecodeFSDefault(name) : PyUnicode_FromFormat("%llu",
                                                                   (unsigned long long)i);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyObject *dataset_packed_info(DatasetObject *self, PyObject *unused)
{
    if (!dataset_ready(self))
        return NULL;
    feeder_packed_info in;
    int rc = feeder_dataset_packed_info(self->ds, &in);
    if (rc) {
        raise_rc(rc, "packed_info: not a packed dataset");
        return NULL;
    }
    return Py_BuildValue(
        "{s:I,s:s,s:s,s:I,s:I,s:I,s:K,s:K,s:K,s:K,s:I,s:I,s:K,s:K}", "version", in.version, "kind",
        in.kind == FEEDER_RECORD_RAW ? "raw" : in.kind == FEEDER_RECORD_JPEG ? "jpeg" : "fields",
        "layout",
        in.layout == FEEDER_LAYOUT_NCHW ? "NCHW" : "NHWC", "height", in.height, "width", in.width,
        "channels", in.channels, "records", (unsigned long long)in.records, "record_bytes",
        (unsigned long long)in.record_bytes, "data_bytes", (unsigned long long)in.data_bytes,
        "file_bytes", (unsigned long long)in.file_bytes, "shard_index", in.shard_index,
        "shard_count", in.shard_count, "shard_first", (unsigned long long)in.shard_first,
        "total_records", (unsigned long long)in.total_records);
}

/* A fields packed file's dataset (feeder_pack_fields): batches are dicts. */
static int dataset_has_fields(const DatasetObject *self)
{
    feeder_packed_info in;
    return self->ds && feeder_dataset_packed_info(self->ds, &in) == 0 &&
           in.kind == FEEDER_RECORD_FIELDS;
}

static const char *const batching_names[] = {"fixed", "padded", "ragged"};

/* The schema as a list of (name, dtype, batching, shape) tuples; None for
 * image datasets ("image" + "label" batches). */
static PyObject *dataset_get_fields(DatasetObject *self, void *c)
{
    if (!dataset_ready(self))
        return NULL;
    if (!dataset_has_fields(self))
        Py_RETURN_NONE;
    int n = feeder_dataset_field(self->ds, 0, NULL);
    PyObject *list = PyList_New(n);
    for (int k = 0; list && k < n; k++) {
        feeder_field f;
        feeder_dataset_field(self->ds, (uint32_t)k, &f);
        PyObject *shape = PyTuple_New(f.ndim);
        for (uint32_t d = 0; shape && d < f.ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLong(f.shape[d]));
        PyObject *row = shape ? Py_BuildValue("(sssN)", f.name, feeder_elem_name(f.elem),
                                              batching_names[f.batching], shape)
                              : NULL;
        if (!row) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, row);
    }
    return list;
}

static PyObject *dataset_repr(DatasetObject *self)
{
    static const char *const kinds[] = {"ImageFolder", "FileList", "Packed", "TarShards"};
    if (!self->ds)
        return PyUnicode_FromString("<feeder dataset (not open)>");
    return PyUnicode_FromFormat("<feeder.%s %R: %llu samples, %llu classes>", kinds[self->kind],
                                self->source, (unsigned long long)feeder_dataset_size(self->ds),
                                (unsigned long long)feeder_dataset_num_classes(self->ds));
}

static PyMethodDef dataset_methods[] = {
    {"path", (PyCFunction)dataset_path, METH_O, "path(i): the file of sample i (None for packed and tar)."},
    {"label", (PyCFunction)dataset_label, METH_O, "label(i): the label of sample i."},
    {"packed_info", (PyCFunction)dataset_packed_info, METH_NOARGS,
     "packed_info(): the packed file's header as a dict."},
    {NULL}};

static PyGetSetDef dataset_getset[] = {
    {"num_classes", (getter)dataset_get_num_classes, NULL, "number of classes", NULL},
    {"classes", (getter)dataset_get_classes, NULL, "class names, by label", NULL},
    {"fields", (getter)dataset_get_fields, NULL,
     "a fields packed file's schema, [(name, dtype, batching, shape)]; None for image datasets",
     NULL},
    {NULL}};

static PySequenceMethods dataset_as_seq = {.sq_length = (lenfunc)dataset_len};

static PyTypeObject DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder._feeder.Dataset",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A feeder dataset; use feeder.ImageFolder, feeder.FileList or feeder.Packed.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dataset_init,
    .tp_dealloc = (destructor)dataset_dealloc,
    .tp_methods = dataset_methods,
    .tp_getset = dataset_getset,
    .tp_as_sequence = &dataset_as_seq,
    .tp_repr = (reprfunc)dataset_repr,
};

/* ------------------------------------------------------------------------ */
/* Loader                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct pending_release {
    feeder_batch *b;
    void *stream;
} pending_release;

typedef struct {
    PyObject_HEAD
    feeder_loader *ld;
    DatasetObject *dataset;
    PyObject *to_torch;     /* torch.from_dlpack, or NULL for feeder.Array */
    PyObject *cap_to_torch; /* what turns a host capsule into a tensor (torch._C._from_dlpack) */
    PyObject *raw_stream;   /* torch._C._cuda_getCurrentRawStream, or NULL */
    double timeout_s;       /* the user's timeout; 0 = none */
    int device;             /* asked-for CUDA device, -1 = host */
    int closing;            /* close() asked while batches were out */
    int in_next;            /* inside feeder_next without the GIL */
    int warned_host;        /* the "device asked, host batches" warning was given */
    int fields;             /* a fields packed file: batches are dicts of its fields */
    Py_ssize_t outstanding; /* Batch objects alive */
    pending_release *pending;
    Py_ssize_t npending, cappending;
    /* Epochs, as PyTorch counts them: each iter() begins the next one. */
    uint64_t next_epoch, cur_epoch;
    int in_epoch;           /* an iterator is running and has not seen DONE */
    uint64_t generation;    /* bumped by iter(): older iterators stop */
    int resume_pending;     /* load_state_dict() done, iter() not yet */
    uint64_t resume_epoch;
    PyObject *resume_state; /* the dict load_state_dict() took */
    PyObject *abandoned_state; /* the state when the last iterator was dropped mid-epoch */
    /* The last batch lent (debug/tests: the slot pointers). */
    uintptr_t last_data, last_labels;
    uint64_t last_epoch, last_number;
    uint32_t last_count;
    uint64_t last_next_ns; /* time inside feeder_next for the last batch */
} LoaderObject;

static int worker_ignore_sigint(void *user, int worker_id)
{
    /* Ctrl-C reaches the whole process group: the parent turns it into
     * KeyboardInterrupt and destroys the loader, which stops the workers.
     * Without this the workers would run the parent's Python signal handler,
     * which sets a flag no one reads. */
    (void)user;
    (void)worker_id;
    signal(SIGINT, SIG_IGN);
    return 0;
}

static int loader_ready(LoaderObject *self)
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

static void loader_destroy_now(LoaderObject *self)
{
    feeder_loader *ld = self->ld;
    self->ld = NULL;
    if (!ld)
        return;
    Py_BEGIN_ALLOW_THREADS
    feeder_loader_destroy(ld);
    Py_END_ALLOW_THREADS
}

static void drain_pending(LoaderObject *self)
{
    for (Py_ssize_t i = 0; i < self->npending; i++)
        if (self->ld)
            feeder_batch_release(self->pending[i].b, self->pending[i].stream);
    self->npending = 0;
}

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

static int lookup(PyObject *value, const char *arg, const char *const *names, const int *values,
                  int *out)
{
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a string, got %R", arg, value);
        return 0;
    }
    const char *s = PyUnicode_AsUTF8(value);
    if (!s)
        return 0;
    for (int i = 0; names[i]; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *out = values[i];
            return 1;
        }
    PyObject *choices = PyUnicode_FromString("");
    for (int i = 0; names[i] && choices; i++) {
        PyObject *c = PyUnicode_FromFormat("%U%s'%s'", choices, i ? ", " : "", names[i]);
        Py_SETREF(choices, c);
    }
    if (choices) {
        PyErr_Format(OptionError, "%s=%R: expected one of %U", arg, value, choices);
        Py_DECREF(choices);
    }
    return 0;
}

static int set_opt(LoaderObject *self, feeder_option opt, int64_t v)
{
    int rc = feeder_loader_set(self->ld, opt, v);
    if (rc)
        raise_rc(rc, feeder_loader_errmsg(self->ld));
    return rc == 0;
}

static int set_optd(LoaderObject *self, feeder_option opt, double v)
{
    int rc = feeder_loader_set_double(self->ld, opt, v);
    if (rc)
        raise_rc(rc, feeder_loader_errmsg(self->ld));
    return rc == 0;
}

static int parse_int(PyObject *o, const char *arg, int64_t *out)
{
    if (PyBool_Check(o)) {
        *out = o == Py_True;
        return 1;
    }
    if (!PyLong_Check(o) && !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer, got %R", arg, o);
        return 0;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(OptionError, "%s=%R: out of range", arg, o);
        return 0;
    }
    *out = v;
    return 1;
}

/* An int or a pair: size=224 or size=(h, w); scale=(lo, hi). */
static int parse_pair_d(PyObject *o, const char *arg, double *a, double *b)
{
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 2) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(OptionError, "%s=%R: expected a pair (min, max)", arg, o);
        return 0;
    }
    *a = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, 0));
    *b = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, 1));
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(OptionError, "%s=%R: expected two numbers", arg, o);
        return 0;
    }
    return 1;
}

static int parse_rgb(LoaderObject *self, PyObject *o, const char *arg, feeder_option first)
{
    if (o == Py_None)
        return 1;
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(OptionError, "%s=%R: expected three numbers (R, G, B)", arg, o);
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(OptionError, "%s=%R: expected three numbers (R, G, B)", arg, o);
            return 0;
        }
        if (!set_optd(self, (feeder_option)(first + i), v)) {
            Py_DECREF(seq);
            return 0;
        }
    }
    Py_DECREF(seq);
    return 1;
}

/* device=None, "cpu", "cuda", "cuda:N", N, or a torch.device. */
static int parse_device(PyObject *o, int *out)
{
    *out = -1;
    if (o == Py_None)
        return 1;
    if (PyLong_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v < -1 || v > 1023) {
            PyErr_Format(OptionError, "device=%R: expected -1 or a CUDA ordinal", o);
            return 0;
        }
        *out = (int)v;
        return 1;
    }
    PyObject *s = PyObject_Str(o);
    if (!s)
        return 0;
    const char *c = PyUnicode_AsUTF8(s);
    int ok = 1;
    if (!c) {
        ok = 0;
    } else if (strcmp(c, "cpu") == 0) {
        *out = -1;
    } else if (strcmp(c, "cuda") == 0) {
        *out = 0;
    } else if (strncmp(c, "cuda:", 5) == 0 && c[5] >= '0' && c[5] <= '9') {
        char *end;
        long v = strtol(c + 5, &end, 10);
        if (*end || v > 1023)
            ok = 0;
        *out = (int)v;
    } else {
        ok = 0;
    }
    if (!ok && !PyErr_Occurred())
        PyErr_Format(OptionError, "device=%R: expected None, 'cpu', 'cuda' or 'cuda:N'", o);
    Py_DECREF(s);
    return ok;
}

/* dtype=None, a name ("float32"), or a torch/numpy dtype (its str). */
static int parse_dtype(PyObject *o, int *out)
{
    static const char *const names[] = {"uint8", "float16", "half", "bfloat16", "float32",
                                        "float", NULL};
    static const int values[] = {FEEDER_DTYPE_UINT8,    FEEDER_DTYPE_FLOAT16, FEEDER_DTYPE_FLOAT16,
                                 FEEDER_DTYPE_BFLOAT16, FEEDER_DTYPE_FLOAT32, FEEDER_DTYPE_FLOAT32};
    *out = FEEDER_DTYPE_UINT8;
    if (o == Py_None)
        return 1;
    PyObject *s = PyObject_Str(o);
    if (!s)
        return 0;
    const char *c = PyUnicode_AsUTF8(s);
    if (c && strncmp(c, "torch.", 6) == 0) {
        PyObject *t = PyUnicode_FromString(c + 6);
        Py_SETREF(s, t);
        if (!s)
            return 0;
    }
    int ok = lookup(s, "dtype", names, values, out);
    Py_DECREF(s);
    return ok;
}

static PyObject *import_from_dlpack(int required)
{
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) {
        if (required)
            return NULL;
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    PyObject *f = PyObject_GetAttrString(torch, "from_dlpack");
    Py_DECREF(torch);
    if (!f && !required) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    return f;
}

/* Loader.__init__'s arguments as PyArg_ParseTupleAndKeywords leaves them
 * (borrowed; NULL: not given, where None has a meaning of its own). */
typedef struct loader_args {
    PyObject *ds, *batch, *shuffle, *workers, *prefetch, *persistent, *drop_last, *seed;
    double timeout;
    PyObject *pipeline, *size, *resize, *device, *dtype, *mean, *std, *layout, *decoder,
             *in_order, *on_error, *io, *max_restarts, *scale, *ratio, *flip_prob, *as_torch;
    PyObject *trace, *channels;
} loader_args;

static int parse_loader_args(PyObject *args, PyObject *kw, loader_args *a)
{
    static char *kwlist[] = {"dataset", "batch_size", "shuffle", "num_workers", "prefetch_factor",
                             "persistent_workers", "drop_last", "timeout", "seed", "pipeline",
                             "size", "resize", "device", "dtype", "mean", "std", "layout",
                             "decoder", "in_order", "on_error", "io", "max_restarts", "scale",
                             "ratio", "flip_prob", "as_torch", "trace", "channels", NULL};
    *a = (loader_args){.shuffle = Py_False, .persistent = Py_False, .drop_last = Py_False,
                       .resize = Py_None, .device = Py_None, .dtype = Py_None, .mean = Py_None,
                       .std = Py_None, .in_order = Py_True, .scale = Py_None,
                       .ratio = Py_None, .flip_prob = Py_None, .as_torch = Py_None,
                       .trace = Py_None};
    return PyArg_ParseTupleAndKeywords(
        args, kw, "O!|OOOOOOdOOOOOOOOOOOOOOOOOOOO", kwlist, &DatasetType, &a->ds, &a->batch,
        &a->shuffle, &a->workers, &a->prefetch, &a->persistent, &a->drop_last, &a->timeout,
        &a->seed, &a->pipeline, &a->size, &a->resize, &a->device, &a->dtype, &a->mean, &a->std,
        &a->layout, &a->decoder, &a->in_order, &a->on_error, &a->io, &a->max_restarts, &a->scale,
        &a->ratio, &a->flip_prob, &a->as_torch, &a->trace, &a->channels);
}

#define INTOPT(obj, name, opt) \
    if ((obj) && (!parse_int((obj), name, &v) || !set_opt(self, (opt), v))) \
        return 0;
#define ENUMOPT(obj, name, tab, vals, opt) \
    if ((obj) && (!lookup((obj), name, tab, vals, &e) || !set_opt(self, (opt), e))) \
        return 0;

/* The options that are an integer or a name each. */
static int set_plain_options(LoaderObject *self, const loader_args *a)
{
    static const char *const pipelines[] = {"eval", "train", "resize", NULL};
    static const int pipeline_v[] = {FEEDER_PIPELINE_EVAL, FEEDER_PIPELINE_TRAIN,
                                     FEEDER_PIPELINE_RESIZE};
    static const char *const decoders[] = {"roi", "turbo", "nvjpeg", "hybrid", NULL};
    static const int decoder_v[] = {FEEDER_DECODER_ROI, FEEDER_DECODER_TURBO,
                                    FEEDER_DECODER_NVJPEG, FEEDER_DECODER_HYBRID};
    static const char *const policies[] = {"fail", "skip", "drop", NULL};
    static const int policy_v[] = {FEEDER_ON_ERROR_FAIL, FEEDER_ON_ERROR_SKIP, FEEDER_ON_ERROR_DROP};
    static const char *const ios[] = {"auto", "uring", "pread", NULL};
    static const int io_v[] = {FEEDER_IO_AUTO, FEEDER_IO_URING, FEEDER_IO_PREAD};
    int64_t v;
    int e;
    INTOPT(a->batch, "batch_size", FEEDER_OPT_BATCH_SIZE)
    INTOPT(a->shuffle, "shuffle", FEEDER_OPT_SHUFFLE)
    INTOPT(a->workers, "num_workers", FEEDER_OPT_NUM_WORKERS)
    INTOPT(a->prefetch, "prefetch_factor", FEEDER_OPT_PREFETCH_FACTOR)
    INTOPT(a->persistent, "persistent_workers", FEEDER_OPT_PERSISTENT_WORKERS)
    INTOPT(a->drop_last, "drop_last", FEEDER_OPT_DROP_LAST)
    INTOPT(a->seed, "seed", FEEDER_OPT_SEED)
    INTOPT(a->in_order, "in_order", FEEDER_OPT_IN_ORDER)
    INTOPT(a->max_restarts, "max_restarts", FEEDER_OPT_MAX_RESTARTS)
    INTOPT(a->channels, "channels", FEEDER_OPT_CHANNELS)
    ENUMOPT(a->pipeline, "pipeline", pipelines, pipeline_v, FEEDER_OPT_PIPELINE)
    ENUMOPT(a->decoder, "decoder", decoders, decoder_v, FEEDER_OPT_DECODER)
    ENUMOPT(a->on_error, "on_error", policies, policy_v, FEEDER_OPT_ERROR_POLICY)
    ENUMOPT(a->io, "io", ios, io_v, FEEDER_OPT_IO)
    return 1;
}

/* layout, size (N or (H, W)) and resize, which size sets unless given. */
static int set_shape(LoaderObject *self, const loader_args *a)
{
    static const char *const layouts[] = {"NCHW", "NHWC", NULL};
    static const int layout_v[] = {FEEDER_LAYOUT_NCHW, FEEDER_LAYOUT_NHWC};
    int64_t v;
    int e;
    /* PyTorch's convention: a batch of images is N x C x H x W. */
    if (!a->layout)
        e = FEEDER_LAYOUT_NCHW;
    else if (!lookup(a->layout, "layout", layouts, layout_v, &e))
        return 0;
    if (!set_opt(self, FEEDER_OPT_LAYOUT, e))
        return 0;
    if (a->size) {
        double h, w;
        if (PyLong_Check(a->size)) {
            if (!parse_int(a->size, "size", &v))
                return 0;
            h = w = (double)v;
        } else if (!parse_pair_d(a->size, "size", &h, &w)) {
            return 0;
        }
        if (!set_opt(self, FEEDER_OPT_HEIGHT, (int64_t)h) || !set_opt(self, FEEDER_OPT_WIDTH,
                                                                       (int64_t)w))
            return 0;
        /* torchvision's Resize(256) + CenterCrop(224), scaled to this size. */
        if (a->resize == Py_None) {
            double side = (h > w ? h : w) * 256.0 / 224.0 + 0.5;
            if (!set_opt(self, FEEDER_OPT_RESIZE, (int64_t)side))
                return 0;
        }
    }
    if (a->resize != Py_None)
        INTOPT(a->resize, "resize", FEEDER_OPT_RESIZE)
    return 1;
}

#undef INTOPT
#undef ENUMOPT

/* device, dtype (floats need a device), mean and std. */
static int set_device_values(LoaderObject *self, const loader_args *a)
{
    int e;
    if (!parse_device(a->device, &self->device))
        return 0;
    if (!set_opt(self, FEEDER_OPT_DEVICE, self->device))
        return 0;
    if (!parse_dtype(a->dtype, &e))
        return 0;
    if (e != FEEDER_DTYPE_UINT8 && self->device < 0) {
        PyErr_Format(OptionError,
                     "dtype=%R needs device='cuda:N': feeder normalises to floats on the GPU; "
                     "host batches are uint8 (convert with images.float())",
                     a->dtype);
        return 0;
    }
    if (!set_opt(self, FEEDER_OPT_DTYPE, e))
        return 0;
    return parse_rgb(self, a->mean, "mean", FEEDER_OPT_MEAN_R) &&
           parse_rgb(self, a->std, "std", FEEDER_OPT_STD_R);
}

/* The train pipeline's scale, ratio and flip_prob. */
static int set_crop_and_flip(LoaderObject *self, const loader_args *a)
{
    double lo, hi;
    if (a->scale != Py_None && (!parse_pair_d(a->scale, "scale", &lo, &hi) ||
                                !set_optd(self, FEEDER_OPT_SCALE_MIN, lo) ||
                                !set_optd(self, FEEDER_OPT_SCALE_MAX, hi)))
        return 0;
    if (a->ratio != Py_None && (!parse_pair_d(a->ratio, "ratio", &lo, &hi) ||
                                !set_optd(self, FEEDER_OPT_RATIO_MIN, lo) ||
                                !set_optd(self, FEEDER_OPT_RATIO_MAX, hi)))
        return 0;
    if (a->flip_prob != Py_None) {
        lo = PyFloat_AsDouble(a->flip_prob);
        if ((lo == -1.0 && PyErr_Occurred()) || !set_optd(self, FEEDER_OPT_FLIP_PROB, lo))
            return 0;
    }
    return 1;
}

/* trace=path (str, bytes or os.PathLike). */
static int set_trace(LoaderObject *self, PyObject *trace)
{
    if (trace == Py_None)
        return 1;
    PyObject *tb;
    if (!PyUnicode_FSConverter(trace, &tb))
        return 0;
    int rc = feeder_loader_set_trace(self->ld, PyBytes_AS_STRING(tb));
    Py_DECREF(tb);
    if (rc)
        raise_rc(rc, feeder_loader_errmsg(self->ld));
    return rc == 0;
}

/* What the module sets whatever the arguments. */
static int set_module_options(LoaderObject *self)
{
    /* Waits come back every FPY_POLL_MS to look at signals; the user's
     * timeout is counted here across them. */
    if (!set_opt(self, FEEDER_OPT_TIMEOUT_MS, FPY_POLL_MS))
        return 0;
    int rc = feeder_loader_set_worker_init(self->ld, worker_ignore_sigint, NULL);
    if (rc)
        raise_rc(rc, feeder_loader_errmsg(self->ld));
    return rc == 0;
}

/* as_torch: None (torch if it imports), True (torch, or the import's
 * error) or False: torch.from_dlpack and torch's own shortcuts, kept in
 * self. 0, or -1 with the error set. */
static int bind_torch(LoaderObject *self, PyObject *as_torch)
{
    PyObject *f;
    if (as_torch == Py_None) {
        f = import_from_dlpack(0);
    } else {
        int yes = PyObject_IsTrue(as_torch);
        if (yes < 0)
            return -1;
        f = yes ? import_from_dlpack(1) : Py_NewRef(Py_None);
    }
    if (!f)
        return -1;
    if (f == Py_None) {
        Py_DECREF(f);
        return 0;
    }
    self->to_torch = f;
    /* torch.from_dlpack(capsule) only forwards a capsule to this; calling
     * it directly saves a Python frame per tensor. */
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
    PyObject *direct = tc ? PyObject_GetAttrString(tc, "_from_dlpack") : NULL;
    /* torch's current stream without torch.cuda's Python frames: the
     * device batches' hand-off costs ~90 us through torch.from_dlpack. */
    self->raw_stream = tc && direct ? PyObject_GetAttrString(tc, "_cuda_getCurrentRawStream")
                                    : NULL;
    Py_XDECREF(torch);
    Py_XDECREF(tc);
    PyErr_Clear();
    self->cap_to_torch = direct ? direct : Py_NewRef(f);
    return 0;
}

static int loader_init(LoaderObject *self, PyObject *args, PyObject *kw)
{
    loader_args a;
    if (!parse_loader_args(args, kw, &a))
        return -1;
    if (self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "Loader.__init__ called twice");
        return -1;
    }
    DatasetObject *ds = (DatasetObject *)a.ds;
    if (!dataset_ready(ds))
        return -1;
    if (a.timeout < 0) {
        /* PyErr_Format has no %g (Python 3.12 raises SystemError on it). */
        char msg[96];
        snprintf(msg, sizeof(msg), "timeout=%g: expected seconds >= 0 (0: wait forever)",
                 a.timeout);
        PyErr_SetString(OptionError, msg);
        return -1;
    }
    int rc = feeder_loader_create(ds->ds, NULL, &self->ld);
    if (rc) {
        raise_rc(rc, "feeder_loader_create");
        return -1;
    }
    self->dataset = (DatasetObject *)Py_NewRef(a.ds);
    self->fields = dataset_has_fields(ds);
    self->timeout_s = a.timeout;
    if (!set_plain_options(self, &a) || !set_shape(self, &a) || !set_device_values(self, &a) ||
        !set_crop_and_flip(self, &a) || !set_trace(self, a.trace) || !set_module_options(self))
        return -1;
    return bind_torch(self, a.as_torch);
}

static void loader_dealloc(LoaderObject *self)
{
    /* Every Batch holds its Loader: none is alive here. */
    loader_destroy_now(self);
    Py_XDECREF(self->dataset);
    Py_XDECREF(self->to_torch);
    Py_XDECREF(self->cap_to_torch);
    Py_XDECREF(self->raw_stream);
    Py_XDECREF(self->resume_state);
    Py_XDECREF(self->abandoned_state);
    PyMem_RawFree(self->pending);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *state_save(LoaderObject *self, uint64_t epoch)
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
static void abandon_epoch(LoaderObject *self)
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

typedef struct {
    PyObject_HEAD
    LoaderObject *loader;
    uint64_t generation;
} LoaderIterObject;

static PyObject *loader_iter(LoaderObject *self)
{
    if (!loader_ready(self))
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
    return (PyObject *)it;
}

/* ---- Batch and Array ---- */

typedef struct {
    PyObject_HEAD
    LoaderObject *loader;
    feeder_batch *b;
    int nstreams;
    void *streams[FPY_MAX_STREAMS]; /* consumer streams of a device batch */
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *batch;
    void *data;
    int ndim;
    int64_t shape[FEEDER_FIELD_MAX_DIMS + 1]; /* a field: the batch, then up to 4 */
    int64_t strides[FEEDER_FIELD_MAX_DIMS + 1];
    DLDataType dtype;
    DLDevice device;
} ArrayObject;

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

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A view of a batch's images or labels in feeder's batch slot. torch.from_dlpack, "
              "numpy.from_dlpack and numpy.asarray take it without a copy; the slot goes back "
              "to the loader when the last view is freed.",
    .tp_dealloc = (destructor)array_dealloc,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
    .tp_as_sequence = &array_as_seq,
    .tp_repr = (reprfunc)array_repr,
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder._feeder.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A lent batch slot (internal).",
    .tp_dealloc = (destructor)batch_dealloc,
};

/* ---- the next batch ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

static PyObject *to_torch(LoaderObject *self, ArrayObject *a)
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

static void warn_host_batches(LoaderObject *self)
{
    self->warned_host = 1;
    const char *why = "";
    feeder_loader_gpu_status(self->ld, &why);
    PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                     "feeder: device=cuda:%d was asked for, but batches are on the host: %s",
                     self->device, why && why[0] ? why : "no reason given");
}

/* ---- fields batches: a dict of one array per field, lengths, offsets ---- */

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

static PyObject *fields_batch(LoaderObject *self, BatchObject *bo)
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

static PyObject *loaderiter_next(LoaderIterObject *it)
{
    LoaderObject *ld = it->loader;
    if (it->generation != ld->generation || !ld->in_epoch)
        return NULL;
    return loader_next_batch(ld);
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

static PyTypeObject LoaderIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder._feeder.LoaderIterator",
    .tp_basicsize = sizeof(LoaderIterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One epoch of a Loader.",
    .tp_dealloc = (destructor)loaderiter_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)loaderiter_next,
};

/* ---- Loader methods ---- */

static Py_ssize_t loader_len(LoaderObject *self)
{
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return -1;
    }
    double bs = 0, dl = 0;
    feeder_loader_get(self->ld, FEEDER_OPT_BATCH_SIZE, &bs);
    feeder_loader_get(self->ld, FEEDER_OPT_DROP_LAST, &dl);
    return (Py_ssize_t)feeder_batch_count(feeder_dataset_size(self->dataset->ds), (uint32_t)bs,
                                          dl != 0);
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

static PyObject *loader_decoder(LoaderObject *self, PyObject *unused)
{
    static const char *const names[] = {"turbo", "roi", "nvjpeg", "hybrid"};
    if (!self->ld) {
        PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
        return NULL;
    }
    const char *why = "";
    int d = feeder_loader_decoder(self->ld, &why);
    const char *io_why = "";
    const char *io = feeder_loader_io_backend(self->ld, &io_why);
    return Py_BuildValue("{s:s,s:s,s:s,s:s}", "decoder", d >= 0 && d < 4 ? names[d] : "?",
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

static PyGetSetDef loader_getset[] = {
    {"dataset", (getter)loader_get_dataset, NULL, "the dataset", NULL},
    {"epoch", (getter)loader_get_epoch, NULL, "the running epoch, else the next one", NULL},
    {"batch_size", (getter)loader_get_opt, NULL, "samples per batch",
     (void *)(intptr_t)FEEDER_OPT_BATCH_SIZE},
    {"num_workers", (getter)loader_get_opt, NULL, "worker processes",
     (void *)(intptr_t)FEEDER_OPT_NUM_WORKERS},
    {"_last_batch", (getter)loader_get_last_batch, NULL,
     "debug: the C pointers and numbers of the last batch lent", NULL},
    {NULL}};

static PySequenceMethods loader_as_seq = {.sq_length = (lenfunc)loader_len};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "feeder._feeder.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Loader(dataset, batch_size=64, shuffle=False, num_workers=0, ...): see feeder.Loader.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)loader_init,
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_iter = (getiterfunc)loader_iter,
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_as_sequence = &loader_as_seq,
};

/* ------------------------------------------------------------------------ */
/* Module                                                                    */
/* ------------------------------------------------------------------------ */

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
    PyTypeObject *types[] = {&DatasetType, &LoaderType, &LoaderIterType, &BatchType, &ArrayType};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&feeder_module);
    if (!m)
        return NULL;
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
