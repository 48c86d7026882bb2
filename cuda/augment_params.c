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

static uint32_t device_steps(const feeder__gpu *g)
{
    return g->aug_on ? g->aug.nsteps - g->aug_first : 0;
}

static int has_blur(const feeder__gpu *g)
{
    for (uint32_t s = g->aug_first; g->aug_on && s < g->aug.nsteps; s++)
        if (g->aug.step[s].op == FEEDER__AUG_BLUR)
            return 1;
    return 0;
}

/* The blur's kernels of every device step and sample (floats). */
static size_t kw_floats(const feeder__gpu *g, uint32_t count)
{
    return (size_t)device_steps(g) * count * FEEDER__DAUG_KMAX;
}

int feeder__cuda_augment_start(feeder__gpu *g, char *why, size_t whylen)
{
    size_t batch = g->l->batch;
    for (int i = 0; i < g->depth; i++)
        if (!(g->e[i].mix = calloc(batch, sizeof(feeder_mix)))) {
            feeder__fmt(why, whylen, "out of memory");
            return -ENOMEM;
        }
    if (!g->cfg.aug)
        return 0;
    g->aug = *g->cfg.aug;
    g->aug_first = g->cfg.aug_first <= g->aug.nsteps ? g->cfg.aug_first : g->aug.nsteps;
    g->cfg.aug = NULL; /* borrowed: the loader trims it once the layer runs */
    g->aug_on = 1;
    cudaError_t e = cudaSuccess;
    size_t px = (size_t)device_steps(g) * batch * sizeof(feeder__daug_px);
    if (px) {
        if (!(g->aug_dev = feeder__cuda_dev_alloc(g, px, &e)) ||
            !(g->aug_sums = feeder__cuda_dev_alloc(g, batch * sizeof(unsigned long long), &e)))
            return feeder__cuda_setup_fail(g, why, whylen,
                                           "allocating the augment kernels' parameters", e);
        for (int i = 0; i < g->depth; i++)
            if (!(g->e[i].aug_px = feeder__cuda_pin_alloc(g, px, &e)))
                return feeder__cuda_setup_fail(g, why, whylen,
                                               "allocating pinned augment parameters", e);
    }
    size_t kw = kw_floats(g, (uint32_t)batch) * sizeof(float);
    if (has_blur(g)) {
        if (!(g->aug_kw_dev = feeder__cuda_dev_alloc(g, kw, &e)) ||
            !(g->aug_plane = feeder__cuda_dev_alloc(g, batch * g->l->width * g->l->height *
                                                           sizeof(float), &e)))
            return feeder__cuda_setup_fail(g, why, whylen, "allocating the blur's buffers", e);
        for (int i = 0; i < g->depth; i++)
            if (!(g->e[i].aug_kw = feeder__cuda_pin_alloc(g, kw, &e)))
                return feeder__cuda_setup_fail(g, why, whylen,
                                               "allocating pinned blur kernels", e);
    }
    if (feeder__augment_has_mix(&g->aug) &&
        !(g->aug_tmp = feeder__cuda_dev_alloc(g, g->in_bytes, &e)))
        return feeder__cuda_setup_fail(g, why, whylen, "allocating the batch copy of the mixes", e);
    return 0;
}

void feeder__cuda_augment_free(feeder__gpu *g)
{
    for (int i = 0; g->e && i < g->depth; i++) {
        feeder__cuda_pin_free(g, g->e[i].aug_px);
        feeder__cuda_pin_free(g, g->e[i].aug_kw);
        free(g->e[i].mix);
    }
    feeder__cuda_dev_free(g, g->aug_dev);
    feeder__cuda_dev_free(g, g->aug_sums);
    feeder__cuda_dev_free(g, g->aug_tmp);
    feeder__cuda_dev_free(g, g->aug_kw_dev);
    feeder__cuda_dev_free(g, g->aug_plane);
}

/* Sample n's parameters for step s (a jitter or grayscale step); the
 * positions it runs into *mask. */
static void draw_sample(const feeder__gpu *g, uint32_t s, uint64_t epoch, uint64_t index,
                        feeder__daug_px *px, uint8_t *mask)
{
    const feeder__aug_step *st = &g->aug.step[s];
    memset(px, 0, sizeof(*px));
    memset(px->op, FEEDER__DAUG_NONE, sizeof(px->op));
    if (st->op == FEEDER__AUG_GRAY) {
        if (feeder__aug_gray_draw(st, g->cfg.seed, epoch, index, s)) {
            px->op[0] = FEEDER__DAUG_GRAY;
            *mask |= 1;
        }
        return;
    }
    feeder__jitter_draw j;
    feeder__aug_jitter_draw(st, g->cfg.seed, epoch, index, s, &j);
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
static void draw_blur(const feeder__gpu *g, entry *en, uint32_t k, const feeder_batch *hb)
{
    uint32_t s = g->aug_first + k, count = hb->count;
    const feeder__aug_step *st = &g->aug.step[s];
    uint32_t ksize = (uint32_t)st->ivalue, r = ksize / 2;
    if (ksize < 2 || ksize > FEEDER__DAUG_KMAX || r >= g->l->width || r >= g->l->height)
        return;
    en->aug_mask[k] = 1;
    for (uint32_t n = 0; n < count; n++) {
        double sigma = feeder__aug_blur_draw(st, g->cfg.seed, hb->epoch, hb->indices[n], s);
        feeder__aug_gauss_kernel(en->aug_kw + ((size_t)k * count + n) * FEEDER__DAUG_KMAX,
                                 ksize, sigma);
    }
}

int feeder__cuda_augment_draw(feeder__gpu *g, entry *en, const feeder_batch *hb)
{
    uint32_t count = hb->count, nd = device_steps(g);
    en->pub.mix = NULL;
    en->mixd.kind = FEEDER__MIX_NONE;
    if (!g->aug_on) {
        if (hb->mix) { /* the host mixed it: lend a copy, the slot goes back */
            memcpy(en->mix, hb->mix, count * sizeof(feeder_mix));
            en->pub.mix = en->mix;
        }
        return 0;
    }
    /* The entry's last parameter copy must be over before they are
     * rewritten; it was enqueued a ring ago, so this rarely waits. */
    if (nd && en->used) {
        cudaError_t e = cudaEventSynchronize(en->copy_ev);
        if (e != cudaSuccess)
            return feeder__cuda_fail(g, FEEDER_ECUDA, "waiting for batch %llu's augment: %s",
                                     (unsigned long long)en->pub.number, feeder__cuda_errtext(e));
    }
    for (uint32_t k = 0; k < nd; k++) {
        en->aug_mask[k] = 0;
        if (g->aug.step[g->aug_first + k].op == FEEDER__AUG_BLUR) {
            draw_blur(g, en, k, hb);
            continue;
        }
        for (uint32_t n = 0; n < count; n++)
            draw_sample(g, g->aug_first + k, hb->epoch, hb->indices[n],
                        &en->aug_px[(size_t)k * count + n], &en->aug_mask[k]);
    }
    if (feeder__aug_mix_draw(&g->aug, count, g->l->width, g->l->height, g->cfg.seed, hb->epoch,
                             hb->number, &en->mixd) != FEEDER__MIX_NONE) {
        feeder__aug_mix_entries(&en->mixd, count, en->mix);
        en->pub.mix = en->mix;
    }
    return 0;
}

cudaError_t feeder__cuda_augment_enqueue(feeder__gpu *g, entry *en)
{
    uint32_t nd = device_steps(g), count = en->count, h = g->l->height, w = g->l->width;
    int nchw = g->l->layout == FEEDER_LAYOUT_NCHW;
    cudaError_t e = cudaSuccess;
    if (!g->aug_on || count == 0)
        return cudaSuccess;
    int any = 0, blur = 0;
    for (uint32_t k = 0; k < nd; k++) {
        int b = g->aug.step[g->aug_first + k].op == FEEDER__AUG_BLUR;
        any |= !b && en->aug_mask[k] != 0;
        blur |= b && en->aug_mask[k] != 0;
    }
    if (any && (e = cudaMemcpyAsync(g->aug_dev, en->aug_px,
                                    (size_t)nd * count * sizeof(feeder__daug_px),
                                    cudaMemcpyHostToDevice, g->stream)) != cudaSuccess)
        return e;
    if (blur && (e = cudaMemcpyAsync(g->aug_kw_dev, en->aug_kw,
                                     kw_floats(g, count) * sizeof(float), cudaMemcpyHostToDevice,
                                     g->stream)) != cudaSuccess)
        return e;
    for (uint32_t k = 0; k < nd; k++) {
        if (g->aug.step[g->aug_first + k].op == FEEDER__AUG_BLUR) {
            if (en->aug_mask[k] &&
                (e = (cudaError_t)feeder__daug_blur_launch(
                     en->stage, count, h, w, nchw,
                     g->aug_kw_dev + (size_t)k * count * FEEDER__DAUG_KMAX,
                     (uint32_t)g->aug.step[g->aug_first + k].ivalue, g->aug_plane, g->stream)) !=
                    cudaSuccess)
                return e;
            continue;
        }
        for (int pos = 0; pos < 4; pos++) {
            if (!(en->aug_mask[k] & (1u << pos)))
                continue;
            e = (cudaError_t)feeder__daug_position_launch(
                en->stage, count, h, w, nchw, g->aug_dev + (size_t)k * count, pos,
                (en->aug_mask[k] >> (4 + pos)) & 1, g->aug_sums, g->stream);
            if (e != cudaSuccess)
                return e;
        }
    }
    if (en->mixd.kind == FEEDER__MIX_NONE)
        return cudaSuccess;
    const feeder__mix_draw *m = &en->mixd;
    uint32_t box[4] = {m->x1, m->y1, m->x2, m->y2};
    return (cudaError_t)feeder__daug_mix_launch(en->stage, g->aug_tmp, count, h, w, nchw, m->kind,
                                                m->A, m->B, box, g->stream);
}
