/*
 * The timeline trace: fixed-size records appended lock-free to per-track
 * arrays, written as Chrome Trace Event JSON (trace.h).
 *
 * Appending is one atomic fetch-add on the track's counter, the record's
 * fields, then a release store of its kind/name, which marks it complete: a
 * writer that runs at the same moment (feeder_loader_trace_flush while pin
 * threads record) reads only records already marked, and a worker killed in
 * the middle of a record leaves one that is never marked. Nothing is ever
 * locked on the recording path, and memory is fixed when the track is made:
 * past `cap` records a span is counted as dropped instead.
 *
 * Worker areas are one memfd mapped MAP_SHARED before the workers fork: a
 * worker (or the worker started again after a death) appends through the
 * mapping it inherited, and the parent reads the same pages when it writes.
 * Pages are touched only as records arrive, so an area costs memory for the
 * spans it holds, not for its cap.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "feeder.h"
#include "common/common.h"
#include "common/trace.h"

#define MAX_TRACKS 192
#define MAX_PIDS 16
#define MAX_HOLDS 256
#define MAX_LANES 8
#define NAME_LEN 64
/* Thread ids in the file: main-process tracks 1, 2, ... in the order they
 * were made; worker w at WORKER_TID + w, the calling thread after them.
 * Perfetto and chrome://tracing sort threads by thread_sort_index, set to the
 * tid, so the consumer comes first and the workers follow in id order. */
#define WORKER_TID 1000

typedef struct wrec {
    uint64_t t0, t1;
    int64_t epoch, batch, index;
    _Atomic uint32_t kind; /* 0 until the record is complete */
    uint32_t pad_;
} wrec;

typedef struct warea {
    _Atomic uint64_t n;       /* records claimed (may pass cap) */
    _Atomic uint64_t dropped;
    _Atomic uint32_t npids;
    _Atomic int32_t pids[MAX_PIDS];
    char pad_[256 - 8 - 8 - 4 - 4 * MAX_PIDS];
    /* then cap records */
} warea;

typedef struct mrec {
    uint64_t t0, t1;
    int64_t epoch, batch, index;
    const char *_Atomic name; /* NULL until the record is complete */
} mrec;

typedef struct mtrack {
    char name[NAME_LEN];
    _Atomic uint64_t n;
    _Atomic uint64_t dropped;
    mrec *v; /* cap records, mapped when the track is made */
} mtrack;

typedef struct hold {
    const void *key; /* NULL: free */
    uint64_t t;
    int64_t epoch, batch;
    int lane;
} hold;

struct feeder__trace {
    char *path;
    int nworkers, nareas;
    uint32_t cap;
    uint8_t *shm;
    size_t shm_bytes, area_bytes;
    int pid;
    pthread_mutex_t lock; /* making tracks, writing */
    _Atomic int ntracks;
    mtrack tracks[MAX_TRACKS];
    int consumer;
    /* The loader's thread only. */
    hold holds[MAX_HOLDS];
    int lanes[MAX_LANES];
    int lane_busy[MAX_LANES];
    uint64_t hold_dropped;
};

/* "held by user" spans are named after their batch when written. Told apart
 * by their text, not their address: the GPU plugin has its own copy of this
 * file (docs/ARCHITECTURE.md, "The GPU plugin") and records through the same
 * trace object, with its own HELD. */
static const char HELD[] = "held by user";

static const char *const KIND_NAME[] = {"", "read", "decode", "transform", "callback"};

static _Atomic uint32_t cap_override;

void feeder__trace_set_cap(uint32_t cap) { atomic_store(&cap_override, cap); }

static warea *area(const feeder__trace *tr, int i)
{
    return (warea *)(tr->shm + (size_t)i * tr->area_bytes);
}

static wrec *area_recs(warea *a) { return (wrec *)(a + 1); }

feeder__trace *feeder__trace_create(const char *path, int nworkers, char *err, size_t errlen)
{
    if (!path || !*path || nworkers < 0) {
        feeder__fmt(err, errlen, "trace: no path");
        return NULL;
    }
    feeder__trace *tr = calloc(1, sizeof(*tr));
    if (!tr || !(tr->path = strdup(path))) {
        free(tr);
        feeder__fmt(err, errlen, "trace: out of memory");
        return NULL;
    }
    uint32_t cap = atomic_load(&cap_override);
    tr->cap = cap ? cap : FEEDER__TRACE_CAP;
    tr->nworkers = nworkers;
    tr->nareas = nworkers + 1; /* the last one: the calling thread (num_workers 0) */
    tr->pid = (int)getpid();
    tr->consumer = -1;
    for (int i = 0; i < MAX_LANES; i++)
        tr->lanes[i] = -1;
    pthread_mutex_init(&tr->lock, NULL);
    tr->area_bytes = (sizeof(warea) + (size_t)tr->cap * sizeof(wrec) + 4095) & ~(size_t)4095;
    tr->shm_bytes = tr->area_bytes * (size_t)tr->nareas;
    /* The descriptor is closed once mapped: the mapping keeps the memory, and
     * a worker then holds no extra descriptor. */
    int fd = memfd_create("feeder-trace", MFD_CLOEXEC);
    if (fd < 0) {
        feeder__fmt(err, errlen, "trace: memfd_create: %s", strerror(errno));
        goto fail;
    }
    if (ftruncate(fd, (off_t)tr->shm_bytes) < 0) {
        feeder__fmt(err, errlen, "trace: sizing the worker areas to %zu bytes: %s", tr->shm_bytes,
                    strerror(errno));
        close(fd);
        goto fail;
    }
    void *m = mmap(NULL, tr->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        feeder__fmt(err, errlen, "trace: mmap of %zu bytes: %s", tr->shm_bytes, strerror(e));
        goto fail;
    }
    tr->shm = m;
    tr->consumer = feeder__trace_track(tr, "consumer");
    if (tr->consumer < 0) {
        feeder__fmt(err, errlen, "trace: out of memory");
        goto fail;
    }
    return tr;
fail:
    feeder__trace_destroy(tr);
    return NULL;
}

void feeder__trace_destroy(feeder__trace *tr)
{
    if (!tr)
        return;
    int n = atomic_load(&tr->ntracks);
    for (int i = 0; i < n; i++)
        munmap(tr->tracks[i].v, (size_t)tr->cap * sizeof(mrec));
    if (tr->shm)
        munmap(tr->shm, tr->shm_bytes);
    pthread_mutex_destroy(&tr->lock);
    free(tr->path);
    free(tr);
}

const char *feeder__trace_path(const feeder__trace *tr) { return tr ? tr->path : ""; }

int feeder__trace_consumer(const feeder__trace *tr) { return tr ? tr->consumer : -1; }

static int add_track(feeder__trace *tr, const char *prefix, int numbered)
{
    if (!tr)
        return -1;
    pthread_mutex_lock(&tr->lock);
    int i = atomic_load_explicit(&tr->ntracks, memory_order_relaxed);
    int id = -1;
    if (i < MAX_TRACKS) {
        mtrack *t = &tr->tracks[i];
        if (numbered) {
            size_t plen = strlen(prefix);
            int k = 0;
            for (int j = 0; j < i; j++)
                if (!strncmp(tr->tracks[j].name, prefix, plen) && tr->tracks[j].name[plen] == ' ')
                    k++;
            feeder__fmt(t->name, sizeof(t->name), "%s %d", prefix, k);
        } else {
            feeder__fmt(t->name, sizeof(t->name), "%s", prefix);
        }
        void *v = mmap(NULL, (size_t)tr->cap * sizeof(mrec), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (v != MAP_FAILED) {
            t->v = v;
            atomic_store_explicit(&tr->ntracks, i + 1, memory_order_release);
            id = i;
        }
    }
    pthread_mutex_unlock(&tr->lock);
    return id;
}

int feeder__trace_track(feeder__trace *tr, const char *name) { return add_track(tr, name, 0); }

int feeder__trace_track_next(feeder__trace *tr, const char *prefix)
{
    return add_track(tr, prefix, 1);
}

void feeder__trace_span_e(feeder__trace *tr, int track, const char *name, uint64_t t0_ns,
                          uint64_t t1_ns, int64_t epoch, int64_t batch, int64_t index)
{
    if (!tr || track < 0 || track >= atomic_load_explicit(&tr->ntracks, memory_order_acquire) ||
        !name)
        return;
    mtrack *t = &tr->tracks[track];
    uint64_t i = atomic_fetch_add_explicit(&t->n, 1, memory_order_relaxed);
    if (i >= tr->cap) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return;
    }
    mrec *r = &t->v[i];
    r->t0 = t0_ns;
    r->t1 = t1_ns;
    r->epoch = epoch;
    r->batch = batch;
    r->index = index;
    atomic_store_explicit(&r->name, name, memory_order_release);
}

void feeder__trace_span(feeder__trace *tr, int track, const char *name, uint64_t t0_ns,
                        uint64_t t1_ns, int64_t batch, int64_t index)
{
    feeder__trace_span_e(tr, track, name, t0_ns, t1_ns, -1, batch, index);
}

static int area_index(const feeder__trace *tr, int worker)
{
    if (worker < 0)
        return tr->nworkers;
    return worker < tr->nworkers ? worker : -1;
}

void feeder__trace_worker_span(feeder__trace *tr, int worker, int kind, uint64_t t0_ns,
                               uint64_t t1_ns, int64_t epoch, int64_t batch, int64_t index)
{
    int a = tr ? area_index(tr, worker) : -1;
    if (a < 0 || kind <= 0 || kind > FEEDER__SPAN_CALLBACK)
        return;
    warea *w = area(tr, a);
    uint64_t i = atomic_fetch_add_explicit(&w->n, 1, memory_order_relaxed);
    if (i >= tr->cap) {
        atomic_fetch_add_explicit(&w->dropped, 1, memory_order_relaxed);
        return;
    }
    wrec *r = &area_recs(w)[i];
    r->t0 = t0_ns;
    r->t1 = t1_ns;
    r->epoch = epoch;
    r->batch = batch;
    r->index = index;
    atomic_store_explicit(&r->kind, (uint32_t)kind, memory_order_release);
}

void feeder__trace_decode(feeder__trace *tr, int worker, uint64_t t0_ns, uint64_t decode_ns,
                          uint64_t transform_ns, int ok, uint64_t epoch, uint64_t batch,
                          uint64_t index)
{
    if (!tr)
        return;
    uint64_t t1 = t0_ns + decode_ns;
    feeder__trace_worker_span(tr, worker, FEEDER__SPAN_DECODE, t0_ns, t1, (int64_t)epoch,
                              (int64_t)batch, (int64_t)index);
    if (ok)
        feeder__trace_worker_span(tr, worker, FEEDER__SPAN_TRANSFORM, t1, t1 + transform_ns,
                                  (int64_t)epoch, (int64_t)batch, (int64_t)index);
}

void feeder__trace_worker_pid(feeder__trace *tr, int worker, int pid)
{
    int a = tr ? area_index(tr, worker) : -1;
    if (a < 0)
        return;
    warea *w = area(tr, a);
    uint32_t k = atomic_fetch_add(&w->npids, 1);
    if (k < MAX_PIDS)
        atomic_store(&w->pids[k], pid);
}

void feeder__trace_hold(feeder__trace *tr, const void *key, uint64_t t_ns, int64_t epoch,
                        int64_t batch)
{
    if (!tr || !key)
        return;
    hold *h = NULL;
    for (int i = 0; i < MAX_HOLDS && !h; i++)
        if (!tr->holds[i].key)
            h = &tr->holds[i];
    if (!h) {
        tr->hold_dropped++;
        return;
    }
    /* Batches held at once overlap in time; each gets the first free lane (a
     * track of its own), so no track has overlapping spans, which the viewers
     * would draw as wrongly nested. Past MAX_LANES they share the last. */
    int lane = MAX_LANES - 1;
    for (int i = 0; i < MAX_LANES; i++) {
        if (!tr->lane_busy[i]) {
            lane = i;
            break;
        }
    }
    if (tr->lanes[lane] < 0) {
        char name[NAME_LEN];
        if (lane == 0)
            feeder__fmt(name, sizeof(name), "batches held by user");
        else
            feeder__fmt(name, sizeof(name), "batches held by user (%d)", lane + 1);
        tr->lanes[lane] = feeder__trace_track(tr, name);
    }
    tr->lane_busy[lane]++;
    *h = (hold){.key = key, .t = t_ns, .epoch = epoch, .batch = batch, .lane = lane};
}

void feeder__trace_unhold(feeder__trace *tr, const void *key, uint64_t t_ns)
{
    if (!tr || !key)
        return;
    for (int i = 0; i < MAX_HOLDS; i++) {
        hold *h = &tr->holds[i];
        if (h->key != key)
            continue;
        feeder__trace_span_e(tr, tr->lanes[h->lane], HELD, h->t, t_ns, h->epoch, h->batch, -1);
        tr->lane_busy[h->lane]--;
        h->key = NULL;
        return;
    }
}

uint64_t feeder__trace_dropped(const feeder__trace *tr)
{
    if (!tr)
        return 0;
    feeder__trace *t = (feeder__trace *)tr;
    uint64_t d = t->hold_dropped;
    int n = atomic_load(&t->ntracks);
    for (int i = 0; i < n; i++)
        d += atomic_load(&t->tracks[i].dropped);
    for (int i = 0; i < t->nareas; i++)
        d += atomic_load(&area(t, i)->dropped);
    return d;
}

/* ---- writing ---- */

/* A JSON string: quotes, backslashes and control bytes escaped. Names are
 * the library's own ASCII text, so other bytes pass as they are. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Microseconds with three decimals, exactly (no double on the way). */
static void us(FILE *f, uint64_t ns)
{
    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void thread_meta(FILE *f, int pid, int tid, const char *name)
{
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":",
            pid, tid);
    json_str(f, name);
    fprintf(f, "}}");
    fprintf(f,
            ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
            "\"args\":{\"sort_index\":%d}}",
            pid, tid, tid);
}

static void span(FILE *f, int pid, int tid, const char *name, uint64_t t0, uint64_t t1,
                 int64_t epoch, int64_t batch, int64_t index)
{
    fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":", pid, tid);
    if (!strcmp(name, HELD)) {
        char held[64];
        feeder__fmt(held, sizeof(held), "batch %" PRId64 " held by user", batch);
        json_str(f, held);
    } else {
        json_str(f, name);
    }
    fprintf(f, ",\"ts\":");
    us(f, t0);
    fprintf(f, ",\"dur\":");
    us(f, t1 > t0 ? t1 - t0 : 0);
    const char *sep = "";
    fprintf(f, ",\"args\":{");
    if (epoch >= 0) {
        fprintf(f, "%s\"epoch\":%" PRId64, sep, epoch);
        sep = ",";
    }
    if (batch >= 0) {
        fprintf(f, "%s\"batch\":%" PRId64, sep, batch);
        sep = ",";
    }
    if (index >= 0)
        fprintf(f, "%s\"index\":%" PRId64, sep, index);
    fprintf(f, "}}");
}

static void write_events(feeder__trace *tr, FILE *f)
{
    int pid = tr->pid;
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\","
               "\"args\":{\"name\":\"feeder loader\"}}",
            pid);
    int nt = atomic_load_explicit(&tr->ntracks, memory_order_acquire);
    for (int i = 0; i < nt; i++)
        thread_meta(f, pid, i + 1, tr->tracks[i].name);
    for (int a = 0; a < tr->nareas; a++) {
        warea *w = area(tr, a);
        uint32_t np = atomic_load(&w->npids);
        uint64_t n = atomic_load_explicit(&w->n, memory_order_acquire);
        if (a == tr->nworkers) {
            if (n)
                thread_meta(f, pid, WORKER_TID + a, "calling thread (num_workers 0)");
            continue;
        }
        char name[NAME_LEN + 16 * MAX_PIDS];
        size_t len = (size_t)snprintf(name, sizeof(name), "worker %d", a);
        for (uint32_t k = 0; k < np && k < MAX_PIDS; k++)
            len += (size_t)snprintf(name + len, sizeof(name) - len, "%s%d",
                                    k ? ", " : " (pid ", (int)atomic_load(&w->pids[k]));
        if (np > MAX_PIDS)
            len += (size_t)snprintf(name + len, sizeof(name) - len, ", %u more",
                                    np - MAX_PIDS);
        if (np)
            snprintf(name + len, sizeof(name) - len, ")");
        thread_meta(f, pid, WORKER_TID + a, name);
    }
    for (int i = 0; i < nt; i++) {
        mtrack *t = &tr->tracks[i];
        uint64_t n = atomic_load_explicit(&t->n, memory_order_acquire);
        if (n > tr->cap)
            n = tr->cap;
        for (uint64_t k = 0; k < n; k++) {
            const mrec *r = &t->v[k];
            const char *name = atomic_load_explicit(&r->name, memory_order_acquire);
            if (name)
                span(f, pid, i + 1, name, r->t0, r->t1, r->epoch, r->batch, r->index);
        }
    }
    for (int a = 0; a < tr->nareas; a++) {
        warea *w = area(tr, a);
        uint64_t n = atomic_load_explicit(&w->n, memory_order_acquire);
        if (n > tr->cap)
            n = tr->cap;
        const wrec *v = area_recs(w);
        for (uint64_t k = 0; k < n; k++) {
            uint32_t kind = atomic_load_explicit((_Atomic uint32_t *)&v[k].kind,
                                                 memory_order_acquire);
            if (kind > 0 && kind <= FEEDER__SPAN_CALLBACK)
                span(f, pid, WORKER_TID + a, KIND_NAME[kind], v[k].t0, v[k].t1, v[k].epoch,
                     v[k].batch, v[k].index);
        }
    }
    fprintf(f,
            "\n],\n\"displayTimeUnit\":\"ms\",\n\"metadata\":{\"feeder_version\":\"%s\","
            "\"clock\":\"CLOCK_MONOTONIC\",\"feeder_track_cap\":%u,"
            "\"feeder_dropped_events\":%" PRIu64 "}}\n",
            feeder_version_string(), tr->cap, feeder__trace_dropped(tr));
}

int feeder__trace_write(feeder__trace *tr, char *err, size_t errlen)
{
    if (!tr)
        return 0;
    pthread_mutex_lock(&tr->lock);
    size_t plen = strlen(tr->path);
    char *tmp = malloc(plen + 5);
    int rc = 0;
    if (!tmp) {
        feeder__fmt(err, errlen, "trace file %s: out of memory", tr->path);
        pthread_mutex_unlock(&tr->lock);
        return -ENOMEM;
    }
    memcpy(tmp, tr->path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = -errno;
        feeder__fmt(err, errlen, "trace file %s: cannot create it: %s", tmp, strerror(-rc));
        goto out;
    }
    static _Thread_local char buf[1 << 16];
    setvbuf(f, buf, _IOFBF, sizeof(buf));
    write_events(tr, f);
    int werr = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !werr)
        werr = errno ? errno : EIO;
    if (werr) {
        rc = -werr;
        feeder__fmt(err, errlen, "trace file %s: write: %s", tmp, strerror(werr));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, tr->path) != 0) {
        rc = -errno;
        feeder__fmt(err, errlen, "trace file %s: rename from %s: %s", tr->path, tmp,
                    strerror(-rc));
        unlink(tmp);
    }
out:
    free(tmp);
    pthread_mutex_unlock(&tr->lock);
    return rc;
}
