/* bench_loader --augment LIST: the augmentations recipes train with, built
 * as feeder_augment steps with torchvision's defaults, so that
 * compare_torch.py --augment LIST runs the same list on PyTorch's side. */
#include <string.h>

#include "loader.h"

/* One named step with the parameters compare_torch.py gives torchvision. */
static int add_step(feeder_augment *aug, const char *name, size_t len)
{
#define IS(s) (len == strlen(s) && !strncmp(name, s, len))
    if (IS("jitter")) /* ColorJitter(0.4, 0.4, 0.4, 0.1) */
        return feeder_augment_color_jitter(aug, 0.4, 0.4, 0.4, 0.1);
    if (IS("trivial")) /* TrivialAugmentWide() */
        return feeder_augment_trivial(aug, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE);
    if (IS("randaug")) /* RandAugment() */
        return feeder_augment_randaugment(aug, 2, 9, 31, FEEDER_INTERP_NEAREST, FEEDER_FILL_NONE);
    if (IS("gray")) /* RandomGrayscale(0.2) */
        return feeder_augment_grayscale(aug, 0.2);
    if (IS("blur")) /* GaussianBlur(5, (0.1, 2.0)) */
        return feeder_augment_blur(aug, 5, 0.1, 2.0);
    if (IS("erase")) /* RandomErasing(0.25) */
        return feeder_augment_erase(aug, 0.25, 0.02, 0.33, 0.3, 3.3, 0);
    if (IS("mixup")) /* RandomMixup(alpha 0.2) */
        return feeder_augment_mixup(aug, 0.2, 1.0);
    if (IS("cutmix")) /* RandomCutmix(alpha 1.0) */
        return feeder_augment_cutmix(aug, 1.0, 1.0);
#undef IS
    return 1;
}

feeder_augment *bl_make_augment(const char *list)
{
    feeder_augment *aug;
    if (!list || !*list)
        return NULL;
    if (feeder_augment_create(&aug))
        die("--augment: out of memory");
    for (const char *s = list; *s;) {
        size_t n = strcspn(s, ",");
        int rc = add_step(aug, s, n);
        if (rc == 1)
            die_usage("--augment '%s': '%.*s' is none of jitter, trivial, randaug, gray, blur, "
                      "erase, mixup, cutmix", list, (int)n, s);
        if (rc)
            die("--augment '%.*s': %s", (int)n, s, feeder_augment_errmsg(aug));
        s += n + (s[n] == ',');
    }
    return aug;
}
