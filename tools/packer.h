/*
 * The packer behind feeder-pack, shared with bench_loader (whose --decoder raw
 * packs the dataset it measures): an image folder, list file or tar shard set in, a packed
 * file (or shards) out, written to NAME.tmp.PID and renamed when complete.
 * A tool's code, not the library's: it prints, installs SIGINT/SIGTERM/SIGHUP
 * handlers that remove its temporary files, and exits on failure.
 */
#ifndef FEEDER_TOOLS_PACKER_H
#define FEEDER_TOOLS_PACKER_H

#include "pack_opts.h"

/* Pack o->data into o->out as feeder-pack does (docs/FORMAT.md). Messages
 * start with "PROG: ". Every bad file is listed ("PROG: NAME: reason", one
 * per line); without o->skip_bad nothing is then written. On failure the
 * temporary files are removed and the process exits: 2 when o->data is not a
 * folder or list file, 1 otherwise.
 * Not thread-safe (signal handlers and their file list are process-wide). */
void fpk_pack(const char *prog, const fpk_opts *o);

#endif
