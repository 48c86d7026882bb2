/*
 * Shared by the benchmarks, the tests and the examples; one header over
 * three files, one per concern:
 *  - benchutil_photos.c: realistic JPEG datasets made from the real photos
 *    in bench/photos (random crops, sizes and qualities of real photos
 *    decode like real training data; synthetic noise does not);
 *  - benchutil_files.c: whole files and folders, the clock, checksums, CPU
 *    time;
 *  - benchutil_report.c: text, Markdown tables, JSON strings, the machine
 *    and the record appended to docs/BENCHMARKS.md.
 * A program builds all three: bench/benchutil.cmake lists them as
 * FEEDER_BENCHUTIL_SOURCES. The CUDA programs' call check is header-only,
 * in benchutil_cuda.h.
 */
#ifndef FEEDER_BENCHUTIL_H
#define FEEDER_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* JPEG datasets from the photos (benchutil_photos.c)                        */
/* ------------------------------------------------------------------------ */

/* Decoded photos, loaded once. */
typedef struct bu_photos bu_photos;
int bu_photos_load(const char *dir, bu_photos **out, char *err, size_t errlen);
void bu_photos_free(bu_photos *p);
unsigned bu_photos_count(const bu_photos *p);

/* A w x h RGB picture (malloc'd, NULL when out of memory) cut from photo
 * `photo` (mod count) at a crop position and scale chosen by `seed`. */
uint8_t *bu_cut_rgb(const bu_photos *p, unsigned photo, uint32_t w, uint32_t h, uint64_t seed);

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

/* The default benchmark dataset: $FEEDER_DATA, else ~/.cache/feeder/default-IMAGES. */
void bu_default_dataset_dir(char *out, size_t len, unsigned images);
/* Make it (10 classes of images/10 JPEGs, seed 1) unless it is already
 * there, from the photos in $FEEDER_BENCH_PHOTOS or else `photos_dir`, with a
 * progress bar on stderr. 0, or -errno with the reason in `err`. */
int bu_ensure_default_dataset(const char *dir, unsigned images, const char *photos_dir,
                              char *err, size_t errlen);

/* ------------------------------------------------------------------------ */
/* Files, time, checksums, CPU time (benchutil_files.c)                      */
/* ------------------------------------------------------------------------ */

/* Write a whole file; read a whole file (malloc'd). 0 or -errno. */
int bu_write_file(const char *path, const void *data, size_t len);
int bu_read_file(const char *path, uint8_t **data, size_t *len);
/* mkdir -p. 0 or -errno. */
int bu_mkdirs(const char *path);
/* rm -rf. */
void bu_rm_rf(const char *path);
/* A made set's stamp, `dir`/.complete, holding what made it: 1 when it holds
 * `want`, 0 when it holds something else, -1 when there is none. */
int bu_stamp_matches(const char *dir, const char *want);
/* Write the stamp once the set is complete. 0 or -errno. */
int bu_stamp_write(const char *dir, const char *want);

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

/* CPU time (user + system) of process `pid` from /proc/PID/stat, in ns, at
 * clock-tick resolution (10 ms on Linux); -1 when it cannot be read (gone). */
int64_t bu_proc_cpu_ns(int pid);
/* getrusage() user + system time in ns: this process (all its threads), or
 * with `children` 1 its children that have ended and been waited for. */
uint64_t bu_rusage_cpu_ns(int children);

/* ------------------------------------------------------------------------ */
/* Reporting (benchutil_report.c): text that grows, Markdown tables, JSON    */
/* strings, the machine and command line of a record, and the record         */
/* appended to docs/BENCHMARKS.md. Out of memory is fatal here (exit 1).      */
/* ------------------------------------------------------------------------ */

/* A growing string; start with {0}, free(b.p) when done. */
typedef struct bu_sbuf {
    char *p;
    size_t len, cap;
} bu_sbuf;
void bu_sb_printf(bu_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `s` as a JSON string literal, quotes included (NULL: ""). */
void bu_sb_json_str(bu_sbuf *b, const char *s);

/* Median of v[0..n) (n > 0; the mean of the middle two when n is even). */
double bu_median(const double *v, unsigned n);

/* A Markdown table whose columns are padded to their widest cell, counted in
 * code points so "µs" lines up. Rows grow as they are added. */
#define BU_TABLE_MAX_COLS 32
#define BU_TABLE_CELL 160
typedef struct bu_table {
    const char *head[BU_TABLE_MAX_COLS];
    int right[BU_TABLE_MAX_COLS]; /* 1: right-aligned (numbers) */
    unsigned ncols, nrows, cap;
    char (*cell)[BU_TABLE_MAX_COLS][BU_TABLE_CELL];
} bu_table;
/* An empty table of `ncols` (<= BU_TABLE_MAX_COLS) columns; `head` is borrowed.
 * With ncols 0, head and right may be NULL: fill t->head, t->right and
 * t->ncols directly. */
void bu_table_init(bu_table *t, unsigned ncols, const char *const *head, const int *right);
/* Append a row of empty cells and return it, to be filled with snprintf. */
char (*bu_table_row(bu_table *t))[BU_TABLE_CELL];
void bu_table_render(const bu_table *t, bu_sbuf *b);
/* Cells row[from..to) say "-": figures that do not apply (not measured, a
 * skipped size, a CPU decoder's GPU columns). */
void bu_cells_dash(char (*row)[BU_TABLE_CELL], unsigned from, unsigned to);
/* `v` as `fmt` in `cell` when `valid`, else "-". */
void bu_cell_or_dash(char *cell, const char *fmt, double v, int valid);
void bu_table_free(bu_table *t);

/* The command line, with argv[0] replaced by `prog` and every argument quoted
 * where needed, so it can be pasted back into a shell. */
void bu_command_line(bu_sbuf *b, const char *prog, int argc, char **argv);

/* Where a record was measured: `label` is the given one or "hostname (N cores)". */
typedef struct bu_machine {
    char label[320];
    char cpu[256];  /* /proc/cpuinfo's model name */
    long cores;     /* online cores */
    char date[64];  /* "YYYY-MM-DD HH:MM UTC", when bu_machine_init ran */
} bu_machine;
void bu_machine_init(bu_machine *m, const char *label);
/* The CPUs this process may run on (sched_getaffinity: taskset, cpusets,
 * a container's share), at least 1; the online count when that fails. */
int bu_usable_cpus(void);

/* Append a record to `path` (NULL: docs/BENCHMARKS.md under `source_dir`):
 * "## DATE, LABEL: TITLE", the command in a code block, then `body`, which
 * ends with a newline. A new file first gets the page's heading. Problems are
 * warnings on stderr prefixed with `prog`; success says where it went. */
void bu_append_record(const char *path, const char *source_dir, const char *prog,
                      const bu_machine *m, const char *title, const char *cmd,
                      const char *body);

/* A run's report in three parts, and what --json prints instead (left empty
 * without --json). Start with {0}. */
typedef struct bu_report {
    bu_sbuf header, table, footer, json;
} bu_report;
/* Print `r` on stdout (its json with `as_json`, else the three parts), then,
 * with `append_to` set, append the three parts as the record `title` (see
 * bu_append_record); frees r's buffers. */
void bu_report_finish(bu_report *r, int as_json, const char *append_to, const char *prog,
                      const bu_machine *m, const char *title, const char *cmd);

/* Command-line parsing and the die/usage helpers live in cli/cli.h. The
 * options of a report and its record, the same in every benchmark that
 * makes one (bu_report_finish's as_json and append_to, bu_machine_init's
 * label), as entries of a cli_opt table: */
#define BU_CLI_REPORT_OPTIONS(json, append_to, label)                                      \
    CLI_FLAG("json", json, "JSON on stdout instead of the table"),                         \
    CLI_STRING("append-to", "FILE", append_to,                                             \
               "append the record (table, command, date, machine) to\n"                   \
               "FILE; without it nothing is written but stdout"),                          \
    CLI_STRING("label", "TEXT", label, "machine name for the record (default: hostname + cores)")

#endif
