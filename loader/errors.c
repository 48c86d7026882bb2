/*
 * The loader's error message, and the process it belongs to: what every
 * other file of the room reports through.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "loader/host.h"

int feeder__loader_fail(const feeder_loader *cld, int rc, const char *fmt, ...)
{
    /* The message is the loader's only mutable part a const call touches. */
    feeder_loader *ld = (feeder_loader *)cld;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->errmsg, sizeof(ld->errmsg), fmt, ap);
    va_end(ap);
    return rc;
}

int feeder__loader_forked(const feeder_loader *ld)
{
    if (ld->owner == getpid())
        return 0;
    return feeder__loader_fail(ld, FEEDER_EFORKED,
                               "this loader belongs to process %d; a loader cannot be used in a "
                               "process forked from the one that created it (make a new loader "
                               "in the child)",
                               (int)ld->owner);
}

const char *feeder_loader_errmsg(const feeder_loader *ld)
{
#if FEEDER__CHECK_HANDLES
    /* A destroyed loader's memory is not read: the refusal's message. */
    if (!ld || !feeder__handle_loader_live(ld))
        return feeder__handle_misuse_msg();
#endif
    return ld ? ld->errmsg : "";
}

void feeder__loader_clear_error(feeder_loader *ld) { ld->errmsg[0] = 0; }
