/*
 * decode/: a JPEG's header read once, where its bytes are read (the
 * workers), and the engine that decoder choice routes it to. The GPU
 * decoders send an image to the JPEG hardware engine only when its header
 * says the engine takes it; everything else (progressive, CMYK/YCCK, odd
 * subsampling, 12-bit, arithmetic coding, lossless, too large, corrupt) is
 * decoded on the CPU by the worker that read it, and the reason is counted.
 *
 * Pure: no allocation, no I/O, reads nothing outside the buffer whatever it
 * holds (tests/fuzz/fuzz_jpeg_header.c drives it).
 */
#ifndef FEEDER_DECODE_JPEG_HEADER_H
#define FEEDER_DECODE_JPEG_HEADER_H

#include <stddef.h>
#include <stdint.h>

/* What the frame header and the markers before the first scan say. */
typedef struct feeder__jpeg_info {
    uint32_t width, height;
    uint8_t sof;          /* frame marker's low byte: 0xC0 baseline, 0xC1 extended, 0xC2
                             progressive, 0xC3 lossless, 0xC9.. arithmetic */
    uint8_t precision;    /* bits per sample: 8 or 12 (16 for lossless) */
    uint8_t components;   /* 1 gray, 3 YCbCr (or RGB), 4 CMYK or YCCK */
    uint8_t h[4], v[4];   /* sampling factors of the first four components */
    uint16_t restart_interval; /* MCUs between restart markers, 0 = none */
    int8_t adobe_transform;    /* APP14 "Adobe" transform: -1 no marker, 0 none (RGB or
                                  CMYK), 1 YCbCr, 2 YCCK */
    uint8_t has_exif, has_icc; /* APP1 "Exif", APP2 "ICC_PROFILE" present */
} feeder__jpeg_info;

/* Where an image goes, and why when not to the hardware engine. A CPU route
 * r counts in feeder_stats.cpu_routed[r - 1] (FEEDER_ROUTE_* is r - 1). */
enum {
    FEEDER__ROUTE_GPU = 0,        /* the JPEG hardware engine takes it */
    FEEDER__ROUTE_PROGRESSIVE = 1,
    FEEDER__ROUTE_CMYK = 2,       /* 4 components: CMYK or YCCK */
    FEEDER__ROUTE_SUBSAMPLING = 3,/* a sampling the engine refuses (4:1:1, 4:1:0, ...) */
    FEEDER__ROUTE_SIZE = 4,       /* over the pixel limit, over 2 MP (the CPU's DCT scaling
                                     decodes it for less); a file too large for its task's room
                                     is counted as FEEDER_ROUTE_ROOM by the plan (worker/plan.c) */
    FEEDER__ROUTE_CORRUPT = 5,    /* no readable frame header: the CPU decoder names it */
    FEEDER__ROUTE_OTHER = 6,      /* 12-bit, arithmetic coding, lossless */
    FEEDER__ROUTE_ROOM = 7,       /* no room left in the task's slot: set by the plan only */
    FEEDER__ROUTE_FORMAT = 8,     /* not a JPEG: a format of decode/'s table the engine does
                                     not take (feeder__decode_route) */
    FEEDER__ROUTES = 9
};

/* Read the header of `len` bytes of JPEG. 0 and *out, or -1 when no frame
 * header is found before the first scan (not a JPEG, truncated, corrupt). */
int feeder__jpeg_probe(const uint8_t *buf, size_t len, feeder__jpeg_info *out);

/* The route of an image with header `in` (NULL: unreadable) under a pixel
 * limit (0: none). */
int feeder__jpeg_route(const feeder__jpeg_info *in, uint64_t max_pixels);

/* "gpu", "progressive", "cmyk", "subsampling", "size", "corrupt", "other",
 * "room", "format". */
const char *feeder__jpeg_route_name(int route);

#endif
