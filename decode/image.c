/* The error exit every decoder shares, and the pixel-limit check of the
 * whole-image decoders. */
#include <stdarg.h>
#include <stdio.h>

#include "decode/image.h"

int feeder__decode_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int feeder__check_pixels(const feeder__transform *t, uint32_t w, uint32_t h, char *err,
                         size_t errlen)
{
    uint64_t n = (uint64_t)w * h;
    if (n == 0)
        return feeder__decode_fail(err, errlen, FEEDER_EDECODE, "image has no pixels (%ux%u)",
                                   w, h);
    if (t->max_pixels && n > t->max_pixels)
        return feeder__decode_fail(err, errlen, FEEDER_ETOOBIG,
                                   "image is %ux%u = %llu pixels, over the limit of %llu", w, h,
                                   (unsigned long long)n, (unsigned long long)t->max_pixels);
    return 0;
}
