/*
 * Delivery: a ready slot made into the batch lent to the user. A failed
 * batch's error, a DROP batch's gaps closed, a fields dataset's packed
 * fields, a batch dataset's bytes, the augment pipeline's batch mix (here
 * because every batch passes once, complete, on its way to the user, host
 * or device). flow.c counts the delivery and frees the slot of a batch that
 * cannot be lent.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "loader/host.h"

/* A batch dataset's extra descriptor of the slot's last batch, closed when
 * the slot is filled again (or the loader is destroyed), whatever became of
 * that batch: delivered, dropped with its epoch, or failed. */
void feeder__slot_forget_extra(slot_state *ss)
{
    if (ss->extra_map)
        munmap(ss->extra_map, ss->extra_bytes);
    feeder__pool_close_fd(&ss->extra_fd);
    ss->extra_map = NULL;
    ss->extra_bytes = 0;
    ss->used = 0;
}

/* FEEDER_ON_ERROR_DROP: close the gaps the marked samples (label -1) leave,
 * keeping the order. With the CPU decoders a sample's pixels sit at its
 * position and move with it; with a GPU decoder they stay where `place` says
 * and only the per-sample entries move. */
static void leave_out_dropped(feeder_loader *ld, slot_state *ss, uint8_t *base)
{
    const feeder__slot_layout *l = &ld->job.layout;
    int64_t *lab = feeder__slot_labels(l, base);
    uint64_t *idx = feeder__slot_indices(l, base);
    uint64_t *enc = feeder__slot_encoded(l, base), *place = feeder__slot_place(l, base);
    int gpu = feeder__decoder_on_gpu(ld->job.t.decoder);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < ss->count; i++) {
        if (lab[i] == -1)
            continue;
        if (kept != i) {
            lab[kept] = lab[i];
            idx[kept] = idx[i];
            if (gpu) {
                enc[kept] = enc[i];
                place[kept] = place[i];
            } else {
                memmove(feeder__slot_sample(l, base, kept), feeder__slot_sample(l, base, i),
                        l->sample_bytes);
            }
        }
        kept++;
    }
    ss->count = kept;
}

/* The augment pipeline's batch-level mix (augment/mix.c), here because
 * this is where every batch passes once, complete, on its way to the user,
 * host or device, whatever worker filled which part. Its draws come from
 * (seed, epoch, batch number) alone. 1 mixed, 0 not, or -ENOMEM. */
static int mix_batch(feeder_loader *ld, slot_state *ss, uint8_t *base)
{
    const feeder__slot_layout *l = &ld->job.layout;
    if (!ss->mix && !(ss->mix = calloc(l->batch, sizeof(*ss->mix))))
        return feeder__loader_fail(ld, -ENOMEM, "out of memory for the batch mix");
    if (!ld->flow.mix_scratch && !(ld->flow.mix_scratch = malloc(l->sample_bytes)))
        return feeder__loader_fail(ld, -ENOMEM, "out of memory for the batch mix");
    return feeder__augment_mix_ch(&ld->job.aug, feeder__slot_sample(l, base, 0), ss->count,
                                  l->width, l->height, l->layout, (int)l->channels, ld->job.seed,
                                  ss->epoch, ss->batch, ss->mix, ld->flow.mix_scratch);
}

/* The slot's public batch, what every kind's has set: its indices, count,
 * epoch, number, a host batch of uint8; the caller adds its own. */
static feeder_batch *pub_batch(slot_state *ss, const uint64_t *indices)
{
    feeder_batch *b = &ss->pub;
    memset(b, 0, sizeof(*b));
    b->indices = indices;
    b->count = ss->count;
    b->skipped = ss->skipped;
    b->epoch = ss->epoch;
    b->number = ss->batch;
    b->device = -1;
    b->dtype = FEEDER_DTYPE_UINT8;
    b->internal_ = ss;
    return b;
}

/* Lend a batch: the slot's state, the stats, *out. */
static int lend(feeder_loader *ld, slot_state *ss, feeder_batch **out)
{
    ss->state = SLOT_LENT;
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.batches++;
    ld->stats.samples += ss->count;
    if (!ld->flow.first_seen)
        ld->stats.first_batch_ns = feeder__now_ns() - ld->flow.epoch_t0;
    pthread_mutex_unlock(&ld->stats_lock);
    ld->flow.first_seen = 1;
    *out = &ss->pub;
    return 0;
}

/* A fields dataset's batch: the worker that finished it packed its fields
 * (and left out what DROP marked); the slot's control block has the count. */
static int deliver_fields(feeder_loader *ld, slot_state *ss, uint8_t *base, feeder_batch **out)
{
    const feeder__slot_layout *l = &ld->job.layout;
    memset(&ss->pub, 0, sizeof(ss->pub));
    if (!feeder__fields_ctrl(&ld->job.fields, base)->packed) {
        /* Every part reported and none failed, yet none packed it: the
         * worker that was packing it died there (MAX_RESTARTS re-ran its
         * part, which found every sample counted). */
        int rc = feeder__loader_fail(ld, FEEDER_EWORKER, "batch %llu of epoch %llu: the worker "
                                     "packing its fields (and running the collate callback) "
                                     "died; the batch is lost", (unsigned long long)ss->batch,
                                     (unsigned long long)ss->epoch);
        return rc;
    }
    ss->count = feeder__fields_ctrl(&ld->job.fields, base)->count;
    ss->fview = (feeder__fields_view){.fl = &ld->job.fields, .slot = base};
    feeder_batch *b = pub_batch(ss, feeder__slot_indices(l, base));
    b->fields_ = &ss->fview;
    return lend(ld, ss, out);
}

/* A batch dataset's batch: the room's bytes, and the extra descriptor's
 * mapped for the borrower. */
static int deliver_payload(feeder_loader *ld, slot_state *ss, uint8_t *base, feeder_batch **out)
{
    const feeder__slot_layout *l = &ld->job.layout;
    if (ss->extra_fd >= 0) {
        void *m = mmap(NULL, ss->extra_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ss->extra_fd, 0);
        if (m == MAP_FAILED) {
            int rc = feeder__loader_fail(ld, -errno, "batch %llu of epoch %llu: mapping its %zu "
                                         "extra bytes: %s", (unsigned long long)ss->batch,
                                         (unsigned long long)ss->epoch, ss->extra_bytes,
                                         strerror(errno));
            feeder__slot_forget_extra(ss);
            return rc;
        }
        ss->extra_map = m;
    }
    feeder_batch *b = pub_batch(ss, feeder__slot_indices(l, base));
    b->data = feeder__slot_sample(l, base, 0);
    return lend(ld, ss, out);
}

int feeder__deliver_slot(feeder_loader *ld, slot_state *ss, feeder_batch **out)
{
    uint32_t s = (uint32_t)(ss - ld->shm.slots);
    if (ss->status) {
        ld->flow.status_batch = (int64_t)ss->batch;
        int rc = feeder__loader_fail(ld, ss->status, "batch %llu of epoch %llu: %s",
                      (unsigned long long)ss->batch, (unsigned long long)ss->epoch, ss->errmsg);
        pthread_mutex_lock(&ld->stats_lock);
        ld->stats.failed_batches++;
        pthread_mutex_unlock(&ld->stats_lock);
        return rc;
    }
    const feeder__slot_layout *l = &ld->job.layout;
    uint8_t *base = feeder__slot_base(l, ld->shm.mem, s);
    if (ld->job.fields.nfields)
        return deliver_fields(ld, ss, base, out);
    if (feeder__batch_dataset(ld))
        return deliver_payload(ld, ss, base, out);
    if (ss->dropped)
        leave_out_dropped(ld, ss, base);
    int mixed = 0;
    if (feeder__augment_has_mix(&ld->job.aug) && (mixed = mix_batch(ld, ss, base)) < 0)
        return mixed;
    feeder_batch *b = pub_batch(ss, feeder__slot_indices(l, base));
    b->mix = mixed ? ss->mix : NULL;
    b->data = feeder__slot_sample(l, base, 0);
    b->labels = feeder__slot_labels(l, base);
    b->height = l->height;
    b->width = l->width;
    b->channels = l->channels;
    b->layout = l->layout;
    b->sample_bytes = l->sample_bytes;
    return lend(ld, ss, out);
}
