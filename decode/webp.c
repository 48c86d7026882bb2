/*
 * WebP through libwebp (lossy and lossless), decoded as RGB straight into the
 * scratch the resizer reads; alpha is dropped. Animated files are refused
 * with a clear error (their first frame needs the demux library, and a
 * training set of animations is better converted once).
 *
 * Bombs: a lossless (VP8L) stream of one colour codes every pixel in no bits,
 * so 34 bytes can say 16383 x 10923 pixels, and libwebp then holds the whole
 * image as ARGB (4 bytes a pixel) besides the RGB output: over a gigabyte
 * from a file smaller than its name. The memory a decode takes is reckoned
 * from the header (decode_bytes) and checked against t->max_decode_bytes
 * before anything is allocated. An image whose whole decode would pass it is
 * decoded at a reduced scale by libwebp's rescaler (use_scaling, an area
 * average), the analogue of the JPEG decoder's DCT scaling: the crop box
 * stays at least twice the output on both axes, so the resizer's triangle
 * filter still does the last step. Lossless streams keep their ARGB copy
 * at any scale, so for them scaling saves only the RGB output.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
    return feeder__fail(err, errlen, code, "WebP: %s: %s", what, vp8_status_name(s));
}

/* The bytes libwebp and the RGB output take for a w x h image decoded to
 * ow x oh: the output; a lossless stream's ARGB copy of the whole image and
 * its 16-row cache; a lossy one's macroblock rows (about 64 bytes a column
 * in all) and an alpha plane of the whole image when it has alpha. */
static uint64_t decode_bytes(const WebPBitstreamFeatures *f, uint64_t ow, uint64_t oh)
{
    uint64_t w = (uint64_t)f->width, h = (uint64_t)f->height, n = ow * oh * 3;
    if (f->format == 2)
        return n + 4 * w * h + 4 * 17 * w;
    return n + 64 * w + (f->has_alpha ? w * h : 0);
}

static const char *decode_what(const WebPBitstreamFeatures *f)
{
    return f->format == 2 ? "lossless: libwebp's ARGB copy of the whole image and the RGB "
                            "output"
                          : f->has_alpha ? "lossy: the RGB output, the alpha plane and "
                                           "libwebp's rows"
                                         : "lossy: the RGB output and libwebp's rows";
}

/* The reduced size to decode a w x h image at for crop `c`: the crop box
 * twice the output on both axes; w and h themselves when that is no
 * reduction. */
static void scaled_size(const feeder__transform *t, const feeder__crop *c, uint32_t w,
                        uint32_t h, uint32_t *sw, uint32_t *sh)
{
    double fx = 2.0 * t->width / c->fw, fy = 2.0 * t->height / c->fh;
    double f = fx > fy ? fx : fy;
    *sw = w, *sh = h;
    if (f >= 1.0)
        return;
    double x = ceil(w * f), y = ceil(h * f);
    *sw = x < 1 ? 1 : x > w ? w : (uint32_t)x;
    *sh = y < 1 ? 1 : y > h ? h : (uint32_t)y;
}

int feeder__webp_decode(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                        size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                        feeder__image *img, feeder__crop *c, char *err, size_t errlen)
{
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return feeder__fail(err, errlen, FEEDER_EDECODE, "WebP: library version mismatch");
    VP8StatusCode s = WebPGetFeatures(p, len, &cfg.input);
    if (s != VP8_STATUS_OK)
        return webp_fail(s, err, errlen, "header");
    if (cfg.input.has_animation)
        return feeder__fail(err, errlen, FEEDER_EDECODE,
                            "WebP: animated file (%dx%d): not supported, convert it to a "
                            "still image",
                            cfg.input.width, cfg.input.height);
    uint32_t w = (uint32_t)cfg.input.width, h = (uint32_t)cfg.input.height;
    int rc = feeder__check_pixels(t, w, h, err, errlen);
    if (rc)
        return rc;
    feeder__crop_compute(t, w, h, seed, epoch, index, c);
    uint32_t ow = w, oh = h;
    uint64_t need = decode_bytes(&cfg.input, w, h);
    if (t->max_decode_bytes && need > t->max_decode_bytes) {
        scaled_size(t, c, w, h, &ow, &oh);
        need = decode_bytes(&cfg.input, ow, oh);
    }
    char what[160];
    snprintf(what, sizeof(what), "%s%s", decode_what(&cfg.input),
             ow < w || oh < h ? ", at the reduced scale the crop allows" : "");
    char why[512];
    if ((rc = feeder__check_image(t, w, h, need, what, why, sizeof(why))))
        return feeder__fail(err, errlen, rc, "WebP: %s", why);
    size_t stride = (size_t)ow * 3, size = stride * oh;
    if ((rc = feeder__buf_reserve(pix, size)))
        return feeder__fail(err, errlen, rc, "out of memory for a %ux%u image", ow, oh);
    if (ow < w || oh < h) {
        cfg.options.use_scaling = 1;
        cfg.options.scaled_width = (int)ow;
        cfg.options.scaled_height = (int)oh;
        double sx = (double)ow / w, sy = (double)oh / h;
        c->fx *= sx, c->fw *= sx, c->fy *= sy, c->fh *= sy;
        /* Rounding may leave the box a hair past the scaled image. */
        if (c->fx + c->fw > ow)
            c->fw = ow - c->fx;
        if (c->fy + c->fh > oh)
            c->fh = oh - c->fy;
    }
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = pix->p;
    cfg.output.u.RGBA.stride = (int)stride;
    cfg.output.u.RGBA.size = size;
    s = WebPDecode(p, len, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (s != VP8_STATUS_OK)
        return webp_fail(s, err, errlen, "decode");
    img->w = ow;
    img->h = oh;
    img->stride = stride;
    img->channels = 3;
    return 0;
}

int feeder__webp_sniff(const uint8_t *p, size_t len)
{
    return len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0;
}
