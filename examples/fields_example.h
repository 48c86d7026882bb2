/*
 * What fields_detection.c and fields_segmentation.c share: their command
 * line, and their run: the dataset and loader they make of a schema, two
 * epochs, each batch counted and, with --check, compared with the samples
 * it was made from, and the report. Each example keeps what is its own:
 * the scenes, the schema, how a batch is checked and what is counted.
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
 * *a. 0; 1 after printing the usage on stdout (--help, -h); 2 after printing
 * it on stderr (an unknown option or a missing value). */
int fx_parse(int argc, char **argv, fx_args *a);

/* FNV-1a over n bytes, on from h. */
uint64_t fx_fnv(uint64_t h, const void *p, size_t n);

/* Each batch's share of the total the example prints. */
typedef uint64_t (*fx_count_fn)(const feeder_batch *b);
/* A batch against the samples it came from; seen[i] counts sample i's
 * arrivals this epoch, *sum a checksum of every field. 0, or -1 after
 * printing why. */
typedef int (*fx_check_fn)(const feeder_batch *b, uint8_t *seen, uint64_t *sum);

/* The example's run: the fields dataset of `fields` on `cb` (its user
 * pointer: &a->images) and a loader of it (a->batch, a->workers, shuffled
 * with `seed`); two epochs, every batch counted and, with a->check,
 * checked, each sample once an epoch; then "2 epochs: B batches, N
 * <counted>" and, with a->check, "checked: <checked>; checksum S". The exit
 * status: 0, or 1 after printing why. */
int fx_run(fx_args *a, const feeder_fields_callbacks *cb, const feeder_field *fields,
           uint32_t nfields, int64_t seed, fx_count_fn count, fx_check_fn check,
           const char *counted, const char *checked);

#endif
