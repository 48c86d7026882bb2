/*
 * common/brace.c: brace ranges (common/brace.h). Written by hand: glob(3)
 * and wordexp(3) do not expand numeric ranges, and wordexp runs a shell.
 * The pattern is split into literal pieces and groups first (the plan), then
 * the names are produced as an odometer over the groups, leftmost slowest.
 */
#include "common/brace.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

/* One group of a pattern: the literal text before it, then its choices. */
typedef struct group {
    const char *lit; /* literal text before the group */
    size_t lit_len;
    const char *body; /* between the braces */
    size_t body_len;
    int range;          /* 1: {A..B}; 0: a list */
    uint64_t lo, hi;    /* range bounds as written (lo may exceed hi) */
    int width;          /* zero-padding width, 0 for none */
    size_t choices;     /* names this group yields */
} group;

typedef struct plan {
    group *g;
    size_t n;
    const char *tail; /* literal text after the last group */
    size_t tail_len;
    size_t total;     /* names in all */
} plan;

static int fail(char *err, size_t errlen, const char *pattern, size_t at, const char *what)
{
    feeder__fmt(err, errlen, "brace pattern \"%s\": %s at byte %zu", pattern, what, at);
    return FEEDER_EINVAL;
}

/* Parse digits [s, s+len) into *v; 0 or -1 (empty, not digits, too long). */
static int parse_bound(const char *s, size_t len, uint64_t *v)
{
    if (len == 0 || len > 18)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 0;
}

/* A range body "A..B": 1 when it is one (g filled), 0 when it is not. */
static int parse_range(group *g)
{
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < g->body_len; i++)
        if (g->body[i] == '.' && g->body[i + 1] == '.') {
            dots = g->body + i;
            break;
        }
    if (!dots)
        return 0;
    size_t alen = (size_t)(dots - g->body), blen = g->body_len - alen - 2;
    if (parse_bound(g->body, alen, &g->lo) || parse_bound(dots + 2, blen, &g->hi))
        return 0;
    int padded = (alen > 1 && g->body[0] == '0') || (blen > 1 && dots[2] == '0');
    g->width = padded ? (int)(alen > blen ? alen : blen) : 0;
    g->range = 1;
    g->choices = (size_t)((g->lo > g->hi ? g->lo - g->hi : g->hi - g->lo) + 1);
    return 1;
}

/* Fill g's kind and choice count from its body; 0 or -1 (neither kind). */
static int classify(group *g)
{
    if (parse_range(g))
        return 0;
    g->choices = 1;
    for (size_t i = 0; i < g->body_len; i++)
        g->choices += g->body[i] == ',';
    return g->choices > 1 ? 0 : -1;
}

/* Split the pattern into groups; 0 or FEEDER_EINVAL / -ENOMEM. */
static int make_plan(const char *pattern, plan *p, char *err, size_t errlen)
{
    const char *lit = pattern;
    p->total = 1;
    for (const char *s = pattern; *s; s++) {
        if (*s == '}')
            return fail(err, errlen, pattern, (size_t)(s - pattern), "'}' without '{'");
        if (*s != '{')
            continue;
        const char *close = s + 1 + strcspn(s + 1, "{}");
        if (*close != '}')
            return fail(err, errlen, pattern, (size_t)(s - pattern),
                        *close ? "nested '{'" : "'{' never closed");
        group *ng = realloc(p->g, (p->n + 1) * sizeof *ng);
        if (!ng)
            return -ENOMEM;
        p->g = ng;
        group *g = &p->g[p->n++];
        *g = (group){.lit = lit, .lit_len = (size_t)(s - lit), .body = s + 1,
                     .body_len = (size_t)(close - s - 1)};
        if (classify(g))
            return fail(err, errlen, pattern, (size_t)(s - pattern),
                        "a group is neither a range {A..B} nor a list {x,y}");
        if (g->choices > FEEDER__BRACE_MAX / p->total)
            return fail(err, errlen, pattern, (size_t)(s - pattern),
                        "more than 1000000 names");
        p->total *= g->choices;
        s = close;
        lit = close + 1;
    }
    p->tail = lit;
    p->tail_len = strlen(lit);
    return 0;
}

/* Choice k of a list group: its start and length. */
static void list_choice(const group *g, size_t k, const char **s, size_t *len)
{
    const char *at = g->body, *end = g->body + g->body_len;
    while (k--)
        at = memchr(at, ',', (size_t)(end - at)) + 1;
    const char *comma = memchr(at, ',', (size_t)(end - at));
    *s = at;
    *len = (size_t)((comma ? comma : end) - at);
}

/* Append choice k of g to buf at *at (buf is large enough). */
static void put_choice(const group *g, size_t k, char *buf, size_t *at)
{
    memcpy(buf + *at, g->lit, g->lit_len);
    *at += g->lit_len;
    if (g->range) {
        uint64_t v = g->lo <= g->hi ? g->lo + k : g->lo - k;
        *at += (size_t)sprintf(buf + *at, "%0*llu", g->width, (unsigned long long)v);
        return;
    }
    const char *s;
    size_t len;
    list_choice(g, k, &s, &len);
    memcpy(buf + *at, s, len);
    *at += len;
}

/* Name number `i` of the plan (odometer digits, the last group fastest). */
static char *make_name(const plan *p, size_t i, size_t cap)
{
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t at = 0, digit[64], rest = i;
    for (size_t j = p->n; j-- > 0;) {
        digit[j % 64] = rest % p->g[j].choices;
        rest /= p->g[j].choices;
    }
    for (size_t j = 0; j < p->n; j++)
        put_choice(&p->g[j], digit[j % 64], buf, &at);
    memcpy(buf + at, p->tail, p->tail_len);
    buf[at + p->tail_len] = '\0';
    return buf;
}

int feeder__brace_expand(const char *pattern, char ***out, size_t *count, char *err,
                         size_t errlen)
{
    if (!pattern || !out || !count) {
        feeder__fmt(err, errlen, "feeder__brace_expand: NULL argument");
        return FEEDER_EINVAL;
    }
    plan p = {0};
    int rc = make_plan(pattern, &p, err, errlen);
    if (rc == 0 && p.n > 64)
        rc = fail(err, errlen, pattern, 0, "more than 64 groups");
    /* A name is never longer than the pattern plus 20 digits a group. */
    size_t cap = strlen(pattern) + 20 * p.n + 1;
    char **names = rc ? NULL : calloc(p.total, sizeof *names);
    if (rc == 0 && !names)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < p.total; i++)
        if (!(names[i] = make_name(&p, i, cap)))
            rc = -ENOMEM;
    free(p.g);
    if (rc) {
        if (rc == -ENOMEM)
            feeder__fmt(err, errlen, "brace pattern \"%s\": out of memory", pattern);
        feeder__brace_free(names, names ? p.total : 0);
        return rc;
    }
    *out = names;
    *count = p.total;
    return 0;
}

void feeder__brace_free(char **names, size_t count)
{
    if (!names)
        return;
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}
