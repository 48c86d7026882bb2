/*
 * Helpers the Check suites share: small image folders cut from the bundled
 * photos, and opening them. Each helper asserts (Check) on failure, so it is
 * for use inside a test only.
 */
#ifndef FEEDER_TESTS_TESTUTIL_H
#define FEEDER_TESTS_TESTUTIL_H

#include <stdint.h>

#include "benchutil.h"
#include "feeder.h"

/* An image folder under dir/rel: `classes` sub-folders named prefix0,
 * prefix1, ..., each with `per` JPEGs (000.jpg ...) of quality 85, sized
 * w0 + (c*37 + i*53) % wspan by h0 + (c*29 + i*71) % hspan, each cut from
 * photo c*per + i with seed c*1000 + i: every test that uses the same
 * arguments gets the same bytes. */
void tu_make_folder(const bu_photos *photos, const char *dir, const char *rel, int classes,
                    int per, const char *prefix, uint32_t w0, uint32_t wspan, uint32_t h0,
                    uint32_t hspan);

/* feeder_dataset_open_folder(dir/rel), asserting it succeeds. */
feeder_dataset *tu_open_folder(const char *dir, const char *rel);

#endif
