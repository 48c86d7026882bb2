/*
 * common/brace.c: brace ranges, the way shard sets are named
 * ("shard-{00000..00127}.tar", "{train,val}.pack"), as WebDataset and
 * MosaicML name them. Depends on nothing but the C library.
 */
#ifndef FEEDER_COMMON_BRACE_H
#define FEEDER_COMMON_BRACE_H

#include <stddef.h>

/* Most names one pattern may expand to. */
#define FEEDER__BRACE_MAX 1000000u

/* Expand `pattern` into the names it stands for, in order. A group is either
 * a range "{A..B}" of non-negative integers (ascending or descending; when a
 * bound is written with a leading zero every number is zero-padded to the
 * wider bound's width, as bash does) or a list "{x,y,z}" of alternatives
 * (empty ones allowed: "a{,.idx}"). Several groups multiply, the leftmost
 * varying slowest. A pattern without '{' expands to itself. *out gets
 * *count malloc'd strings in a malloc'd array (feeder__brace_free).
 * Fails with FEEDER_EINVAL and a message in `err` naming the pattern and the
 * byte offset for an unclosed or nested brace, a '}' without '{', a group
 * that is neither a range nor a list, a bound over 18 digits, or more than
 * FEEDER__BRACE_MAX names; -ENOMEM when memory runs out. *out and
 * *count are set only on success. Thread-safe. */
int feeder__brace_expand(const char *pattern, char ***out, size_t *count, char *err,
                         size_t errlen);

/* Free what feeder__brace_expand returned. Accepts NULL. */
void feeder__brace_free(char **names, size_t count);

#endif
