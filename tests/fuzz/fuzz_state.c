/*
 * The resume blob's decoder (loader/state.c) on outside bytes. A blob it
 * accepts must describe itself consistently: re-encoding the description and
 * decoding that again gives the same description (a version 1 blob comes
 * back as the current version), the map marks exactly
 * `delivered` batches below `nbatches`, and it matches itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"
#include "loader/state.h"

static uint64_t marked(const feeder__state *st)
{
    uint64_t n = 0;
    for (uint64_t b = 0; st->map && b < st->nbatches; b++)
        n += (st->map[b / 8] >> (b % 8)) & 1;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    feeder__state st, again;
    char msg[512];
    msg[0] = 0;
    int rc = feeder__state_decode(data, size, &st, msg, sizeof(msg));
    if (rc != 0) {
        if (msg[0] == 0 || (rc != FEEDER_ESTATEBLOB && rc != -ENOMEM))
            abort();
        return 0;
    }
    if (marked(&st) != st.delivered || (st.delivered && !st.map))
        abort();
    /* Re-encoded as the current version: a version 1 blob gains the 8-byte
     * fingerprint (unknown, 0), and blobs before version 4 the 16 bytes of
     * the decode limits. */
    size_t len;
    size_t grow = data[4] == 1 ? 24 : data[4] < 4 ? 16 : 0;
    if (feeder__state_size(&st, &len) != 0 || len != size + grow ||
        (data[4] == 1 && st.fingerprint))
        abort();
    uint8_t *b = malloc(len);
    if (!b)
        return 0;
    feeder__state_encode(&st, b, len);
    if (feeder__state_decode(b, len, &again, msg, sizeof(msg)) != 0)
        abort();
    if (feeder__state_compare(&st, &again, msg, sizeof(msg)) != 0 || again.epoch != st.epoch ||
        again.delivered != st.delivered || again.fingerprint != st.fingerprint)
        abort();
    if (st.map && memcmp(st.map, again.map, (size_t)((st.nbatches + 7) / 8)) != 0)
        abort();
    free(b);
    return 0;
}
