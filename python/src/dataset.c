/*
 * feeder._feeder.Dataset: one feeder_dataset (an image folder, a list file,
 * a packed file or tar shards; feeder/__init__.py names the kinds), its
 * samples, classes and, for a fields packed file, its schema.
 */
#include "feederpy.h"

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

int dataset_ready(DatasetObject *self)
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
int dataset_has_fields(const DatasetObject *self)
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

PyTypeObject DatasetType = {
    FPY_TYPE_HEAD("feeder._feeder.Dataset", DatasetObject,
                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, dataset_dealloc),
    .tp_doc = "A feeder dataset; use feeder.ImageFolder, feeder.FileList or feeder.Packed.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dataset_init,
    .tp_methods = dataset_methods,
    .tp_getset = dataset_getset,
    .tp_as_sequence = &dataset_as_seq,
    .tp_repr = (reprfunc)dataset_repr,
};
