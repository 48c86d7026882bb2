/*
 * dataset/dataset.c: what every dataset shares: making one, its references,
 * freeing it, and the accessors of the public API; user (callback) datasets.
 * Folders are in folder.c, list files in list.c, the path arena they fill in
 * names.c, packed files in packed.c.
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

#include "common/brace.h"
#include "dataset/dataset.h"

int feeder__dataset_alloc(int kind, feeder_dataset **out)
{
    feeder_dataset *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return -ENOMEM;
    ds->kind = kind;
    atomic_init(&ds->refs, 1);
    *out = ds;
    return 0;
}

/* A user dataset of `n` samples over `user`; the caller sets its callbacks. */
static int user_dataset(void *user, uint64_t n, feeder_dataset **out)
{
    int rc = feeder__dataset_alloc(FEEDER__DS_USER, out);
    if (rc)
        return rc;
    (*out)->user = user;
    (*out)->n = n;
    return 0;
}

int feeder_dataset_create(const feeder_dataset_callbacks *cb, void *user, feeder_dataset **out)
{
    if (!cb || !cb->len || !cb->get || !out)
        return FEEDER_EINVAL;
    int rc = user_dataset(user, cb->len(user), out);
    if (!rc)
        (*out)->cb = *cb;
    return rc;
}

int feeder_dataset_create_batches(const feeder_batches_callbacks *cb, void *user,
                                  feeder_dataset **out)
{
    if (!cb || !cb->len || !cb->get || !out)
        return FEEDER_EINVAL;
    int rc = user_dataset(user, cb->len(user), out);
    if (!rc)
        (*out)->bcb = *cb;
    return rc;
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
    int rc = feeder__dataset_alloc(FEEDER__DS_USER, &ds);
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
    if (ds->bcb.get && ds->bcb.destroy)
        ds->bcb.destroy(ds->user);
    if (ds->nfields && ds->fcb.destroy)
        ds->fcb.destroy(ds->user);
    free(ds->fields);
    for (uint64_t i = 0; ds->classes && i < ds->num_classes; i++)
        free(ds->classes[i]);
    free(ds->classes);
    free(ds->paths);
    free(ds->path_off);
    free(ds->labels);
    if (ds->release)
        ds->release(ds);
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

int feeder__dataset_pattern(const char *fn, const char *pattern, const void *out, char ***names,
                            size_t *n, char *err, size_t errlen)
{
    feeder__fmt(err, errlen, "%s", "");
    if (!pattern || !out) {
        feeder__fmt(err, errlen, "%s: pattern and out must not be NULL", fn);
        return FEEDER_EINVAL;
    }
    return feeder__brace_expand(pattern, names, n, err, errlen);
}
