/*
 * The skip policy's candidate order: for each sample, the next sample of the
 * same label in dataset order, cyclically (worker.c's replace_sample walks
 * it). Built once at start from the labels a folder, list, packed or tar
 * dataset holds; a user dataset's labels are unknown until loaded. A sample
 * whose label is unknown (-1: a tar key without a usable .cls member) has no
 * class to stay in: its candidate is the next sample in dataset order.
 */
#include <errno.h>
#include <stdlib.h>

#include "dataset/dataset.h"

static int by_label_then_index(const void *a, const void *b, void *arg)
{
    const int64_t *lab = arg;
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    if (lab[x] != lab[y])
        return lab[x] < lab[y] ? -1 : 1;
    return (x > y) - (x < y);
}

int feeder__dataset_class_next(const feeder_dataset *ds, uint64_t **out)
{
    *out = NULL;
    uint64_t n = ds->n;
    if (!ds->labels || n == 0)
        return 0;
    if (n > SIZE_MAX / sizeof(uint64_t))
        return -ENOMEM;
    uint64_t *order = malloc((size_t)n * sizeof(*order));
    uint64_t *next = malloc((size_t)n * sizeof(*next));
    if (!order || !next) {
        free(order);
        free(next);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof(*order), by_label_then_index, ds->labels);
    /* Within each run of one label: the next member, the last back to the
     * first. */
    for (uint64_t s = 0; s < n;) {
        uint64_t e = s + 1;
        while (e < n && ds->labels[order[e]] == ds->labels[order[s]])
            e++;
        for (uint64_t k = s; k < e; k++)
            next[order[k]] = ds->labels[order[k]] < 0 ? (order[k] + 1) % n
                                                      : order[k + 1 < e ? k + 1 : s];
        s = e;
    }
    free(order);
    *out = next;
    return 0;
}
