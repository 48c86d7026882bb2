/*
 * bench/benchutil_files.c: whole files, folders, time and hashes for the
 * benchmarks and tests (benchutil.h's second section): write, read, mkdir
 * -p and rm -rf; the monotonic clock; FNV-1a and XXH64 checksums; the CPU
 * time of a process (/proc/PID/stat) and of this one or its reaped children
 * (getrusage).
 */
#include "benchutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int bu_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            return e;
        }
        p += n;
        len -= (size_t)n;
    }
    return close(fd) ? -errno : 0;
}

int bu_read_file(const char *path, uint8_t **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    *data = buf;
    *len = got;
    return 0;
}

int bu_mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *s = tmp + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -errno;
            *s = '/';
        }
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

void bu_rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            bu_rm_rf(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

int bu_stamp_matches(const char *dir, const char *want)
{
    char stamp[4200];
    snprintf(stamp, sizeof(stamp), "%s/.complete", dir);
    uint8_t *have;
    size_t hl;
    if (bu_read_file(stamp, &have, &hl) != 0)
        return -1;
    int same = hl == strlen(want) && memcmp(have, want, hl) == 0;
    free(have);
    return same;
}

int bu_stamp_write(const char *dir, const char *want)
{
    char stamp[4200];
    snprintf(stamp, sizeof(stamp), "%s/.complete", dir);
    return bu_write_file(stamp, want, strlen(want));
}

uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bu_hash(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* XXH64 (Yann Collet's reference algorithm). Loads go through memcpy, so any
 * alignment is fine; the words are read in the host's byte order, which is
 * little-endian on every machine this project targets. */
#define BU_P1 11400714785074694791ull
#define BU_P2 14029467366897019727ull
#define BU_P3 1609587929392839161ull
#define BU_P4 9650029242287828579ull
#define BU_P5 2870177450012600261ull

static inline uint64_t bu_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t bu_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t bu_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t bu_xxround(uint64_t acc, uint64_t in)
{
    acc += in * BU_P2;
    acc = bu_rotl64(acc, 31);
    return acc * BU_P1;
}

static inline uint64_t bu_xxmerge(uint64_t acc, uint64_t v)
{
    acc ^= bu_xxround(0, v);
    return acc * BU_P1 + BU_P4;
}

uint64_t bu_hash64(uint64_t seed, const void *data, size_t len)
{
    const uint8_t *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + BU_P1 + BU_P2, v2 = seed + BU_P2, v3 = seed, v4 = seed - BU_P1;
        const uint8_t *limit = end - 32;
        do {
            v1 = bu_xxround(v1, bu_rd64(p));
            v2 = bu_xxround(v2, bu_rd64(p + 8));
            v3 = bu_xxround(v3, bu_rd64(p + 16));
            v4 = bu_xxround(v4, bu_rd64(p + 24));
            p += 32;
        } while (p <= limit);
        h = bu_rotl64(v1, 1) + bu_rotl64(v2, 7) + bu_rotl64(v3, 12) + bu_rotl64(v4, 18);
        h = bu_xxmerge(h, v1);
        h = bu_xxmerge(h, v2);
        h = bu_xxmerge(h, v3);
        h = bu_xxmerge(h, v4);
    } else {
        h = seed + BU_P5;
    }
    h += (uint64_t)len;
    while (p + 8 <= end) {
        h ^= bu_xxround(0, bu_rd64(p));
        h = bu_rotl64(h, 27) * BU_P1 + BU_P4;
        p += 8;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)bu_rd32(p) * BU_P1;
        h = bu_rotl64(h, 23) * BU_P2 + BU_P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p++) * BU_P5;
        h = bu_rotl64(h, 11) * BU_P1;
    }
    h ^= h >> 33;
    h *= BU_P2;
    h ^= h >> 29;
    h *= BU_P3;
    h ^= h >> 32;
    return h;
}

int64_t bu_proc_cpu_ns(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and parentheses: fields
     * are counted from the last ')'. utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut, st;
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long tck = sysconf(_SC_CLK_TCK);
    return (int64_t)((ut + st) * (1000000000ull / (unsigned long long)(tck > 0 ? tck : 100)));
}

uint64_t bu_rusage_cpu_ns(int children)
{
    struct rusage ru;
    if (getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}
