/*
 * FEEDER_OPT_AUGMENT_ON_DEVICE's host half: the augment plan's device steps
 * (its trailing run of colour jitter, random grayscale and Gaussian blur)
 * and its mixes drawn
 * per batch with augment/draw.c's draws, the ones the workers' CPU ops use
 * (same seed, epoch, dataset index, batch number and step numbers), packed
 * for the kernels (cuda/augment.cu) and enqueued after the batch's pixels
 * reach the device, before the normalise kernel.
 */
#include "cuda/layer.h"

static uint32_t device_steps(const feeder__gpu *gpu)
{
    return gpu->aug_on ? gpu->aug.nsteps - gpu->aug_first : 0;
}

static int has_blur(const feeder__gpu *gpu)
{
    for (uint32_t s = gpu->aug_first; gpu->aug_on && s < gpu->aug.nsteps; s++)
        if (gpu->aug.step[s].op == FEEDER__AUG_BLUR)
            return 1;
    return 0;
}

/* The blur's kernels of every device step and sample (floats). */
static size_t kw_floats(const feeder__gpu *gpu, uint32_t count)
{
    return (size_t)device_steps(gpu) * count * FEEDER__DAUG_KMAX;
}

int feeder__cuda_augment_start(feeder__gpu *gpu, char *why, size_t whylen)
{
    size_t batch = gpu->l->batch;
    for (int i = 0; i < gpu->depth; i++)
        if (!(gpu->ring[i].mix = calloc(batch, sizeof(feeder_mix)))) {
            feeder__fmt(why, whylen, "out of memory");
            return -ENOMEM;
        }
    if (!gpu->cfg.aug)
        return 0;
    gpu->aug = *gpu->cfg.aug;
    gpu->aug_first = gpu->cfg.aug_first <= gpu->aug.nsteps ? gpu->cfg.aug_first : gpu->aug.nsteps;
    gpu->cfg.aug = NULL; /* borrowed: the loader trims it once the layer runs */
    gpu->aug_on = 1;
    cudaError_t e = cudaSuccess;
    size_t px = (size_t)device_steps(gpu) * batch * sizeof(feeder__daug_px);
    if (px) {
        if (!(gpu->aug_dev = feeder__cuda_dev_alloc(gpu, px, &e)) ||
            !(gpu->aug_sums = feeder__cuda_dev_alloc(gpu, batch * sizeof(unsigned long long), &e)))
            return feeder__cuda_setup_fail(gpu, why, whylen,
                                           "allocating the augment kernels' parameters", e);
        for (int i = 0; i < gpu->depth; i++)
            if (!(gpu->ring[i].aug_px = feeder__cuda_pin_alloc(gpu, px, &e)))
                return feeder__cuda_setup_fail(gpu, why, whylen,
                                               "allocating pinned augment parameters", e);
    }
    size_t kw = kw_floats(gpu, (uint32_t)batch) * sizeof(float);
    if (has_blur(gpu)) {
        if (!(gpu->aug_kw_dev = feeder__cuda_dev_alloc(gpu, kw, &e)) ||
            !(gpu->aug_plane = feeder__cuda_dev_alloc(gpu, batch * gpu->l->width * gpu->l->height *
                                                           sizeof(float), &e)))
            return feeder__cuda_setup_fail(gpu, why, whylen, "allocating the blur's buffers", e);
        for (int i = 0; i < gpu->depth; i++)
            if (!(gpu->ring[i].aug_kw = feeder__cuda_pin_alloc(gpu, kw, &e)))
                return feeder__cuda_setup_fail(gpu, why, whylen,
                                               "allocating pinned blur kernels", e);
    }
    if (feeder__augment_has_mix(&gpu->aug) &&
        !(gpu->aug_tmp = feeder__cuda_dev_alloc(gpu, gpu->in_bytes, &e)))
        return feeder__cuda_setup_fail(gpu, why, whylen, "allocating the batch copy of the mixes", e);
    return 0;
}

void feeder__cuda_augment_free(feeder__gpu *gpu)
{
    for (int i = 0; gpu->ring && i < gpu->depth; i++) {
        feeder__cuda_pin_free(gpu, gpu->ring[i].aug_px);
        feeder__cuda_pin_free(gpu, gpu->ring[i].aug_kw);
        free(gpu->ring[i].mix);
    }
    feeder__cuda_dev_free(gpu, gpu->aug_dev);
    feeder__cuda_dev_free(gpu, gpu->aug_sums);
    feeder__cuda_dev_free(gpu, gpu->aug_tmp);
    feeder__cuda_dev_free(gpu, gpu->aug_kw_dev);
    feeder__cuda_dev_free(gpu, gpu->aug_plane);
}

/* Sample n's parameters for step s (a jitter or grayscale step); the
 * positions it runs into *mask. */
static void draw_sample(const feeder__gpu *gpu, uint32_t s, uint64_t epoch, uint64_t index,
                        feeder__daug_px *px, uint8_t *mask)
{
    const feeder__aug_step *st = &gpu->aug.step[s];
    memset(px, 0, sizeof(*px));
    memset(px->op, FEEDER__DAUG_NONE, sizeof(px->op));
    if (st->op == FEEDER__AUG_GRAY) {
        if (feeder__aug_gray_draw(st, gpu->cfg.seed, epoch, index, s)) {
            px->op[0] = FEEDER__DAUG_GRAY;
            *mask |= 1;
        }
        return;
    }
    feeder__jitter_draw j;
    feeder__aug_jitter_draw(st, gpu->cfg.seed, epoch, index, s, &j);
    for (int i = 0; i < 4; i++) {
        int f = j.order[i];
        if (!j.on[f])
            continue;
        px->op[i] = (uint8_t)f;
        *mask |= (uint8_t)(1u << i);
        if (f == FEEDER__DAUG_CONTRAST)
            *mask |= (uint8_t)(16u << i);
        if (f == FEEDER__DAUG_HUE) {
            px->hue = (float)j.value[f];
        } else { /* color.c's blend weights */
            px->r[f] = (float)j.value[f];
            px->q[f] = (float)(1.0 - j.value[f]);
        }
    }
}

/* A blur step k: each sample's kernel for its sigma, unless blur.c would
 * leave the image as it is (kernel of 1, or half of it not below a side). */
static void draw_blur(const feeder__gpu *gpu, ring_entry *entry, uint32_t k, const feeder_batch *host)
{
    uint32_t s = gpu->aug_first + k, count = host->count;
    const feeder__aug_step *st = &gpu->aug.step[s];
    uint32_t ksize = (uint32_t)st->ivalue, r = ksize / 2;
    if (ksize < 2 || ksize > FEEDER__DAUG_KMAX || r >= gpu->l->width || r >= gpu->l->height)
        return;
    entry->aug_mask[k] = 1;
    for (uint32_t n = 0; n < count; n++) {
        double sigma = feeder__aug_blur_draw(st, gpu->cfg.seed, host->epoch, host->indices[n], s);
        feeder__aug_gauss_kernel(entry->aug_kw + ((size_t)k * count + n) * FEEDER__DAUG_KMAX,
                                 ksize, sigma);
    }
}

int feeder__cuda_augment_draw(feeder__gpu *gpu, ring_entry *entry, const feeder_batch *host)
{
    uint32_t count = host->count, nd = device_steps(gpu);
    entry->pub.mix = NULL;
    entry->mixd.kind = FEEDER__MIX_NONE;
    if (!gpu->aug_on) {
        if (host->mix) { /* the host mixed it: lend a copy, the slot goes back */
            memcpy(entry->mix, host->mix, count * sizeof(feeder_mix));
            entry->pub.mix = entry->mix;
        }
        return 0;
    }
    /* The entry's last parameter copy must be over before they are
     * rewritten; it was enqueued a ring ago, so this rarely waits. */
    if (nd && entry->used) {
        cudaError_t e = cudaEventSynchronize(entry->copy_ev);
        if (e != cudaSuccess)
            return feeder__cuda_fail(gpu, FEEDER_ECUDA, "waiting for batch %llu's augment: %s",
                                     (unsigned long long)entry->pub.number, feeder__cuda_errtext(e));
    }
    for (uint32_t k = 0; k < nd; k++) {
        entry->aug_mask[k] = 0;
        if (gpu->aug.step[gpu->aug_first + k].op == FEEDER__AUG_BLUR) {
            draw_blur(gpu, entry, k, host);
            continue;
        }
        for (uint32_t n = 0; n < count; n++)
            draw_sample(gpu, gpu->aug_first + k, host->epoch, host->indices[n],
                        &entry->aug_px[(size_t)k * count + n], &entry->aug_mask[k]);
    }
    if (feeder__aug_mix_draw(&gpu->aug, count, gpu->l->width, gpu->l->height, gpu->cfg.seed, host->epoch,
                             host->number, &entry->mixd) != FEEDER__MIX_NONE) {
        feeder__aug_mix_entries(&entry->mixd, count, entry->mix);
        entry->pub.mix = entry->mix;
    }
    return 0;
}

cudaError_t feeder__cuda_augment_enqueue(feeder__gpu *gpu, ring_entry *entry)
{
    uint32_t nd = device_steps(gpu), count = entry->count, h = gpu->l->height, w = gpu->l->width;
    int nchw = gpu->l->layout == FEEDER_LAYOUT_NCHW;
    cudaError_t e = cudaSuccess;
    if (!gpu->aug_on || count == 0)
        return cudaSuccess;
    int any = 0, blur = 0;
    for (uint32_t k = 0; k < nd; k++) {
        int b = gpu->aug.step[gpu->aug_first + k].op == FEEDER__AUG_BLUR;
        any |= !b && entry->aug_mask[k] != 0;
        blur |= b && entry->aug_mask[k] != 0;
    }
    if (any && (e = cudaMemcpyAsync(gpu->aug_dev, entry->aug_px,
                                    (size_t)nd * count * sizeof(feeder__daug_px),
                                    cudaMemcpyHostToDevice, gpu->stream)) != cudaSuccess)
        return e;
    if (blur && (e = cudaMemcpyAsync(gpu->aug_kw_dev, entry->aug_kw,
                                     kw_floats(gpu, count) * sizeof(float), cudaMemcpyHostToDevice,
                                     gpu->stream)) != cudaSuccess)
        return e;
    for (uint32_t k = 0; k < nd; k++) {
        if (gpu->aug.step[gpu->aug_first + k].op == FEEDER__AUG_BLUR) {
            if (entry->aug_mask[k] &&
                (e = (cudaError_t)feeder__daug_blur_launch(
                     entry->stage, count, h, w, nchw,
                     gpu->aug_kw_dev + (size_t)k * count * FEEDER__DAUG_KMAX,
                     (uint32_t)gpu->aug.step[gpu->aug_first + k].ivalue, gpu->aug_plane, gpu->stream)) !=
                    cudaSuccess)
                return e;
            continue;
        }
        for (int pos = 0; pos < 4; pos++) {
            if (!(entry->aug_mask[k] & (1u << pos)))
                continue;
            e = (cudaError_t)feeder__daug_position_launch(
                entry->stage, count, h, w, nchw, gpu->aug_dev + (size_t)k * count, pos,
                (entry->aug_mask[k] >> (4 + pos)) & 1, gpu->aug_sums, gpu->stream);
            if (e != cudaSuccess)
                return e;
        }
    }
    if (entry->mixd.kind == FEEDER__MIX_NONE)
        return cudaSuccess;
    const feeder__mix_draw *m = &entry->mixd;
    uint32_t box[4] = {m->x1, m->y1, m->x2, m->y2};
    return (cudaError_t)feeder__daug_mix_launch(entry->stage, gpu->aug_tmp, count, h, w, nchw, m->kind,
                                                m->A, m->B, box, gpu->stream);
}
