/*
 * The loader object: its creation, the process it belongs to, its error
 * message and its trace.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/trace.h"
#include "loader/host.h"

int feeder_loader_create(feeder_dataset *ds, feeder_sampler *sampler, feeder_loader **out)
{
    if (!ds || !out)
        return FEEDER_EINVAL;
    feeder_loader *ld = calloc(1, sizeof(*ld));
    if (!ld)
        return -ENOMEM;
    ld->ds = ds;
    feeder__dataset_hold(ds);
    ld->sampler = sampler;
    feeder__options_init(ld);
    ld->io_backend = "";
    ld->owner = getpid();
    ld->job.memfd = -1;
    ld->job.pack_fd = -1;
    pthread_mutex_init(&ld->stats_lock, NULL);
#if FEEDER__CHECK_HANDLES
    feeder__handle_add_loader(ld);
#endif
    *out = ld;
    return 0;
}

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

int feeder_loader_trace_flush(feeder_loader *ld)
{
    if (!ld)
        return FEEDER_EINVAL;
    ld->errmsg[0] = 0;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    if (!ld->trace)
        return feeder__loader_fail(ld, FEEDER_ESTATE, "feeder_loader_trace_flush: %s",
                    ld->trace_path ? "the loader has not started" : "no trace was set");
    char err[sizeof(ld->errmsg)];
    int rc = feeder__trace_write(ld->trace, err, sizeof(err));
    return rc ? feeder__loader_fail(ld, rc, "%s", err) : 0;
}

feeder__trace *feeder__loader_trace(const feeder_loader *ld) { return ld ? ld->trace : NULL; }
