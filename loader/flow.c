/*
 * The epoch's task flow. A batch takes a free slot; the loader writes the
 * batch's dataset indices into the slot and cuts the batch into `split`
 * parts (default: about 16 samples, at least one per worker) so every worker
 * works on the first batch at once. Parts wait in a FIFO and go to whichever
 * worker has fewer than FEEDER__WORKER_QUEUE parts outstanding, so a slow
 * worker never holds the others back. A slot becomes ready when all its parts
 * have reported; delivery follows the sampler's order (in_order) or
 * completion order.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/nvtx.h"
#include "common/trace.h"
#include "dataset/pack.h"
#include "dataset/tar.h"
#include "decode/jpeg_index.h"
#include "loader/host.h"

static int batch_done(const feeder_loader *ld, uint64_t b)
{
    return (ld->flow.done_map[b / 8] >> (b % 8)) & 1;
}

/* The one place a batch counts as delivered: handed to the user by
 * feeder_next, as a batch or as its error. The state blob, the in-order
 * cursor and the end of the epoch all read what this keeps. (A GPU
 * prefetcher that hands batches out later calls this when it does.) */
static void mark_delivered(feeder_loader *ld, uint64_t b)
{
    if (b >= ld->flow.nbatches || batch_done(ld, b))
        return;
    ld->flow.done_map[b / 8] |= (uint8_t)(1u << (b % 8));
    ld->flow.delivered++;
    while (ld->flow.next_in_order < ld->flow.nbatches && batch_done(ld, ld->flow.next_in_order))
        ld->flow.next_in_order++;
}

/* The next batch number to load, past those already delivered (a resumed
 * epoch), or nbatches. */
static uint64_t take_next_batch(feeder_loader *ld)
{
    while (ld->flow.dispatched < ld->flow.nbatches && batch_done(ld, ld->flow.dispatched))
        ld->flow.dispatched++;
    if (ld->ds->kind == FEEDER__DS_PACKED) /* a shards dataset fetches ahead of this */
        feeder__shards_progress(ld->ds->pack,
                                ld->flow.dispatched * (uint64_t)ld->plan.sampling.batch_size);
    else if (ld->ds->kind == FEEDER__DS_TAR)
        feeder__tar_progress(ld->ds->tar,
                             ld->flow.dispatched * (uint64_t)ld->plan.sampling.batch_size);
    return ld->flow.dispatched < ld->flow.nbatches ? ld->flow.dispatched++ : ld->flow.nbatches;
}

static void drop_ahead(feeder_loader *ld);

/* The epoch run ahead becomes the running one: its order, and its batches
 * already in slots. Returns the order's length. */
static uint64_t adopt_ahead(feeder_loader *ld)
{
    uint64_t *o = ld->flow.order, cap = ld->flow.order_cap;
    ld->flow.order = ld->flow.ahead.order;
    ld->flow.order_cap = ld->flow.ahead.order_cap;
    ld->flow.ahead.order = o;
    ld->flow.ahead.order_cap = cap;
    return ld->flow.ahead.order_len;
}

/* Epoch `epoch`'s order from the sampler into *buf (grown, *cap its
 * capacity), every index checked against the dataset: 0 and *out_len, or
 * the error with `why` saying what is wrong. Serves the running epoch and
 * the one run ahead. */
static int sample_order(const feeder_loader *ld, uint64_t epoch, uint64_t **buf, uint64_t *cap,
                        uint64_t *out_len, char *why, size_t whylen)
{
    uint64_t len = feeder_sampler_len(ld->sampler, epoch);
    if (len > SIZE_MAX / sizeof(uint64_t)) {
        feeder__fmt(why, whylen, "the sampler's %llu indices for epoch %llu overflow a size",
                    (unsigned long long)len, (unsigned long long)epoch);
        return FEEDER_EOVERFLOW;
    }
    if (len > *cap) {
        uint64_t *o = realloc(*buf, len * sizeof(*o));
        if (!o) {
            feeder__fmt(why, whylen, "out of memory for the epoch's order (%llu indices)",
                        (unsigned long long)len);
            return -ENOMEM;
        }
        *buf = o;
        *cap = len;
    }
    int rc = feeder_sampler_fill(ld->sampler, epoch, *buf, len);
    if (rc) {
        feeder__fmt(why, whylen, "the sampler failed for epoch %llu: %s", (unsigned long long)epoch,
                    feeder_strerror(rc));
        return rc;
    }
    for (uint64_t i = 0; i < len; i++)
        if ((*buf)[i] >= ld->ds->n) {
            feeder__fmt(why, whylen,
                        "the sampler gave index %llu at position %llu; the dataset has %llu samples",
                        (unsigned long long)(*buf)[i], (unsigned long long)i,
                        (unsigned long long)ld->ds->n);
            return FEEDER_EINVAL;
        }
    *out_len = len;
    return 0;
}

/* A batch sampler's batches: their lengths into ld->flow.boff (running
 * offsets) and their workers into ld->flow.bworker, each checked against the
 * slots' index room and the worker count. */
static int take_batches(feeder_loader *ld, uint64_t epoch, const uint32_t *lengths,
                        const int32_t *workers, uint64_t nb)
{
    free(ld->flow.boff);
    free(ld->flow.bworker);
    ld->flow.bworker = NULL;
    if (!(ld->flow.boff = malloc((size_t)(nb + 1) * sizeof(*ld->flow.boff))) ||
        !(ld->flow.bworker = malloc((size_t)(nb ? nb : 1) * sizeof(*ld->flow.bworker))))
        return feeder__loader_fail(ld, -ENOMEM, "out of memory for %llu batches",
                                   (unsigned long long)nb);
    ld->flow.boff[0] = 0;
    for (uint64_t b = 0; b < nb; b++) {
        if (lengths[b] > ld->plan.sampling.batch_size)
            return feeder__loader_fail(ld, FEEDER_ERANGE,
                        "the batch sampler's batch %llu of epoch %llu has %u indices; the "
                        "slots hold at most batch_size = %u", (unsigned long long)b,
                        (unsigned long long)epoch, lengths[b], ld->plan.sampling.batch_size);
        if (workers[b] >= ld->pool.nworkers || workers[b] < -1 ||
            (workers[b] >= 0 && !ld->pool.nworkers))
            return feeder__loader_fail(ld, FEEDER_ERANGE,
                        "the batch sampler gave batch %llu of epoch %llu to worker %d; the "
                        "loader has %d", (unsigned long long)b, (unsigned long long)epoch,
                        workers[b], ld->pool.nworkers);
        ld->flow.boff[b + 1] = ld->flow.boff[b] + lengths[b];
        ld->flow.bworker[b] = workers[b];
    }
    return 0;
}

/* A batch sampler's epoch: its order (checked against the dataset) and its
 * batches. *out_len indices, *nb batches. */
static int fill_batches(feeder_loader *ld, uint64_t epoch, uint64_t *out_len, uint64_t *nb)
{
    uint64_t len = feeder_sampler_len(ld->sampler, epoch);
    if (len > SIZE_MAX / sizeof(uint64_t))
        return feeder__loader_fail(ld, FEEDER_EOVERFLOW, "the sampler's %llu indices for epoch "
                                   "%llu overflow a size", (unsigned long long)len,
                                   (unsigned long long)epoch);
    if (len > ld->flow.order_cap) {
        uint64_t *o = realloc(ld->flow.order, len * sizeof(*o));
        if (!o)
            return feeder__loader_fail(ld, -ENOMEM, "out of memory for the epoch's order (%llu "
                                       "indices)", (unsigned long long)len);
        ld->flow.order = o;
        ld->flow.order_cap = len;
    }
    uint32_t *lengths;
    int32_t *workers;
    int rc =
        feeder__sampler_batches(ld->sampler, epoch, ld->flow.order, len, &lengths, &workers, nb);
    if (rc == FEEDER_EINVAL)
        rc = feeder__loader_fail(ld, rc, "the batch sampler's batch lengths for epoch %llu do "
                                 "not add up to its %llu indices", (unsigned long long)epoch,
                                 (unsigned long long)len);
    else if (rc)
        rc = feeder__loader_fail(ld, rc, "the batch sampler failed for epoch %llu: %s",
                                 (unsigned long long)epoch, feeder_strerror(rc));
    else
        rc = take_batches(ld, epoch, lengths, workers, *nb);
    free(lengths);
    free(workers);
    for (uint64_t i = 0; !rc && i < len; i++)
        if (ld->flow.order[i] >= ld->ds->n)
            rc = feeder__loader_fail(ld, FEEDER_EINVAL, "the sampler gave index %llu at position "
                                     "%llu; the dataset has %llu samples",
                                     (unsigned long long)ld->flow.order[i], (unsigned long long)i,
                                     (unsigned long long)ld->ds->n);
    *out_len = len;
    return rc;
}

/* The epoch's order from the sampler, checked against the dataset; the
 * shard sets and tar shards are told what it will read. */
static int fill_order(feeder_loader *ld, uint64_t epoch, uint64_t *out_len)
{
    char why[256];
    uint64_t len;
    int rc = sample_order(ld, epoch, &ld->flow.order, &ld->flow.order_cap, &len, why, sizeof(why));
    if (rc)
        return feeder__loader_fail(ld, rc, "%s", why);
    if (ld->ds->kind == FEEDER__DS_PACKED)
        feeder__shards_plan(ld->ds->pack, ld->flow.order, len);
    else if (ld->ds->kind == FEEDER__DS_TAR)
        feeder__tar_plan(ld->ds->tar, ld->flow.order, len);
    *out_len = len;
    return 0;
}

/* The delivery map of the epoch's batches: empty, or the resume blob's. */
static int reset_delivery(feeder_loader *ld)
{
    size_t map = (size_t)(ld->flow.nbatches / 8 + 1);
    if (map > ld->flow.done_cap) {
        uint8_t *m = realloc(ld->flow.done_map, map);
        if (!m)
            return feeder__loader_fail(ld, -ENOMEM, "out of memory for the epoch's delivery map (%zu bytes)", map);
        ld->flow.done_map = m;
        ld->flow.done_cap = map;
    }
    memset(ld->flow.done_map, 0, map);
    if (ld->flow.resume) {
        /* Checked at start against this sampler; a user sampler that is not
         * a pure function of the epoch could still disagree now. */
        if (ld->flow.resume_st.nbatches != ld->flow.nbatches)
            return feeder__loader_fail(ld, FEEDER_EMISMATCH,
                        "state blob does not match the loader: the number of batches is %llu "
                        "in the blob, %llu in the loader",
                        (unsigned long long)ld->flow.resume_st.nbatches,
                        (unsigned long long)ld->flow.nbatches);
        for (uint64_t b = 0; b < ld->flow.nbatches; b++)
            if (ld->flow.resume_st.map && ((ld->flow.resume_st.map[b / 8] >> (b % 8)) & 1))
                mark_delivered(ld, b);
    }
    return 0;
}

/* The workers, or the calling thread's reader and decoder. */
static int ready_readers(feeder_loader *ld)
{
    int rc;
    if (ld->pool.nworkers && !ld->pool.running && (rc = feeder__pool_spawn(ld)))
        return rc;
    if (!ld->pool.nworkers && !ld->pool.inline_ready) {
        /* The calling thread maps nothing new: it writes through the
         * loader's own mapping. */
        rc = feeder__worker_ctx_init(&ld->pool.inline_ctx, &ld->job, -1, ld->shm.mem);
        if (rc) {
            feeder__worker_ctx_free(&ld->pool.inline_ctx);
            return feeder__loader_fail(ld, rc, "cannot set up the reader and decoder: %s", feeder_strerror(rc));
        }
        ld->pool.inline_ready = 1;
    }
    return 0;
}

/* The epoch's order (or batches) into the flow: the one run ahead when it
 * is this epoch's (a user's callbacks are asked again, and it is kept only
 * when they give the same order), else the sampler's now. *adopt: the run
 * ahead was kept. 0, or the error with the message set. */
static int take_order(feeder_loader *ld, uint64_t epoch, int *adopt, uint64_t *len, uint64_t *nb)
{
    int rc;
    *adopt = ld->flow.ahead.on && ld->flow.ahead.epoch == epoch && !ld->flow.resume;
    if (*adopt && !feeder__sampler_pure(ld->sampler)) {
        if ((rc = fill_order(ld, epoch, len)))
            return rc;
        *adopt = *len == ld->flow.ahead.order_len &&
                 !memcmp(ld->flow.order, ld->flow.ahead.order, *len * sizeof(*ld->flow.order));
        if (*adopt)
            adopt_ahead(ld);
        else
            drop_ahead(ld);
        return 0;
    }
    if (ld->flow.ahead.on && !*adopt)
        drop_ahead(ld);
    if (*adopt)
        *len = adopt_ahead(ld);
    else if (feeder__sampler_batched(ld->sampler))
        return fill_batches(ld, epoch, len, nb);
    else
        return fill_order(ld, epoch, len);
    return 0;
}

static int begin_epoch(feeder_loader *ld)
{
    uint64_t epoch = feeder__resume_next_epoch(ld);
    ld->flow.next_set = 0;
    uint64_t len = 0, nb = 0;
    int adopt, rc;
    if ((rc = take_order(ld, epoch, &adopt, &len, &nb)))
        return rc;
    int batched = feeder__sampler_batched(ld->sampler);
    ld->flow.epoch_t0 = feeder__now_ns();
    ld->flow.order_len = len;
    ld->flow.nbatches = batched ? nb : feeder_batch_count(len, ld->plan.sampling.batch_size,
                                                     ld->plan.sampling.drop_last);
    ld->flow.dispatched = adopt ? ld->flow.ahead.dispatched : 0;
    ld->flow.delivered = ld->flow.next_in_order = 0;
    ld->pool.epoch_deaths = 0;
    ld->pool.deaths[0] = 0;
    if ((rc = reset_delivery(ld)))
        return rc;
    ld->flow.first_seen = 0;
    if (!adopt) /* adopted: its queued parts are its batches' */
        ld->flow.q.len = ld->flow.q.head = 0;
    ld->flow.ahead.on = ld->flow.ahead.tried = 0;
    if ((rc = ready_readers(ld)))
        return rc;
    feeder__resume_drop(ld);
    ld->flow.epoch = epoch;
    ld->flow.have_epoch = 1;
    ld->flow.in_epoch = 1;
    return 0;
}

static void end_epoch(feeder_loader *ld)
{
    ld->flow.in_epoch = 0;
    if (ld->pool.nworkers && !ld->plan.workers.persistent)
        feeder__pool_stop(ld, 0);
}

/* Slot s readied for batch b of `epoch` (its order `order`, order_len
 * long): its state reset, the batch's indices written into it (BATCH_SIZE
 * apart, or where a batch sampler put them). Returns the batch's count. */
static uint32_t load_slot(feeder_loader *ld, uint32_t s, uint64_t epoch, uint64_t b,
                          const uint64_t *order, uint64_t order_len)
{
    slot_state *ss = &ld->shm.slots[s];
    uint32_t batch = ld->plan.sampling.batch_size;
    uint64_t first = feeder__flow_batch_first(ld, b);
    uint64_t end = ld->flow.boff ? ld->flow.boff[b + 1] : order_len;
    uint32_t count = (uint32_t)(end - first < batch ? end - first : batch);
    feeder__slot_forget_extra(ss);
    ss->epoch = epoch;
    ss->batch = b;
    ss->count = count;
    ss->skipped = 0;
    ss->dropped = 0;
    ss->status = 0;
    ss->errmsg[0] = 0;
    uint8_t *base = feeder__slot_base(&ld->job.layout, ld->shm.mem, s);
    memcpy(feeder__slot_indices(&ld->job.layout, base), order + first, count * sizeof(uint64_t));
    if (ld->job.fields.nfields)
        feeder__fields_reset(&ld->job.fields, base);
    return count;
}

/* Batch b of `epoch` (its order `order`, order_len long) takes free slot s:
 * its indices go into the slot, its parts into the FIFO. */
static void give_slot(feeder_loader *ld, uint32_t s, uint64_t epoch, uint64_t b,
                      const uint64_t *order, uint64_t order_len)
{
    slot_state *ss = &ld->shm.slots[s];
    uint32_t count = load_slot(ld, s, epoch, b, order, order_len);
    int32_t want = ld->flow.bworker ? ld->flow.bworker[b] : -1;
    ss->state = SLOT_FILLING;
    /* An empty batch (a batch sampler's) is still one task: the dataset
     * may have something to say for it. */
    uint32_t parts = !count ? 1 : ld->flow.parts < count ? ld->flow.parts : count;
    ss->parts_left = parts;
    for (uint32_t p = 0; p < parts; p++) {
        uint32_t lo = (uint32_t)((uint64_t)p * count / parts);
        uint32_t hi = (uint32_t)((uint64_t)(p + 1) * count / parts);
        feeder__task_msg *t = &ld->flow.q.v[(ld->flow.q.head + ld->flow.q.len++) % ld->flow.q.cap];
        *t = (feeder__task_msg){FEEDER__MSG_TASK, s, lo, hi - lo, epoch, b, count, want};
    }
}

/* Whether the dataset fetches URL shards ahead of the epoch's order: not
 * once every URL shard has landed in a cache that evicts none, so that the
 * epochs after the first begin early as a local set's do. */
static int plans_fetches(const feeder_dataset *ds)
{
    if (ds->kind == FEEDER__DS_TAR)
        return ds->tar->cache && ds->tar->fetch_ahead && !feeder__tar_settled(ds->tar);
    if (ds->kind == FEEDER__DS_PACKED)
        return ds->pack->shards && ds->pack->shards->cache && ds->pack->shards->fetch_ahead &&
               !feeder__shards_settled(ds->pack);
    return 0;
}

/* Whether an epoch may begin before the user asks for it, at start or at
 * the end of the one before: nothing is to be resumed, nothing failed, the
 * sampler gives any epoch's order at any time, and the dataset plans nothing
 * per epoch (shards from URLs and tar sets plan their fetches from the
 * epoch's order). */
static int may_begin_early(const feeder_loader *ld)
{
    return !ld->flow.resume && !ld->start_failed && !ld->pool.workers_failed &&
           !plans_fetches(ld->ds) &&
           (feeder__sampler_pure(ld->sampler) || feeder__sampler_checked_ahead(ld->sampler));
}

/* Whether the next epoch may begin now: as above, the workers stay between
 * epochs, and every batch of this epoch has its slot. */
static int may_run_ahead(const feeder_loader *ld)
{
    if (ld->flow.ahead.tried || !ld->plan.workers.persistent || !ld->pool.nworkers ||
        !ld->flow.have_epoch)
        return 0;
    if (ld->flow.in_epoch && ld->flow.dispatched < ld->flow.nbatches)
        return 0;
    return may_begin_early(ld);
}

/* Ask the sampler for the next epoch's order now. 0 leaves it to
 * begin_epoch, which reports what is wrong with it. */
static int start_ahead(feeder_loader *ld)
{
    ld->flow.ahead.tried = 1;
    uint64_t epoch = feeder__resume_next_epoch(ld), len;
    char why[256];
    if (feeder_sampler_len(ld->sampler, epoch) == 0 ||
        sample_order(ld, epoch, &ld->flow.ahead.order, &ld->flow.ahead.order_cap, &len, why,
                     sizeof(why)))
        return 0;
    ld->flow.ahead.epoch = epoch;
    ld->flow.ahead.order_len = len;
    ld->flow.ahead.nbatches =
        feeder_batch_count(len, ld->plan.sampling.batch_size, ld->plan.sampling.drop_last);
    ld->flow.ahead.dispatched = 0;
    ld->flow.ahead.on = 1;
    return 1;
}

/* Hand queued parts to workers with room, least-loaded first: that keeps
 * every worker's queue short and even. A send error means the worker is
 * gone; its death is reported by the wait loop that sees its pidfd or
 * channel. */
static void send_parts(feeder_loader *ld)
{
    while (ld->flow.q.len) {
        worker *best = NULL;
        int want = ld->flow.q.v[ld->flow.q.head].want;
        for (int i = 0; i < ld->pool.nworkers; i++) {
            worker *w = &ld->pool.workers[i];
            if (w->chan >= 0 && !w->broken && w->outstanding < FEEDER__WORKER_QUEUE &&
                (want < 0 || want == i) && (!best || w->outstanding < best->outstanding))
                best = w;
        }
        /* A part given to a busy worker waits at the head, in order, as
         * PyTorch's worker queues do. */
        if (!best)
            break;
        feeder__task_msg *t = &ld->flow.q.v[ld->flow.q.head];
        if (feeder__pool_send_task(ld, best, t) != 0) {
            /* What it sent before it went (a failed start's reason) is
             * still in the channel; the wait loop reads it, then the EOF. */
            best->broken = 1;
            continue;
        }
        best->inflight[best->outstanding++] = *t;
        ld->flow.q.head = (ld->flow.q.head + 1) % ld->flow.q.cap;
        ld->flow.q.len--;
    }
}

/* Give free slots to the epoch's next batches, then to the next epoch's
 * (run ahead), and hand queued parts to workers. */
static void dispatch(feeder_loader *ld)
{
    if (!ld->pool.running)
        return;
    for (uint32_t s = 0;
         ld->flow.in_epoch && s < ld->shm.nslots && ld->flow.dispatched < ld->flow.nbatches; s++) {
        if (ld->shm.slots[s].state != SLOT_FREE)
            continue;
        uint64_t b = take_next_batch(ld);
        if (b >= ld->flow.nbatches)
            break;
        give_slot(ld, s, ld->flow.epoch, b, ld->flow.order, ld->flow.order_len);
    }
    if (ld->flow.ahead.on || (may_run_ahead(ld) && start_ahead(ld))) {
        for (uint32_t s = 0;
             s < ld->shm.nslots && ld->flow.ahead.dispatched < ld->flow.ahead.nbatches; s++)
            if (ld->shm.slots[s].state == SLOT_FREE) {
                give_slot(ld, s, ld->flow.ahead.epoch, ld->flow.ahead.dispatched++,
                          ld->flow.ahead.order, ld->flow.ahead.order_len);
                pthread_mutex_lock(&ld->stats_lock);
                ld->stats.batches_ahead += ld->flow.have_epoch; /* not the first epoch's (kick) */
                pthread_mutex_unlock(&ld->stats_lock);
            }
    }
    send_parts(ld);
}

void feeder__host_kick(feeder_loader *ld)
{
    if (ld->pool.running && !ld->flow.have_epoch && may_begin_early(ld) && start_ahead(ld))
        dispatch(ld);
}

/* Hand the user a ready slot's batch (deliver.c); one that cannot be
 * lent frees its slot for the next batch. */
static int deliver(feeder_loader *ld, slot_state *ss, feeder_batch **out)
{
    mark_delivered(ld, ss->batch);
    int rc = feeder__deliver_slot(ld, ss, out);
    if (rc) {
        ss->state = SLOT_FREE;
        dispatch(ld);
    }
    return rc;
}

static slot_state *find_ready(feeder_loader *ld)
{
    slot_state *best = NULL;
    int in_order = ld->plan.workers.in_order;
    for (uint32_t s = 0; s < ld->shm.nslots; s++) {
        slot_state *ss = &ld->shm.slots[s];
        if (ss->state != SLOT_READY || ss->epoch != ld->flow.epoch)
            continue;
        if (in_order ? ss->batch == ld->flow.next_in_order : (!best || ss->batch < best->batch))
            best = ss;
        if (in_order && best)
            break;
    }
    return best;
}

static int any_slot_busy(feeder_loader *ld)
{
    for (uint32_t s = 0; s < ld->shm.nslots; s++)
        if (ld->shm.slots[s].state == SLOT_FILLING || ld->shm.slots[s].state == SLOT_READY ||
            ld->shm.slots[s].state == SLOT_FREE)
            return 1;
    return 0;
}

/* num_workers 0: load the next batch in the calling thread. */
static int next_inline(feeder_loader *ld, feeder_batch **out)
{
    slot_state *ss = NULL;
    for (uint32_t s = 0; s < ld->shm.nslots && !ss; s++)
        if (ld->shm.slots[s].state == SLOT_FREE)
            ss = &ld->shm.slots[s];
    if (!ss)
        return feeder__loader_fail(ld, FEEDER_EBUSY, "all %u batch slots are borrowed; release a batch first",
                    ld->shm.nslots);
    uint32_t s = (uint32_t)(ss - ld->shm.slots);
    uint64_t b = take_next_batch(ld);
    uint32_t count = load_slot(ld, s, ld->flow.epoch, b, ld->flow.order, ld->flow.order_len);
    /* In groups of FEEDER__INLINE_FILES samples: the reader opens a
     * group's files at once, so a batch of 2048 does not need 2048
     * descriptors. A failed group ends the batch (its error is the batch's). */
    int whole = feeder__batch_dataset(ld); /* its batch is one task, even an empty one */
    uint32_t groups = whole ? 1 : (count + FEEDER__INLINE_FILES - 1) / FEEDER__INLINE_FILES;
    ss->parts_left = groups;
    ss->state = SLOT_FILLING;
    static _Thread_local feeder__result_msg r;
    for (uint32_t lo = 0; (lo < count || (whole && lo == 0)) && ss->state == SLOT_FILLING;
         lo += FEEDER__INLINE_FILES) {
        uint32_t n = whole ? count : count - lo < FEEDER__INLINE_FILES ? count - lo
                                                                       : FEEDER__INLINE_FILES;
        feeder__task_msg t = {FEEDER__MSG_TASK, s, lo, n, ld->flow.epoch, b, count, -1};
        feeder__run_task(&ld->pool.inline_ctx, &t, &r);
        feeder__pool_complete_part(ld, &r);
        if (r.status)
            ss->state = SLOT_READY;
    }
    return deliver(ld, ss, out);
}

int feeder__host_next(feeder_loader *ld, feeder_batch **out, int try_only)
{
    int rc;
    ld->errmsg[0] = 0;
    ld->flow.status_batch = -1;
    if (!ld->flow.in_epoch && (rc = begin_epoch(ld)))
        return rc;
    if (ld->flow.delivered >= ld->flow.nbatches) {
        end_epoch(ld);
        return FEEDER_DONE;
    }
    if (!ld->pool.nworkers)
        return try_only ? FEEDER__HOST_AGAIN : next_inline(ld, out);

    uint64_t t0 = feeder__now_ns();
    int64_t timeout = ld->plan.workers.timeout_ms;
    uint64_t deadline = timeout ? t0 + (uint64_t)timeout * 1000000ull : UINT64_MAX;
    int poll_ms = ld->plan.workers.poll_ms;
    rc = 0;
    int looked = 0;
    for (;;) {
        dispatch(ld);
        slot_state *ss = find_ready(ld);
        if (ss) {
            rc = deliver(ld, ss, out);
            break;
        }
        if (try_only) {
            /* One look at the channels, without waiting; every slot lent
             * (to copies in flight) is "not yet" here, not an error. */
            if (looked || !any_slot_busy(ld)) {
                rc = FEEDER__HOST_AGAIN;
                break;
            }
            looked = 1;
            if ((rc = feeder__pool_wait(ld, 0, -1)))
                break;
            continue;
        }
        if (!any_slot_busy(ld)) {
            rc = feeder__loader_fail(ld, FEEDER_EBUSY, "all %u batch slots are borrowed; release a batch first",
                      ld->shm.nslots);
            break;
        }
        uint64_t now = feeder__now_ns();
        if (now >= deadline) {
            /* 0: the stalled worker was replaced; its batch gets a new wait. */
            if ((rc = feeder__pool_timed_out(ld, timeout)) != 0)
                break;
            deadline = feeder__now_ns() + (uint64_t)timeout * 1000000ull;
            continue;
        }
        uint64_t left_ms = deadline == UINT64_MAX ? (uint64_t)poll_ms : (deadline - now + 999999) / 1000000;
        if ((rc = feeder__pool_wait(ld, (int)(left_ms < (uint64_t)poll_ms ? left_ms : (uint64_t)poll_ms), -1)))
            break;
    }
    /* With the GPU layer on, its own wait is the consumer's stall. */
    if (!ld->gpu.layer.gpu) {
        pthread_mutex_lock(&ld->stats_lock);
        ld->stats.wait_ns += feeder__now_ns() - t0;
        pthread_mutex_unlock(&ld->stats_lock);
    }
    return rc;
}

int feeder__host_serve(feeder_loader *ld, int wake_fd, int ms)
{
    if (!ld->pool.running || !ld->pool.nworkers || !(ld->flow.in_epoch || ld->flow.ahead.on))
        return FEEDER__HOST_AGAIN;
    ld->errmsg[0] = 0;
    ld->flow.status_batch = -1;
    dispatch(ld);
    int rc = feeder__pool_wait(ld, ms, wake_fd);
    if (!rc)
        dispatch(ld); /* the slots and workers its results freed */
    return rc;
}

feeder_loader *feeder__host_batch_loader(const feeder_batch *b)
{
    const slot_state *ss = b ? b->internal_ : NULL;
    return ss && &ss->pub == b ? ss->ld : NULL;
}

int feeder__host_payload(const feeder_batch *b, void **data, size_t *len, void **extra,
                         size_t *extra_len)
{
    slot_state *ss = b->internal_;
    if (&ss->pub != b || ss->state != SLOT_LENT || !feeder__batch_dataset(ss->ld))
        return FEEDER_EINVAL;
    if (data)
        *data = b->data;
    if (len)
        *len = ss->used;
    if (extra)
        *extra = ss->extra_map;
    if (extra_len)
        *extra_len = ss->extra_map ? ss->extra_bytes : 0;
    return 0;
}

const char *feeder__host_no_resume(const feeder_loader *ld)
{
    if (feeder__batch_dataset(ld))
        return "a batch dataset (feeder_dataset_create_batches) has no resume state";
    if (feeder__sampler_batched(ld->sampler))
        return "a batch sampler (feeder_sampler_create_batches) has no resume state";
    return NULL;
}

int feeder__host_release(feeder_batch *batch)
{
    if (!batch || !batch->internal_)
        return FEEDER_EINVAL;
    slot_state *ss = batch->internal_;
    if (&ss->pub != batch)
        return FEEDER_EINVAL;
    feeder_loader *ld = ss->ld;
    /* internal_ stays set after a release, so a second release of the same
     * batch is named (unless the slot was lent again meanwhile: then the
     * pointer is that new batch's). */
    if (ss->state != SLOT_LENT)
        return feeder__loader_fail(ld, FEEDER_EINVAL,
                                   "feeder_batch_release: batch %llu of epoch %llu is not lent: "
                                   "released twice?",
                                   (unsigned long long)batch->number,
                                   (unsigned long long)batch->epoch);
    ld->errmsg[0] = 0;
    feeder__slot_forget_extra(ss);
    ss->state = SLOT_FREE;
    /* Refill at once so the workers need not wait for the next feeder_next. */
    dispatch(ld);
    return 0;
}

/* Stop filling slots: parts in flight still write theirs, so wait for them
 * (or for the workers' deaths; a worker that stalls on one is killed after
 * timeout_ms, as feeder_next would, or the wait would last forever); then
 * every slot not lent is free. */
static void settle_slots(feeder_loader *ld)
{
    int64_t timeout = ld->plan.workers.timeout_ms;
    uint64_t deadline = timeout ? feeder__now_ns() + (uint64_t)timeout * 1000000ull : UINT64_MAX;
    for (;;) {
        /* Queued parts never reach a worker: count them as done (a
         * restarted worker's re-queued parts too). */
        for (; ld->flow.q.len;
             ld->flow.q.len--, ld->flow.q.head = (ld->flow.q.head + 1) % ld->flow.q.cap) {
            slot_state *ss = &ld->shm.slots[ld->flow.q.v[ld->flow.q.head].slot];
            if (--ss->parts_left == 0)
                ss->state = SLOT_READY;
        }
        int busy = 0;
        for (uint32_t s = 0; s < ld->shm.nslots; s++)
            busy |= ld->shm.slots[s].state == SLOT_FILLING;
        if (!busy || !ld->pool.running)
            break;
        if (feeder__now_ns() >= deadline) {
            if (feeder__pool_settle_timed_out(ld, timeout))
                break;
            deadline = feeder__now_ns() + (uint64_t)timeout * 1000000ull;
            continue;
        }
        if (feeder__pool_wait(ld, ld->plan.workers.poll_ms, -1))
            break;
    }
    for (uint32_t s = 0; s < ld->shm.nslots; s++)
        if (ld->shm.slots[s].state == SLOT_READY || ld->shm.slots[s].state == SLOT_FILLING)
            ld->shm.slots[s].state = SLOT_FREE;
}

/* The epoch run ahead is not the one that begins (set_epoch chose another,
 * or a state blob is to be resumed): its batches go. */
static void drop_ahead(feeder_loader *ld)
{
    ld->flow.ahead.dispatched = ld->flow.ahead.nbatches;
    ld->flow.ahead.tried = 1;
    settle_slots(ld);
    ld->flow.ahead.on = 0;
}

int feeder__host_set_epoch(feeder_loader *ld, uint64_t epoch)
{
    feeder__resume_drop(ld);
    if (!ld->flow.in_epoch && ld->flow.ahead.on && ld->flow.ahead.epoch == epoch) {
        /* The epoch already begun ahead: keep its batches. */
        ld->flow.next_set = 1;
        ld->flow.next_epoch = epoch;
        return 0;
    }
    if (ld->flow.in_epoch) {
        ld->flow.dispatched = ld->flow.nbatches;
        drop_ahead(ld); /* and none before the chosen epoch begins */
        end_epoch(ld);
    } else if (ld->flow.ahead.on) {
        drop_ahead(ld);
    }
    ld->flow.next_set = 1;
    ld->flow.next_epoch = epoch;
    return 0;
}

void feeder__host_stop(feeder_loader *ld) { feeder__pool_stop(ld, 1); }

void feeder__host_forget(feeder_loader *ld) { feeder__pool_forget(ld); }

void feeder__host_free(feeder_loader *ld)
{
    /* Every recorder is gone: workers reaped, pin threads joined, the copy
     * stream's spans harvested. An error here has no caller to go to
     * (feeder_loader_trace_flush reports one). */
    if (ld->trace) {
        char err[512];
        if (ld->owner == getpid()) /* a forked child would overwrite the parent's file */
            (void)feeder__trace_write(ld->trace, err, sizeof(err));
        feeder__trace_destroy(ld->trace);
    }
    free(ld->trace_path);
    if (ld->pool.inline_ready)
        feeder__worker_ctx_free(&ld->pool.inline_ctx);
    for (int k = 0; k < FEEDER__FALLBACK_DECODERS; k++)
        feeder__decoder_destroy(ld->gpu.fallback_dec[k]);
    /* The slots' mapping is MADV_DONTFORK: a forked child has none, and the
     * range may hold a mapping of the child's own by now. */
    if (ld->shm.mem && ld->owner == getpid())
        munmap(ld->shm.mem, ld->shm.shm_bytes);
    feeder__pool_close_fd(&ld->job.memfd);
    free(ld->job.class_next);
    feeder__jindex_destroy(ld->job.jindex);
    ld->job.jindex = NULL;
    if (ld->job.pack_fd >= 0)
        close(ld->job.pack_fd);
    feeder_sampler_destroy(ld->own_sampler);
    if (ld->ds && ld->ds->kind == FEEDER__DS_PACKED)
        feeder__shards_plan(ld->ds->pack, NULL, 0); /* nothing more to fetch for it */
    else if (ld->ds && ld->ds->kind == FEEDER__DS_TAR)
        feeder__tar_plan(ld->ds->tar, NULL, 0);
    feeder__dataset_drop(ld->ds); /* the dataset goes if the user destroyed it already */
    for (uint32_t s = 0; ld->shm.slots && s < ld->shm.nslots; s++) {
        free(ld->shm.slots[s].mix);
        feeder__slot_forget_extra(&ld->shm.slots[s]);
    }
    free(ld->flow.boff);
    free(ld->flow.bworker);
    free(ld->flow.mix_scratch);
    free(ld->shm.slots);
    free(ld->pool.workers);
    free(ld->flow.q.v);
    free(ld->flow.order);
    free(ld->flow.ahead.order);
    free(ld->flow.done_map);
    free(ld->gpu.layer.map);
    free(ld->flow.resume);
    pthread_mutex_destroy(&ld->stats_lock);
    free(ld);
}
