/*
 * The resume blob's codec (state.c): a description of a loader's position
 * and of every setting that shapes its batches' bytes, to bytes and back,
 * and the comparison of two descriptions. Pure: it calls nothing of the
 * loader (loader.c describes itself; api/state.c puts the two together).
 */
#ifndef FEEDER_LOADER_STATE_H
#define FEEDER_LOADER_STATE_H

#include <stddef.h>
#include <stdint.h>

/* Everything a state blob records: a position in an epoch and every setting
 * that shapes the bytes of its batches. */
typedef struct feeder__state {
    uint64_t seed, epoch, delivered, dataset_size, sampler_len, nbatches, order_hash;
    uint64_t max_pixels, max_decode_bytes;
    uint32_t max_side;
    /* max_decode_bytes and max_side recorded (version 4 on); else not
     * compared. */
    int limits_known;
    /* The dataset's identity (feeder_dataset.fingerprint); 0 when unknown (a
     * user dataset, or a version 1 blob): then it is not compared. */
    uint64_t fingerprint;
    uint32_t batch_size, drop_last, shuffle, user_sampler;
    uint32_t pipeline, decoder, layout, height, width, resize, policy;
    /* Output channels (FEEDER_OPT_CHANNELS: 1 or 3); 0 when unknown (a
     * version 1 or 2 blob): then it is not compared. */
    uint32_t channels;
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    /* (nbatches + 7) / 8 bytes, bit b (LSB first) = batch b delivered; NULL
     * when nothing was. Borrowed. */
    const uint8_t *map;
} feeder__state;

/* A hash of an epoch's order: two loaders with the same one draw the same
 * samples in the same order. */
uint64_t feeder__order_hash(const uint64_t *v, uint64_t n);

/* The blob's length for st, or FEEDER_EOVERFLOW. */
int feeder__state_size(const feeder__state *st, size_t *len);
/* Write st as a blob of exactly `len` bytes (feeder__state_size). */
void feeder__state_encode(const feeder__state *st, uint8_t *b, size_t len);
/* Read a blob: 0 and *st (st->map points into b), or FEEDER_ESTATEBLOB /
 * -ENOMEM with the reason in msg. */
int feeder__state_decode(const uint8_t *b, size_t len, feeder__state *st, char *msg,
                         size_t msglen);
/* 0 when a blob's description `blob` can resume on a loader described by
 * `mine`; FEEDER_EMISMATCH naming the first field that differs. Settings that
 * cannot change the bytes under the blob's pipeline are not compared. */
int feeder__state_compare(const feeder__state *blob, const feeder__state *mine, char *msg,
                          size_t msglen);

#endif
