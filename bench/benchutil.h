/*
 * Shared by the benchmarks and the tests: realistic JPEG datasets made from
 * the real photos in bench/photos (random crops, sizes and qualities of real
 * photos decode like real training data; synthetic noise does not).
 */
#ifndef FEEDER_BENCHUTIL_H
#define FEEDER_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Decoded photos, loaded once. */
typedef struct bu_photos bu_photos;
int bu_photos_load(const char *dir, bu_photos **out, char *err, size_t errlen);
void bu_photos_free(bu_photos *p);
unsigned bu_photos_count(const bu_photos *p);

/* Encode a w x h JPEG cut from photo `photo` (mod count) at a crop position
 * and scale chosen by `seed`, with `quality` (1..100) and TurboJPEG
 * subsampling `subsamp` (TJSAMP_*; -1 picks 4:2:0) into a malloc'd buffer. */
int bu_make_jpeg(const bu_photos *p, unsigned photo, uint32_t w, uint32_t h, int quality,
                 int subsamp, uint64_t seed, uint8_t **jpeg, size_t *len);
/* Same, written to `path`. */
int bu_write_jpeg(const bu_photos *p, const char *path, unsigned photo, uint32_t w, uint32_t h,
                  int quality, int subsamp, uint64_t seed);

/* Make an ImageFolder dataset under `dir`: `classes` folders class_00.., each
 * with `per_class` JPEGs of ImageNet-like size (short side 256-512, aspect
 * 3:4..4:3) and quality (75-95), all chosen from `seed`. Skips the work when
 * `dir`/.complete records the same parameters. `progress` draws a bar on
 * stderr. Returns 0 or -errno. */
int bu_make_dataset(const bu_photos *p, const char *dir, unsigned classes, unsigned per_class,
                    uint64_t seed, int progress);

/* Write a whole file; read a whole file (malloc'd). 0 or -errno. */
int bu_write_file(const char *path, const void *data, size_t len);
int bu_read_file(const char *path, uint8_t **data, size_t *len);
/* mkdir -p. 0 or -errno. */
int bu_mkdirs(const char *path);
/* rm -rf. */
void bu_rm_rf(const char *path);

/* Monotonic clock in ns. */
uint64_t bu_now_ns(void);
/* 64-bit FNV-1a, chained through `h` (start with BU_HASH_INIT). */
#define BU_HASH_INIT 0xcbf29ce484222325ull
uint64_t bu_hash(uint64_t h, const void *data, size_t len);
/* XXH64 of `data` with `seed` (the reference algorithm, reading words in
 * little-endian order): ~10 GB/s, against FNV-1a's ~1 GB/s, so hashing every
 * delivered pixel does not dominate a benchmark. Chain by passing the previous
 * result as the seed (start with 0). */
uint64_t bu_hash64(uint64_t seed, const void *data, size_t len);

#endif
