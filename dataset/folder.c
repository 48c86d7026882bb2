/*
 * dataset/folder.c: image folders, by torchvision's ImageFolder rules: every
 * sub-folder of the root a class (sorted names), every file with an image
 * extension in it, recursively, a sample; the files left out are counted by
 * extension (feeder_dataset_skipped).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "decode/format.h"

/* The names a folder dataset takes (decode/'s format table); the decoder
 * reads the format from the bytes, so this only keeps stray files (notes,
 * caches) out. */
static int is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && feeder__format_ext_rank(dot + 1, FEEDER__EXT_FOLDER) > 0;
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

/* The sorted names in `dir` (without . and ..); FEEDER_ELIMIT, nothing
 * kept, when it holds more than `room` names, so one huge folder is not read
 * whole before the entry limit is seen. */
static int list_dir(const char *dir, uint64_t room, char ***names, size_t *count)
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
        if (n == room) {
            rc = FEEDER_ELIMIT;
            break;
        }
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

/* The walk's limits. Symbolic links are followed (as os.walk(followlinks=True)
 * does), so without them a few links make a small tree list millions of
 * paths: 20 levels of two links each to the next level name the same files
 * 2^20 times. Each folder is therefore walked once per open (a later link to
 * it is not followed, and counted), folders nest at most MAX_DEPTH levels
 * below their class folder, and a dataset walks at most MAX_ENTRIES names. */
#define WALK_DEPTH_DEFAULT 32
#define WALK_DEPTH_MAX 64
#define WALK_ENTRIES_DEFAULT 100000000ull

static uint64_t env_limit(const char *name, uint64_t dflt, uint64_t max)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end || !x || x > max ? dflt : (uint64_t)x;
}

/* A folder by device and inode. */
typedef struct dir_id {
    dev_t dev;
    ino_t ino;
} dir_id;

typedef struct walk {
    /* The folders from the class folder down to the one being walked: a
     * sub-folder already among them is a symbolic link loop.
     * [0] the class folder, [1] the root, then the path below. */
    dir_id chain[WALK_DEPTH_MAX + 2];
    /* Every folder entered since the open began: an open-addressed set,
     * `cap` a power of two, a zero `used` byte an empty slot. */
    dir_id *seen;
    uint8_t *used;
    size_t nseen, cap;
    uint64_t entries, max_entries;
    int max_depth;
    feeder__strlist *out;
    char *err;
    size_t errlen;
} walk;

static size_t id_hash(const dir_id *k, size_t cap)
{
    uint64_t h = ((uint64_t)k->dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)k->ino;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return (size_t)h & (cap - 1);
}

/* Add `k` to the walked set: 1 when it was new, 0 when it was there, or
 * -ENOMEM. */
static int seen_add(walk *w, dir_id k)
{
    if (2 * (w->nseen + 1) > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        dir_id *s = calloc(cap, sizeof(*s));
        uint8_t *u = calloc(cap, 1);
        if (!s || !u) {
            free(s);
            free(u);
            return -ENOMEM;
        }
        for (size_t i = 0; i < w->cap; i++) {
            if (!w->used[i])
                continue;
            size_t j = id_hash(&w->seen[i], cap);
            while (u[j])
                j = (j + 1) & (cap - 1);
            s[j] = w->seen[i];
            u[j] = 1;
        }
        free(w->seen);
        free(w->used);
        w->seen = s;
        w->used = u;
        w->cap = cap;
    }
    size_t j = id_hash(&k, w->cap);
    for (; w->used[j]; j = (j + 1) & (w->cap - 1))
        if (w->seen[j].dev == k.dev && w->seen[j].ino == k.ino)
            return 0;
    w->seen[j] = k;
    w->used[j] = 1;
    w->nseen++;
    return 1;
}

static int in_chain(const walk *w, int depth, const struct stat *st)
{
    for (int d = 0; d <= depth; d++)
        if (w->chain[d].dev == st->st_dev && w->chain[d].ino == st->st_ino)
            return 1;
    return 0;
}

static int too_many(walk *w, const char *dir)
{
    feeder__fmt(w->err, w->errlen,
                "%s: more than %llu files and folders in the dataset; "
                "FEEDER_FOLDER_MAX_ENTRIES raises the limit", dir,
                (unsigned long long)w->max_entries);
    return FEEDER_ELIMIT;
}

/* What to do with the folder `path` met at `depth`: 1 walk it, 0 leave it
 * (walked already through another link), or an error named in w->err. */
static int enter_dir(walk *w, const char *path, const struct stat *st, int depth)
{
    if (in_chain(w, depth, st)) {
        feeder__fmt(w->err, w->errlen,
                    "%s: a symbolic link loop: it leads back to a folder it is in", path);
        return -ELOOP;
    }
    if (depth > w->max_depth) {
        feeder__fmt(w->err, w->errlen,
                    "%s: more than %d levels of folders below its class folder; "
                    "FEEDER_FOLDER_MAX_DEPTH raises the limit (up to %d)", path, w->max_depth,
                    WALK_DEPTH_MAX);
        return FEEDER_ELIMIT;
    }
    int rc = seen_add(w, (dir_id){st->st_dev, st->st_ino});
    if (rc == 0)
        w->out->skips.folders_again++;
    return rc;
}

/* Walk `dir` in sorted order (as torchvision sorts os.walk's entries), adding
 * every image; stat() follows symlinks as os.walk(followlinks=True) does.
 * `depth` is dir's level below its class folder, plus one. A failure names
 * the entry it happened at in w->err. */
static int walk_class(walk *w, const char *dir, int64_t label, int depth)
{
    char **names;
    size_t n;
    int rc = list_dir(dir, w->max_entries - w->entries, &names, &n);
    if (rc == FEEDER_ELIMIT)
        return too_many(w, dir);
    if (rc) {
        feeder__fmt(w->err, w->errlen, "%s: cannot list folder: %s", dir, strerror(-rc));
        return rc;
    }
    w->entries += n;
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
        if (S_ISDIR(st.st_mode)) {
            rc = enter_dir(w, path, &st, depth);
            if (rc == 1) {
                w->chain[depth + 1] = (dir_id){st.st_dev, st.st_ino};
                rc = walk_class(w, path, label, depth + 1);
            }
        } else if (S_ISREG(st.st_mode) && is_image_name(names[i])) {
            rc = feeder__strlist_add(w->out, dir, names[i], label);
        } else if (S_ISREG(st.st_mode)) {
            skip_note(&w->out->skips, names[i]);
        }
    }
    free(path);
    free_names(names, n);
    return rc;
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
    walk w = {.max_entries = env_limit("FEEDER_FOLDER_MAX_ENTRIES", WALK_ENTRIES_DEFAULT,
                                       UINT64_MAX),
              .max_depth = (int)env_limit("FEEDER_FOLDER_MAX_DEPTH", WALK_DEPTH_DEFAULT,
                                          WALK_DEPTH_MAX),
              .err = err, .errlen = errlen};
    int rc = list_dir(root, w.max_entries, &names, &n);
    if (rc == FEEDER_ELIMIT)
        return too_many(&w, root);
    if (rc) {
        feeder__fmt(err, errlen, "%s: cannot list folder: %s", root, strerror(-rc));
        return rc;
    }
    w.entries = n;
    feeder_dataset *ds;
    if ((rc = feeder__dataset_alloc(FEEDER__DS_FOLDER, &ds))) {
        free_names(names, n);
        return rc;
    }
    struct stat root_st;
    if (stat(root, &root_st) != 0)
        memset(&root_st, 0, sizeof(root_st));
    ds->classes = calloc(n ? n : 1, sizeof(char *));
    feeder__strlist l = {0};
    w.out = &l;
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
        w.chain[0] = (dir_id){st.st_dev, st.st_ino};
        w.chain[1] = (dir_id){root_st.st_dev, root_st.st_ino}; /* a link back to the root
                                                                   loops too */
        /* A class folder linked from another class is listed in the first
         * one only, as any folder reached twice. */
        rc = seen_add(&w, w.chain[0]);
        if (rc == 1)
            rc = walk_class(&w, cdir, (int64_t)ds->num_classes, 1);
        else if (rc == 0)
            l.skips.folders_again++;
        ds->num_classes++;
        if (rc && err && errlen && !err[0])
            feeder__fmt(err, errlen, "%s: %s", cdir, strerror(-rc));
    }
    free(cdir);
    free_names(names, n);
    free(w.seen);
    free(w.used);
    if (rc == 0 && ds->num_classes == 0) {
        feeder__fmt(err, errlen, "%s: no class folders (expected one sub-folder per class)",
                    root);
        rc = FEEDER_EDATASET;
    } else if (rc == 0 && l.n == 0) {
        char exts[128];
        feeder__format_ext_list(FEEDER__EXT_FOLDER, exts, sizeof(exts));
        feeder__fmt(err, errlen, "%s: no %s files in its %llu class folders (%llu other files)",
                    root, exts, (unsigned long long)ds->num_classes,
                    (unsigned long long)l.skips.total);
        rc = FEEDER_EDATASET;
    }
    return feeder__dataset_adopt(ds, &l, rc, out);
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
    at = strlen(summary);
    if (s.folders_again && at + 1 < len)
        snprintf(summary + at, len - at, "; %llu folder%s reached again through a link, "
                 "not walked again", (unsigned long long)s.folders_again,
                 s.folders_again == 1 ? "" : "s");
    return 0;
}
