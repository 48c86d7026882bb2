/*
 * bench/benchutil_report.c: what the benchmarks print and record
 * (benchutil.h's third section): a growing string, JSON strings, the median,
 * Markdown tables padded by code points, the command line quoted for a
 * shell, the machine a figure was measured on, and the record appended to
 * docs/BENCHMARKS.md.
 */
#include "benchutil.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

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

void bu_cells_dash(char (*row)[BU_TABLE_CELL], unsigned from, unsigned to)
{
    for (unsigned c = from; c < to; c++)
        snprintf(row[c], BU_TABLE_CELL, "-");
}

void bu_cell_or_dash(char *cell, const char *fmt, double v, int valid)
{
    if (valid)
        snprintf(cell, BU_TABLE_CELL, fmt, v);
    else
        snprintf(cell, BU_TABLE_CELL, "-");
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

int bu_usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
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

void bu_report_finish(bu_report *r, int as_json, const char *append_to, const char *prog,
                      const bu_machine *m, const char *title, const char *cmd)
{
    if (as_json)
        fputs(r->json.p ? r->json.p : "", stdout);
    else
        printf("\n%s\n%s\n%s", r->header.p, r->table.p, r->footer.p);
    fflush(stdout);
    if (append_to) {
        bu_sbuf body = {0};
        bu_sb_printf(&body, "%s\n%s\n%s", r->header.p, r->table.p, r->footer.p);
        bu_append_record(append_to, NULL, prog, m, title, cmd, body.p);
        free(body.p);
    }
    free(r->header.p);
    free(r->table.p);
    free(r->footer.p);
    free(r->json.p);
    memset(r, 0, sizeof(*r));
}
