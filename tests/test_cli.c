/*
 * cli/, the option parser of the programs in bench/, tools/ and examples/:
 * every type with its bounds, enums with and without values, a feeder
 * option's value names with a program's extras, flags, "given",
 * --opt=value, prefixes, positional arguments moved last, the help text, and
 * the messages and exit status (2) of bad command lines, and the die
 * functions' va_list forms.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "feeder.h"

static const char *const colours[] = {"red", "green", "blue", NULL};
static const int colour_values[] = {10, 20, 30};
static const char *const decoder_extras[] = {"raw", "all", NULL};
static const int decoder_extra_values[] = {4, 5};

typedef struct vals {
    uint32_t n;
    uint64_t big;
    int signed_v;
    double x;
    int colour, valued, decoder, dtype;
    const char *name;
    int flag, off;
    int list_called;
    int n_given;
} vals;

static void list_fn(const char *prog, const char *arg, void *dest)
{
    (void)prog;
    ((vals *)dest)->list_called = (int)strlen(arg);
}

static int parse(vals *v, int argc, char **argv, unsigned max_args)
{
    memset(v, 0, sizeof(*v));
    v->off = 1;
    cli_opt t[] = {
        CLI_UINT("count", "N", v->n, 1, 100, "a count"),
        CLI_UINT("big", "N", v->big, 0, UINT64_MAX, "a big one"),
        CLI_INT("device", "N", v->signed_v, -1, 7, "-1 or a device"),
        CLI_DOUBLE("ratio", "X", v->x, 0, 1, "a share"),
        CLI_ENUM("colour", v->colour, colours, "a colour\nover two lines"),
        CLI_ENUMV("valued", v->valued, colours, colour_values, "a colour's value"),
        CLI_OPTIONX("decoder", v->decoder, FEEDER_OPT_DECODER, decoder_extras,
                    decoder_extra_values, "a decoder"),
        CLI_OPTION("dtype", v->dtype, FEEDER_OPT_DTYPE, "a dtype"),
        CLI_STRING("name", "TEXT", v->name, "a name"),
        CLI_FLAG("flag", v->flag, "a flag"),
        CLI_FLAGV("no-off", v->off, 0, "clears off"),
        CLI_FUNC("list", "LIST", list_fn, v, "a list"),
        CLI_END,
    };
    t[0].given = &v->n_given;
    cli_spec s = {.prog = "prog", .opts = t, .max_args = max_args, .epilog = "The end.\n"};
    return cli_parse(&s, argc, argv);
}

START_TEST(test_values)
{
    char *argv[] = {"prog", "--count", "7", "pos1", "--big=18446744073709551615", "--device",
                    "-1", "--ratio", "0.25", "--colour", "blue", "--valued", "green", "--name",
                    "x y", "--flag", "--no-off", "--li", "a,b,c", "--decoder", "all", "--dtype",
                    "float16", "--", "--pos2", NULL};
    vals v;
    int first = parse(&v, 25, argv, 2);
    ck_assert_uint_eq(v.n, 7);
    ck_assert_int_eq(v.n_given, 1);
    ck_assert(v.big == UINT64_MAX);
    ck_assert_int_eq(v.signed_v, -1);
    ck_assert(v.x == 0.25);
    ck_assert_int_eq(v.colour, 2);
    ck_assert_int_eq(v.valued, 20);
    ck_assert_str_eq(v.name, "x y");
    ck_assert_int_eq(v.flag, 1);
    ck_assert_int_eq(v.off, 0);
    ck_assert_int_eq(v.list_called, 5);
    ck_assert_int_eq(v.decoder, 5);
    ck_assert_int_eq(v.dtype, FEEDER_DTYPE_FLOAT16);
    /* Positional arguments come last, in order. */
    ck_assert_int_eq(first, 23);
    ck_assert_str_eq(argv[23], "pos1");
    ck_assert_str_eq(argv[24], "--pos2");
}
END_TEST

/* Run parse on argv in a child with stderr in a pipe: its exit status and message. */
static int run_bad(char **argv, int argc, char *msg, size_t len)
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        vals v;
        parse(&v, argc, argv, 0);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fd[0], msg + got, len - 1 - got)) > 0)
        got += (size_t)n;
    msg[got] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define BAD(want, ...)                                                                      \
    do {                                                                                    \
        char *a[] = {"prog", __VA_ARGS__, NULL};                                            \
        char m[4096];                                                                       \
        ck_assert_int_eq(run_bad(a, (int)(sizeof(a) / sizeof(a[0])) - 1, m, sizeof(m)), 2); \
        ck_assert_str_eq(m, "prog: " want "\n(prog --help lists the options)\n");          \
    } while (0)

START_TEST(test_errors)
{
    BAD("--count '0': expected an integer in [1, 100]", "--count", "0");
    BAD("--count '-3': expected an integer in [1, 100]", "--count", "-3");
    BAD("--count '7x': expected an integer in [1, 100]", "--count=7x");
    BAD("--device '8': expected an integer in [-1, 7]", "--device", "8");
    BAD("--ratio '2': expected a number in [0, 1]", "--ratio", "2");
    BAD("--colour 'pink': expected one of red|green|blue", "--colour", "pink");
    BAD("--decoder 'gpu': expected one of turbo|roi|nvjpeg|hybrid|raw|all", "--decoder", "gpu");
    BAD("--decoder 'ROI': expected one of turbo|roi|nvjpeg|hybrid|raw|all", "--decoder", "ROI");
    BAD("--dtype 'fp16': expected one of uint8|float16|bfloat16|float32", "--dtype", "fp16");
    BAD("--name needs a value, got the option '--flag'", "--name", "--flag");
    BAD("--name needs a value", "--name");
    BAD("unknown option '--nope'", "--nope");
    BAD("option '--n' is ambiguous", "--n", "1");
    BAD("--flag takes no value", "--flag=1");
    BAD("unexpected argument 'extra' (options start with --)", "extra");
}
END_TEST

START_TEST(test_help)
{
    char *a[] = {"prog", "--count", "3", "--help", NULL};
    char m[4096];
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        vals v;
        parse(&v, 4, a, 0);
        _exit(9);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < sizeof(m) && (n = read(fd[0], m + got, sizeof(m) - 1 - got)) > 0)
        got += (size_t)n;
    m[got] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_ptr_nonnull(strstr(m, "usage: prog [options]\n"));
    ck_assert_ptr_nonnull(strstr(m, "  --count N            a count\n"));
    ck_assert_ptr_nonnull(strstr(m, "  --colour red|green|blue  a colour\n"
                                    "                       over two lines\n"));
    ck_assert_ptr_nonnull(strstr(m, "  --flag               a flag\n"));
    ck_assert_ptr_nonnull(strstr(m, "  --decoder turbo|roi|nvjpeg|hybrid|raw|all  a decoder\n"));
    ck_assert_ptr_nonnull(strstr(m, "  -h, --help           this text\nThe end.\n"));
}
END_TEST

START_TEST(test_helpers)
{
    uint64_t v[4];
    ck_assert_uint_eq(cli_parse_list("prog", "--l", "1,2,30", v, 4, 0, 100), 3);
    ck_assert(v[0] == 1 && v[1] == 2 && v[2] == 30);
    ck_assert_int_eq(cli_parse_enum("prog", "--c", "green", colours), 1);
    ck_assert(cli_parse_uint("prog", "--u", "42", 0, 42) == 42);
}
END_TEST

/* A program's own die function over the va_list forms (as feeder-pack's). */
static void my_die(int usage, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void my_die(int usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (usage)
        cli_vdie_usage("prog", fmt, ap);
    cli_vdie("prog", fmt, ap);
}

/* The exit status of my_die(usage, ...) in a child, its stderr in m. */
static int run_die(int usage, char *m, size_t len)
{
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        my_die(usage, "bad %s %d", "thing", 7);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(fd[0], m + got, len - 1 - got)) > 0)
        got += (size_t)n;
    m[got] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_die_va_list)
{
    char m[512];
    ck_assert_int_eq(run_die(1, m, sizeof(m)), 2);
    ck_assert_str_eq(m, "prog: bad thing 7\n(prog --help lists the options)\n");
    ck_assert_int_eq(run_die(0, m, sizeof(m)), 1);
    ck_assert_str_eq(m, "prog: bad thing 7\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_helpers);
    tcase_add_test(tc, test_die_va_list);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
