/*
 * The list-file parser on a buffer. Byte 0 holds the flags (low 2 bits) and
 * a chunk size (the rest); the rest of the input is the file, parsed whole
 * and again fed to the streaming parser in chunks of that size, which must
 * give the same result (same error, or the same samples). Every accepted dataset is checked against the contract: every path
 * starts with the root (unless escapes are allowed), no '..' climbs out of
 * it, labels are non-negative and num_classes is the largest label + 1.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feeder.h"
#include "loader/loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0] & 3; /* 2: an unknown flag, refused */
    feeder_dataset *ds = NULL;
    char err[512];
    const char *root = "/fuzz/root";
    int rc = feeder__list_parse((const char *)data + 1, size - 1, "fuzz.lst", root, flags, &ds,
                                err, sizeof(err));
    feeder_dataset *ds2 = NULL;
    char err2[512];
    size_t chunk = (size_t)(data[0] >> 2) + 1;
    int rc2 = feeder__list_parse_chunked((const char *)data + 1, size - 1, chunk, "fuzz.lst",
                                         root, flags, &ds2, err2, sizeof(err2));
    if (rc2 != rc || (rc && strcmp(err, err2) != 0))
        abort();
    if (ds2) {
        if (feeder_dataset_size(ds2) != feeder_dataset_size(ds))
            abort();
        for (uint64_t i = 0; i < feeder_dataset_size(ds2); i++)
            if (strcmp(feeder_dataset_path(ds, i), feeder_dataset_path(ds2, i)) != 0 ||
                feeder_dataset_label(ds, i) != feeder_dataset_label(ds2, i))
                abort();
        feeder_dataset_destroy(ds2);
    }
    if (rc != 0) {
        if (ds || err[0] == 0)
            abort();
        if (rc != FEEDER_EDATASET && rc != FEEDER_EPATH && rc != FEEDER_EINVAL && rc != -ENOMEM)
            abort();
        return 0;
    }
    if (flags & 2)
        abort();
    uint64_t n = feeder_dataset_size(ds);
    int64_t maxlab = -1;
    for (uint64_t i = 0; i < n; i++) {
        const char *p = feeder_dataset_path(ds, i);
        int64_t lab = feeder_dataset_label(ds, i);
        if (!p || lab < 0)
            abort();
        if (lab > maxlab)
            maxlab = lab;
        if (!(flags & FEEDER_LIST_ALLOW_ESCAPE)) {
            if (strncmp(p, "/fuzz/root/", 11) != 0)
                abort();
            /* Lexically inside: walk the components after the root. */
            long depth = 0;
            for (const char *c = p + 11; *c;) {
                size_t len = strcspn(c, "/");
                if (len == 2 && c[0] == '.' && c[1] == '.')
                    depth--;
                else if (len && !(len == 1 && c[0] == '.'))
                    depth++;
                if (depth < 0)
                    abort();
                c += len;
                c += *c == '/';
            }
        }
    }
    if (n == 0 || feeder_dataset_num_classes(ds) != (uint64_t)maxlab + 1)
        abort();
    feeder_dataset_destroy(ds);
    return 0;
}
