/*
 * feeder-pack --max-side (shrink.h). The resize is the loader's own (decode/),
 * so a shrunk record is what the loader would have made of the original at
 * that size, before the JPEG round trip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <turbojpeg.h>

#include "decode/decode.h"
#include "shrink.h"

struct fpk_shrinker {
    uint32_t max_side;
    int quality;
    tjhandle enc;
    feeder__decoder *dec;
    uint8_t *rgb;
    size_t rgb_cap;
    unsigned char *out; /* tjAlloc'd, out_cap bytes */
    unsigned long out_cap;
};

fpk_shrinker *fpk_shrinker_create(uint32_t max_side, int quality)
{
    fpk_shrinker *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->max_side = max_side;
    s->quality = quality;
    if (!(s->enc = tjInitCompress()) || feeder__decoder_create(&s->dec)) {
        fpk_shrinker_destroy(s);
        return NULL;
    }
    return s;
}

void fpk_shrinker_destroy(fpk_shrinker *s)
{
    if (!s)
        return;
    if (s->enc)
        tjDestroy(s->enc);
    feeder__decoder_destroy(s->dec);
    free(s->rgb);
    tjFree(s->out);
    free(s);
}

void fpk_shrink_size(uint32_t max_side, uint32_t w, uint32_t h, uint32_t *nw, uint32_t *nh)
{
    *nw = w;
    *nh = h;
    if (w >= h && w > max_side) {
        *nw = max_side;
        *nh = (uint32_t)(((uint64_t)h * max_side * 2 + w) / (2 * (uint64_t)w));
    } else if (h > w && h > max_side) {
        *nh = max_side;
        *nw = (uint32_t)(((uint64_t)w * max_side * 2 + h) / (2 * (uint64_t)h));
    }
    if (*nw == 0)
        *nw = 1;
    if (*nh == 0)
        *nh = 1;
}

/* The subsampling the re-encoded file keeps. */
static int keep_subsampling(int ss, int cs)
{
    if (cs == TJCS_GRAY)
        return TJSAMP_GRAY;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        return TJSAMP_444;
    switch (ss) {
    case TJSAMP_444:
    case TJSAMP_422:
    case TJSAMP_420:
    case TJSAMP_440:
    case TJSAMP_411:
        return ss;
    default:
        return TJSAMP_444;
    }
}

static int reserve_out(fpk_shrinker *s, unsigned long size)
{
    if (size <= s->out_cap)
        return 1;
    if (size > 0x7fffffffUL)
        return 0;
    tjFree(s->out);
    s->out_cap = 0;
    if (!(s->out = tjAlloc((int)size)))
        return 0;
    s->out_cap = size;
    return 1;
}

int fpk_shrink(fpk_shrinker *s, const uint8_t *jpeg, size_t len, int w, int h, int ss, int cs,
               const uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    uint32_t nw, nh;
    fpk_shrink_size(s->max_side, (uint32_t)w, (uint32_t)h, &nw, &nh);
    if (nw == (uint32_t)w && nh == (uint32_t)h)
        return 0;
    size_t need = (size_t)nw * nh * 3;
    if (need > s->rgb_cap) {
        free(s->rgb);
        s->rgb_cap = 0;
        if (!(s->rgb = malloc(need))) {
            snprintf(err, errlen, "out of memory for a %ux%u image", nw, nh);
            return -1;
        }
        s->rgb_cap = need;
    }
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                           .layout = FEEDER_LAYOUT_NHWC, .height = nh, .width = nw};
    char why[512];
    if (feeder__decode_sample(s->dec, &t, jpeg, len, 0, 0, 0, s->rgb, NULL, why, sizeof(why))) {
        snprintf(err, errlen, "cannot decode it to shrink it: %s", why);
        return -1;
    }
    int sub = keep_subsampling(ss, cs);
    unsigned long size = tjBufSize((int)nw, (int)nh, sub);
    if (size == (unsigned long)-1 || !reserve_out(s, size)) {
        snprintf(err, errlen, "out of memory for the %ux%u JPEG", nw, nh);
        return -1;
    }
    /* tjBufSize is the worst case, so NOREALLOC never runs short. */
    if (tjCompress2(s->enc, s->rgb, (int)nw, 0, (int)nh, TJPF_RGB, &s->out, &size, sub,
                    s->quality, TJFLAG_ACCURATEDCT | TJFLAG_NOREALLOC) != 0) {
        snprintf(err, errlen, "tjCompress2 of the %ux%u image failed: %s", nw, nh,
                 tjGetErrorStr2(s->enc));
        return -1;
    }
    *out = s->out;
    *out_len = size;
    return 1;
}
