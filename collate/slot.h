/*
 * collate/: the layout of a batch slot in shared memory and where each
 * sample, label and index of a batch lives in it. Depends on nothing but the
 * public header, so the loader, the workers and (later) the pin thread and
 * the GPU prefetcher agree on one layout.
 *
 *   [ labels: batch x int64 | indices: batch x uint64 | encoded: batch x uint64
 *     | place: batch x uint64 ]
 *   [ data: batch x room_bytes ]                          (page aligned)
 *
 * `encoded` and `place` serve the GPU decoders (FEEDER_DECODER_NVJPEG,
 * HYBRID). Each sample has room_bytes of the data area: sample_bytes with
 * the CPU decoders, more with the GPU decoders (feeder__slot_layout_room,
 * FEEDER_OPT_GPU_ROOM), since an encoded file is often larger than its
 * decoded 224x224 sample. A task's share (count x room_bytes from
 * first x room_bytes) holds its samples packed one after another, each
 * either the JPEG bytes the GPU decodes (encoded[i] = their length) or
 * decoded pixels (encoded[i] = 0, sample_bytes), at place[i] bytes from the
 * data area's start (feeder__slot_plan_part decides). Small files leave room
 * for large ones, so a file larger than its room still goes to the GPU when
 * its task has the room. With the CPU decoders sample i sits at
 * i x sample_bytes and `place` is not read.
 *
 * The data area starts on a page so it can be registered with the GPU driver
 * and read with O_DIRECT; slots are whole pages so a slot never shares a page
 * with another (no false sharing between workers writing neighbouring slots).
 */
#ifndef FEEDER_COLLATE_SLOT_H
#define FEEDER_COLLATE_SLOT_H

#include <stddef.h>
#include <stdint.h>

typedef struct feeder__slot_layout {
    uint32_t batch;       /* samples per slot */
    uint32_t height, width, channels;
    int layout;           /* feeder_layout */
    size_t sample_bytes;  /* height * width * channels */
    size_t room_bytes;    /* a sample's share of the data area, >= sample_bytes */
    size_t labels_off;    /* from the slot start */
    size_t indices_off;
    size_t encoded_off;
    size_t data_off;
    size_t slot_bytes;    /* page multiple */
} feeder__slot_layout;

/* Compute the layout; FEEDER_EOVERFLOW when a size does not fit, FEEDER_EINVAL
 * for a zero dimension. */
int feeder__slot_layout_init(feeder__slot_layout *l, uint32_t batch, uint32_t height,
                             uint32_t width, uint32_t channels, int layout);

/* Give every sample `room` bytes of the data area (the GPU decoders' encoded
 * files); less than sample_bytes means sample_bytes. FEEDER_EOVERFLOW when
 * the slot's size overflows (the layout is then unchanged). */
int feeder__slot_layout_room(feeder__slot_layout *l, size_t room);

/* Bytes for `slots` slots, or FEEDER_EOVERFLOW. */
int feeder__slot_total(const feeder__slot_layout *l, uint32_t slots, size_t *bytes);

static inline uint8_t *feeder__slot_base(const feeder__slot_layout *l, uint8_t *mem, uint32_t slot)
{
    return mem + (size_t)slot * l->slot_bytes;
}
static inline int64_t *feeder__slot_labels(const feeder__slot_layout *l, uint8_t *slot)
{
    return (int64_t *)(slot + l->labels_off);
}
static inline uint64_t *feeder__slot_indices(const feeder__slot_layout *l, uint8_t *slot)
{
    return (uint64_t *)(slot + l->indices_off);
}
static inline uint64_t *feeder__slot_encoded(const feeder__slot_layout *l, uint8_t *slot)
{
    return (uint64_t *)(slot + l->encoded_off);
}
static inline uint64_t *feeder__slot_place(const feeder__slot_layout *l, uint8_t *slot)
{
    return (uint64_t *)(slot + l->encoded_off) + l->batch;
}
/* Where sample `i` of the batch goes: samples are contiguous (N first) in
 * both layouts; NCHW only changes the order inside a sample. */
static inline uint8_t *feeder__slot_sample(const feeder__slot_layout *l, uint8_t *slot, uint32_t i)
{
    return slot + l->data_off + (size_t)i * l->sample_bytes;
}

/* A GPU decoder's task of `count` samples: where each goes in the task's
 * share of the data area (count x l->room_bytes). On entry gpu[k] says
 * whether sample k is to go to the GPU as len[k] bytes (else: decoded
 * pixels, sample_bytes); when they do not all fit, the largest files move
 * to the CPU first (gpu[k] cleared, and counted in *moved). On return off[k]
 * is each sample's offset from the share's start, in order, and the share
 * holds them all: pixels never need more than the share gives a sample. */
void feeder__slot_plan_part(const feeder__slot_layout *l, uint32_t count, const size_t *len,
                            int *gpu, uint64_t *off, uint32_t *moved);

#endif
