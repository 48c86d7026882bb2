/*
 * io/: reading whole files (a task's sample files) and stretches of one open
 * file (packed records), through io_uring or a pread loop with the same
 * contract. Depends on common/ only.
 */
#ifndef FEEDER_IO_H
#define FEEDER_IO_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

typedef struct feeder__file {
    const char *path; /* borrowed */
    uint8_t *data;    /* into the reader's arena, valid until the next read */
    size_t len;
    int err;          /* 0 or -errno */
    const char *op;   /* the failing operation ("open", "read", ...) */
} feeder__file;

typedef struct feeder__reader feeder__reader;

/* A sample file larger than this fails alone (-EFBIG) before it is read: the
 * reader's arena holds a whole task, and one huge file in a list must not
 * turn into a failed allocation for every sample of its task. No JPEG under
 * the default pixel limit comes near it. */
#define FEEDER__MAX_FILE_BYTES ((uint64_t)1 << 30)
#define FEEDER__FILE_TOO_BIG "size over the 1 GiB limit"

/* What a file of this st_mode / stx_mode is, when it is no regular file:
 * "a FIFO, not a regular file", ... (the failing op of such a sample). */
const char *feeder__file_type(unsigned mode);

/* Is io_uring usable here with the operations the reader needs? 0, or
 * -errno with a reason in `why`. Run once in the parent at start. */
int feeder__uring_probe(char *why, size_t whylen);

/* mode: FEEDER_IO_URING or FEEDER_IO_PREAD (AUTO resolved by the caller). */
int feeder__reader_create(int mode, unsigned queue_depth, feeder__reader **out, char *why,
                          size_t whylen);
void feeder__reader_destroy(feeder__reader *r);
/* Read every file whole; per-file errors land in files[i].err. Returns 0 or
 * a -errno that is not specific to one file (the ring broke). */
int feeder__reader_read(feeder__reader *r, feeder__file *files, unsigned n);

/* One stretch of an open file to read into memory (packed datasets). */
typedef struct feeder__span {
    uint64_t off;  /* file offset */
    size_t len;    /* bytes asked for */
    uint8_t *dst;
    size_t got;    /* bytes read: less than len only at the end of the file */
    int err;       /* 0 or -errno of the failing read */
} feeder__span;

/* Read every span of `fd` (all queued at once on the ring, or pread one by
 * one); per-span errors land in spans[i].err. Returns 0 or a -errno that is not
 * specific to one span (the ring broke). */
int feeder__reader_read_at(feeder__reader *r, int fd, feeder__span *spans, unsigned n);

#endif
