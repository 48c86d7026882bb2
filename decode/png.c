/*
 * PNG through libspng: every colour type and bit depth comes out as RGB8, the
 * way libspng's SPNG_FMT_RGB8 makes it (alpha and tRNS dropped, nothing
 * composited, as torchvision's read_image with ImageReadMode.RGB; 16-bit
 * samples keep their high byte; palettes expanded). It decodes straight into
 * the scratch the resizer reads, so there is no copy beyond libspng's own.
 *
 * Bombs: the pixel, side and decode-size limits are checked from IHDR
 * before anything is allocated (a 174 KB grey file of 178956970 x 1 pixels
 * took a worker to 715 MB: the RGB image plus libspng's rows);
 * libspng's chunk limits bound what a small file may make it allocate for
 * ancillary chunks (zTXt, iCCP, ...), and it inflates IDAT only as far as
 * the image needs, so a deflate stream that would grow to gigabytes ends at
 * the image's size. PNG has no reduced-scale decode: an image is decoded
 * whole or refused.
 */
#include <errno.h>
#include <string.h>

#include <spng.h>

#include "decode/image.h"

/* Largest ancillary chunk and the sum of cached chunks libspng may hold. */
#define FEEDER__PNG_CHUNK_MAX (8u << 20)
#define FEEDER__PNG_CACHE_MAX (32u << 20)
/* PNG's own limit on each side (2^31 - 1). */
#define FEEDER__PNG_SIDE_MAX 0x7fffffffu

static int png_fail(spng_ctx *ctx, int rc, char *err, size_t errlen, const char *what)
{
    spng_ctx_free(ctx);
    int code = rc == SPNG_EMEM ? -ENOMEM : FEEDER_EDECODE;
    return feeder__fail(err, errlen, code, "PNG: %s: %s", what, spng_strerror(rc));
}

int feeder__png_decode(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                       size_t len, feeder__image *img, char *err, size_t errlen)
{
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx)
        return feeder__fail(err, errlen, -ENOMEM, "PNG: out of memory for a context");
    uint32_t side = FEEDER__PNG_SIDE_MAX;
    if (t->max_pixels && t->max_pixels < side)
        side = (uint32_t)t->max_pixels;
    int rc;
    if ((rc = spng_set_png_buffer(ctx, p, len)) ||
        (rc = spng_set_image_limits(ctx, side, side)) ||
        (rc = spng_set_chunk_limits(ctx, FEEDER__PNG_CHUNK_MAX, FEEDER__PNG_CACHE_MAX)))
        return png_fail(ctx, rc, err, errlen, "setup");
    struct spng_ihdr ih;
    if ((rc = spng_get_ihdr(ctx, &ih)))
        return png_fail(ctx, rc, err, errlen, "header");
    if ((rc = feeder__check_pixels(t, ih.width, ih.height, err, errlen))) {
        spng_ctx_free(ctx);
        return rc;
    }
    /* Gray output of a gray PNG of up to 8 bits: libspng's G8 (the levels
     * its RGB8 repeats three times, so Pillow's L of them is the same), a
     * third of the bytes and no conversion. */
    int gray = feeder__transform_channels(t) == 1 && ih.color_type == SPNG_COLOR_TYPE_GRAYSCALE &&
               ih.bit_depth <= 8;
    enum spng_format fmt = gray ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    size_t size = 0;
    if ((rc = spng_decoded_image_size(ctx, fmt, &size)))
        return png_fail(ctx, rc, err, errlen, "image size");
    if (t->max_pixels && size / 4 > t->max_pixels) {
        spng_ctx_free(ctx);
        return feeder__fail(err, errlen, FEEDER_ETOOBIG,
                            "PNG: decoded image is %zu bytes, over 4 x %llu pixels", size,
                            (unsigned long long)t->max_pixels);
    }
    /* libspng holds the scanline being unfiltered and the one above it,
     * each a row of the file's own samples (up to 8 bytes a pixel). */
    static const uint8_t chans[7] = {1, 0, 3, 1, 2, 0, 4};
    uint64_t row = ((uint64_t)ih.width * chans[ih.color_type % 7] * ih.bit_depth + 7) / 8 + 1;
    if ((rc = feeder__check_image(t, ih.width, ih.height, (uint64_t)size + 2 * row,
                                  "the decoded pixels and two rows of the file's samples", err,
                                  errlen))) {
        spng_ctx_free(ctx);
        return rc;
    }
    if ((rc = feeder__buf_reserve(pix, size))) {
        spng_ctx_free(ctx);
        return feeder__fail(err, errlen, rc, "out of memory for a %ux%u image", ih.width,
                            ih.height);
    }
    if ((rc = spng_decode_image(ctx, pix->p, size, fmt, 0)))
        return png_fail(ctx, rc, err, errlen, "decode");
    spng_ctx_free(ctx);
    img->w = ih.width;
    img->h = ih.height;
    img->channels = gray ? 1 : 3;
    img->stride = (size_t)ih.width * (size_t)img->channels;
    return 0;
}

int feeder__png_whole(feeder__buf *pix, const feeder__transform *t, const uint8_t *p,
                      size_t len, uint64_t seed, uint64_t epoch, uint64_t index,
                      feeder__image *img, feeder__crop *c, char *err, size_t errlen)
{
    int rc = feeder__png_decode(pix, t, p, len, img, err, errlen);
    if (rc == 0)
        feeder__crop_compute(t, img->w, img->h, seed, epoch, index, c);
    return rc;
}

int feeder__png_sniff(const uint8_t *p, size_t len)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    return len >= 8 && memcmp(p, sig, 8) == 0;
}
