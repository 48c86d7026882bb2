/*
 * remote/: what cache.c (the folder, the landed copies, eviction, the retry
 * budget) and download.c (a download into it, read while it arrives)
 * share. Private to the room; remote.h is what the rest of the library
 * uses.
 */
#ifndef FEEDER_REMOTE_CACHE_H
#define FEEDER_REMOTE_CACHE_H

#include "remote/remote.h"

/* Every cache file is made with these: never through a link planted in
 * its place, never over a file that is there. */
#define CREATE_FLAGS (O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

/* The cached copy `data` of `url`, when it is whole and what `expect`
 * (NULL: any) asks for, and one file or `striped_ok`: opened into *out
 * (0); otherwise nonzero. */
int feeder__cache_open_copy(const char *data, const char *url, const feeder__remote_meta *expect,
                            int striped_ok, feeder__shard *out);
/* Stripe j (1 ..) of the copy or partial copy `base`: "<base>.s<j>"
 * (stripe 0 is `base` itself). */
void feeder__stripe_name(const char *base, uint32_t j, char *out, size_t len);
/* Open `base` and its stripes 1 .. n-1, each a regular file of its
 * stripe's bytes (feeder__stripe_bytes of size and chunk), read-only into
 * s's fd, stripe_fd, stripes and stripe_chunk (its other fields as they
 * were): 0; else -1 with none left open (fd -1). The whole copy's and the
 * partial copy's readers both open them so. */
int feeder__stripes_open(const char *base, uint64_t size, uint64_t chunk, uint32_t n,
                         feeder__shard *s);
/* Remove stripes `from` (at least 1) and up of `base`, those that are
 * there. */
void feeder__cache_unlink_stripes(const char *base, uint32_t from);
/* The bytes stripe j holds of a copy of `size` bytes kept as n stripes
 * of `chunk`-byte units. Pure. */
uint64_t feeder__stripe_bytes(uint64_t size, uint64_t chunk, uint32_t n, uint32_t j);
/* Whether `expect` (size; ETag when both are known; NULL: anything)
 * matches `m`. */
int feeder__cache_meta_matches(const feeder__remote_meta *expect, const feeder__remote_meta *m);
/* Write the .meta of `url` at `path` (a copy kept as `stripes` files of
 * `chunk`-byte units when stripes > 1): 0 or an error. */
int feeder__cache_meta_write(const char *path, const char *url, const feeder__remote_meta *m,
                             uint32_t stripes, uint64_t chunk);
/* Remove least recently used shards nobody holds, never `keep`, until
 * `need` more bytes fit under the limit (or nothing more can go). */
void feeder__cache_evict(const feeder__cache *c, uint64_t need, const char *keep);
/* Remove what crashes left: the temporary files of downloads that died
 * (over a minute old, their process gone) or were left (over ten minutes
 * old), and landed stripes of no whole copy. */
void feeder__cache_sweep(const char *dir);
/* The retry budget (cache.c): nonzero, with `err` set, when `url`'s
 * download failed since the dataset was opened; record a failure. */
int feeder__cache_failed_before(const feeder__cache *c, const char *url, const char *data,
                                char *err, size_t errlen);
void feeder__cache_remember_failure(feeder__cache *c, const char *url, const char *data, int rc,
                                    const char *msg);

#endif
