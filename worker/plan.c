/*
 * A GPU decoder's task plan: route each sample by its header and place it in
 * the task's share of the slot (bytes for nvJPEG, or room for pixels), and
 * where any sample of a slot is written. Shared by the file reads
 * (worker.c) and the packed record reads (packed_read.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "decode/decode.h"
#include "decode/jpeg_header.h"
#include "worker/worker.h"

int feeder__worker_part_reserve(feeder__worker_ctx *w, uint32_t n)
{
    if (n <= w->part.cap)
        return 0;
    const uint8_t **bytes = realloc(w->part.bytes, n * sizeof(*bytes));
    if (bytes)
        w->part.bytes = bytes;
    size_t *len = realloc(w->part.len, n * sizeof(*len));
    if (len)
        w->part.len = len;
    int *gpu = realloc(w->part.gpu, n * sizeof(*gpu));
    if (gpu)
        w->part.gpu = gpu;
    uint64_t *off = realloc(w->part.off, n * sizeof(*off));
    if (off)
        w->part.off = off;
    if (!bytes || !len || !gpu || !off)
        return -ENOMEM;
    w->part.cap = n;
    return 0;
}

void feeder__worker_plan_gpu_part(feeder__worker_ctx *w, const feeder__task_msg *t,
                                  uint8_t *slot, feeder__result_msg *res)
{
    const feeder__slot_layout *l = &w->job->layout;
    const uint8_t **bytes = w->part.bytes;
    size_t *len = w->part.len;
    /* The share now, not when the part was queued (worker.h: feeder__live). */
    uint32_t permille = atomic_load_explicit(&w->live->cpu_permille, memory_order_relaxed);
    uint32_t cpu = (uint32_t)(((uint64_t)t->count * permille + 500) / 1000);
    uint64_t max_pixels = w->job->t.max_pixels;
    for (uint32_t k = 0; k < t->count; k++) {
        int route = -1;
        if (k >= cpu && bytes[k] && len[k])
            route = feeder__decode_route(bytes[k], len[k], max_pixels);
        w->part.gpu[k] = route == FEEDER__ROUTE_GPU;
        if (route > FEEDER__ROUTE_GPU)
            res->routed[route - 1]++;
        res->shared += k < cpu;
    }
    uint32_t moved;
    feeder__slot_plan_part(l, t->count, w->part.len, w->part.gpu, w->part.off, &moved);
    res->routed[FEEDER_ROUTE_ROOM] += moved;
    uint64_t *enc = feeder__slot_encoded(l, slot) + t->first;
    uint64_t *place = feeder__slot_place(l, slot) + t->first;
    for (uint32_t k = 0; k < t->count; k++) {
        enc[k] = w->part.gpu[k] ? len[k] : 0;
        place[k] = (uint64_t)t->first * l->room_bytes + w->part.off[k];
    }
}

uint8_t *feeder__worker_sample_dst(const feeder__worker_ctx *w, uint8_t *slot, uint32_t i)
{
    const feeder__slot_layout *l = &w->job->layout;
    if (!w->gpu_dec)
        return feeder__slot_sample(l, slot, i);
    return slot + l->data_off + feeder__slot_place(l, slot)[i];
}
