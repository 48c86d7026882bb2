#include "collate/fields.h"


#include <stdio.h>
#include <string.h>

#define FEEDER__PAGE ((size_t)4096)

static int align_up(size_t v, size_t a, size_t *out)
{
    if (v > SIZE_MAX - (a - 1))
        return FEEDER_EOVERFLOW;
    *out = (v + a - 1) / a * a;
    return 0;
}

/* A field's row and sample sizes; FEEDER_EOVERFLOW when they do not fit. */
static int size_field(feeder__field_area *a, const feeder_field *f, uint32_t batch,
                      size_t *values)
{
    size_t row = feeder_elem_size(f->elem);
    for (uint32_t d = 1; d < f->ndim; d++)
        if (__builtin_mul_overflow(row, (size_t)f->shape[d], &row))
            return FEEDER_EOVERFLOW;
    a->f = f;
    a->row_bytes = row;
    a->max_rows = f->ndim ? f->shape[0] : 1;
    if (__builtin_mul_overflow(row, (size_t)a->max_rows, &a->sample_bytes) ||
        __builtin_mul_overflow(a->sample_bytes, (size_t)batch, values))
        return FEEDER_EOVERFLOW;
    return 0;
}

/* The control block and the lengths and offsets of every variable field,
 * from `at`; *end is where they stop. */
static void place_meta(feeder__fields_layout *fl, uint32_t batch, size_t at, size_t *end)
{
    fl->ctrl_off = at;
    at += (sizeof(feeder__batch_ctrl) + 63) / 64 * 64;
    fl->done_off = at;
    at += ((size_t)batch + 7) / 8 * 8;
    for (uint32_t k = 0; k < fl->nfields; k++) {
        feeder__field_area *a = &fl->a[k];
        a->lengths_off = a->offsets_off = 0;
        if (a->f->batching == FEEDER_FIELD_FIXED)
            continue;
        a->lengths_off = at;
        at += (size_t)batch * 8;
        if (a->f->batching == FEEDER_FIELD_RAGGED) {
            a->offsets_off = at;
            at += ((size_t)batch + 1) * 8;
        }
    }
    *end = at;
}

int feeder__fields_layout_init(feeder__fields_layout *fl, feeder__slot_layout *l,
                               const feeder_field *f, uint32_t n, uint32_t batch)
{
    if (!batch || !n || n > FEEDER_FIELDS_MAX)
        return FEEDER_EINVAL;
    memset(fl, 0, sizeof(*fl));
    memset(l, 0, sizeof(*l));
    fl->nfields = n;
    fl->batch = batch;
    size_t values[FEEDER_FIELDS_MAX];
    for (uint32_t k = 0; k < n; k++)
        if (size_field(&fl->a[k], &f[k], batch, &values[k]))
            return FEEDER_EOVERFLOW;
    /* batch is a uint32_t: the metadata sizes below cannot overflow. */
    l->batch = batch;
    l->labels_off = 0;
    l->indices_off = (size_t)batch * 8;
    l->encoded_off = (size_t)batch * 16;
    size_t at;
    place_meta(fl, batch, (size_t)batch * 32, &at);
    if (align_up(at, FEEDER__PAGE, &at))
        return FEEDER_EOVERFLOW;
    l->data_off = at;
    for (uint32_t k = 0; k < n; k++) {
        size_t room;
        fl->a[k].values_off = at;
        if (align_up(values[k], FEEDER__PAGE, &room) || at > SIZE_MAX - room)
            return FEEDER_EOVERFLOW;
        at += room;
    }
    l->slot_bytes = at;
    return 0;
}

void feeder__fields_reset(const feeder__fields_layout *fl, uint8_t *slot)
{
    feeder__batch_ctrl *c = feeder__fields_ctrl(fl, slot);
    atomic_store(&c->done, 0);
    atomic_store(&c->failed, 0);
    c->count = 0;
    c->packed = 0;
    memset(c->padded, 0, sizeof(c->padded));
    memset(slot + fl->done_off, 0, fl->batch);
}

int feeder__fields_part_done(const feeder__fields_layout *fl, uint8_t *slot, uint32_t first,
                             uint32_t count, uint32_t total, int failed)
{
    feeder__batch_ctrl *c = feeder__fields_ctrl(fl, slot);
    _Atomic uint8_t *seen = (_Atomic uint8_t *)(slot + fl->done_off);
    if (failed)
        atomic_store(&c->failed, 1);
    uint32_t fresh = 0;
    for (uint32_t i = first; i < first + count; i++)
        fresh += atomic_exchange(&seen[i], 1) == 0;
    if (!fresh)
        return 0;
    uint32_t done = atomic_fetch_add(&c->done, fresh) + fresh;
    return done == total && !atomic_load(&c->failed);
}

void feeder__fields_sample_out(const feeder__fields_layout *fl, uint8_t *slot, uint32_t i,
                               feeder__sample_buf *buf, feeder_sample_out *o)
{
    memset(o, 0, sizeof(*o));
    for (uint32_t k = 0; k < fl->nfields; k++) {
        const feeder__field_area *a = &fl->a[k];
        buf->data[k] = feeder__field_sample(fl, slot, k, i);
        buf->capacity[k] = a->sample_bytes;
        buf->rows[k] = a->f->batching == FEEDER_FIELD_FIXED ? a->max_rows : UINT64_MAX;
    }
    o->nfields = fl->nfields;
    o->data = buf->data;
    o->capacity = buf->capacity;
    o->rows = buf->rows;
    o->fields = fl->a[0].f;
}

int feeder_sample_put(feeder_sample_out *out, uint32_t field, int elem, const void *src,
                      uint64_t rows)
{
    if (!out)
        return FEEDER_EINVAL;
    int rc = 0;
    if (field >= out->nfields || (rows && !src))
        rc = FEEDER_EINVAL;
    else if (elem != out->fields[field].elem)
        rc = FEEDER_EINVAL;
    else {
        const feeder_field *f = &out->fields[field];
        uint64_t max = f->ndim ? f->shape[0] : 1;
        if (rows > max || (f->batching == FEEDER_FIELD_FIXED && rows != max))
            rc = FEEDER_ERANGE;
    }
    if (rc) {
        if (!out->put_error) {
            out->put_error = rc;
            out->put_field = field;
            out->put_rows = rows;
            out->put_elem = elem;
        }
        return rc;
    }
    uint64_t max = out->fields[field].ndim ? out->fields[field].shape[0] : 1;
    size_t row = max ? out->capacity[field] / max : 0;
    memcpy(out->data[field], src, (size_t)rows * row);
    out->rows[field] = rows;
    return 0;
}

/* The message of a failed feeder_sample_put. */
static int put_failed(const feeder_sample_out *o, uint64_t index, char *msg, size_t msglen)
{
    uint32_t k = o->put_field;
    if (k >= o->nfields) {
        snprintf(msg, msglen, "sample %llu: feeder_sample_put to field %u: the schema has %u",
                 (unsigned long long)index, k, o->nfields);
        return FEEDER_EINVAL;
    }
    const feeder_field *f = &o->fields[k];
    const char *given = feeder_elem_name(o->put_elem);
    if (o->put_elem != f->elem)
        snprintf(msg, msglen, "sample %llu, field '%s': feeder_sample_put with dtype %s%s, the "
                 "field holds %s", (unsigned long long)index, f->name, given ? given : "(unknown)",
                 given ? "" : " (not a feeder_elem)", feeder_elem_name(f->elem));
    else if (o->put_error == FEEDER_ERANGE)
        snprintf(msg, msglen, "sample %llu, field '%s': feeder_sample_put of %llu rows, the "
                 "field takes %s%u", (unsigned long long)index, f->name,
                 (unsigned long long)o->put_rows,
                 f->batching == FEEDER_FIELD_FIXED ? "exactly " : "at most ",
                 f->ndim ? f->shape[0] : 1);
    else
        snprintf(msg, msglen, "sample %llu, field '%s': feeder_sample_put with no source",
                 (unsigned long long)index, f->name);
    return o->put_error;
}

int feeder__fields_accept(const feeder__fields_layout *fl, uint8_t *slot, uint32_t i,
                          uint64_t index, const feeder_sample_out *o, char *msg, size_t msglen)
{
    if (o->put_error)
        return put_failed(o, index, msg, msglen);
    for (uint32_t k = 0; k < fl->nfields; k++) {
        const feeder__field_area *a = &fl->a[k];
        uint64_t rows = o->rows[k];
        if (a->f->batching == FEEDER_FIELD_FIXED && rows != a->max_rows) {
            snprintf(msg, msglen, "sample %llu, field '%s': %llu rows set, the field is fixed "
                     "at %llu", (unsigned long long)index, a->f->name, (unsigned long long)rows,
                     (unsigned long long)a->max_rows);
            return FEEDER_ERANGE;
        }
        if (rows == UINT64_MAX) {
            snprintf(msg, msglen, "sample %llu, field '%s': the callback set no length "
                     "(out->rows[%u])", (unsigned long long)index, a->f->name, k);
            return FEEDER_EINVAL;
        }
        if (rows > a->max_rows) {
            snprintf(msg, msglen, "sample %llu, field '%s': %llu rows, more than its maximum "
                     "%llu", (unsigned long long)index, a->f->name, (unsigned long long)rows,
                     (unsigned long long)a->max_rows);
            return FEEDER_ERANGE;
        }
        if (a->lengths_off)
            ((int64_t *)(slot + a->lengths_off))[i] = (int64_t)rows;
    }
    return 0;
}

/* One field's kept samples (label not -1) into their batch tensor, in
 * order; its padded rows. */
static uint64_t pack_field(const feeder__fields_layout *fl, uint8_t *slot, uint32_t k,
                           uint32_t count)
{
    const feeder__field_area *a = &fl->a[k];
    const int64_t *lab = (const int64_t *)slot;
    uint8_t *values = slot + a->values_off;
    int64_t *len = a->lengths_off ? (int64_t *)(slot + a->lengths_off) : NULL;
    uint32_t n = 0;
    uint64_t longest = a->max_rows;
    if (len) { /* lengths first: a PADDED field's stride is the longest kept */
        longest = 0;
        for (uint32_t i = 0; i < count; i++)
            if (lab[i] != -1 && (uint64_t)(len[n++] = len[i]) > longest)
                longest = (uint64_t)len[n - 1];
    }
    int ragged = a->f->batching == FEEDER_FIELD_RAGGED;
    int64_t *off = ragged ? (int64_t *)(slot + a->offsets_off) : NULL;
    size_t at = 0, stride = (size_t)longest * a->row_bytes;
    n = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (lab[i] == -1)
            continue;
        size_t bytes = len ? (size_t)len[n] * a->row_bytes : a->sample_bytes;
        uint8_t *dst = values + (ragged ? at : (size_t)n * stride);
        const uint8_t *src = values + (size_t)i * a->sample_bytes;
        if (off)
            off[n] = (int64_t)(at / a->row_bytes);
        if (dst != src)
            memmove(dst, src, bytes);
        if (len && !ragged)
            memset(dst + bytes, 0, stride - bytes);
        at += bytes;
        n++;
    }
    if (off)
        off[n] = (int64_t)(at / a->row_bytes);
    return longest;
}

void feeder__fields_pack(const feeder__fields_layout *fl, uint8_t *slot, uint32_t count)
{
    feeder__batch_ctrl *c = feeder__fields_ctrl(fl, slot);
    for (uint32_t k = 0; k < fl->nfields; k++)
        c->padded[k] = pack_field(fl, slot, k, count);
    int64_t *lab = (int64_t *)slot;
    uint64_t *idx = (uint64_t *)(slot + (size_t)fl->batch * 8);
    uint32_t n = 0;
    for (uint32_t i = 0; i < count; i++)
        if (lab[i] != -1) {
            idx[n] = idx[i];
            lab[n++] = 0;
        }
    c->count = n;
}

void feeder__fields_tensor(const feeder__fields_view *v, uint32_t count, uint32_t k,
                           feeder_tensor *out)
{
    const feeder__field_area *a = &v->fl->a[k];
    const feeder_field *f = a->f;
    const feeder__batch_ctrl *c = feeder__fields_ctrl(v->fl, v->slot);
    memset(out, 0, sizeof(*out));
    out->data = v->slot + a->values_off;
    out->name = f->name;
    out->elem = f->elem;
    out->batching = f->batching;
    uint32_t d = 0;
    uint64_t rows = f->batching == FEEDER_FIELD_PADDED ? c->padded[k] : a->max_rows;
    if (a->lengths_off)
        out->lengths = (int64_t *)(v->slot + a->lengths_off);
    if (f->batching == FEEDER_FIELD_RAGGED) {
        out->offsets = (int64_t *)(v->slot + a->offsets_off);
        out->shape[d++] = (uint64_t)out->offsets[count];
    } else {
        out->shape[d++] = count;
        if (f->ndim)
            out->shape[d++] = rows;
    }
    for (uint32_t j = 1; j < f->ndim; j++)
        out->shape[d++] = f->shape[j];
    out->ndim = d;
    out->bytes = feeder_elem_size(f->elem);
    for (uint32_t j = 0; j < d; j++)
        out->bytes *= (size_t)out->shape[j];
}

int feeder__fields_pad(const feeder__fields_view *v, uint32_t count, uint32_t k, uint64_t rows)
{
    if (!v->in_collate || k >= v->fl->nfields)
        return FEEDER_EINVAL;
    const feeder__field_area *a = &v->fl->a[k];
    if (a->f->batching != FEEDER_FIELD_PADDED)
        return FEEDER_EINVAL;
    feeder__batch_ctrl *c = feeder__fields_ctrl(v->fl, v->slot);
    uint64_t was = c->padded[k];
    if (rows < was || rows > a->max_rows)
        return FEEDER_ERANGE;
    /* Wider rows: the last sample moves furthest, so go from the end. */
    uint8_t *values = v->slot + a->values_off;
    size_t old_stride = (size_t)was * a->row_bytes, stride = (size_t)rows * a->row_bytes;
    for (uint32_t j = count; j-- > 0;) {
        memmove(values + (size_t)j * stride, values + (size_t)j * old_stride, old_stride);
        memset(values + (size_t)j * stride + old_stride, 0, stride - old_stride);
    }
    c->padded[k] = rows;
    return 0;
}
