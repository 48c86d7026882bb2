#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"

/* Column where help text starts; an option line longer than this puts its
 * help two spaces after it. */
#define CLI_HELP_COL 23

/* The spec being parsed: its quiet flag and exit hook apply to the usage
 * errors found meanwhile. */
static const cli_spec *active;

static void leave(int status) __attribute__((noreturn));
static void leave(int status)
{
    if (active && active->before_exit)
        active->before_exit(status);
    exit(status);
}

void cli_vdie(const char *prog, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    exit(1);
}

void cli_die(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vdie(prog, fmt, ap);
}

void cli_vdie_usage(const char *prog, const char *fmt, va_list ap)
{
    if (!(active && active->quiet)) {
        fprintf(stderr, "%s: ", prog);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n(%s --help lists the options)\n", prog);
    }
    leave(2);
}

void cli_die_usage(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vdie_usage(prog, fmt, ap);
}

uint64_t cli_parse_uint(const char *prog, const char *opt, const char *s, uint64_t min,
                        uint64_t max)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        goto bad;
    return v;
bad:
    cli_die_usage(prog, "%s '%s': expected an integer in [%llu, %llu]", opt, s,
                  (unsigned long long)min, (unsigned long long)max);
}

static int64_t parse_int(const char *prog, const char *opt, const char *s, int64_t min,
                         int64_t max)
{
    char *end;
    errno = 0;
    long long v = *s ? strtoll(s, &end, 10) : 0;
    if (!*s || errno || *end || v < min || v > max)
        cli_die_usage(prog, "%s '%s': expected an integer in [%lld, %lld]", opt, s,
                      (long long)min, (long long)max);
    return v;
}

static double parse_double(const char *prog, const char *opt, const char *s, double min,
                           double max)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= min && v <= max))
        cli_die_usage(prog, "%s '%s': expected a number in [%g, %g]", opt, s, min, max);
    return v;
}

static void join_names(char *out, size_t len, const char *const *names)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; names[i] && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i ? "|" : "", names[i]);
}

int cli_parse_enum(const char *prog, const char *opt, const char *s, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    char list[256];
    join_names(list, sizeof(list), names);
    cli_die_usage(prog, "%s '%s': expected one of %s", opt, s, list);
}

/* Every name `o` takes, joined by '|': the library's names of its option's
 * values, then the program's extras. */
static void option_names(const cli_opt *o, char *out, size_t len)
{
    int n = feeder_option_value_names((feeder_option)o->option, "|", out, len);
    for (int i = 0; o->names && o->names[i] && n >= 0 && (size_t)n < len; i++)
        n += snprintf(out + n, len - (size_t)n, "%s%s", n ? "|" : "", o->names[i]);
}

/* A value of `o`'s option by its exact library name or one of the extras,
 * or cli_die_usage listing them all. */
static int parse_option_value(const char *prog, const char *opt, const char *s, const cli_opt *o)
{
    int v;
    const char *name;
    if (feeder_option_value((feeder_option)o->option, s, &v) == 0 &&
        (name = feeder_option_value_name((feeder_option)o->option, v)) && strcmp(s, name) == 0)
        return v;
    for (int i = 0; o->names && o->names[i]; i++)
        if (strcmp(s, o->names[i]) == 0)
            return o->values[i];
    char list[256] = "";
    option_names(o, list, sizeof(list));
    cli_die_usage(prog, "%s '%s': expected one of %s", opt, s, list);
}

unsigned cli_parse_list(const char *prog, const char *opt, const char *s, uint64_t *out,
                        unsigned max, uint64_t min, uint64_t max_value)
{
    char buf[1024];
    if (strlen(s) >= sizeof(buf))
        cli_die_usage(prog, "%s: list too long", opt);
    strcpy(buf, s);
    unsigned n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == max)
            cli_die_usage(prog, "%s: at most %u values", opt, max);
        out[n++] = cli_parse_uint(prog, opt, t, min, max_value);
    }
    if (n == 0)
        cli_die_usage(prog, "%s '%s': expected a comma-separated list", opt, s);
    return n;
}

/* Store an unsigned or signed value in an integer of `size` bytes. */
static void store_int(void *dest, size_t size, uint64_t v)
{
    switch (size) {
    case 1: *(uint8_t *)dest = (uint8_t)v; break;
    case 2: *(uint16_t *)dest = (uint16_t)v; break;
    case 4: *(uint32_t *)dest = (uint32_t)v; break;
    default: *(uint64_t *)dest = v; break;
    }
}

static void apply(const char *prog, const cli_opt *o, const char *arg)
{
    char opt[128];
    snprintf(opt, sizeof(opt), "--%s", o->name);
    if (o->given)
        *o->given = 1;
    switch (o->type) {
    case CLI_T_FLAG: store_int(o->dest, o->dest_size, (uint64_t)o->value); break;
    case CLI_T_UINT:
        store_int(o->dest, o->dest_size, cli_parse_uint(prog, opt, arg, o->min, o->max));
        break;
    case CLI_T_INT:
        store_int(o->dest, o->dest_size,
                  (uint64_t)parse_int(prog, opt, arg, o->imin, o->imax));
        break;
    case CLI_T_DOUBLE: *(double *)o->dest = parse_double(prog, opt, arg, o->dmin, o->dmax); break;
    case CLI_T_ENUM: {
        int i = cli_parse_enum(prog, opt, arg, o->names);
        *(int *)o->dest = o->values ? o->values[i] : i;
        break;
    }
    case CLI_T_OPTION: *(int *)o->dest = parse_option_value(prog, opt, arg, o); break;
    case CLI_T_STRING: *(const char **)o->dest = arg; break;
    case CLI_T_FUNC: o->fn(prog, arg, o->dest); break;
    }
}

/* The option `name` (exact, else an unambiguous prefix) or NULL. */
static const cli_opt *find_long(const cli_spec *s, const char *name, size_t len)
{
    const cli_opt *hit = NULL;
    for (const cli_opt *o = s->opts; o->name; o++) {
        if (strncmp(o->name, name, len) != 0)
            continue;
        if (strlen(o->name) == len)
            return o;
        if (hit)
            cli_die_usage(s->prog, "option '--%.*s' is ambiguous", (int)len, name);
        hit = o;
    }
    return hit;
}

static const cli_opt *find_short(const cli_spec *s, char c)
{
    for (const cli_opt *o = s->opts; o->name; o++)
        if (o->short_name == c)
            return o;
    return NULL;
}

static int is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

/* One option at argv[*i]; advances *i past its value. */
static void one_option(const cli_spec *s, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    const cli_opt *o = a[1] == '-' ? find_long(s, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2))
                       : a[2] == 0 ? find_short(s, a[1]) : NULL;
    if (!o)
        cli_die_usage(s->prog, "unknown option '%s'", a);
    if (o->type == CLI_T_FLAG) {
        if (eq)
            cli_die_usage(s->prog, "--%s takes no value", o->name);
        apply(s->prog, o, NULL);
        return;
    }
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
        if (*i + 1 >= argc)
            cli_die_usage(s->prog, "%s needs a value", a);
        val = argv[++*i];
        if (strncmp(val, "--", 2) == 0)
            cli_die_usage(s->prog, "--%s needs a value, got the option '%s'", o->name, val);
    }
    apply(s->prog, o, val);
}

int cli_parse(const cli_spec *s, int argc, char **argv)
{
    char **pos = malloc(sizeof(char *) * (size_t)(argc > 0 ? argc : 1));
    if (!pos)
        cli_die(s->prog, "out of memory");
    int npos = 0, nopt = 1, i = 1;
    active = s;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) { /* stays with the options: argv[first..argc) */
            argv[nopt++] = argv[i++];
            break;
        }
        if (a[0] != '-' || a[1] == 0) {
            pos[npos++] = argv[i];
            continue;
        }
        if (is_help(a)) {
            /* One write, so a reader that stops early (grep -q) cannot cut
             * it with SIGPIPE. */
            static char buf[1 << 16];
            setvbuf(stdout, buf, _IOFBF, sizeof(buf));
            if (!s->quiet)
                cli_help(s, stdout);
            fflush(stdout);
            leave(0);
        }
        int first = i;
        one_option(s, argc, argv, &i);
        for (int k = first; k <= i; k++)
            argv[nopt++] = argv[k];
    }
    for (; i < argc; i++)
        pos[npos++] = argv[i];
    memcpy(argv + nopt, pos, sizeof(char *) * (size_t)npos);
    free(pos);
    if ((unsigned)npos > s->max_args)
        cli_die_usage(s->prog, "unexpected argument '%s'%s", argv[nopt + (int)s->max_args],
                      s->max_args ? "" : " (options start with --)");
    if ((unsigned)npos < s->min_args)
        cli_die_usage(s->prog, "expected %u argument%s, got %d", s->min_args,
                      s->min_args == 1 ? "" : "s", npos);
    active = NULL;
    return nopt;
}

/* "  --name META" or "  -x, --name META"; its length. */
static int option_head(const cli_opt *o, char *b, size_t len)
{
    char meta[256] = "";
    if (o->type == CLI_T_ENUM && !o->meta)
        join_names(meta, sizeof(meta), o->names);
    else if (o->type == CLI_T_OPTION && !o->meta)
        option_names(o, meta, sizeof(meta));
    else if (o->type != CLI_T_FLAG)
        snprintf(meta, sizeof(meta), "%s", o->meta ? o->meta : "X");
    char sh[8] = "";
    if (o->short_name)
        snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
    return snprintf(b, len, "  %s--%s%s%s", sh, o->name, *meta ? " " : "", meta);
}

void cli_help(const cli_spec *s, FILE *f)
{
    if (s->usage)
        fputs(s->usage, f);
    else
        fprintf(f, "usage: %s [options]\n", s->prog);
    for (const cli_opt *o = s->opts; o->name; o++) {
        char head[400];
        int n = option_head(o, head, sizeof(head));
        fputs(head, f);
        const char *h = o->help ? o->help : "";
        if (n < CLI_HELP_COL)
            fprintf(f, "%*s", CLI_HELP_COL - n, "");
        else
            fputs("  ", f);
        for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
            fprintf(f, "%.*s\n%*s", (int)(nl - h), h, CLI_HELP_COL, "");
        fprintf(f, "%s\n", h);
    }
    fprintf(f, "  -h, --help%*sthis text\n", CLI_HELP_COL - 12, "");
    if (s->epilog)
        fputs(s->epilog, f);
}
