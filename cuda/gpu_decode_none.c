/* The GPU decoder in a build without nvJPEG: it cannot start, and says so. */
#include <stdio.h>

#include "cuda/gpu_decode.h"

int feeder__gpu_decoder_create(feeder__gpu_decoder **out, char *why, size_t whylen)
{
    (void)out;
    if (why && whylen)
        snprintf(why, whylen, "built without nvJPEG");
    return FEEDER_EUNSUPPORTED;
}

void feeder__gpu_decoder_destroy(feeder__gpu_decoder *d) { (void)d; }

const char *feeder__gpu_decoder_name(const feeder__gpu_decoder *d)
{
    (void)d;
    return "";
}

unsigned feeder__gpu_decoder_scratch(const feeder__gpu_decoder *d)
{
    (void)d;
    return 0;
}

int feeder__gpu_decode(feeder__gpu_decoder *d, const feeder__transform *t, uint64_t seed,
                       uint64_t epoch, const feeder__gpu_image *img, uint32_t n, uint8_t *dst,
                       size_t sample_bytes, void *stream, uint32_t *refused,
                       uint32_t *nrefused, char *err, size_t errlen)
{
    (void)d, (void)t, (void)seed, (void)epoch, (void)img, (void)dst, (void)sample_bytes;
    (void)stream, (void)refused;
    *nrefused = 0;
    if (err && errlen)
        snprintf(err, errlen, "built without nvJPEG");
    return n ? FEEDER_EUNSUPPORTED : 0;
}

void feeder__gpu_decoder_share_engines(feeder__gpu_decoder *d, void *lock)
{
    (void)d;
    (void)lock;
}

void feeder__gpu_decoder_watch(feeder__gpu_decoder *d, void *stamp)
{
    (void)d;
    (void)stamp;
}

int feeder__gpu_decoder_built(void) { return 0; }
