/*
 * feeder/augment.h: augmentation: the user's pipeline of uint8 ops and the batch mixes.
 * Part of the public API; include <feeder.h> for all of it.
 */
#ifndef FEEDER_PUBLIC_AUGMENT_H
#define FEEDER_PUBLIC_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Augmentation                                                              */
/* ------------------------------------------------------------------------ */

/* A pipeline of augmentations the user composes, applied by the workers to
 * every sample after the geometric step of FEEDER_OPT_PIPELINE (crop and
 * resize stay as they are: EVAL, TRAIN and RESIZE are presets), on the uint8
 * HEIGHT x WIDTH x 3 sample in its batch slot, in FEEDER_OPT_LAYOUT. Steps
 * run in the order they were added. Each op follows torchvision's
 * definition on uint8 tensors (transforms.functional of torchvision 0.14:
 * the same blend formulas, the same truncation and rounding), and its
 * random parameters are drawn as torchvision draws them, from
 * feeder_random(seed, epoch, index, counter) with the step's own counters:
 * a sample's augmentation depends only on (seed, epoch, index), never on the
 * worker count or on resume. Batch-level steps (mixup, cutmix) draw from
 * (seed, epoch, batch number).
 *
 * Build one with feeder_augment_create, add steps with the
 * feeder_augment_<op> calls (each validates its parameters: FEEDER_ERANGE
 * with the bounds in feeder_augment_errmsg; FEEDER_ERANGE too past
 * FEEDER_AUGMENT_MAX_STEPS steps), and attach it with
 * feeder_loader_set_augment, which copies it.
 * Thread-safety: a feeder_augment is used by one thread at a time;
 * feeder_augment_apply only reads it. */
typedef struct feeder_augment feeder_augment;

#define FEEDER_AUGMENT_MAX_STEPS 16

/* Interpolation of the geometric ops, as torchvision's InterpolationMode. */
typedef enum feeder_interp { FEEDER_INTERP_NEAREST = 0, FEEDER_INTERP_BILINEAR = 1 } feeder_interp;

/* The fill of pixels a geometric op brings in from outside the image:
 * FEEDER_FILL_NONE is torchvision's fill=None (zeros, no mask channel);
 * 0..255 is fill=[v, v, v] (torchvision's mask blend at the border). */
#define FEEDER_FILL_NONE (-1)

/* Create an empty pipeline. 0, FEEDER_EINVAL (out NULL) or -ENOMEM. */
FEEDER_API int feeder_augment_create(feeder_augment **out);
/* Accepts NULL. */
FEEDER_API void feeder_augment_destroy(feeder_augment *aug);
/* The last failed call's message ("" after a success). Borrowed until the
 * next call on `aug`. */
FEEDER_API const char *feeder_augment_errmsg(const feeder_augment *aug);

/* RandomHorizontalFlip (vertical 0) or RandomVerticalFlip (1) with
 * probability p in [0, 1]. */
FEEDER_API int feeder_augment_flip(feeder_augment *aug, int vertical, double p);
/* RandomRotation(degrees=(-max_degrees, max_degrees)): max_degrees in
 * [0, 180]; interp a feeder_interp; fill FEEDER_FILL_NONE or 0..255. */
FEEDER_API int feeder_augment_rotate(feeder_augment *aug, double max_degrees, int interp,
                                     int fill);

/* RandomAffine's parameters (torchvision's names). */
typedef struct feeder_affine {
    double degrees;        /* angle uniform in [-degrees, degrees]; [0, 180] */
    double translate[2];   /* max shift as a share of width, height; [0, 1] */
    double scale[2];       /* scale uniform in [scale[0], scale[1]]; 0 < min <= max <= 10 */
    double shear[4];       /* x shear in [shear[0], shear[1]], y in [shear[2], shear[3]]
                              (degrees, each in [-89, 89]) */
    int interp;            /* feeder_interp */
    int fill;              /* FEEDER_FILL_NONE or 0..255 */
} feeder_affine;
/* RandomAffine. `a` is copied. */
FEEDER_API int feeder_augment_affine(feeder_augment *aug, const feeder_affine *a);

/* ColorJitter(brightness, contrast, saturation, hue): factors uniform in
 * [max(0, 1 - b), 1 + b] (b, c, s in [0, 100]) and hue shift in [-h, h]
 * (h in [0, 0.5]); 0 leaves that adjustment out; the four run in a random
 * order, as torchvision's. */
FEEDER_API int feeder_augment_color_jitter(feeder_augment *aug, double brightness,
                                           double contrast, double saturation, double hue);
/* RandomGrayscale(p): ITU-R 601 luma (0.2989 R + 0.587 G + 0.114 B,
 * truncated) written to the three channels. */
FEEDER_API int feeder_augment_grayscale(feeder_augment *aug, double p);
/* GaussianBlur(kernel_size, sigma=(sigma_min, sigma_max)): kernel_size odd
 * in [1, 63]; 0 < sigma_min <= sigma_max <= 100; reflect padding. */
FEEDER_API int feeder_augment_blur(feeder_augment *aug, uint32_t kernel_size, double sigma_min,
                                   double sigma_max);
/* RandomErasing(p, scale, ratio, value): p in [0, 1]; 0 < scale_min <=
 * scale_max < 1; 0 < ratio_min <= ratio_max <= 100; value 0..255, or -1 for
 * random bytes (torchvision's value='random' draws normal floats, which
 * have no uint8 meaning). */
FEEDER_API int feeder_augment_erase(feeder_augment *aug, double p, double scale_min,
                                    double scale_max, double ratio_min, double ratio_max,
                                    int value);
/* TrivialAugmentWide(num_magnitude_bins): bins in [2, 256]. */
FEEDER_API int feeder_augment_trivial(feeder_augment *aug, uint32_t num_bins, int interp,
                                      int fill);
/* RandAugment(num_ops, magnitude, num_magnitude_bins): num_ops in [1, 16],
 * magnitude in [0, num_bins - 1], num_bins in [2, 256]. */
FEEDER_API int feeder_augment_randaugment(feeder_augment *aug, uint32_t num_ops,
                                          uint32_t magnitude, uint32_t num_bins, int interp,
                                          int fill);
/* Batch-level MixUp and CutMix, as torchvision's reference scripts'
 * RandomMixup / RandomCutmix: with probability p (in [0, 1]) per batch,
 * lambda ~ Beta(alpha, alpha) (alpha in (0, 100]) and each sample mixed
 * with the one before it in the batch (the batch rolled by one). With both
 * set, each batch picks one of the two with equal chance. The images are
 * mixed in the slot; the labels stay the hard ones and batch->mix gives each
 * sample's partner and lambda (feeder_batch_soft_labels). One call each. */
FEEDER_API int feeder_augment_mixup(feeder_augment *aug, double alpha, double p);
FEEDER_API int feeder_augment_cutmix(feeder_augment *aug, double alpha, double p);

/* How a mixed sample was made: lambda of its own image and label, 1 -
 * lambda of those of sample `partner` (a position in the same batch). */
typedef struct feeder_mix {
    uint32_t partner;
    float lambda;
} feeder_mix;

/* Soft targets of a batch (host or device: labels and mix are host
 * memory in both): out[i * num_classes + c], count x
 * num_classes floats, each row summing to 1: lambda on the sample's label
 * and 1 - lambda on its partner's (a one-hot row when the batch was not
 * mixed). FEEDER_ERANGE when a label is not below num_classes. `out` is
 * the caller's. Thread-safe. */
FEEDER_API int feeder_batch_soft_labels(const feeder_batch *b, uint32_t num_classes,
                                        float *out);

/* Attach `aug` (copied; NULL removes the pipeline) to the loader. Before
 * start only: FEEDER_ESTATE after. Per-sample steps need pixels in the
 * slot: with FEEDER_DECODER_NVJPEG / HYBRID the loader then decodes on the
 * CPU (feeder_loader_decoder says why), and packed RAW records are copied
 * through the slots rather than read straight to the device. With device
 * batches and FEEDER_OPT_AUGMENT_ON_DEVICE 1, the plan's trailing colour
 * jitter / random grayscale / Gaussian blur steps and its mixup / cutmix
 * run as kernels on the device batch instead, with the same draws (bytes
 * within +-1 of the host's, equal b->mix); a GPU decoder keeps decoding
 * when every per-sample step runs there. Thread-safety: as feeder_next. */
FEEDER_API int feeder_loader_set_augment(feeder_loader *ld, const feeder_augment *aug);

/* Apply the per-sample steps of `aug` to one image (width x height x 3
 * uint8 in `layout`; gray ones: feeder_augment_apply_channels) in place, as a worker would for sample `index` of
 * `epoch` with `seed`. For tests and for users who augment outside a
 * loader. 0, FEEDER_EINVAL, or -ENOMEM. Thread-safe. */
FEEDER_API int feeder_augment_apply(const feeder_augment *aug, uint8_t *img, uint32_t width,
                                    uint32_t height, int layout, uint64_t seed, uint64_t epoch,
                                    uint64_t index);
/* The same for an image of `channels` 3 (as feeder_augment_apply) or 1
 * (width x height gray bytes; NHWC and NCHW are the same bytes): every op
 * runs on the one plane as torchvision's does on a 1-channel tensor (the
 * flips, rotate, affine, brightness, contrast against the image's own
 * mean, blur, sharpness, erasing, posterize, solarize, autocontrast,
 * equalize, the TrivialAugment and RandAugment ops); saturation, hue and
 * grayscale leave it as it is. A gray loader (FEEDER_OPT_CHANNELS 1) gives
 * the same bytes. FEEDER_EINVAL for channels other than 1 and 3. */
FEEDER_API int feeder_augment_apply_channels(const feeder_augment *aug, uint8_t *img,
                                             uint32_t width, uint32_t height, uint32_t channels,
                                             int layout, uint64_t seed, uint64_t epoch,
                                             uint64_t index);

#ifdef __cplusplus
}
#endif
#endif /* FEEDER_PUBLIC_AUGMENT_H */
