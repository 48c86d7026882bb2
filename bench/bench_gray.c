/*
 * bench_gray: what grayscale output (FEEDER_OPT_CHANNELS 1) costs and how it
 * compares with Pillow's.
 *
 *   bench_gray DIR [N] [--loader WORKERS]
 *
 * Over the first N (default all) files of an image folder DIR:
 *  1. agreement: for every JPEG that is not CMYK/YCCK, libjpeg's gray decode
 *     (the Y channel, what feeder gives) against Pillow's L of libjpeg's RGB
 *     decode (what torchvision's Grayscale on a PIL image gives), whole
 *     image, every pixel: the share of pixels equal, off by 1, by 2, by more,
 *     and the largest difference;
 *  2. one core: feeder's decode + eval transform (resize 256, crop 224) with
 *     channels 3 and 1, ROI and TURBO decoders, images/s (best of 3);
 *  3. with --loader W: the loader over DIR with W workers, eval 224, channels
 *     3 and 1, images/s of the second of two epochs (best of 3 runs).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "benchutil.h"
#include "decode/decode.h"
#include "feeder.h"

typedef struct files {
    char **path;
    uint8_t **data;
    size_t *len;
    size_t n, cap;
} files;

static void add_file(files *f, const char *path)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 256;
        f->path = realloc(f->path, f->cap * sizeof(*f->path));
        f->data = realloc(f->data, f->cap * sizeof(*f->data));
        f->len = realloc(f->len, f->cap * sizeof(*f->len));
        if (!f->path || !f->data || !f->len)
            exit(1);
    }
    f->path[f->n] = strdup(path);
    if (bu_read_file(path, &f->data[f->n], &f->len[f->n]) == 0)
        f->n++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file one or two levels under dir, sorted. */
static void walk(const char *dir, int depth, files *f)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof(*names));
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(*names), by_name);
    for (size_t i = 0; i < n; i++) {
        DIR *sub = depth < 1 ? opendir(names[i]) : NULL;
        if (sub) {
            closedir(sub);
            walk(names[i], depth + 1, f);
        } else {
            add_file(f, names[i]);
        }
        free(names[i]);
    }
    free(names);
}

typedef struct agree {
    uint64_t px, d0, d1, d2, dmore, images, skipped;
    int dmax;
} agree;

static void agreement(const files *f, agree *a)
{
    tjhandle tj = tjInitDecompress();
    uint8_t *rgb = NULL, *g = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < f->n; i++) {
        int w, h, ss, cs;
        if (tjDecompressHeader3(tj, f->data[i], f->len[i], &w, &h, &ss, &cs) ||
            cs == TJCS_CMYK || cs == TJCS_YCCK) {
            a->skipped++;
            continue;
        }
        size_t n = (size_t)w * h;
        if (n > cap) {
            cap = n;
            rgb = realloc(rgb, 3 * cap);
            g = realloc(g, cap);
        }
        if (tjDecompress2(tj, f->data[i], f->len[i], rgb, w, w * 3, h, TJPF_RGB, 0) ||
            tjDecompress2(tj, f->data[i], f->len[i], g, w, w, h, TJPF_GRAY, 0)) {
            a->skipped++;
            continue;
        }
        a->images++;
        for (size_t k = 0; k < n; k++) {
            const uint8_t *q = rgb + 3 * k;
            int l = (int)((q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16);
            int d = abs(l - g[k]);
            a->d0 += d == 0;
            a->d1 += d == 1;
            a->d2 += d == 2;
            a->dmore += d > 2;
            if (d > a->dmax)
                a->dmax = d;
        }
        a->px += n;
    }
    free(rgb);
    free(g);
    tjDestroy(tj);
}

/* Images/s of one core decoding every file (best of 3). */
static double one_core(const files *f, int decoder, int channels)
{
    feeder__transform t = {FEEDER_PIPELINE_EVAL, decoder, FEEDER_LAYOUT_NHWC, 224, 224, 256,
                           0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, 0.5, 178956970, (uint32_t)channels,
                           0, 0};
    feeder__decoder *d;
    if (feeder__decoder_create(&d))
        exit(1);
    uint8_t *out = malloc(224 * 224 * 3);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        uint64_t t0 = bu_now_ns(), ok = 0;
        for (size_t i = 0; i < f->n; i++)
            ok += feeder__decode_sample(d, &t, f->data[i], f->len[i], 0, 0, i, out, NULL, NULL,
                                        0) == 0;
        double s = (double)(bu_now_ns() - t0) / 1e9, ips = (double)ok / s;
        if (ips > best)
            best = ips;
    }
    free(out);
    feeder__decoder_destroy(d);
    return best;
}

static double loader_run(const char *dir, int workers, int channels)
{
    feeder_dataset *ds;
    char err[512];
    if (feeder_dataset_open_folder(dir, &ds, err, sizeof(err))) {
        fprintf(stderr, "bench_gray: %s\n", err);
        exit(1);
    }
    double best = 0;
    for (int r = 0; r < 3; r++) {
        feeder_loader *ld;
        if (feeder_loader_create(ds, NULL, &ld) ||
            feeder_loader_set(ld, FEEDER_OPT_NUM_WORKERS, workers) ||
            feeder_loader_set(ld, FEEDER_OPT_BATCH_SIZE, 64) ||
            feeder_loader_set(ld, FEEDER_OPT_PERSISTENT_WORKERS, 1) ||
            feeder_loader_set(ld, FEEDER_OPT_CHANNELS, channels))
            exit(1);
        for (int epoch = 0; epoch < 2; epoch++) {
            feeder_loader_set_epoch(ld, (uint64_t)epoch);
            uint64_t t0 = bu_now_ns(), n = 0;
            feeder_batch *b;
            int rc;
            while ((rc = feeder_next(ld, &b)) == 0) {
                n += b->count;
                feeder_batch_release(b, NULL);
            }
            if (rc != FEEDER_DONE) {
                fprintf(stderr, "bench_gray: %s\n", feeder_loader_errmsg(ld));
                exit(1);
            }
            double ips = (double)n / ((double)(bu_now_ns() - t0) / 1e9);
            if (epoch == 1 && ips > best)
                best = ips;
        }
        feeder_loader_destroy(ld);
    }
    feeder_dataset_destroy(ds);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_gray DIR [N] [--loader WORKERS]\n");
        return 2;
    }
    size_t limit = argc > 2 && argv[2][0] != '-' ? strtoull(argv[2], NULL, 10) : 0;
    int workers = -1;
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--loader"))
            workers = atoi(argv[i + 1]);
    files f = {0};
    walk(argv[1], 0, &f);
    if (limit && f.n > limit)
        f.n = limit;
    agree a = {0};
    agreement(&f, &a);
    printf("files: %zu; JPEG compared: %llu (%llu CMYK/YCCK or unreadable left out)\n", f.n,
           (unsigned long long)a.images, (unsigned long long)a.skipped);
    double px = a.px ? (double)a.px : 1.0;
    printf("libjpeg Y vs Pillow L of the RGB decode, %llu pixels: equal %.2f %%, off by 1 "
           "%.2f %%, by 2 %.3f %%, by more %.4f %%, largest %d\n",
           (unsigned long long)a.px, 100.0 * a.d0 / px, 100.0 * a.d1 / px, 100.0 * a.d2 / px,
           100.0 * a.dmore / px, a.dmax);
    printf("| decoder | channels 3 img/s | channels 1 img/s | 1 vs 3 |\n|---|---|---|---|\n");
    const char *names[] = {"TURBO", "ROI"};
    for (int dec = 0; dec < 2; dec++) {
        double c3 = one_core(&f, dec, 3), c1 = one_core(&f, dec, 1);
        printf("| %s | %.0f | %.0f | %.2fx |\n", names[dec], c3, c1, c1 / c3);
    }
    if (workers >= 0) {
        double c3 = loader_run(argv[1], workers, 3), c1 = loader_run(argv[1], workers, 1);
        printf("loader, %d workers, eval 224, epoch 2: channels 3 %.0f img/s, channels 1 %.0f "
               "img/s (%.2fx)\n",
               workers, c3, c1, c1 / c3);
    }
    for (size_t i = 0; i < f.n; i++) {
        free(f.path[i]);
        free(f.data[i]);
    }
    free(f.path);
    free(f.data);
    free(f.len);
    return 0;
}
