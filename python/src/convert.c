/*
 * feeder.DataLoader's host float batches: a native pipeline ending in
 * ToDtype / Normalize without device= gives uint8 pixels, and each is
 * replaced by its entry in a per-channel table of 256 values that the
 * Python side makes with the same torch ops it would run on the batch, so
 * the result is bit for bit what those ops give.
 *
 * Why a table instead of the torch ops: the ops are four passes over the
 * float batch, each split over every intra-op thread (one a core), on the
 * cores the workers decode on (the contention feeder/_pin.py describes for
 * pinning); this is one pass without the GIL,
 * split over a few threads that exist only for the call, straight into the
 * destination (a pinned block when the batch is pinned, which saves that
 * copy too). Nothing in torch looks a uint8 tensor up in a table
 * (index_select / take make int64 indices first). Four threads: at 15
 * workers on 16 cores, 1 gave 5,280-5,853 images/s, 2 6,057-6,602, 4
 * 6,492-6,612, 8 6,690-6,826 (docs/BENCHMARKS.md).
 *
 * An unpinned float batch is 4 bytes a pixel of new memory each batch (38 MB
 * for 64 images of 224 x 224): from malloc that is a fresh mapping whose
 * every page faults on its first write, which cost more than the lookup
 * itself. empty() hands out blocks that go back to a small pool when torch
 * frees the last view of them (the DLPack deleter), so the pages stay mapped
 * and written. torch's pinned allocator caches its blocks the same way.
 */
#include "feederpy.h"

#include <pthread.h>
#include <sys/mman.h>

enum { LOOKUP_MAX_THREADS = 8 };

/* Planes [lo, hi) of an NCHW batch (plane p is channel p % channels). */
typedef struct lookup_job {
    const uint8_t *src;
    void *dst;
    const void *table;
    Py_ssize_t channels, plane, tch, isz, lo, hi;
} lookup_job;

static void lookup_planes(const lookup_job *j)
{
    for (Py_ssize_t p = j->lo; p < j->hi; p++) {
        Py_ssize_t c = p % j->channels, at = p * j->plane;
        const uint8_t *s = j->src + at;
        if (j->isz == 4) {
            const uint32_t *t = (const uint32_t *)j->table + (j->tch == 1 ? 0 : c) * 256;
            uint32_t *d = (uint32_t *)j->dst + at;
            for (Py_ssize_t i = 0; i < j->plane; i++)
                d[i] = t[s[i]];
        } else {
            const uint16_t *t = (const uint16_t *)j->table + (j->tch == 1 ? 0 : c) * 256;
            uint16_t *d = (uint16_t *)j->dst + at;
            for (Py_ssize_t i = 0; i < j->plane; i++)
                d[i] = t[s[i]];
        }
    }
}

static void *lookup_main(void *arg)
{
    lookup_planes(arg);
    return NULL;
}

/* lookup(src, dst, images, channels, plane, table, table_channels, itemsize,
 * threads=1): for every image and channel c, dst[i] = table[c or 0][src[i]]
 * over the plane's `plane` bytes (NCHW), the planes split over `threads`
 * threads (this one and threads - 1 started for the call, at most 8: they
 * sleep in no pool between batches, unlike the intra-op threads). Addresses
 * are data_ptr()s the caller keeps alive; itemsize 2 or 4. */
static PyObject *mod_lookup(PyObject *m, PyObject *args)
{
    unsigned long long src_a, dst_a, table_a;
    Py_ssize_t images, channels, plane, tch, isz, threads = 1;
    if (!PyArg_ParseTuple(args, "KKnnnKnn|n", &src_a, &dst_a, &images, &channels, &plane,
                          &table_a, &tch, &isz, &threads))
        return NULL;
    if (images < 0 || channels < 1 || plane < 0 || (tch != 1 && tch != channels) ||
        (isz != 2 && isz != 4) || threads < 1 || threads > LOOKUP_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError,
                     "lookup: images %zd, channels %zd, plane %zd, table channels %zd, "
                     "itemsize %zd, threads %zd",
                     images, channels, plane, tch, isz, threads);
        return NULL;
    }
    Py_ssize_t planes = images * channels;
    if (threads > planes)
        threads = planes ? planes : 1;
    lookup_job jobs[LOOKUP_MAX_THREADS];
    pthread_t th[LOOKUP_MAX_THREADS];
    int started[LOOKUP_MAX_THREADS] = {0};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < threads; k++) {
        jobs[k] = (lookup_job){(const uint8_t *)(uintptr_t)src_a, (void *)(uintptr_t)dst_a,
                               (const void *)(uintptr_t)table_a, channels, plane, tch, isz,
                               planes * k / threads, planes * (k + 1) / threads};
        if (k > 0)
            started[k] = pthread_create(&th[k], NULL, lookup_main, &jobs[k]) == 0;
    }
    lookup_planes(&jobs[0]);
    for (Py_ssize_t k = 1; k < threads; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            lookup_planes(&jobs[k]); /* no thread: this one does that part too */
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---- pooled host blocks ---- */

enum { POOL_KEEP = 8 }; /* free blocks kept; a prefetch's worth of batches */

typedef struct pblock {
    DLManagedTensor m;
    int64_t shape[4];
    size_t bytes;
    void *mem;
    struct pblock *next;
} pblock;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pblock *pool; /* free blocks, the most recently freed first */
static int pool_n;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void block_unmap(pblock *b)
{
    munmap(b->mem, b->bytes);
    free(b);
}

/* A forked child may have copied the mutex held: it starts with an empty
 * pool (its copies of the free blocks are simply not reused). */
static void pool_child(void)
{
    pthread_mutex_init(&pool_mu, NULL);
    pool = NULL;
    pool_n = 0;
}

static void pool_init(void) { pthread_atfork(NULL, NULL, pool_child); }

/* torch frees the last view: back to the pool (on any thread, without the
 * GIL; nothing here touches Python). The oldest free block goes past
 * POOL_KEEP. */
static void block_deleter(DLManagedTensor *m)
{
    pblock *b = m->manager_ctx, *drop = NULL;
    pthread_mutex_lock(&pool_mu);
    b->next = pool;
    pool = b;
    if (++pool_n > POOL_KEEP) {
        pblock **p = &pool;
        while ((*p)->next)
            p = &(*p)->next;
        drop = *p;
        *p = NULL;
        pool_n--;
    }
    pthread_mutex_unlock(&pool_mu);
    if (drop)
        block_unmap(drop);
}

static void block_capsule_dtor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) { /* never taken by a consumer */
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    }
}

static pblock *block_take(size_t bytes)
{
    pthread_mutex_lock(&pool_mu);
    for (pblock **p = &pool; *p; p = &(*p)->next)
        if ((*p)->bytes == bytes) {
            pblock *b = *p;
            *p = b->next;
            pool_n--;
            pthread_mutex_unlock(&pool_mu);
            return b;
        }
    pthread_mutex_unlock(&pool_mu);
    pblock *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->bytes = bytes;
    b->mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->mem == MAP_FAILED) {
        free(b);
        return NULL;
    }
    return b;
}

/* empty(n, c, h, w, kind): a DLPack capsule of an uninitialised contiguous
 * n x c x h x w host tensor from the pool; kind 0 float32, 1 float16,
 * 2 bfloat16. */
static PyObject *mod_empty(PyObject *m, PyObject *args)
{
    Py_ssize_t d[4];
    int kind;
    if (!PyArg_ParseTuple(args, "nnnni", &d[0], &d[1], &d[2], &d[3], &kind))
        return NULL;
    static const DLDataType types[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
    size_t bytes = kind == 0 ? 4 : 2;
    for (int i = 0; i < 4; i++) {
        if (d[i] < 1 || bytes > SIZE_MAX / (size_t)d[i] || kind < 0 || kind > 2) {
            PyErr_Format(PyExc_ValueError, "empty: shape (%zd, %zd, %zd, %zd), kind %d", d[0],
                         d[1], d[2], d[3], kind);
            return NULL;
        }
        bytes *= (size_t)d[i];
    }
    pthread_once(&pool_once, pool_init);
    pblock *b = block_take(bytes);
    if (!b)
        return PyErr_NoMemory();
    for (int i = 0; i < 4; i++)
        b->shape[i] = d[i];
    b->m = (DLManagedTensor){.dl_tensor = {.data = b->mem,
                                           .device = {kDLCPU, 0},
                                           .ndim = 4,
                                           .dtype = types[kind],
                                           .shape = b->shape,
                                           .strides = NULL,
                                           .byte_offset = 0},
                             .manager_ctx = b,
                             .deleter = block_deleter};
    PyObject *cap = PyCapsule_New(&b->m, "dltensor", block_capsule_dtor);
    if (!cap)
        block_deleter(&b->m);
    return cap;
}

PyMethodDef convert_methods[] = {
    {"lookup", mod_lookup, METH_VARARGS,
     "lookup(src, dst, images, channels, plane, table, table_channels, itemsize, threads=1): "
     "host float batches from uint8 pixels through a per-channel table (addresses)."},
    {"empty", mod_empty, METH_VARARGS,
     "empty(n, c, h, w, kind): a DLPack capsule of a pooled host block (kind 0 float32, "
     "1 float16, 2 bfloat16)."},
    {NULL}};
