/*
 * The worker side: run a task (read its files, decode and transform every
 * sample straight into its place in the batch slot) and, in a forked worker
 * process, the loop that serves tasks from the loader.
 *
 * A worker never touches CUDA (DESIGN invariant 4): it maps the slot memfd
 * itself after fork and writes only through that mapping.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "decode/jpeg_header.h"
#include "worker/worker.h"
#include "common/nvtx.h"
#include "dataset/pack.h"
#include "common/trace.h"
#include "remote/remote.h"

int feeder__worker_ctx_init(feeder__worker_ctx *w, const feeder__job *job, int id, uint8_t *mem)
{
    memset(w, 0, sizeof(*w));
    w->job = job;
    w->id = id;
    w->mem = mem;
    w->live = (const feeder__live *)(mem + job->live_off);
    w->cpu_t = job->t;
    w->cpu_t.decoder = job->cpu_decoder;
    w->gpu_dec = feeder__decoder_on_gpu(job->t.decoder);
    if (feeder__augment_has_sample_steps(&job->aug) &&
        !(w->aug_scratch = malloc(feeder__augment_scratch_bytes(job->layout.width,
                                                                job->layout.height))))
        return -ENOMEM;
    if (job->ds->kind == FEEDER__DS_PACKED)
        return feeder__packed_ctx_init(w);
    if (job->ds->kind != FEEDER__DS_USER) {
        int rc = feeder__reader_create(job->io_mode, job->queue_depth, &w->rd, w->why,
                                       sizeof(w->why));
        /* The parent probed io_uring; if this process still cannot set up a
         * ring, reading goes on through pread rather than failing. */
        if (rc && job->io_mode == FEEDER_IO_URING)
            rc = feeder__reader_create(FEEDER_IO_PREAD, 0, &w->rd, NULL, 0);
        if (rc)
            return rc;
        if ((rc = feeder__decoder_create(&w->dec)))
            return rc;
        feeder__decoder_set_index(w->dec, job->jindex);
    }
    return 0;
}

void feeder__worker_ctx_free(feeder__worker_ctx *w)
{
    feeder__packed_ctx_free(w);
    feeder__tar_ctx_free(w);
    feeder__reader_destroy(w->rd);
    feeder__decoder_destroy(w->dec);
    free(w->aug_scratch);
    free(w->files);
    free(w->part.bytes);
    free(w->part.len);
    free(w->part.gpu);
    free(w->part.off);
    memset(w, 0, sizeof(*w));
}

static const char *op_text(const feeder__file *f) { return f->op ? f->op : "read"; }


/* Load one sample whose file is already read; 0 or an error with `msg`. */
static int load_file_sample(feeder__worker_ctx *w, const feeder__task_msg *t,
                            const feeder__file *f, uint64_t index, uint8_t *dst,
                            feeder__result_msg *res, char *msg, size_t msglen)
{
    const feeder__job *job = w->job;
    if (f->err) {
        feeder__fmt(msg, msglen, "sample %llu (%s): %s: %s", (unsigned long long)index, f->path,
                    op_text(f), feeder_strerror(f->err));
        return f->err;
    }
    if (f->len == 0) {
        feeder__fmt(msg, msglen, "sample %llu (%s): empty file", (unsigned long long)index,
                    f->path);
        return FEEDER_EDECODE;
    }
    feeder__decode_times tm = {0, 0};
    char derr[512] = "";
    uint64_t t0 = job->trace ? feeder__now_ns() : 0;
    FEEDER_NVTX_PUSH("decode+transform");
    int rc = feeder__decode_sample(w->dec, &w->cpu_t, f->data, f->len, job->seed, t->epoch,
                                   index, dst, &tm, derr, sizeof(derr));
    FEEDER_NVTX_POP();
    feeder__trace_decode(job->trace, w->id, t0, tm.decode_ns, tm.transform_ns, rc == 0, t->epoch, t->batch, index);
    res->decode_ns += tm.decode_ns;
    res->transform_ns += tm.transform_ns;
    if (rc)
        feeder__fmt(msg, msglen, "sample %llu (%s): %s", (unsigned long long)index, f->path,
                    derr[0] ? derr : feeder_strerror(rc));
    return rc;
}

/* What a user's get callback is told of sample `index` of task t: its
 * index, the loader's seed, the epoch and the worker (the shape is the
 * image callbacks' only). */
static feeder_sample_ctx sample_ctx(const feeder__worker_ctx *w, const feeder__task_msg *t,
                                    uint64_t index)
{
    feeder_sample_ctx sc;
    memset(&sc, 0, sizeof(sc));
    sc.index = index;
    sc.seed = w->job->seed;
    sc.epoch = t->epoch;
    sc.worker_id = w->id;
    return sc;
}

static int load_user_sample(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                            uint8_t *dst, int64_t *label, char *msg, size_t msglen)
{
    const feeder__job *job = w->job;
    const feeder__slot_layout *l = &job->layout;
    feeder_sample_ctx sc = sample_ctx(w, t, index);
    sc.height = l->height;
    sc.width = l->width;
    sc.channels = l->channels;
    sc.layout = l->layout;
    char uerr[512] = "";
    uint64_t t0 = job->trace ? feeder__now_ns() : 0;
    FEEDER_NVTX_PUSH("callback");
    int rc = job->ds->cb.get(job->ds->user, &sc, dst, l->sample_bytes, label, uerr, sizeof(uerr));
    FEEDER_NVTX_POP();
    if (job->trace)
        feeder__trace_worker_span(job->trace, w->id, FEEDER__SPAN_CALLBACK, t0, feeder__now_ns(),
                                  (int64_t)t->epoch, (int64_t)t->batch, (int64_t)index);
    if (rc) {
        feeder__fmt(msg, msglen, "sample %llu: dataset callback returned %d%s%s",
                    (unsigned long long)index, rc, uerr[0] ? ": " : "", uerr);
        return rc < 0 ? rc : FEEDER_ECALLBACK;
    }
    return 0;
}

/* A fields dataset's sample `index` into position i of the slot: the get
 * callback through a feeder_sample_out, then the checks of what it wrote
 * (collate/fields.c) before anything reads it. */
static int load_fields_sample(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                              uint8_t *slot, uint32_t i, char *msg, size_t msglen)
{
    const feeder__job *job = w->job;
    feeder_sample_ctx sc = sample_ctx(w, t, index);
    feeder__sample_buf buf;
    feeder_sample_out o;
    feeder__fields_sample_out(&job->fields, slot, i, &buf, &o);
    feeder__slot_labels(&job->layout, slot)[i] = 0;
    char uerr[512] = "";
    uint64_t t0 = job->trace ? feeder__now_ns() : 0;
    FEEDER_NVTX_PUSH("callback");
    int rc = job->ds->fcb.get(job->ds->user, &sc, &o, uerr, sizeof(uerr));
    FEEDER_NVTX_POP();
    if (job->trace)
        feeder__trace_worker_span(job->trace, w->id, FEEDER__SPAN_CALLBACK, t0, feeder__now_ns(),
                                  (int64_t)t->epoch, (int64_t)t->batch, (int64_t)index);
    if (rc && !o.put_error) { /* a failed put names the field itself */
        feeder__fmt(msg, msglen, "sample %llu: dataset callback returned %d%s%s",
                    (unsigned long long)index, rc, uerr[0] ? ": " : "", uerr);
        return rc < 0 ? rc : FEEDER_ECALLBACK;
    }
    return feeder__fields_accept(&job->fields, slot, i, index, &o, msg, msglen);
}

/* A user dataset's sample `index` into position i of the slot. */
static int load_user_at(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                        uint8_t *slot, uint32_t i, char *msg, size_t msglen)
{
    if (w->job->fields.nfields)
        return load_fields_sample(w, t, index, slot, i, msg, msglen);
    return load_user_sample(w, t, index, feeder__worker_sample_dst(w, slot, i),
                            &feeder__slot_labels(&w->job->layout, slot)[i], msg, msglen);
}

/* Read and load dataset sample `index` alone into position i of the slot
 * (a replacement under the skip policy). */
static int load_one(feeder__worker_ctx *w, const feeder__task_msg *t, uint64_t index,
                    uint8_t *slot, uint32_t i, feeder__result_msg *res, char *msg, size_t msglen)
{
    const feeder_dataset *ds = w->job->ds;
    uint8_t *dst = feeder__worker_sample_dst(w, slot, i);
    int64_t *label = &feeder__slot_labels(&w->job->layout, slot)[i];
    if (ds->kind == FEEDER__DS_USER)
        return load_user_at(w, t, index, slot, i, msg, msglen);
    if (ds->kind == FEEDER__DS_PACKED)
        return feeder__packed_load_one(w, t, index, dst, label, res, msg, msglen);
    feeder__file f = {.path = feeder_dataset_path(ds, index)};
    uint64_t t0 = feeder__now_ns();
    FEEDER_NVTX_PUSH("read");
    int rc = ds->kind == FEEDER__DS_TAR ? feeder__tar_read(w, &index, &f, 1)
                                        : feeder__reader_read(w->rd, &f, 1);
    FEEDER_NVTX_POP();
    uint64_t t1 = feeder__now_ns();
    res->read_ns += t1 - t0;
    feeder__trace_worker_span(w->job->trace, w->id, FEEDER__SPAN_READ, t0, t1, (int64_t)t->epoch,
                              (int64_t)t->batch, (int64_t)index);
    if (rc) {
        feeder__fmt(msg, msglen, "sample %llu (%s): reader failed: %s",
                    (unsigned long long)index, f.path, strerror(-rc));
        return rc;
    }
    res->bytes_read += f.err ? 0 : f.len;
    *label = ds->labels[index];
    return load_file_sample(w, t, &f, index, dst, res, msg, msglen);
}

/* The candidate after j: the next sample of its label (folder, list and
 * packed datasets), or the next sample (user datasets). */
static uint64_t next_candidate(const feeder__job *job, uint64_t j)
{
    return job->class_next ? job->class_next[j] : (j + 1) % job->ds->n;
}

static void no_replacement(const feeder__worker_ctx *w, uint64_t orig, uint64_t tried,
                           int went_round, const char *first_msg, feeder__result_msg *res)
{
    char whose[64] = "the dataset's";
    if (w->job->class_next)
        feeder__fmt(whose, sizeof(whose), "its class's (label %lld)",
                    (long long)w->job->ds->labels[orig]);
    if (tried == 0)
        feeder__fmt(res->errmsg, sizeof(res->errmsg),
                    "%s; skip policy: %s samples hold no other to replace it", first_msg, whose);
    else if (went_round)
        feeder__fmt(res->errmsg, sizeof(res->errmsg),
                    "%s; skip policy: no good sample is left for it among %s %llu others",
                    first_msg, whose, (unsigned long long)tried);
    else
        feeder__fmt(res->errmsg, sizeof(res->errmsg),
                    "%s; skip policy: the %d samples after it in %s order did not settle a "
                    "replacement (more than %d bad in a row)",
                    first_msg, FEEDER__SKIP_LIMIT, whose, FEEDER__SKIP_LIMIT / 2);
}

/* A skipped or dropped sample's index, for feeder_loader_skipped. */
static void note_bad(feeder__result_msg *res, uint64_t index)
{
    if (res->nbad < FEEDER__BAD_NOTED)
        res->bad[res->nbad++] = index;
}

/* Under the skip policy a bad sample is replaced by matching, as brackets
 * match: candidates (next_candidate, from it on) are loaded in turn, each bad
 * one opens, each good one closes, and the good one that closes the bad
 * sample's own opening replaces it (include/feeder.h). Every bad sample of a
 * run thus gets its own good one, and the choice depends only on the data, so
 * every run and every worker count replaces it the same way. */
static int replace_sample(feeder__worker_ctx *w, const feeder__task_msg *t, uint32_t pos,
                          uint8_t *slot, feeder__result_msg *res, const char *first_msg)
{
    const feeder__slot_layout *l = &w->job->layout;
    uint64_t *idx = feeder__slot_indices(l, slot);
    uint64_t orig = idx[pos], j = orig, tried = 0;
    feeder__slot_encoded(l, slot)[pos] = 0; /* a replacement is decoded here */
    char msg[FEEDER__ERRMSG_LEN];
    int rc = FEEDER_EDATASET, open = 1, went_round = 0;
    while (tried < FEEDER__SKIP_LIMIT) {
        j = next_candidate(w->job, j);
        if (j == orig) {
            went_round = 1;
            break;
        }
        tried++;
        int r = load_one(w, t, j, slot, pos, res, msg, sizeof(msg));
        if (r) {
            rc = r;
            open++;
        } else if (--open == 0) {
            idx[pos] = j;
            res->skipped++;
            note_bad(res, orig);
            return 0;
        }
    }
    no_replacement(w, orig, tried, went_round, first_msg, res);
    return rc;
}

/* Map the part's pages into this process in one call before writing them.
 * Each worker has its own mapping of the slots, so without this every 4 KiB
 * of every sample costs a page fault the first time this process writes it
 * (every epoch, with workers that are not persistent) -- costly in a VM.
 * Kernels before 5.14 lack MADV_POPULATE_WRITE; then the faults happen as
 * before. */
static void populate(uint8_t *p, size_t len)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
    size_t n = ((uintptr_t)p + len - a + 4095) & ~(size_t)4095;
    (void)madvise((void *)a, n, MADV_POPULATE_WRITE);
}

/* A GPU decoder's task of files: what goes over as bytes, and where
 * (feeder__worker_plan_gpu_part); a file that failed to read stays on the
 * CPU, whose decode path names the failure. */
static int plan_files(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                      feeder__result_msg *res)
{
    if (feeder__worker_part_reserve(w, t->count))
        return -ENOMEM;
    for (uint32_t k = 0; k < t->count; k++) {
        const feeder__file *f = &w->files[k];
        w->part.bytes[k] = f->err ? NULL : f->data;
        w->part.len[k] = f->err ? 0 : f->len;
    }
    feeder__worker_plan_gpu_part(w, t, slot, res);
    return 0;
}

static int ensure_files(feeder__worker_ctx *w, unsigned n)
{
    if (n <= w->files_cap)
        return 0;
    feeder__file *f = realloc(w->files, n * sizeof(*f));
    if (!f)
        return -ENOMEM;
    w->files = f;
    w->files_cap = n;
    return 0;
}

/* A batch dataset's task: the whole batch from its get callback, into the
 * slot's room (and the callback's extra descriptor, sent with the result). */
static int run_batch_task(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                          feeder__result_msg *res)
{
    const feeder__job *job = w->job;
    const feeder__slot_layout *l = &job->layout;
    feeder_batch_ctx ctx = {.epoch = t->epoch, .number = t->batch, .seed = job->seed,
                            .indices = feeder__slot_indices(l, slot) + t->first,
                            .count = t->count, .worker_id = w->id,
                            .num_workers = job->num_workers};
    feeder_batch_out out = {.data = feeder__slot_sample(l, slot, 0),
                            .capacity = (size_t)l->batch * l->room_bytes, .extra_fd = -1};
    char uerr[FEEDER__ERRMSG_LEN - 128] = "";
    uint64_t t0 = feeder__now_ns();
    int rc = job->ds->bcb.get(job->ds->user, &ctx, &out, uerr, sizeof(uerr));
    res->decode_ns += feeder__now_ns() - t0;
    feeder__trace_decode(job->trace, w->id, t0, res->decode_ns, 0, rc == 0, t->epoch, t->batch,
                         t->count ? ctx.indices[0] : 0);
    if (!rc && (out.used > out.capacity || (out.extra_fd >= 0 && !out.extra_bytes)))
        rc = FEEDER_EINVAL;
    if (rc) {
        if (out.extra_fd >= 0)
            close(out.extra_fd);
        if (rc == FEEDER_EINVAL && !uerr[0])
            feeder__fmt(uerr, sizeof(uerr), "used %zu of %zu bytes, extra_fd %d with %zu bytes",
                        out.used, out.capacity, out.extra_fd, out.extra_bytes);
        feeder__fmt(res->errmsg, sizeof(res->errmsg), "batch get callback returned %d%s%s", rc,
                    uerr[0] ? ": " : "", uerr);
        return rc > 0 ? FEEDER_ECALLBACK : rc;
    }
    res->used = out.used;
    res->extra_fd = out.extra_fd;
    res->extra_bytes = out.extra_fd >= 0 ? out.extra_bytes : 0;
    return 0;
}

/* A sample that failed with `rc` (`msg` says why), under the error policy:
 * DROP marks it (label -1) and counts it for the loader to leave out, SKIP
 * replaces it, FAIL reports it. 0, or the task's error with res->errmsg set. */
static int settle_failed(feeder__worker_ctx *w, const feeder__task_msg *t, uint32_t i,
                         uint8_t *slot, feeder__result_msg *res, const char *msg, int rc)
{
    const feeder__slot_layout *l = &w->job->layout;
    if (w->job->policy == FEEDER_ON_ERROR_DROP) {
        feeder__slot_labels(l, slot)[i] = -1;
        res->dropped++;
        note_bad(res, feeder__slot_indices(l, slot)[i]);
        return 0;
    }
    if (w->job->policy == FEEDER_ON_ERROR_SKIP)
        return replace_sample(w, t, i, slot, res, msg);
    feeder__fmt(res->errmsg, sizeof(res->errmsg), "%s", msg);
    return rc;
}

/* A user dataset's task: its get callback, sample by sample. */
static int run_user_task(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                         feeder__result_msg *res)
{
    const uint64_t *idx = feeder__slot_indices(&w->job->layout, slot);
    char msg[FEEDER__ERRMSG_LEN];
    for (uint32_t i = t->first; i < t->first + t->count; i++) {
        uint64_t t0 = feeder__now_ns();
        int rc = load_user_at(w, t, idx[i], slot, i, msg, sizeof(msg));
        res->decode_ns += feeder__now_ns() - t0;
        if (rc && (rc = settle_failed(w, t, i, slot, res, msg, rc)))
            return rc;
    }
    return 0;
}

/* Read every file of a task at once (one reader call), labels set. 0 or an
 * error that is not one file's, with res->errmsg set. */
static int read_task_files(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                           feeder__result_msg *res)
{
    const feeder__job *job = w->job;
    const feeder__slot_layout *l = &job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot);
    int64_t *lab = feeder__slot_labels(l, slot);
    int rc = ensure_files(w, t->count);
    if (rc) {
        feeder__fmt(res->errmsg, sizeof(res->errmsg), "worker %d: out of memory", w->id);
        return rc;
    }
    for (uint32_t k = 0; k < t->count; k++) {
        uint64_t index = idx[t->first + k];
        w->files[k].path = feeder_dataset_path(job->ds, index);
        lab[t->first + k] = job->ds->labels[index];
    }
    uint64_t t0 = feeder__now_ns();
    FEEDER_NVTX_PUSH("read");
    rc = job->ds->kind == FEEDER__DS_TAR ? feeder__tar_read(w, idx + t->first, w->files, t->count)
                                         : feeder__reader_read(w->rd, w->files, t->count);
    FEEDER_NVTX_POP();
    uint64_t t1 = feeder__now_ns();
    res->read_ns += t1 - t0;
    feeder__trace_worker_span(job->trace, w->id, FEEDER__SPAN_READ, t0, t1, (int64_t)t->epoch,
                              (int64_t)t->batch, -1);
    if (rc)
        feeder__fmt(res->errmsg, sizeof(res->errmsg), "worker %d: reader failed: %s", w->id,
                    strerror(-rc));
    return rc;
}

/* A task of files, read: each goes to its place as JPEG bytes (a GPU
 * decoder's plan) or decoded. Under the skip policy a failed sample is
 * marked (label -1; *bad_first the first) and replaced after this pass,
 * since a replacement's read reuses the reader's buffers this pass needs. */
static int place_task_files(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                            feeder__result_msg *res, uint32_t *bad_first)
{
    const feeder__slot_layout *l = &w->job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot);
    int64_t *lab = feeder__slot_labels(l, slot);
    char msg[FEEDER__ERRMSG_LEN];
    if (w->gpu_dec && plan_files(w, t, slot, res)) {
        feeder__fmt(res->errmsg, sizeof(res->errmsg), "worker %d: out of memory", w->id);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < t->count; k++) {
        uint32_t i = t->first + k;
        const feeder__file *f = &w->files[k];
        res->bytes_read += f->err ? 0 : f->len;
        uint8_t *dst = feeder__worker_sample_dst(w, slot, i);
        if (w->gpu_dec && w->part.gpu[k]) {
            memcpy(dst, f->data, f->len); /* the JPEG engine's kind: bytes as they are */
            continue;
        }
        int rc = load_file_sample(w, t, f, idx[i], dst, res, msg, sizeof(msg));
        if (!rc)
            continue;
        if (w->job->policy == FEEDER_ON_ERROR_FAIL) {
            feeder__fmt(res->errmsg, sizeof(res->errmsg), "%s", msg);
            return rc;
        }
        lab[i] = -1;
        if (*bad_first == UINT32_MAX)
            *bad_first = i;
    }
    return 0;
}

/* The skip policy's second pass: every marked sample replaced. The drop
 * policy's: every marked one counted; the loader leaves them out. */
static int replace_marked(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                          uint32_t bad_first, feeder__result_msg *res)
{
    const feeder__slot_layout *l = &w->job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot);
    const int64_t *lab = feeder__slot_labels(l, slot);
    char msg[FEEDER__ERRMSG_LEN];
    for (uint32_t i = bad_first; i != UINT32_MAX && i < t->first + t->count; i++) {
        if (lab[i] != -1)
            continue;
        const char *path = feeder_dataset_path(w->job->ds, idx[i]);
        if (w->job->ds->kind == FEEDER__DS_PACKED)
            feeder__fmt(msg, sizeof(msg), "record %llu of %s failed", (unsigned long long)idx[i],
                        w->job->ds->pack->path);
        else if (path)
            feeder__fmt(msg, sizeof(msg), "sample %llu (%s) failed", (unsigned long long)idx[i],
                        path);
        else
            feeder__fmt(msg, sizeof(msg), "sample %llu failed", (unsigned long long)idx[i]);
        int rc = settle_failed(w, t, i, slot, res, msg, FEEDER_EDECODE);
        if (rc)
            return rc;
    }
    return 0;
}

/* The user's augmentation (augment/) on every sample of the task, in its
 * place, once the task's samples (and any skip replacements) are in: each
 * sample's draws come from its dataset index, so where and when it runs
 * does not change the bytes. */
static void augment_task(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                         feeder__result_msg *res)
{
    const feeder__job *job = w->job;
    if (!w->aug_scratch)
        return;
    const feeder__slot_layout *l = &job->layout;
    const uint64_t *idx = feeder__slot_indices(l, slot);
    uint64_t t0 = feeder__now_ns();
    for (uint32_t i = t->first; i < t->first + t->count; i++)
        feeder__augment_apply_ch(&job->aug, feeder__slot_sample(l, slot, i), l->width,
                                 l->height, l->layout, (int)l->channels, job->seed, t->epoch,
                                 idx[i], w->aug_scratch);
    res->transform_ns += feeder__now_ns() - t0;
}

/* The user's per-batch collate callback on a packed batch, with write
 * access to its fields through feeder_batch_field. */
static int run_collate(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                       feeder__result_msg *res)
{
    const feeder__job *job = w->job;
    feeder__fields_view v = {.fl = &job->fields, .slot = slot, .in_collate = 1};
    feeder_batch b;
    memset(&b, 0, sizeof(b));
    b.indices = feeder__slot_indices(&job->layout, slot);
    b.count = feeder__fields_ctrl(&job->fields, slot)->count;
    b.epoch = t->epoch;
    b.number = t->batch;
    b.device = -1;
    b.fields_ = &v;
    char uerr[512] = "";
    uint64_t t0 = feeder__now_ns();
    int rc = job->collate(job->collate_user, &b, uerr, sizeof(uerr));
    res->transform_ns += feeder__now_ns() - t0;
    if (rc)
        feeder__fmt(res->errmsg, sizeof(res->errmsg),
                    "collate callback returned %d%s%s", rc, uerr[0] ? ": " : "", uerr);
    return rc ? FEEDER_ECALLBACK : 0;
}

/* A fields dataset's part is in: count it in the slot, and when it is the
 * batch's last (every sample in, no part failed) pack the fields and run
 * the collate callback here, before the result goes back. */
static int finish_fields_part(feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot,
                              feeder__result_msg *res, int rc)
{
    const feeder__job *job = w->job;
    if (!feeder__fields_part_done(&job->fields, slot, t->first, t->count, t->total, rc != 0))
        return rc;
    uint64_t t0 = feeder__now_ns();
    feeder__fields_pack(&job->fields, slot, t->total);
    res->transform_ns += feeder__now_ns() - t0;
    rc = job->collate ? run_collate(w, t, slot, res) : 0;
    /* Only now: a worker that dies before this leaves the batch unpacked,
     * which the loader reports instead of lending it. */
    feeder__fields_ctrl(&job->fields, slot)->packed = !rc;
    return rc;
}

/* Map the task's share of every field's values. */
static void populate_task(const feeder__worker_ctx *w, const feeder__task_msg *t, uint8_t *slot)
{
    const feeder__job *job = w->job;
    const feeder__fields_layout *fl = &job->fields;
    if (job->ds->bcb.get) /* a room of its own size: the callback touches what it uses */
        return;
    if (!fl->nfields) {
        populate(feeder__slot_sample(&job->layout, slot, t->first),
                 (size_t)t->count * job->layout.sample_bytes);
        return;
    }
    for (uint32_t k = 0; k < fl->nfields; k++)
        populate(feeder__field_sample(fl, slot, k, t->first),
                 (size_t)t->count * fl->a[k].sample_bytes);
}

void feeder__run_task(feeder__worker_ctx *w, const feeder__task_msg *t, feeder__result_msg *res)
{
    const feeder__slot_layout *l = &w->job->layout;
    int kind = w->job->ds->kind;
    memset(res, 0, offsetof(feeder__result_msg, errmsg));
    res->errmsg[0] = 0;
    res->kind = FEEDER__MSG_RESULT;
    res->extra_fd = -1;
    res->slot = t->slot;
    res->first = t->first;
    res->count = t->count;
    res->batch = t->batch;
    uint8_t *slot = feeder__slot_base(l, w->mem, t->slot);
    /* A part run again after its worker died, whose batch is already
     * packed: it is in the batch. */
    if (w->job->fields.nfields && feeder__fields_ctrl(&w->job->fields, slot)->packed)
        return;
    populate_task(w, t, slot);
    int rc;
    if (w->job->ds->bcb.get) {
        rc = run_batch_task(w, t, slot, res);
    } else if (kind == FEEDER__DS_USER) {
        rc = run_user_task(w, t, slot, res);
    } else {
        uint32_t bad_first = UINT32_MAX;
        rc = kind == FEEDER__DS_PACKED
                 ? feeder__packed_fill(w, t, slot, res, &bad_first) /* one mapped file */
                 : read_task_files(w, t, slot, res);
        if (!rc && kind != FEEDER__DS_PACKED)
            rc = place_task_files(w, t, slot, res, &bad_first);
        if (!rc)
            rc = replace_marked(w, t, slot, bad_first, res);
    }
    if (!rc)
        augment_task(w, t, slot, res);
    if (w->job->fields.nfields)
        rc = finish_fields_part(w, t, slot, res, rc);
    res->status = rc;
}

/* A result with a batch dataset's extra descriptor: the descriptor goes
 * along (SCM_RIGHTS) and this process's copy is closed once it is sent. */
static int send_result(int chan, feeder__result_msg *r)
{
    int fd = r->extra_fd;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } c;
    struct iovec io = {.iov_base = r, .iov_len = sizeof(*r)};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&c, 0, sizeof(c));
        m.msg_control = c.buf;
        m.msg_controllen = sizeof(c.buf);
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof(int));
    }
    int rc = 0;
    while (sendmsg(chan, &m, MSG_NOSIGNAL) < 0) {
        if (errno != EINTR) {
            rc = -errno;
            break;
        }
    }
    if (fd >= 0)
        close(fd);
    r->extra_fd = -1;
    return rc;
}

static int send_msg(int chan, const void *msg, size_t len)
{
    for (;;) {
        ssize_t n = send(chan, msg, len, MSG_NOSIGNAL);
        if (n >= 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int feeder__worker_watch_parent(pid_t parent, int *pidfd)
{
    /* Die with the loader's process, not with the thread that forked us:
     * a pidfd of the parent becomes readable when the whole process exits
     * (PR_SET_PDEATHSIG fires when the forking thread ends, and training
     * frameworks start loaders from threads that end). Kernels without
     * pidfd_open get the signal. A parent that died before this point is
     * caught by the comparison (we were re-parented to a reaper); `parent`
     * was read before fork: reading it here would read the reaper. */
    *pidfd = (int)syscall(SYS_pidfd_open, parent, 0);
    if (*pidfd < 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    return getppid() != parent;
}

/* The worker's watch of the loader's process: a thread that waits on the
 * parent's pidfd and kills this worker the moment that process exits, even
 * mid-sample (a task can run for seconds), as PR_SET_PDEATHSIG would. */
static void *watch_parent(void *arg)
{
    struct pollfd p = {.fd = (int)(intptr_t)arg, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    if (p.revents & POLLIN) /* the process exited (POLLNVAL: no watch, no kill) */
        kill(getpid(), SIGKILL);
    return NULL;
}

/* ThreadSanitizer kills a process that starts a thread after a
 * multi-threaded fork: under it the worker watches only between tasks
 * (wait_channel), so one whose loader's process dies mid-task finishes that
 * task first. The thread-bound signal would be no substitute: it would kill
 * the workers whenever their forking thread ends. */
#if defined(__SANITIZE_THREAD__)
#define FEEDER__WATCH_THREAD 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FEEDER__WATCH_THREAD 0
#endif
#endif
#ifndef FEEDER__WATCH_THREAD
#define FEEDER__WATCH_THREAD 1
#endif

/* Wait for the next message on the channel, or for the loader's process to
 * exit: 1 when the channel has something (or an error to read), 0 when the
 * parent is gone. */
static int wait_channel(int chan, int parent_fd)
{
    struct pollfd p[2] = {{.fd = chan, .events = POLLIN}, {.fd = parent_fd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, parent_fd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[0].revents)
            return 1;
        if (p[1].revents & POLLIN)
            return 0;
        if (p[1].revents) /* no watch on this descriptor any more */
            parent_fd = -1;
    }
}

static void start_parent_watch(int parent_fd)
{
    if (parent_fd < 0 || !FEEDER__WATCH_THREAD)
        return; /* PR_SET_PDEATHSIG is armed instead, or wait_channel watches */
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    /* The default stack: a small one fails (EINVAL) when the program's static
     * TLS is large, as the CUDA runtime's is. */
    if (pthread_create(&t, &a, watch_parent, (void *)(intptr_t)parent_fd) != 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* no thread: the signal, thread-bound as it is */
    pthread_attr_destroy(&a);
}

_Noreturn void feeder__worker_main(const feeder__job *job, int id, int chan, pid_t parent,
                                   const int *close_fds, int nclose,
                                   feeder_worker_init_fn init, void *init_user)
{
    /* The parent's descriptors first: the pidfd made next must not share a
     * number with one of them. */
    feeder__worker_close_inherited(job, chan, close_fds, nclose);
    int parent_fd;
    if (feeder__worker_watch_parent(parent, &parent_fd))
        _exit(FEEDER__EXIT_ORPHAN);
    /* No PR_SET_PDEATHSIG beside the watch: it fires when the forking
     * thread ends, and the process's main thread can end (pthread_exit)
     * while the process, and its loader, go on. A worker stopped (SIGSTOP)
     * when the process exits dies as soon as it is continued: its watching
     * thread then finds the pidfd readable. */
    start_parent_watch(parent_fd);
    /* A process group of its own: when the loader's process ends while this
     * worker is stopped, nothing in it can run, but the kernel finds its
     * group orphaned with a stopped member and sends it SIGHUP and SIGCONT
     * (POSIX), which end it (or continue it, and the watch ends it). That
     * holds where the worker is re-parented to init, not to a subreaper in
     * its session. The terminal's Ctrl-C, sent to the foreground group,
     * reaches the loader's process then, not its workers. */
    (void)setpgid(0, 0);
    feeder__trace_worker_pid(job->trace, id, (int)getpid());
    static feeder__result_msg res;
    memset(&res, 0, sizeof(res));
    res.kind = FEEDER__MSG_READY;
    /* Map the slots ourselves (invariant 4): the parent's mapping may be
     * registered with the GPU driver and is not ours to write through. */
    uint8_t *mem = mmap(NULL, job->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, job->memfd, 0);
    if (mem == MAP_FAILED) {
        res.status = -errno;
        feeder__fmt(res.errmsg, sizeof(res.errmsg),
                    "worker %d (pid %d) could not start: mmap of the %zu bytes of batch slots: %s",
                    id, (int)getpid(), job->shm_bytes, strerror(errno));
        send_msg(chan, &res, sizeof(res));
        _exit(1);
    }
    close(job->memfd);
    static feeder__worker_ctx w;
    int rc = feeder__worker_ctx_init(&w, job, id, mem);
    if (rc) {
        res.status = rc;
        feeder__fmt(res.errmsg, sizeof(res.errmsg),
                    "worker %d (pid %d) could not start: setting up its reader and decoder: %s",
                    id, (int)getpid(), rc < 0 ? strerror(-rc) : feeder_strerror(rc));
        send_msg(chan, &res, sizeof(res));
        _exit(1);
    }
    if (init && (rc = init(init_user, id)) != 0) {
        res.status = FEEDER_ECALLBACK;
        feeder__fmt(res.errmsg, sizeof(res.errmsg), "worker_init failed in worker %d (pid %d): returned %d",
                    id, (int)getpid(), rc);
        send_msg(chan, &res, sizeof(res));
        _exit(1);
    }
    if (send_msg(chan, &res, sizeof(res)))
        _exit(1);
    for (;;) {
        feeder__task_msg t;
        if (!wait_channel(chan, parent_fd))
            _exit(0); /* the loader's process is gone */
        ssize_t n = recv(chan, &t, sizeof(t), 0);
        if (n < 0 && errno == EINTR)
            continue;
        /* The loader closed the channel (end of epoch, destroy) or died. A
         * shard this worker is still downloading is finished first. */
        if (n <= 0) {
            feeder__remote_settle();
            _exit(0);
        }
        if ((size_t)n != sizeof(t) || t.kind != FEEDER__MSG_TASK)
            _exit(2);
        feeder__run_task(&w, &t, &res);
        if (send_result(chan, &res))
            _exit(0);
    }
}
