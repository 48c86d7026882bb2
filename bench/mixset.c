#include "mixset.h"

#include <errno.h>
#include <setjmp.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
/* jpeglib.h needs FILE and size_t first. */
#include <jpeglib.h>

#include "feeder.h"

const char *const bm_kind_names[BM_KINDS] = {"4:2:0", "4:2:2", "4:4:4", "progressive",
                                             "gray",  "cmyk",  "ycck",  "png"};

/* ------------------------------------------------------------------------ */
/* Presets                                                                   */
/* ------------------------------------------------------------------------ */

/* Shares not given by a published figure are the brief's round numbers;
 * docs/TOOLS.md ("The benchmark sets") says which is which. */
int bm_preset(const char *name, bm_mix *out)
{
    memset(out, 0, sizeof(*out));
    if (strcmp(name, "web") == 0) {
        *out = (bm_mix){.name = "web", .short_min = 200, .short_max = 800,
                        .large_min = 2000, .large_max = 3000, .large = 0.03,
                        .q_min = 70, .q_max = 95, .restart = 0.05, .exif = 0.04, .icc = 0.04};
        out->share[BM_422] = 0.10;
        out->share[BM_444] = 0.30;
        out->share[BM_PROGRESSIVE] = 0.03;
        out->share[BM_GRAY] = 0.02;
        out->share[BM_CMYK] = 0.005;
        out->share[BM_YCCK] = 0.005;
        return 0;
    }
    if (strcmp(name, "imagenet") == 0) {
        /* ImageNet's train files: ~108 KB on average, most near 500x375 at
         * quality ~96, 22 CMYK and one PNG among 1.28 M. */
        *out = (bm_mix){.name = "imagenet", .short_min = 400, .short_max = 620,
                        .large_min = 2000, .large_max = 3000, .large = 0.01,
                        .q_min = 90, .q_max = 98, .restart = 0.01, .exif = 0.02, .icc = 0.02};
        out->share[BM_422] = 0.10;
        out->share[BM_444] = 0.70;
        out->share[BM_PROGRESSIVE] = 0.01;
        out->share[BM_GRAY] = 0.01;
        out->share[BM_CMYK] = 22.0 / 1281167;
        out->share[BM_PNG] = 1.0 / 1281167;
        return 0;
    }
    return -EINVAL;
}

/* ------------------------------------------------------------------------ */
/* The plan of one image                                                     */
/* ------------------------------------------------------------------------ */

/* Random streams (feeder_random's `epoch` argument), one per decision, so
 * adding a decision never moves the others. */
enum { S_KIND = 101, S_SIZE, S_MARKERS, S_CROP };

static bm_kind pick_kind(const bm_mix *m, double u)
{
    static const bm_kind order[] = {BM_PNG, BM_CMYK, BM_YCCK, BM_GRAY, BM_PROGRESSIVE,
                                    BM_422, BM_444};
    double edge = 0;
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        edge += m->share[order[i]];
        if (u < edge)
            return order[i];
    }
    return BM_420;
}

static uint32_t pick_in(uint64_t seed, uint64_t stream, uint64_t k, uint64_t draw,
                        uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(feeder_random(seed, stream, k, draw) % (hi - lo + 1ull));
}

void bm_plan(const bm_mix *m, uint64_t seed, uint64_t k, bm_image *im)
{
    memset(im, 0, sizeof(*im));
    im->kind = pick_kind(m, feeder_random_uniform(seed, S_KIND, k, 0));
    im->large = feeder_random_uniform(seed, S_SIZE, k, 0) < m->large;
    uint32_t s = im->large ? pick_in(seed, S_SIZE, k, 1, m->large_min, m->large_max)
                           : pick_in(seed, S_SIZE, k, 1, m->short_min, m->short_max);
    /* Aspect 4:3 to 3:2 mostly; seven in ten landscape. */
    double ar = 1.0 + 0.5 * feeder_random_uniform(seed, S_SIZE, k, 2);
    uint32_t l = (uint32_t)(s * ar);
    int landscape = feeder_random_uniform(seed, S_SIZE, k, 3) < 0.7;
    im->w = landscape ? l : s;
    im->h = landscape ? s : l;
    im->quality = (int)pick_in(seed, S_SIZE, k, 4, (uint32_t)m->q_min, (uint32_t)m->q_max);
    im->photo = (unsigned)feeder_random(seed, S_CROP, k, 0);
    im->crop_seed = feeder_random(seed, S_CROP, k, 1);
    if (im->kind == BM_PNG)
        return;
    if (feeder_random_uniform(seed, S_MARKERS, k, 0) < m->restart)
        im->restart = (uint16_t)pick_in(seed, S_MARKERS, k, 1, 1, 64);
    if (feeder_random_uniform(seed, S_MARKERS, k, 2) < m->exif)
        im->orientation = (uint8_t)pick_in(seed, S_MARKERS, k, 3, 1, 8);
    im->icc = feeder_random_uniform(seed, S_MARKERS, k, 4) < m->icc;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* An APP1 Exif segment holding one IFD entry, the orientation (little-endian TIFF). */
static size_t exif_segment(uint8_t *b, unsigned orientation)
{
    static const uint8_t head[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 0x2A, 0, 8, 0, 0, 0,
                                   1, 0,                /* one entry */
                                   0x12, 0x01, 3, 0,    /* Orientation, SHORT */
                                   1, 0, 0, 0};         /* count 1 */
    memcpy(b, head, sizeof(head));
    size_t n = sizeof(head);
    b[n++] = (uint8_t)orientation;
    memset(b + n, 0, 7); /* value's padding, then no next IFD */
    return n + 7;
}

static void put_be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* An ICC profile as large as the common sRGB one (3,144 bytes) with a correct
 * header (size, version 2.1, display class, colour space, PCS XYZ, 'acsp',
 * D50) and no tags: readers that look at profiles see one of the right size. */
#define BM_ICC_LEN 3144
static void icc_profile(uint8_t *b, bm_kind kind)
{
    memset(b, 0, BM_ICC_LEN);
    put_be32(b, BM_ICC_LEN);
    put_be32(b + 8, 0x02100000);
    memcpy(b + 12, "mntr", 4);
    memcpy(b + 16, kind == BM_GRAY ? "GRAY" : kind >= BM_CMYK ? "CMYK" : "RGB ", 4);
    memcpy(b + 20, "XYZ ", 4);
    static const uint8_t date[12] = {0x07, 0xEA, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0};
    memcpy(b + 24, date, sizeof(date));
    memcpy(b + 36, "acsp", 4);
    put_be32(b + 68, 0x0000F6D6);
    put_be32(b + 72, 0x00010000);
    put_be32(b + 76, 0x0000D32D);
}

typedef struct bm_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} bm_jerr;

static void bm_error_exit(j_common_ptr c)
{
    longjmp(((bm_jerr *)c->err)->jump, 1);
}

/* Colour space, sampling and scan script of `im`'s kind. */
static void set_kind(struct jpeg_compress_struct *c, const bm_image *im)
{
    c->in_color_space = im->kind == BM_CMYK || im->kind == BM_YCCK ? JCS_CMYK : JCS_RGB;
    c->input_components = c->in_color_space == JCS_CMYK ? 4 : 3;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, im->quality, TRUE);
    if (im->kind == BM_GRAY)
        jpeg_set_colorspace(c, JCS_GRAYSCALE);
    else if (im->kind == BM_CMYK)
        jpeg_set_colorspace(c, JCS_CMYK); /* writes APP14 with transform 0 */
    else if (im->kind == BM_YCCK)
        jpeg_set_colorspace(c, JCS_YCCK); /* writes APP14 with transform 2 */
    if (im->kind == BM_444 || im->kind == BM_422) {
        c->comp_info[0].h_samp_factor = im->kind == BM_422 ? 2 : 1;
        c->comp_info[0].v_samp_factor = 1;
    }
    if (im->kind == BM_PROGRESSIVE)
        jpeg_simple_progression(c);
    c->restart_interval = im->restart;
    /* A camera's Exif file carries no JFIF segment. */
    if (im->orientation)
        c->write_JFIF_header = FALSE;
}

static void write_markers(struct jpeg_compress_struct *c, const bm_image *im)
{
    if (im->orientation) {
        uint8_t exif[64];
        size_t n = exif_segment(exif, im->orientation);
        jpeg_write_marker(c, JPEG_APP0 + 1, exif, (unsigned)n);
    }
    if (im->icc) {
        uint8_t *icc = malloc(BM_ICC_LEN);
        if (icc) {
            icc_profile(icc, im->kind);
            jpeg_write_icc_profile(c, icc, BM_ICC_LEN);
            free(icc);
        }
    }
}

/* Adobe CMYK as Photoshop and Pillow store it, inverted: stored C = R, M = G,
 * Y = B, K = 255 (no black ink) decodes back to the same RGB. */
static uint8_t *to_cmyk(const uint8_t *rgb, size_t pixels)
{
    uint8_t *o = malloc(pixels * 4);
    for (size_t i = 0; o && i < pixels; i++) {
        memcpy(o + i * 4, rgb + i * 3, 3);
        o[i * 4 + 3] = 255;
    }
    return o;
}

static int encode_jpeg(const bm_image *im, const uint8_t *pix, uint8_t **out, size_t *len)
{
    struct jpeg_compress_struct c;
    bm_jerr jerr;
    unsigned char *buf = NULL;
    unsigned long blen = 0;
    c.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = bm_error_exit;
    if (setjmp(jerr.jump)) {
        jpeg_destroy_compress(&c);
        free(buf);
        return -EIO;
    }
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &blen);
    c.image_width = im->w;
    c.image_height = im->h;
    set_kind(&c, im);
    jpeg_start_compress(&c, TRUE);
    write_markers(&c, im);
    size_t stride = (size_t)im->w * (size_t)c.input_components;
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + c.next_scanline * stride);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *out = buf;
    *len = blen;
    return 0;
}

static int encode_png(const bm_image *im, const uint8_t *rgb, uint8_t **out, size_t *len)
{
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx)
        return -ENOMEM;
    struct spng_ihdr ihdr = {.width = im->w, .height = im->h, .bit_depth = 8,
                             .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    int err = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!err)
        err = spng_set_ihdr(ctx, &ihdr);
    if (!err)
        err = spng_encode_image(ctx, rgb, (size_t)im->w * im->h * 3, SPNG_FMT_PNG,
                                SPNG_ENCODE_FINALIZE);
    void *png = err ? NULL : spng_get_png_buffer(ctx, len, &err);
    spng_ctx_free(ctx);
    if (!png)
        return -EIO;
    *out = png;
    return 0;
}

int bm_encode(const bu_photos *p, const bm_image *im, uint8_t **out, size_t *len)
{
    uint8_t *rgb = bu_cut_rgb(p, im->photo, im->w, im->h, im->crop_seed);
    if (!rgb)
        return -ENOMEM;
    int rc;
    if (im->kind == BM_PNG) {
        rc = encode_png(im, rgb, out, len);
    } else if (im->kind == BM_CMYK || im->kind == BM_YCCK) {
        uint8_t *cmyk = to_cmyk(rgb, (size_t)im->w * im->h);
        rc = cmyk ? encode_jpeg(im, cmyk, out, len) : -ENOMEM;
        free(cmyk);
    } else {
        rc = encode_jpeg(im, rgb, out, len);
    }
    free(rgb);
    return rc;
}

void bm_path(char *out, size_t len, const char *dir, uint64_t k, bm_kind kind)
{
    snprintf(out, len, "%s/class_%02u/img_%05llu.%s", dir, (unsigned)(k % 10),
             (unsigned long long)(k / 10), kind == BM_PNG ? "JPEG" : "jpg");
}

/* ------------------------------------------------------------------------ */
/* A whole set                                                               */
/* ------------------------------------------------------------------------ */

static void describe(char *b, size_t len, const bm_mix *m, uint64_t n, uint64_t seed)
{
    size_t o = (size_t)snprintf(b, len, "set=%s n=%llu seed=%llu short=%u-%u large=%g:%u-%u "
                                "q=%d-%d restart=%g exif=%g icc=%g", m->name,
                                (unsigned long long)n, (unsigned long long)seed, m->short_min,
                                m->short_max, m->large, m->large_min, m->large_max, m->q_min,
                                m->q_max, m->restart, m->exif, m->icc);
    for (int k = 1; k < BM_KINDS && o < len; k++)
        o += (size_t)snprintf(b + o, len - o, " %s=%g", bm_kind_names[k], m->share[k]);
    if (o < len)
        snprintf(b + o, len - o, " v1\n");
}

static void progress_bar(const char *dir, uint64_t done, uint64_t total)
{
    int tty = isatty(2);
    uint64_t every = tty ? 20 : total >= 10 ? total / 10 : 1;
    if (done % every && done != total)
        return;
    int bar = (int)(40.0 * (double)done / (double)total);
    fprintf(stderr, "%smaking dataset %s [%.*s%*s] %llu/%llu%s", tty ? "\r" : "", dir, bar,
            "========================================", 40 - bar, "",
            (unsigned long long)done, (unsigned long long)total, tty ? "" : "\n");
}

/* Images job, job + jobs, ... of the set; job 0 draws the bar for everyone
 * (the jobs go at the same pace). 0 or -errno. */
static int make_part(const bu_photos *p, const bm_mix *m, const char *dir, uint64_t n,
                     uint64_t seed, unsigned job, unsigned jobs, int progress)
{
    for (uint64_t k = job; k < n; k += jobs) {
        bm_image im;
        bm_plan(m, seed, k, &im);
        uint8_t *bytes;
        size_t len;
        int rc = bm_encode(p, &im, &bytes, &len);
        if (rc)
            return rc;
        char path[4200];
        bm_path(path, sizeof(path), dir, k, im.kind);
        rc = bu_write_file(path, bytes, len);
        free(bytes);
        if (rc)
            return rc;
        if (progress && job == 0)
            progress_bar(dir, k + jobs < n ? k + jobs : n, n);
    }
    return 0;
}

/* Run make_part in `jobs` processes; the first error wins. */
static int run_jobs(const bu_photos *p, const bm_mix *m, const char *dir, uint64_t n,
                    uint64_t seed, unsigned jobs, int progress)
{
    if (jobs <= 1)
        return make_part(p, m, dir, n, seed, 0, 1, progress);
    pid_t pid[8];
    unsigned started = 0;
    int rc = 0;
    fflush(stderr);
    for (; started < jobs; started++) {
        pid[started] = fork();
        if (pid[started] < 0) {
            rc = -errno;
            break;
        }
        if (pid[started] == 0)
            _exit(-make_part(p, m, dir, n, seed, started, jobs, progress) & 0xff);
    }
    for (unsigned j = 0; j < started; j++) {
        int st;
        while (waitpid(pid[j], &st, 0) < 0 && errno == EINTR)
            ;
        if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            rc = WIFEXITED(st) ? -WEXITSTATUS(st) : -EINTR;
    }
    return rc;
}

/* The report of a set made (or found) in `dir`: kinds from the plans, bytes
 * from the files. */
static int count_set(const bm_mix *m, const char *dir, uint64_t n, uint64_t seed,
                     bm_report *r)
{
    memset(r, 0, sizeof(*r));
    r->images = n;
    for (uint64_t k = 0; k < n; k++) {
        bm_image im;
        bm_plan(m, seed, k, &im);
        r->count[im.kind]++;
        r->large += im.large;
        r->restart += im.restart != 0;
        r->exif += im.orientation != 0;
        r->icc += im.icc;
        char path[4200];
        struct stat st;
        bm_path(path, sizeof(path), dir, k, im.kind);
        if (stat(path, &st) != 0)
            return -errno;
        r->bytes += (uint64_t)st.st_size;
    }
    return 0;
}

static int make_dirs(const char *dir)
{
    int rc = bu_mkdirs(dir);
    for (unsigned c = 0; c < 10 && rc == 0; c++) {
        char sub[4200];
        snprintf(sub, sizeof(sub), "%s/class_%02u", dir, c);
        rc = bu_mkdirs(sub);
    }
    return rc;
}

int bm_make_set(const bu_photos *p, const bm_mix *m, const char *dir, uint64_t n,
                uint64_t seed, unsigned jobs, int progress, bm_report *rep)
{
    char want[1024];
    bm_report local;
    bm_report *r = rep ? rep : &local;
    describe(want, sizeof(want), m, n, seed);
    int same = bu_stamp_matches(dir, want);
    if (same == 1)
        return count_set(m, dir, n, seed, r);
    if (same == 0) /* a set this code made, of other arguments: start afresh */
        bu_rm_rf(dir);
    int rc = make_dirs(dir);
    if (rc)
        return rc;
    if (jobs == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = cores < 1 ? 1 : cores > 8 ? 8 : (unsigned)cores;
    }
    jobs = jobs > 8 ? 8 : jobs;
    uint64_t t0 = bu_now_ns();
    rc = run_jobs(p, m, dir, n, seed, jobs, progress);
    if (progress && isatty(2))
        fprintf(stderr, "\n");
    if (rc == 0)
        rc = count_set(m, dir, n, seed, r);
    if (rc)
        return rc;
    r->seconds = (double)(bu_now_ns() - t0) / 1e9;
    return bu_stamp_write(dir, want);
}

void bm_report_print(FILE *f, const bm_mix *m, const char *dir, const bm_report *r)
{
    fprintf(f, "%s %llu images in %s (%s):", r->seconds > 0 ? "made" : "reused",
            (unsigned long long)r->images, dir, m->name);
    for (int k = 0; k < BM_KINDS; k++)
        if (r->count[k])
            fprintf(f, " %s %llu,", bm_kind_names[k], (unsigned long long)r->count[k]);
    fprintf(f, " restart intervals %llu, Exif %llu, ICC %llu; %llu large; mean %.1f KB",
            (unsigned long long)r->restart, (unsigned long long)r->exif,
            (unsigned long long)r->icc, (unsigned long long)r->large,
            r->images ? (double)r->bytes / (double)r->images / 1000.0 : 0.0);
    if (r->seconds > 0)
        fprintf(f, "; %.1f s", r->seconds);
    fprintf(f, "\n");
}

/* ------------------------------------------------------------------------ */
/* The benchmarks' default sets                                              */
/* ------------------------------------------------------------------------ */

void bm_default_dir(char *out, size_t len, const char *set, unsigned images)
{
    if (strcmp(set, "uniform") == 0) {
        bu_default_dataset_dir(out, len, images);
        return;
    }
    const char *env = getenv("FEEDER_DATA");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(out, len, "%s", env);
    else
        snprintf(out, len, "%s/.cache/feeder/%s-%u", home && *home ? home : "/tmp", set,
                 images);
}

int bm_ensure_set(const char *dir, const char *set, unsigned images, const char *photos_dir,
                  char *err, size_t errlen)
{
    bm_mix m;
    if (strcmp(set, "uniform") == 0)
        return bu_ensure_default_dataset(dir, images, photos_dir, err, errlen);
    if (bm_preset(set, &m)) {
        snprintf(err, errlen, "no image set named '%s'", set);
        return -EINVAL;
    }
    const char *env = getenv("FEEDER_BENCH_PHOTOS");
    char why[512];
    bu_photos *photos;
    int rc = bu_photos_load(env && *env ? env : photos_dir, &photos, why, sizeof(why));
    if (rc) {
        snprintf(err, errlen, "loading the seed photos: %s (set FEEDER_BENCH_PHOTOS to the "
                 "bench/photos folder, or pass --data)", why);
        return rc;
    }
    bm_report r;
    rc = bm_make_set(photos, &m, dir, images, 1, 0, 1, &r);
    bu_photos_free(photos);
    if (rc)
        snprintf(err, errlen, "making the %s set in %s: %s (set FEEDER_DATA to a writable "
                 "folder, or pass --data)", set, dir, strerror(-rc));
    else if (r.seconds > 0)
        bm_report_print(stderr, &m, dir, &r);
    return rc;
}
