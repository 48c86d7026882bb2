/*
 * Helpers the Check suites share: small image folders cut from the bundled
 * photos, and opening them. Each helper asserts (Check) on failure, so it is
 * for use inside a test only.
 */
#ifndef FEEDER_TESTS_TESTUTIL_H
#define FEEDER_TESTS_TESTUTIL_H

#include <stdint.h>

#include "benchutil.h"
#include "feeder.h"

/* The fixture most suites share, for tcase_add_checked_fixture(tc, tu_setup,
 * tu_teardown): tu_dir, a fresh folder /tmp/feeder-<program>-XXXXXX, and
 * tu_photos, the bundled photos. */
extern char tu_dir[256];
extern bu_photos *tu_photos;
void tu_setup(void);
/* tu_setup with the folder under `parent` (e.g. /var/tmp, on disk, where
 * O_DIRECT works), or under /tmp when `parent` has no room for it. */
void tu_setup_in(const char *parent);
void tu_teardown(void);
/* tu_dir/rel, into buf of len bytes. */
void tu_path(char *buf, size_t len, const char *rel);
/* The suites' usual folder: tu_make_folder(tu_photos, tu_dir, rel, classes,
 * per, "c", 160, 140, 120, 160). */
void tu_folder(const char *rel, int classes, int per);

/* An image folder under dir/rel: `classes` sub-folders named prefix0,
 * prefix1, ..., each with `per` JPEGs (000.jpg ...) of quality 85, sized
 * w0 + (c*37 + i*53) % wspan by h0 + (c*29 + i*71) % hspan, each cut from
 * photo c*per + i with seed c*1000 + i: every test that uses the same
 * arguments gets the same bytes. */
void tu_make_folder(const bu_photos *photos, const char *dir, const char *rel, int classes,
                    int per, const char *prefix, uint32_t w0, uint32_t wspan, uint32_t h0,
                    uint32_t hspan);

/* feeder_dataset_open_folder(dir/rel), asserting it succeeds. */
feeder_dataset *tu_open_folder(const char *dir, const char *rel);

/* How many of this process's threads are named `name` (/proc/self/task/N/comm). */
int tu_threads_named(const char *name);

/* A loader of `workers` workers and batches of `batch`, eval pipeline at
 * 32x32 (resize 40), asserting every option is taken. */
feeder_loader *tu_small_loader(feeder_dataset *ds, int workers, int batch);

/* A RAW NHWC packed file of n records of hgt x wid x channels bytes at
 * `path` in format `version` (record i: byte j is (i * 7 + j) & 0xff, label
 * i % 4); its header in *out (the section offsets). Returns the file's size. */
struct feeder__pack_header;
size_t tu_write_raw_pack_ch(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                            uint32_t channels, uint32_t version, struct feeder__pack_header *out);
/* tu_write_raw_pack_ch of 3 channels. */
size_t tu_write_raw_pack(const char *path, uint64_t n, uint32_t hgt, uint32_t wid,
                         uint32_t version, struct feeder__pack_header *out);

/* A tar archive built in memory, ustar headers, for the tar tests. */
typedef struct tu_tar {
    uint8_t *b;
    size_t len, cap;
} tu_tar;
/* n zero bytes at the end; where they start. */
uint8_t *tu_tar_grow(tu_tar *t, size_t n);
/* A header's checksum field, from its other bytes. */
void tu_tar_checksum(uint8_t *h);
/* One header and its data, whose size field says `size` (it may claim more
 * than the `len` bytes given); the header's offset. */
size_t tu_tar_member_sized(tu_tar *t, const char *name, char type, const void *data, size_t len,
                           uint64_t size);
size_t tu_tar_member(tu_tar *t, const char *name, char type, const void *data, size_t len);

#endif
