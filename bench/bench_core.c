/*
 * bench_core: feeder's per-image pipeline on one core against a plain decode
 * of the same files (docs/BENCHMARKS.md, "The CPU pipeline on one core").
 *
 *   bench_core [--set web|imagenet|both] [--images N] [--data DIR] [--rounds R]
 *              [--cpu C] [--json] [--append-to FILE]
 *
 * Every file of a make_set set (bench/mixset.c; made on first use in
 * ~/.cache/feeder/SET-N) is read into memory once, then each row runs over
 * all of them, R rounds, in this one thread; a row's figure is the median
 * round's thread CPU time (CLOCK_THREAD_CPUTIME_ID) per image, so neighbours
 * on a shared machine cost it cache, not time slices. Rows:
 *
 *   plain     tjDecompress2 of the whole image to RGB (CMYK/YCCK to CMYK: TurboJPEG
 *             has no CMYK-to-RGB), TurboJPEG's default ISLOW IDCT and fancy upsampling
 *   huffman   the entropy decode alone, whole image: jpeg_skip_scanlines over every
 *             row at 1/2 scale (skipped iMCU rows are entropy-decoded, not transformed)
 *   planes    tjDecompressToYUVPlanes: entropy decode + IDCT, no upsampling, no colour
 *             conversion (CMYK/YCCK: the plain row's decode, which has no YCbCr step)
 *   eval      feeder__decode_sample, ROI decoder, Resize 256 + CenterCrop 224, NHWC
 *   eval-huffman, eval-rgb
 *             eval's decode, taken apart: the region the ROI decoder reads (its
 *             crop, DCT scaling feeder__roi_scale and region feeder__roi_axis,
 *             the decoder's own), decoded with libjpeg to its last row with
 *             jpeg_skip_scanlines (entropy decode only), and to RGBX (the
 *             pipeline's decode without the resize). Not to YCbCr to split off
 *             the colour conversion: libjpeg-turbo 2.1's YCbCr output is a scalar
 *             copy (null_convert) that costs as much as its SIMD conversion.
 *   train     the same, RandomResizedCrop 224 (0.08-1, 3/4-4/3) + flip 0.5
 *   eval-turbo  eval through the TURBO decoder (whole image, then resize)
 *
 * The pipeline rows go through the decode/ entry point the worker calls, with
 * one decoder reused for every image as a worker does, and split their time
 * into the decode (what feeder__decode_times calls decode: header, entropy
 * decode, IDCT, upsampling, colour of the decoded region) and the resize +
 * layout write, in the proportions of feeder__decode_times' wall times. "x plain" is plain's time over the row's: > 1 is cheaper
 * than a plain decode. The plain rows' split gives the decode's own
 * breakdown: Huffman = huffman, IDCT = planes - huffman, upsampling + colour
 * = plain - planes. Eval's: Huffman = eval-huffman, IDCT + upsampling +
 * colour = eval-rgb - eval-huffman, resize + write = eval - eval-rgb.
 *
 * The table and JSON go to stdout; --append-to FILE appends the record
 * (command, machine, table) to FILE, the only way this program writes into
 * the checkout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include <jpeglib.h>
#include <turbojpeg.h>

#include "benchutil.h"
#include "cli.h"
#include "decode/decode.h"
#include "mixset.h"

#define PROG "bench_core"
#define MAX_ROUNDS 101

enum { R_PLAIN, R_HUFF, R_PLANES, R_EVAL, R_EVAL_HUFF, R_EVAL_RGB, R_TRAIN, R_EVAL_TURBO,
       R_COUNT };
static const char *const row_names[R_COUNT + 1] = {
    "plain", "huffman", "planes", "eval", "eval-huffman", "eval-rgb", "train", "eval-turbo",
    NULL};
static const char *const row_what[R_COUNT] = {
    "plain decode: tjDecompress2, whole image to RGB",
    "  Huffman: jpeg_skip_scanlines over the whole image",
    "  Huffman + IDCT: tjDecompressToYUVPlanes (no upsampling, no colour)",
    "eval: ROI decode + Resize 256 + CenterCrop 224",
    "  its Huffman: jpeg_skip_scanlines to the region's last row",
    "  + IDCT, upsampling, colour: the region decoded to RGBX",
    "train: ROI decode + RandomResizedCrop 224 + flip",
    "eval through the TURBO decoder (whole image, then resize)"};

static const char *const set_names[] = {"web", "imagenet", "both", NULL};

typedef struct opts {
    int set;
    int only; /* -1: every row; else plain and this one (for perf record) */
    unsigned images, rounds, procs;
    int cpu;
    const char *data;
    int json;
    const char *append_to;
} opts;

typedef struct file {
    uint8_t *p;
    size_t len;
} file;

/* One set in memory and what was measured on it. */
typedef struct set_run {
    char name[64], dir[4096];
    file *f;
    unsigned n, skipped;
    uint64_t bytes;
    double us[R_COUNT];        /* median round, CPU us per image */
    double dec_us[R_COUNT];    /* pipeline rows: decode share, us per image */
    double xform_us[R_COUNT];  /* pipeline rows: resize + write, us per image */
    double faults[R_COUNT];    /* minor page faults per image, median round */
} set_run;

/* The reusable state of one thread, as a worker holds it. */
typedef struct engine {
    tjhandle tj;
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr jerr;
    jmp_buf jb;
    feeder__decoder *dec;
    feeder__transform eval, train;
    uint8_t *out, *planes;
    size_t out_cap, planes_cap;
    uint64_t dec_ns, xform_ns, failed;
} engine;

static uint64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *grow(uint8_t **p, size_t *cap, size_t n)
{
    if (n > *cap) {
        free(*p);
        if (!(*p = malloc(n)))
            cli_die(PROG, "out of memory for %zu bytes", n);
        *cap = n;
    }
    return *p;
}

/* ---- the set ---------------------------------------------------------- */

/* Image k of a make_set set is DIR/class_KK/img_NNNNN.jpg, or .JPEG for a
 * PNG; PNGs are not JPEGs and are left out (counted). */
static void load_set(set_run *s, unsigned n)
{
    s->f = calloc(n, sizeof(file));
    if (!s->f)
        cli_die(PROG, "out of memory");
    for (unsigned k = 0; k < n; k++) {
        char path[4200];
        file *f = &s->f[s->n];
        bm_path(path, sizeof(path), s->dir, k, BM_420);
        if (bu_read_file(path, &f->p, &f->len)) {
            s->skipped++;
            continue;
        }
        if (f->len < 3 || f->p[0] != 0xFF || f->p[1] != 0xD8) {
            free(f->p);
            s->skipped++;
            continue;
        }
        s->bytes += f->len;
        s->n++;
    }
    if (s->n == 0)
        cli_die(PROG, "no JPEG files in %s (is it a make_set set of %u images?)", s->dir, n);
}

static void free_set(set_run *s)
{
    for (unsigned i = 0; i < s->n; i++)
        free(s->f[i].p);
    free(s->f);
}

/* ---- one image of each row ---------------------------------------------- */

static void jerr_exit(j_common_ptr ci)
{
    engine *e = (engine *)ci->client_data;
    longjmp(e->jb, 1);
}

static void jerr_quiet(j_common_ptr ci) { (void)ci; }

static void engine_init(engine *e, uint32_t size)
{
    memset(e, 0, sizeof(*e));
    if (!(e->tj = tjInitDecompress()) || feeder__decoder_create(&e->dec))
        cli_die(PROG, "cannot create the decoders");
    e->ci.err = jpeg_std_error(&e->jerr);
    e->jerr.error_exit = jerr_exit;
    e->jerr.output_message = jerr_quiet;
    e->ci.client_data = e;
    jpeg_create_decompress(&e->ci);
    feeder__transform t = {.decoder = FEEDER_DECODER_ROI, .layout = FEEDER_LAYOUT_NHWC,
                           .height = size, .width = size,
                           .resize = (uint32_t)(((uint64_t)size * 256 + 112) / 224),
                           .scale_min = 0.08, .scale_max = 1.0, .ratio_min = 3.0 / 4.0,
                           .ratio_max = 4.0 / 3.0, .flip_prob = 0.5};
    e->eval = e->train = t;
    e->eval.pipeline = FEEDER_PIPELINE_EVAL;
    e->train.pipeline = FEEDER_PIPELINE_TRAIN;
    grow(&e->out, &e->out_cap, (size_t)size * size * 3);
}

static void engine_free(engine *e)
{
    jpeg_destroy_decompress(&e->ci);
    tjDestroy(e->tj);
    feeder__decoder_destroy(e->dec);
    free(e->out);
    free(e->planes);
}

static int plain(engine *e, const file *f)
{
    int w, h, ss, cs;
    if (tjDecompressHeader3(e->tj, f->p, (unsigned long)f->len, &w, &h, &ss, &cs))
        return -1;
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK, pf = cmyk ? TJPF_CMYK : TJPF_RGB;
    grow(&e->planes, &e->planes_cap, (size_t)w * h * 4);
    return tjDecompress2(e->tj, f->p, (unsigned long)f->len, e->planes, w, 0, h, pf, 0);
}

/* libjpeg's object of `e` on file `f`, its header read (a libjpeg error
 * longjmps to the caller's setjmp on e->jb). */
static struct jpeg_decompress_struct *read_header(engine *e, const file *f)
{
    jpeg_mem_src(&e->ci, f->p, (unsigned long)f->len);
    jpeg_read_header(&e->ci, TRUE);
    return &e->ci;
}

/* The entropy decode alone, as the ROI decoder pays it for rows it skips:
 * jpeg_skip_scanlines over every row but the last (libjpeg-turbo decodes the
 * Huffman data of a skipped iMCU row and discards it, no IDCT), at 1/2 scale
 * so the one iMCU row left costs little. Not 1/8: there libjpeg-turbo's
 * Huffman decoder only steps over the AC coefficients (jdhuff.c's
 * ac_needed), less work than at the other scales the decoders use. */
static int huffman(engine *e, const file *f)
{
    if (setjmp(e->jb)) {
        jpeg_abort_decompress(&e->ci);
        return -1;
    }
    struct jpeg_decompress_struct *ci = read_header(e, f);
    ci->scale_num = 1;
    ci->scale_denom = 2;
    jpeg_start_decompress(ci);
    if (ci->output_height > 1)
        (void)jpeg_skip_scanlines(ci, ci->output_height - 1);
    JSAMPROW row = grow(&e->planes, &e->planes_cap, (size_t)ci->output_width * 4);
    (void)jpeg_read_scanlines(ci, &row, 1);
    jpeg_abort_decompress(ci);
    return 0;
}

static int planes(engine *e, const file *f)
{
    int w, h, ss, cs;
    if (tjDecompressHeader3(e->tj, f->p, (unsigned long)f->len, &w, &h, &ss, &cs))
        return -1;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        return plain(e, f);
    unsigned char *pl[3];
    int strides[3] = {0, 0, 0};
    size_t off = 0;
    int ncomp = cs == TJCS_GRAY ? 1 : 3;
    size_t total = (size_t)tjBufSizeYUV2(w, 4, h, ss);
    grow(&e->planes, &e->planes_cap, total);
    for (int c = 0; c < ncomp; c++) {
        pl[c] = e->planes + off;
        off += (size_t)tjPlaneSizeYUV(c, w, 0, h, ss);
    }
    return tjDecompressToYUVPlanes(e->tj, f->p, (unsigned long)f->len, pl, w, strides, h, 0);
}

/* Eval's region as the ROI decoder decodes it, entropy decode only (row
 * R_EVAL_HUFF) or to RGBX (R_EVAL_RGB), as the pipeline asks for it (CMYK/YCCK
 * to CMYK). */
static int eval_region(engine *e, const file *f, int row)
{
    if (setjmp(e->jb)) {
        jpeg_abort_decompress(&e->ci);
        return -1;
    }
    struct jpeg_decompress_struct *ci = read_header(e, f);
    feeder__crop c;
    feeder__crop_compute(&e->eval, ci->image_width, ci->image_height, 1, 0, 0, &c);
    unsigned m = feeder__roi_scale(&c, &e->eval);
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGBX;
    ci->scale_num = m;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);
    double k = m / 8.0;
    uint32_t x0, x1, y0, y1;
    feeder__roi_axis(c.fx * k, c.fw * k, e->eval.width, ci->output_width, &x0, &x1);
    feeder__roi_axis(c.fy * k, c.fh * k, e->eval.height, ci->output_height, &y0, &y1);
    JDIMENSION xoff = x0, cw = x1 - x0;
    if (cw < ci->output_width)
        jpeg_crop_scanline(ci, &xoff, &cw);
    if (row == R_EVAL_HUFF) {
        (void)jpeg_skip_scanlines(ci, y1);
        jpeg_abort_decompress(ci);
        return 0;
    }
    size_t stride = (size_t)ci->output_width * 4;
    uint8_t *buf = grow(&e->planes, &e->planes_cap, stride);
    if (y0 > 0)
        (void)jpeg_skip_scanlines(ci, y0);
    while (ci->output_scanline < y1) {
        JSAMPROW r = buf; /* one row buffer: the stage's work, not the stores */
        if (jpeg_read_scanlines(ci, &r, 1) != 1)
            break;
    }
    jpeg_abort_decompress(ci);
    return 0;
}

static int pipeline(engine *e, const feeder__transform *t, const file *f, uint64_t round,
                    uint64_t index)
{
    feeder__decode_times tm;
    char err[256];
    int rc = feeder__decode_sample(e->dec, t, f->p, f->len, 1, round, index, e->out, &tm, err,
                                   sizeof(err));
    e->dec_ns += tm.decode_ns;
    e->xform_ns += tm.transform_ns;
    return rc;
}

static int run_one(engine *e, int row, const file *f, uint64_t round, uint64_t index)
{
    switch (row) {
    case R_PLAIN:
        return plain(e, f);
    case R_HUFF:
        return huffman(e, f);
    case R_PLANES:
        return planes(e, f);
    case R_EVAL:
        return pipeline(e, &e->eval, f, round, index);
    case R_EVAL_HUFF:
    case R_EVAL_RGB:
        return eval_region(e, f, row);
    case R_TRAIN:
        return pipeline(e, &e->train, f, round, index);
    default: {
        feeder__transform t = e->eval;
        t.decoder = FEEDER_DECODER_TURBO;
        return pipeline(e, &t, f, round, index);
    }
    }
}

/* ---- rounds ------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

/* One round of one row over the whole set: CPU us per image, and (pipeline
 * rows) the decode / resize split, and minor faults per image. */
typedef struct round_fig {
    double us, dec, xf, pf;
} round_fig;

static round_fig run_round(engine *e, set_run *s, int row, unsigned r)
{
    round_fig f;
    e->dec_ns = e->xform_ns = 0;
    long f0 = minor_faults();
    uint64_t t0 = thread_ns();
    for (unsigned i = 0; i < s->n; i++)
        if (run_one(e, row, &s->f[i], r, i))
            e->failed++;
    uint64_t t1 = thread_ns();
    f.pf = (double)(minor_faults() - f0) / s->n;
    f.us = (double)(t1 - t0) / 1e3 / s->n;
    /* feeder__decode_times is wall time, which on a shared machine includes
     * time slices lost to neighbours: its proportions split the CPU time. */
    double wall = (double)(e->dec_ns + e->xform_ns);
    f.dec = wall > 0 ? f.us * (double)e->dec_ns / wall : 0;
    f.xf = wall > 0 ? f.us * (double)e->xform_ns / wall : 0;
    return f;
}

/* A row's figures: its median round. */
static void keep_median(set_run *s, int row, const round_fig *f, unsigned rounds)
{
    double sorted[MAX_ROUNDS];
    for (unsigned r = 0; r < rounds; r++)
        sorted[r] = f[r].us;
    qsort(sorted, rounds, sizeof(double), cmp_double);
    double med = sorted[rounds / 2];
    for (unsigned r = 0; r < rounds; r++)
        if (f[r].us == med) {
            s->us[row] = med;
            s->dec_us[row] = f[r].dec;
            s->xform_us[row] = f[r].xf;
            s->faults[row] = f[r].pf;
            return;
        }
}

static int row_on(const opts *o, int row)
{
    return o->only < 0 || row == R_PLAIN || row == o->only;
}

static void measure_set(set_run *s, const opts *o)
{
    engine e;
    engine_init(&e, 224);
    /* One untimed pass: the scratch buffers grow to the largest image, as
     * in a worker after its first few batches. */
    for (int row = 0; row < R_COUNT; row++)
        for (unsigned i = 0; row_on(o, row) && i < s->n; i++)
            (void)run_one(&e, row, &s->f[i], 0, i);
    e.failed = 0;
    /* Round-major: round r of every row, then round r + 1, so the rows of
     * one round run within seconds of each other and a neighbour's load
     * that comes and goes weighs on all of them alike (the breakdown
     * subtracts rows from each other). */
    static round_fig fig[R_COUNT][MAX_ROUNDS];
    for (unsigned r = 0; r < o->rounds; r++)
        for (int row = 0; row < R_COUNT; row++)
            if (row_on(o, row))
                fig[row][r] = run_round(&e, s, row, r);
    for (int row = 0; row < R_COUNT; row++)
        if (row_on(o, row))
            keep_median(s, row, fig[row], o->rounds);
    if (e.failed)
        fprintf(stderr, "%s: %s: %llu decodes failed (their time is in the figures)\n", PROG,
                s->name, (unsigned long long)e.failed);
    engine_free(&e);
}

/* The figures of one process, as its pipe carries them. */
typedef struct figures {
    double us[R_COUNT], dec_us[R_COUNT], xform_us[R_COUNT], faults[R_COUNT];
} figures;

static void child_run(set_run *s, const opts *o, int go, int out)
{
    char c;
    (void)!read(go, &c, 1); /* EOF when every process is forked: all start at once */
    measure_set(s, o);
    figures f;
    memcpy(f.us, s->us, sizeof(f.us));
    memcpy(f.dec_us, s->dec_us, sizeof(f.dec_us));
    memcpy(f.xform_us, s->xform_us, sizeof(f.xform_us));
    memcpy(f.faults, s->faults, sizeof(f.faults));
    _exit(write(out, &f, sizeof(f)) == (ssize_t)sizeof(f) ? 0 : 1);
}

static void add_figures(set_run *s, const figures *f, double share)
{
    for (int r = 0; r < R_COUNT; r++) {
        s->us[r] += f->us[r] * share;
        s->dec_us[r] += f->dec_us[r] * share;
        s->xform_us[r] += f->xform_us[r] * share;
        s->faults[r] += f->faults[r] * share;
    }
}

/* --procs N: N processes (forked after the set is loaded, as the loader
 * forks its workers) run the rows at the same time, each over the whole set;
 * the figures are their means. CPU time per image then shows what running
 * side by side costs each one (shared caches, memory bandwidth, frequency),
 * without the time slices that neighbours take. */
static void measure_procs(set_run *s, const opts *o)
{
    if (o->procs <= 1) {
        measure_set(s, o);
        return;
    }
    int go[2], res[64][2];
    pid_t pid[64];
    if (pipe(go))
        cli_die(PROG, "pipe failed");
    for (unsigned k = 0; k < o->procs; k++) {
        if (pipe(res[k]) || (pid[k] = fork()) < 0)
            cli_die(PROG, "pipe or fork failed");
        if (pid[k] == 0) {
            close(go[1]);
            child_run(s, o, go[0], res[k][1]);
        }
        close(res[k][1]);
    }
    close(go[0]);
    close(go[1]);
    for (unsigned k = 0; k < o->procs; k++) {
        figures f;
        int st;
        if (read(res[k][0], &f, sizeof(f)) != (ssize_t)sizeof(f))
            cli_die(PROG, "process %u of %u failed", k, o->procs);
        close(res[k][0]);
        waitpid(pid[k], &st, 0);
        add_figures(s, &f, 1.0 / o->procs);
    }
}

/* ---- report ------------------------------------------------------------- */

static void table_rows(const set_run *s, bu_table *t)
{
    for (int row = 0; row < R_COUNT; row++) {
        if (s->us[row] <= 0)
            continue; /* not measured (--only) */
        char(*c)[BU_TABLE_CELL] = bu_table_row(t);
        double us = s->us[row];
        snprintf(c[0], BU_TABLE_CELL, "%.60s", s->name);
        snprintf(c[1], BU_TABLE_CELL, "%s", row_what[row]);
        snprintf(c[2], BU_TABLE_CELL, "%.0f", us);
        snprintf(c[3], BU_TABLE_CELL, "%.0f", 1e6 / us);
        snprintf(c[4], BU_TABLE_CELL, "%.2fx", s->us[R_PLAIN] / us);
        snprintf(c[7], BU_TABLE_CELL, "%.2f", s->faults[row]);
        if (row == R_EVAL && s->us[R_EVAL_HUFF] > 0 && s->us[R_EVAL_RGB] > 0) {
            snprintf(c[5], BU_TABLE_CELL, "%.0f + %.0f", s->us[R_EVAL_HUFF],
                     s->us[R_EVAL_RGB] - s->us[R_EVAL_HUFF]);
            snprintf(c[6], BU_TABLE_CELL, "%.0f", us - s->us[R_EVAL_RGB]);
        } else if (row == R_EVAL || row == R_TRAIN || row == R_EVAL_TURBO) {
            snprintf(c[5], BU_TABLE_CELL, "%.0f", s->dec_us[row]);
            snprintf(c[6], BU_TABLE_CELL, "%.0f", s->xform_us[row]);
        } else if (row == R_PLAIN && s->us[R_HUFF] > 0 && s->us[R_PLANES] > 0) {
            snprintf(c[5], BU_TABLE_CELL, "%.0f + %.0f + %.0f", s->us[R_HUFF],
                     s->us[R_PLANES] - s->us[R_HUFF], s->us[R_PLAIN] - s->us[R_PLANES]);
        }
    }
}

static double ratio(const set_run *s, int row)
{
    return s->us[row] > 0 ? s->us[R_PLAIN] / s->us[row] : 0.0;
}

static void json_set(const set_run *s, bu_sbuf *b)
{
    bu_sb_printf(b, "{\"set\": ");
    bu_sb_json_str(b, s->name);
    bu_sb_printf(b, ", \"dir\": ");
    bu_sb_json_str(b, s->dir);
    bu_sb_printf(b, ", \"images\": %u, \"skipped\": %u, \"mean_kb\": %.1f, \"us_per_image\": {",
                 s->n, s->skipped, (double)s->bytes / s->n / 1000.0);
    for (int row = 0; row < R_COUNT; row++)
        bu_sb_printf(b, "%s\"%s\": %.1f", row ? ", " : "", row_names[row], s->us[row]);
    /* Rows --only left out are 0.0, and so are their ratios. */
    bu_sb_printf(b, "}, \"ratio_to_plain\": {\"eval\": %.3f, \"train\": %.3f, "
                    "\"eval_turbo\": %.3f}",
                 ratio(s, R_EVAL), ratio(s, R_TRAIN), ratio(s, R_EVAL_TURBO));
    bu_sb_printf(b, ", \"faults_per_image\": {");
    for (int row = 0; row < R_COUNT; row++)
        bu_sb_printf(b, "%s\"%s\": %.3f", row ? ", " : "", row_names[row], s->faults[row]);
    bu_sb_printf(b, "}");
    bu_sb_printf(b, ", \"split_us\": {\"eval\": [%.1f, %.1f], \"train\": [%.1f, %.1f]}}",
                 s->dec_us[R_EVAL], s->xform_us[R_EVAL], s->dec_us[R_TRAIN],
                 s->xform_us[R_TRAIN]);
}

static const char notes[] =
    "Thread CPU time per image, median of the rounds; one thread. \"x plain\" is the plain\n"
    "decode's time over the row's (> 1: cheaper than a plain decode). The plain row's split is\n"
    "Huffman + IDCT + (upsampling and colour conversion), from the two rows under it; eval's\n"
    "is Huffman + (IDCT, upsampling and colour) of the region it decodes, from the two rows\n"
    "under it, and the resize with the layout write is eval less the region's RGBX decode.\n"
    "The other pipeline rows' split is the decode of the region (header, Huffman, IDCT,\n"
    "upsampling, colour) and the resize with the layout write, in the proportions of\n"
    "feeder__decode_times (wall time, which on a shared machine includes slices lost to\n"
    "neighbours). Faults are the thread's minor page faults per image (getrusage).\n";

static void report(set_run *sets, unsigned nsets, const opts *o, int argc, char **argv)
{
    static const char *head[] = {"set", "row", "µs/image", "images/s", "x plain",
                                 "decode µs", "resize+write µs", "faults/image"};
    static const int right[] = {0, 0, 1, 1, 1, 1, 1, 1};
    bu_machine m;
    bu_machine_init(&m, NULL);
    bu_table t;
    bu_table_init(&t, 8, head, right);
    bu_sbuf js = {0}, body = {0}, cmd = {0};
    bu_sb_printf(&js, "{\"machine\": ");
    bu_sb_json_str(&js, m.label);
    bu_sb_printf(&js, ", \"cpu\": ");
    bu_sb_json_str(&js, m.cpu);
    bu_sb_printf(&js, ", \"rounds\": %u, \"procs\": %u, \"sets\": [", o->rounds, o->procs);
    for (unsigned i = 0; i < nsets; i++) {
        table_rows(&sets[i], &t);
        if (i)
            bu_sb_printf(&js, ", ");
        json_set(&sets[i], &js);
    }
    bu_sb_printf(&js, "]}\n");
    for (unsigned i = 0; i < nsets; i++)
        bu_sb_printf(&body, "Set %s: %s, %u JPEGs (%u left out: not JPEG), mean %.1f KB.\n",
                     sets[i].name, sets[i].dir, sets[i].n, sets[i].skipped,
                     (double)sets[i].bytes / sets[i].n / 1000.0);
    if (o->procs > 1)
        bu_sb_printf(&body, "%u processes at once, each over the whole set; figures are their "
                            "means.\n", o->procs);
    bu_sb_printf(&body, "\n");
    bu_table_render(&t, &body);
    bu_sb_printf(&body, "\n%s", notes);
    if (o->json)
        fputs(js.p, stdout);
    else
        printf("%s: %s (%s), one core\n\n%s", PROG, m.label, m.cpu, body.p);
    if (o->append_to) {
        bu_command_line(&cmd, "build/bench/" PROG, argc, argv);
        bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &m,
                         "the pipeline against a plain decode, one core", cmd.p, body.p);
    }
    bu_table_free(&t);
    free(js.p);
    free(body.p);
    free(cmd.p);
}

/* ---- main --------------------------------------------------------------- */

static void pin_cpu(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(cpu, &cs);
    if (sched_setaffinity(0, sizeof(cs), &cs))
        cli_die(PROG, "cannot pin to CPU %d", cpu);
}

static void prepare_set(set_run *s, const char *set, const opts *o)
{
    char err[512];
    memset(s, 0, sizeof(*s));
    if (o->data) {
        snprintf(s->name, sizeof(s->name), "%s", set);
        snprintf(s->dir, sizeof(s->dir), "%s", o->data);
    } else {
        snprintf(s->name, sizeof(s->name), "%s", set);
        bm_default_dir(s->dir, sizeof(s->dir), set, o->images);
        if (bm_ensure_set(s->dir, set, o->images, FEEDER_BENCH_PHOTOS, err, sizeof(err)))
            cli_die(PROG, "%s", err);
    }
    load_set(s, o->images);
}

int main(int argc, char **argv)
{
    opts o = {.set = 2, .only = -1, .images = 500, .rounds = 5, .procs = 1, .cpu = -1};
    cli_opt table[] = {
        CLI_ENUM("set", o.set, set_names, "the make_set preset(s) to run (both)"),
        CLI_UINT("images", "N", o.images, 10, 1000000, "images of each set (500)"),
        CLI_STRING("data", "DIR", o.data, "a make_set set of N images to use instead of\n"
                                          "the cached one (--set names it; not both)"),
        CLI_UINT("rounds", "R", o.rounds, 1, MAX_ROUNDS, "passes over the set per row; the\n"
                                                         "median counts (5)"),
        CLI_UINT("procs", "N", o.procs, 1, 64, "run the rows in N processes at once and\n"
                                                "report their mean (1)"),
        CLI_INT("cpu", "C", o.cpu, -1, 4095, "pin the thread to CPU C (-1: no pinning)"),
        CLI_ENUM("only", o.only, row_names, "measure only the plain row and this one\n"
                                            "(to run under perf record)"),
        CLI_FLAG("json", o.json, "JSON on stdout instead of the table"),
        CLI_STRING("append-to", "FILE", o.append_to, "append the record to FILE\n"
                                                     "(docs/BENCHMARKS.md, say)"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = table,
                     .usage = "usage: bench_core [options]\n"
                              "The pipeline on one core against a plain full decode.\n"};
    cli_parse(&spec, argc, argv);
    if (o.data && o.set == 2)
        cli_die_usage(PROG, "--data needs --set web or --set imagenet (the set it holds)");
    pin_cpu(o.cpu);
    set_run sets[2];
    unsigned nsets = 0;
    for (int k = 0; k < 2; k++)
        if (o.set == 2 || o.set == k)
            prepare_set(&sets[nsets++], set_names[k], &o);
    for (unsigned i = 0; i < nsets; i++)
        measure_procs(&sets[i], &o);
    report(sets, nsets, &o, argc, argv);
    for (unsigned i = 0; i < nsets; i++)
        free_set(&sets[i]);
    return 0;
}
