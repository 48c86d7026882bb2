/*
 * augment/: the user's augmentation pipeline (feeder_augment), applied to a
 * uint8 RGB sample after the geometric step, and the batch-level mixes.
 * Rank 1, beside decode/: it includes only common/ and itself. What rooms
 * above use: the plan (pointer-free, so a forked worker inherits it with the
 * job), feeder__augment_apply for one sample and feeder__augment_mix for a
 * complete batch. The op families (color.c, geometry.c, blur.c, erase.c,
 * autoaugment.c, mix.c) are reached through this header too, for the tests
 * and bench_augment.
 *
 * Random draws: step s of the plan draws feeder_random(seed, epoch, index,
 * FEEDER__AUG_COUNTER(s, k)) for its k-th number, so no step's draws depend
 * on another's and none meets the crop's counters (0..40). The mixes draw
 * with index = batch number and FEEDER__AUG_MIX_COUNTER(k).
 */
#ifndef FEEDER_AUGMENT_H
#define FEEDER_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "augment/pixel.h"
#include "common/common.h"

#define FEEDER__AUG_COUNTER(s, k) ((((uint64_t)(s) + 1) << 32) | (uint64_t)(k))
#define FEEDER__AUG_MIX_COUNTER(k) ((UINT64_C(0xFFFF) << 32) | (uint64_t)(k))

enum feeder__aug_op {
    FEEDER__AUG_FLIP = 1,
    FEEDER__AUG_ROTATE,
    FEEDER__AUG_AFFINE,
    FEEDER__AUG_JITTER,
    FEEDER__AUG_GRAY,
    FEEDER__AUG_BLUR,
    FEEDER__AUG_ERASE,
    FEEDER__AUG_TRIVIAL,
    FEEDER__AUG_RANDAUG
};

/* One step; `a` holds its parameters in the order of its feeder_augment_
 * call (feeder.h). */
typedef struct feeder__aug_step {
    int op;
    int interp;
    int fill;     /* FEEDER_FILL_NONE or 0..255 */
    int ivalue;   /* flip: vertical; erase: value; blur: kernel; auto: bins, ops, magnitude */
    uint32_t u[3];
    double a[10];
} feeder__aug_step;

typedef struct feeder__augment_plan {
    uint32_t nsteps;
    feeder__aug_step step[FEEDER_AUGMENT_MAX_STEPS];
    double mixup_alpha, mixup_p; /* alpha 0: no mixup */
    double cutmix_alpha, cutmix_p;
} feeder__augment_plan;

struct feeder_augment {
    feeder__augment_plan plan;
    char errmsg[256];
};

/* An image view: pixel (x, y) channel c < nc at p[(y * w + x) * ps + c * cs]
 * (NHWC: ps 3, cs 1; NCHW: ps 1, cs w * h; gray, either layout: nc 1, ps 1,
 * cs w * h, one plane). */
typedef struct feeder__aimg {
    uint8_t *p;
    uint32_t w, h;
    uint32_t ps;
    size_t cs;
    uint32_t nc; /* channels: 3, or 1 for a gray image */
} feeder__aimg;

static inline feeder__aimg feeder__aimg_make(uint8_t *p, uint32_t w, uint32_t h, int layout)
{
    feeder__aimg im = {p, w, h, 3, 1, 3};
    if (layout == FEEDER_LAYOUT_NCHW) {
        im.ps = 1;
        im.cs = (size_t)w * h;
    }
    return im;
}

/* The view of a sample of `channels` (3, or 1: gray) in `layout`. */
static inline feeder__aimg feeder__aimg_make_ch(uint8_t *p, uint32_t w, uint32_t h, int layout,
                                                int channels)
{
    feeder__aimg im = feeder__aimg_make(p, w, h, layout);
    if (channels == 1) {
        im.ps = 1;
        im.cs = (size_t)w * h;
        im.nc = 1;
    }
    return im;
}

/* 1 when the plan has per-sample steps; batch-level ones. */
static inline int feeder__augment_has_sample_steps(const feeder__augment_plan *p)
{
    return p && p->nsteps > 0;
}
static inline int feeder__augment_has_mix(const feeder__augment_plan *p)
{
    return p && (p->mixup_alpha > 0 || p->cutmix_alpha > 0);
}

/* Scratch an apply of a w x h image needs (bytes). */
size_t feeder__augment_scratch_bytes(uint32_t w, uint32_t h);

/* Run the plan's per-sample steps on one sample in place. `scratch` holds
 * feeder__augment_scratch_bytes(w, h). Never fails. */
void feeder__augment_apply(const feeder__augment_plan *plan, uint8_t *sample, uint32_t w,
                           uint32_t h, int layout, uint64_t seed, uint64_t epoch, uint64_t index,
                           void *scratch);
/* The same for a sample of `channels` (3, or 1: gray). On gray samples the
 * ops do what torchvision's do on a 1-channel tensor: saturation, hue and
 * grayscale leave it as it is, contrast blends with the image's own mean,
 * the others work on the one plane. */
void feeder__augment_apply_ch(const feeder__augment_plan *plan, uint8_t *sample, uint32_t w,
                              uint32_t h, int layout, int channels, uint64_t seed, uint64_t epoch,
                              uint64_t index, void *scratch);

/* Mix a complete batch of `count` samples (mixup or cutmix, as the plan and
 * the batch's draws say) in place; `mix` gets count entries. Returns 1 when
 * the batch was mixed, 0 when it was left as it is (mix untouched).
 * `scratch` holds one sample. */
int feeder__augment_mix(const feeder__augment_plan *plan, uint8_t *data, uint32_t count,
                        uint32_t w, uint32_t h, int layout, uint64_t seed, uint64_t epoch,
                        uint64_t batch, feeder_mix *mix, uint8_t *scratch);
/* The same for samples of `channels` (3, or 1: gray). */
int feeder__augment_mix_ch(const feeder__augment_plan *plan, uint8_t *data, uint32_t count,
                           uint32_t w, uint32_t h, int layout, int channels, uint64_t seed,
                           uint64_t epoch, uint64_t batch, feeder_mix *mix, uint8_t *scratch);

/* ---- the ops (torchvision's functional definitions on uint8) ---- */

/* color.c */
void feeder__aug_brightness(feeder__aimg im, double factor);
void feeder__aug_contrast(feeder__aimg im, double factor);
void feeder__aug_saturation(feeder__aimg im, double factor);
void feeder__aug_hue(feeder__aimg im, double hue);
void feeder__aug_grayscale(feeder__aimg im);
void feeder__aug_posterize(feeder__aimg im, int bits);
void feeder__aug_solarize(feeder__aimg im, double threshold);
void feeder__aug_autocontrast(feeder__aimg im);
void feeder__aug_equalize(feeder__aimg im);

/* blur.c; `scratch` holds feeder__augment_scratch_bytes */
void feeder__aug_sharpness(feeder__aimg im, double factor, void *scratch);
void feeder__aug_gaussian_blur(feeder__aimg im, uint32_t ksize, double sigma, void *scratch);

/* geometry.c */
void feeder__aug_flip(feeder__aimg im, int vertical);
/* torchvision's affine(angle, translate, scale, shear, center): `center`
 * NULL is the image centre, else a point in pixels. */
void feeder__aug_affine(feeder__aimg im, double angle, double tx, double ty, double scale,
                        double shear_x, double shear_y, const double *center, int interp,
                        int fill, void *scratch);
/* torchvision's rotate(angle) about the centre, expand False. */
void feeder__aug_rotate(feeder__aimg im, double angle, int interp, int fill, void *scratch);

/* simd_x86.c: the x86 vector loops, picked at run time where the CPU has
 * the instructions (feeder__aug_have_*); none in builds with
 * FEEDER_AUGMENT_NO_CLONES (test_augment_baseline) or off x86-64. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(FEEDER_AUGMENT_NO_CLONES)
#define FEEDER__AUG_X86 1
#else
#define FEEDER__AUG_X86 0
#endif
int feeder__aug_have_ssse3(void);
int feeder__aug_have_avx2(void);
int feeder__aug_have_vbmi(void); /* AVX-512 F, BW and VBMI */
/* Horizontal flip of `rows` rows of w 3-byte pixels, in place: SSSE3, and
 * AVX-512 VBMI (64-pixel groups from both ends, then the middle at once). */
void feeder__aug_hflip3_ssse3(uint8_t *p, uint32_t w, size_t rows);
void feeder__aug_hflip3_vbmi(uint8_t *p, uint32_t w, size_t rows);
/* A warp's source and matrix for the AVX2 rows: pixel i's channels are
 * bytes 0 .. nc - 1 of the 4 bytes at src + i * bpp (readable). */
typedef struct feeder__vwarp {
    const uint8_t *src;
    int bpp, nc;
    uint32_t w, h;
    float t[6];
    int interp, fill;
} feeder__vwarp;
/* Row y's pixels [0, w rounded down to 8) into dst (pixel stride ps,
 * channel stride cs); returns where it stopped. */
uint32_t feeder__aug_warp_row_avx2(const feeder__vwarp *v, uint32_t y, uint8_t *dst,
                                   size_t ps, size_t cs);
/* n pixels of three planes cs apart as 4-byte pixels. */
void feeder__aug_planes_to_rgbx(const uint8_t *restrict p, size_t cs, size_t n,
                                uint32_t *restrict q);

/* erase.c: RandomErasing with step s's draws; returns 1 when it erased. */
int feeder__aug_erase(feeder__aimg im, const feeder__aug_step *st, uint64_t seed,
                      uint64_t epoch, uint64_t index, uint32_t s);

/* autoaugment.c: TrivialAugmentWide / RandAugment with step s's draws. */
void feeder__aug_auto(feeder__aimg im, const feeder__aug_step *st, uint64_t seed,
                      uint64_t epoch, uint64_t index, uint32_t s, void *scratch);
/* One op of the shared op set by number (0 Identity .. 13 Equalize, the
 * order of torchvision's _augmentation_space) with its signed magnitude. */
void feeder__aug_auto_op(feeder__aimg im, int op, double magnitude, int interp, int fill,
                         void *scratch);

/* draw.c: a Beta(alpha, alpha) draw from the batch's stream, from counter
 * k0 on. */
double feeder__aug_beta(double alpha, uint64_t seed, uint64_t epoch, uint64_t batch,
                        uint64_t k0);

/* ---- draw.c: the random parameters shared by the CPU ops and the GPU
 * layer's kernels (cuda/augment.cu); draw.c is compiled into the GPU plugin
 * too, so neither side has draw logic of its own ---- */

/* ColorJitter's draws of step s for one sample: the order of the four ops
 * (0 brightness, 1 contrast, 2 saturation, 3 hue), and by op whether it
 * runs (its parameter > 0) and its factor (hue: its shift). */
typedef struct feeder__jitter_draw {
    int order[4];
    int on[4];
    double value[4];
} feeder__jitter_draw;
void feeder__aug_jitter_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                             uint64_t index, uint32_t s, feeder__jitter_draw *out);
/* RandomGrayscale of step s: 1 when the sample turns gray. */
int feeder__aug_gray_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                          uint64_t index, uint32_t s);
/* GaussianBlur of step s: the sample's sigma; and torchvision's 1-D kernel
 * of ksize (<= 63) float32 weights for a sigma (blur.c and the GPU kernel
 * both convolve with it). */
double feeder__aug_blur_draw(const feeder__aug_step *st, uint64_t seed, uint64_t epoch,
                             uint64_t index, uint32_t s);
void feeder__aug_gauss_kernel(float *k, uint32_t ksize, double sigma);

enum { FEEDER__MIX_NONE = 0, FEEDER__MIX_MIXUP = 1, FEEDER__MIX_CUTMIX = 2 };
/* A batch's mix: its kind, the labels' lambda, mixup's 16-bit fixed-point
 * weights (a pixel is (A x + B y + 2^15) >> 16, y the partner's) and
 * CutMix's box [x1, x2) x [y1, y2), pasted from the partner. */
typedef struct feeder__mix_draw {
    int kind;
    double lambda;
    uint32_t A, B;
    uint32_t x1, y1, x2, y2;
} feeder__mix_draw;
/* The draws of batch `batch` (count samples of w x h); its kind. */
int feeder__aug_mix_draw(const feeder__augment_plan *plan, uint32_t count, uint32_t w,
                         uint32_t h, uint64_t seed, uint64_t epoch, uint64_t batch,
                         feeder__mix_draw *m);
/* batch->mix of a mixed batch: sample i's partner is i - 1 (0's the last). */
void feeder__aug_mix_entries(const feeder__mix_draw *m, uint32_t count, feeder_mix *mix);

/* plan.c: where the plan's trailing run of steps the GPU layer can run
 * (colour jitter, random grayscale, Gaussian blur) begins; nsteps when the
 * last step is another op. Steps [first, nsteps) may run on the device, after the
 * workers' steps [0, first), with their own step numbers' draws. */
uint32_t feeder__augment_device_first(const feeder__augment_plan *p);

#endif
