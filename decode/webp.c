/*
 * WebP through libwebp (lossy and lossless), decoded as RGB straight into the
 * scratch the resizer reads; alpha is dropped. Animated files are refused
 * with a clear error (their first frame needs the demux library, and a
 * training set of animations is better converted once).
 */
#include <errno.h>

#include <webp/decode.h>

#include "decode/image.h"

static const char *vp8_status_name(VP8StatusCode s)
{
    switch (s) {
    case VP8_STATUS_OK: return "OK";
    case VP8_STATUS_OUT_OF_MEMORY: return "VP8_STATUS_OUT_OF_MEMORY";
    case VP8_STATUS_INVALID_PARAM: return "VP8_STATUS_INVALID_PARAM";
    case VP8_STATUS_BITSTREAM_ERROR: return "VP8_STATUS_BITSTREAM_ERROR (corrupt data)";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "VP8_STATUS_UNSUPPORTED_FEATURE";
    case VP8_STATUS_SUSPENDED: return "VP8_STATUS_SUSPENDED";
    case VP8_STATUS_USER_ABORT: return "VP8_STATUS_USER_ABORT";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "VP8_STATUS_NOT_ENOUGH_DATA (truncated)";
    }
    return "unknown VP8 status";
}

static int webp_fail(VP8StatusCode s, char *err, size_t errlen, const char *what)
{
    int code = s == VP8_STATUS_OUT_OF_MEMORY ? -ENOMEM : FEEDER_EDECODE;
    return feeder__decode_fail(err, errlen, code, "WebP: %s: %s", what, vp8_status_name(s));
}

int feeder__webp_decode(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                        size_t len, feeder__image *img, char *err, size_t errlen)
{
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return feeder__decode_fail(err, errlen, FEEDER_EDECODE, "WebP: library version mismatch");
    VP8StatusCode s = WebPGetFeatures(p, len, &cfg.input);
    if (s != VP8_STATUS_OK)
        return webp_fail(s, err, errlen, "header");
    if (cfg.input.has_animation)
        return feeder__decode_fail(err, errlen, FEEDER_EDECODE,
                                   "WebP: animated file (%dx%d): not supported, convert it to a "
                                   "still image", cfg.input.width, cfg.input.height);
    uint32_t w = (uint32_t)cfg.input.width, h = (uint32_t)cfg.input.height;
    int rc = feeder__check_pixels(t, w, h, err, errlen);
    if (rc)
        return rc;
    size_t stride = (size_t)w * 3, size = stride * h;
    if ((rc = feeder__buf_reserve(pix, size)))
        return feeder__decode_fail(err, errlen, rc, "out of memory for a %ux%u image", w, h);
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = pix->p;
    cfg.output.u.RGBA.stride = (int)stride;
    cfg.output.u.RGBA.size = size;
    s = WebPDecode(p, len, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (s != VP8_STATUS_OK)
        return webp_fail(s, err, errlen, "decode");
    img->w = w;
    img->h = h;
    img->stride = stride;
    img->channels = 3;
    return 0;
}
