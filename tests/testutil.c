/* See testutil.h. */
#include <check.h>
#include <stdio.h>

#include "testutil.h"

void tu_make_folder(const bu_photos *photos, const char *dir, const char *rel, int classes,
                    int per, const char *prefix, uint32_t w0, uint32_t wspan, uint32_t h0,
                    uint32_t hspan)
{
    for (int c = 0; c < classes; c++) {
        char cdir[512];
        snprintf(cdir, sizeof(cdir), "%s/%s/%s%d", dir, rel, prefix, c);
        ck_assert_int_eq(bu_mkdirs(cdir), 0);
        for (int i = 0; i < per; i++) {
            char p[600];
            snprintf(p, sizeof(p), "%s/%03d.jpg", cdir, i);
            uint32_t w = w0 + (uint32_t)((c * 37 + i * 53) % (int)wspan);
            uint32_t h = h0 + (uint32_t)((c * 29 + i * 71) % (int)hspan);
            ck_assert_int_eq(bu_write_jpeg(photos, p, (unsigned)(c * per + i), w, h, 85, -1,
                                           (uint64_t)(c * 1000 + i)),
                             0);
        }
    }
}

feeder_dataset *tu_open_folder(const char *dir, const char *rel)
{
    char root[512], err[512];
    snprintf(root, sizeof(root), "%s/%s", dir, rel);
    feeder_dataset *ds = NULL;
    int rc = feeder_dataset_open_folder(root, &ds, err, sizeof(err));
    ck_assert_msg(rc == 0, "open_folder: %s", err);
    return ds;
}
