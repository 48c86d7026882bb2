/*
 * collate/fields.h: the slot layout of a fields dataset (include/feeder.h,
 * "Fields") and what is done to a batch's fields once its samples are in.
 *
 *   [ labels: batch x int64 | indices: batch x uint64 | encoded, place ]
 *   [ control: the batch's count of finished samples, kept count, each
 *     field's padded rows | per variable field: lengths batch x int64,
 *     and for RAGGED offsets (batch + 1) x int64 ]          (page aligned)
 *   [ field 0 values: batch x its sample room ]            (page aligned)
 *   [ field 1 values ] ...
 *
 * The first area is the image layout's (collate/slot.h), so the loader's
 * code for indices and the DROP mark (label -1) is the same for both;
 * `labels` holds no label here, only that mark. Sample i of a field is
 * written at i x its sample room (shape[0] rows, the maximum). Once every
 * sample of the batch is in, feeder__fields_pack moves them into the batch
 * tensors in place: samples left out (DROP) are removed, PADDED fields are
 * moved to the batch's longest (zero tail) and RAGGED ones packed one after
 * another with offsets. Each move goes to a lower or equal address than its
 * source, in sample order, so nothing is overwritten before it is moved.
 */
#ifndef FEEDER_COLLATE_FIELDS_H
#define FEEDER_COLLATE_FIELDS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collate/slot.h"
#include "feeder.h"

typedef struct feeder__field_area {
    const feeder_field *f; /* borrowed from the dataset */
    size_t row_bytes;      /* one row: product of shape[1:] x element size */
    uint64_t max_rows;     /* shape[0] (1 for a scalar) */
    size_t sample_bytes;   /* max_rows x row_bytes: one sample's room */
    size_t values_off;     /* from the slot's start */
    size_t lengths_off;    /* PADDED, RAGGED; else 0 */
    size_t offsets_off;    /* RAGGED; else 0 */
} feeder__field_area;

typedef struct feeder__fields_layout {
    uint32_t nfields; /* 0: the image layout */
    uint32_t batch;
    size_t done_off;  /* batch bytes: sample i is in */
    feeder__field_area a[FEEDER_FIELDS_MAX];
    size_t ctrl_off;
} feeder__fields_layout;

/* The batch's control block, in shared memory, with a byte per sample
 * after it. The loader zeroes both when it dispatches the batch; each part's
 * worker sets its samples' bytes and adds to `done` the number it was first
 * to set (and sets `failed` when the part failed), and the one that brings
 * `done` to the batch's count packs the fields and runs the collate
 * callback. A part run again after its worker died (MAX_RESTARTS) thus
 * counts once; one that finds the batch packed has nothing left to do. */
typedef struct feeder__batch_ctrl {
    _Atomic uint32_t done;
    _Atomic uint32_t failed;
    uint32_t count;  /* samples kept (DROP), set by feeder__fields_pack */
    uint32_t packed; /* 1 once packed and through the collate callback */
    uint64_t padded[FEEDER_FIELDS_MAX];
} feeder__batch_ctrl;


/* Lay out a slot of `batch` samples of the schema: `fl`, and in `l` the
 * offsets the loader shares with the image layout (labels, indices, encoded,
 * data_off: the first field's values, slot_bytes; sample_bytes 0).
 * FEEDER_EOVERFLOW when a size does not fit. */
int feeder__fields_layout_init(feeder__fields_layout *fl, feeder__slot_layout *l,
                               const feeder_field *f, uint32_t n, uint32_t batch);

static inline feeder__batch_ctrl *feeder__fields_ctrl(const feeder__fields_layout *fl,
                                                      uint8_t *slot)
{
    return (feeder__batch_ctrl *)(slot + fl->ctrl_off);
}
/* Field k's room for sample i (before packing). */
static inline uint8_t *feeder__field_sample(const feeder__fields_layout *fl, uint8_t *slot,
                                            uint32_t k, uint32_t i)
{
    return slot + fl->a[k].values_off + (size_t)i * fl->a[k].sample_bytes;
}

/* Zero a batch's control block (the loader, at dispatch). */
void feeder__fields_reset(const feeder__fields_layout *fl, uint8_t *slot);
/* A part of samples [first, first + count) is in: 1 when it completed the
 * batch of `total` samples (no part failed), so the caller packs it. */
int feeder__fields_part_done(const feeder__fields_layout *fl, uint8_t *slot, uint32_t first,
                             uint32_t count, uint32_t total, int failed);

/* What a worker hands a get callback for sample i: the arrays of `o`
 * (nfields entries each) pointed at the sample's rooms, rows preset. */
typedef struct feeder__sample_buf {
    void *data[FEEDER_FIELDS_MAX];
    size_t capacity[FEEDER_FIELDS_MAX];
    uint64_t rows[FEEDER_FIELDS_MAX];
} feeder__sample_buf;
void feeder__fields_sample_out(const feeder__fields_layout *fl, uint8_t *slot, uint32_t i,
                               feeder__sample_buf *buf, feeder_sample_out *o);
/* After a get returned 0: check what `o` says against the schema and record
 * the sample's lengths. 0, or FEEDER_ERANGE / FEEDER_EINVAL with `msg`
 * naming sample `index` and the field. */
int feeder__fields_accept(const feeder__fields_layout *fl, uint8_t *slot, uint32_t i,
                          uint64_t index, const feeder_sample_out *o, char *msg, size_t msglen);

/* Pack the batch's `count` samples into its field tensors (the header
 * comment), leaving out those whose label is -1 (their indices and labels
 * too). Sets ctrl->count and each field's padded rows; the caller sets
 * ctrl->packed once the collate callback is through too. */
void feeder__fields_pack(const feeder__fields_layout *fl, uint8_t *slot, uint32_t count);

/* A packed batch as feeder_batch_field sees it. */
typedef struct feeder__fields_view {
    const feeder__fields_layout *fl;
    uint8_t *slot;
    int in_collate; /* feeder_batch_pad_field is allowed */
    /* A device batch's fields (cuda/): `slot` is then a host copy of the
     * slot's control block, lengths and offsets only, and `dev` the device
     * copy of the slot, at the same offsets; NULL for host batches. */
    uint8_t *dev;
    int device;
} feeder__fields_view;
/* Field k of a packed batch of `count` samples. */
void feeder__fields_tensor(const feeder__fields_view *v, uint32_t count, uint32_t k,
                           feeder_tensor *out);
/* feeder_batch_pad_field on a view: 0, FEEDER_EINVAL or FEEDER_ERANGE. */
int feeder__fields_pad(const feeder__fields_view *v, uint32_t count, uint32_t k, uint64_t rows);

#endif
