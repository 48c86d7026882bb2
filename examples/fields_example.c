/*
 * The fields examples' shared part (fields_example.h).
 */
#include "fields_example.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fx_parse(int argc, char **argv, fx_args *a)
{
    const char *use = "usage: %s [--workers N] [--images N] [--batch N] [--check]\n";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(use, argv[0]);
            printf("Loads synthetic samples of several fields through feeder; --check compares\n"
                   "every value with its source and prints a checksum.\n");
            return 1;
        } else if (!strcmp(argv[i], "--check"))
            a->check = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--workers"))
            a->workers = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--images"))
            a->images = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch"))
            a->batch = atoi(argv[++i]);
        else {
            fprintf(stderr, "%s: unknown option or missing value '%s'\n", argv[0], argv[i]);
            fprintf(stderr, use, argv[0]);
            return 2;
        }
    }
    return 0;
}

uint64_t fx_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct totals {
    uint64_t batches, counted, sum; /* counted: count's sum over the batches */
} totals;

/* The dataset and its loader: 0, or an error after printing it (*ds and
 * *ld stay NULL until made). */
static int open_loader(const feeder_fields_callbacks *cb, const feeder_field *fields,
                       uint32_t nfields, fx_args *a, int64_t seed, feeder_dataset **ds,
                       feeder_loader **ld)
{
    char err[256];
    int rc = feeder_dataset_create_fields(cb, fields, nfields, &a->images, ds, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return rc;
    }
    if ((rc = feeder_loader_create(*ds, NULL, ld)))
        return rc;
    feeder_loader_set(*ld, FEEDER_OPT_BATCH_SIZE, a->batch);
    feeder_loader_set(*ld, FEEDER_OPT_NUM_WORKERS, a->workers);
    feeder_loader_set(*ld, FEEDER_OPT_SHUFFLE, 1);
    feeder_loader_set(*ld, FEEDER_OPT_SEED, seed);
    return 0;
}

/* One epoch: FEEDER_DONE, -1 after a check failed, or the loader's error. */
static int epoch(feeder_loader *ld, const fx_args *a, fx_count_fn count, fx_check_fn check,
                 uint8_t *seen, totals *t)
{
    memset(seen, 0, a->images);
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        t->counted += count(b);
        t->batches++;
        rc = a->check ? check(b, seen, &t->sum) : 0;
        feeder_batch_release(b, NULL);
        if (rc)
            return rc;
    }
    for (uint64_t i = 0; a->check && rc == FEEDER_DONE && i < a->images; i++)
        rc = seen[i] ? rc : -1;
    return rc;
}

/* 0, or 1 after printing why. */
static int two_epochs(feeder_loader *ld, const fx_args *a, fx_count_fn count,
                      fx_check_fn check, totals *t)
{
    uint8_t *seen = calloc(a->images, 1);
    *t = (totals){.sum = 0xcbf29ce484222325ull};
    int rc = seen ? 0 : -1;
    for (int e = 0; e < 2 && rc == 0; e++) {
        rc = epoch(ld, a, count, check, seen, t);
        rc = rc == FEEDER_DONE ? 0 : rc;
    }
    free(seen);
    if (rc) {
        fprintf(stderr, "%s\n", rc == -1 ? "check failed" : feeder_loader_errmsg(ld));
        return 1;
    }
    return 0;
}

int fx_run(fx_args *a, const feeder_fields_callbacks *cb, const feeder_field *fields,
           uint32_t nfields, int64_t seed, fx_count_fn count, fx_check_fn check,
           const char *counted, const char *checked)
{
    feeder_dataset *ds = NULL;
    feeder_loader *ld = NULL;
    totals t;
    int rc = open_loader(cb, fields, nfields, a, seed, &ds, &ld);
    if (!rc && !(rc = two_epochs(ld, a, count, check, &t))) {
        printf("2 epochs: %llu batches, %llu %s\n", (unsigned long long)t.batches,
               (unsigned long long)t.counted, counted);
        if (a->check)
            printf("checked: %s; checksum %016llx\n", checked, (unsigned long long)t.sum);
    }
    feeder_loader_destroy(ld);
    feeder_dataset_destroy(ds);
    return rc ? 1 : 0;
}
