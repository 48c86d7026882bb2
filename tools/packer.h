/*
 * The packer behind feeder-pack, shared with bench_loader (whose --decoder raw
 * packs the dataset it measures): an image folder, list file or tar shard set in, a packed
 * file (or shards) out, written to NAME.tmp.PID and renamed when complete.
 * A tool's code, not the library's: it prints, installs SIGINT/SIGTERM/SIGHUP
 * handlers that remove its temporary files, and exits on failure.
 */
#ifndef FEEDER_TOOLS_PACKER_H
#define FEEDER_TOOLS_PACKER_H

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

/* Pack o->data into o->out as feeder-pack does (docs/FORMAT.md). Messages
 * start with "PROG: ". Every bad file is listed ("PROG: NAME: reason", one
 * per line); without o->skip_bad nothing is then written. On failure the
 * temporary files are removed and the process exits: 2 when o->data is not a
 * folder or list file, 1 otherwise.
 * Not thread-safe (signal handlers and their file list are process-wide). */
void fpk_pack(const char *prog, const fpk_opts *o);

#endif
