/*
 * RandomErasing (torchvision 0.14 transforms.RandomErasing): with
 * probability p, up to ten attempts at a box of area share uniform in
 * [scale_min, scale_max] and log aspect ratio uniform in [log ratio_min,
 * log ratio_max], h = round(sqrt(area * ratio)), w = round(sqrt(area /
 * ratio)) (Python's round), kept when h < H and w < W, at a top-left
 * uniform in [0, H - h] x [0, W - w]; no attempt fitting means no erase.
 * Counters of step s (k): 0 apply, 4a + 1 .. 4a + 4 attempt a's draws (as
 * the crop's, so no draw depends on how many attempts failed), from 64 on
 * the random bytes (eight per draw).
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"

enum { ERASE_ATTEMPTS = 10, ERASE_BYTES_COUNTER = 64 };

typedef struct box {
    uint32_t x, y, w, h;
} box;

static int erase_box(uint32_t W, uint32_t H, const feeder__aug_step *st, uint64_t seed,
                     uint64_t epoch, uint64_t index, uint32_t s, box *b)
{
    double area = (double)W * H, lr0 = log(st->a[3]), lr1 = log(st->a[4]);
    for (uint32_t a = 0; a < ERASE_ATTEMPTS; a++) {
        uint64_t k = 1 + 4 * (uint64_t)a;
        double u0 = feeder_random_uniform(seed, epoch, index, FEEDER__AUG_COUNTER(s, k));
        double u1 = feeder_random_uniform(seed, epoch, index, FEEDER__AUG_COUNTER(s, k + 1));
        double target = area * (st->a[1] + (st->a[2] - st->a[1]) * u0);
        double ratio = exp(lr0 + (lr1 - lr0) * u1);
        double h = feeder__round_half_even(sqrt(target * ratio));
        double w = feeder__round_half_even(sqrt(target / ratio));
        if (!(h < H && w < W))
            continue;
        b->h = (uint32_t)h;
        b->w = (uint32_t)w;
        b->y = (uint32_t)(feeder_random(seed, epoch, index, FEEDER__AUG_COUNTER(s, k + 2)) %
                          (H - b->h + 1));
        b->x = (uint32_t)(feeder_random(seed, epoch, index, FEEDER__AUG_COUNTER(s, k + 3)) %
                          (W - b->w + 1));
        return 1;
    }
    return 0;
}

int feeder__aug_erase(feeder__aimg im, const feeder__aug_step *st, uint64_t seed,
                      uint64_t epoch, uint64_t index, uint32_t s)
{
    if (feeder_random_uniform(seed, epoch, index, FEEDER__AUG_COUNTER(s, 0)) >= st->a[0])
        return 0;
    box b;
    if (!erase_box(im.w, im.h, st, seed, epoch, index, s, &b))
        return 0;
    uint64_t draw = 0, bits = 0;
    uint64_t k = ERASE_BYTES_COUNTER;
    for (uint32_t c = 0; c < im.nc; c++)
        for (uint32_t y = b.y; y < b.y + b.h; y++)
            for (uint32_t x = b.x; x < b.x + b.w; x++) {
                uint8_t v = (uint8_t)st->ivalue;
                if (st->ivalue < 0) {
                    if (!draw) {
                        bits = feeder_random(seed, epoch, index, FEEDER__AUG_COUNTER(s, k++));
                        draw = 8;
                    }
                    v = (uint8_t)bits;
                    bits >>= 8;
                    draw--;
                }
                im.p[((size_t)y * im.w + x) * im.ps + (size_t)c * im.cs] = v;
            }
    return 1;
}
