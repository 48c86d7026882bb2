/*
 * dataset/schema.c: what a dataset's fields may be: the element types
 * (feeder_elem_size, feeder_elem_name) and the rules a schema obeys
 * (feeder__fields_check), shared by user fields datasets (api/fields.c) and
 * fields packed files (packed.c); collate/ lays a checked schema out.
 */
#include <stdio.h>
#include <string.h>

#include "dataset/dataset.h"

static const struct {
    const char *name;
    size_t bytes;
} ELEMS[] = {{"u8", 1}, {"i16", 2}, {"i32", 4}, {"i64", 8}, {"f16", 2}, {"bf16", 2}, {"f32", 4}};
#define NELEMS (sizeof(ELEMS) / sizeof(ELEMS[0]))

size_t feeder_elem_size(int elem)
{
    return elem >= 0 && (size_t)elem < NELEMS ? ELEMS[elem].bytes : 0;
}

const char *feeder_elem_name(int elem)
{
    return elem >= 0 && (size_t)elem < NELEMS ? ELEMS[elem].name : NULL;
}

static const char *batching_name(int b)
{
    return b == FEEDER_FIELD_FIXED ? "fixed" : b == FEEDER_FIELD_PADDED ? "padded" : "ragged";
}

/* One field's own rules; 0 or a message in err. */
static int check_one(const feeder_field *f, char *err, size_t errlen)
{
    size_t len = f->name ? strnlen(f->name, FEEDER_FIELD_NAME_MAX + 1) : 0;
    if (len == 0 || len > FEEDER_FIELD_NAME_MAX)
        return snprintf(err, errlen, "a name of 1 to %d characters is needed",
                        FEEDER_FIELD_NAME_MAX), 1;
    if (!feeder_elem_size(f->elem))
        return snprintf(err, errlen, "elem %d is no feeder_elem (0 .. %d)", (int)f->elem,
                        (int)NELEMS - 1), 1;
    if (f->batching < FEEDER_FIELD_FIXED || f->batching > FEEDER_FIELD_RAGGED)
        return snprintf(err, errlen, "batching %d is none of FIXED, PADDED, RAGGED",
                        (int)f->batching), 1;
    if (f->ndim > FEEDER_FIELD_MAX_DIMS)
        return snprintf(err, errlen, "ndim %u is more than %d", f->ndim, FEEDER_FIELD_MAX_DIMS),
               1;
    if (f->ndim == 0 && f->batching != FEEDER_FIELD_FIXED)
        return snprintf(err, errlen, "%s needs ndim >= 1 (shape[0] is the maximum rows)",
                        batching_name(f->batching)), 1;
    for (uint32_t d = 0; d < f->ndim; d++)
        if (f->shape[d] == 0)
            return snprintf(err, errlen, "shape[%u] is 0", d), 1;
    return 0;
}

int feeder__fields_check(const feeder_field *f, uint32_t n, char *err, size_t errlen)
{
    char why[160], dummy[1];
    if (!err) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    if (!f || n == 0 || n > FEEDER_FIELDS_MAX) {
        snprintf(err, errlen, "a schema needs 1 to %d fields (got %u)", FEEDER_FIELDS_MAX, n);
        return FEEDER_EINVAL;
    }
    for (uint32_t k = 0; k < n; k++) {
        const char *name = f[k].name && f[k].name[0] ? f[k].name : "";
        if (check_one(&f[k], why, sizeof(why))) {
            snprintf(err, errlen, "field %u ('%.*s'): %s", k, FEEDER_FIELD_NAME_MAX, name, why);
            return FEEDER_EINVAL;
        }
        for (uint32_t j = 0; j < k; j++)
            if (!strcmp(f[j].name, f[k].name)) {
                snprintf(err, errlen, "field %u ('%s'): the name of field %u too", k, name, j);
                return FEEDER_EINVAL;
            }
    }
    return 0;
}
