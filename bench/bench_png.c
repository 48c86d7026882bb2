/*
 * PNG decode: feeder's PNG path against libspng's own decode of the same
 * files, one core. Makes N 500x375 PNGs in memory from random crops of the
 * photos in bench/photos (photographic content, libspng's default
 * compression), then decodes each set three times and keeps the best pass:
 *   spng   spng_ctx_new, spng_decode_image(SPNG_FMT_RGB8) into a reused buffer
 *   feeder feeder__png_decode (the limits, the header checks, the same decode)
 *   sample feeder__decode_sample to 224x224 (decode + resize), for scale.
 *   bench_png [N]      (default 300)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <spng.h>

#include "benchutil.h"
#include "cli.h"
#include "decode/decode.h"
#include "decode/format.h"

#define PW 500
#define PH 375

typedef struct pngf {
    void *p;
    size_t n;
} pngf;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int encode(const uint8_t *rgb, pngf *out)
{
    spng_ctx *e = spng_ctx_new(SPNG_CTX_ENCODER);
    spng_set_option(e, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ih = {.width = PW, .height = PH, .bit_depth = 8,
                           .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    spng_set_ihdr(e, &ih);
    int rc = spng_encode_image(e, rgb, (size_t)PW * PH * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    out->p = rc ? NULL : spng_get_png_buffer(e, &out->n, &rc);
    spng_ctx_free(e);
    return out->p ? 0 : -1;
}

static size_t read_file(const char *path, uint8_t **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    size_t got = fread(*out, 1, (size_t)n, f);
    fclose(f);
    return got;
}

int main(int argc, char **argv)
{
    cli_opt opts[] = {CLI_END};
    cli_spec spec = {.prog = "bench_png", .opts = opts, .max_args = 1,
                     .usage = "usage: bench_png [N]\nfeeder's PNG decode against libspng's on N "
                              "500x375 PNGs (300).\n"};
    int first = cli_parse(&spec, argc, argv);
    int n = first < argc ? atoi(argv[first]) : 300;
    static const char *photos[] = {"astronaut.jpg", "chelsea.jpg", "coffee.jpg",
                                   "hubble_deep_field.jpg", "retina.jpg", "rocket.jpg"};
    feeder__decoder *d;
    if (n <= 0 || feeder__decoder_create(&d))
        return 1;
    feeder__transform mk = {.pipeline = FEEDER_PIPELINE_TRAIN, .decoder = FEEDER_DECODER_TURBO,
                            .height = PH, .width = PW, .scale_min = 0.25, .scale_max = 1,
                            .ratio_min = 0.75, .ratio_max = 1.33, .flip_prob = 0.5};
    pngf *f = calloc((size_t)n, sizeof(*f));
    uint8_t *rgb = malloc((size_t)PW * PH * 3);
    size_t total = 0;
    char err[256], path[1024];
    for (int i = 0; i < n; i++) {
        uint8_t *j = NULL;
        snprintf(path, sizeof(path), "%s/%s", FEEDER_BENCH_PHOTOS, photos[i % 6]);
        size_t jl = read_file(path, &j);
        if (!jl || feeder__decode_sample(d, &mk, j, jl, 1, 0, (uint64_t)i, rgb, NULL, err,
                                         sizeof(err)) || encode(rgb, &f[i])) {
            fprintf(stderr, "%s: cannot make a PNG: %s\n", path, err);
            return 1;
        }
        total += f[i].n;
        free(j);
    }
    feeder__transform t = {.pipeline = FEEDER_PIPELINE_RESIZE, .decoder = FEEDER_DECODER_TURBO,
                           .height = 224, .width = 224, .max_pixels = 178956970};
    feeder__buf buf = {0}, own = {0};
    feeder__buf_reserve(&own, (size_t)PW * PH * 3);
    uint8_t *out = malloc(224 * 224 * 3);
    double best[3] = {1e9, 1e9, 1e9};
    for (int pass = 0; pass < 3; pass++)
        for (int k = 0; k < 3; k++) {
            double t0 = now_s();
            for (int i = 0; i < n; i++) {
                int rc;
                if (k == 0) {
                    spng_ctx *c = spng_ctx_new(0);
                    size_t sz;
                    spng_set_png_buffer(c, f[i].p, f[i].n);
                    rc = spng_decoded_image_size(c, SPNG_FMT_RGB8, &sz) ||
                         spng_decode_image(c, own.p, sz, SPNG_FMT_RGB8, 0);
                    spng_ctx_free(c);
                } else if (k == 1) {
                    feeder__image img;
                    rc = feeder__png_decode(&buf, &t, f[i].p, f[i].n, &img, err, sizeof(err));
                } else {
                    rc = feeder__decode_sample(d, &t, f[i].p, f[i].n, 1, 0, (uint64_t)i, out,
                                               NULL, err, sizeof(err));
                }
                if (rc) {
                    fprintf(stderr, "decode %d failed: %s\n", i, err);
                    return 1;
                }
            }
            double s = now_s() - t0;
            best[k] = s < best[k] ? s : best[k];
        }
    printf("%d PNGs of %dx%d RGB8, %.1f KiB each on average, best of 3 passes, one core\n", n,
           PW, PH, (double)total / n / 1024);
    printf("libspng decode (RGB8):        %7.3f ms/image\n", best[0] * 1e3 / n);
    printf("feeder__png_decode:           %7.3f ms/image (%+.1f%% against libspng)\n",
           best[1] * 1e3 / n, (best[1] / best[0] - 1) * 100);
    printf("feeder__decode_sample 224px:  %7.3f ms/image (decode + resize)\n",
           best[2] * 1e3 / n);
    return 0;
}
