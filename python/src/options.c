/*
 * Loader.__init__: its arguments checked and set as the feeder_loader's
 * options (names to enum values, sizes, device and dtype, mean and std, the
 * train crop, the trace), what the module itself sets (the poll timeout,
 * workers that ignore SIGINT), and the torch hand-off bound once.
 */
#include "feederpy.h" /* first: it includes Python.h */

#include <math.h>
#include <signal.h>

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

/* `value`, a name of one of `opt`'s values (the library's table, case
 * ignored), into *out; else an OptionError listing the names. */
static int lookup(PyObject *value, const char *arg, feeder_option opt, int *out)
{
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a string, got %R", arg, value);
        return 0;
    }
    const char *s = PyUnicode_AsUTF8(value);
    if (!s)
        return 0;
    if (feeder_option_value(opt, s, out) == 0)
        return 1;
    PyObject *choices = PyUnicode_FromString("");
    const char *name;
    for (int i = 0; (name = feeder_option_value_name(opt, i)) && choices; i++) {
        PyObject *c = PyUnicode_FromFormat("%U%s'%s'", choices, i ? ", " : "", name);
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

/* A pair: size=(h, w), scale=(lo, hi); `pair` names its two values in the
 * message ("(height, width)"). */
static int parse_pair_d(PyObject *o, const char *arg, const char *pair, double *a, double *b)
{
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 2) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(OptionError, "%s=%R: expected a pair %s", arg, o, pair);
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
    /* torch's aliases of float16 and float32, beside the library's names */
    const char *alias = PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
    int ok;
    if (alias && strcasecmp(alias, "half") == 0)
        *out = FEEDER_DTYPE_FLOAT16, ok = 1;
    else if (alias && strcasecmp(alias, "float") == 0)
        *out = FEEDER_DTYPE_FLOAT32, ok = 1;
    else
        ok = lookup(s, "dtype", FEEDER_OPT_DTYPE, out);
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
    PyObject *trace, *channels, *augment, *sampler, *max_pixels, *max_decode_bytes, *max_side;
    PyObject *batch_sampler, *gpu_prefetch, *row_index_bytes;
} loader_args;

static int parse_loader_args(PyObject *args, PyObject *kw, loader_args *a)
{
    static char *kwlist[] = {"dataset", "batch_size", "shuffle", "num_workers", "prefetch_factor",
                             "persistent_workers", "drop_last", "timeout", "seed", "pipeline",
                             "size", "resize", "device", "dtype", "mean", "std", "layout",
                             "decoder", "in_order", "on_error", "io", "max_restarts", "scale",
                             "ratio", "flip_prob", "as_torch", "trace", "channels", "augment",
                             "sampler", "max_pixels", "max_decode_bytes", "max_side",
                             "batch_sampler", "gpu_prefetch", "row_index_bytes", NULL};
    *a = (loader_args){.shuffle = Py_False, .persistent = Py_False, .drop_last = Py_False,
                       .resize = Py_None, .device = Py_None, .dtype = Py_None, .mean = Py_None,
                       .std = Py_None, .in_order = Py_True, .scale = Py_None,
                       .ratio = Py_None, .flip_prob = Py_None, .as_torch = Py_None,
                       .trace = Py_None, .sampler = Py_None,
                       .batch_sampler = Py_None};
    return PyArg_ParseTupleAndKeywords(
        args, kw, "O!|OOOOOOdOOOOOOOOOOOOOOOOOOOOOOOOOOOO", kwlist, &DatasetType, &a->ds, &a->batch,
        &a->shuffle, &a->workers, &a->prefetch, &a->persistent, &a->drop_last, &a->timeout,
        &a->seed, &a->pipeline, &a->size, &a->resize, &a->device, &a->dtype, &a->mean, &a->std,
        &a->layout, &a->decoder, &a->in_order, &a->on_error, &a->io, &a->max_restarts, &a->scale,
        &a->ratio, &a->flip_prob, &a->as_torch, &a->trace, &a->channels, &a->augment,
        &a->sampler, &a->max_pixels, &a->max_decode_bytes, &a->max_side, &a->batch_sampler,
        &a->gpu_prefetch, &a->row_index_bytes);
}

/* An argument that is an integer (or a bool) or a name of one of the
 * option's values, as the library's table spells them. */
typedef struct plain_option {
    const char *arg;
    size_t field; /* offsetof(loader_args, ...) */
    feeder_option opt;
    int named;    /* 1: a name (lookup), 0: an integer (parse_int) */
} plain_option;

#define PLAIN(arg, field, opt, named) {arg, offsetof(loader_args, field), opt, named}
static const plain_option PLAIN_OPTIONS[] = {
    PLAIN("batch_size", batch, FEEDER_OPT_BATCH_SIZE, 0),
    PLAIN("shuffle", shuffle, FEEDER_OPT_SHUFFLE, 0),
    PLAIN("num_workers", workers, FEEDER_OPT_NUM_WORKERS, 0),
    PLAIN("prefetch_factor", prefetch, FEEDER_OPT_PREFETCH_FACTOR, 0),
    PLAIN("persistent_workers", persistent, FEEDER_OPT_PERSISTENT_WORKERS, 0),
    PLAIN("drop_last", drop_last, FEEDER_OPT_DROP_LAST, 0),
    PLAIN("seed", seed, FEEDER_OPT_SEED, 0),
    PLAIN("in_order", in_order, FEEDER_OPT_IN_ORDER, 0),
    PLAIN("max_restarts", max_restarts, FEEDER_OPT_MAX_RESTARTS, 0),
    PLAIN("channels", channels, FEEDER_OPT_CHANNELS, 0),
    PLAIN("max_pixels", max_pixels, FEEDER_OPT_MAX_PIXELS, 0),
    PLAIN("max_decode_bytes", max_decode_bytes, FEEDER_OPT_MAX_DECODE_BYTES, 0),
    PLAIN("max_side", max_side, FEEDER_OPT_MAX_SIDE, 0),
    PLAIN("gpu_prefetch", gpu_prefetch, FEEDER_OPT_GPU_PREFETCH, 0),
    PLAIN("row_index_bytes", row_index_bytes, FEEDER_OPT_ROW_INDEX_BYTES, 0),
    PLAIN("pipeline", pipeline, FEEDER_OPT_PIPELINE, 1),
    PLAIN("decoder", decoder, FEEDER_OPT_DECODER, 1),
    PLAIN("on_error", on_error, FEEDER_OPT_ERROR_POLICY, 1),
    PLAIN("io", io, FEEDER_OPT_IO, 1),
};
#undef PLAIN

/* An integer argument `o` (NULL: not given) set as `opt`. */
static int set_int_arg(LoaderObject *self, PyObject *o, const char *arg, feeder_option opt)
{
    int64_t v;
    return !o || (parse_int(o, arg, &v) && set_opt(self, opt, v));
}

/* The options that are an integer or a name each: those given, in the
 * table's order. seed=None is not set (the loader draws one). */
static int set_plain_options(LoaderObject *self, const loader_args *a)
{
    for (size_t i = 0; i < sizeof(PLAIN_OPTIONS) / sizeof(PLAIN_OPTIONS[0]); i++) {
        const plain_option *p = &PLAIN_OPTIONS[i];
        PyObject *o = *(PyObject *const *)((const char *)a + p->field);
        if (!o || (p->opt == FEEDER_OPT_SEED && o == Py_None))
            continue;
        int e;
        int ok = p->named ? lookup(o, p->arg, p->opt, &e) && set_opt(self, p->opt, e)
                          : set_int_arg(self, o, p->arg, p->opt);
        if (!ok)
            return 0;
    }
    return 1;
}

/* A RAW pack's records have a shape and layout of their own. */
static int is_raw_pack(const LoaderObject *self)
{
    feeder_packed_info pi;
    return feeder_dataset_packed_info(self->dataset->ds, &pi) == 0 &&
           pi.kind == FEEDER_RECORD_RAW;
}

/* layout, size (N or (H, W)) and resize, which size sets unless given. */
static int set_shape(LoaderObject *self, const loader_args *a)
{
    int64_t v;
    int e;
    /* PyTorch's convention: a batch of images is N x C x H x W. A RAW pack's
     * host batches are its records as stored: the loader adopts the pack's
     * layout (and shape) unless they are given, as in C; float batches on
     * the device (dtype) are laid out on the GPU, NCHW unless given. */
    int adopt = !a->layout && is_raw_pack(self) && a->dtype == Py_None;
    if (!a->layout)
        e = FEEDER_LAYOUT_NCHW;
    else if (!lookup(a->layout, "layout", FEEDER_OPT_LAYOUT, &e))
        return 0;
    if (!adopt && !set_opt(self, FEEDER_OPT_LAYOUT, e))
        return 0;
    if (a->size) {
        double h, w;
        if (PyLong_Check(a->size)) {
            if (!parse_int(a->size, "size", &v))
                return 0;
            h = w = (double)v;
        } else if (!parse_pair_d(a->size, "size", "(height, width) or an int", &h, &w)) {
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
    return a->resize == Py_None || set_int_arg(self, a->resize, "resize", FEEDER_OPT_RESIZE);
}

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
    if (a->scale != Py_None && (!parse_pair_d(a->scale, "scale", "(min, max)", &lo, &hi) ||
                                !set_optd(self, FEEDER_OPT_SCALE_MIN, lo) ||
                                !set_optd(self, FEEDER_OPT_SCALE_MAX, hi)))
        return 0;
    if (a->ratio != Py_None && (!parse_pair_d(a->ratio, "ratio", "(min, max)", &lo, &hi) ||
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

/* batch_sampler= without batch_size=: the batch sampler's own int
 * batch_size sizes the slots, which are made before its first batch is
 * drawn. */
static int set_batch_sampler_room(LoaderObject *self, const loader_args *a)
{
    if (a->batch_sampler == Py_None || a->batch)
        return 1;
    PyObject *o = PyObject_GetAttrString(a->batch_sampler, "batch_size");
    if (!o || !PyLong_Check(o) || PyBool_Check(o)) {
        Py_XDECREF(o);
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError,
                        "batch_sampler: give batch_size, the most indices one of its batches "
                        "may hold (the slots are made before its first batch is drawn), or a "
                        "batch sampler with an int batch_size attribute");
        return 0;
    }
    int ok = set_int_arg(self, o, "batch_sampler.batch_size", FEEDER_OPT_BATCH_SIZE);
    Py_DECREF(o);
    return ok;
}

int loader_init(LoaderObject *self, PyObject *args, PyObject *kw)
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
    if (!(a.timeout >= 0) || isinf(a.timeout)) { /* NaN compares false: refused too */
        /* PyErr_Format has no %g (Python 3.12 raises SystemError on it). */
        char msg[96];
        snprintf(msg, sizeof(msg), "timeout=%g: expected seconds >= 0 (0: wait forever)",
                 a.timeout);
        PyErr_SetString(OptionError, msg);
        return -1;
    }
    if (a.sampler != Py_None && PyObject_IsTrue(a.shuffle) > 0) {
        PyErr_SetString(PyExc_ValueError, "sampler option is mutually exclusive with shuffle");
        return -1;
    }
    if (a.batch_sampler != Py_None &&
        (a.sampler != Py_None || PyObject_IsTrue(a.shuffle) > 0 ||
         PyObject_IsTrue(a.drop_last) > 0)) {
        PyErr_SetString(PyExc_ValueError, "batch_sampler option is mutually exclusive with "
                                          "shuffle, sampler, and drop_last");
        return -1;
    }
    self->dataset = (DatasetObject *)Py_NewRef(a.ds);
    feeder_sampler *smp = NULL;
    if (loader_sampler_create(self, a.sampler, a.batch_sampler, &smp))
        return -1;
    self->smp = smp;
    int rc = feeder_loader_create(ds->ds, smp, &self->ld);
    if (rc) {
        raise_rc(rc, "feeder_loader_create");
        return -1;
    }
    self->fields = dataset_has_fields(ds);
    self->timeout_s = a.timeout;
    if (!set_plain_options(self, &a) || !set_batch_sampler_room(self, &a) ||
        !set_shape(self, &a) || !set_device_values(self, &a) ||
        !set_crop_and_flip(self, &a) || !set_trace(self, a.trace) || !set_module_options(self) ||
        !set_augment(self, a.augment))
        return -1;
    return bind_torch(self, a.as_torch);
}
