/*
 * Detection-style samples: an image, a variable number of boxes (f32
 * [n, 4]: x0, y0, x1, y1 in pixels) and their classes (i64 [n]), the boxes
 * and classes ragged (the batch's boxes one after another, with offsets).
 * Each synthetic scene draws its boxes in their class's colour; one random
 * crop and flip (feeder_pair_crop_draw) is applied to the image and its
 * boxes together, the boxes clipped to the crop and those left outside it
 * dropped with their classes.
 *
 *   fields_detection [--workers N] [--images N] [--batch N] [--check]
 *
 * With --check every image, box and class of every batch is compared with
 * the scene it was made from, each sample must arrive once, and a checksum
 * of every field of every batch is printed (the same for any worker count).
 */
#include <feeder.h>
#include <stdio.h>
#include <string.h>

#include "fields_example.h"

#define SIDE 64
#define MAXBOX 16
#define SEED 9

typedef struct scene {
    uint8_t img[SIDE * SIDE * 3];
    float box[MAXBOX][4];
    int64_t cls[MAXBOX];
    uint64_t n;
} scene;

static void colour(int64_t cls, uint8_t *px)
{
    px[0] = (uint8_t)(40 + cls * 20);
    px[1] = (uint8_t)(200 - cls * 15);
    px[2] = (uint8_t)(cls * 25);
}

/* Scene `index`: SCENE x SCENE pixels of boxes (later ones cover earlier
 * ones), then one crop and flip (feeder_pair_crop_draw) applied to the image
 * (bilinear) and to the boxes (moved, scaled, mirrored, clipped; boxes left
 * outside the crop are dropped with their classes). */
static void make_scene(uint64_t index, uint64_t epoch, scene *s)
{
    static const int SCENE = 96;
    uint8_t big[96 * 96 * 3];
    memset(s, 0, sizeof(*s));
    memset(big, 0, sizeof(big));
    s->n = feeder_random(SEED, 0, index, 0) % (MAXBOX + 1);
    for (uint64_t k = 0; k < s->n; k++) {
        uint64_t r = feeder_random(SEED, 0, index, 1 + k);
        uint32_t x0 = (uint32_t)(r % 80), y0 = (uint32_t)((r >> 8) % 80);
        uint32_t x1 = x0 + 4 + (uint32_t)((r >> 16) % 24), y1 = y0 + 4 + (uint32_t)((r >> 24) % 24);
        x1 = x1 > (uint32_t)SCENE ? (uint32_t)SCENE : x1;
        y1 = y1 > (uint32_t)SCENE ? (uint32_t)SCENE : y1;
        s->cls[k] = (int64_t)((r >> 32) % 10);
        s->box[k][0] = (float)x0, s->box[k][1] = (float)y0;
        s->box[k][2] = (float)x1, s->box[k][3] = (float)y1;
        for (uint32_t y = y0; y < y1; y++)
            for (uint32_t x = x0; x < x1; x++)
                colour(s->cls[k], &big[(y * SCENE + x) * 3]);
    }
    feeder_pair_crop c;
    feeder_pair_crop_draw(SEED, epoch, index, SCENE, SCENE, SIDE, SIDE, 0.25, 1.0, 0.5, &c);
    feeder_pair_crop_image(&c, big, SCENE, SCENE, 3, FEEDER_INTERP_BILINEAR, s->img);
    s->n = feeder_pair_crop_boxes(&c, &s->box[0][0], s->cls, s->n);
}

static uint64_t images_len(void *user) { return *(uint64_t *)user; }

static int scene_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out,
                     char *err, size_t errlen)
{
    (void)user;
    scene s;
    make_scene(ctx->index, ctx->epoch, &s);
    int rc = feeder_sample_put(out, 0, FEEDER_ELEM_U8, s.img, SIDE);
    if (!rc)
        rc = feeder_sample_put(out, 1, FEEDER_ELEM_F32, s.box, s.n);
    if (!rc)
        rc = feeder_sample_put(out, 2, FEEDER_ELEM_I64, s.cls, s.n);
    if (rc)
        snprintf(err, errlen, "scene %llu", (unsigned long long)ctx->index);
    return rc;
}

/* A batch against the scenes it came from; 0, or -1 after printing why. */
static int check_batch(const feeder_batch *b, uint8_t *seen, uint64_t *sum)
{
    feeder_tensor img, box, cls;
    if (feeder_batch_field(b, "image", &img) || feeder_batch_field(b, "boxes", &box) ||
        feeder_batch_field(b, "classes", &cls))
        return -1;
    for (uint32_t s = 0; s < b->count; s++) {
        scene want;
        uint64_t i = b->indices[s], at = (uint64_t)box.offsets[s];
        make_scene(i, b->epoch, &want);
        int bad = seen[i]++ || (uint64_t)box.lengths[s] != want.n ||
                  box.offsets[s] != cls.offsets[s] ||
                  memcmp((uint8_t *)img.data + (size_t)s * sizeof(want.img), want.img,
                         sizeof(want.img)) ||
                  memcmp((float *)box.data + at * 4, want.box, want.n * 16) ||
                  memcmp((int64_t *)cls.data + at, want.cls, want.n * 8);
        if (bad) {
            fprintf(stderr, "scene %llu differs (or came twice)\n", (unsigned long long)i);
            return -1;
        }
    }
    *sum = fx_fnv(*sum, img.data, img.bytes);
    *sum = fx_fnv(*sum, box.data, box.bytes);
    *sum = fx_fnv(*sum, box.offsets, (b->count + 1) * 8);
    *sum = fx_fnv(*sum, cls.data, cls.bytes);
    return 0;
}

static uint64_t count_boxes(const feeder_batch *b)
{
    feeder_tensor box;
    feeder_batch_field(b, "boxes", &box);
    return box.shape[0];
}

int main(int argc, char **argv)
{
    fx_args a = {.workers = 2, .batch = 16, .images = 500};
    int pr = fx_parse(argc, argv, &a);
    if (pr)
        return pr == 1 ? 0 : 2; /* 1: --help */
    feeder_field fields[3] = {
        {"image", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 3, {SIDE, SIDE, 3}, {0}},
        {"boxes", FEEDER_ELEM_F32, FEEDER_FIELD_RAGGED, 2, {MAXBOX, 4}, {0}},
        {"classes", FEEDER_ELEM_I64, FEEDER_FIELD_RAGGED, 1, {MAXBOX}, {0}},
    };
    feeder_fields_callbacks cb = {.len = images_len, .get = scene_get};
    return fx_run(&a, &cb, fields, 3, 3, count_boxes, check_batch, "boxes",
                  "every image, box and class");
}
