/*
 * Resource limits checked when a loader starts, so that a configuration the
 * machine cannot carry fails at once with a message naming the limit, instead
 * of a worker dying mid-epoch.
 *
 * Slot memory. The slots are one memfd. memfd_create and ftruncate succeed
 * for any size (pages are allocated when first written), so nothing fails
 * until a worker writes a page the machine cannot give. Measured on this
 * project's Debian 12 machine (kernel 6.18, docs/RELIABILITY.md has the
 * table): on a tmpfs of fixed size (what /dev/shm is, 64 MiB in Docker by
 * default) fallocate fails cleanly with ENOSPC, MAP_POPULATE reports nothing,
 * MADV_POPULATE_WRITE fails with EFAULT and a write is SIGBUS; but a memfd is
 * not on /dev/shm (it lives on the kernel's internal shmem mount, which has
 * no size limit: /dev/shm's free space does not move when one is filled),
 * and when its pages exceed a memory cgroup's limit, fallocate, MAP_POPULATE,
 * MADV_POPULATE_WRITE and a plain write all end the same way: the OOM killer
 * SIGKILLs the process. No call gives a clean error, so the check is made
 * against the numbers before allocating: the slots must fit in MemAvailable
 * + SwapFree and in every enclosing memory cgroup's limit less its usage
 * (page cache not counted: the kernel reclaims it first). /dev/shm's free
 * space is reported in the message because that is where users look (and
 * where PyTorch's slots live), not compared.
 *
 * Descriptors. Each worker opens every file of a task at once (io_uring
 * submits every open together), on top of what it inherits and its channel,
 * memfd and ring; a worker reading tar shards keeps up to
 * FEEDER__TAR_FDS_MAX of them open across tasks instead; the loader's process
 * holds a channel and a pidfd per worker. EMFILE in the middle of a task
 * would fail every sample of it.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dataset/tar.h"
#include "loader/loader.h"

/* A "Name: N kB" line of /proc/meminfo, in bytes; 0 when missing. */
static int meminfo(const char *name, uint64_t *bytes)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    char line[256];
    size_t n = strlen(name);
    int rc = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long kb;
        if (strncmp(line, name, n) == 0 && line[n] == ':' &&
            sscanf(line + n + 1, "%llu", &kb) == 1) {
            *bytes = (uint64_t)kb * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* One number from a cgroup file; "max" (v2) is UINT64_MAX. */
static int read_u64(const char *dir, const char *file, uint64_t *v)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    FILE *f = fopen(p, "re");
    if (!f)
        return -1;
    char buf[64] = "";
    int rc = fgets(buf, sizeof(buf), f) ? 0 : -1;
    fclose(f);
    if (rc)
        return rc;
    if (strncmp(buf, "max", 3) == 0) {
        *v = UINT64_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (errno || end == buf)
        return -1;
    *v = x;
    return 0;
}

/* The sum of the named keys of a cgroup's memory.stat. */
static uint64_t stat_sum(const char *dir, const char *k1, const char *k2)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/memory.stat", dir);
    FILE *f = fopen(p, "re");
    if (!f)
        return 0;
    char key[128];
    unsigned long long v;
    uint64_t sum = 0;
    while (fscanf(f, "%127s %llu", key, &v) == 2)
        if (strcmp(key, k1) == 0 || strcmp(key, k2) == 0)
            sum += v;
    fclose(f);
    return sum;
}

/* The least room left under any memory cgroup limit that encloses this
 * process: limit - (usage - page cache), walking from its own cgroup up to
 * the hierarchy's root. UINT64_MAX when there is no limit (or no cgroup). */
static uint64_t cgroup_room(uint64_t *limit_out, uint64_t *used_out)
{
    *limit_out = UINT64_MAX;
    *used_out = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return UINT64_MAX;
    char line[4096], base[64] = "", rel[4096] = "";
    int v2 = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *ctrl = c1 + 1;
        if (strcmp(ctrl, "memory") == 0 || strstr(ctrl, "memory,") || strstr(ctrl, ",memory")) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup/memory");
            snprintf(rel, sizeof(rel), "%s", c2 + 1);
            v2 = 0;
            break;
        }
        if (strncmp(line, "0", 1) == 0 && c1 == line + 1 && ctrl[0] == 0) {
            snprintf(base, sizeof(base), "/sys/fs/cgroup");
            snprintf(rel, sizeof(rel), "%s", c2 + 1);
            v2 = 1; /* keep looking: a v1 memory line wins */
        }
    }
    fclose(f);
    if (!base[0])
        return UINT64_MAX;
    /* Inside a container the path is often the host's and not visible; the
     * mount's root is then the container's own cgroup. */
    char dir[4200];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s%s", base, rel);
    if (stat(dir, &st) != 0)
        snprintf(dir, sizeof(dir), "%s", base);
    uint64_t room = UINT64_MAX;
    for (;;) {
        uint64_t limit, usage;
        int ok = v2 ? read_u64(dir, "memory.max", &limit) == 0 &&
                          read_u64(dir, "memory.current", &usage) == 0
                    : read_u64(dir, "memory.limit_in_bytes", &limit) == 0 &&
                          read_u64(dir, "memory.usage_in_bytes", &usage) == 0;
        /* v1 says "no limit" with a page-rounded LONG_MAX. */
        if (ok && limit < ((uint64_t)1 << 62)) {
            uint64_t cache = v2 ? stat_sum(dir, "inactive_file", "active_file")
                                : stat_sum(dir, "total_inactive_file", "total_active_file");
            uint64_t used = usage > cache ? usage - cache : 0;
            uint64_t r = limit > used ? limit - used : 0;
            if (r < room) {
                room = r;
                *limit_out = limit;
                *used_out = used;
            }
        }
        if (strlen(dir) <= strlen(base))
            break;
        char *slash = strrchr(dir, '/');
        if (!slash || slash <= dir + strlen(base))
            snprintf(dir, sizeof(dir), "%s", base);
        else
            *slash = 0;
    }
    return room;
}

uint64_t feeder__memory_room(void)
{
    uint64_t avail, limit, used;
    uint64_t room = meminfo("MemAvailable", &avail) == 0 ? avail : UINT64_MAX;
    uint64_t cg = cgroup_room(&limit, &used);
    return cg < room ? cg : room;
}

/* A file larger than memory read through the mapping faults its pages in
 * one by one and the page cache evicts what the next epoch needs; O_DIRECT
 * reads each task's records at the disk's rate in either order (a 1.5 GB
 * pack in a 1 GiB cgroup, 8 workers: DIRECT 1.75 GB/s shuffled, 2.0 in file
 * order, URING 1.0-1.2, MMAP 0.44 shuffled; docs/BENCHMARKS.md). Half the
 * room leaves the rest to the slots, the workers and the training itself. */
int feeder__packed_read_auto(uint64_t file_bytes, uint64_t room, int shards, int direct_ok)
{
    if (shards || file_bytes <= room / 2)
        return FEEDER_PACKED_READ_MMAP;
    return direct_ok ? FEEDER_PACKED_READ_DIRECT : FEEDER_PACKED_READ_URING;
}

int feeder__check_slot_memory(uint32_t slots, size_t slot_bytes, char *msg, size_t msglen)
{
    uint64_t need = (uint64_t)slots * slot_bytes; /* the caller checked the product */
    uint64_t avail = 0, swap = 0, limit, used;
    int have_mem = meminfo("MemAvailable", &avail) == 0;
    if (have_mem && meminfo("SwapFree", &swap) != 0)
        swap = 0;
    uint64_t mem_room = have_mem ? avail + swap : UINT64_MAX;
    uint64_t cg_room = cgroup_room(&limit, &used);
    if (need <= mem_room && need <= cg_room)
        return 0;
    struct statvfs sv;
    char shm[96] = "/dev/shm cannot be read";
    if (statvfs("/dev/shm", &sv) == 0)
        feeder__fmt(shm, sizeof(shm), "/dev/shm has %" PRIu64 " free",
                    (uint64_t)sv.f_bavail * sv.f_frsize);
    char why[200];
    if (cg_room < mem_room)
        feeder__fmt(why, sizeof(why),
                    "the memory cgroup's limit is %" PRIu64 " with %" PRIu64
                    " in use (page cache not counted): %" PRIu64 " left",
                    limit, used, cg_room);
    else
        feeder__fmt(why, sizeof(why),
                    "MemAvailable %" PRIu64 " + SwapFree %" PRIu64 " = %" PRIu64, avail, swap,
                    mem_room);
    feeder__fmt(msg, msglen,
                "batch slots need %" PRIu64 " bytes (%u slots x %zu bytes), more than the memory "
                "that can back them: %s; %s (the slots are a memfd, so /dev/shm's size does not "
                "bound them); lower batch_size, prefetch_factor or num_workers",
                need, slots, slot_bytes, why, shm);
    return FEEDER_ELIMIT;
}

/* Descriptors open in this process now (the directory's own not counted). */
static int open_fds(uint64_t *n)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    uint64_t k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        k += e->d_name[0] != '.';
    closedir(d);
    *n = k ? k - 1 : 0;
    return 0;
}

/* What a reader (a worker, or the calling thread without workers) holds open
 * at once besides what it inherits, and what to call it in the message: a
 * tar dataset's shards stay open across tasks, up to FEEDER__TAR_FDS_MAX of
 * them; any other dataset opens every file of a task together. */
static uint32_t reader_files(const feeder_dataset *ds, int workers, uint32_t files_per_task,
                             const char **what)
{
    if (ds && ds->kind == FEEDER__DS_TAR) {
        uint32_t n = ds->tar->nshards;
        *what = "tar shards kept open";
        return n < FEEDER__TAR_FDS_MAX ? n : FEEDER__TAR_FDS_MAX;
    }
    *what = workers ? "files of a task opened at once" : "files opened at once";
    return files_per_task;
}

int feeder__check_nofile(const feeder_dataset *ds, int workers, uint32_t files_per_task,
                         char *msg, size_t msglen)
{
    struct rlimit rl;
    uint64_t open_now;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        open_fds(&open_now) != 0)
        return 0;
    const char *what;
    uint32_t files = reader_files(ds, workers, files_per_task, &what);
    int tar = ds && ds->kind == FEEDER__DS_TAR; /* a smaller batch does not help */
    /* The loader's process: a channel and a pidfd per worker, the memfd,
     * and a moment's socketpair end and io_uring probe at start. A worker:
     * what it inherits (less other workers' descriptors, which it closes),
     * its channel, the memfd until mapped, its ring, and the files it reads
     * from. Without workers the calling thread reads. */
    uint64_t parent = open_now + 2 * (uint64_t)workers + 3;
    uint64_t worker = open_now + 3 + files;
    uint64_t need = workers ? (parent > worker ? parent : worker) : worker;
    if (need <= rl.rlim_cur)
        return 0;
    char hard[32] = "unlimited";
    if (rl.rlim_max != RLIM_INFINITY)
        feeder__fmt(hard, sizeof(hard), "%llu", (unsigned long long)rl.rlim_max);
    if (workers)
        feeder__fmt(msg, msglen,
                    "RLIMIT_NOFILE is %llu (hard limit %s), too low: the loader's process needs "
                    "%" PRIu64 " descriptors (%" PRIu64 " open + 2 for each of %d workers + 3) "
                    "and each worker %" PRIu64 " (%" PRIu64 " inherited + 3 + %u %s); raise it "
                    "(ulimit -n, setrlimit)%s",
                    (unsigned long long)rl.rlim_cur, hard, parent, open_now, workers, worker,
                    open_now, files, what, tar ? "" : " or lower batch_size / raise split");
    else
        feeder__fmt(msg, msglen,
                    "RLIMIT_NOFILE is %llu (hard limit %s), too low: reading a batch needs "
                    "%" PRIu64 " descriptors (%" PRIu64 " open + 3 + %u %s); raise it (ulimit "
                    "-n, setrlimit)%s",
                    (unsigned long long)rl.rlim_cur, hard, worker, open_now, files, what,
                    tar ? "" : " or lower batch_size");
    return FEEDER_ELIMIT;
}
