/*
 * dataset/: what a dataset is (image folder, list file, user callbacks,
 * packed file) and how each is opened. Other rooms read the struct; only
 * this room makes and frees it. Depends on common/ and the public header.
 */
#ifndef FEEDER_DATASET_H
#define FEEDER_DATASET_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/common.h"

enum { FEEDER__DS_FOLDER = 1, FEEDER__DS_LIST = 2, FEEDER__DS_USER = 3, FEEDER__DS_PACKED = 4,
       FEEDER__DS_TAR = 5 };

struct feeder__pack; /* packed datasets (dataset/pack.h) */
struct feeder__tar;  /* tar shard sets (dataset/tar.h) */

/* Files a folder dataset left out (not an image extension), counted by
 * extension: a fixed table, so it needs no freeing; extensions past the
 * table's room or longer than its field count under `other`. */
#define FEEDER__SKIP_EXTS 16
typedef struct feeder__skip_ext {
    char ext[16]; /* ".txt", or "" for a name without one */
    uint64_t n;
} feeder__skip_ext;
typedef struct feeder__skips {
    uint64_t total;
    uint64_t other;
    uint64_t folders_again; /* folder walks: links to a folder walked already */
    uint32_t used;
    feeder__skip_ext e[FEEDER__SKIP_EXTS];
} feeder__skips;

struct feeder_dataset {
    int kind;
    uint64_t n;
    char *paths;        /* all full paths, NUL-separated */
    uint64_t *path_off; /* n offsets into paths */
    int64_t *labels;    /* n labels */
    char **classes;     /* folder datasets: sorted class names */
    uint64_t num_classes;
    feeder_dataset_callbacks cb;
    void *user;
    struct feeder__pack *pack; /* FEEDER__DS_PACKED */
    struct feeder__tar *tar;   /* FEEDER__DS_TAR: shards, indexes; no paths */
    /* Frees what the dataset's kind opened (its pack, shards, tar), set by the
     * file that opened it, so that this room's core never calls the kinds
     * back; NULL when there is nothing more to free. */
    void (*release)(feeder_dataset *ds);
    atomic_uint refs;          /* the caller's and each loader's (feeder__dataset_hold) */
    feeder__skips skips;       /* FEEDER__DS_FOLDER */
    /* What a resume state checks the dataset by: a hash of each sample's
     * file name, its folder's name and its label, in order (folders, lists;
     * not the root, so a dataset moved elsewhere still matches), or of a
     * packed file's header CRC and size, or of a tar set's shard names,
     * sizes, keys and labels. 0: unknown (user datasets). */
    uint64_t fingerprint;
    /* A fields dataset (feeder_dataset_create_fields): kind USER, the schema
     * with its names copied into one block, and get through fcb (cb.get is
     * NULL); nfields 0 for every other dataset. */
    feeder_field *fields;
    uint32_t nfields;
    feeder_fields_callbacks fcb;
    /* A batch dataset (feeder_dataset_create_batches): kind USER with
     * bcb.get set (cb.get is NULL); its workers make whole batches. */
    feeder_batches_callbacks bcb;
};

/* A new dataset of `kind` holding one reference; 0 or -ENOMEM. */
int feeder__dataset_alloc(int kind, feeder_dataset **out);

/* A growable list of strings in one arena. */
typedef struct feeder__strlist {
    char *arena;
    size_t used, cap;
    uint64_t *off;
    int64_t *label;
    uint64_t n, ncap;
    feeder__skips skips; /* folder walks: files left out */
} feeder__strlist;
/* Append the path a (or "a/b" when b is given) with its label; 0 or -ENOMEM. */
int feeder__strlist_add(feeder__strlist *l, const char *a, const char *b, int64_t label);
void feeder__strlist_free(feeder__strlist *l);
/* On rc == 0, hand the list to `ds` (paths, labels, skips, the fingerprint of
 * names and labels) and set *out; otherwise free both. Returns rc. */
int feeder__dataset_adopt(feeder_dataset *ds, feeder__strlist *l, int rc, feeder_dataset **out);

/* The pattern argument of an open function `fn`: err cleared, FEEDER_EINVAL
 * naming fn when pattern or out is NULL, else feeder__brace_expand's names
 * (free them with feeder__brace_free) or its error. */
int feeder__dataset_pattern(const char *fn, const char *pattern, const void *out, char ***names,
                            size_t *n, char *err, size_t errlen);

/* Check a schema of n fields; 0, or FEEDER_EINVAL with `err` naming the
 * field and what is wrong. dataset/schema.c. */
int feeder__fields_check(const feeder_field *f, uint32_t n, char *err, size_t errlen);

/* A loader's reference: the dataset outlives feeder_dataset_destroy while a
 * loader holds it; the last drop frees it. Thread-safe. */
void feeder__dataset_hold(feeder_dataset *ds);
void feeder__dataset_drop(feeder_dataset *ds);

/* For each sample, the next sample of its label in dataset order (cyclic):
 * *out, n entries, the caller's to free; NULL when the dataset holds no
 * labels (user datasets). 0 or -ENOMEM. dataset/classes.c. */
int feeder__dataset_class_next(const feeder_dataset *ds, uint64_t **out);

/* A fields dataset over `cb` and the schema (checked by the caller:
 * collate/fields.h), copied. 0 or -ENOMEM. */
int feeder__dataset_create_fields(const feeder_fields_callbacks *cb, const feeder_field *fields,
                                  uint32_t nfields, void *user, feeder_dataset **out);

/* Longest list-file line accepted (PATH_MAX plus room for a label). */
#define FEEDER__LIST_LINE_MAX 4200

/* Parse a list file held in memory: the parser behind
 * feeder_dataset_open_list2 (and the fuzz target's entry). `name` is the list
 * file's name for messages; `root` is what relative paths are relative to. */
int feeder__list_parse(const char *buf, size_t len, const char *name, const char *root,
                       unsigned flags, feeder_dataset **out, char *err, size_t errlen);
/* The same, the buffer handed to the streaming parser `chunk` bytes at a
 * time (0: at once), as a file is read: the fuzz target checks that where a
 * chunk ends never changes the result. */
int feeder__list_parse_chunked(const char *buf, size_t len, size_t chunk, const char *name,
                               const char *root, unsigned flags, feeder_dataset **out, char *err,
                               size_t errlen);

#endif
