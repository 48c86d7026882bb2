/*
 * feeder-pack --mode fields: a fields dataset over tar shards, a folder or a
 * list file, and the --verify read-back (pack_fields.h has the rules).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/brace.h"
#include "dataset/tar.h"
#include "pack_fields.h"

#define ULL(x) ((unsigned long long)(x))
/* Longest member extension a field takes. */
#define EXT_MAX 64
/* Longest integer text member (.cls): blanks and 19 digits with a sign. */
#define INT_TEXT_MAX 32

typedef struct field {
    char name[FEEDER_FIELD_NAME_MAX + 1];
    char ext[EXT_MAX + 1];
    int elem;      /* FEEDER_ELEM_U8 (bytes) or FEEDER_ELEM_I64 (integer text) */
    int batching;  /* u8: FEEDER_FIELD_RAGGED or PADDED */
    uint64_t max;  /* u8: the largest member, or --max-bytes */
} field;

typedef struct shard {
    char *path;
    feeder__tar_index ix; /* every member (feeder__tar_members) */
} shard;

struct fpk_fields {
    fpk_fields_opts o;
    field f[FEEDER_FIELDS_MAX];
    uint32_t nf;
    uint64_t n;               /* samples */
    /* Tar shards: */
    char **names;
    size_t nshards;
    shard *sh;
    uint32_t *shard_of;       /* each sample's shard */
    uint64_t *mem;            /* n x nf: the member entry of each sample's field */
    /* A folder or list file: */
    feeder_dataset *files;
    uint64_t *file_size;
    /* Reading (one thread: the pack, then --verify): */
    int fd;
    const char *fd_path;
    uint64_t done, bytes;
    feeder_dataset *ds;
    char last_err[1024];      /* the get callback's last failure, or "" */
};

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Fields: the default rules and SPEC                                        */
/* ------------------------------------------------------------------------ */

static int is_int_ext(const char *ext)
{
    return !strcmp(ext, "cls") || !strcmp(ext, "label") || !strcmp(ext, "idx");
}

static int has_name(const fpk_fields *f, const char *name)
{
    for (uint32_t k = 0; k < f->nf; k++)
        if (!strcmp(f->f[k].name, name))
            return 1;
    return 0;
}

/* d's type and batching: SPEC's words, or NULL for the defaults. */
static int field_type(field *d, const char *type, const char *batching, char *err, size_t errlen)
{
    if (!type)
        d->elem = is_int_ext(d->ext) ? FEEDER_ELEM_I64 : FEEDER_ELEM_U8;
    else if (!strcmp(type, "u8") || !strcmp(type, "i64"))
        d->elem = type[0] == 'u' ? FEEDER_ELEM_U8 : FEEDER_ELEM_I64;
    else
        return fail(err, errlen, 2, "extension '%s': type '%s': expected u8 or i64", d->ext,
                    type);
    d->batching = FEEDER_FIELD_RAGGED;
    if (batching && d->elem == FEEDER_ELEM_I64)
        return fail(err, errlen, 2, "extension '%s': i64 is one integer per key: no batching "
                    "('%s') after it", d->ext, batching);
    if (batching && strcmp(batching, "ragged") && strcmp(batching, "padded"))
        return fail(err, errlen, 2, "extension '%s': batching '%s': expected ragged or padded",
                    d->ext, batching);
    if (batching && !strcmp(batching, "padded"))
        d->batching = FEEDER_FIELD_PADDED;
    return 0;
}

/* d's name: `name` (namelen bytes), or NULL for the default. */
static int field_name(const fpk_fields *f, field *d, const char *name, size_t namelen, char *err,
                      size_t errlen)
{
    if (!name && d->elem == FEEDER_ELEM_I64 && is_int_ext(d->ext) && !has_name(f, "label")) {
        name = "label";
        namelen = 5;
    } else if (!name) {
        name = d->ext;
        namelen = strlen(d->ext);
    }
    if (namelen == 0 || namelen > FEEDER_FIELD_NAME_MAX)
        return fail(err, errlen, 2, "extension '%s': the field name '%.*s' is not 1 to %d "
                    "characters (give one: NAME=%s)", d->ext, (int)namelen, name,
                    FEEDER_FIELD_NAME_MAX, d->ext);
    memcpy(d->name, name, namelen);
    if (has_name(f, d->name))
        return fail(err, errlen, 2, "extension '%s': field name '%s' taken by another field",
                    d->ext, d->name);
    return 0;
}

/* A field for extension `ext` of `extlen` bytes; name, type and batching
 * NULL for the defaults. 0, or 2 with the reason. */
static int add_field(fpk_fields *f, const char *ext, size_t extlen, const char *name,
                     size_t namelen, const char *type, const char *batching, char *err,
                     size_t errlen)
{
    if (f->nf == FEEDER_FIELDS_MAX)
        return fail(err, errlen, 2, "more than %d fields (name fewer with --fields)",
                    FEEDER_FIELDS_MAX);
    field *d = &f->f[f->nf];
    memset(d, 0, sizeof(*d));
    if (extlen == 0 || extlen > EXT_MAX)
        return fail(err, errlen, 2, "extension '%.*s': 1 to %d characters expected",
                    (int)(extlen > 200 ? 200 : extlen), ext, EXT_MAX);
    memcpy(d->ext, ext, extlen);
    for (uint32_t k = 0; k < f->nf; k++)
        if (!strcmp(f->f[k].ext, d->ext))
            return fail(err, errlen, 2, "extension '%s' named twice", d->ext);
    int rc = field_type(d, type, batching, err, errlen);
    if (!rc)
        rc = field_name(f, d, name, namelen, err, errlen);
    if (!rc)
        f->nf++;
    return rc;
}

/* One SPEC entry, [NAME=]EXT[:TYPE[:BATCHING]], in a writable copy. */
static int spec_entry(fpk_fields *f, char *e, char *err, size_t errlen)
{
    char *name = NULL, *eq = strchr(e, '=');
    if (eq) {
        *eq = 0;
        name = e;
        e = eq + 1;
    }
    char *type = strchr(e, ':'), *batching = NULL;
    if (type) {
        *type++ = 0;
        if ((batching = strchr(type, ':')))
            *batching++ = 0;
        if (batching && strchr(batching, ':'))
            return fail(err, errlen, 2, "extension '%s': more than EXT:TYPE:BATCHING", e);
    }
    return add_field(f, e, strlen(e), name, name ? strlen(name) : 0, type, batching, err,
                     errlen);
}

static int parse_spec(fpk_fields *f, const char *spec, char *err, size_t errlen)
{
    char *copy = strdup(spec), *save = NULL;
    if (!copy)
        return fail(err, errlen, 1, "out of memory");
    int rc = 0;
    char why[512];
    if (!spec[0] || spec[0] == ',' || spec[strlen(spec) - 1] == ',' || strstr(spec, ",,"))
        rc = fail(why, sizeof(why), 2, "an empty entry");
    for (char *e = strtok_r(copy, ",", &save); !rc && e; e = strtok_r(NULL, ",", &save))
        rc = spec_entry(f, e, why, sizeof(why));
    free(copy);
    if (rc)
        fail(err, errlen, rc, "--fields '%s': %s (expected [NAME=]EXT[:u8|i64[:ragged|padded]],"
             " comma-separated)", spec, why);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Tar shards                                                                */
/* ------------------------------------------------------------------------ */

static long pread_fd(void *ctx, uint64_t off, uint8_t *dst, size_t len)
{
    return feeder__pread_full(*(int *)ctx, off, dst, len);
}

/* Every member of shard `sh`. */
static int list_shard(shard *sh, char *err, size_t errlen)
{
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, errno == ENOENT ? 2 : 1, "--data: %s: %s", sh->path,
                    strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = fail(err, errlen, 1, "%s: not a regular file", sh->path);
    } else {
        feeder__tar_src src = {pread_fd, &fd, (uint64_t)st.st_size};
        rc = feeder__tar_members(&src, sh->path, &sh->ix, err, errlen) ? 1 : 0;
    }
    close(fd);
    return rc;
}

/* The member of key `key` (entries [a, b) of `ix`) with extension `ext`: its
 * entry, or UINT64_MAX when none; 1 with a message when there are two. */
static int find_member(const shard *sh, uint64_t a, uint64_t b, const char *ext, uint64_t *at,
                       char *err, size_t errlen)
{
    *at = UINT64_MAX;
    for (uint64_t j = a; j < b; j++) {
        if (strcmp(feeder__tar_detail(&sh->ix, j), ext))
            continue;
        if (*at != UINT64_MAX)
            return fail(err, errlen, 1, "%s: key %s: two .%s members", sh->path,
                        feeder__tar_key(&sh->ix, j), ext);
        *at = j;
    }
    return 0;
}

/* The default fields: the extensions of the first key (of the first shard
 * that has one). */
static int default_fields(fpk_fields *f, char *err, size_t errlen)
{
    size_t s = 0;
    while (s + 1 < f->nshards && !f->sh[s].ix.n)
        s++;
    const feeder__tar_index *ix = &f->sh[s].ix;
    if (!ix->n)
        return fail(err, errlen, 1, "%s: no member with a key (name.ext) in any shard",
                    f->o.data);
    char why[512];
    for (uint64_t j = 0; j < ix->n && !strcmp(feeder__tar_key(ix, j), feeder__tar_key(ix, 0));
         j++) {
        const char *ext = feeder__tar_detail(ix, j);
        int rc = add_field(f, ext, strlen(ext), NULL, 0, NULL, NULL, why, sizeof(why));
        if (rc)
            return fail(err, errlen, 1, "%s: key %s: %s", f->sh[s].path,
                        feeder__tar_key(ix, 0), why);
    }
    return 0;
}

/* Key [a, b) of shard s as sample f->n: each field's member, checked. */
static int add_key(fpk_fields *f, uint32_t s, uint64_t a, uint64_t b, char *err, size_t errlen)
{
    const shard *sh = &f->sh[s];
    uint64_t i = f->n;
    for (uint32_t k = 0; k < f->nf; k++) {
        field *d = &f->f[k];
        uint64_t at;
        if (find_member(sh, a, b, d->ext, &at, err, errlen))
            return 1;
        if (at == UINT64_MAX)
            return fail(err, errlen, 1, "%s: key %s: no .%s member (field '%s'%s)", sh->path,
                        feeder__tar_key(&sh->ix, a), d->ext, d->name,
                        f->o.spec ? ", named by --fields" : "; the first key has one");
        uint64_t len = sh->ix.e[at].len;
        if (d->elem == FEEDER_ELEM_U8 && f->o.max_bytes && len > f->o.max_bytes)
            return fail(err, errlen, 1, "%s: key %s: member .%s is %llu bytes, over --max-bytes "
                        "%llu", sh->path, feeder__tar_key(&sh->ix, a), d->ext, ULL(len),
                        ULL(f->o.max_bytes));
        if (d->elem == FEEDER_ELEM_U8 && len > UINT32_MAX)
            return fail(err, errlen, 1, "%s: key %s: member .%s is %llu bytes, over a field's "
                        "4 GiB limit", sh->path, feeder__tar_key(&sh->ix, a), d->ext, ULL(len));
        if (d->elem == FEEDER_ELEM_U8 && !f->o.max_bytes && len > d->max)
            d->max = len;
        f->mem[i * f->nf + k] = at;
    }
    f->shard_of[i] = s;
    f->n++;
    return 0;
}

static int grow(fpk_fields *f, uint64_t need, uint64_t *cap)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap * 2 : 1024;
    while (c < need)
        c *= 2;
    uint32_t *so = realloc(f->shard_of, c * sizeof(*so));
    if (so)
        f->shard_of = so;
    uint64_t *m = so ? realloc(f->mem, c * f->nf * sizeof(*m)) : NULL;
    if (m)
        f->mem = m;
    *cap = c;
    return so && m ? 0 : -ENOMEM;
}

/* Every key of every shard, in order, as a sample. */
static int plan_keys(fpk_fields *f, char *err, size_t errlen)
{
    uint64_t cap = 0;
    for (uint32_t s = 0; s < f->nshards; s++) {
        const feeder__tar_index *ix = &f->sh[s].ix;
        for (uint64_t a = 0, b; a < ix->n; a = b) {
            for (b = a + 1; b < ix->n && !strcmp(feeder__tar_key(ix, b), feeder__tar_key(ix, a));)
                b++;
            if (grow(f, f->n + 1, &cap))
                return fail(err, errlen, 1, "out of memory for %llu samples", ULL(f->n + 1));
            if (add_key(f, s, a, b, err, errlen))
                return 1;
        }
    }
    if (!f->n)
        return fail(err, errlen, 1, "%s: no keys in the shards", f->o.data);
    for (uint32_t k = 0; k < f->nf; k++)
        if (f->f[k].elem == FEEDER_ELEM_U8)
            f->f[k].max = f->o.max_bytes ? f->o.max_bytes : f->f[k].max ? f->f[k].max : 1;
    return 0;
}

static int open_tar(fpk_fields *f, char *err, size_t errlen)
{
    char why[1024];
    if (feeder__brace_expand(f->o.data, &f->names, &f->nshards, why, sizeof(why)))
        return fail(err, errlen, 2, "--data: %s", why);
    if (!(f->sh = calloc(f->nshards, sizeof(*f->sh))))
        return fail(err, errlen, 1, "out of memory");
    for (size_t s = 0; s < f->nshards; s++) {
        f->sh[s].path = f->names[s];
        int rc = list_shard(&f->sh[s], err, errlen);
        if (rc)
            return rc;
    }
    int rc = f->o.spec ? parse_spec(f, f->o.spec, err, errlen) : default_fields(f, err, errlen);
    return rc ? rc : plan_keys(f, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* A folder or list file                                                     */
/* ------------------------------------------------------------------------ */

/* Each file's size, checked against --max-bytes; the largest in *max. */
static int size_files(fpk_fields *f, uint64_t *max, char *err, size_t errlen)
{
    if (!(f->file_size = malloc((f->n ? f->n : 1) * sizeof(*f->file_size))))
        return fail(err, errlen, 1, "out of memory");
    *max = 1;
    for (uint64_t i = 0; i < f->n; i++) {
        const char *p = feeder_dataset_path(f->files, i);
        struct stat st;
        if (stat(p, &st) != 0)
            return fail(err, errlen, 1, "%s: %s", p, strerror(errno));
        if (!S_ISREG(st.st_mode))
            return fail(err, errlen, 1, "%s: not a regular file", p);
        f->file_size[i] = (uint64_t)st.st_size;
        if (f->o.max_bytes && f->file_size[i] > f->o.max_bytes)
            return fail(err, errlen, 1, "%s: %llu bytes, over --max-bytes %llu", p,
                        ULL(f->file_size[i]), ULL(f->o.max_bytes));
        if (f->file_size[i] > UINT32_MAX)
            return fail(err, errlen, 1, "%s: %llu bytes, over a field's 4 GiB limit", p,
                        ULL(f->file_size[i]));
        *max = f->file_size[i] > *max ? f->file_size[i] : *max;
    }
    return 0;
}

static int open_files(fpk_fields *f, int is_dir, char *err, size_t errlen)
{
    char why[1024] = "";
    int rc = is_dir ? feeder_dataset_open_folder(f->o.data, &f->files, why, sizeof(why))
                    : feeder_dataset_open_list2(f->o.data, NULL,
                                                f->o.allow_escape ? FEEDER_LIST_ALLOW_ESCAPE : 0,
                                                &f->files, why, sizeof(why));
    /* The library's message names its flag; this tool's user has an option. */
    const char *flag = "FEEDER_LIST_ALLOW_ESCAPE allows it";
    char *at = rc == FEEDER_EPATH ? strstr(why, flag) : NULL;
    if (at)
        return fail(err, errlen, 1, "%.*s--allow-escape allows it%s", (int)(at - why), why,
                    at + strlen(flag));
    if (rc)
        return fail(err, errlen, 1, "%s", why[0] ? why : feeder_strerror(rc));
    f->n = feeder_dataset_size(f->files);
    uint64_t max = 1;
    if (size_files(f, &max, err, errlen))
        return 1;
    f->nf = 2;
    f->f[0] = (field){.name = "jpg", .ext = "jpg", .elem = FEEDER_ELEM_U8,
                      .batching = FEEDER_FIELD_RAGGED, .max = f->o.max_bytes ? f->o.max_bytes
                                                                             : max};
    f->f[1] = (field){.name = "label", .ext = "label", .elem = FEEDER_ELEM_I64};
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Reading one field of one sample                                           */
/* ------------------------------------------------------------------------ */

/* `len` bytes at `off` of `path`, through the one descriptor kept open. */
static int read_at(fpk_fields *f, const char *path, uint64_t off, void *buf, size_t len,
                   char *err, size_t errlen)
{
    if (f->fd_path != path) {
        if (f->fd >= 0)
            close(f->fd);
        f->fd_path = NULL;
        if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
        f->fd_path = path;
    }
    long got = pread_fd(&f->fd, off, buf, len);
    if (got < 0)
        return fail(err, errlen, (int)got, "%s: %s", path, strerror((int)-got));
    if ((size_t)got != len)
        return fail(err, errlen, -EIO, "%s: %zu bytes at offset %llu: the file ends before "
                    "(changed while being packed?)", path, len, ULL(off));
    return 0;
}

/* An integer text member (.cls): optional blanks, an optional '-', digits. */
static int parse_int(const char *s, int64_t *v)
{
    char *end;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (!((*s >= '0' && *s <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9')))
        return -1;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
        end++;
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

/* Tar sample i's field k into buf (cap bytes): *rows rows. */
static int read_tar(fpk_fields *f, uint64_t i, uint32_t k, uint8_t *buf, size_t cap,
                    uint64_t *rows, char *err, size_t errlen)
{
    const shard *sh = &f->sh[f->shard_of[i]];
    const feeder__tar_entry *e = &sh->ix.e[f->mem[i * f->nf + k]];
    const char *key = sh->ix.names + e->name;
    if (f->f[k].elem == FEEDER_ELEM_U8) {
        if (e->len > cap)
            return fail(err, errlen, FEEDER_ERANGE, "%s: key %s: member .%s is %llu bytes, "
                        "over the field's %zu", sh->path, key, f->f[k].ext, ULL(e->len), cap);
        *rows = e->len;
        return read_at(f, sh->path, e->off, buf, (size_t)e->len, err, errlen);
    }
    char text[INT_TEXT_MAX + 1];
    int64_t v;
    if (e->len > INT_TEXT_MAX)
        return fail(err, errlen, FEEDER_EINVAL, "%s: key %s: member .%s is %llu bytes, not one "
                    "integer (field '%s' is i64)", sh->path, key, f->f[k].ext, ULL(e->len),
                    f->f[k].name);
    int rc = read_at(f, sh->path, e->off, text, (size_t)e->len, err, errlen);
    if (rc)
        return rc;
    text[e->len] = 0;
    if (memchr(text, 0, (size_t)e->len) || parse_int(text, &v)) {
        for (uint64_t c = 0; c < e->len; c++)
            text[c] = text[c] < ' ' || text[c] > '~' ? '?' : text[c];
        return fail(err, errlen, FEEDER_EINVAL, "%s: key %s: member .%s holds '%s', not an "
                    "integer (field '%s' is i64)", sh->path, key, f->f[k].ext, text,
                    f->f[k].name);
    }
    memcpy(buf, &v, sizeof(v));
    *rows = 1;
    return 0;
}

/* Folder or list sample i's field k: the file's bytes, or its label. */
static int read_file(fpk_fields *f, uint64_t i, uint32_t k, uint8_t *buf, size_t cap,
                     uint64_t *rows, char *err, size_t errlen)
{
    if (k == 1) {
        int64_t v = feeder_dataset_label(f->files, i);
        memcpy(buf, &v, sizeof(v));
        *rows = 1;
        return 0;
    }
    const char *p = feeder_dataset_path(f->files, i);
    if (f->file_size[i] > cap)
        return fail(err, errlen, FEEDER_ERANGE, "%s: %llu bytes, over the field's %zu", p,
                    ULL(f->file_size[i]), cap);
    *rows = f->file_size[i];
    int rc = read_at(f, p, 0, buf, (size_t)f->file_size[i], err, errlen);
    uint8_t extra;
    if (!rc && pread_fd(&f->fd, f->file_size[i], &extra, 1) != 0)
        rc = fail(err, errlen, -EIO, "%s: grew while being packed", p);
    return rc;
}

static int read_field(fpk_fields *f, uint64_t i, uint32_t k, uint8_t *buf, size_t cap,
                      uint64_t *rows, char *err, size_t errlen)
{
    return f->files ? read_file(f, i, k, buf, cap, rows, err, errlen)
                    : read_tar(f, i, k, buf, cap, rows, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* The dataset                                                               */
/* ------------------------------------------------------------------------ */

static uint64_t src_len(void *user) { return ((const fpk_fields *)user)->n; }

static int src_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out, char *err,
                   size_t errlen)
{
    fpk_fields *f = user;
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < f->nf; k++) {
        int rc = read_field(f, ctx->index, k, out->data[k], out->capacity[k], &out->rows[k],
                            f->last_err, sizeof(f->last_err));
        if (rc) {
            snprintf(err, errlen, "%s", f->last_err);
            return rc;
        }
        bytes += out->rows[k] * feeder_elem_size(f->f[k].elem);
    }
    f->done++;
    f->bytes += bytes;
    if (f->o.tick)
        f->o.tick(f->o.tick_user, f->done, f->bytes);
    return 0;
}

static int make_dataset(fpk_fields *f, char *err, size_t errlen)
{
    feeder_field sch[FEEDER_FIELDS_MAX];
    memset(sch, 0, sizeof(sch));
    for (uint32_t k = 0; k < f->nf; k++) {
        sch[k].name = f->f[k].name;
        sch[k].elem = f->f[k].elem;
        if (f->f[k].elem == FEEDER_ELEM_U8) {
            sch[k].batching = f->f[k].batching;
            sch[k].ndim = 1;
            sch[k].shape[0] = (uint32_t)f->f[k].max;
        }
    }
    feeder_fields_callbacks cb = {src_len, src_get, NULL};
    char why[512];
    if (feeder_dataset_create_fields(&cb, sch, f->nf, f, &f->ds, why, sizeof(why)))
        return fail(err, errlen, 2, "the fields: %s", why);
    return 0;
}

int fpk_ustar_magic(const char *path)
{
    uint8_t h[512];
    FILE *f = fopen(path, "rb");
    int yes = f && fread(h, 1, sizeof(h), f) == sizeof(h) && memcmp(h + 257, "ustar", 5) == 0;
    if (f)
        fclose(f);
    return yes;
}

/* A tar shard: named .tar (an empty one is all zeros), or the ustar magic
 * of its first header. */
static int is_tar(const char *path)
{
    size_t len = strlen(path);
    if (len > 4 && !strcmp(path + len - 4, ".tar"))
        return 1;
    return fpk_ustar_magic(path);
}

int fpk_fields_open(const fpk_fields_opts *o, fpk_fields **out, char *err, size_t errlen)
{
    fpk_fields *f = calloc(1, sizeof(*f));
    if (!f)
        return fail(err, errlen, 1, "out of memory");
    f->o = *o;
    f->fd = -1;
    struct stat st;
    int tar = strchr(o->data, '{') || (stat(o->data, &st) == 0 && S_ISREG(st.st_mode) &&
                                       is_tar(o->data));
    int rc;
    if (tar)
        rc = open_tar(f, err, errlen);
    else if (stat(o->data, &st) != 0)
        rc = fail(err, errlen, 2, "--data '%s': %s", o->data, strerror(errno));
    else if (o->spec)
        rc = fail(err, errlen, 2, "--fields applies to tar shards only (a folder or list file "
                  "gives the fields jpg and label)");
    else
        rc = open_files(f, S_ISDIR(st.st_mode), err, errlen);
    if (!rc)
        rc = make_dataset(f, err, errlen);
    if (rc) {
        fpk_fields_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

const feeder_dataset *fpk_fields_dataset(const fpk_fields *f) { return f->ds; }

uint64_t fpk_fields_count(const fpk_fields *f) { return f->n; }

const char *fpk_fields_last_error(const fpk_fields *f)
{
    return f->last_err[0] ? f->last_err : NULL;
}

void fpk_fields_describe(const fpk_fields *f, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t k = 0; k < f->nf && at < len; k++) {
        const field *d = &f->f[k];
        int w = d->elem == FEEDER_ELEM_I64
                    ? snprintf(buf + at, len - at, "%s%s i64", k ? ", " : "", d->name)
                    : snprintf(buf + at, len - at, "%s%s u8 %s <= %llu", k ? ", " : "", d->name,
                               d->batching == FEEDER_FIELD_PADDED ? "padded" : "ragged",
                               ULL(d->max));
        at += w > 0 ? (size_t)w : 0;
    }
}

void fpk_fields_close(fpk_fields *f)
{
    if (!f)
        return;
    feeder_dataset_destroy(f->ds);
    feeder_dataset_destroy(f->files);
    for (size_t s = 0; f->sh && s < f->nshards; s++)
        feeder__tar_index_free(&f->sh[s].ix);
    feeder__brace_free(f->names, f->nshards);
    free(f->sh);
    free(f->shard_of);
    free(f->mem);
    free(f->file_size);
    if (f->fd >= 0)
        close(f->fd);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* --verify                                                                  */
/* ------------------------------------------------------------------------ */

/* Sample j of batch tensor t: its bytes and their count. */
static const uint8_t *tensor_sample(const feeder_tensor *t, uint32_t j, size_t *len)
{
    size_t row = feeder_elem_size(t->elem);
    for (uint32_t d = 2; d < t->ndim; d++)
        row *= t->shape[d];
    if (t->batching == FEEDER_FIELD_RAGGED) {
        *len = (size_t)(t->offsets[j + 1] - t->offsets[j]) * row;
        return (const uint8_t *)t->data + (size_t)t->offsets[j] * row;
    }
    if (t->batching == FEEDER_FIELD_PADDED) {
        *len = (size_t)t->lengths[j] * row;
        return (const uint8_t *)t->data + (size_t)j * t->shape[1] * row;
    }
    *len = t->bytes / t->shape[0];
    return (const uint8_t *)t->data + (size_t)j * *len;
}

/* Every field of batch b against the source, read into buf (cap bytes). */
static int verify_batch(fpk_fields *f, const feeder_batch *b, const char *shown, uint8_t *buf,
                        size_t cap, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < f->nf; k++) {
        feeder_tensor t;
        if (feeder_batch_field_at(b, k, &t))
            return fail(err, errlen, 1, "%s: no field %u in a batch", shown, k);
        if (strcmp(t.name, f->f[k].name) || t.elem != f->f[k].elem)
            return fail(err, errlen, 1, "%s: field %u is '%s' (%s), '%s' (%s) was written",
                        shown, k, t.name, feeder_elem_name(t.elem), f->f[k].name,
                        feeder_elem_name(f->f[k].elem));
        for (uint32_t j = 0; j < b->count; j++) {
            uint64_t i = b->indices[j], rows;
            size_t len;
            const uint8_t *got = tensor_sample(&t, j, &len);
            int rc = read_field(f, i, k, buf, cap, &rows, err, errlen);
            if (rc)
                return 1;
            size_t want = (size_t)rows * feeder_elem_size(f->f[k].elem);
            if (len != want || memcmp(got, buf, len))
                return fail(err, errlen, 1, "%s: sample %llu, field '%s': %zu bytes, %s the "
                            "source's %zu", shown, ULL(i), f->f[k].name, len,
                            len == want ? "unlike" : "not", want);
        }
    }
    return 0;
}

static int set(feeder_loader *ld, feeder_option opt, int64_t v, char *err, size_t errlen)
{
    if (feeder_loader_set(ld, opt, v))
        return fail(err, errlen, 1, "setting %s to %lld: %s", feeder_option_name(opt),
                    (long long)v, feeder_loader_errmsg(ld));
    return 0;
}

/* Batches of at most `batch` samples and about 256 MiB of slot. */
static uint32_t verify_batch_size(const fpk_fields *f, uint32_t batch, size_t *cap)
{
    uint64_t per = 0;
    *cap = 8;
    for (uint32_t k = 0; k < f->nf; k++) {
        uint64_t b = f->f[k].elem == FEEDER_ELEM_U8 ? f->f[k].max : 8;
        per += b;
        *cap = b > *cap ? (size_t)b : *cap;
    }
    uint64_t fit = (256ull << 20) / (per ? per : 1);
    return fit < 1 ? 1 : fit < batch ? (uint32_t)fit : batch;
}

static int verify_loader(fpk_fields *f, feeder_loader *ld, const char *shown, int workers,
                         uint32_t batch, char *err, size_t errlen)
{
    size_t cap;
    batch = verify_batch_size(f, batch ? batch : 64, &cap);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return fail(err, errlen, 1, "out of memory");
    int bad = set(ld, FEEDER_OPT_VERIFY_CRC, 1, err, errlen) ||
              set(ld, FEEDER_OPT_NUM_WORKERS, workers, err, errlen) ||
              set(ld, FEEDER_OPT_BATCH_SIZE, batch, err, errlen) ||
              set(ld, FEEDER_OPT_SHUFFLE, 0, err, errlen);
    uint64_t seen = 0;
    feeder_batch *b;
    int rc = 0;
    while (!bad && (rc = feeder_next(ld, &b)) == 0) {
        bad = verify_batch(f, b, shown, buf, cap, err, errlen);
        seen += b->count;
        feeder_batch_release(b, NULL);
    }
    if (bad) /* a failed option or a difference, in err */
        rc = 1;
    else if (rc == FEEDER_DONE)
        rc = seen == f->n ? 0 : fail(err, errlen, 1, "%s: read %llu samples, %llu were written",
                                     shown, ULL(seen), ULL(f->n));
    else
        rc = fail(err, errlen, 1, "%s", feeder_loader_errmsg(ld));
    free(buf);
    return rc;
}

int fpk_fields_verify(fpk_fields *f, const char *path, const char *shown, int workers,
                      uint32_t batch, char *err, size_t errlen)
{
    feeder_dataset *pk;
    feeder_loader *ld;
    char why[1024];
    if (feeder_dataset_open_packed(path, &pk, why, sizeof(why)))
        return fail(err, errlen, 1, "%s", why);
    int rc = feeder_loader_create(pk, NULL, &ld);
    if (rc) {
        feeder_dataset_destroy(pk);
        return fail(err, errlen, 1, "feeder_loader_create: %s", feeder_strerror(rc));
    }
    rc = verify_loader(f, ld, shown, workers, batch, err, errlen);
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(pk);
    return rc;
}
