/*
 * What the packer's files share (tools/packer.c, pack_writer.c, pack_raw.c,
 * pack_jpeg.c); private to them. pack_writer.c holds the messages, the
 * temporary files and their signal handlers, the list of bad files, the
 * progress bar, and the shards: planned, named, opened, written, finished,
 * renamed into place and read back. pack_raw.c and pack_jpeg.c write the
 * records of one mode each; packer.c runs a pack (fpk_pack, packer.h).
 */
#ifndef FEEDER_TOOLS_PACK_WRITER_H
#define FEEDER_TOOLS_PACK_WRITER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "feeder.h"
#include "dataset/pack.h"
#include "pack_opts.h"

/* ---- pack_writer.c: messages ---- */

/* The program named in messages (fpk_pack's `prog`). */
extern const char *fpk_prog;

/* Bad arguments: say why, exit 2. */
void fpk_usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Fatal: remove the temporary output, say why, exit 1. */
void fpk_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* A formatted copy; out of memory is fatal. */
char *fpk_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- pack_writer.c: temporary files and signals ---- */

/* The temporary files' names, made before any file is created, so the
 * handler only reads them; fpk_tmp_count of them are removed on a signal
 * or an error. */
extern char **fpk_tmp_names;
extern volatile sig_atomic_t fpk_tmp_count;

void fpk_cleanup_tmp(void);
/* SIGINT, SIGTERM, SIGHUP remove the temporary files, then end the process
 * as the signal would. */
void fpk_install_handlers(void);
void fpk_block_signals(int block);

/* ---- pack_writer.c: bad files ---- */

/* Every file that cannot be packed, found in one run so that they can all be
 * fixed at once: its dataset index and its line ("NAME: reason"). */
typedef struct bad_file {
    uint64_t index;
    char *line;
} bad_file;

extern bad_file *fpk_bad;
extern uint64_t fpk_nbad;
extern uint8_t *fpk_isbad; /* one flag per dataset index */

/* List sample i as bad (once). */
void fpk_bad_add(uint64_t i, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every bad file on stderr, in dataset order, each line after `lead`. */
void fpk_bad_list(const char *lead);
void fpk_bad_free(void);

/* ---- pack_writer.c: progress ---- */

uint64_t fpk_now_ns(void);

typedef struct progress {
    int on;
    const char *what;
    uint64_t total, t0, last;
} progress;

void fpk_progress_draw(progress *p, uint64_t done, uint64_t bytes, int final);

/* ---- pack_writer.c: shards ---- */

typedef struct shard {
    uint64_t first, count;     /* records [first, first + count) of the dataset */
    uint64_t data_bytes;
    feeder__pack_header h;
    uint64_t file_bytes;
    char *name, *tmp;
    int fd;
    uint8_t *index;            /* count entries, filled while writing */
    int64_t *labels;
} shard;

/* Cut the records into shards of at most `limit` bytes (0: one file). */
shard *fpk_plan_shards(const uint64_t *sizes, uint64_t n, uint64_t limit,
                       uint64_t classes_bytes, uint32_t *nshards);
/* Each shard's name and temporary name (fpk_tmp_names). */
void fpk_name_shards(const fpk_opts *o, shard *v, uint32_t ns);
/* Create and size the temporary files; each shard's index and labels. */
void fpk_open_shards(shard *v, uint32_t ns, const feeder__pack_header *proto,
                     uint64_t classes_bytes, uint64_t total);
void fpk_pwrite_all(const shard *s, const void *data, size_t len, uint64_t off);
/* Index, labels, class names, then the header; flushed to disk. */
void fpk_finish_shard(shard *sh, const char *classes, uint64_t classes_bytes);
/* Which shard holds record g: shards are in record order. */
uint32_t fpk_shard_of(const shard *v, uint32_t ns, uint64_t g, uint32_t hint);
/* Every file is whole and on disk: now they get their names (all or none). */
void fpk_publish(const fpk_opts *o, shard *v, uint32_t ns);
/* Read every output file back through the loader with VERIFY_CRC on. */
void fpk_verify(const fpk_opts *o, const shard *v, uint32_t ns, int jpeg);
void fpk_free_shards(shard *v, uint32_t ns);
/* Close and remove one pass's shards: a bad file left a hole in them. */
void fpk_discard_shards(shard *v, uint32_t ns);
/* A loader option set, or fatal. */
void fpk_set_opt(feeder_loader *ld, feeder_option opt, int64_t v);

/* ---- pack_raw.c ---- */

/* Channels of a RAW record: 1 (grayscale) or 3. */
static inline uint32_t fpk_raw_channels(const fpk_opts *o) { return o->channels == 1 ? 1 : 3; }

/* RAW records of keep[0..nk) into the shards (rb bytes each); the bytes
 * written. */
uint64_t fpk_write_raw(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                       uint64_t nk, shard *v, uint32_t ns, uint64_t rb, progress *pg);

/* ---- pack_jpeg.c ---- */

/* What --max-side did, for the summary. */
extern uint64_t fpk_shrunk, fpk_shrunk_from, fpk_shrunk_to;

/* --max-side: the records' sizes, before the shards are planned. */
void fpk_plan_shrunk(const fpk_opts *o, feeder_dataset *ds, const uint64_t *fsizes,
                     uint64_t *sizes, progress *pg);
/* JPEG records of keep[0..nk) into the shards; the bytes written. */
uint64_t fpk_write_jpeg(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                        uint64_t nk, const uint64_t *fsizes, const uint64_t *sizes, shard *v,
                        uint32_t ns, progress *pg);

#endif
