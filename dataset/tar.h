/*
 * dataset/tar.h: WebDataset tar shards. The header walk and the index
 * (tar_index.c: pure functions over a byte source, the fuzz target's entry),
 * the dataset over a shard set (tar.c). The worker room reads each sample's
 * image member from here (worker/tar_read.c).
 */
#ifndef FEEDER_DATASET_TAR_H
#define FEEDER_DATASET_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "remote/remote.h"

/* One sample of a shard: a key and what its members gave. */
typedef struct feeder__tar_entry {
    uint64_t off;   /* the image member's data, in the shard */
    uint64_t len;
    int64_t label;  /* from the .cls member; -1 when the sample is bad and has none */
    uint32_t name;  /* into names: "key\0detail\0"; detail is the image member's
                       extension, or for a bad sample what is wrong */
    uint32_t bad;   /* 0, or 1: the sample fails when loaded, with detail as message */
} feeder__tar_entry;

/* A shard's samples, in member order. */
typedef struct feeder__tar_index {
    feeder__tar_entry *e;
    uint64_t n, cap;
    char *names;
    size_t names_len, names_cap;
} feeder__tar_index;

void feeder__tar_index_free(feeder__tar_index *ix);

/* Where the header walk reads: a file (pread) or a buffer (the fuzz target).
 * read() fills `len` bytes at `off` and returns how many it got (short only
 * at the end of the source) or -errno. */
typedef struct feeder__tar_src {
    long (*read)(void *ctx, uint64_t off, uint8_t *dst, size_t len);
    void *ctx;
    uint64_t size; /* the shard's size in bytes */
} feeder__tar_src;

/* Longest GNU long name or pax header the walk takes. */
#define FEEDER__TAR_META_MAX (64u * 1024u)

/* Walk the headers of a tar (POSIX ustar, GNU long names, pax 'path' and
 * 'size' records) and group its members into samples (dataset/tar.c's rules;
 * docs/FORMAT.md). Damage inside the shard (a bad header checksum after the
 * first member, a member running past the end) ends the walk with a bad
 * sample that says so; a first header that is no tar header fails with
 * FEEDER_EDATASET. `shard` names the file in messages. 0, FEEDER_EDATASET,
 * -errno from read(), or -ENOMEM; `out` is freed on failure. Never reads
 * outside [0, src->size). */
int feeder__tar_scan(const feeder__tar_src *src, const char *shard, feeder__tar_index *out,
                     char *err, size_t errlen);

/* Every member of a shard, for a reader of more than the image and the label
 * (feeder-pack --mode fields): `out` gets one entry per regular member whose
 * basename has a key (as feeder__tar_scan splits it), in member order, named
 * "key\0ext\0", with off and len its data (label and bad 0); folders and
 * names without a key are left out. Damage anywhere (a header with a bad
 * checksum or size, a member or header cut short by the end of the shard, a
 * malformed pax or long-name header, a member that is a link, a device or a
 * FIFO) fails with FEEDER_EDATASET and a message naming the shard and the
 * first damage met: no member list of a damaged shard is handed out. A first
 * header that is no tar header, read errors and -ENOMEM as feeder__tar_scan;
 * `out` is freed on failure. */
int feeder__tar_members(const feeder__tar_src *src, const char *shard, feeder__tar_index *out,
                        char *err, size_t errlen);

/* The cache file beside a shard (docs/FORMAT.md, "Tar shard index"). */
#define FEEDER__TAR_IDX_MAGIC "FDTARIDX"
#define FEEDER__TAR_IDX_VERSION 1u
#define FEEDER__TAR_IDX_HEADER 64u
#define FEEDER__TAR_IDX_ENTRY 32u

/* Serialise `ix` for a shard of `size` bytes last modified at `mtime_ns`:
 * *buf (malloc'd) of *len bytes. 0 or -ENOMEM / FEEDER_EOVERFLOW. */
int feeder__tar_index_encode(const feeder__tar_index *ix, uint64_t size, int64_t mtime_ns,
                             uint8_t **buf, size_t *len);

/* Parse a cache file: 0 and `out` filled when it is whole (magic, version,
 * CRC32C, every entry and name inside it, every data stretch inside the
 * shard) and made for a shard of exactly `size` bytes and `mtime_ns`;
 * otherwise FEEDER_EFORMAT with the reason in `err` (the caller rescans). */
int feeder__tar_index_decode(const uint8_t *buf, size_t len, uint64_t size, int64_t mtime_ns,
                             feeder__tar_index *out, char *err, size_t errlen);

/* The key and the detail of entry `i`. */
static inline const char *feeder__tar_key(const feeder__tar_index *ix, uint64_t i)
{
    return ix->names + ix->e[i].name;
}
static inline const char *feeder__tar_detail(const feeder__tar_index *ix, uint64_t i)
{
    const char *k = ix->names + ix->e[i].name;
    while (*k)
        k++;
    return k + 1;
}

/* Parse a cache file made for any modification time (mtime_ns argument):
 * a server's <shard>.idx, whose shard's local mtime means nothing here. */
#define FEEDER__TAR_MTIME_ANY INT64_MIN

/* A tar dataset's shards and samples (feeder_dataset.tar). A URL's shard
 * (remote 1) is read from the shard cache's copy, checked against `meta`,
 * the size and ETag seen at open. */
typedef struct feeder__tar_shard {
    char *path;            /* a path or a URL */
    uint64_t size;
    uint64_t first;        /* the dataset index of its first sample */
    feeder__tar_index ix;
    int cached;            /* 1: the index came from an .idx file; 2: written */
    int remote;
    feeder__remote_meta meta;
} feeder__tar_shard;

/* The most shards a reader keeps open at once (a worker, or the calling
 * thread without workers); the loader's RLIMIT_NOFILE check at start counts
 * them (loader/limits.c). */
#define FEEDER__TAR_FDS_MAX 32u

typedef struct feeder__tar {
    feeder__tar_shard *shards;
    uint32_t nshards;
    uint32_t *shard_of; /* each sample's shard */
    feeder__cache *cache; /* the shard cache, when any shard is a URL */
    uint32_t fetch_ahead; /* shards fetched ahead (feeder__ahead_shards): 0 for none */
    feeder__ahead *fetch; /* the fetch-ahead threads (parent only), or NULL */
} feeder__tar;

/* feeder_dataset_open_tar with the shard cache's options (`opt` may be
 * NULL): feeder_dataset_open_shards's entry for .tar names. */
int feeder__tar_open(const char *const *paths, size_t count, const feeder_shard_options *opt,
                     feeder_dataset **out, char *err, size_t errlen);

void feeder__tar_free(feeder__tar *t);

/* Fetch ahead, the loader's hooks as for packs (feeder__shards_plan in
 * dataset/pack.h; remote/ahead.c): plan gives the epoch's order (NULL/0
 * stops fetching), progress the positions handed out. URL shards are
 * downloaded into the shard cache up to fetch_ahead shards past the
 * loader's; the workers then open the cached copies. No-ops without URL
 * shards or with fetch_ahead 0. Parent process only. */
void feeder__tar_plan(feeder__tar *t, const uint64_t *order, uint64_t len);
void feeder__tar_progress(feeder__tar *t, uint64_t pos);
/* As feeder__shards_settled, for tar shards. */
int feeder__tar_settled(const feeder__tar *t);

/* Sample `index`'s shard and its entry there. */
static inline const feeder__tar_shard *feeder__tar_sample(const feeder__tar *t, uint64_t index,
                                                          uint64_t *entry)
{
    const feeder__tar_shard *s = &t->shards[t->shard_of[index]];
    *entry = index - s->first;
    return s;
}

#endif
