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
    size_t sample, data, meta;
    /* Every product checked: a header or option can claim any size. */
    if (__builtin_mul_overflow((size_t)height, (size_t)width, &sample) ||
        __builtin_mul_overflow(sample, (size_t)channels, &sample) ||
        __builtin_mul_overflow(sample, (size_t)batch, &data) ||
        __builtin_mul_overflow((size_t)batch, (size_t)32, &meta))
        return FEEDER_EOVERFLOW;
    l->batch = batch;
    l->height = height;
    l->width = width;
    l->channels = channels;
    l->layout = layout;
    l->sample_bytes = sample;
    l->labels_off = 0;
    l->indices_off = (size_t)batch * 8;
    l->encoded_off = (size_t)batch * 16;
    size_t meta_pages, data_pages;
    if (align_up(meta, FEEDER__PAGE, &meta_pages) || align_up(data, FEEDER__PAGE, &data_pages) ||
        meta_pages > SIZE_MAX - data_pages)
        return FEEDER_EOVERFLOW;
    l->data_off = meta_pages;
    l->slot_bytes = meta_pages + data_pages;
    return 0;
}

int feeder__slot_total(const feeder__slot_layout *l, uint32_t slots, size_t *bytes)
{
    if (__builtin_mul_overflow(l->slot_bytes, (size_t)slots, bytes))
        return FEEDER_EOVERFLOW;
    return 0;
}

void feeder__slot_plan_part(size_t sample_bytes, uint32_t count, const size_t *len, int *gpu,
                            uint64_t *off, uint32_t *moved)
{
    size_t room = (size_t)count * sample_bytes, total = 0;
    *moved = 0;
    for (uint32_t k = 0; k < count; k++)
        total += gpu[k] ? len[k] : sample_bytes;
    /* Only a file larger than a sample can make the share overflow, and
     * moving it to the CPU shrinks its need to one sample. */
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
