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
static int walk_class(const char *dir, int64_t label, feeder__strlist *out, walk_chain *chain, int depth,
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
            rc = feeder__strlist_add(out, dir, names[i], label);
        } else if (S_ISREG(st.st_mode)) {
            skip_note(&out->skips, names[i]);
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
    int rc = list_dir(root, &names, &n);
    if (rc) {
        feeder__fmt(err, errlen, "%s: cannot list folder: %s", root, strerror(-rc));
        return rc;
    }
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
    return 0;
}
