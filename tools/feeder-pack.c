/*
 * feeder-pack: an image folder, list file or WebDataset tar shard set in, a
 * packed file out (docs/FORMAT.md).
 *
 *   feeder-pack --data DIR|LIST|'S-{000..127}.tar' --out F.pack [--mode raw|jpeg] [--size 224]
 *               [--resize 256] [--layout nhwc|nchw] [--channels 3|1] [--workers N]
 *               [--shard-size BYTES] [--max-side N [--quality Q]] [--verify]
 *   feeder-pack --mode fields --data 'S-{000..127}.tar'|DIR|LIST --out F.pack
 *               [--fields SPEC] [--max-bytes BYTES] [--verify]
 *
 * RAW mode decodes every image once with the loader itself (EVAL pipeline:
 * resize the shorter side, centre crop; sequential order; N worker
 * processes) and stores the batches it delivers, so loading the pack gives
 * the very bytes loading the folder with that transform gives. JPEG mode
 * stores each file's bytes as they are, after checking that TurboJPEG can
 * parse its header.
 *
 * Files that cannot be packed (missing, empty, not an image, a truncated
 * JPEG, one the loader cannot decode in RAW mode) are all found in one run:
 * each is listed on stderr with its reason, one per line, and nothing is
 * written (exit 1); with --skip-bad the others are packed and the bad ones
 * listed as skipped.
 *
 * Output is written to NAME.tmp.PID beside NAME and renamed when complete
 * (after fdatasync), so NAME either does not exist or is whole. On an error,
 * SIGINT, SIGTERM or SIGHUP the temporary files are removed and no output
 * appears. SIGKILL cannot be caught: then NAME.tmp.PID may remain (never
 * NAME itself); delete it by hand.
 *
 * With --max-side N (JPEG mode), a file whose longer side exceeds N is
 * decoded, resized as the loader resizes and re-encoded at --quality
 * (tools/shrink.h); the others keep their bytes.
 *
 * FIELDS mode writes a version 3 FIELDS pack through the library's
 * feeder_pack_fields: each key of the tar shards one record, each member
 * extension one field (tools/pack_fields.h has the rules and --fields'
 * SPEC); a folder or list file gives the fields jpg and label. --verify
 * reads it back through a loader and compares every field with the source
 * before the file gets its name.
 *
 * With --shard-size, records are split in dataset order into files of at
 * most BYTES each, named F-00000-of-0000N.pack (F is --out less its .pack
 * suffix); each shard is a complete packed file of its own records.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "feeder.h"
#include "packer.h"

#define FPK_PROG "feeder-pack"
#define fpk_usage_die(...) cli_die_usage(FPK_PROG, __VA_ARGS__)


static const char *const mode_names[] = {"raw", "jpeg", "fields", NULL};

/* --shard-size, --max-bytes: bytes, optionally with K, M, G or T (x1024). */
static void parse_bytes_of(const char *prog, const char *opt, const char *s, void *dest)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    else if (*end == 'T' || *end == 't')
        shift = 40;
    if (shift)
        end++;
    if (errno || *end || v == 0 || v > (UINT64_MAX >> shift))
        goto bad;
    *(uint64_t *)dest = (uint64_t)v << shift;
    return;
bad:
    cli_die_usage(prog, "%s '%s': expected a positive size in bytes, optionally with "
                  "K, M, G or T", opt, s);
}

static void parse_shard_size(const char *prog, const char *s, void *dest)
{
    parse_bytes_of(prog, "--shard-size", s, dest);
}

static void parse_max_bytes(const char *prog, const char *s, void *dest)
{
    parse_bytes_of(prog, "--max-bytes", s, dest);
}

/* --size N or HxW. */
static void parse_size(const char *prog, const char *s, void *dest)
{
    fpk_opts *o = dest;
    const char *x = strchr(s, 'x');
    if (!x) {
        o->height = o->width = (uint32_t)cli_parse_uint(prog, "--size", s, 1, 65535);
        return;
    }
    char h[32];
    if ((size_t)(x - s) >= sizeof(h))
        cli_die_usage(prog, "--size '%s': expected N or HxW", s);
    memcpy(h, s, (size_t)(x - s));
    h[x - s] = 0;
    o->height = (uint32_t)cli_parse_uint(prog, "--size", h, 1, 65535);
    o->width = (uint32_t)cli_parse_uint(prog, "--size", x + 1, 1, 65535);
}

/* The defaults that depend on other options, and the pairs that exclude each other. */
static void check_args(fpk_opts *o, int raw_opt)
{
    if (!o->data || !o->out)
        fpk_usage_die("--data and --out are required");
    if (o->jpeg && raw_opt)
        fpk_usage_die("--size, --resize and --layout apply to --mode raw only (JPEG records are "
                      "stored as they are)");
    if (o->fields && raw_opt)
        fpk_usage_die("--size, --resize and --layout apply to --mode raw only (fields records are "
                      "the members' bytes)");
    if (!o->resize) {
        uint32_t m = o->height > o->width ? o->height : o->width;
        o->resize = (uint32_t)(((uint64_t)m * 256 + 112) / 224);
    }
    if (o->resize < o->height || o->resize < o->width)
        fpk_usage_die("--resize %u is smaller than the %ux%u crop", o->resize, o->height, o->width);
    if (o->progress && o->quiet)
        fpk_usage_die("--progress and --quiet exclude each other");
    if (!o->quiet && !o->progress && isatty(2))
        o->progress = 1;
}

/* --mode fields and its options: given[] says whether --fields, --max-bytes
 * and --shard-size were; other is any RAW or JPEG option. */
static void check_fields(const fpk_opts *o, const int *given, int other)
{
    if (!o->fields && (given[0] || given[1]))
        fpk_usage_die("--fields and --max-bytes apply to --mode fields only");
    if (o->fields && given[2])
        fpk_usage_die("--shard-size applies to --mode raw and jpeg only (a fields pack is one "
                      "file: pack each shard set apart to split it)");
    if (o->fields && other)
        fpk_usage_die("--channels, --max-side and --quality apply to --mode raw or jpeg only "
                      "(fields records are the members' bytes)");
}

static void fpk_parse_args(fpk_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->height = o->width = 224;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->workers = cores > 0 ? (int)cores : 1;
    o->batch = 64;
    int raw[4] = {0}, shrink[2] = {0}, fields[3] = {0}, mode = 0;
    o->channels = 3;
    o->quality = 90;
    cli_opt t[] = {
        CLI_STRING("data", "DIR|LIST", o->data,
                   "image folder (one sub-folder per class), list file of\n"
                   "'relative/path label' lines, or WebDataset tar shard or brace\n"
                   "range of them (s-{000..127}.tar: the .jpg member, the .cls label)"),
        CLI_STRING("out", "FILE", o->out,
                   "the packed file; with --shard-size, FILE-00000-of-0000N.pack\n"
                   "(FILE less its .pack suffix)"),
        CLI_ENUM("mode", mode, mode_names,
                 "raw: decode and transform once, store uint8 tensors (default);\n"
                 "jpeg: store the original JPEG bytes; fields: a FIELDS pack,\n"
                 "each tar member extension a field (see --fields), or for\n"
                 "a folder or list the fields jpg (file bytes) and label"),
        CLI_FUNC("size", "N|HxW", parse_size, o, "raw: output height x width (224)"),
        CLI_UINT("resize", "N", o->resize, 1, 65535,
                 "raw: shorter side before the centre crop (size*256/224)"),
        CLI_OPTION("layout", o->layout, FEEDER_OPT_LAYOUT, "raw: sample layout (nhwc)"),
        CLI_UINT("workers", "N", o->workers, 0, 1024,
                 "raw: decoding worker processes (number of cores)"),
        CLI_UINT("batch", "N", o->batch, 1, 65536, "raw: samples per loader batch (64)"),
        CLI_FUNC("shard-size", "BYTES", parse_shard_size, &o->shard_size,
                 "raw, jpeg: split into files of at most BYTES (suffix K, M, G:\n"
                 "x1024)"),
        CLI_OPTION("io", o->io, FEEDER_OPT_IO, "raw: how the loader reads the images (auto)"),
        CLI_UINT("max-side", "N", o->max_side, 16, 16384,
                 "jpeg: re-encode files whose longer side exceeds N at N\n"
                 "(the other side scaled alike); smaller files kept as they are"),
        CLI_INT("quality", "Q", o->quality, 1, 100, "jpeg with --max-side: quality of the\n"
                                                      "re-encoded files (90)"),
        CLI_FLAG("allow-escape", o->allow_escape,
                 "a list file may name absolute paths and paths above its\n"
                 "folder (refused by default, as the library does)"),
        CLI_FLAG("verify", o->verify,
                 "read the output back: every record's crc32c, every JPEG decoded"),
        CLI_FLAG("progress", o->progress,
                 "draw the progress bar even when stderr is not a terminal"),
        CLI_FLAG("quiet", o->quiet, "no progress bar, no summary"),
        CLI_FLAG("skip-bad", o->skip_bad,
                 "raw, jpeg: pack the good files and list the bad ones it\n"
                 "left out (default: list every bad file, write nothing)"),
        CLI_STRING("fields", "SPEC", o->fields_spec,
                   "fields, tar shards: [NAME=]EXT[:u8|i64[:ragged|padded]],...\n"
                   "(default: the first key's extensions; cls, label, idx\n"
                   "as i64 'label', the rest as ragged u8 bytes)"),
        CLI_FUNC("max-bytes", "BYTES", parse_max_bytes, &o->max_bytes,
                 "fields: the most bytes of a u8 field's member, a larger\n"
                 "one an error (default: the largest member seen)"),
        CLI_UINT("channels", "N", o->channels, 1, 3, "raw: 3 (RGB) or 1 (grayscale) (3)"),
        CLI_END,
    };
    int n = (int)(sizeof(t) / sizeof(t[0]));
    t[n - 2].given = &raw[3];
    t[n - 4].given = &fields[0];
    t[n - 3].given = &fields[1];
    t[8].given = &fields[2];
    t[3].given = &raw[0];
    t[4].given = &raw[1];
    t[5].given = &raw[2];
    t[10].given = &shrink[0];
    t[11].given = &shrink[1];
    cli_spec spec = {.prog = FPK_PROG, .opts = t,
                     .usage = "usage: " FPK_PROG " --data DIR|LIST --out FILE.pack [options]\n",
                     .epilog = "Exit status: 0 done, 1 failed (nothing written; bad files "
                               "are all listed, one per line), 2 bad arguments.\n"};
    cli_parse(&spec, argc, argv);
    o->jpeg = mode == 1;
    o->fields = mode == 2;
    check_args(o, raw[0] | raw[1] | raw[2]);
    if (o->jpeg && raw[3])
        fpk_usage_die("--channels applies to --mode raw only (JPEG records are stored as they "
                      "are)");
    if (o->channels == 2)
        fpk_usage_die("--channels 2: expected 3 (RGB) or 1 (grayscale)");
    check_fields(o, fields, raw[3] | shrink[0] | shrink[1]);
    if (o->fields && o->skip_bad)
        fpk_usage_die("--skip-bad applies to --mode raw and jpeg only");
    if (shrink[0] && !o->jpeg)
        fpk_usage_die("--max-side applies to --mode jpeg only (--mode raw resizes every image)");
    if (shrink[1] && !shrink[0])
        fpk_usage_die("--quality applies with --max-side only (other JPEGs are stored as they "
                      "are)");
}

int main(int argc, char **argv)
{
    fpk_opts o;
    fpk_parse_args(&o, argc, argv);
    fpk_pack(FPK_PROG, &o);
    return 0;
}
