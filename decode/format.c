/*
 * Format detection by magic bytes and the common tail of the non-JPEG
 * decoders: crop box, resize, flip, layout exactly as decode_turbo does.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "decode/format.h"

int feeder__format_sniff(const uint8_t *p, size_t len)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    if (len >= 2 && p[0] == 0xff && p[1] == 0xd8)
        return FEEDER__FMT_JPEG;
    if (len >= 8 && memcmp(p, png, 8) == 0)
        return FEEDER__FMT_PNG;
    if (len >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return FEEDER__FMT_WEBP;
    return FEEDER__FMT_UNKNOWN;
}

/* A name for the formats people mistake for images we read, so the message
 * says what the file is. */
static const char *guess_name(const uint8_t *p, size_t len)
{
    static const struct {
        const char *magic;
        size_t n;
        const char *name;
    } known[] = {
        {"GIF8", 4, "GIF"},           {"BM", 2, "BMP"},
        {"II*\0", 4, "TIFF"},         {"MM\0*", 4, "TIFF"},
        {"\0\0\0\x0c" "jP  ", 8, "JPEG 2000"}, {"RIFF", 4, "RIFF, not WebP"},
        {"8BPS", 4, "Photoshop"},     {"%PDF", 4, "PDF"},
        {"<", 1, "text/markup"},      {"\x1f\x8b", 2, "gzip"},
        {"PK\x03\x04", 4, "zip"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (len >= known[i].n && memcmp(p, known[i].magic, known[i].n) == 0)
            return known[i].name;
    if (len >= 12 && memcmp(p + 4, "ftyp", 4) == 0) {
        if (memcmp(p + 8, "avif", 4) == 0)
            return "AVIF";
        return memcmp(p + 8, "heic", 4) == 0 ? "HEIC" : "ISO media";
    }
    return "unknown";
}

static int unknown_format(const uint8_t *p, size_t len, char *err, size_t errlen)
{
    char hex[3 * 4 + 1] = "";
    size_t n = len < 4 ? len : 4, at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(hex + at, sizeof(hex) - at, "%s%02X", i ? " " : "", p[i]);
    return feeder__decode_fail(err, errlen, FEEDER_EDECODE,
                               "not a JPEG, PNG or WebP file (starts %s: %s)", hex,
                               guess_name(p, len));
}

int feeder__decode_other(int fmt, feeder__buf *pix, feeder__resizer *rs,
                         const feeder__transform *t, const uint8_t *p, size_t len,
                         uint64_t seed, uint64_t epoch, uint64_t index, uint8_t *dst,
                         feeder__decode_times *times, char *err, size_t errlen)
{
    uint64_t t0 = feeder__now_ns();
    feeder__image img = {0};
    feeder__crop c;
    int rc;
    if (fmt == FEEDER__FMT_PNG)
        rc = feeder__png_decode(pix, t, p, len, &img, err, errlen);
    else if (fmt == FEEDER__FMT_WEBP)
        rc = feeder__webp_decode(pix, t, p, len, seed, epoch, index, &img, &c, err, errlen);
    else
        return unknown_format(p, len, err, errlen);
    if (rc)
        return rc;
    if (feeder__transform_channels(t) == 1 && img.channels != 1) {
        feeder__rgb_to_gray(pix->p, img.w, img.h, img.stride, img.channels);
        img.channels = 1;
    }
    /* A WebP may have been decoded scaled: its box comes with it. */
    if (fmt == FEEDER__FMT_PNG)
        feeder__crop_compute(t, img.w, img.h, seed, epoch, index, &c);
    uint64_t t1 = feeder__now_ns();
    rc = feeder__resize(rs, pix->p, img.w, img.h, img.stride, img.channels, c.fx, c.fy, c.fw,
                        c.fh, dst, t->width, t->height, c.flip, t->layout);
    if (rc)
        return feeder__decode_fail(err, errlen, rc, "resize of a %ux%u image failed", img.w,
                                   img.h);
    if (times) {
        times->decode_ns = t1 - t0;
        times->transform_ns = feeder__now_ns() - t1;
    }
    return 0;
}
