/*
 * The loader object's creation, and its trace.
 */
#include <errno.h>
#include <pthread.h>
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
    ld->decided.io_backend = "";
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
