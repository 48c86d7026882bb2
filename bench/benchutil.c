#include "benchutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
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
    for (uint32_t x = 0; x < w; x++) {
        double sx = x0 + (x + 0.5) * cw / w - 0.5;
        if (sx < 0)
            sx = 0;
        int ix = (int)sx;
        if (ix > ph->w - 2)
            ix = ph->w - 2;
        double fx = sx - ix;
        ixs[x] = ix;
        fxs[x] = fx > 1 ? 1 : fx;
    }
    for (uint32_t y = 0; y < h; y++) {
        double sy = y0 + (y + 0.5) * ch / h - 0.5;
        if (sy < 0)
            sy = 0;
        int iy = (int)sy;
        if (iy > ph->h - 2)
            iy = ph->h - 2;
        double fy = sy - iy;
        if (fy > 1)
            fy = 1;
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
    char stamp[4096], want[256];
    snprintf(stamp, sizeof(stamp), "%s/.complete", dir);
    snprintf(want, sizeof(want), "classes=%u per_class=%u seed=%llu v1\n", classes, per_class,
             (unsigned long long)seed);
    uint8_t *have;
    size_t hl;
    if (bu_read_file(stamp, &have, &hl) == 0) {
        int same = hl == strlen(want) && memcmp(have, want, hl) == 0;
        free(have);
        if (same)
            return 0;
    }
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
    return bu_write_file(stamp, want, strlen(want));
}

int bu_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            return e;
        }
        p += n;
        len -= (size_t)n;
    }
    return close(fd) ? -errno : 0;
}

int bu_read_file(const char *path, uint8_t **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    uint8_t *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    *data = buf;
    *len = got;
    return 0;
}

int bu_mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *s = tmp + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -errno;
            *s = '/';
        }
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

void bu_rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            bu_rm_rf(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bu_hash(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* XXH64 (Yann Collet's reference algorithm). Loads go through memcpy, so any
 * alignment is fine; the words are read in the host's byte order, which is
 * little-endian on every machine this project targets. */
#define BU_P1 11400714785074694791ull
#define BU_P2 14029467366897019727ull
#define BU_P3 1609587929392839161ull
#define BU_P4 9650029242287828579ull
#define BU_P5 2870177450012600261ull

static inline uint64_t bu_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t bu_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t bu_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t bu_xxround(uint64_t acc, uint64_t in)
{
    acc += in * BU_P2;
    acc = bu_rotl64(acc, 31);
    return acc * BU_P1;
}

static inline uint64_t bu_xxmerge(uint64_t acc, uint64_t v)
{
    acc ^= bu_xxround(0, v);
    return acc * BU_P1 + BU_P4;
}

uint64_t bu_hash64(uint64_t seed, const void *data, size_t len)
{
    const uint8_t *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + BU_P1 + BU_P2, v2 = seed + BU_P2, v3 = seed, v4 = seed - BU_P1;
        const uint8_t *limit = end - 32;
        do {
            v1 = bu_xxround(v1, bu_rd64(p));
            v2 = bu_xxround(v2, bu_rd64(p + 8));
            v3 = bu_xxround(v3, bu_rd64(p + 16));
            v4 = bu_xxround(v4, bu_rd64(p + 24));
            p += 32;
        } while (p <= limit);
        h = bu_rotl64(v1, 1) + bu_rotl64(v2, 7) + bu_rotl64(v3, 12) + bu_rotl64(v4, 18);
        h = bu_xxmerge(h, v1);
        h = bu_xxmerge(h, v2);
        h = bu_xxmerge(h, v3);
        h = bu_xxmerge(h, v4);
    } else {
        h = seed + BU_P5;
    }
    h += (uint64_t)len;
    while (p + 8 <= end) {
        h ^= bu_xxround(0, bu_rd64(p));
        h = bu_rotl64(h, 27) * BU_P1 + BU_P4;
        p += 8;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)bu_rd32(p) * BU_P1;
        h = bu_rotl64(h, 23) * BU_P2 + BU_P3;
        p += 4;
    }
    while (p < end) {
        h ^= (uint64_t)(*p++) * BU_P5;
        h = bu_rotl64(h, 11) * BU_P1;
    }
    h ^= h >> 33;
    h *= BU_P2;
    h ^= h >> 29;
    h *= BU_P3;
    h ^= h >> 32;
    return h;
}

/* ------------------------------------------------------------------------ */
/* Reporting                                                                 */
/* ------------------------------------------------------------------------ */

static void bu_oom(void)
{
    fprintf(stderr, "out of memory\n");
    exit(1);
}

void bu_sb_printf(bu_sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            fprintf(stderr, "formatting failed\n");
            exit(1);
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            bu_oom();
    }
}

void bu_sb_json_str(bu_sbuf *b, const char *s)
{
    bu_sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            bu_sb_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            bu_sb_printf(b, "\\u%04x", *p);
        else
            bu_sb_printf(b, "%c", *p);
    }
    bu_sb_printf(b, "\"");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bu_median(const double *v, unsigned n)
{
    double *s = malloc((n ? n : 1) * sizeof(double));
    if (!s)
        bu_oom();
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

/* Display width of UTF-8 text: code points, not bytes (tables use µs). */
static size_t utf8_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

void bu_table_init(bu_table *t, unsigned ncols, const char *const *head, const int *right)
{
    memset(t, 0, sizeof(*t));
    if (ncols > BU_TABLE_MAX_COLS) {
        fprintf(stderr, "bu_table_init: %u columns, at most %d\n", ncols, BU_TABLE_MAX_COLS);
        exit(1);
    }
    t->ncols = ncols;
    for (unsigned c = 0; c < ncols; c++) {
        t->head[c] = head[c];
        t->right[c] = right[c];
    }
}

char (*bu_table_row(bu_table *t))[BU_TABLE_CELL]
{
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cell = realloc(t->cell, t->cap * sizeof(*t->cell));
        if (!t->cell)
            bu_oom();
    }
    memset(t->cell[t->nrows], 0, sizeof(*t->cell));
    return t->cell[t->nrows++];
}

void bu_table_render(const bu_table *t, bu_sbuf *b)
{
    size_t w[BU_TABLE_MAX_COLS];
    for (unsigned c = 0; c < t->ncols; c++) {
        w[c] = utf8_width(t->head[c]);
        for (unsigned r = 0; r < t->nrows; r++) {
            size_t x = utf8_width(t->cell[r][c]);
            w[c] = x > w[c] ? x : w[c];
        }
    }
    for (int row = -2; row < (int)t->nrows; row++) {
        bu_sb_printf(b, "|");
        for (unsigned c = 0; c < t->ncols; c++) {
            const char *s = row == -2 ? t->head[c] : row == -1 ? "" : t->cell[row][c];
            size_t pad = w[c] - utf8_width(s);
            if (row == -1) {
                bu_sb_printf(b, " ");
                for (size_t i = 0; i < w[c]; i++)
                    bu_sb_printf(b, "%s", (t->right[c] && i + 1 == w[c]) ? ":" : "-");
                bu_sb_printf(b, " |");
            } else if (t->right[c]) {
                bu_sb_printf(b, " %*s%s |", (int)pad, "", s);
            } else {
                bu_sb_printf(b, " %s%*s |", s, (int)pad, "");
            }
        }
        bu_sb_printf(b, "\n");
    }
}

void bu_table_free(bu_table *t)
{
    free(t->cell);
    t->cell = NULL;
    t->nrows = t->cap = 0;
}

void bu_command_line(bu_sbuf *b, const char *prog, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = i == 0 ? prog : argv[i];
        int plain = *a != 0;
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@%",
                        *p))
                plain = 0;
        if (i)
            bu_sb_printf(b, " ");
        if (plain) {
            bu_sb_printf(b, "%s", a);
        } else {
            bu_sb_printf(b, "'");
            for (const char *p = a; *p; p++)
                if (*p == '\'')
                    bu_sb_printf(b, "'\\''");
                else
                    bu_sb_printf(b, "%c", *p);
            bu_sb_printf(b, "'");
        }
    }
}

static void cpu_model(char *out, size_t len)
{
    snprintf(out, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t')
                    v++;
                v[strcspn(v, "\n")] = 0;
                snprintf(out, len, "%s", v);
            }
            break;
        }
    }
    fclose(f);
}

void bu_machine_init(bu_machine *m, const char *label)
{
    memset(m, 0, sizeof(*m));
    m->cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_model(m->cpu, sizeof(m->cpu));
    if (label) {
        snprintf(m->label, sizeof(m->label), "%s", label);
    } else {
        struct utsname u;
        snprintf(m->label, sizeof(m->label), "%s (%ld cores)",
                 uname(&u) == 0 ? u.nodename : "unknown", m->cores);
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->date, sizeof(m->date), "%Y-%m-%d %H:%M UTC", &tm);
}

void bu_append_record(const char *path, const char *source_dir, const char *prog,
                      const bu_machine *m, const char *title, const char *cmd,
                      const char *body)
{
    char file[4096];
    if (path)
        snprintf(file, sizeof(file), "%s", path);
    else
        snprintf(file, sizeof(file), "%s/docs/BENCHMARKS.md", source_dir);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        bu_mkdirs(dir);
    }
    struct stat st;
    int fresh = stat(file, &st) != 0 || st.st_size == 0;
    FILE *f = fopen(file, "a");
    if (!f) {
        fprintf(stderr, "%s: warning: cannot append to %s: %s\n", prog, file, strerror(errno));
        return;
    }
    if (fresh)
        fprintf(f, "# Benchmarks\n\nRecords appended by the benchmarks in `bench/` "
                   "(`bench_loader`, `bench_transfer`) and `bench/run_figures.sh`, oldest "
                   "first. Each gives the exact command, the date and the machine.\n");
    fprintf(f, "\n## %s, %s: %s\n\n```\n%s\n```\n\n%s", m->date, m->label, title, cmd, body);
    if (fclose(f) != 0)
        fprintf(stderr, "%s: warning: writing %s: %s\n", prog, file, strerror(errno));
    else
        fprintf(stderr, "appended to %s\n", file);
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

int64_t bu_proc_cpu_ns(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    /* The command name (field 2) may hold spaces and parentheses: fields
     * are counted from the last ')'. utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut, st;
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long tck = sysconf(_SC_CLK_TCK);
    return (int64_t)((ut + st) * (1000000000ull / (unsigned long long)(tck > 0 ? tck : 100)));
}

uint64_t bu_rusage_cpu_ns(int children)
{
    struct rusage ru;
    if (getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}
