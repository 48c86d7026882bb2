/*
 * bench/benchutil_photos.c: JPEG datasets cut from the real photos in
 * bench/photos (benchutil.h's first section): the photos decoded once, a
 * crop of one as RGB or as a JPEG of a given size, quality and subsampling,
 * an ImageFolder of ImageNet-like JPEGs, and the benchmarks' default
 * dataset made on first use.
 */
#include "benchutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "feeder.h"

typedef struct bu_photo {
    uint8_t *rgb;
    int w, h;
} bu_photo;

struct bu_photos {
    bu_photo *v;
    unsigned n;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int bu_photos_load(const char *dir, bu_photos **out, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -errno;
    }
    char *names[64];
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".jpg") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    /* Sorted, so photo k is the same file on every machine. */
    qsort(names, n, sizeof(names[0]), cmp_str);
    bu_photos *p = calloc(1, sizeof(*p));
    p->v = calloc(n ? n : 1, sizeof(bu_photo));
    tjhandle tj = tjInitDecompress();
    int rc = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        uint8_t *buf;
        size_t len;
        rc = bu_read_file(path, &buf, &len);
        if (rc) {
            snprintf(err, errlen, "%s: %s", path, strerror(-rc));
            break;
        }
        int w, h, ss, cs;
        if (tjDecompressHeader3(tj, buf, len, &w, &h, &ss, &cs) != 0) {
            snprintf(err, errlen, "%s: %s", path, tjGetErrorStr2(tj));
            free(buf);
            rc = -EINVAL;
            break;
        }
        p->v[p->n].rgb = malloc((size_t)w * h * 3);
        if (tjDecompress2(tj, buf, len, p->v[p->n].rgb, w, 0, h, TJPF_RGB, 0) != 0 &&
            tjGetErrorCode(tj) == TJERR_FATAL) {
            snprintf(err, errlen, "%s: %s", path, tjGetErrorStr2(tj));
            free(p->v[p->n].rgb);
            free(buf);
            rc = -EINVAL;
            break;
        }
        p->v[p->n].w = w;
        p->v[p->n].h = h;
        p->n++;
        free(buf);
    }
    tjDestroy(tj);
    for (unsigned i = 0; i < n; i++)
        free(names[i]);
    if (rc == 0 && p->n == 0) {
        snprintf(err, errlen, "%s: no .jpg photos", dir);
        rc = -ENOENT;
    }
    if (rc) {
        bu_photos_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void bu_photos_free(bu_photos *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n; i++)
        free(p->v[i].rgb);
    free(p->v);
    free(p);
}

unsigned bu_photos_count(const bu_photos *p) { return p->n; }

/* Output pixel i of n along an axis of a crop (origin o, length len) of a
 * photo side pixels long: the first of its two source pixels in *k, the
 * weight of the second returned. */
static double tap(double o, uint32_t i, double len, uint32_t n, int side, int *k)
{
    double s = o + (i + 0.5) * len / n - 0.5;
    if (s < 0)
        s = 0;
    *k = (int)s;
    if (*k > side - 2)
        *k = side - 2;
    double f = s - *k;
    return f > 1 ? 1 : f;
}

uint8_t *bu_cut_rgb(const bu_photos *p, unsigned photo, uint32_t w, uint32_t h, uint64_t seed)
{
    const bu_photo *ph = &p->v[photo % p->n];
    /* A crop box of the target aspect covering 40-100% of the photo's width
     * or height, placed at random: the test image is a natural picture. */
    double u0 = feeder_random_uniform(seed, 0, photo, 0);
    double u1 = feeder_random_uniform(seed, 0, photo, 1);
    double u2 = feeder_random_uniform(seed, 0, photo, 2);
    double aspect = (double)w / h;
    double cw = ph->w, ch = ph->w / aspect;
    if (ch > ph->h) {
        ch = ph->h;
        cw = ph->h * aspect;
    }
    double s = 0.4 + 0.6 * u0;
    cw *= s;
    ch *= s;
    double x0 = (ph->w - cw) * u1, y0 = (ph->h - ch) * u2;
    uint8_t *img = malloc((size_t)w * h * 3);
    int *ixs = malloc(sizeof(int) * w);
    double *fxs = malloc(sizeof(double) * w);
    if (!img || !ixs || !fxs) {
        free(img);
        free(ixs);
        free(fxs);
        return NULL;
    }
    /* Bilinear sampling is plenty for making test data (the library's own
     * resizer is what gets measured). The columns' taps are the same on
     * every row. */
    for (uint32_t x = 0; x < w; x++)
        fxs[x] = tap(x0, x, cw, w, ph->w, &ixs[x]);
    for (uint32_t y = 0; y < h; y++) {
        int iy;
        double fy = tap(y0, y, ch, h, ph->h, &iy);
        const uint8_t *row = ph->rgb + (size_t)iy * ph->w * 3;
        uint8_t *out = img + (size_t)y * w * 3;
        for (uint32_t x = 0; x < w; x++) {
            double fx = fxs[x];
            const uint8_t *a = row + (size_t)ixs[x] * 3;
            const uint8_t *b = a + (size_t)ph->w * 3;
            for (int c = 0; c < 3; c++) {
                double v = (a[c] * (1 - fx) + a[c + 3] * fx) * (1 - fy) +
                           (b[c] * (1 - fx) + b[c + 3] * fx) * fy;
                out[x * 3 + c] = (uint8_t)(v + 0.5);
            }
        }
    }
    free(ixs);
    free(fxs);
    return img;
}

int bu_make_jpeg(const bu_photos *p, unsigned photo, uint32_t w, uint32_t h, int quality,
                 int subsamp, uint64_t seed, uint8_t **jpeg, size_t *len)
{
    uint8_t *img = bu_cut_rgb(p, photo, w, h, seed);
    if (!img)
        return -ENOMEM;
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long olen = 0;
    int rc = tjCompress2(tj, img, (int)w, 0, (int)h, TJPF_RGB, &out, &olen,
                         subsamp < 0 ? TJSAMP_420 : subsamp, quality, TJFLAG_FASTDCT);
    tjDestroy(tj);
    free(img);
    if (rc != 0) {
        tjFree(out);
        return -EIO;
    }
    *jpeg = malloc(olen);
    memcpy(*jpeg, out, olen);
    *len = olen;
    tjFree(out);
    return 0;
}

int bu_write_jpeg(const bu_photos *p, const char *path, unsigned photo, uint32_t w, uint32_t h,
                  int quality, int subsamp, uint64_t seed)
{
    uint8_t *jpeg;
    size_t len;
    int rc = bu_make_jpeg(p, photo, w, h, quality, subsamp, seed, &jpeg, &len);
    if (rc)
        return rc;
    rc = bu_write_file(path, jpeg, len);
    free(jpeg);
    return rc;
}

int bu_make_dataset(const bu_photos *p, const char *dir, unsigned classes, unsigned per_class,
                    uint64_t seed, int progress)
{
    char want[256];
    snprintf(want, sizeof(want), "classes=%u per_class=%u seed=%llu v1\n", classes, per_class,
             (unsigned long long)seed);
    if (bu_stamp_matches(dir, want) == 1)
        return 0;
    int rc = bu_mkdirs(dir);
    if (rc)
        return rc;
    unsigned total = classes * per_class, done = 0;
    for (unsigned c = 0; c < classes; c++) {
        char cdir[4096];
        snprintf(cdir, sizeof(cdir), "%s/class_%02u", dir, c);
        if ((rc = bu_mkdirs(cdir)))
            return rc;
        for (unsigned i = 0; i < per_class; i++, done++) {
            uint64_t k = (uint64_t)c * per_class + i;
            /* ImageNet-like: short side 256..512, aspect 3:4..4:3, quality 75..95. */
            uint32_t s = 256 + (uint32_t)(feeder_random(seed, 1, k, 0) % 257);
            double ar = 0.75 + (4.0 / 3.0 - 0.75) * feeder_random_uniform(seed, 1, k, 1);
            uint32_t w = s, h = s;
            if (ar >= 1)
                w = (uint32_t)(s * ar);
            else
                h = (uint32_t)(s / ar);
            int q = 75 + (int)(feeder_random(seed, 1, k, 2) % 21);
            char path[4200];
            snprintf(path, sizeof(path), "%s/img_%05u.jpg", cdir, i);
            rc = bu_write_jpeg(p, path, (unsigned)(k % bu_photos_count(p)), w, h, q, -1,
                               feeder_random(seed, 1, k, 3));
            if (rc)
                return rc;
            /* A bar redrawn in place on a terminal; in a log, a line every 10%. */
            unsigned every = isatty(2) ? 20 : total >= 10 ? total / 10 : 1;
            if (progress && (done % every == 0 || done + 1 == total)) {
                int bar = (int)(40.0 * (done + 1) / total);
                fprintf(stderr, "%smaking dataset %s [%.*s%*s] %u/%u%s", isatty(2) ? "\r" : "",
                        dir, bar, "========================================", 40 - bar, "",
                        done + 1, total, isatty(2) ? "" : "\n");
            }
        }
    }
    if (progress && isatty(2))
        fprintf(stderr, "\n");
    return bu_stamp_write(dir, want);
}

void bu_default_dataset_dir(char *out, size_t len, unsigned images)
{
    const char *env = getenv("FEEDER_DATA");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    const char *home = getenv("HOME");
    snprintf(out, len, "%s/.cache/feeder/default-%u", home && *home ? home : "/tmp", images);
}

int bu_ensure_default_dataset(const char *dir, unsigned images, const char *photos_dir,
                              char *err, size_t errlen)
{
    const char *env = getenv("FEEDER_BENCH_PHOTOS");
    if (env && *env)
        photos_dir = env;
    char why[512];
    bu_photos *photos;
    int rc = bu_photos_load(photos_dir, &photos, why, sizeof(why));
    if (rc) {
        snprintf(err, errlen, "loading the seed photos: %s (set FEEDER_BENCH_PHOTOS to the "
                 "bench/photos folder, or pass --data)", why);
        return rc;
    }
    rc = bu_make_dataset(photos, dir, 10, images / 10, 1, 1);
    bu_photos_free(photos);
    if (rc)
        snprintf(err, errlen, "making the default dataset in %s: %s (set FEEDER_DATA to a "
                 "writable folder, or pass --data)", dir, strerror(-rc));
    return rc;
}
