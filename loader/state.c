/*
 * Saving and resuming the position in an epoch. The blob is a fixed
 * little-endian header and a bitmap of the epoch's delivered batches:
 *
 *   off size  field
 *     0   4   magic "FDRS"
 *     4   4   version (4; 1 to 3 are still read)
 *     8   4   length of the whole blob
 *    12   4   CRC32C of the whole blob, this field taken as 0
 *    16   8   seed                 72   4   batch_size
 *    24   8   epoch                76   4   drop_last
 *    32   8   delivered (batches)  80   4   shuffle
 *    40   8   dataset_size         84   4   user_sampler
 *    48   8   sampler_len          88   4   pipeline, decoder, layout,
 *    56   8   nbatches                      height, width, resize,
 *    64   8   order_hash                    error_policy (7 x 4 bytes)
 *                                116   4   channels (version 3; 0: unknown)
 *   120   8   max_pixels          128  40   scale_min, scale_max, ratio_min,
 *   168   8   map_bytes                     ratio_max, flip_prob (IEEE 754)
 *   176   8   dataset fingerprint (version 2; 0: unknown)
 *   184   8   max_decode_bytes (version 4)
 *   192   4   max_side (version 4)   196   4   zero
 *   200   map_bytes  bit b (LSB first) = batch b delivered
 *
 * Version 1 had no fingerprint and its map at 176; such a blob loads only
 * into a loader whose dataset has no fingerprint either (user datasets). Version 2 had 0 where
 * version 3 has the output channels (FEEDER_OPT_CHANNELS, 1 or 3): its
 * blobs load with the channels unknown (not compared), as version 1's.
 * Versions 2 and 3 had their map at 184 and no decode limits but
 * max_pixels: their blobs load with max_decode_bytes and max_side unknown
 * (not compared).
 *
 * A bitmap, not a count: with in_order 0 batches are delivered as they
 * complete, so the delivered ones need not be a prefix (a slow batch 0 can
 * be passed by every later one). It costs one bit a batch (ImageNet at batch
 * 256: 626 bytes).
 *
 * A pure codec: the loader describes itself in a feeder__state
 * (loader.c, feeder__loader_describe) and this file turns that into bytes,
 * bytes back into a description, and compares two descriptions. Nothing here
 * calls the loader.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "loader/state.h"

#define STATE_MAGIC 0x53524446u /* "FDRS" little-endian */
#define STATE_VERSION 4u
#define STATE_HEADER 200u
#define STATE_HEADER_V2 184u /* versions 2 and 3 */
#define STATE_HEADER_V1 176u

uint64_t feeder__order_hash(const uint64_t *v, uint64_t n)
{
    /* A multiply-xorshift chain over the indices and the length: order
     * matters, and any change of one index changes the result. */
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (uint64_t i = 0; i < n; i++) {
        h ^= v[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

static uint64_t dbits(double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return v;
}

static double bitsd(uint64_t v)
{
    double d;
    memcpy(&d, &v, sizeof(d));
    return d;
}

static uint64_t map_bytes(uint64_t nbatches) { return nbatches / 8 + (nbatches % 8 != 0); }

static uint64_t popcount_map(const uint8_t *map, uint64_t bytes)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < bytes; i++)
        n += (uint64_t)__builtin_popcount(map[i]);
    return n;
}

int feeder__state_size(const feeder__state *st, size_t *len)
{
    uint64_t mb = map_bytes(st->nbatches);
    if (mb > SIZE_MAX - STATE_HEADER || mb + STATE_HEADER > UINT32_MAX)
        return FEEDER_EOVERFLOW;
    *len = (size_t)(STATE_HEADER + mb);
    return 0;
}

void feeder__state_encode(const feeder__state *st, uint8_t *b, size_t len)
{
    memset(b, 0, len);
    feeder__put_le32(b + 0, STATE_MAGIC);
    feeder__put_le32(b + 4, STATE_VERSION);
    feeder__put_le32(b + 8, (uint32_t)len);
    feeder__put_le64(b + 16, st->seed);
    feeder__put_le64(b + 24, st->epoch);
    feeder__put_le64(b + 32, st->delivered);
    feeder__put_le64(b + 40, st->dataset_size);
    feeder__put_le64(b + 48, st->sampler_len);
    feeder__put_le64(b + 56, st->nbatches);
    feeder__put_le64(b + 64, st->order_hash);
    feeder__put_le32(b + 72, st->batch_size);
    feeder__put_le32(b + 76, st->drop_last);
    feeder__put_le32(b + 80, st->shuffle);
    feeder__put_le32(b + 84, st->user_sampler);
    feeder__put_le32(b + 88, st->pipeline);
    feeder__put_le32(b + 92, st->decoder);
    feeder__put_le32(b + 96, st->layout);
    feeder__put_le32(b + 100, st->height);
    feeder__put_le32(b + 104, st->width);
    feeder__put_le32(b + 108, st->resize);
    feeder__put_le32(b + 112, st->policy);
    feeder__put_le32(b + 116, st->channels);
    feeder__put_le64(b + 120, st->max_pixels);
    feeder__put_le64(b + 128, dbits(st->scale_min));
    feeder__put_le64(b + 136, dbits(st->scale_max));
    feeder__put_le64(b + 144, dbits(st->ratio_min));
    feeder__put_le64(b + 152, dbits(st->ratio_max));
    feeder__put_le64(b + 160, dbits(st->flip_prob));
    uint64_t mb = map_bytes(st->nbatches);
    feeder__put_le64(b + 168, mb);
    feeder__put_le64(b + 176, st->fingerprint);
    feeder__put_le64(b + 184, st->max_decode_bytes);
    feeder__put_le32(b + 192, st->max_side);
    if (st->map)
        memcpy(b + STATE_HEADER, st->map, (size_t)mb);
    feeder__put_le32(b + 12, feeder__crc32c(0, b, len));
}

/* The blob's frame: magic, version, length and CRC. Sets *header to the
 * version's header size. 0 or FEEDER_ESTATEBLOB with the reason. */
static int check_frame(const uint8_t *b, size_t len, uint32_t *header, char *msg,
                       size_t msglen)
{
    const char *pre = "state blob";
    if (len < STATE_HEADER_V1)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: %zu bytes, shorter than its %u-byte header", pre, len,
                            STATE_HEADER_V1);
    if (feeder__get_le32(b) != STATE_MAGIC)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: bad magic 0x%08x (not a feeder state blob)", pre,
                            feeder__get_le32(b));
    uint32_t version = feeder__get_le32(b + 4);
    if (version < 1 || version > STATE_VERSION)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: version %u, this library reads versions 1 to %u", pre, version,
                            STATE_VERSION);
    *header = version == 1 ? STATE_HEADER_V1 : version < 4 ? STATE_HEADER_V2 : STATE_HEADER;
    if (len < *header)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: %zu bytes, shorter than its %u-byte header", pre, len, *header);
    if (feeder__get_le32(b + 8) != len)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: its length field says %u bytes, %zu were given", pre,
                            feeder__get_le32(b + 8), len);
    /* The CRC covers the blob with its own field read as zeros. */
    static const uint8_t zeros[4];
    uint32_t crc = feeder__crc32c(feeder__crc32c(feeder__crc32c(0, b, 12), zeros, 4), b + 16,
                                  len - 16);
    if (crc != feeder__get_le32(b + 12))
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: CRC32C mismatch (stored 0x%08x, computed 0x%08x): the blob was "
                            "damaged",
                            pre, feeder__get_le32(b + 12), crc);
    return 0;
}

/* The header's fields, at their offsets (feeder__state_encode). */
static void read_fields(const uint8_t *b, feeder__state *st)
{
    memset(st, 0, sizeof(*st));
    st->seed = feeder__get_le64(b + 16);
    st->epoch = feeder__get_le64(b + 24);
    st->delivered = feeder__get_le64(b + 32);
    st->dataset_size = feeder__get_le64(b + 40);
    st->sampler_len = feeder__get_le64(b + 48);
    st->nbatches = feeder__get_le64(b + 56);
    st->order_hash = feeder__get_le64(b + 64);
    st->batch_size = feeder__get_le32(b + 72);
    st->drop_last = feeder__get_le32(b + 76);
    st->shuffle = feeder__get_le32(b + 80);
    st->user_sampler = feeder__get_le32(b + 84);
    st->pipeline = feeder__get_le32(b + 88);
    st->decoder = feeder__get_le32(b + 92);
    st->layout = feeder__get_le32(b + 96);
    st->height = feeder__get_le32(b + 100);
    st->width = feeder__get_le32(b + 104);
    st->resize = feeder__get_le32(b + 108);
    st->policy = feeder__get_le32(b + 112);
    st->max_pixels = feeder__get_le64(b + 120);
    st->scale_min = bitsd(feeder__get_le64(b + 128));
    st->scale_max = bitsd(feeder__get_le64(b + 136));
    st->ratio_min = bitsd(feeder__get_le64(b + 144));
    st->ratio_max = bitsd(feeder__get_le64(b + 152));
    st->flip_prob = bitsd(feeder__get_le64(b + 160));
    uint32_t version = feeder__get_le32(b + 4);
    st->fingerprint = version == 1 ? 0 : feeder__get_le64(b + 176);
    st->channels = version < 3 ? 0 : feeder__get_le32(b + 116);
    st->limits_known = version >= 4;
    if (st->limits_known) {
        st->max_decode_bytes = feeder__get_le64(b + 184);
        st->max_side = feeder__get_le32(b + 192);
    }
}

/* The delivered-batch map after the header: a CRC that matches says the
 * bytes are what was written; this says what was written is self-consistent
 * (a hand-made or buggy blob). */
static int check_map(const uint8_t *b, size_t len, uint32_t header, feeder__state *st,
                     char *msg, size_t msglen)
{
    const char *pre = "state blob";
    uint64_t mb = feeder__get_le64(b + 168);
    if (mb != map_bytes(st->nbatches) || mb != len - header)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: map of %llu bytes for %llu batches in a %zu-byte blob", pre,
                            (unsigned long long)mb, (unsigned long long)st->nbatches, len);
    const uint8_t *map = b + header;
    if (st->nbatches % 8 && (map[mb - 1] >> (st->nbatches % 8)))
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: the map marks batches past the epoch's %llu", pre,
                            (unsigned long long)st->nbatches);
    uint64_t set = popcount_map(map, mb);
    if (set != st->delivered)
        return feeder__fail(msg, msglen, FEEDER_ESTATEBLOB,
                            "%s: %llu batches delivered, but the map marks %llu", pre,
                            (unsigned long long)st->delivered, (unsigned long long)set);
    st->map = mb ? map : NULL;
    return 0;
}

int feeder__state_decode(const uint8_t *b, size_t len, feeder__state *st, char *msg,
                         size_t msglen)
{
    uint32_t header = 0;
    int rc = check_frame(b, len, &header, msg, msglen);
    if (rc)
        return rc;
    read_fields(b, st);
    return check_map(b, len, header, st, msg, msglen);
}

static int differ_u(char *msg, size_t msglen, const char *field, uint64_t blob, uint64_t mine)
{
    return feeder__fail(msg, msglen, FEEDER_EMISMATCH,
                        "state blob does not match the loader: %s is %llu in the blob, "
                        "%llu in the loader",
                        field, (unsigned long long)blob, (unsigned long long)mine);
}

static int differ_d(char *msg, size_t msglen, const char *field, double blob, double mine)
{
    return feeder__fail(msg, msglen, FEEDER_EMISMATCH,
                        "state blob does not match the loader: %s is %.17g in the blob, "
                        "%.17g in the loader",
                        field, blob, mine);
}

/* Compare field by field so the message names the first one that differs.
 * Settings that cannot change the bytes under the blob's pipeline (resize
 * outside EVAL, the crop ranges outside TRAIN) are not compared. */
int feeder__state_compare(const feeder__state *b, const feeder__state *m, char *msg,
                          size_t msglen)
{
#define U(f, name)                                                                            \
    if (b->f != m->f)                                                                         \
        return differ_u(msg, msglen, name, b->f, m->f);
#define D(f, name)                                                                            \
    if (dbits(b->f) != dbits(m->f))                                                           \
        return differ_d(msg, msglen, name, b->f, m->f);
    U(dataset_size, "dataset size");
    /* A blob that names no dataset (version 1, or a zeroed field) cannot be
     * checked against files that have a fingerprint: refused, or rewriting a
     * blob would be a way past the check. */
    if (!b->fingerprint && m->fingerprint)
        return feeder__fail(msg, msglen, FEEDER_EMISMATCH,
                            "state blob does not match the loader: the blob records no dataset "
                            "fingerprint (version 1, or the field is 0), and this loader's dataset "
                            "has one (%016llx): it cannot be checked against the files",
                            (unsigned long long)m->fingerprint);
    if (b->fingerprint && m->fingerprint && b->fingerprint != m->fingerprint)
        return feeder__fail(msg, msglen, FEEDER_EMISMATCH,
                            "state blob does not match the loader: the dataset's files differ "
                            "(fingerprint %016llx in the blob, %016llx in the loader): a file was "
                            "renamed, added, removed or relabelled, or another packed file",
                            (unsigned long long)b->fingerprint, (unsigned long long)m->fingerprint);
    U(batch_size, "batch_size");
    U(drop_last, "drop_last");
    U(seed, "seed");
    if (!b->user_sampler && !m->user_sampler)
        U(shuffle, "shuffle");
    U(user_sampler, "user sampler (1: a sampler was given)");
    U(sampler_len, "the sampler's length");
    U(nbatches, "the number of batches");
    if (b->order_hash != m->order_hash)
        return feeder__fail(
            msg, msglen, FEEDER_EMISMATCH,
            "state blob does not match the loader: the order of epoch %llu differs (hash "
            "%016llx in the blob, %016llx in the loader): another sampler, seed or rank",
            (unsigned long long)b->epoch, (unsigned long long)b->order_hash,
            (unsigned long long)m->order_hash);
    U(pipeline, "pipeline");
    U(decoder, "decoder");
    U(layout, "layout");
    U(height, "height");
    U(width, "width");
    if (b->channels && m->channels)
        U(channels, "channels");
    if (b->pipeline == FEEDER_PIPELINE_EVAL)
        U(resize, "resize");
    if (b->pipeline == FEEDER_PIPELINE_TRAIN) {
        D(scale_min, "scale_min");
        D(scale_max, "scale_max");
        D(ratio_min, "ratio_min");
        D(ratio_max, "ratio_max");
        D(flip_prob, "flip_prob");
    }
    U(policy, "error_policy");
    U(max_pixels, "max_pixels");
    if (b->limits_known && m->limits_known) {
        U(max_decode_bytes, "max_decode_bytes");
        U(max_side, "max_side");
    }
#undef U
#undef D
    return 0;
}
