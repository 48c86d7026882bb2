/*
 * Loader(augment=[...]): the augment pipeline (include/feeder.h,
 * "Augmentation") from a list of steps, each a tuple naming a
 * feeder_augment_* call and its arguments in the C order:
 *   ("flip", vertical, p)            ("color_jitter", b, c, s, h)
 *   ("grayscale", p)                 ("blur", kernel_size, sigma_min, sigma_max)
 *   ("rotate", degrees, interp, fill)
 *   ("erase", p, scale_min, scale_max, ratio_min, ratio_max, value)
 *   ("trivial", num_bins, interp, fill)
 *   ("randaugment", num_ops, magnitude, num_bins, interp, fill)
 *   ("mixup", alpha, p)              ("cutmix", alpha, p)
 * interp 0 nearest, 1 bilinear; fill -1 (none) or 0..255. feeder.transforms
 * compiles torchvision-named transforms into this list.
 */
#include "feederpy.h"

static int add_step(feeder_augment *aug, PyObject *step)
{
    if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) < 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(step, 0))) {
        PyErr_Format(OptionError, "augment: each step is a tuple (name, args...), got %R", step);
        return -1;
    }
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(step, 0));
    PyObject *rest = PyTuple_GetSlice(step, 1, PyTuple_GET_SIZE(step));
    if (!name || !rest)
        return -1;
    double a, b, c, d, e;
    int i, j, k, l, m;
    int rc = 0, ok = 1;
    if (!strcmp(name, "flip"))
        ok = PyArg_ParseTuple(rest, "id", &i, &a) && !(rc = feeder_augment_flip(aug, i, a));
    else if (!strcmp(name, "color_jitter"))
        ok = PyArg_ParseTuple(rest, "dddd", &a, &b, &c, &d) &&
             !(rc = feeder_augment_color_jitter(aug, a, b, c, d));
    else if (!strcmp(name, "grayscale"))
        ok = PyArg_ParseTuple(rest, "d", &a) && !(rc = feeder_augment_grayscale(aug, a));
    else if (!strcmp(name, "blur"))
        ok = PyArg_ParseTuple(rest, "idd", &i, &a, &b) &&
             !(rc = feeder_augment_blur(aug, (uint32_t)i, a, b));
    else if (!strcmp(name, "rotate"))
        ok = PyArg_ParseTuple(rest, "dii", &a, &i, &j) && !(rc = feeder_augment_rotate(aug, a, i, j));
    else if (!strcmp(name, "erase"))
        ok = PyArg_ParseTuple(rest, "dddddi", &a, &b, &c, &d, &e, &i) &&
             !(rc = feeder_augment_erase(aug, a, b, c, d, e, i));
    else if (!strcmp(name, "trivial"))
        ok = PyArg_ParseTuple(rest, "iii", &i, &j, &k) &&
             !(rc = feeder_augment_trivial(aug, (uint32_t)i, j, k));
    else if (!strcmp(name, "randaugment"))
        ok = PyArg_ParseTuple(rest, "iiiii", &i, &j, &k, &l, &m) &&
             !(rc = feeder_augment_randaugment(aug, (uint32_t)i, (uint32_t)j, (uint32_t)k, l, m));
    else if (!strcmp(name, "mixup"))
        ok = PyArg_ParseTuple(rest, "dd", &a, &b) && !(rc = feeder_augment_mixup(aug, a, b));
    else if (!strcmp(name, "cutmix"))
        ok = PyArg_ParseTuple(rest, "dd", &a, &b) && !(rc = feeder_augment_cutmix(aug, a, b));
    else {
        PyErr_Format(OptionError, "augment: no step named '%s' (flip, color_jitter, grayscale, "
                     "blur, rotate, erase, trivial, randaugment, mixup, cutmix)", name);
        ok = 0;
    }
    Py_DECREF(rest);
    if (rc) {
        PyErr_Format(OptionError, "augment step '%s': %s", name, feeder_augment_errmsg(aug));
        return -1;
    }
    return ok ? 0 : -1;
}

int set_augment(LoaderObject *self, PyObject *steps)
{
    if (!steps || steps == Py_None)
        return 1;
    PyObject *seq = PySequence_Fast(steps, "augment: expected a list of steps");
    if (!seq)
        return 0;
    feeder_augment *aug;
    int rc = feeder_augment_create(&aug);
    if (rc) {
        Py_DECREF(seq);
        raise_rc(rc, "feeder_augment_create");
        return 0;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(seq); i++)
        ok = add_step(aug, PySequence_Fast_GET_ITEM(seq, i)) == 0;
    if (ok && (rc = feeder_loader_set_augment(self->ld, aug))) {
        raise_rc(rc, feeder_loader_errmsg(self->ld));
        ok = 0;
    }
    feeder_augment_destroy(aug);
    Py_DECREF(seq);
    return ok;
}
