/*
 * What the entry points, the GPU layer and the user read of a loader (and
 * the one share the GPU layer sets): each a field of the started loader.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "loader/host.h"

const feeder__job *feeder__loader_job(const feeder_loader *ld) { return &ld->job; }

const feeder__slot_layout *feeder__loader_layout(const feeder_loader *ld) { return &ld->job.layout; }

uint8_t *feeder__loader_mem(const feeder_loader *ld, size_t *bytes)
{
    *bytes = ld->shm.slots_bytes; /* not the live page after them */
    return ld->shm.mem;
}

uint32_t feeder__loader_nslots(const feeder_loader *ld) { return ld->shm.nslots; }

int64_t feeder__loader_status_batch(const feeder_loader *ld) { return ld->flow.status_batch; }

uint64_t feeder__loader_epoch(const feeder_loader *ld) { return ld->flow.epoch; }

uint32_t feeder__loader_first_cpu_share(const feeder_loader *ld)
{
    return ld->job.t.decoder == FEEDER_DECODER_HYBRID ? 100 : 0;
}

void feeder__loader_set_cpu_share(feeder_loader *ld, uint32_t permille)
{
    if (permille > 1000)
        permille = 1000;
    /* The GPU layer sets it once the slots are mapped; the workers read it
     * as it is now. */
    if (ld->shm.live)
        atomic_store_explicit(&ld->shm.live->cpu_permille, permille, memory_order_relaxed);
    pthread_mutex_lock(&ld->stats_lock);
    ld->stats.hybrid_cpu_permille = permille;
    pthread_mutex_unlock(&ld->stats_lock);
}

uint64_t feeder__loader_work_ns(feeder_loader *ld, uint32_t *workers)
{
    *workers = ld->pool.running ? (uint32_t)ld->pool.nworkers : 0;
    pthread_mutex_lock(&ld->stats_lock);
    uint64_t ns = ld->stats.read_ns + ld->stats.decode_ns + ld->stats.transform_ns;
    pthread_mutex_unlock(&ld->stats_lock);
    return ns;
}

feeder__loader_gpu *feeder__loader_gpu_part(feeder_loader *ld) { return &ld->gpu.layer; }

const feeder__loader_gpu *feeder__loader_gpu_view(const feeder_loader *ld) { return &ld->gpu.layer; }

const char *feeder_loader_io_backend(const feeder_loader *ld, const char **reason)
{
    if (reason)
        *reason = ld ? ld->decided.io_reason : "";
    return ld ? ld->decided.io_backend : "";
}

int feeder_loader_worker_pid(const feeder_loader *ld, int id)
{
    /* A forked child has no workers: those pids are its parent's. */
    if (!ld || !ld->pool.running || id < 0 || id >= ld->pool.nworkers || ld->owner != getpid())
        return -1;
    return ld->pool.workers[id].pid;
}

void feeder__host_stats(const feeder_loader *ld, feeder_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&ld->stats_lock);
    *st = ld->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&ld->stats_lock);
}

size_t feeder__host_skipped(const feeder_loader *ld, uint64_t *indices, const char **paths,
                            size_t cap, uint64_t *total)
{
    pthread_mutex_lock((pthread_mutex_t *)&ld->stats_lock);
    size_t n = ld->nbad < cap ? ld->nbad : cap;
    for (size_t k = 0; k < n; k++) {
        if (indices)
            indices[k] = ld->bad[k];
        if (paths)
            paths[k] = feeder_dataset_path(ld->ds, ld->bad[k]);
    }
    if (total)
        *total = ld->stats.skipped + ld->stats.dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&ld->stats_lock);
    return n;
}
