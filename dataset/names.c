/*
 * dataset/names.c: the path arena that folder and list datasets (and any
 * dataset of named files) fill, and how a filled list becomes a dataset:
 * the paths kept whole ("root/class/file.jpg") in one arena so a worker
 * hands them to the kernel without building strings per sample, and the
 * fingerprint a resume state checks them by.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"

int feeder__strlist_add(feeder__strlist *l, const char *a, const char *b, int64_t label)
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

void feeder__strlist_free(feeder__strlist *l)
{
    free(l->arena);
    free(l->off);
    free(l->label);
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

static uint64_t names_fingerprint(const feeder__strlist *l)
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
int feeder__dataset_adopt(feeder_dataset *ds, feeder__strlist *l, int rc, feeder_dataset **out)
{
    if (rc) {
        feeder__strlist_free(l);
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
