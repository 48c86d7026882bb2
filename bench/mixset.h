/*
 * A realistic image set made by the project: the kinds of JPEG that ImageNet
 * and web-scraped sets hold (4:2:0, 4:2:2 and 4:4:4 subsampling, progressive,
 * grayscale, CMYK and YCCK with Adobe's APP14 marker, restart intervals, Exif
 * orientation, ICC profiles, a tail of large photos, and optionally PNGs
 * named .JPEG), cut from the photos in bench/photos and encoded with
 * libjpeg-turbo's libjpeg API (libspng for the PNGs).
 *
 * Every choice about image k (kind, size, quality, markers, crop) is a pure
 * function of (mix, seed, k), and the encoders are deterministic, so the same
 * arguments give the same bytes on every machine.
 */
#ifndef FEEDER_BENCH_MIXSET_H
#define FEEDER_BENCH_MIXSET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "benchutil.h"

/* What an image is; numbered in the order the shares are drawn. */
typedef enum bm_kind {
    BM_420 = 0,     /* baseline YCbCr 4:2:0 (the rest, after every other share) */
    BM_422,         /* baseline 4:2:2 */
    BM_444,         /* baseline 4:4:4 */
    BM_PROGRESSIVE, /* progressive 4:2:0 */
    BM_GRAY,        /* one component */
    BM_CMYK,        /* four components, Adobe APP14 transform 0 */
    BM_YCCK,        /* four components, Adobe APP14 transform 2 */
    BM_PNG,         /* a PNG named .JPEG */
    BM_KINDS
} bm_kind;

/* "4:2:0", "4:2:2", "4:4:4", "progressive", "gray", "cmyk", "ycck", "png" */
extern const char *const bm_kind_names[BM_KINDS];

/* A mix: sizes, qualities and shares (0..1). share[BM_420] is not read: 4:2:0
 * takes what the other kinds leave. restart, exif and icc apply to JPEGs of
 * any kind, drawn independently. */
typedef struct bm_mix {
    const char *name;
    uint32_t short_min, short_max; /* short side of ordinary images, px */
    uint32_t large_min, large_max; /* short side of the large tail, px */
    double large;                  /* share of the large tail */
    int q_min, q_max;              /* JPEG quality, inclusive */
    double share[BM_KINDS];
    double restart, exif, icc;
} bm_mix;

/* The presets: "web" (the default set) and "imagenet". 0, or -EINVAL for
 * another name. */
int bm_preset(const char *name, bm_mix *out);

/* The plan of one image: a pure function of (mix, seed, k). */
typedef struct bm_image {
    bm_kind kind;
    uint32_t w, h;
    int quality;
    unsigned photo;       /* which bundled photo it is cut from (mod count) */
    uint64_t crop_seed;   /* where it is cut */
    uint16_t restart;     /* restart interval in MCUs, 0 none */
    uint8_t orientation;  /* Exif orientation 1..8, 0 no Exif segment */
    uint8_t icc;          /* an ICC profile in APP2 */
    uint8_t large;        /* from the large tail */
} bm_image;

void bm_plan(const bm_mix *m, uint64_t seed, uint64_t k, bm_image *out);

/* Encode image `im` into a malloc'd buffer. 0 or -errno (-EIO: the encoder
 * failed). */
int bm_encode(const bu_photos *p, const bm_image *im, uint8_t **out, size_t *len);

/* Where image k of a set in `dir` lies: DIR/class_CC/img_NNNNN.jpg with ten
 * classes (k % 10, number k / 10); a PNG ends in .JPEG. */
void bm_path(char *out, size_t len, const char *dir, uint64_t k, bm_kind kind);

/* What a set holds, counted from the plans and the written files. */
typedef struct bm_report {
    uint64_t images, count[BM_KINDS], large, restart, exif, icc, bytes;
    double seconds; /* making it; 0 when an existing set was reused */
} bm_report;

/* Make `n` images of mix `m` under `dir` with `jobs` processes (0: one per
 * online core, at most 8). Reuses the set when DIR/.complete records the same
 * mix, size and seed; a set recorded differently is removed first. `progress`
 * draws a bar on stderr. `rep` may be NULL. 0 or -errno. */
int bm_make_set(const bu_photos *p, const bm_mix *m, const char *dir, uint64_t n,
                uint64_t seed, unsigned jobs, int progress, bm_report *rep);

/* One line: "made|reused N images in DIR (web): 4:2:0 a, ...; L large; mean X KB". */
void bm_report_print(FILE *f, const bm_mix *m, const char *dir, const bm_report *r);

/* The benchmarks' default folder of set `set` ("web", "imagenet", "uniform")
 * of `images` images: $FEEDER_DATA, else ~/.cache/feeder/SET-IMAGES
 * (uniform: default-IMAGES, the name it has always had). */
void bm_default_dir(char *out, size_t len, const char *set, unsigned images);
/* Make set `set` in `dir` unless it is there (seed 1, one process per core),
 * from the photos in $FEEDER_BENCH_PHOTOS or else `photos_dir`; a set made
 * now is reported on stderr (bm_report_print) after a progress bar. 0, or
 * -errno with the reason in `err`. */
int bm_ensure_set(const char *dir, const char *set, unsigned images, const char *photos_dir,
                  char *err, size_t errlen);

#endif
