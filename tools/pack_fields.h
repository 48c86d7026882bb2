/*
 * feeder-pack --mode fields: the source of a fields pack (docs/FORMAT.md,
 * "FIELDS files"), a fields dataset over WebDataset tar shards or an image
 * folder or list file, which the library's feeder_pack_fields writes; and
 * --verify, which reads the written pack back field by field against the
 * source. A tool's code, but quiet: errors come back as messages, and
 * packer.c decides what to print and how to exit.
 *
 * Tar shards: every key (consecutive members sharing the part of their name
 * before the basename's first dot) is one sample, in shard order and then
 * member order; each field is one member extension. Without a SPEC the
 * fields are the extensions of the set's first key, in member
 * order. Extensions cls, label and idx are integer text members: an i64
 * scalar field, named "label" for the first of them (the others keep their
 * extension); every other extension is its member's bytes, a ragged u8
 * field whose maximum is the largest such member of the set (or
 * --max-bytes). Members no field names are left out. A key missing a
 * field's member, holding two of them, or with a member over --max-bytes
 * fails the pack, naming the shard, the key and the extension.
 *
 * SPEC: comma-separated [NAME=]EXT[:TYPE[:BATCHING]], e.g.
 * 'jpg:u8:ragged,cls:i64,json' or 'image=jpg,label=cls:i64'. TYPE is u8
 * (the member's bytes) or i64 (the member's text, one integer); it defaults
 * as above. BATCHING, u8 only: ragged (default) or padded. NAME defaults as
 * above.
 *
 * Folder or list file: fields "jpg" (each file's bytes, ragged u8) and
 * "label" (the folder's or list's label, i64).
 */
#ifndef FEEDER_TOOLS_PACK_FIELDS_H
#define FEEDER_TOOLS_PACK_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "feeder.h"

typedef struct fpk_fields fpk_fields;

typedef struct fpk_fields_opts {
    const char *data;     /* a tar shard or brace pattern of them, a folder, a list file */
    const char *spec;     /* --fields, or NULL for the default */
    uint64_t max_bytes;   /* --max-bytes: the most bytes a u8 field's member may have; 0 none */
    int allow_escape;     /* list files may name paths outside their folder */
    /* Called after each sample is read for the pack (done samples, their bytes); may be NULL. */
    void (*tick)(void *user, uint64_t done, uint64_t bytes);
    void *tick_user;
} fpk_fields_opts;

/* Read the shard headers (or the folder, or the list), check every key
 * against the fields and build the dataset. 0; 2 when the arguments are
 * wrong (a bad SPEC, --fields for a folder, no such --data); 1 otherwise,
 * with the message in err. */
int fpk_fields_open(const fpk_fields_opts *o, fpk_fields **out, char *err, size_t errlen);

/* The fields dataset (for feeder_pack_fields) and its number of samples. */
const feeder_dataset *fpk_fields_dataset(const fpk_fields *f);
uint64_t fpk_fields_count(const fpk_fields *f);

/* Why the dataset's get callback last failed (it names the shard, key and
 * member, or the file), or NULL: what to say when feeder_pack_fields fails
 * on a sample, rather than its "sample N: dataset callback returned ...". */
const char *fpk_fields_last_error(const fpk_fields *f);

/* The schema in words, for the summary: "jpg u8 ragged <= 5127, label i64". */
void fpk_fields_describe(const fpk_fields *f, char *buf, size_t len);

/* Open the pack at `path` (messages call it `shown`) and compare every
 * sample's fields, read through a loader (`workers` processes, batches of
 * at most `batch`), byte for byte with the source. 0, or 1 with the first
 * difference in err. */
int fpk_fields_verify(fpk_fields *f, const char *path, const char *shown, int workers,
                      uint32_t batch, char *err, size_t errlen);

void fpk_fields_close(fpk_fields *f);

/* Whether the file at `path` starts with a tar header: the ustar magic
 * (GNU's "ustar  " too). feeder-pack's other modes share it. */
int fpk_ustar_magic(const char *path);

#endif
