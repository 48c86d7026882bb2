/*
 * The tar header walk and the cached index (dataset/tar.h). Both are pure
 * over their input: the walk reads only through its source, within
 * [0, size), a window at a time, so a shard's image data is jumped over,
 * never read; the index parser checks every field before it is used.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dataset/tar.h"
#include "decode/format.h"
#include "io/io.h"

void feeder__tar_index_free(feeder__tar_index *ix)
{
    free(ix->e);
    free(ix->names);
    memset(ix, 0, sizeof(*ix));
}

/* ---- building an index ---- */

static int names_add(feeder__tar_index *ix, const char *s, size_t n)
{
    if (ix->names_len + n + 1 > UINT32_MAX)
        return FEEDER_EOVERFLOW;
    if (ix->names_len + n + 1 > ix->names_cap) {
        size_t cap = ix->names_cap ? ix->names_cap * 2 : 4096;
        while (cap < ix->names_len + n + 1)
            cap *= 2;
        char *p = realloc(ix->names, cap);
        if (!p)
            return -ENOMEM;
        ix->names = p;
        ix->names_cap = cap;
    }
    memcpy(ix->names + ix->names_len, s, n);
    ix->names[ix->names_len + n] = 0;
    ix->names_len += n + 1;
    return 0;
}

static int entry_add(feeder__tar_index *ix, const feeder__tar_entry *e, const char *key,
                     const char *detail)
{
    if (ix->n == ix->cap) {
        uint64_t cap = ix->cap ? ix->cap * 2 : 256;
        feeder__tar_entry *p = realloc(ix->e, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        ix->e = p;
        ix->cap = cap;
    }
    feeder__tar_entry x = *e;
    x.name = (uint32_t)ix->names_len;
    int rc = names_add(ix, key, strlen(key));
    if (!rc)
        rc = names_add(ix, detail, strlen(detail));
    if (!rc)
        ix->e[ix->n++] = x;
    return rc;
}

/* ---- the walk ---- */

#define BLOCK 512u
/* A read takes this much from a header on: the header, a small member after
 * it (.cls) and often the next header; an image's data is jumped over. */
#define READ_AHEAD 4096u
#define WINDOW (FEEDER__TAR_META_MAX + BLOCK)

/* The members of the key being gathered. */
typedef struct group {
    char key[FEEDER__TAR_META_MAX + 1]; /* a key is as long as the longest name */
    int open;
    int img_rank;     /* 0 none; else feeder__format_ext_rank: the lowest wins */
    char img_ext[8];
    uint64_t off, len;
    int has_cls;
    int64_t label;
    char bad[512];    /* the first thing wrong with the key, or "" */
} group;

typedef struct scan {
    const feeder__tar_src *src;
    const char *shard;
    feeder__tar_index *ix;
    uint8_t *win;     /* bytes [win_off, win_off + win_len) of the shard */
    uint64_t win_off;
    size_t win_len;
    uint64_t headers; /* member headers accepted so far */
    char name[FEEDER__TAR_META_MAX + 1]; /* a GNU long name or pax path for the next member */
    char mname[FEEDER__TAR_META_MAX + 1]; /* the current member's full name */
    int have_name;
    uint64_t pax_size;
    int have_size;
    group g;
    feeder__tar_index *all; /* feeder__tar_members: every member, or NULL */
    char damage[512];       /* feeder__tar_members: the first damage met, or "" */
} scan;

/* `len` bytes at `off` (len <= WINDOW, off + len <= size), through the
 * window: NULL with *rc set when the source fails or comes up short. */
static const uint8_t *get(scan *s, uint64_t off, size_t len, int *rc)
{
    if (off >= s->win_off && off + len <= s->win_off + s->win_len)
        return s->win + (off - s->win_off);
    uint64_t want = len > READ_AHEAD ? len : READ_AHEAD;
    if (want > s->src->size - off)
        want = s->src->size - off;
    long got = s->src->read(s->src->ctx, off, s->win, (size_t)want);
    if (got < 0 || (uint64_t)got < len) {
        *rc = got < 0 ? (int)got : -EIO;
        s->win_len = 0;
        return NULL;
    }
    s->win_off = off;
    s->win_len = (size_t)got;
    return s->win;
}

/* An octal field (NUL or space terminated, leading spaces allowed) or a GNU
 * base-256 one (top bit of the first byte). -1 when malformed. */
static int64_t field_num(const uint8_t *f, size_t n)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return -1; /* negative, or more than 63 bits */
        for (size_t i = 1; i < n; i++) {
            if (v >> 55)
                return -1;
            v = v << 8 | f[i];
        }
        return (int64_t)v;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    size_t start = i;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    if (i == start && i < n && f[i] != 0 && f[i] != ' ')
        return -1;
    for (; i < n; i++)
        if (f[i] != 0 && f[i] != ' ')
            return -1;
    return (int64_t)v;
}

/* Does the stored checksum match the header's (unsigned, or the signed sum
 * some old tars wrote)? */
static int checksum_ok(const uint8_t *h, int64_t *stored, int64_t *computed)
{
    int64_t u = 0, sg = 0;
    for (unsigned i = 0; i < BLOCK; i++) {
        uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
        u += b;
        sg += (int8_t)b;
    }
    *stored = field_num(h + 148, 8);
    *computed = u;
    return *stored >= 0 && (*stored == u || *stored == sg);
}

static int all_zero(const uint8_t *h)
{
    for (unsigned i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

static uint64_t padded(uint64_t n) { return (n + BLOCK - 1) / BLOCK * BLOCK; }

/* The member's name: a pax path or GNU long name first, else ustar's
 * prefix "/" name; a leading "./" dropped. */
static void member_name(scan *s, const uint8_t *h, char *out, size_t cap)
{
    if (s->have_name) {
        snprintf(out, cap, "%s", s->name);
    } else {
        int ustar = memcmp(h + 257, "ustar", 5) == 0;
        char pre[156] = "", nm[101];
        memcpy(nm, h, 100);
        nm[100] = 0;
        if (ustar && h[345] && memcmp(h + 257, "ustar\0", 6) == 0) {
            memcpy(pre, h + 345, 155);
            pre[155] = 0;
        }
        snprintf(out, cap, "%s%s%s", pre, pre[0] ? "/" : "", nm);
    }
    while (out[0] == '.' && out[1] == '/')
        memmove(out, out + 2, strlen(out + 2) + 1);
}

/* WebDataset's split: the key is the path up to the first dot of the
 * basename, the extension what follows. Members whose basename starts with
 * a dot or holds none belong to no sample (NULL). */
static const char *split_key(const char *name, size_t *keylen)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return NULL;
    *keylen = (size_t)(dot - name);
    return dot + 1;
}

static void group_bad(group *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void group_bad(group *g, const char *fmt, ...)
{
    if (g->bad[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->bad, sizeof(g->bad), fmt, ap);
    va_end(ap);
}

/* The gathered key becomes a sample: with an image and a label, or bad.
 * A key with neither an image nor a .cls member is no sample. */
static int group_flush(scan *s)
{
    group *g = &s->g;
    if (!g->open)
        return 0;
    g->open = 0;
    if (!g->img_rank && !g->has_cls && !g->bad[0])
        return 0;
    if (!g->img_rank) {
        char exts[128];
        feeder__format_ext_list(FEEDER__EXT_TAR, exts, sizeof(exts));
        group_bad(g, "no image member (%s)", exts);
    } else if (!g->has_cls)
        group_bad(g, "no .cls member");
    feeder__tar_entry e = {.off = g->off, .len = g->len, .label = g->bad[0] ? -1 : g->label,
                           .bad = g->bad[0] ? 1 : 0};
    if (g->bad[0] && g->has_cls)
        e.label = g->label;
    return entry_add(s->ix, &e, g->key, g->bad[0] ? g->bad : g->img_ext);
}

static int group_start(scan *s, const char *name, size_t keylen)
{
    group *g = &s->g;
    if (g->open && strlen(g->key) == keylen && memcmp(g->key, name, keylen) == 0)
        return 0;
    int rc = group_flush(s);
    if (rc)
        return rc;
    g->img_rank = g->has_cls = 0;
    g->img_ext[0] = g->bad[0] = 0;
    g->off = g->len = 0;
    g->label = 0;
    memcpy(g->key, name, keylen);
    g->key[keylen] = 0;
    g->open = 1;
    return 0;
}

/* A .cls member: an ASCII non-negative integer, blanks around it allowed. */
static void read_cls(scan *s, const char *name, uint64_t off, uint64_t size, int *rc)
{
    group *g = &s->g;
    char buf[33];
    if (size > 32) {
        group_bad(g, "member %s is %llu bytes: no label (.cls holds one integer)", name,
                  (unsigned long long)size);
        return;
    }
    const uint8_t *p = size ? get(s, off, (size_t)size, rc) : (const uint8_t *)"";
    if (!p)
        return;
    memcpy(buf, p, (size_t)size);
    buf[size] = 0;
    const char *c = buf;
    while (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
        c++;
    uint64_t v = 0;
    const char *d = c;
    while (*c >= '0' && *c <= '9' && v <= (uint64_t)INT64_MAX / 10)
        v = v * 10 + (uint64_t)(*c++ - '0');
    const char *e = c;
    while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r')
        e++;
    if (c == d || *e || (size_t)(e - buf) != size || v > (uint64_t)INT64_MAX) {
        for (char *q = buf; *q; q++)
            if (*q < ' ' || *q > '~')
                *q = '?';
        group_bad(g, "member %s holds '%s', not a non-negative integer label", name, buf);
        return;
    }
    g->has_cls = 1;
    g->label = (int64_t)v;
}

static const char *type_name(uint8_t t)
{
    switch (t) {
    case '1': return "a hard link";
    case '2': return "a symbolic link";
    case '3': return "a character device";
    case '4': return "a block device";
    case '6': return "a FIFO";
    case 'S': return "a sparse file";
    default: return "not a regular file";
    }
}

/* feeder__tar_members: the member as an entry "key\0ext\0"; one that is
 * no regular file is damage. */
static int list_member(scan *s, char *name, size_t keylen, const char *ext, uint8_t type,
                       uint64_t data_off, uint64_t size)
{
    if (type != '0' && type != 0 && type != '7') {
        if (!s->damage[0])
            snprintf(s->damage, sizeof(s->damage), "member %.300s is %s (type '%c'), not a "
                     "regular file", name, type_name(type),
                     type >= ' ' && type <= '~' ? type : '?');
        return 0;
    }
    feeder__tar_entry e = {.off = data_off, .len = size};
    name[keylen] = 0; /* the dot before ext */
    int rc = entry_add(s->all, &e, name, ext);
    name[keylen] = '.';
    return rc;
}

/* One member whose header and data lie inside the shard. */
static int member(scan *s, const uint8_t *h, uint64_t data_off, uint64_t size)
{
    char *name = s->mname;
    member_name(s, h, name, sizeof(s->mname));
    uint8_t type = h[156];
    size_t keylen;
    const char *ext = split_key(name, &keylen);
    if (type == '5' || !ext)
        return 0; /* folders, and names that are no sample's */
    if (s->all)
        return list_member(s, name, keylen, ext, type, data_off, size);
    int rc = group_start(s, name, keylen);
    if (rc)
        return rc;
    group *g = &s->g;
    int rank = feeder__format_ext_rank(ext, FEEDER__EXT_TAR), cls = strcmp(ext, "cls") == 0;
    if (!rank && !cls)
        return 0; /* other members (.json, .txt) are not read */
    if (type != '0' && type != 0 && type != '7') {
        group_bad(g, "member %s is %s (type '%c'), not a regular file", name, type_name(type),
                  type >= ' ' && type <= '~' ? type : '?');
    } else if (cls && g->has_cls) {
        group_bad(g, "member %s repeats the key's .cls member", name);
    } else if (cls) {
        read_cls(s, name, data_off, size, &rc);
    } else if (rank && size > FEEDER__MAX_FILE_BYTES) {
        group_bad(g, "member %s is %llu bytes, over the 1 GiB limit", name,
                  (unsigned long long)size);
    } else if (rank && (!g->img_rank || rank < g->img_rank)) {
        g->img_rank = rank;
        snprintf(g->img_ext, sizeof(g->img_ext), "%s", ext);
        g->off = data_off;
        g->len = size;
    }
    return rc;
}

/* Damage that ends the walk at the header at `hdr_off`: a bad sample for
 * `key` (the damaged member's, or NULL when unknown) saying `what`. */
static int damaged(scan *s, const char *key, uint64_t hdr_off, const char *what)
{
    if (s->all) {
        if (!s->damage[0])
            snprintf(s->damage, sizeof(s->damage), "%s", what);
        return 0;
    }
    if (key && s->g.open && strcmp(key, s->g.key) == 0) {
        group_bad(&s->g, "%s", what);
        return group_flush(s);
    }
    int rc = group_flush(s);
    feeder__tar_entry e = {.label = -1, .bad = 1};
    char k[64];
    if (!key) {
        snprintf(k, sizeof(k), "(header at offset %llu)", (unsigned long long)hdr_off);
        key = k;
    }
    return rc ? rc : entry_add(s->ix, &e, key, what);
}

/* A pax extended header: the 'path' and 'size' records ("LEN key=value\n"). */
static int pax(scan *s, const uint8_t *p, uint64_t len)
{
    uint64_t at = 0;
    while (at < len) {
        uint64_t n = 0, i = at;
        while (i < len && p[i] >= '0' && p[i] <= '9' && n < len)
            n = n * 10 + (uint64_t)(p[i++] - '0');
        if (i == at || i >= len || p[i] != ' ' || n > len - at || n < 4 || p[at + n - 1] != '\n')
            return p[at] == 0 ? 0 : -1; /* NUL padding ends it */
        const uint8_t *kv = p + i + 1, *end = p + at + n - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return -1;
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            if (vlen == 0 || memchr(eq + 1, 0, vlen))
                return -1;
            memcpy(s->name, eq + 1, vlen);
            s->name[vlen] = 0;
            s->have_name = 1;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            for (size_t k = 0; k < vlen; k++) {
                if (eq[1 + k] < '0' || eq[1 + k] > '9' || v > (UINT64_MAX >> 4))
                    return -1;
                v = v * 10 + (uint64_t)(eq[1 + k] - '0');
            }
            s->pax_size = v;
            s->have_size = vlen > 0;
        }
        at += n;
    }
    return 0;
}

/* A GNU long name ('L') or pax header ('x'): it describes the next member. */
static int meta(scan *s, uint8_t type, uint64_t data_off, uint64_t size, uint64_t hdr_off,
                int *stop)
{
    int rc = 0;
    char what[256];
    if (size > FEEDER__TAR_META_MAX || size == 0) {
        *stop = 1;
        snprintf(what, sizeof(what), "the %s header at offset %llu holds %llu bytes (empty or "
                 "over the %u-byte limit): the members from there on are lost",
                 type == 'L' ? "GNU long name" : "pax", (unsigned long long)hdr_off,
                 (unsigned long long)size, FEEDER__TAR_META_MAX);
        return damaged(s, NULL, hdr_off, what);
    }
    const uint8_t *p = get(s, data_off, (size_t)size, &rc);
    if (!p)
        return rc;
    if (type == 'L') {
        size_t n = (size_t)size;
        memcpy(s->name, p, n);
        s->name[n] = 0;
        s->have_name = s->name[0] != 0;
        return 0;
    }
    if (pax(s, p, size)) {
        *stop = 1;
        snprintf(what, sizeof(what), "the pax header at offset %llu is malformed: the members "
                 "from there on are lost", (unsigned long long)hdr_off);
        return damaged(s, NULL, hdr_off, what);
    }
    return 0;
}

/* A member whose data runs past the end of the shard: its key is bad. */
static int truncated(scan *s, const uint8_t *h, uint64_t off, uint64_t msz)
{
    char *name = s->mname, what[512];
    member_name(s, h, name, sizeof(s->mname));
    snprintf(what, sizeof(what), "member %.200s: its %llu bytes at offset %llu run past the end "
             "of the shard (%llu bytes): truncated", name, (unsigned long long)msz,
             (unsigned long long)(off + BLOCK), (unsigned long long)s->src->size);
    size_t keylen;
    int keyed = h[156] != 'L' && h[156] != 'x' && split_key(name, &keylen);
    if (keyed)
        name[keylen] = 0;
    return damaged(s, keyed ? name : NULL, off, what);
}

/* One header at `off`: *next is where the walk goes on; *stop ends it. */
static int header(scan *s, uint64_t off, uint64_t *next, int *stop)
{
    int rc = 0;
    uint64_t size = s->src->size;
    char what[256];
    if (size - off < BLOCK) {
        *stop = 1;
        snprintf(what, sizeof(what), "the shard ends %llu bytes into the header at offset %llu: "
                 "truncated", (unsigned long long)(size - off), (unsigned long long)off);
        return s->headers ? damaged(s, NULL, off, what) : FEEDER_EDATASET;
    }
    const uint8_t *h = get(s, off, BLOCK, &rc);
    if (!h)
        return rc;
    if (all_zero(h)) {
        *stop = 1; /* the end-of-archive blocks */
        return 0;
    }
    int64_t stored, computed, msize = field_num(h + 124, 12);
    if (!checksum_ok(h, &stored, &computed) || msize < 0) {
        *stop = 1;
        snprintf(what, sizeof(what), "the header at offset %llu has a bad checksum (stored "
                 "%lld, computed %lld) or size field: the members from there on are lost",
                 (unsigned long long)off, (long long)stored, (long long)computed);
        return s->headers ? damaged(s, NULL, off, what) : FEEDER_EDATASET;
    }
    s->headers++;
    uint8_t type = h[156];
    int is_meta = type == 'x' || type == 'L' || type == 'g' || type == 'K';
    uint64_t msz = s->have_size && !is_meta ? s->pax_size : (uint64_t)msize;
    if (msz > size - off - BLOCK) {
        *stop = 1;
        return truncated(s, h, off, msz);
    }
    *next = off + BLOCK + padded(msz);
    if (type == 'L' || type == 'x')
        return meta(s, type, off + BLOCK, msz, off, stop);
    if (type == 'g' || type == 'K')
        return 0;
    rc = member(s, h, off + BLOCK, msz);
    s->have_name = s->have_size = 0;
    return rc;
}

static int scan_fail(scan *s, int rc, char *err, size_t errlen)
{
    if (rc == FEEDER_EDATASET)
        feeder__fmt(err, errlen, "%s: not a tar file: its first 512-byte header is cut short "
                    "or its checksum or size field is wrong", s->shard);
    else if (rc == -ENOMEM)
        feeder__fmt(err, errlen, "%s: out of memory indexing the shard", s->shard);
    else if (rc == FEEDER_EOVERFLOW)
        feeder__fmt(err, errlen, "%s: member names over 4 GiB in one shard", s->shard);
    else
        feeder__fmt(err, errlen, "%s: reading the tar headers: %s", s->shard,
                    rc == -EIO ? "the file is shorter than it was (changed while read?)"
                               : feeder_strerror(rc));
    feeder__tar_index_free(s->ix);
    return rc;
}

/* The walk; with `all`, every member goes there and `out` stays empty. */
static int walk(const feeder__tar_src *src, const char *shard, feeder__tar_index *out,
                feeder__tar_index *all, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    scan *s = calloc(1, sizeof(*s));
    uint8_t *win = malloc(WINDOW);
    int rc = s && win ? 0 : -ENOMEM;
    if (!rc) {
        s->src = src;
        s->shard = shard;
        s->ix = out;
        s->win = win;
        s->all = all;
        int stop = 0;
        for (uint64_t off = 0; !rc && !stop && off < src->size;)
            rc = header(s, off, &off, &stop);
        if (!rc)
            rc = group_flush(s);
        if (!rc && s->damage[0]) {
            feeder__fmt(err, errlen, "%s: %s", shard, s->damage);
            rc = FEEDER_EDATASET;
        } else if (rc) {
            rc = scan_fail(s, rc, err, errlen);
        }
    }
    if (rc == -ENOMEM && (!s || !win))
        feeder__fmt(err, errlen, "%s: out of memory indexing the shard", shard);
    free(win);
    free(s);
    return rc;
}

int feeder__tar_scan(const feeder__tar_src *src, const char *shard, feeder__tar_index *out,
                     char *err, size_t errlen)
{
    return walk(src, shard, out, NULL, err, errlen);
}

int feeder__tar_members(const feeder__tar_src *src, const char *shard, feeder__tar_index *out,
                        char *err, size_t errlen)
{
    feeder__tar_index none;
    memset(out, 0, sizeof(*out));
    int rc = walk(src, shard, &none, out, err, errlen);
    feeder__tar_index_free(&none);
    if (rc)
        feeder__tar_index_free(out);
    return rc;
}

/* ---- the cache file ---- */

int feeder__tar_index_encode(const feeder__tar_index *ix, uint64_t size, int64_t mtime_ns,
                             uint8_t **buf, size_t *len)
{
    if (ix->n > (SIZE_MAX - FEEDER__TAR_IDX_HEADER - ix->names_len) / FEEDER__TAR_IDX_ENTRY)
        return FEEDER_EOVERFLOW;
    size_t body = (size_t)ix->n * FEEDER__TAR_IDX_ENTRY + ix->names_len;
    uint8_t *b = calloc(1, FEEDER__TAR_IDX_HEADER + body);
    if (!b)
        return -ENOMEM;
    uint8_t *p = b + FEEDER__TAR_IDX_HEADER;
    for (uint64_t i = 0; i < ix->n; i++, p += FEEDER__TAR_IDX_ENTRY) {
        feeder__put_le64(p, ix->e[i].off);
        feeder__put_le64(p + 8, ix->e[i].len);
        feeder__put_le64(p + 16, (uint64_t)ix->e[i].label);
        feeder__put_le32(p + 24, ix->e[i].name);
        feeder__put_le32(p + 28, ix->e[i].bad);
    }
    if (ix->names_len)
        memcpy(p, ix->names, ix->names_len);
    memcpy(b, FEEDER__TAR_IDX_MAGIC, 8);
    feeder__put_le32(b + 8, FEEDER__TAR_IDX_VERSION);
    feeder__put_le32(b + 12, FEEDER__TAR_IDX_HEADER);
    feeder__put_le64(b + 16, size);
    feeder__put_le64(b + 24, (uint64_t)mtime_ns);
    feeder__put_le64(b + 32, ix->n);
    feeder__put_le64(b + 40, ix->names_len);
    feeder__put_le32(b + 48, feeder__crc32c(0, b + FEEDER__TAR_IDX_HEADER, body));
    feeder__put_le32(b + 52, feeder__crc32c(0, b, 52));
    *buf = b;
    *len = FEEDER__TAR_IDX_HEADER + body;
    return 0;
}

/* The header's fields, each checked; the body's length in *body. */
static int index_header(const uint8_t *b, size_t len, uint64_t size, int64_t mtime_ns,
                        uint64_t *n, uint64_t *names, char *err, size_t errlen)
{
    const char *why = NULL;
    if (len < FEEDER__TAR_IDX_HEADER || memcmp(b, FEEDER__TAR_IDX_MAGIC, 8) != 0)
        why = "not a feeder tar index (magic)";
    else if (feeder__get_le32(b + 8) != FEEDER__TAR_IDX_VERSION || feeder__get_le32(b + 12) != FEEDER__TAR_IDX_HEADER)
        why = "another version";
    else if (feeder__get_le32(b + 52) != feeder__crc32c(0, b, 52))
        why = "header checksum mismatch";
    else if (feeder__get_le64(b + 16) != size ||
             (mtime_ns != FEEDER__TAR_MTIME_ANY && (int64_t)feeder__get_le64(b + 24) != mtime_ns))
        why = "made for another size or modification time of the shard";
    if (why) {
        feeder__fmt(err, errlen, "%s", why);
        return FEEDER_EFORMAT;
    }
    *n = feeder__get_le64(b + 32);
    *names = feeder__get_le64(b + 40);
    size_t room = len - FEEDER__TAR_IDX_HEADER;
    if (*n > room / FEEDER__TAR_IDX_ENTRY || *names != room - *n * FEEDER__TAR_IDX_ENTRY ||
        *names > UINT32_MAX || (*names && b[len - 1] != 0)) {
        feeder__fmt(err, errlen, "entry count or name bytes do not fit the file");
        return FEEDER_EFORMAT;
    }
    if (feeder__get_le32(b + 48) != feeder__crc32c(0, b + FEEDER__TAR_IDX_HEADER, room)) {
        feeder__fmt(err, errlen, "body checksum mismatch");
        return FEEDER_EFORMAT;
    }
    return 0;
}

/* Entry `i`'s fields inside the shard and its names inside the table. */
static int entry_ok(const feeder__tar_entry *e, const char *names, uint64_t nlen, uint64_t size)
{
    if (e->bad > 1 || e->name >= nlen)
        return 0;
    const char *end = memchr(names + e->name, 0, (size_t)(nlen - e->name));
    if (!end || (uint64_t)(end - names) + 1 >= nlen)
        return 0; /* the key, then room for its detail */
    if (e->bad)
        return e->label >= -1;
    return e->label >= 0 && e->len <= FEEDER__MAX_FILE_BYTES && e->off <= size &&
           e->len <= size - e->off;
}

int feeder__tar_index_decode(const uint8_t *buf, size_t len, uint64_t size, int64_t mtime_ns,
                             feeder__tar_index *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    uint64_t n, nlen;
    int rc = index_header(buf, len, size, mtime_ns, &n, &nlen, err, errlen);
    if (rc)
        return rc;
    out->e = malloc((n ? n : 1) * sizeof(*out->e));
    out->names = malloc(nlen ? nlen : 1);
    if (!out->e || !out->names) {
        feeder__tar_index_free(out);
        return -ENOMEM;
    }
    const uint8_t *p = buf + FEEDER__TAR_IDX_HEADER;
    memcpy(out->names, p + n * FEEDER__TAR_IDX_ENTRY, (size_t)nlen);
    out->names_len = out->names_cap = (size_t)nlen;
    for (uint64_t i = 0; i < n; i++, p += FEEDER__TAR_IDX_ENTRY) {
        feeder__tar_entry e = {feeder__get_le64(p), feeder__get_le64(p + 8), (int64_t)feeder__get_le64(p + 16), feeder__get_le32(p + 24),
                               feeder__get_le32(p + 28)};
        if (!entry_ok(&e, out->names, nlen, size)) {
            feeder__fmt(err, errlen, "entry %llu is out of bounds", (unsigned long long)i);
            feeder__tar_index_free(out);
            return FEEDER_EFORMAT;
        }
        out->e[i] = e;
    }
    out->n = out->cap = n;
    return 0;
}
