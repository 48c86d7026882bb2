/*
 * The worker's read of packed records: a task's records are grouped into
 * runs, records that follow each other in the task and in the file. A RAW run
 * is one stretch of the file and one stretch of the slot (samples are
 * contiguous there too), so it is one memcpy (mmap) or one read (uring,
 * direct) straight into the slot, whatever its length. JPEG runs are read
 * into the worker's buffer (or used in place from the mapping) and decoded
 * from there: no file is opened per sample.
 *
 * O_DIRECT wants the file offset, the length and the memory address aligned
 * (to the device's logical block, 512 bytes on most disks; statx says). The
 * aligned middle of a RAW run goes straight into the slot when the slot
 * address lines up, which it does for the usual shapes (224x224x3 records are
 * 294 x 512 bytes); only the partial blocks at its ends, or a run whose slot
 * address does not line up, go through a bounce buffer and a copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/nvtx.h"
#include "common/trace.h"
#include "dataset/pack.h"
#include "remote/remote.h"
#include "worker/worker.h"

#define ULL(x) ((unsigned long long)(x))
/* ------------------------------------------------------------------------ */
/* Loader start                                                              */
/* ------------------------------------------------------------------------ */

int feeder__packed_prepare(const feeder_dataset *ds, feeder__job *job, char *err, size_t errlen)
{
    const struct feeder__pack *pk = ds->pack;
    if (pk->shards && job->packed_read != FEEDER_PACKED_READ_MMAP) {
        feeder__fmt(err, errlen, "%s: a shards dataset is read through its shards' mappings: "
                    "packed_read must be mmap", pk->path);
        return FEEDER_EUNSUPPORTED;
    }
    if (job->packed_read != FEEDER_PACKED_READ_DIRECT)
        return 0;
    /* The alignment O_DIRECT needs, from the file system itself (Linux 6.1+);
     * older kernels do not say, and 4096 suits every common device. */
    unsigned mem = 4096, off = 4096;
    struct statx sx;
    if (statx(pk->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN)) {
        if (!sx.stx_dio_offset_align) {
            feeder__fmt(err, errlen,
                        "%s: packed_read = direct, but its file system does not support "
                        "O_DIRECT",
                        pk->path);
            return FEEDER_EUNSUPPORTED;
        }
        mem = sx.stx_dio_mem_align;
        off = sx.stx_dio_offset_align;
    }
    if (!mem || !off || (mem & (mem - 1)) || (off & (off - 1)) || mem > 65536 || off > 65536) {
        feeder__fmt(err, errlen,
                    "%s: packed_read = direct: the file system asks for %u-byte offsets and "
                    "%u-byte buffers, which this reader does not handle",
                    pk->path, off, mem);
        return FEEDER_EUNSUPPORTED;
    }
    int fd = open(pk->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        feeder__fmt(err, errlen, "%s: packed_read = direct: open with O_DIRECT: %s%s", pk->path,
                    strerror(e), e == EINVAL ? " (its file system does not support O_DIRECT)" : "");
        return e == EINVAL ? FEEDER_EUNSUPPORTED : -e;
    }
    /* Opened again by name: make sure it is still the file that was checked. */
    struct stat a, b;
    if (fstat(pk->fd, &a) < 0 || fstat(fd, &b) < 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
        close(fd);
        feeder__fmt(err, errlen,
                    "%s: packed_read = direct: the path names another file than the one "
                    "opened as the dataset",
                    pk->path);
        return FEEDER_EFORMAT;
    }
    job->pack_fd = fd;
    job->dio_mem_align = mem;
    job->dio_off_align = off;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The worker side                                                           */
/* ------------------------------------------------------------------------ */

/* Records that follow each other both in the request and in the file. */
typedef struct pk_run {
    uint32_t k0, n;    /* positions k0 .. k0+n-1 of the request */
    uint64_t off, len; /* the file range */
    uint8_t *base;     /* where file offset `off` landed (JPEG records) */
    int err;           /* a read failed: -errno */
    int short_read;    /* a read ended early: the file ended */
    int past_end;      /* mmap: the file has shrunk below this run's end */
} pk_run;

/* One read of a plan. */
typedef struct pk_item {
    uint32_t run;
    uint64_t off;
    size_t len;
    uint8_t *dst;      /* straight into the slot, or NULL: into the bounce buffer at boff */
    size_t boff;
    size_t need;       /* bytes of it that must arrive (the rest may lie past the end) */
    uint8_t *copy_dst; /* then copy copy_len bytes from copy_skip of what was read */
    size_t copy_skip, copy_len;
} pk_item;

struct feeder__pack_worker {
    uint8_t *bounce;
    size_t bounce_cap, bounce_align;
    pk_run *runs;
    pk_item *items;
    feeder__span *spans;
    int32_t *st;
    uint32_t *crc;     /* checksums computed during the copy (mmap, VERIFY_CRC) */
    uint32_t cap;      /* entries of runs, st and crc; items and spans hold 3 per run */
};

/* Where record i's checksum starts: its label's CRC from format version 2. */
static uint32_t crc_seed(const feeder__job *job, uint64_t i)
{
    return feeder__pack_crc_seed(job->ds->pack->v.h.version, job->ds->labels[i]);
}

/* Records come from the file's mapping only in a worker process. A file
 * cut or rewritten in place under the loader makes a read of its mapping
 * fault (SIGBUS): a worker, our own process, turns that fault into its
 * task's error (bus_guard below); the calling thread (num_workers 0) runs in
 * the user's process, where the library installs no signal handler, so it
 * reads with pread instead, which reports a short read. */
static int uses_mapping(const feeder__worker_ctx *w)
{
    /* A shards dataset has no one file to pread: the calling thread reads its
     * mapping too, unguarded (no handler in the user's process); the shard
     * cache never cuts a file in place, it renames a new one over it. */
    return w->job->packed_read == FEEDER_PACKED_READ_MMAP &&
           (w->id >= 0 || w->job->ds->pack->shards);
}

/* The worker's SIGBUS guard: while bus_env is set, a fault jumps back to the
 * task that set it. One task at a time runs in a worker (its only thread
 * reading the mapping), so one static slot is enough. */
static sigjmp_buf *volatile bus_env;
static volatile uint64_t bus_record;

static void on_sigbus(int sig)
{
    if (bus_env)
        siglongjmp(*bus_env, 1);
    signal(sig, SIG_DFL); /* not ours: die of it as before */
    raise(sig);
}

static int install_bus_guard(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL) == 0 ? 0 : -errno;
}

/* Where a faulted record's bytes come from, and what is known of that
 * file's size now: a shards set's shard (a URL's is the cache's copy) or
 * the one packed file. */
static void fault_source(const struct feeder__pack *pk, uint64_t rec, char *msg, size_t msglen)
{
    const struct feeder__shards *sh = pk->shards;
    struct stat st;
    if (!sh) {
        if (fstat(pk->fd, &st) == 0)
            feeder__fmt(msg, msglen, "record %llu of %s: the file changed under the loader: "
                        "reading its mapping faulted (SIGBUS); it is now %lld bytes, %llu when "
                        "opened (truncated or rewritten in place?)", ULL(rec), pk->path,
                        (long long)st.st_size, ULL(pk->map_len));
        else
            feeder__fmt(msg, msglen, "record %llu of %s: the file changed under the loader: "
                        "reading its mapping faulted (SIGBUS); it was %llu bytes when opened, "
                        "its size now cannot be read (fstat: %s)", ULL(rec), pk->path,
                        ULL(pk->map_len), strerror(errno));
        return;
    }
    uint32_t s = feeder__shards_of(sh, rec);
    char path[4200], was[4400];
    if (sh->remote[s]) {
        feeder__cache_name(((const feeder__cache *)sh->cache)->dir, sh->names[s],
                           FEEDER__GET_STRIPED, path, sizeof(path));
        feeder__fmt(was, sizeof(was), "its cached copy %s", path);
    } else {
        feeder__fmt(path, sizeof(path), "%s", sh->names[s]);
        feeder__fmt(was, sizeof(was), "the file");
    }
    char now[128];
    long long bytes = sh->remote[s] ? feeder__cache_copy_bytes(path)
                                    : stat(path, &st) == 0 ? (long long)st.st_size : -errno;
    if (bytes >= 0)
        feeder__fmt(now, sizeof(now), "%lld bytes", bytes);
    else
        feeder__fmt(now, sizeof(now), "gone (%s)", strerror((int)-bytes));
    feeder__fmt(msg, msglen, "record %llu of %s (shard %u of %s): %s changed under the loader: "
                "reading its mapping faulted (SIGBUS); it is now %s, %llu when %s (truncated "
                "or rewritten in place?)", ULL(rec), sh->names[s], s, pk->path, was, now,
                ULL(sh->bytes[s]), sh->remote[s] ? "the dataset was opened" : "opened");
}

/* After a fault: the task's error, and a fresh decoder (a decode cut short
 * by the jump leaves its state undefined). */
static int mapping_fault(feeder__worker_ctx *w, char *msg, size_t msglen)
{
    fault_source(w->job->ds->pack, bus_record, msg, msglen);
    if (w->dec) {
        feeder__decoder_destroy(w->dec);
        w->dec = NULL;
        if (feeder__decoder_create(&w->dec) == 0)
            feeder__decoder_set_index(w->dec, w->job->jindex);
    }
    return -EIO;
}

int feeder__packed_ctx_init(feeder__worker_ctx *w)
{
    const feeder__job *job = w->job;
    if (!(w->pk = calloc(1, sizeof(*w->pk))))
        return -ENOMEM;
    int rc = 0;
    if (uses_mapping(w))
        rc = w->id >= 0 ? install_bus_guard() : 0;
    else if (job->packed_read == FEEDER_PACKED_READ_MMAP)
        rc = feeder__reader_create(FEEDER_IO_PREAD, 0, &w->rd, NULL, 0);
    else {
        rc = feeder__reader_create(job->io_mode, job->queue_depth, &w->rd, w->why,
                                   sizeof(w->why));
        /* As for files: a process that cannot set up its own ring reads
         * with pread rather than failing. */
        if (rc && job->io_mode == FEEDER_IO_URING)
            rc = feeder__reader_create(FEEDER_IO_PREAD, 0, &w->rd, NULL, 0);
    }
    if (!rc && job->ds->pack->v.h.kind == FEEDER_RECORD_JPEG &&
        (rc = feeder__decoder_create(&w->dec)) == 0)
        feeder__decoder_set_index(w->dec, job->jindex);
    return rc;
}

void feeder__packed_ctx_free(feeder__worker_ctx *w)
{
    struct feeder__pack_worker *p = w->pk;
    if (!p)
        return;
    free(p->bounce);
    free(p->runs);
    free(p->items);
    free(p->spans);
    free(p->st);
    free(p->crc);
    free(p);
    w->pk = NULL;
}

static int reserve(struct feeder__pack_worker *p, uint32_t n)
{
    if (n <= p->cap)
        return 0;
    pk_run *r = realloc(p->runs, n * sizeof(*r));
    if (r)
        p->runs = r;
    pk_item *it = realloc(p->items, 3 * (size_t)n * sizeof(*it));
    if (it)
        p->items = it;
    feeder__span *sp = realloc(p->spans, 3 * (size_t)n * sizeof(*sp));
    if (sp)
        p->spans = sp;
    int32_t *st = realloc(p->st, n * sizeof(*st));
    if (st)
        p->st = st;
    uint32_t *crc = realloc(p->crc, n * sizeof(*crc));
    if (crc)
        p->crc = crc;
    if (!r || !it || !sp || !st || !crc)
        return -ENOMEM;
    p->cap = n;
    return 0;
}

/* Room for `bytes` of bounce buffer aligned for O_DIRECT (contents not kept). */
static int bounce_reserve(struct feeder__pack_worker *p, size_t bytes, size_t align)
{
    if (bytes <= p->bounce_cap && align <= p->bounce_align)
        return 0;
    size_t cap = p->bounce_cap > bytes ? p->bounce_cap : bytes;
    cap = (cap + align - 1) / align * align;
    void *b = aligned_alloc(align, cap);
    if (!b)
        return -ENOMEM;
    free(p->bounce);
    p->bounce = b;
    p->bounce_cap = cap;
    p->bounce_align = align;
    return 0;
}

static uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Plan the reads of every run (uring and direct modes): fills p->items and
 * returns their number; *bounce_bytes is how much bounce buffer they need. */
static unsigned plan(const feeder__job *job, struct feeder__pack_worker *p, uint32_t nruns,
                     int raw, uint8_t *dst0, size_t stride, size_t *bounce_bytes)
{
    int direct = job->packed_read == FEEDER_PACKED_READ_DIRECT;
    uint64_t oa = direct ? job->dio_off_align : 1;
    uint64_t ma = direct ? job->dio_mem_align : 1;
    size_t balign = ma > 64 ? ma : 64, boff = 0;
    unsigned n = 0;
#define BOUNCE(it)                                                                               \
    do {                                                                                         \
        boff = align_up(boff, balign);                                                                 \
        (it)->dst = NULL;                                                                        \
        (it)->boff = boff;                                                                       \
        boff += (it)->len;                                                                       \
    } while (0)
    for (uint32_t r = 0; r < nruns; r++) {
        pk_run *run = &p->runs[r];
        uint64_t a = run->off, e = run->off + run->len;
        uint8_t *d = raw ? dst0 + (size_t)run->k0 * stride : NULL;
        uint64_t a1 = align_up(a, oa), b0 = align_down(e, oa);
        if (raw && a1 < b0 && ((uintptr_t)(d + (a1 - a)) % ma) == 0) {
            /* Head block, aligned middle straight into the slot, tail block. */
            if (a < a1) {
                pk_item *it = &p->items[n++];
                *it = (pk_item){.run = r, .off = a1 - oa, .len = oa, .need = oa,
                                .copy_dst = d, .copy_skip = a - (a1 - oa), .copy_len = a1 - a};
                BOUNCE(it);
            }
            p->items[n++] = (pk_item){.run = r, .off = a1, .len = b0 - a1, .dst = d + (a1 - a),
                                      .need = b0 - a1};
            if (e > b0) {
                pk_item *it = &p->items[n++];
                *it = (pk_item){.run = r, .off = b0, .len = oa, .need = e - b0,
                                .copy_dst = d + (b0 - a), .copy_len = e - b0};
                BOUNCE(it);
            }
        } else {
            /* The whole run, widened to aligned ends, through the bounce
             * buffer: JPEG runs are decoded from there, RAW ones copied. */
            uint64_t a0 = align_down(a, oa);
            pk_item *it = &p->items[n++];
            *it = (pk_item){.run = r, .off = a0, .len = align_up(e, oa) - a0, .need = e - a0,
                            .copy_dst = d, .copy_skip = a - a0, .copy_len = raw ? e - a : 0};
            BOUNCE(it);
        }
    }
#undef BOUNCE
    *bounce_bytes = boff;
    return n;
}

/* Bring runs [0, nruns) in with reads; failures land in the runs. 0 or an
 * error not specific to one record. */
static int read_runs(feeder__worker_ctx *w, uint32_t nruns, int raw, uint8_t *dst0,
                     size_t stride, char *msg, size_t msglen)
{
    const feeder__job *job = w->job;
    struct feeder__pack_worker *p = w->pk;
    size_t bbytes;
    unsigned n = plan(job, p, nruns, raw, dst0, stride, &bbytes);
    size_t align = job->packed_read == FEEDER_PACKED_READ_DIRECT
                       ? (job->dio_mem_align > 4096 ? job->dio_mem_align : 4096)
                       : 64;
    int rc = bbytes ? bounce_reserve(p, bbytes, align) : 0;
    if (rc) {
        feeder__fmt(msg, msglen, "worker %d: out of memory for a %zu-byte read buffer", w->id,
                    bbytes);
        return rc;
    }
    for (unsigned i = 0; i < n; i++) {
        pk_item *it = &p->items[i];
        if (!it->dst)
            it->dst = p->bounce + it->boff;
        p->spans[i] = (feeder__span){.off = it->off, .len = it->len, .dst = it->dst};
        if (!raw)
            p->runs[it->run].base = it->dst + it->copy_skip;
    }
    int fd = job->packed_read == FEEDER_PACKED_READ_DIRECT ? job->pack_fd : job->ds->pack->fd;
    if ((rc = feeder__reader_read_at(w->rd, fd, p->spans, n))) {
        feeder__fmt(msg, msglen, "worker %d: reader failed: %s", w->id, strerror(-rc));
        return rc;
    }
    for (unsigned i = 0; i < n; i++) {
        pk_item *it = &p->items[i];
        pk_run *run = &p->runs[it->run];
        if (p->spans[i].err) {
            if (!run->err)
                run->err = p->spans[i].err;
            continue;
        }
        if (p->spans[i].got < it->need)
            run->short_read = 1;
        /* What arrived is copied even from a short read: the records before
         * the file's new end are whole and are kept. */
        size_t avail = p->spans[i].got > it->copy_skip ? p->spans[i].got - it->copy_skip : 0;
        if (it->copy_len && it->copy_dst && avail)
            memcpy(it->copy_dst, it->dst + it->copy_skip, avail < it->copy_len ? avail : it->copy_len);
    }
    return 0;
}

/* MMAP: RAW runs copied from the mapping to dst0 + k * stride (checksummed
 * record by record with VERIFY_CRC), JPEG runs used where they lie. Records
 * past the file's end now (it shrank) are left for record_status to fail:
 * reading a mapping past its file's end raises SIGBUS. */
static void copy_from_mapping(feeder__worker_ctx *w, const uint64_t *idx, uint32_t nruns,
                              int raw, uint8_t *dst0, size_t stride, uint64_t *file_now)
{
    const feeder__job *job = w->job;
    const struct feeder__pack *pk = job->ds->pack;
    struct feeder__pack_worker *p = w->pk;
    /* One fstat per task; a file cut while being copied can still fault. */
    struct stat st;
    if (fstat(pk->fd, &st) == 0 && (uint64_t)st.st_size < *file_now)
        *file_now = (uint64_t)st.st_size;
    for (uint32_t r = 0; r < nruns; r++) {
        pk_run *run = &p->runs[r];
        run->past_end = run->off + run->len > *file_now;
        /* Start the reads of every run at once: a cold page cache then reads
         * them in parallel, not one fault at a time. */
        uint64_t a = align_down(run->off, 4096);
        if (!run->past_end)
            (void)madvise(pk->map + a, run->off + run->len - a, MADV_WILLNEED);
    }
    for (uint32_t r = 0; r < nruns; r++) {
        pk_run *run = &p->runs[r];
        run->base = pk->map + run->off;
        if (!raw)
            continue;
        uint8_t *d = dst0 + (size_t)run->k0 * stride;
        bus_record = idx[run->k0];
        if (!job->verify_crc && !run->past_end) {
            memcpy(d, run->base, run->len);
            continue;
        }
        /* Record by record: only those inside the file are copied, each
         * checksummed right after its copy while it is still in cache. */
        for (uint32_t k = 0; k < run->n; k++) {
            if (run->off + (uint64_t)(k + 1) * stride > *file_now)
                break;
            bus_record = idx[run->k0 + k];
            memcpy(d + (size_t)k * stride, run->base + (size_t)k * stride, stride);
            if (job->verify_crc)
                p->crc[run->k0 + k] = feeder__crc32c(crc_seed(job, idx[run->k0 + k]),
                                                     d + (size_t)k * stride, stride);
        }
    }
}

/* A read ends early only at the end of the file: where is it now, so that
 * only the records past it fail. */
static uint64_t file_length_after_short_read(feeder__worker_ctx *w, uint32_t nruns,
                                             uint64_t file_now)
{
    const struct feeder__pack *pk = w->job->ds->pack;
    for (uint32_t r = 0; r < nruns; r++) {
        if (!w->pk->runs[r].short_read)
            continue;
        struct stat st;
        if (fstat(pk->fd, &st) == 0 && (uint64_t)st.st_size < file_now)
            file_now = (uint64_t)st.st_size;
        break;
    }
    return file_now;
}

/* What gather_and_read leaves for the per-record steps. */
typedef struct pk_loaded {
    uint32_t nruns;
    uint64_t file_now; /* the file's length now (it may have shrunk since open) */
    uint64_t t0;       /* start of the time not yet added to read_ns */
} pk_loaded;

/* Group records idx[0, n) into runs (records next to each other in the task
 * and in the file) and bring them in: RAW runs straight to dst0 + k * stride,
 * JPEG runs into reach (run->base: the mapping, or the read buffer). 0 or an
 * error not specific to one record. */
static int gather_and_read(feeder__worker_ctx *w, uint64_t epoch, const uint64_t *idx, uint32_t n,
                           uint8_t *dst0, feeder__result_msg *res, pk_loaded *ld, char *msg,
                           size_t msglen)
{
    const feeder__job *job = w->job;
    const struct feeder__pack *pk = job->ds->pack;
    struct feeder__pack_worker *p = w->pk;
    const size_t stride = job->layout.sample_bytes;
    const int raw = pk->v.h.kind == FEEDER_RECORD_RAW;
    int rc = reserve(p, n);
    if (rc) {
        feeder__fmt(msg, msglen, "worker %d: out of memory", w->id);
        return rc;
    }
    ld->t0 = feeder__now_ns();
    uint32_t nruns = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t i = idx[k];
        p->st[k] = 0;
        pk_run *prev = nruns ? &p->runs[nruns - 1] : NULL;
        if (prev && idx[k - 1] + 1 == i && prev->off + prev->len == pk->off[i]) {
            prev->n++;
            prev->len += pk->size[i];
            continue;
        }
        p->runs[nruns++] = (pk_run){.k0 = k, .n = 1, .off = pk->off[i], .len = pk->size[i]};
    }
    ld->nruns = nruns;
    uint64_t bytes = 0;
    for (uint32_t r = 0; r < nruns; r++)
        bytes += p->runs[r].len;
    ld->file_now = pk->map_len;
    if (uses_mapping(w))
        copy_from_mapping(w, idx, nruns, raw, dst0, stride, &ld->file_now);
    else if ((rc = read_runs(w, nruns, raw, dst0, stride, msg, msglen)))
        return rc;
    else
        ld->file_now = file_length_after_short_read(w, nruns, ld->file_now);
    res->bytes_read += bytes;
    /* The copy (RAW from the mapping) or the reads of the task's records. */
    feeder__trace_worker_span(job->trace, w->id, FEEDER__SPAN_READ, ld->t0, feeder__now_ns(),
                              (int64_t)epoch, -1, n == 1 ? (int64_t)idx[0] : -1);
    return 0;
}

/* Record k (dataset index i) of run `run`: 0 when its bytes are whole and
 * (with VERIFY_CRC) match their checksum, else the error with `msg` set.
 * *src: where its bytes are. */
static int record_status(feeder__worker_ctx *w, const pk_run *run, uint32_t k, uint64_t i,
                         uint8_t *dst, uint64_t file_now, const uint8_t **src, char *msg,
                         size_t msglen)
{
    const feeder__job *job = w->job;
    const struct feeder__pack *pk = job->ds->pack;
    const int raw = pk->v.h.kind == FEEDER_RECORD_RAW;
    *src = raw ? dst : run->base + (pk->off[i] - run->off);
    if (run->err) {
        feeder__fmt(msg, msglen, "record %llu of %s: read: %s", ULL(i), pk->path,
                    strerror(-run->err));
        return run->err;
    }
    if ((run->past_end || run->short_read) &&
        (pk->off[i] + pk->size[i] > file_now || file_now == pk->map_len)) {
        if (file_now < pk->map_len)
            feeder__fmt(msg, msglen,
                        "record %llu of %s: the file is now %llu bytes, shorter than when "
                        "it was opened (%llu bytes)",
                        ULL(i), pk->path, ULL(file_now), ULL(pk->map_len));
        else
            feeder__fmt(msg, msglen, "record %llu of %s: short read", ULL(i), pk->path);
        return -EIO;
    }
    if (!job->verify_crc)
        return 0;
    uint32_t c = raw && uses_mapping(w)
                     ? w->pk->crc[k]
                     : feeder__crc32c(crc_seed(job, i), *src, pk->size[i]);
    if (c == pk->crc[i])
        return 0;
    feeder__fmt(msg, msglen,
                "record %llu of %s: crc32c mismatch over its %s (stored 0x%08x, computed 0x%08x)",
                ULL(i), pk->path, pk->v.h.version >= 2 ? "label and bytes" : "bytes", pk->crc[i], c);
    return FEEDER_ECHECKSUM;
}

/* Decode JPEG record i from src into dst with the worker's CPU decoder. */
static int decode_record(feeder__worker_ctx *w, uint64_t epoch, uint64_t i, const uint8_t *src,
                         uint8_t *dst, feeder__result_msg *res, char *msg, size_t msglen)
{
    const feeder__job *job = w->job;
    const struct feeder__pack *pk = job->ds->pack;
    feeder__decode_times tm = {0, 0};
    char derr[512] = "";
    uint64_t td = job->trace ? feeder__now_ns() : 0;
    FEEDER_NVTX_PUSH("decode+transform");
    int rc = feeder__decode_sample(w->dec, &w->cpu_t, src, pk->size[i], job->seed, epoch, i, dst,
                                   &tm, derr, sizeof(derr));
    FEEDER_NVTX_POP();
    feeder__trace_decode(job->trace, w->id, td, tm.decode_ns, tm.transform_ns, rc == 0, epoch,
                         (uint64_t)-1, i);
    res->decode_ns += tm.decode_ns;
    res->transform_ns += tm.transform_ns;
    if (rc)
        feeder__fmt(msg, msglen, "record %llu of %s: %s", ULL(i), pk->path,
                    derr[0] ? derr : feeder_strerror(rc));
    return rc;
}

/* Load records idx[0, n) into dst0 + k * stride; their status in p->st. With
 * `stop`, the first failure ends it: its code is returned and its message is
 * in msg. Otherwise every record is tried and only an error that is not one
 * record's is returned. */
static int load_records(feeder__worker_ctx *w, uint64_t epoch, const uint64_t *idx, uint32_t n,
                        uint8_t *dst0, int stop, feeder__result_msg *res, char *msg,
                        size_t msglen)
{
    struct feeder__pack_worker *p = w->pk;
    const size_t stride = w->job->layout.sample_bytes;
    const int raw = w->job->ds->pack->v.h.kind == FEEDER_RECORD_RAW;
    pk_loaded ld;
    int rc = gather_and_read(w, epoch, idx, n, dst0, res, &ld, msg, msglen);
    if (rc)
        return rc;
    for (uint32_t r = 0; r < ld.nruns; r++) {
        const pk_run *run = &p->runs[r];
        for (uint32_t k = run->k0; k < run->k0 + run->n; k++) {
            uint8_t *dst = dst0 + (size_t)k * stride;
            const uint8_t *src;
            bus_record = idx[k];
            int src_rc = record_status(w, run, k, idx[k], dst, ld.file_now, &src, msg, msglen);
            if (!src_rc && !raw) {
                res->read_ns += feeder__now_ns() - ld.t0;
                src_rc = decode_record(w, epoch, idx[k], src, dst, res, msg, msglen);
                ld.t0 = feeder__now_ns();
            }
            p->st[k] = src_rc;
            if (src_rc && stop) {
                res->read_ns += feeder__now_ns() - ld.t0;
                return src_rc;
            }
        }
    }
    res->read_ns += feeder__now_ns() - ld.t0;
    return 0;
}

/* A GPU decoder's task of JPEG records: every record's status first, then
 * the task's plan (feeder__worker_plan_gpu_part: which go over as bytes, and
 * where), then the bytes copied or the rest decoded here. Statuses in p->st
 * and `stop` as load_records. */
static int load_records_gpu(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                            int stop, feeder__result_msg *res, char *msg, size_t msglen)
{
    const feeder__slot_layout *l = &w->job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot) + t->first;
    struct feeder__pack_worker *p = w->pk;
    pk_loaded ld;
    if (feeder__worker_part_reserve(w, t->count)) {
        feeder__fmt(msg, msglen, "worker %d: out of memory", w->id);
        return -ENOMEM;
    }
    int rc = gather_and_read(w, t->epoch, idx, t->count, NULL, res, &ld, msg, msglen);
    if (rc)
        return rc;
    for (uint32_t r = 0; r < ld.nruns; r++) {
        const pk_run *run = &p->runs[r];
        for (uint32_t k = run->k0; k < run->k0 + run->n; k++) {
            const uint8_t *src;
            bus_record = idx[k];
            p->st[k] = record_status(w, run, k, idx[k], NULL, ld.file_now, &src, msg, msglen);
            if (p->st[k] && stop) {
                res->read_ns += feeder__now_ns() - ld.t0;
                return p->st[k];
            }
            w->part.bytes[k] = p->st[k] ? NULL : src;
            w->part.len[k] = p->st[k] ? 0 : w->job->ds->pack->size[idx[k]];
        }
    }
    res->read_ns += feeder__now_ns() - ld.t0;
    feeder__worker_plan_gpu_part(w, t, slot, res);
    for (uint32_t k = 0; k < t->count; k++) {
        if (p->st[k])
            continue;
        uint8_t *dst = feeder__worker_sample_dst(w, slot, t->first + k);
        if (w->part.gpu[k]) {
            memcpy(dst, w->part.bytes[k], w->part.len[k]);
            continue;
        }
        p->st[k] = decode_record(w, t->epoch, idx[k], w->part.bytes[k], dst, res, msg, msglen);
        if (p->st[k] && stop)
            return p->st[k];
    }
    return 0;
}

/* One record's bytes for verify_direct: the mapping in a worker (under
 * the SIGBUS guard), a pread into the bounce buffer in the calling thread
 * (num_workers 0), which must never touch a mapping that can vanish. NULL
 * with `msg` set on a short read. */
static const uint8_t *record_bytes(feeder__worker_ctx *w, uint64_t i, char *msg, size_t msglen)
{
    const struct feeder__pack *pk = w->job->ds->pack;
    if (uses_mapping(w))
        return pk->map + pk->off[i];
    if (bounce_reserve(w->pk, pk->size[i], 64)) {
        feeder__fmt(msg, msglen, "out of memory for record %llu of %s", ULL(i), pk->path);
        return NULL;
    }
    ssize_t got = pread(pk->fd, w->pk->bounce, pk->size[i], (off_t)pk->off[i]);
    if (got != (ssize_t)pk->size[i]) {
        feeder__fmt(msg, msglen, "record %llu of %s: short read (the file changed under the "
                    "loader?)", ULL(i), pk->path);
        return NULL;
    }
    return w->pk->bounce;
}

/* The direct path with VERIFY_CRC: the GPU layer copies the records from
 * the mapping once the batch is done here, so the workers check each
 * record's checksum (label included, version 2) where it lies; the read
 * also warms the pages for the copy. Statuses in w->pk->st; with `stop`,
 * the first bad record fails the task. */
static int verify_direct(feeder__worker_ctx *w, const uint64_t *idx, uint32_t n, int stop,
                         char *msg, size_t msglen)
{
    const struct feeder__pack *pk = w->job->ds->pack;
    int first = 0;
    if (reserve(w->pk, n)) {
        feeder__fmt(msg, msglen, "out of memory for %u record statuses", n);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint64_t i = idx[k];
        char why[256] = "";
        const uint8_t *src = record_bytes(w, i, why, sizeof(why));
        uint32_t c = src ? feeder__crc32c(crc_seed(w->job, i), src, pk->size[i]) : 0;
        w->pk->st[k] = 0;
        if (src && c == pk->crc[i])
            continue;
        w->pk->st[k] = src ? FEEDER_ECHECKSUM : -EIO;
        if (!first && src)
            feeder__fmt(msg, msglen,
                        "record %llu of %s: crc32c mismatch (stored 0x%08x, computed 0x%08x)",
                        ULL(i), pk->path, pk->crc[i], c);
        else if (!first)
            feeder__fmt(msg, msglen, "%s", why);
        first = 1;
        if (stop)
            return w->pk->st[k];
    }
    return 0;
}

int feeder__packed_fill(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                        feeder__result_msg *res, uint32_t *bad_first)
{
    const feeder__job *job = w->job;
    const feeder__slot_layout *l = &job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot) + t->first;
    int64_t *lab = feeder__slot_labels(l, slot) + t->first;
    for (uint32_t k = 0; k < t->count; k++)
        lab[k] = job->ds->labels[idx[k]];
    if (job->packed_direct && !job->verify_crc)
        return 0; /* the GPU layer copies the records from the file itself */
    int rc = feeder__shards_ensure(job->ds->pack, idx, t->count, res->errmsg,
                                   sizeof(res->errmsg));
    if (rc)
        return rc;
    sigjmp_buf env;
    if (uses_mapping(w)) {
        if (sigsetjmp(env, 1)) {
            bus_env = NULL;
            return mapping_fault(w, res->errmsg, sizeof(res->errmsg));
        }
        bus_env = &env;
    }
    int skip = job->policy != FEEDER_ON_ERROR_FAIL; /* SKIP or DROP: mark, go on */
    if (job->packed_direct)
        rc = verify_direct(w, idx, t->count, !skip, res->errmsg, sizeof(res->errmsg));
    else if (w->gpu_dec)
        rc = load_records_gpu(w, t, slot, !skip, res, res->errmsg, sizeof(res->errmsg));
    else
        rc = load_records(w, t->epoch, idx, t->count, feeder__slot_sample(l, slot, t->first),
                          !skip, res, res->errmsg, sizeof(res->errmsg));
    bus_env = NULL;
    if (rc || !skip)
        return rc;
    for (uint32_t k = 0; k < t->count; k++) {
        if (!w->pk->st[k])
            continue;
        lab[k] = -1; /* marks it for replacement */
        if (*bad_first == UINT32_MAX)
            *bad_first = t->first + k;
    }
    return 0;
}

int feeder__packed_load_one(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                            uint8_t *dst, int64_t *label, feeder__result_msg *res, char *msg,
                            size_t msglen)
{
    *label = w->job->ds->labels[index];
    int rc = feeder__shards_ensure(w->job->ds->pack, &index, 1, msg, msglen);
    if (rc)
        return rc;
    sigjmp_buf env;
    if (uses_mapping(w)) {
        if (sigsetjmp(env, 1)) {
            bus_env = NULL;
            return mapping_fault(w, msg, msglen);
        }
        bus_env = &env;
    }
    rc = load_records(w, t->epoch, &index, 1, dst, 1, res, msg, msglen);
    bus_env = NULL;
    return rc;
}
