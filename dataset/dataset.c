/*
 * Datasets: image folders (torchvision ImageFolder rules), list files and
 * user callbacks. Paths are kept whole ("root/class/file.jpg") in one arena so
 * a worker hands them to the kernel without building strings per sample.
 */
#include <ctype.h>
#include <stddef.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "io/io.h"
#include "dataset/pack.h"

/* A growable list of strings in one arena. */
typedef struct strlist {
    char *arena;
    size_t used, cap;
    uint64_t *off;
    int64_t *label;
    uint64_t n, ncap;
    feeder__skips skips; /* folder walks: files left out */
} strlist;

static int strlist_add(strlist *l, const char *a, const char *b, int64_t label)
{
    size_t la = strlen(a), lb = b ? strlen(b) : 0, need = la + (b ? 1 + lb : 0) + 1;
    if (l->used + need > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1 << 16;
        while (cap < l->used + need)
            cap *= 2;
        char *p = realloc(l->arena, cap);
        if (!p)
            return -ENOMEM;
        l->arena = p;
        l->cap = cap;
    }
    if (l->n == l->ncap) {
        uint64_t ncap = l->ncap ? l->ncap * 2 : 1024;
        uint64_t *o = realloc(l->off, ncap * sizeof(*o));
        if (!o)
            return -ENOMEM;
        l->off = o;
        int64_t *lab = realloc(l->label, ncap * sizeof(*lab));
        if (!lab)
            return -ENOMEM;
        l->label = lab;
        l->ncap = ncap;
    }
    char *dst = l->arena + l->used;
    memcpy(dst, a, la);
    if (b) {
        dst[la] = '/';
        memcpy(dst + la + 1, b, lb);
    }
    dst[need - 1] = 0;
    l->off[l->n] = l->used;
    l->label[l->n] = label;
    l->n++;
    l->used += need;
    return 0;
}

static void strlist_free(strlist *l)
{
    free(l->arena);
    free(l->off);
    free(l->label);
}

/* The names a folder dataset takes; the decoder reads the format from the
 * bytes, so this only keeps stray files (notes, caches) out. */
static int is_image_name(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".jfif", ".png", ".webp"};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof(ext) / sizeof(ext[0]); i++)
        if (strcasecmp(dot, ext[i]) == 0)
            return 1;
    return 0;
}

static void skip_note(feeder__skips *s, const char *name)
{
    const char *dot = strrchr(name, '.');
    const char *ext = dot && dot != name ? dot : "";
    s->total++;
    for (uint32_t i = 0; i < s->used; i++)
        if (strcasecmp(s->e[i].ext, ext) == 0) {
            s->e[i].n++;
            return;
        }
    if (s->used == FEEDER__SKIP_EXTS || strlen(ext) >= sizeof(s->e[0].ext)) {
        s->other++;
        return;
    }
    snprintf(s->e[s->used].ext, sizeof(s->e[0].ext), "%s", ext);
    s->e[s->used++].n = 1;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in `dir` (without . and ..). */
static int list_dir(const char *dir, char ***names, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    if (n)
        qsort(v, n, sizeof(*v), cmp_cstr);
    *names = v;
    *count = n;
    return 0;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The folders from the class folder down to the one being walked, by
 * device and inode: a sub-folder already among them is a symlink loop. */
#define WALK_DEPTH 64
typedef struct walk_chain { /* [0] the class folder, [1] the root, then the path below */
    dev_t dev[WALK_DEPTH + 1];
    ino_t ino[WALK_DEPTH + 1];
} walk_chain;

static int in_chain(const walk_chain *c, int depth, const struct stat *st)
{
    for (int d = 0; d <= depth; d++)
        if (c->dev[d] == st->st_dev && c->ino[d] == st->st_ino)
            return 1;
    return 0;
}

/* Walk `dir` in sorted order (as torchvision sorts os.walk's entries), adding
 * every image; stat() follows symlinks as os.walk(followlinks=True) does. A
 * failure names the entry it happened at in err. */
static int walk_class(const char *dir, int64_t label, strlist *out, walk_chain *chain, int depth,
                      char *err, size_t errlen)
{
    char **names;
    size_t n;
    int rc = list_dir(dir, &names, &n);
    if (rc) {
        feeder__fmt(err, errlen, "%s: cannot list folder: %s", dir, strerror(-rc));
        return rc;
    }
    char *path = NULL;
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *p = realloc(path, len);
        if (!p) {
            rc = -ENOMEM;
            break;
        }
        path = p;
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0)
            continue; /* a dangling link is not a sample */
        if (S_ISDIR(st.st_mode) && in_chain(chain, depth, &st)) {
            feeder__fmt(err, errlen, "%s: a symbolic link loop: it leads back to a folder it is in",
                        path);
            rc = -ELOOP;
        } else if (S_ISDIR(st.st_mode) && depth == WALK_DEPTH) {
            feeder__fmt(err, errlen, "%s: folders nest more than %d deep", path, WALK_DEPTH);
            rc = -ELOOP;
        } else if (S_ISDIR(st.st_mode)) {
            chain->dev[depth + 1] = st.st_dev;
            chain->ino[depth + 1] = st.st_ino;
            rc = walk_class(path, label, out, chain, depth + 1, err, errlen);
        } else if (S_ISREG(st.st_mode) && is_image_name(names[i])) {
            rc = strlist_add(out, dir, names[i], label);
        } else if (S_ISREG(st.st_mode)) {
            skip_note(&out->skips, names[i]);
        }
    }
    free(path);
    free_names(names, n);
    return rc;
}

static int dataset_alloc(int kind, feeder_dataset **out)
{
    feeder_dataset *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return -ENOMEM;
    ds->kind = kind;
    atomic_init(&ds->refs, 1);
    *out = ds;
    return 0;
}

/* The last two components of a path (its folder's name and its own), or
 * less when it has fewer. */
static const char *path_tail(const char *p)
{
    const char *end = p + strlen(p), *c = end;
    int slashes = 0;
    while (c > p && !(c[-1] == '/' && ++slashes == 2))
        c--;
    return c;
}

/* FNV-1a, 64 bits: identity, not security (a state blob is trusted). */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t names_fingerprint(const strlist *l)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, &l->n, sizeof(l->n));
    for (uint64_t i = 0; i < l->n; i++) {
        const char *t = path_tail(l->arena + l->off[i]);
        h = fnv1a(h, t, strlen(t) + 1);
        h = fnv1a(h, &l->label[i], sizeof(l->label[i]));
    }
    return h ? h : 1;
}

/* Hand the list to the dataset on success, or free both on failure. */
static int dataset_finish(feeder_dataset *ds, strlist *l, int rc, feeder_dataset **out)
{
    if (rc) {
        strlist_free(l);
        feeder_dataset_destroy(ds);
        return rc;
    }
    ds->n = l->n;
    ds->paths = l->arena;
    ds->path_off = l->off;
    ds->labels = l->label;
    ds->skips = l->skips;
    ds->fingerprint = names_fingerprint(l);
    *out = ds;
    return 0;
}

int feeder_dataset_open_folder(const char *root, feeder_dataset **out, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!root || !out) {
        feeder__fmt(err, errlen, "feeder_dataset_open_folder: root and out must not be NULL");
        return FEEDER_EINVAL;
    }
    char **names;
    size_t n;
    int rc = list_dir(root, &names, &n);
    if (rc) {
        feeder__fmt(err, errlen, "%s: cannot list folder: %s", root, strerror(-rc));
        return rc;
    }
    feeder_dataset *ds;
    if ((rc = dataset_alloc(FEEDER__DS_FOLDER, &ds))) {
        free_names(names, n);
        return rc;
    }
    struct stat root_st;
    if (stat(root, &root_st) != 0)
        memset(&root_st, 0, sizeof(root_st));
    ds->classes = calloc(n ? n : 1, sizeof(char *));
    strlist l = {0};
    size_t rootlen = strlen(root);
    /* "root/" + class; a root given with a trailing slash is not doubled. */
    char *cdir = malloc(rootlen + 4096 + 2);
    if (!ds->classes || !cdir)
        rc = -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        snprintf(cdir, rootlen + 4096 + 2, "%.*s/%s",
                 (int)(rootlen > 1 && root[rootlen - 1] == '/' ? rootlen - 1 : rootlen), root,
                 names[i]);
        struct stat st;
        if (stat(cdir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue; /* files beside the class folders are not classes */
        ds->classes[ds->num_classes] = names[i];
        names[i] = NULL;
        walk_chain chain;
        chain.dev[0] = st.st_dev;
        chain.ino[0] = st.st_ino;
        chain.dev[1] = root_st.st_dev; /* a link back to the root loops too */
        chain.ino[1] = root_st.st_ino;
        rc = walk_class(cdir, (int64_t)ds->num_classes, &l, &chain, 1, err, errlen);
        ds->num_classes++;
        if (rc && err && errlen && !err[0])
            feeder__fmt(err, errlen, "%s: %s", cdir, strerror(-rc));
    }
    free(cdir);
    free_names(names, n);
    if (rc == 0 && ds->num_classes == 0) {
        feeder__fmt(err, errlen, "%s: no class folders (expected one sub-folder per class)",
                    root);
        rc = FEEDER_EDATASET;
    } else if (rc == 0 && l.n == 0) {
        feeder__fmt(err, errlen, "%s: no .jpg, .jpeg, .jfif, .png or .webp files in its %llu class "
                    "folders (%llu other files)", root, (unsigned long long)ds->num_classes,
                    (unsigned long long)l.skips.total);
        rc = FEEDER_EDATASET;
    }
    return dataset_finish(ds, &l, rc, out);
}

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
    strlist l;
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
    return s[0] == '/' ? strlist_add(&p->l, s, NULL, label)
                       : strlist_add(&p->l, p->root, s, label);
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
        rc = dataset_alloc(FEEDER__DS_LIST, &ds);
    if (rc) {
        strlist_free(&p->l);
        return rc;
    }
    ds->num_classes = (uint64_t)p->maxlab + 1;
    return dataset_finish(ds, &p->l, 0, out);
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

int feeder_dataset_create(const feeder_dataset_callbacks *cb, void *user, feeder_dataset **out)
{
    if (!cb || !cb->len || !cb->get || !out)
        return FEEDER_EINVAL;
    feeder_dataset *ds;
    int rc = dataset_alloc(FEEDER__DS_USER, &ds);
    if (rc)
        return rc;
    ds->cb = *cb;
    ds->user = user;
    ds->n = cb->len(user);
    *out = ds;
    return 0;
}

/* The schema and its names in one allocation, so the copy is one free. */
static feeder_field *copy_fields(const feeder_field *fields, uint32_t n)
{
    size_t names = 0;
    for (uint32_t k = 0; k < n; k++)
        names += strlen(fields[k].name) + 1;
    feeder_field *f = malloc(n * sizeof(*f) + names);
    if (!f)
        return NULL;
    char *at = (char *)(f + n);
    for (uint32_t k = 0; k < n; k++) {
        size_t len = strlen(fields[k].name) + 1;
        f[k] = fields[k];
        f[k].name = memcpy(at, fields[k].name, len);
        at += len;
    }
    return f;
}

int feeder__dataset_create_fields(const feeder_fields_callbacks *cb, const feeder_field *fields,
                                  uint32_t nfields, void *user, feeder_dataset **out)
{
    feeder_dataset *ds;
    int rc = dataset_alloc(FEEDER__DS_USER, &ds);
    if (rc)
        return rc;
    if (!(ds->fields = copy_fields(fields, nfields))) {
        free(ds);
        return -ENOMEM;
    }
    ds->nfields = nfields;
    ds->fcb = *cb;
    ds->user = user;
    ds->n = cb->len(user);
    *out = ds;
    return 0;
}

void feeder__dataset_hold(feeder_dataset *ds) { atomic_fetch_add(&ds->refs, 1); }

void feeder_dataset_destroy(feeder_dataset *ds)
{
    if (ds)
        feeder__dataset_drop(ds);
}

void feeder__dataset_drop(feeder_dataset *ds)
{
    if (atomic_fetch_sub(&ds->refs, 1) != 1)
        return;
    if (ds->kind == FEEDER__DS_USER && ds->cb.destroy)
        ds->cb.destroy(ds->user);
    if (ds->nfields && ds->fcb.destroy)
        ds->fcb.destroy(ds->user);
    free(ds->fields);
    for (uint64_t i = 0; ds->classes && i < ds->num_classes; i++)
        free(ds->classes[i]);
    free(ds->classes);
    free(ds->paths);
    free(ds->path_off);
    free(ds->labels);
    feeder__pack_free(ds->pack);
    free(ds);
}

uint64_t feeder_dataset_size(const feeder_dataset *ds) { return ds ? ds->n : 0; }

const char *feeder_dataset_path(const feeder_dataset *ds, uint64_t index)
{
    if (!ds || !ds->paths || index >= ds->n)
        return NULL;
    return ds->paths + ds->path_off[index];
}

int64_t feeder_dataset_label(const feeder_dataset *ds, uint64_t index)
{
    if (!ds || !ds->labels || index >= ds->n)
        return -1;
    return ds->labels[index];
}

uint64_t feeder_dataset_num_classes(const feeder_dataset *ds) { return ds ? ds->num_classes : 0; }

const char *feeder_dataset_class_name(const feeder_dataset *ds, uint64_t label)
{
    if (!ds || !ds->classes || label >= ds->num_classes)
        return NULL;
    return ds->classes[label];
}

/* Largest count first, then by name, so the summary reads the same on every
 * run whatever order readdir gave. */
static int skip_cmp(const void *a, const void *b)
{
    const feeder__skip_ext *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->ext, y->ext);
}

int feeder_dataset_skipped(const feeder_dataset *ds, uint64_t *count, char *summary,
                           size_t len)
{
    if (!ds)
        return FEEDER_EINVAL;
    feeder__skips s = ds->skips;
    if (count)
        *count = s.total;
    if (!summary || !len)
        return 0;
    qsort(s.e, s.used, sizeof(s.e[0]), skip_cmp);
    size_t at = 0;
    int n = snprintf(summary, len, "%llu file%s left out", (unsigned long long)s.total,
                     s.total == 1 ? "" : "s");
    for (uint32_t i = 0; i <= s.used && n >= 0 && (at += (size_t)n) < len; i++) {
        if (i < s.used)
            n = snprintf(summary + at, len - at, "%s%llu %s", i ? ", " : ": ",
                         (unsigned long long)s.e[i].n,
                         s.e[i].ext[0] ? s.e[i].ext : "(no extension)");
        else if (s.other)
            n = snprintf(summary + at, len - at, "%s%llu other", i ? ", " : ": ",
                         (unsigned long long)s.other);
        else
            break;
    }
    return 0;
}
