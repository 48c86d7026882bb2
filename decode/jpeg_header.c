/*
 * A JPEG's markers up to the first scan, read without libjpeg: the workers
 * route every file of a GPU-decoded batch by its header, and a libjpeg
 * header read costs a decompress object and its error machinery per image,
 * where this walk costs a few hundred byte compares.
 */
#include <string.h>

#include "decode/jpeg_header.h"

/* The engine's largest side (nvJPEG's hardware backend documents none
 * smaller than this for the A100/H100 engines); nvJPEG's own
 * nvjpegDecodeBatchedSupported still checks every routed image. */
#define ENGINE_MAX_SIDE 16384u
/* Above this many pixels an image goes to the CPU: the engine decodes every
 * pixel at full size, where the CPU decoder's DCT scaling decodes a photo
 * this large at 1/2 to 1/8 of its size for a 224-pixel output, so one such
 * image costs the engine the time of ten ordinary ones and the CPU only its
 * entropy decoding (docs/ARCHITECTURE.md has the measurement). */
#define ENGINE_MAX_PIXELS (2048u * 1024u)

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static int is_sof(uint8_t m)
{
    /* C0-CF are frames except C4 (DHT), C8 (JPG extension) and CC (DAC). */
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

static int read_sof(const uint8_t *seg, size_t n, uint8_t marker, feeder__jpeg_info *out)
{
    if (n < 6)
        return -1;
    out->sof = marker;
    out->precision = seg[0];
    out->height = be16(seg + 1);
    out->width = be16(seg + 3);
    out->components = seg[5];
    if (out->components == 0 || n < 6 + (size_t)out->components * 3)
        return -1;
    for (unsigned c = 0; c < out->components && c < 4; c++) {
        uint8_t hv = seg[6 + c * 3 + 1];
        out->h[c] = hv >> 4;
        out->v[c] = hv & 15;
        if (!out->h[c] || !out->v[c])
            return -1;
    }
    return 0;
}

static void read_app(const uint8_t *seg, size_t n, uint8_t marker, feeder__jpeg_info *out)
{
    if (marker == 0xE1 && n >= 6 && memcmp(seg, "Exif\0", 5) == 0)
        out->has_exif = 1;
    else if (marker == 0xE2 && n >= 12 && memcmp(seg, "ICC_PROFILE\0", 12) == 0)
        out->has_icc = 1;
    else if (marker == 0xEE && n >= 12 && memcmp(seg, "Adobe", 5) == 0)
        out->adobe_transform = (int8_t)seg[11];
}

int feeder__jpeg_probe(const uint8_t *buf, size_t len, feeder__jpeg_info *out)
{
    memset(out, 0, sizeof(*out));
    out->adobe_transform = -1;
    if (!buf || len < 4 || buf[0] != 0xFF || buf[1] != 0xD8)
        return -1;
    int have_sof = 0;
    size_t pos = 2;
    for (;;) {
        while (pos < len && buf[pos] != 0xFF)
            pos++; /* stray bytes between segments: libjpeg skips them too */
        while (pos < len && buf[pos] == 0xFF)
            pos++; /* fill bytes */
        if (pos >= len)
            return -1;
        uint8_t m = buf[pos++];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
            continue; /* TEM, RSTn: no length */
        if (m == 0xD9)
            return -1; /* EOI before a scan */
        if (pos + 2 > len)
            return -1;
        size_t seglen = be16(buf + pos);
        if (seglen < 2 || pos + seglen > len)
            return -1;
        const uint8_t *seg = buf + pos + 2;
        size_t n = seglen - 2;
        if (m == 0xDA)
            return have_sof ? 0 : -1;
        if (is_sof(m)) {
            if (have_sof || read_sof(seg, n, m, out))
                return -1;
            have_sof = 1;
        } else if (m == 0xDD && n >= 2) {
            out->restart_interval = be16(seg);
        } else if (m >= 0xE0 && m <= 0xEF) {
            read_app(seg, n, m, out);
        }
        pos += seglen;
    }
}

/* 4:4:4, 4:2:2, 4:4:0 and 4:2:0 YCbCr (luma at 1 or 2 times each chroma
 * factor, both chroma planes alike) and gray: what the engine decodes. */
static int engine_sampling(const feeder__jpeg_info *in)
{
    if (in->components == 1)
        return 1;
    if (in->components != 3)
        return 0;
    if (in->h[1] != in->h[2] || in->v[1] != in->v[2] || in->h[1] != 1 || in->v[1] != 1)
        return 0;
    return (in->h[0] == 1 || in->h[0] == 2) && (in->v[0] == 1 || in->v[0] == 2);
}

int feeder__jpeg_route(const feeder__jpeg_info *in, uint64_t max_pixels)
{
    if (!in || !in->width || !in->height)
        return FEEDER__ROUTE_CORRUPT;
    uint64_t px = (uint64_t)in->width * in->height;
    if ((max_pixels && px > max_pixels) || px > ENGINE_MAX_PIXELS ||
        in->width > ENGINE_MAX_SIDE || in->height > ENGINE_MAX_SIDE)
        return FEEDER__ROUTE_SIZE;
    if (in->sof == 0xC2 || in->sof == 0xC6 || in->sof == 0xCA || in->sof == 0xCE)
        return FEEDER__ROUTE_PROGRESSIVE;
    if (in->sof != 0xC0 && in->sof != 0xC1)
        return FEEDER__ROUTE_OTHER; /* lossless, hierarchical or arithmetic-coded */
    if (in->precision != 8)
        return FEEDER__ROUTE_OTHER;
    if (in->components == 4)
        return FEEDER__ROUTE_CMYK;
    if (!engine_sampling(in))
        return FEEDER__ROUTE_SUBSAMPLING;
    return FEEDER__ROUTE_GPU;
}

const char *feeder__jpeg_route_name(int route)
{
    static const char *const names[FEEDER__ROUTES] = {
        "gpu", "progressive", "cmyk", "subsampling", "size", "corrupt", "other", "room", "format"};
    return route >= 0 && route < FEEDER__ROUTES ? names[route] : "unknown";
}
