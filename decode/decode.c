/*
 * feeder__decode_sample: the format from the first bytes (format.c's
 * table), then that format's decoder. A format decoded whole (PNG, WebP)
 * lands in the decoder's scratch and takes the same crop box, resize, flip
 * and layout as the TURBO path, so a picture comes out the same whatever
 * file it came from.
 */
#include <stdio.h>

#include "common/common.h"
#include "decode/decode.h"
#include "decode/format.h"
#include "decode/jpeg_header.h"

static int decode_whole(const feeder__format *f, feeder__decoder *d, const feeder__transform *t,
                        const uint8_t *p, size_t len, uint64_t seed, uint64_t epoch,
                        uint64_t index, uint8_t *dst, feeder__decode_times *times, char *err,
                        size_t errlen)
{
    uint64_t t0 = feeder__now_ns();
    feeder__buf *pix;
    feeder__resizer *rs;
    feeder__decoder_scratch(d, &pix, &rs);
    feeder__image img = {0};
    feeder__crop c;
    int rc = f->whole(pix, t, p, len, seed, epoch, index, &img, &c, err, errlen);
    if (rc)
        return rc;
    if (feeder__transform_channels(t) == 1 && img.channels != 1) {
        feeder__rgb_to_gray(pix->p, img.w, img.h, img.stride, img.channels);
        img.channels = 1;
    }
    uint64_t t1 = feeder__now_ns();
    rc = feeder__resize(rs, pix->p, img.w, img.h, img.stride, img.channels, c.fx, c.fy, c.fw,
                        c.fh, dst, t->width, t->height, c.flip, t->layout);
    if (rc)
        return feeder__fail(err, errlen, rc, "resize of a %ux%u image failed", img.w, img.h);
    if (times) {
        times->decode_ns = t1 - t0;
        times->transform_ns = feeder__now_ns() - t1;
    }
    return 0;
}

static int decode_sample(feeder__decoder *d, const feeder__transform *t, const uint8_t *p,
                         size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                         uint8_t *dst, feeder__decode_times *times, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (times)
        *times = (feeder__decode_times){0, 0};
    if (!d || !t || !dst || (!p && len) || t->width == 0 || t->height == 0)
        return feeder__fail(err, errlen, FEEDER_EINVAL, "invalid argument to the decoder");
    if (len == 0)
        return feeder__fail(err, errlen, FEEDER_EDECODE, "empty input (0 bytes)");
    const feeder__format *f = feeder__format_of(p, len);
    if (!f)
        return feeder__format_unknown(p, len, err, errlen);
    if (f->decode)
        return f->decode(d, t, p, len, seed, epoch, index, dst, times, err, errlen);
    return decode_whole(f, d, t, p, len, seed, epoch, index, dst, times, err, errlen);
}

int feeder__decode_sample(feeder__decoder *d, const feeder__transform *t, const uint8_t *jpeg,
                          size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                          uint8_t *dst, feeder__decode_times *times, char *err, size_t errlen)
{
    int rc = decode_sample(d, t, jpeg, len, seed, epoch, index, dst, times, err, errlen);
    if (d)
        feeder__decoder_shed(d);
    return rc;
}

int feeder__decode_route(const uint8_t *p, size_t len, uint64_t max_pixels)
{
    const feeder__format *f = feeder__format_of(p, len);
    if (f && !f->gpu)
        return FEEDER__ROUTE_FORMAT;
    feeder__jpeg_info info;
    if (feeder__jpeg_probe(p, len, &info))
        return FEEDER__ROUTE_CORRUPT;
    return feeder__jpeg_route(&info, max_pixels);
}
