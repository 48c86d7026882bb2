/*
 * The public side of fields (include/feeder.h, "Fields"): a fields dataset
 * made from a checked schema, and a batch's fields as tensors. The schema is
 * checked by collate/ (which lays it out) before dataset/ copies it; the
 * built-in image schema is described here from the batch itself, whose
 * layout is the image slot's as it always was.
 */
#include <string.h>

#include "collate/fields.h"
#include "cuda/gpu.h"
#include "dataset/dataset.h"
#include "loader/loader.h"

int feeder_dataset_create_fields(const feeder_fields_callbacks *cb, const feeder_field *fields,
                                 uint32_t nfields, void *user, feeder_dataset **out, char *err,
                                 size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!cb || !cb->len || !cb->get || !out) {
        if (err && errlen)
            feeder__fmt(err, errlen, "feeder_dataset_create_fields: %s is NULL",
                        !cb ? "cb" : !cb->len ? "cb->len" : !cb->get ? "cb->get" : "out");
        return FEEDER_EINVAL;
    }
    int rc = feeder__fields_check(fields, nfields, err, errlen);
    if (rc)
        return rc;
    rc = feeder__dataset_create_fields(cb, fields, nfields, user, out);
    if (rc && err && errlen)
        feeder__fmt(err, errlen, "feeder_dataset_create_fields: out of memory");
    return rc;
}

/* The built-in schema: "image" (HEIGHT and WIDTH are the loader's: 0 here)
 * and "label". */
static const feeder_field IMAGE_FIELDS[2] = {
    {"image", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 3, {0, 0, 3, 0}, {0}},
    {"label", FEEDER_ELEM_I64, FEEDER_FIELD_FIXED, 0, {0}, {0}},
};

int feeder_dataset_field(const feeder_dataset *ds, uint32_t field, feeder_field *out)
{
    if (!ds)
        return FEEDER_EINVAL;
    const feeder_field *f = ds->nfields ? ds->fields : IMAGE_FIELDS;
    uint32_t n = ds->nfields ? ds->nfields : 2;
    if (out && field < n)
        *out = f[field];
    return (int)n;
}

/* An image batch's two fields: on the host, or (device >= 0) its device
 * buffers, uint8 only. */
static int image_tensor(const feeder_batch *b, uint32_t field, feeder_tensor *out)
{
    int dev = b->device >= 0 && b->device_data;
    void *data = dev ? b->device_data : b->data;
    const int64_t *labels = dev ? b->device_labels : b->labels;
    if (field > 1 || (field == 0 && (!data || b->dtype != FEEDER_DTYPE_UINT8)) ||
        (field == 1 && !labels))
        return FEEDER_EINVAL;
    memset(out, 0, sizeof(*out));
    out->name = IMAGE_FIELDS[field].name;
    out->elem = IMAGE_FIELDS[field].elem;
    out->batching = FEEDER_FIELD_FIXED;
    out->device = dev ? b->device : -1;
    out->shape[0] = b->count;
    if (field == 1) {
        out->data = (int64_t *)labels;
        out->ndim = 1;
        out->bytes = (size_t)b->count * 8;
        return 0;
    }
    int nchw = b->layout == FEEDER_LAYOUT_NCHW;
    out->data = data;
    out->ndim = 4;
    out->shape[1] = nchw ? b->channels : b->height;
    out->shape[2] = nchw ? b->height : b->width;
    out->shape[3] = nchw ? b->width : b->channels;
    out->bytes = (size_t)b->count * b->sample_bytes;
    return 0;
}

int feeder_batch_field_at(const feeder_batch *b, uint32_t field, feeder_tensor *out)
{
    if (!b || !out)
        return FEEDER_EINVAL;
    const feeder__fields_view *v = b->fields_;
    if (!v)
        return image_tensor(b, field, out);
    if (field >= v->fl->nfields)
        return FEEDER_EINVAL;
    feeder__fields_tensor(v, b->count, field, out);
    out->device = -1;
    if (v->dev) {
        /* A device batch: the view's slot is the host snapshot of its
         * control block, lengths and offsets; the values are on the device
         * at the same offsets. */
        out->device = v->device;
        out->data = v->dev + ((uint8_t *)out->data - v->slot);
        if (out->lengths)
            out->device_lengths = (int64_t *)(v->dev + ((uint8_t *)out->lengths - v->slot));
        if (out->offsets)
            out->device_offsets = (int64_t *)(v->dev + ((uint8_t *)out->offsets - v->slot));
    }
    return 0;
}

int feeder_batch_field(const feeder_batch *b, const char *name, feeder_tensor *out)
{
    if (!b || !name)
        return FEEDER_EINVAL;
    const feeder__fields_view *v = b->fields_;
    uint32_t n = v ? v->fl->nfields : 2;
    for (uint32_t k = 0; k < n; k++)
        if (!strcmp(v ? v->fl->a[k].f->name : IMAGE_FIELDS[k].name, name))
            return feeder_batch_field_at(b, k, out);
    return FEEDER_EINVAL;
}

int feeder_batch_pad_field(feeder_batch *b, uint32_t field, uint64_t rows)
{
    if (!b || !b->fields_)
        return FEEDER_EINVAL;
    /* It writes into the batch's slot, which a forked child shares with
     * the loader's process. */
    feeder_loader *ld = feeder__gpu_owns(b) ? feeder__gpu_host(feeder__gpu_of(b))
                                            : feeder__host_batch_loader(b);
    if (ld && feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    return feeder__fields_pad(b->fields_, b->count, field, rows);
}
