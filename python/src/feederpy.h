/*
 * feeder._feeder: the CPython face of feeder's public API (include/feeder.h).
 * What its files share; private to python/src.
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
 *
 * Files, one concern each:
 *   errors.c        result codes -> exception classes and messages
 *   dataset.c       Dataset
 *   loader_state.c  what the Loader's files share: usable?, destroy, epoch state
 *   augment.c       Loader(augment=...): the augment pipeline from a list of steps
 *   options.c       Loader.__init__: arguments -> feeder options, torch bound
 *   batch.c         Batch, Array, DLPack export, torch hand-off
 *   fields.c        fields batches as dicts
 *   iter.c          iter(loader), the iterator, next(): wait, then lend the batch
 *   loader.c        Loader: its methods (epochs, resume state, counters, close), type
 *   batches.c       BatchLoader: Python datasets in feeder's workers (feeder.DataLoader)
 *   convert.c       lookup(): host float batches of feeder.DataLoader's native pipeline
 *   module.c        PyInit__feeder: exception classes, types, constants, strerror
 * Each uses only those above it.
 */
#ifndef FEEDERPY_H
#define FEEDERPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "feeder.h"
#ifdef FEEDER_PY_CUDA
#include "feeder_cuda.h"
#endif
#include "dlpack.h"

/* Each feeder_next waits at most this long, so Ctrl-C is seen promptly. */
#define FPY_POLL_MS 100
#define FPY_MAX_STREAMS 8

/* The head every type object of the module begins with: its name, object
 * size, flags and deallocator; each type adds its own slots after it. */
#define FPY_TYPE_HEAD(name, object, flags, dealloc)                                           \
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = (name), .tp_basicsize = sizeof(object),         \
    .tp_flags = (flags), .tp_dealloc = (destructor)(dealloc)

/* errors.c (made by module.c) */
extern PyObject *FeederError, *SampleError, *WorkerError, *LoaderTimeoutError, *BusyError,
    *OptionError, *StateError, *DatasetError;
void raise_as(PyObject *cls, int rc, const char *detail);
void raise_rc(int rc, const char *detail);
void raise_open(int rc, const char *err, const char *path);

/* dataset.c */
typedef struct {
    PyObject_HEAD
    feeder_dataset *ds;
    int kind; /* 0 folder, 1 list, 2 packed, 3 tar shards */
    PyObject *source;
} DatasetObject;

extern PyTypeObject DatasetType;
int dataset_ready(DatasetObject *self);
int dataset_has_fields(const DatasetObject *self);

/* The Loader: loader_state.c, options.c (__init__), iter.c, loader.c (the type) */
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
    /* Loader(sampler=...) (sampler.c): the Python sampler, the C sampler
     * made on it, and the epoch's order drawn from it. */
    PyObject *py_sampler;
    feeder_sampler *smp;
    uint64_t *smp_idx;
    uint64_t smp_len, smp_epoch;
    int smp_have, smp_keep; /* smp_keep: state_dict() drew it, the next iter() uses it */
    /* Loader(batch_sampler=...): the epoch's batches, their indices one
     * after another in smp_idx and their lengths here (smp_nb of them). */
    int smp_batched;
    uint32_t *smp_lens;
    uint64_t smp_nb;
    /* The next epoch's order guessed (sampler.c, guess_next), so the C
     * loader may begin it early; it keeps those batches only when the
     * order drawn at that epoch's iter() is the same. */
    int smp_guess; /* GUESS_*: how the sampler's next order can be guessed */
    uint64_t *spec_idx;
    uint64_t spec_len, spec_epoch;
    int spec_have;
} LoaderObject;

/* loader_state.c */
int loader_ready(LoaderObject *self);
void loader_destroy_now(LoaderObject *self);
PyObject *state_save(LoaderObject *self, uint64_t epoch);
void abandon_epoch(LoaderObject *self);

/* sampler.c: Loader(sampler=...) */
int loader_sampler_create(LoaderObject *self, PyObject *sampler, PyObject *batch_sampler,
                          feeder_sampler **out);
int loader_sampler_push(LoaderObject *self, uint64_t epoch, int keep);
Py_ssize_t loader_sampler_len(LoaderObject *self);
void loader_sampler_free(LoaderObject *self);

/* augment.c: Loader(augment=[steps]) */
int set_augment(LoaderObject *self, PyObject *steps);

/* options.c */
int loader_init(LoaderObject *self, PyObject *args, PyObject *kw);

/* batch.c */
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

extern PyTypeObject BatchType, ArrayType;
PyObject *to_torch(LoaderObject *self, ArrayObject *a);

/* fields.c */
PyObject *fields_batch(LoaderObject *self, BatchObject *bo);

/* iter.c */
extern PyTypeObject LoaderIterType;
PyObject *loader_iter(LoaderObject *self);

/* loader.c */
extern PyTypeObject LoaderType;

/* batches.c: BatchLoader, the engine of feeder.DataLoader for Python datasets */
extern PyTypeObject BatchLoaderType;
int batches_ready_types(void);

/* convert.c */
extern PyMethodDef convert_methods[];

#endif
