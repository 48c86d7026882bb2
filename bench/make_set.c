/*
 * make_set: make a benchmark image set from the photos in bench/photos.
 *
 *   make_set DIR N                      the web-like mix (bench_loader's default set)
 *   make_set --set imagenet DIR N       ImageNet-like files (~500x375, quality 90-98)
 *   make_set --set uniform DIR N        the old uniform set: baseline 4:2:0 only
 *   make_set --gray 0.5 --cmyk 0.5 DIR 60   forced shares
 *
 * A pure function of its arguments (same arguments, same bytes); prints the
 * mix it made: counts per kind, markers, large images, mean size. A folder
 * already holding the same set is reused.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "cli.h"
#include "mixset.h"

#ifndef FEEDER_BENCH_PHOTOS
#define FEEDER_BENCH_PHOTOS "bench/photos"
#endif

#define PROG "make_set"

static const char *const set_names[] = {"web", "imagenet", "uniform", NULL};

/* The overrides: each given flag replaces the preset's value. */
typedef struct args {
    int set;
    uint64_t seed;
    unsigned jobs;
    bm_mix ov;
    int given[32];
} args;

static void parse(args *a, int argc, char **argv, const char **dir, uint64_t *n)
{
    bm_mix *m = &a->ov;
    int *g = a->given;
    cli_opt opts[] = {
        CLI_ENUM("set", a->set, set_names, "the mix (web); uniform is baseline 4:2:0 only"),
        CLI_UINT("seed", "N", a->seed, 0, UINT64_MAX, "seed of every choice (1)"),
        CLI_UINT("jobs", "N", a->jobs, 0, 8, "processes, 0 = one per core (0)"),
        CLI_UINT("short-min", "PX", m->short_min, 16, 20000, "short side, ordinary images"),
        CLI_UINT("short-max", "PX", m->short_max, 16, 20000, "(web 200-800, imagenet 400-620)"),
        CLI_DOUBLE("large", "SHARE", m->large, 0, 1, "share of the large tail (web 0.03)"),
        CLI_UINT("large-min", "PX", m->large_min, 16, 20000, "short side of the large tail"),
        CLI_UINT("large-max", "PX", m->large_max, 16, 20000, "(2000-3000)"),
        CLI_INT("q-min", "Q", m->q_min, 1, 100, "JPEG quality range (web 70-95,"),
        CLI_INT("q-max", "Q", m->q_max, 1, 100, "imagenet 90-98)"),
        CLI_DOUBLE("s422", "SHARE", m->share[BM_422], 0, 1, "baseline 4:2:2 share (0.10)"),
        CLI_DOUBLE("s444", "SHARE", m->share[BM_444], 0, 1, "baseline 4:4:4 (web 0.30, imagenet 0.70)"),
        CLI_DOUBLE("progressive", "SHARE", m->share[BM_PROGRESSIVE], 0, 1, "(web 0.03)"),
        CLI_DOUBLE("gray", "SHARE", m->share[BM_GRAY], 0, 1, "grayscale (web 0.02)"),
        CLI_DOUBLE("cmyk", "SHARE", m->share[BM_CMYK], 0, 1, "Adobe CMYK (web 0.005)"),
        CLI_DOUBLE("ycck", "SHARE", m->share[BM_YCCK], 0, 1, "Adobe YCCK (web 0.005)"),
        CLI_DOUBLE("png", "SHARE", m->share[BM_PNG], 0, 1, "PNGs named .JPEG (web 0)"),
        CLI_DOUBLE("restart", "SHARE", m->restart, 0, 1, "JPEGs with a restart interval (web 0.05)"),
        CLI_DOUBLE("exif", "SHARE", m->exif, 0, 1, "with an Exif orientation (web 0.04)"),
        CLI_DOUBLE("icc", "SHARE", m->icc, 0, 1, "with an ICC profile (web 0.04)"),
        CLI_END,
    };
    for (int i = 3; opts[i].name; i++)
        opts[i].given = &g[i];
    a->seed = 1;
    cli_spec spec = {.prog = PROG, .opts = opts, .min_args = 2, .max_args = 2,
                     .usage = "usage: " PROG " [options] DIR N\n"
                              "Makes N images in DIR/class_00..09 (4:2:0 takes the share the "
                              "other kinds leave).\n"};
    int first = cli_parse(&spec, argc, argv);
    *dir = argv[first];
    *n = cli_parse_uint(PROG, "N", argv[first + 1], 1, 100000000);
}

/* The preset with the given overrides on top. */
static void resolve(const args *a, bm_mix *m)
{
    bm_preset(set_names[a->set], m);
    const bm_mix *o = &a->ov;
    const int *g = a->given;
    if (g[3]) m->short_min = o->short_min;
    if (g[4]) m->short_max = o->short_max;
    if (g[5]) m->large = o->large;
    if (g[6]) m->large_min = o->large_min;
    if (g[7]) m->large_max = o->large_max;
    if (g[8]) m->q_min = o->q_min;
    if (g[9]) m->q_max = o->q_max;
    static const bm_kind kinds[] = {BM_422, BM_444, BM_PROGRESSIVE, BM_GRAY, BM_CMYK, BM_YCCK,
                                    BM_PNG};
    for (int i = 0; i < 7; i++)
        if (g[10 + i])
            m->share[kinds[i]] = o->share[kinds[i]];
    if (g[17]) m->restart = o->restart;
    if (g[18]) m->exif = o->exif;
    if (g[19]) m->icc = o->icc;
    double sum = 0;
    for (int k = 1; k < BM_KINDS; k++)
        sum += m->share[k];
    if (sum > 1 + 1e-9)
        cli_die_usage(PROG, "the kinds' shares add up to %.3f, more than 1", sum);
    if (m->short_min > m->short_max || m->large_min > m->large_max || m->q_min > m->q_max)
        cli_die_usage(PROG, "a range's minimum is above its maximum");
}

int main(int argc, char **argv)
{
    args a = {0};
    const char *dir;
    uint64_t n;
    parse(&a, argc, argv, &dir, &n);
    const char *photos_dir = getenv("FEEDER_BENCH_PHOTOS");
    char err[512];
    bu_photos *photos;
    if (bu_photos_load(photos_dir && *photos_dir ? photos_dir : FEEDER_BENCH_PHOTOS, &photos,
                       err, sizeof(err)))
        cli_die(PROG, "loading the photos: %s (set FEEDER_BENCH_PHOTOS)", err);
    int rc;
    if (strcmp(set_names[a.set], "uniform") == 0) {
        if (n % 10)
            cli_die_usage(PROG, "--set uniform makes ten equal classes: N must be a multiple of 10");
        uint64_t t0 = bu_now_ns();
        rc = bu_make_dataset(photos, dir, 10, (unsigned)(n / 10), a.seed, 1);
        if (rc == 0)
            printf("uniform set of %llu baseline 4:2:0 JPEGs in %s (%.1f s)\n",
                   (unsigned long long)n, dir, (double)(bu_now_ns() - t0) / 1e9);
    } else {
        bm_mix m;
        resolve(&a, &m);
        bm_report r;
        rc = bm_make_set(photos, &m, dir, n, a.seed, a.jobs, 1, &r);
        if (rc == 0)
            bm_report_print(stdout, &m, dir, &r);
    }
    bu_photos_free(photos);
    if (rc)
        cli_die(PROG, "making %s: %s", dir, strerror(-rc));
    return 0;
}
