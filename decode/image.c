/* The pixel-limit check of the whole-image decoders. */
#include "decode/image.h"

int feeder__check_image(const feeder__transform *t, uint32_t w, uint32_t h, uint64_t need,
                        const char *what, char *err, size_t errlen)
{
    uint64_t n = (uint64_t)w * h;
    if (n == 0)
        return feeder__fail(err, errlen, FEEDER_EDECODE, "image has no pixels (%ux%u)", w, h);
    if (t->max_pixels && n > t->max_pixels)
        return feeder__fail(err, errlen, FEEDER_ETOOBIG,
                            "image is %ux%u = %llu pixels, over the limit of %llu", w, h,
                            (unsigned long long)n, (unsigned long long)t->max_pixels);
    if (t->max_side && (w > t->max_side || h > t->max_side))
        return feeder__fail(err, errlen, FEEDER_ETOOBIG,
                            "image is %ux%u, over the limit of %u pixels a side "
                            "(FEEDER_OPT_MAX_SIDE raises it)",
                            w, h, t->max_side);
    if (t->max_decode_bytes && need > t->max_decode_bytes)
        return feeder__fail(err, errlen, FEEDER_ETOOBIG,
                            "image is %ux%u: decoding it takes %llu bytes (%s), over the "
                            "limit of %llu (FEEDER_OPT_MAX_DECODE_BYTES raises it)",
                            w, h, (unsigned long long)need, what,
                            (unsigned long long)t->max_decode_bytes);
    return 0;
}

int feeder__check_pixels(const feeder__transform *t, uint32_t w, uint32_t h, char *err,
                         size_t errlen)
{
    return feeder__check_image(t, w, h, 0, "", err, errlen);
}

/* Pillow's rgb2l (libImaging/Convert.c, L24): the ITU-R 601-2 weights in
 * 16-bit fixed point, summing to 65536, so a pixel that is gray already
 * keeps its level, and +0x8000 rounds halves up. */
static inline uint8_t pil_l(const uint8_t *q)
{
    return (uint8_t)(((uint32_t)q[0] * 19595u + (uint32_t)q[1] * 38470u +
                      (uint32_t)q[2] * 7471u + 0x8000u) >> 16);
}

void feeder__rgb_to_gray(uint8_t *p, uint32_t w, uint32_t h, size_t stride, int channels)
{
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = p + (size_t)y * stride;
        const uint8_t *q = row;
        /* Byte x is written after bytes x*channels.. are read: in place. */
        for (uint32_t x = 0; x < w; x++, q += channels)
            row[x] = pil_l(q);
    }
}
