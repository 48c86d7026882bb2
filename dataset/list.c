/*
 * dataset/list.c: list files, "relative/path label" a line, parsed as the
 * file streams in (so memory is the entries plus one line), with paths that
 * leave the root refused unless asked for.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "io/io.h"

/* Parse "path label": the label is the last blank-separated field, so paths
 * may hold spaces. Returns 0 and sets *path_end, or -1. */
static int parse_list_line(char *line, char **path_end, int64_t *label)
{
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                   line[len - 1] == '\t'))
        line[--len] = 0;
    char *sp = line + len;
    while (sp > line && sp[-1] != ' ' && sp[-1] != '\t')
        sp--;
    if (sp == line || !*sp)
        return -1;
    char *lab = sp;
    uint64_t v = 0;
    for (char *c = lab; *c; c++) {
        if (!isdigit((unsigned char)*c) || v > (uint64_t)INT64_MAX / 10)
            return -1;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return -1;
    while (sp > line && (sp[-1] == ' ' || sp[-1] == '\t'))
        sp--;
    if (sp == line)
        return -1;
    *sp = 0;
    *path_end = sp;
    *label = (int64_t)v;
    return 0;
}

/* Does relative path `p` leave the folder it is relative to? Lexical: ".."
 * climbs one level, "." and empty components stay; symlinks are not looked at
 * (a list file names files, the check keeps its names inside the root). */
static int path_escapes(const char *p)
{
    if (p[0] == '/')
        return 1;
    uint64_t depth = 0;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (depth == 0)
                return 1;
            depth--;
        } else if (n && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

/* A list file parsed as it streams in: whole lines are handled as they
 * complete, a partial one waits in `line`, so memory is the entries kept plus
 * one line, whatever the file's size. */
typedef struct list_parser {
    const char *name, *root;
    unsigned flags;
    feeder__strlist l;
    uint64_t lineno;
    int64_t maxlab;
    size_t linelen; /* bytes of the current, unfinished line */
    char line[FEEDER__LIST_LINE_MAX + 1];
} list_parser;

static int line_error(const list_parser *p, char *err, size_t errlen, const char *what)
{
    feeder__fmt(err, errlen, "%s:%llu: %s", p->name, (unsigned long long)p->lineno, what);
    return FEEDER_EDATASET;
}

/* One complete line, p->line[0 .. p->linelen), without its '\n'. */
static int list_line(list_parser *p, char *err, size_t errlen)
{
    p->line[p->linelen] = 0;
    char *s = p->line;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == 0 || *s == '\r' || *s == '#')
        return 0;
    char *end;
    int64_t label;
    if (parse_list_line(s, &end, &label) != 0) {
        feeder__fmt(err, errlen,
                    "%s:%llu: expected 'relative/path label' with a non-negative integer "
                    "label, got '%.200s'",
                    p->name, (unsigned long long)p->lineno, s);
        return FEEDER_EDATASET;
    }
    if (!(p->flags & FEEDER_LIST_ALLOW_ESCAPE) && path_escapes(s)) {
        feeder__fmt(err, errlen,
                    "%s:%llu: path '%.200s' escapes the root %s (%s); "
                    "FEEDER_LIST_ALLOW_ESCAPE allows it",
                    p->name, (unsigned long long)p->lineno, s, p->root,
                    s[0] == '/' ? "absolute path" : "'..' climbs above the root");
        return FEEDER_EPATH;
    }
    if (label > p->maxlab)
        p->maxlab = label;
    return s[0] == '/' ? feeder__strlist_add(&p->l, s, NULL, label)
                       : feeder__strlist_add(&p->l, p->root, s, label);
}

/* The next `len` bytes of the file. A line is refused as soon as it passes
 * the limit, before the rest of it is read. */
static int list_feed(list_parser *p, const char *buf, size_t len, char *err, size_t errlen)
{
    while (len) {
        if (p->linelen == 0)
            p->lineno++;
        const char *nl = memchr(buf, '\n', len);
        size_t n = nl ? (size_t)(nl - buf) : len;
        if (n > FEEDER__LIST_LINE_MAX - p->linelen) {
            char what[96];
            snprintf(what, sizeof(what), "line is longer than the limit of %d bytes",
                     FEEDER__LIST_LINE_MAX);
            return line_error(p, err, errlen, what);
        }
        if (memchr(buf, 0, n))
            return line_error(p, err, errlen, "line holds a NUL byte");
        memcpy(p->line + p->linelen, buf, n);
        p->linelen += n;
        buf += n + (nl ? 1 : 0);
        len -= n + (nl ? 1 : 0);
        if (nl) {
            int rc = list_line(p, err, errlen);
            p->linelen = 0;
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* The last line (without a '\n'), then the dataset, or free everything. */
static int list_finish(list_parser *p, int rc, feeder_dataset **out, char *err, size_t errlen)
{
    if (rc == 0 && p->linelen)
        rc = list_line(p, err, errlen);
    if (rc == 0 && p->l.n == 0) {
        feeder__fmt(err, errlen, "%s: no samples", p->name);
        rc = FEEDER_EDATASET;
    }
    feeder_dataset *ds = NULL;
    if (rc == 0)
        rc = feeder__dataset_alloc(FEEDER__DS_LIST, &ds);
    if (rc) {
        feeder__strlist_free(&p->l);
        return rc;
    }
    ds->num_classes = (uint64_t)p->maxlab + 1;
    return feeder__dataset_adopt(ds, &p->l, 0, out);
}

static int list_begin(list_parser *p, const char *name, const char *root, unsigned flags,
                      feeder_dataset **out, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!name || !root || !out) {
        feeder__fmt(err, errlen, "feeder__list_parse: buf, name, root and out must not be NULL");
        return FEEDER_EINVAL;
    }
    if (flags & ~FEEDER_LIST_ALLOW_ESCAPE) {
        feeder__fmt(err, errlen, "%s: unknown flags 0x%x", name, flags & ~FEEDER_LIST_ALLOW_ESCAPE);
        return FEEDER_EINVAL;
    }
    memset(p, 0, offsetof(list_parser, line));
    p->name = name;
    p->root = root;
    p->flags = flags;
    p->maxlab = -1;
    return 0;
}

int feeder__list_parse_chunked(const char *buf, size_t len, size_t chunk, const char *name,
                               const char *root, unsigned flags, feeder_dataset **out, char *err,
                               size_t errlen)
{
    if (!buf && len) {
        feeder__fmt(err, errlen, "feeder__list_parse: buf, name, root and out must not be NULL");
        return FEEDER_EINVAL;
    }
    list_parser *p = malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    int rc = list_begin(p, name, root, flags, out, err, errlen);
    if (rc == 0) {
        size_t step = chunk ? chunk : len;
        for (size_t at = 0; rc == 0 && at < len; at += step)
            rc = list_feed(p, buf + at, len - at < step ? len - at : step, err, errlen);
        rc = list_finish(p, rc, out, err, errlen);
    }
    free(p);
    return rc;
}

int feeder__list_parse(const char *buf, size_t len, const char *name, const char *root,
                       unsigned flags, feeder_dataset **out, char *err, size_t errlen)
{
    return feeder__list_parse_chunked(buf, len, 0, name, root, flags, out, err, errlen);
}

/* Open a list file and refuse it by type (fstat) before reading a byte:
 * O_NONBLOCK lets a FIFO open at once, and a device (/dev/zero) is never read. */
static int list_open(const char *path, const char **what)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        *what = feeder__file_type(st.st_mode);
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    return fd;
}

/* Read `fd` in chunks into the parser; a read error names the file. */
static int list_stream(list_parser *p, int fd, char *err, size_t errlen)
{
    enum { CHUNK = 1 << 16 };
    char *chunk = malloc(CHUNK);
    if (!chunk)
        return -ENOMEM;
    int rc = 0;
    for (;;) {
        ssize_t k = read(fd, chunk, CHUNK);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = -errno;
            feeder__fmt(err, errlen, "%s: cannot read list file: %s", p->name, strerror(errno));
            break;
        }
        if (k == 0 || (rc = list_feed(p, chunk, (size_t)k, err, errlen)) != 0)
            break;
    }
    free(chunk);
    return rc;
}

int feeder_dataset_open_list2(const char *list_path, const char *root, unsigned flags,
                              feeder_dataset **out, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!list_path || !out) {
        feeder__fmt(err, errlen, "feeder_dataset_open_list: list_path and out must not be NULL");
        return FEEDER_EINVAL;
    }
    char *dir = NULL;
    if (!root) {
        const char *slash = strrchr(list_path, '/');
        dir = slash ? strndup(list_path, slash == list_path ? 1 : (size_t)(slash - list_path))
                    : strdup(".");
        if (!dir)
            return -ENOMEM;
        root = dir;
    }
    list_parser *p = malloc(sizeof(*p));
    int rc = p ? list_begin(p, list_path, root, flags, out, err, errlen) : -ENOMEM;
    if (rc == 0) {
        const char *what = NULL;
        int fd = list_open(list_path, &what);
        if (fd < 0) {
            feeder__fmt(err, errlen, "%s: cannot read list file: %s", list_path,
                        what ? what : strerror(-fd));
            rc = list_finish(p, fd, out, err, errlen);
        } else {
            rc = list_finish(p, list_stream(p, fd, err, errlen), out, err, errlen);
            close(fd);
        }
    }
    free(p);
    free(dir);
    return rc;
}

int feeder_dataset_open_list(const char *list_path, const char *root, feeder_dataset **out,
                             char *err, size_t errlen)
{
    return feeder_dataset_open_list2(list_path, root, 0, out, err, errlen);
}
