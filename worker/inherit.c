/*
 * What a new worker lets go of from the loader's process: every descriptor
 * it does not use. A worker of a folder, list or packed dataset keeps only
 * its channel, the slot memfd (until mapped) and the packed file; everything
 * else the process had open (other loaders' memfds, channels and pidfds, the
 * user's files and sockets, a GPU driver's device files) is closed, so no
 * worker holds another loader's memory or descriptors alive. A user
 * dataset's callbacks may use the process's descriptors, so its workers
 * close only the loaders' own (the registry the pool hands over).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "worker/worker.h"
#include "dataset/pack.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* Close [lo, hi]; close_range (Linux 5.9) in one call, else one by one up to
 * the descriptor limit. */
static void close_span(int lo, int hi)
{
    if (lo > hi)
        return;
    if (syscall(SYS_close_range, (unsigned)lo, (unsigned)hi, 0u) == 0)
        return;
    struct rlimit rl;
    long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (long)rl.rlim_cur - 1
                   : 65535;
    if (top > hi)
        top = hi;
    for (long fd = lo; fd <= top; fd++)
        close((int)fd);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int is_kept(int fd, const int *keep, int nkeep)
{
    for (int i = 0; i < nkeep; i++)
        if (keep[i] == fd)
            return 1;
    return 0;
}

void feeder__worker_close_inherited(const feeder__job *job, int chan, const int *close_fds,
                                    int nclose)
{
    const feeder_dataset *ds = job->ds;
    int keep[4] = {chan, job->memfd, job->pack_fd,
                   ds->kind == FEEDER__DS_PACKED ? ds->pack->fd : -1};
    const int nkeep = 4;
    if (ds->kind == FEEDER__DS_USER) {
        for (int i = 0; i < nclose; i++)
            if (close_fds[i] > 2 && !is_kept(close_fds[i], keep, nkeep))
                close(close_fds[i]);
        return;
    }
    /* Everything above stderr but the kept ones: the gaps between them. */
    qsort(keep, nkeep, sizeof(keep[0]), cmp_int);
    int lo = 3;
    for (int i = 0; i < nkeep; i++) {
        if (keep[i] < lo)
            continue;
        close_span(lo, keep[i] - 1);
        lo = keep[i] + 1;
    }
    close_span(lo, ~0u >> 1);
}
