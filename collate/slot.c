#include "collate/slot.h"

#include "feeder.h"

#define FEEDER__PAGE ((size_t)4096)

static int align_up(size_t v, size_t a, size_t *out)
{
    if (v > SIZE_MAX - (a - 1))
        return FEEDER_EOVERFLOW;
    *out = (v + a - 1) / a * a;
    return 0;
}

int feeder__slot_layout_init(feeder__slot_layout *l, uint32_t batch, uint32_t height,
                             uint32_t width, uint32_t channels, int layout)
{
    if (!batch || !height || !width || !channels)
        return FEEDER_EINVAL;
    size_t sample, meta;
    /* Every product checked: a header or option can claim any size. */
    if (__builtin_mul_overflow((size_t)height, (size_t)width, &sample) ||
        __builtin_mul_overflow(sample, (size_t)channels, &sample) ||
        __builtin_mul_overflow((size_t)batch, (size_t)32, &meta))
        return FEEDER_EOVERFLOW;
    feeder__slot_layout n;
    n.batch = batch;
    n.height = height;
    n.width = width;
    n.channels = channels;
    n.layout = layout;
    n.sample_bytes = sample;
    n.labels_off = 0;
    n.indices_off = (size_t)batch * 8;
    n.encoded_off = (size_t)batch * 16;
    if (align_up(meta, FEEDER__PAGE, &n.data_off))
        return FEEDER_EOVERFLOW;
    int rc = feeder__slot_layout_room(&n, sample);
    if (!rc)
        *l = n;
    return rc;
}

int feeder__slot_layout_room(feeder__slot_layout *l, size_t room)
{
    if (room < l->sample_bytes)
        room = l->sample_bytes;
    size_t data, data_pages;
    if (__builtin_mul_overflow(room, (size_t)l->batch, &data) ||
        align_up(data, FEEDER__PAGE, &data_pages) || l->data_off > SIZE_MAX - data_pages)
        return FEEDER_EOVERFLOW;
    l->room_bytes = room;
    l->slot_bytes = l->data_off + data_pages;
    return 0;
}

int feeder__slot_total(const feeder__slot_layout *l, uint32_t slots, size_t *bytes)
{
    if (__builtin_mul_overflow(l->slot_bytes, (size_t)slots, bytes))
        return FEEDER_EOVERFLOW;
    return 0;
}

void feeder__slot_plan_part(const feeder__slot_layout *l, uint32_t count, const size_t *len,
                            int *gpu, uint64_t *off, uint32_t *moved)
{
    size_t sample_bytes = l->sample_bytes, room = (size_t)count * l->room_bytes, total = 0;
    *moved = 0;
    for (uint32_t k = 0; k < count; k++)
        total += gpu[k] ? len[k] : sample_bytes;
    /* Only a file larger than a sample can make the share overflow (the
     * room is at least a sample), and moving it to the CPU shrinks its need
     * to one sample. */
    while (total > room) {
        uint32_t big = count;
        for (uint32_t k = 0; k < count; k++)
            if (gpu[k] && len[k] > sample_bytes && (big == count || len[k] > len[big]))
                big = k;
        gpu[big] = 0;
        total -= len[big] - sample_bytes;
        (*moved)++;
    }
    uint64_t at = 0;
    for (uint32_t k = 0; k < count; k++) {
        off[k] = at;
        at += gpu[k] ? len[k] : sample_bytes;
    }
}
