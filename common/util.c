/* The clock, message formatting and rounding every room uses. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

static void vfmt(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (buf && len)
        vsnprintf(buf, len, fmt, ap);
}

void feeder__fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfmt(buf, len, fmt, ap);
    va_end(ap);
}

int feeder__fail(char *buf, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfmt(buf, len, fmt, ap);
    va_end(ap);
    return rc;
}

uint64_t feeder__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

long feeder__pread_full(int fd, uint64_t off, void *dst, size_t len)
{
    uint8_t *d = dst;
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, d + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (long)got;
}

double feeder__round_half_even(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5)
        return f + 1.0;
    if (d < 0.5)
        return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}
