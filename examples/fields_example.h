/*
 * What fields_detection.c and fields_segmentation.c share: their command
 * line, the dataset and loader they make of a schema, and the two epochs
 * they run, each batch counted and, with --check, compared with the samples
 * it was made from. Each example keeps what is its own: the scenes, the
 * schema, how a batch is checked and what is counted.
 */
#ifndef FEEDER_FIELDS_EXAMPLE_H
#define FEEDER_FIELDS_EXAMPLE_H

#include <feeder.h>
#include <stdint.h>

typedef struct fx_args {
    int workers, batch, check;
    uint64_t images;
} fx_args;

/* Read --workers N, --images N, --batch N and --check over the defaults in
 * *a. 0, or 2 after printing the usage. */
int fx_parse(int argc, char **argv, fx_args *a);

/* FNV-1a over n bytes, on from h. */
uint64_t fx_fnv(uint64_t h, const void *p, size_t n);

/* The fields dataset of `fields` on `cb` (its user pointer: &a->images),
 * and a loader of it: a->batch, a->workers, shuffled with `seed`. 0, or an
 * error after printing it; *ds and *ld stay NULL until made. */
int fx_open(const feeder_fields_callbacks *cb, const feeder_field *fields, uint32_t nfields,
            fx_args *a, int64_t seed, feeder_dataset **ds, feeder_loader **ld);

/* Each batch's share of the totals the example prints. */
typedef uint64_t (*fx_count_fn)(const feeder_batch *b);
/* A batch against the samples it came from; seen[i] counts sample i's
 * arrivals this epoch, *sum a checksum of every field. 0, or -1 after
 * printing why. */
typedef int (*fx_check_fn)(const feeder_batch *b, uint8_t *seen, uint64_t *sum);

typedef struct fx_totals {
    uint64_t batches, counted, sum; /* counted: count's sum over the batches */
} fx_totals;

/* Two epochs of ld: every batch counted, and with a->check checked, each
 * sample once an epoch. 0, or 1 after printing why. */
int fx_two_epochs(feeder_loader *ld, const fx_args *a, fx_count_fn count, fx_check_fn check,
                  fx_totals *t);

#endif
