/*
 * What feeder-pack was asked to do (its command line, or bench_loader's
 * --decoder raw): read by fpk_pack (packer.h) and the files it runs
 * (pack_writer.h).
 */
#ifndef FEEDER_TOOLS_PACK_OPTS_H
#define FEEDER_TOOLS_PACK_OPTS_H

#include <stdint.h>

typedef struct fpk_opts {
    const char *data, *out;
    int jpeg;                 /* 1: JPEG records as they are; 0: RAW uint8 tensors */
    uint32_t height, width;   /* RAW: output size */
    uint32_t resize;          /* RAW: shorter side before the centre crop (nonzero) */
    int layout;               /* RAW: feeder_layout */
    int workers;              /* RAW: loader worker processes */
    uint32_t batch;           /* RAW: samples per loader batch */
    uint64_t shard_size;      /* 0: one file */
    int io;                   /* feeder_io of the RAW loader */
    int allow_escape;         /* list files may name paths outside their folder */
    int verify, progress, quiet;
    uint32_t max_side;        /* JPEG: re-encode files whose longer side exceeds it; 0 none */
    int quality;              /* JPEG with max_side: tjCompress2 quality, 1..100 */
    uint32_t channels;        /* RAW: 1 grayscale, else (0 included) 3 RGB */
    int fields;               /* 1: a FIELDS pack (tools/pack_fields.h); jpeg is then 0 */
    const char *fields_spec;  /* fields: --fields SPEC, or NULL for the default */
    uint64_t max_bytes;       /* fields: the most bytes of a u8 field's member; 0 none */
    int skip_bad;             /* raw, jpeg: pack the good files, list the bad ones skipped */
} fpk_opts;

#endif
