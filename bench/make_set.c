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

/* The options land in A; each share or range given replaces the preset's
 * value (given[] says which, by the table's order). */
typedef struct args {
    int set;
    uint64_t seed;
    unsigned jobs;
    bm_mix ov;
} args;

static args A = {.seed = 1};
static int given[32];

static cli_opt table[] = {
    CLI_ENUM("set", A.set, set_names, "the mix (web); uniform is baseline 4:2:0 only"),
    CLI_UINT("seed", "N", A.seed, 0, UINT64_MAX, "seed of every choice (1)"),
    CLI_UINT("jobs", "N", A.jobs, 0, 8, "processes, 0 = one per core (0)"),
    CLI_UINT("short-min", "PX", A.ov.short_min, 16, 20000, "short side, ordinary images"),
    CLI_UINT("short-max", "PX", A.ov.short_max, 16, 20000, "(web 200-800, imagenet 400-620)"),
    CLI_DOUBLE("large", "SHARE", A.ov.large, 0, 1, "share of the large tail (web 0.03)"),
    CLI_UINT("large-min", "PX", A.ov.large_min, 16, 20000, "short side of the large tail"),
    CLI_UINT("large-max", "PX", A.ov.large_max, 16, 20000, "(2000-3000)"),
    CLI_INT("q-min", "Q", A.ov.q_min, 1, 100, "JPEG quality range (web 70-95,"),
    CLI_INT("q-max", "Q", A.ov.q_max, 1, 100, "imagenet 90-98)"),
    CLI_DOUBLE("s422", "SHARE", A.ov.share[BM_422], 0, 1, "baseline 4:2:2 share (0.10)"),
    CLI_DOUBLE("s444", "SHARE", A.ov.share[BM_444], 0, 1, "baseline 4:4:4 (web 0.30, imagenet 0.70)"),
    CLI_DOUBLE("progressive", "SHARE", A.ov.share[BM_PROGRESSIVE], 0, 1, "(web 0.03)"),
    CLI_DOUBLE("gray", "SHARE", A.ov.share[BM_GRAY], 0, 1, "grayscale (web 0.02)"),
    CLI_DOUBLE("cmyk", "SHARE", A.ov.share[BM_CMYK], 0, 1, "Adobe CMYK (web 0.005)"),
    CLI_DOUBLE("ycck", "SHARE", A.ov.share[BM_YCCK], 0, 1, "Adobe YCCK (web 0.005)"),
    CLI_DOUBLE("png", "SHARE", A.ov.share[BM_PNG], 0, 1, "PNGs named .JPEG (web 0)"),
    CLI_DOUBLE("restart", "SHARE", A.ov.restart, 0, 1, "JPEGs with a restart interval (web 0.05)"),
    CLI_DOUBLE("exif", "SHARE", A.ov.exif, 0, 1, "with an Exif orientation (web 0.04)"),
    CLI_DOUBLE("icc", "SHARE", A.ov.icc, 0, 1, "with an ICC profile (web 0.04)"),
    CLI_END,
};

static int was_given(const char *name)
{
    for (int i = 0; table[i].name; i++)
        if (strcmp(table[i].name, name) == 0)
            return given[i];
    return 0;
}

static void parse(int argc, char **argv, const char **dir, uint64_t *n)
{
    for (int i = 0; table[i].name; i++)
        table[i].given = &given[i];
    cli_spec spec = {.prog = PROG, .opts = table, .min_args = 2, .max_args = 2,
                     .usage = "usage: " PROG " [options] DIR N\n"
                              "Makes N images in DIR/class_00..09 (4:2:0 takes the share the "
                              "other kinds leave).\n"};
    int first = cli_parse(&spec, argc, argv);
    *dir = argv[first];
    *n = cli_parse_uint(PROG, "N", argv[first + 1], 1, 100000000);
}

/* The preset with the given overrides on top. */
static void resolve(bm_mix *m)
{
    bm_preset(set_names[A.set], m);
    const bm_mix *o = &A.ov;
#define TAKE(name, field)                                                                     \
    if (was_given(name))                                                                      \
        m->field = o->field;
    TAKE("short-min", short_min) TAKE("short-max", short_max) TAKE("large", large)
    TAKE("large-min", large_min) TAKE("large-max", large_max) TAKE("q-min", q_min)
    TAKE("q-max", q_max) TAKE("s422", share[BM_422]) TAKE("s444", share[BM_444])
    TAKE("progressive", share[BM_PROGRESSIVE]) TAKE("gray", share[BM_GRAY])
    TAKE("cmyk", share[BM_CMYK]) TAKE("ycck", share[BM_YCCK]) TAKE("png", share[BM_PNG])
    TAKE("restart", restart) TAKE("exif", exif) TAKE("icc", icc)
#undef TAKE
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
    const char *dir;
    uint64_t n;
    parse(argc, argv, &dir, &n);
    const char *photos_dir = getenv("FEEDER_BENCH_PHOTOS");
    char err[512];
    bu_photos *photos;
    if (bu_photos_load(photos_dir && *photos_dir ? photos_dir : FEEDER_BENCH_PHOTOS, &photos,
                       err, sizeof(err)))
        cli_die(PROG, "loading the photos: %s (set FEEDER_BENCH_PHOTOS)", err);
    int rc;
    if (strcmp(set_names[A.set], "uniform") == 0) {
        if (n % 10)
            cli_die_usage(PROG, "--set uniform makes ten equal classes: N must be a multiple of 10");
        uint64_t t0 = bu_now_ns();
        rc = bu_make_dataset(photos, dir, 10, (unsigned)(n / 10), A.seed, 1);
        if (rc == 0)
            printf("uniform set of %llu baseline 4:2:0 JPEGs in %s (%.1f s)\n",
                   (unsigned long long)n, dir, (double)(bu_now_ns() - t0) / 1e9);
    } else {
        bm_mix m;
        resolve(&m);
        bm_report r;
        rc = bm_make_set(photos, &m, dir, n, A.seed, A.jobs, 1, &r);
        if (rc == 0)
            bm_report_print(stdout, &m, dir, &r);
    }
    bu_photos_free(photos);
    if (rc)
        cli_die(PROG, "making %s: %s", dir, strerror(-rc));
    return 0;
}
