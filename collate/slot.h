/*
 * collate/: the layout of a batch slot in shared memory and where each
 * sample, label and index of a batch lives in it. Depends on nothing but the
 * public header, so the loader, the workers and (later) the pin thread and
 * the GPU prefetcher agree on one layout.
 *
 *   [ labels: batch x int64 | indices: batch x uint64 | encoded: batch x uint64 ]
 *   [ data: batch x sample_bytes ]                        (page aligned)
 *
 * `encoded` serves the GPU decoders (FEEDER_DECODER_NVJPEG, HYBRID): a worker
 * that only reads a sample's file puts the JPEG bytes at the start of the
 * sample's place and their length in encoded[i]; 0 means the place holds
 * the decoded pixels. The CPU decoders leave it alone.
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
/* Where sample `i` of the batch goes: samples are contiguous (N first) in
 * both layouts; NCHW only changes the order inside a sample. */
static inline uint8_t *feeder__slot_sample(const feeder__slot_layout *l, uint8_t *slot, uint32_t i)
{
    return slot + l->data_off + (size_t)i * l->sample_bytes;
}

#endif
