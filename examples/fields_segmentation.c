/*
 * Segmentation-style samples: an image (u8 [H, W, 3]) and its mask (u8
 * [H, W], one class per pixel), both fixed. Each synthetic scene is a larger
 * picture of discs; one random crop (RandomResizedCrop's, scale 0.3-1) and
 * flip, drawn from (seed, epoch, index) by feeder_pair_crop_draw, is applied
 * to the image and its mask together (feeder_pair_crop_image), so every
 * pixel's class stays the class of its colour.
 *
 *   fields_segmentation [--workers N] [--images N] [--batch N] [--check]
 *
 * With --check every pixel of every image and mask is compared with the
 * scene it was cut from, every mask value must be its pixel's class, each
 * sample must arrive once, and a checksum of both fields of every batch is
 * printed (the same for any worker count).
 */
#include <feeder.h>
#include <stdio.h>
#include <string.h>

#include "fields_example.h"

#define SCENE 96 /* the picture a sample is cut from */
#define OUT 64   /* the crop */
#define DISCS 6
#define SEED 21

/* Class c's colour: distinct for c in 0..DISCS. */
static void colour(int c, uint8_t *px)
{
    px[0] = (uint8_t)(c * 37);
    px[1] = (uint8_t)(255 - c * 29);
    px[2] = (uint8_t)(c * 11 + 5);
}

static int class_of(const uint8_t *px)
{
    for (int c = 0; c <= DISCS; c++) {
        uint8_t want[3];
        colour(c, want);
        if (!memcmp(want, px, 3))
            return c;
    }
    return -1;
}

/* The scene's class at (x, y): the last disc that covers it, else 0. */
static int scene_class(uint64_t index, int x, int y)
{
    int cls = 0;
    for (int k = 0; k < DISCS; k++) {
        uint64_t r = feeder_random(SEED, 0, index, (uint64_t)k);
        int cx = (int)(r % SCENE), cy = (int)((r >> 16) % SCENE), rad = 6 + (int)((r >> 32) % 20);
        if ((x - cx) * (x - cx) + (y - cy) * (y - cy) <= rad * rad)
            cls = k + 1;
    }
    return cls;
}

/* The paired transform: one crop and flip (feeder_pair_crop_draw) for the
 * scene's image and mask, both by nearest neighbour here so every colour
 * stays a class's (a photograph would take FEEDER_INTERP_BILINEAR). */
static void cut(uint64_t index, uint64_t epoch, uint8_t *img, uint8_t *mask)
{
    uint8_t scene_img[SCENE * SCENE * 3], scene_mask[SCENE * SCENE];
    for (int y = 0; y < SCENE; y++)
        for (int x = 0; x < SCENE; x++) {
            int c = scene_class(index, x, y);
            scene_mask[y * SCENE + x] = (uint8_t)c;
            colour(c, &scene_img[(y * SCENE + x) * 3]);
        }
    feeder_pair_crop c;
    feeder_pair_crop_draw(SEED, epoch, index, SCENE, SCENE, OUT, OUT, 0.3, 1.0, 0.5, &c);
    feeder_pair_crop_image(&c, scene_img, SCENE, SCENE, 3, FEEDER_INTERP_NEAREST, img);
    feeder_pair_crop_image(&c, scene_mask, SCENE, SCENE, 1, FEEDER_INTERP_NEAREST, mask);
}

static uint64_t images_len(void *user) { return *(uint64_t *)user; }

static int scene_get(void *user, const feeder_sample_ctx *ctx, feeder_sample_out *out,
                     char *err, size_t errlen)
{
    (void)user, (void)err, (void)errlen;
    /* Fixed fields: written in place, rows preset. */
    cut(ctx->index, ctx->epoch, out->data[0], out->data[1]);
    return 0;
}

static int check_batch(const feeder_batch *b, uint8_t *seen, uint64_t *sum)
{
    feeder_tensor img, mask;
    if (feeder_batch_field(b, "image", &img) || feeder_batch_field(b, "mask", &mask))
        return -1;
    static uint8_t want_img[OUT * OUT * 3], want_mask[OUT * OUT];
    for (uint32_t s = 0; s < b->count; s++) {
        uint64_t i = b->indices[s];
        const uint8_t *gi = (const uint8_t *)img.data + (size_t)s * sizeof(want_img);
        const uint8_t *gm = (const uint8_t *)mask.data + (size_t)s * sizeof(want_mask);
        cut(i, b->epoch, want_img, want_mask);
        int bad = seen[i]++ || memcmp(gi, want_img, sizeof(want_img)) ||
                  memcmp(gm, want_mask, sizeof(want_mask));
        for (int p = 0; p < OUT * OUT && !bad; p++)
            bad = class_of(&gi[p * 3]) != gm[p];
        if (bad) {
            fprintf(stderr, "image %llu differs (or came twice)\n", (unsigned long long)i);
            return -1;
        }
    }
    *sum = fx_fnv(*sum, img.data, img.bytes);
    *sum = fx_fnv(*sum, mask.data, mask.bytes);
    return 0;
}

static uint64_t count_pixels(const feeder_batch *b) { return (uint64_t)b->count * OUT * OUT; }

int main(int argc, char **argv)
{
    fx_args a = {.workers = 2, .batch = 16, .images = 200};
    int pr = fx_parse(argc, argv, &a);
    if (pr)
        return pr == 1 ? 0 : 2; /* 1: --help */
    feeder_field fields[2] = {
        {"image", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 3, {OUT, OUT, 3}, {0}},
        {"mask", FEEDER_ELEM_U8, FEEDER_FIELD_FIXED, 2, {OUT, OUT}, {0}},
    };
    feeder_fields_callbacks cb = {.len = images_len, .get = scene_get};
    return fx_run(&a, &cb, fields, 2, 4, count_pixels, check_batch, "mask pixels",
                  "every pixel of every image and mask");
}
