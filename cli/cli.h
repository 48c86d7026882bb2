/*
 * cli/: the command lines of feeder's programs (bench/, tools/, examples/).
 * One table of options per program drives the parser, the checks of every
 * value against its bounds and the --help text, so each program's main reads
 * only what it runs.
 *
 * This is program code, not library code: it prints to stderr and exits.
 * Exit status 2 means bad arguments, 1 that the run failed.
 *
 *   static const cli_opt opts[] = {
 *       CLI_UINT("batch", "N", o.batch, 1, 1 << 20, "samples per batch (256)"),
 *       CLI_ENUM("io", o.io, io_names, "read path (auto)"),
 *       CLI_FLAG("json", o.json, "JSON on stdout instead of the table"),
 *       CLI_END,
 *   };
 *   int first = cli_parse(&(cli_spec){.prog = "bench_x", .opts = opts}, argc, argv);
 *
 * Not thread-safe: call it from main before any thread starts.
 */
#ifndef FEEDER_CLI_H
#define FEEDER_CLI_H

#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_type {
    CLI_T_FLAG,   /* no value: *(int *)dest = value */
    CLI_T_UINT,   /* unsigned decimal in [min, max] into an unsigned of dest_size bytes */
    CLI_T_INT,    /* signed decimal in [imin, imax] into a signed int of dest_size bytes */
    CLI_T_DOUBLE, /* a number in [dmin, dmax] into a double */
    CLI_T_ENUM,   /* one of names: *(int *)dest = values ? values[i] : i */
    CLI_T_OPTION, /* a name of a feeder option's value (the library's table), or one of the
                     program's extra names: *(int *)dest */
    CLI_T_STRING, /* *(const char **)dest = the argument (borrowed from argv) */
    CLI_T_FUNC    /* fn(prog, argument, dest) parses it (a list, say) */
} cli_type;

typedef void (*cli_fn)(const char *prog, const char *arg, void *dest);

/* One option. Build them with the CLI_* macros below; end the table with CLI_END. */
typedef struct cli_opt {
    const char *name;  /* long name without "--"; NULL ends the table */
    char short_name;   /* a one-letter alias ("-h"), 0 for none */
    cli_type type;
    void *dest;
    size_t dest_size;
    uint64_t min, max;   /* CLI_T_UINT */
    int64_t imin, imax;  /* CLI_T_INT */
    double dmin, dmax;   /* CLI_T_DOUBLE */
    int64_t value;       /* CLI_T_FLAG: what is stored */
    const char *const *names; /* CLI_T_ENUM: NULL-terminated; CLI_T_OPTION: the extras, or NULL */
    const int *values;        /* stored for names[i]; NULL: i (CLI_T_ENUM; given with extras) */
    int option;               /* CLI_T_OPTION: the feeder_option whose value names it takes */
    cli_fn fn;                /* CLI_T_FUNC */
    int *given;          /* set to 1 when the option appears; may be NULL */
    const char *meta;    /* the value's name in --help ("N", "DIR"); enums list their names */
    const char *help;    /* help text; '\n' starts an indented continuation line */
} cli_opt;

#define CLI_UINT(nm, mt, var, lo, hi, hp)                                                     \
    {.name = (nm), .type = CLI_T_UINT, .dest = &(var), .dest_size = sizeof(var),             \
     .min = (lo), .max = (hi), .meta = (mt), .help = (hp)}
#define CLI_INT(nm, mt, var, lo, hi, hp)                                                      \
    {.name = (nm), .type = CLI_T_INT, .dest = &(var), .dest_size = sizeof(var),              \
     .imin = (lo), .imax = (hi), .meta = (mt), .help = (hp)}
#define CLI_DOUBLE(nm, mt, var, lo, hi, hp)                                                   \
    {.name = (nm), .type = CLI_T_DOUBLE, .dest = &(var), .dest_size = sizeof(var),           \
     .dmin = (lo), .dmax = (hi), .meta = (mt), .help = (hp)}
#define CLI_ENUM(nm, var, nms, hp)                                                            \
    {.name = (nm), .type = CLI_T_ENUM, .dest = &(var), .dest_size = sizeof(var),             \
     .names = (nms), .help = (hp)}
#define CLI_ENUMV(nm, var, nms, vals, hp)                                                     \
    {.name = (nm), .type = CLI_T_ENUM, .dest = &(var), .dest_size = sizeof(var),             \
     .names = (nms), .values = (vals), .help = (hp)}
/* An enum-valued feeder option's value by its library name (feeder_option_value_name):
 * the names, their order in --help and in the error text come from the library. */
#define CLI_OPTION(nm, var, opt, hp)                                                          \
    {.name = (nm), .type = CLI_T_OPTION, .dest = &(var), .dest_size = sizeof(var),           \
     .option = (opt), .help = (hp)}
/* The same with the program's own names after the library's: `xnms` (NULL-terminated) stores
 * xvals[i], an alias of a library value ("fp16") or a value of the program's past the
 * library's ("all"). */
#define CLI_OPTIONX(nm, var, opt, xnms, xvals, hp)                                            \
    {.name = (nm), .type = CLI_T_OPTION, .dest = &(var), .dest_size = sizeof(var),           \
     .option = (opt), .names = (xnms), .values = (xvals), .help = (hp)}
#define CLI_STRING(nm, mt, var, hp)                                                           \
    {.name = (nm), .type = CLI_T_STRING, .dest = &(var), .dest_size = sizeof(var),           \
     .meta = (mt), .help = (hp)}
#define CLI_FLAG(nm, var, hp)                                                                 \
    {.name = (nm), .type = CLI_T_FLAG, .dest = &(var), .dest_size = sizeof(var), .value = 1, \
     .help = (hp)}
#define CLI_FLAGV(nm, var, v, hp)                                                             \
    {.name = (nm), .type = CLI_T_FLAG, .dest = &(var), .dest_size = sizeof(var),             \
     .value = (v), .help = (hp)}
#define CLI_FUNC(nm, mt, f, ptr, hp)                                                          \
    {.name = (nm), .type = CLI_T_FUNC, .dest = (ptr), .fn = (f), .meta = (mt), .help = (hp)}
#define CLI_END {.name = NULL}

/* A program's command line. */
typedef struct cli_spec {
    const char *prog;     /* names the program in messages */
    const char *usage;    /* the first help line(s), e.g. "usage: prog [options] DIR N\n";
                             NULL: "usage: PROG [options]\n" */
    const char *epilog;   /* printed after the options (exit statuses, notes); may be NULL */
    cli_opt *opts;        /* the table; `given` pointers are written */
    unsigned min_args, max_args; /* positional arguments accepted */
    int quiet;            /* print nothing while parsing (MPI ranks other than 0) */
    void (*before_exit)(int status); /* called before parsing exits (MPI_Finalize) */
} cli_spec;

/* Parse argv against the table. Options and positional arguments may mix
 * ("--opt=value" and "--opt value"; unambiguous prefixes of long names work,
 * "--" ends the options); argv is reordered so the positional ones come last,
 * and the index of the first is returned (they are argv[first..argc)).
 * --help / -h print the help on stdout and exit 0; anything wrong exits 2
 * with a message naming the option and its bounds or choices. A value that
 * starts with "--" is refused (a forgotten value would otherwise swallow the
 * next option). With spec->quiet nothing is printed; spec->before_exit runs
 * before any of these exits. */
int cli_parse(const cli_spec *spec, int argc, char **argv);

/* The help text generated from the table. */
void cli_help(const cli_spec *spec, FILE *f);

/* "PROG: message" and a pointer to --help on stderr, exit 2 (bad arguments). */
void cli_die_usage(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* "PROG: message" on stderr, exit 1 (the run failed). */
void cli_die(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
/* The same two with a va_list, for a program's own die functions. */
void cli_vdie_usage(const char *prog, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0), noreturn));
void cli_vdie(const char *prog, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0), noreturn));
/* A decimal integer in [min, max], or cli_die_usage naming `opt` and the bounds. */
uint64_t cli_parse_uint(const char *prog, const char *opt, const char *s, uint64_t min,
                        uint64_t max);
/* The index of `s` in the NULL-terminated `names`, or cli_die_usage listing them. */
int cli_parse_enum(const char *prog, const char *opt, const char *s, const char *const *names);

/* A comma-separated list of up to `max` integers in [min, max_value] into
 * out[]; returns the count, or cli_die_usage naming `opt`. */
unsigned cli_parse_list(const char *prog, const char *opt, const char *s, uint64_t *out,
                        unsigned max, uint64_t min, uint64_t max_value);

#endif
