/*
 * bench_shrink: what `feeder-pack --max-side N --quality Q` buys and costs on
 * a make_set set, without writing a pack: each file goes through the
 * packer's own shrink (tools/shrink.c, the bytes a pack would hold), then the
 * eval and train pipelines (decode/, ROI decoder, 224) run on the original
 * and on the shrunk file, on one core.
 *
 *   bench_shrink [--set web|imagenet] [--images N] [--max-side N] [--quality Q]
 *                [--rounds R] [--append-to FILE]
 *
 * Reports the bytes before and after, how many files were re-encoded, the
 * pipelines' thread CPU time per image on both (median of R rounds), and the
 * mean absolute difference of the eval output (uint8, every pixel and
 * channel of every image) between the original-resolution pipeline and the
 * shrunk one, with the largest per-image mean. The train crop is drawn from
 * the image size, so its output on a shrunk file is a slightly different
 * crop: only its time is compared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "benchutil.h"
#include "cli.h"
#include "decode/decode.h"
#include "mixset.h"
#include "shrink.h"

#define PROG "bench_shrink"
#define MAX_ROUNDS 101

static const char *const set_names[] = {"web", "imagenet", NULL};

typedef struct opts {
    int set;
    unsigned images, rounds, max_side;
    int quality;
    const char *append_to;
} opts;

typedef struct blob {
    uint8_t *p;
    size_t len;
} blob;

typedef struct results {
    unsigned n, shrunk;
    uint64_t bytes[2];
    double eval_us[2], train_us[2];
    double mad, mad_max;
} results;

static uint64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Every JPEG of the set, and its shrunk form (a copy of the original when it
 * fits). */
static unsigned load(const char *dir, unsigned n, const opts *o, blob *orig, blob *small,
                     results *r)
{
    fpk_shrinker *sk = fpk_shrinker_create(o->max_side, o->quality);
    tjhandle tj = tjInitDecompress();
    if (!sk || !tj)
        cli_die(PROG, "out of memory");
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++) {
        char path[4200], err[1024];
        blob *b = &orig[m];
        int w, h, ss, cs;
        bm_path(path, sizeof(path), dir, k, BM_420);
        if (bu_read_file(path, &b->p, &b->len))
            continue; /* a PNG named .JPEG: not a JPEG record */
        if (tjDecompressHeader3(tj, b->p, (unsigned long)b->len, &w, &h, &ss, &cs))
            cli_die(PROG, "%s: %s", path, tjGetErrorStr2(tj));
        const uint8_t *out;
        size_t olen;
        int rc = fpk_shrink(sk, b->p, b->len, w, h, ss, cs, &out, &olen, err, sizeof(err));
        if (rc < 0)
            cli_die(PROG, "%s: %s", path, err);
        if (rc == 0)
            out = b->p, olen = b->len;
        r->shrunk += rc == 1;
        if (!(small[m].p = malloc(olen)))
            cli_die(PROG, "out of memory");
        memcpy(small[m].p, out, olen);
        small[m].len = olen;
        r->bytes[0] += b->len;
        r->bytes[1] += olen;
        m++;
    }
    fpk_shrinker_destroy(sk);
    tjDestroy(tj);
    return m;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median round's CPU us per image of one pipeline over one version. */
static double time_pipeline(feeder__decoder *d, const feeder__transform *t, const blob *v,
                            unsigned n, unsigned rounds, uint8_t *out)
{
    double us[MAX_ROUNDS];
    char err[256];
    for (unsigned r = 0; r < rounds; r++) {
        uint64_t t0 = thread_ns();
        for (unsigned i = 0; i < n; i++)
            if (feeder__decode_sample(d, t, v[i].p, v[i].len, 1, r, i, out, NULL, err,
                                      sizeof(err)))
                cli_die(PROG, "image %u: %s", i, err);
        us[r] = (double)(thread_ns() - t0) / 1e3 / n;
    }
    qsort(us, rounds, sizeof(double), cmp_double);
    return us[rounds / 2];
}

/* Mean absolute difference of the eval outputs, over all images, and the
 * largest per-image one. */
static void eval_mad(feeder__decoder *d, const feeder__transform *t, const blob *a,
                     const blob *b, unsigned n, results *r)
{
    size_t px = (size_t)t->width * t->height * 3;
    uint8_t *oa = malloc(px), *ob = malloc(px);
    if (!oa || !ob)
        cli_die(PROG, "out of memory");
    double total = 0;
    for (unsigned i = 0; i < n; i++) {
        if (feeder__decode_sample(d, t, a[i].p, a[i].len, 1, 0, i, oa, NULL, NULL, 0) ||
            feeder__decode_sample(d, t, b[i].p, b[i].len, 1, 0, i, ob, NULL, NULL, 0))
            cli_die(PROG, "image %u failed to decode", i);
        uint64_t s = 0;
        for (size_t k = 0; k < px; k++)
            s += (uint64_t)abs((int)oa[k] - (int)ob[k]);
        double m = (double)s / px;
        total += m;
        if (m > r->mad_max)
            r->mad_max = m;
    }
    r->mad = total / n;
    free(oa);
    free(ob);
}

static void measure(blob *v[2], unsigned n, const opts *o, results *r)
{
    feeder__decoder *d;
    if (feeder__decoder_create(&d))
        cli_die(PROG, "out of memory");
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_EVAL, .decoder = FEEDER_DECODER_ROI,
                           .layout = FEEDER_LAYOUT_NHWC, .height = 224, .width = 224,
                           .resize = 256, .scale_min = 0.08, .scale_max = 1.0,
                           .ratio_min = 3.0 / 4.0, .ratio_max = 4.0 / 3.0, .flip_prob = 0.5};
    feeder__transform tr = t;
    tr.pipeline = FEEDER_PIPELINE_TRAIN;
    uint8_t *out = malloc((size_t)224 * 224 * 3);
    if (!out)
        cli_die(PROG, "out of memory");
    for (int k = 0; k < 2; k++) {
        (void)time_pipeline(d, &t, v[k], n, 1, out); /* warm the scratch */
        r->eval_us[k] = time_pipeline(d, &t, v[k], n, o->rounds, out);
        r->train_us[k] = time_pipeline(d, &tr, v[k], n, o->rounds, out);
    }
    eval_mad(d, &t, v[0], v[1], n, r);
    free(out);
    feeder__decoder_destroy(d);
}

static void report(const opts *o, const char *dir, const results *r, int argc, char **argv)
{
    bu_sbuf body = {0}, cmd = {0};
    bu_sb_printf(&body,
                 "Set %s (%s): %u JPEGs; %u re-encoded at max side %u, quality %d.\n\n"
                 "| | original | max side %u | ratio |\n| --- | ---: | ---: | ---: |\n"
                 "| MB | %.1f | %.1f | %.2fx |\n"
                 "| eval µs/image (one core, CPU) | %.0f | %.0f | %.2fx |\n"
                 "| train µs/image | %.0f | %.0f | %.2fx |\n\n"
                 "Eval output against the original-resolution pipeline: mean absolute "
                 "difference %.3f (uint8 levels, all pixels), largest per-image mean %.3f.\n",
                 set_names[o->set], dir, r->n, r->shrunk, o->max_side, o->quality, o->max_side,
                 r->bytes[0] / 1e6, r->bytes[1] / 1e6, (double)r->bytes[0] / r->bytes[1],
                 r->eval_us[0], r->eval_us[1], r->eval_us[0] / r->eval_us[1], r->train_us[0],
                 r->train_us[1], r->train_us[0] / r->train_us[1], r->mad, r->mad_max);
    bu_machine m;
    bu_machine_init(&m, NULL);
    printf("%s: %s (%s)\n\n%s", PROG, m.label, m.cpu, body.p);
    if (o->append_to) {
        bu_command_line(&cmd, "build/bench/" PROG, argc, argv);
        bu_append_record(o->append_to, FEEDER_SOURCE_DIR, PROG, &m,
                         "feeder-pack --max-side: bytes, decode time, pixels", cmd.p, body.p);
    }
    free(body.p);
    free(cmd.p);
}

int main(int argc, char **argv)
{
    opts o = {.set = 0, .images = 1000, .rounds = 3, .max_side = 512, .quality = 90};
    cli_opt table[] = {
        CLI_ENUM("set", o.set, set_names, "the make_set preset (web)"),
        CLI_UINT("images", "N", o.images, 10, 1000000, "images in the set (1000)"),
        CLI_UINT("max-side", "N", o.max_side, 16, 16384, "as feeder-pack's (512)"),
        CLI_INT("quality", "Q", o.quality, 1, 100, "as feeder-pack's (90)"),
        CLI_UINT("rounds", "R", o.rounds, 1, MAX_ROUNDS, "timed passes; the median counts (3)"),
        CLI_STRING("append-to", "FILE", o.append_to, "append the record to FILE"),
        CLI_END,
    };
    cli_spec spec = {.prog = PROG, .opts = table,
                     .usage = "usage: bench_shrink [options]\n"
                              "feeder-pack --max-side on a make_set set: bytes, time, pixels.\n"};
    cli_parse(&spec, argc, argv);
    char dir[4096], err[512];
    bm_default_dir(dir, sizeof(dir), set_names[o.set], o.images);
    if (bm_ensure_set(dir, set_names[o.set], o.images, FEEDER_BENCH_PHOTOS, err, sizeof(err)))
        cli_die(PROG, "%s", err);
    blob *orig = calloc(o.images, sizeof(blob)), *small = calloc(o.images, sizeof(blob));
    if (!orig || !small)
        cli_die(PROG, "out of memory");
    results r = {0};
    r.n = load(dir, o.images, &o, orig, small, &r);
    if (!r.n)
        cli_die(PROG, "no JPEGs in %s", dir);
    blob *v[2] = {orig, small};
    measure(v, r.n, &o, &r);
    report(&o, dir, &r, argc, argv);
    for (unsigned i = 0; i < r.n; i++) {
        free(orig[i].p);
        free(small[i].p);
    }
    free(orig);
    free(small);
    return 0;
}
