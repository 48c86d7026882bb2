/*
 * Shared by the JPEG fuzz targets. An input is two bytes of settings, then
 * the JPEG: byte 0 picks the pipeline (EVAL or TRAIN), the layout and the
 * output size, byte 1 the sample index (so the train crop and flip vary)
 * and, with its top bit, gray output (FEEDER_OPT_CHANNELS 1), with the
 * next one a small decode-size limit (FEEDER_OPT_MAX_DECODE_BYTES).
 * One decoder serves every input, as in a worker: a failure must leave it
 * usable for the next image.
 */
#ifndef FEEDER_FUZZ_DECODE_H
#define FEEDER_FUZZ_DECODE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "feeder.h"

static int fuzz_decode(int decoder, const uint8_t *data, size_t size)
{
    static feeder__decoder *d;
    static uint8_t dst[96 * 96 * 3];
    if (!d && feeder__decoder_create(&d) != 0)
        abort();
    if (size < 2)
        return 0;
    static const uint32_t sizes[8] = {1, 2, 7, 16, 31, 48, 64, 96};
    feeder__transform t;
    memset(&t, 0, sizeof(t));
    t.pipeline = (data[0] & 1) ? FEEDER_PIPELINE_TRAIN : FEEDER_PIPELINE_EVAL;
    t.decoder = decoder;
    t.layout = (data[0] >> 1) & 1;
    t.height = sizes[(data[0] >> 2) & 7];
    t.width = sizes[(data[0] >> 5) & 7];
    t.resize = t.height > t.width ? t.height : t.width;
    t.scale_min = 0.08;
    t.scale_max = 1.0;
    t.ratio_min = 3.0 / 4.0;
    t.ratio_max = 4.0 / 3.0;
    t.flip_prob = 0.5;
    /* Big enough for every seed, small enough that a header claiming
     * 65500x65500 is refused before it costs gigabytes (the loader's own
     * default is PIL's 178956970). */
    t.max_pixels = 1u << 22;
    t.channels = (data[1] & 0x80) ? 1 : 3;
    /* Bit 6 of byte 1: a decode-size limit of 64 KiB, under which a WebP
     * larger than a few thousand pixels is decoded at a reduced scale. */
    t.max_decode_bytes = (data[1] & 0x40) ? 64u << 10 : 0;
    t.max_side = 65535;
    char err[512];
    feeder__decode_times tm;
    int rc = feeder__decode_sample(d, &t, data + 2, size - 2, 7, 0, data[1], dst, &tm, err,
                                   sizeof(err));
    /* The contract: success, or one of the documented errors with a text. */
    if (rc != 0 && rc != FEEDER_EDECODE && rc != FEEDER_ETOOBIG && rc != -ENOMEM)
        abort();
    if (rc != 0 && err[0] == 0)
        abort();
    return 0;
}

#endif
