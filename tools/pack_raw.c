/*
 * RAW records (--mode raw): the library's loader decodes and transforms each
 * sample once, and its tensor is the record (pack_writer.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_writer.h"

/* The loader that makes RAW records: EVAL, sequential, over `sampler` (NULL:
 * every sample). */
static feeder_loader *raw_loader(const fpk_opts *o, feeder_dataset *ds, feeder_sampler *sampler,
                                 int workers, int policy)
{
    feeder_loader *ld;
    int rc = feeder_loader_create(ds, sampler, &ld);
    if (rc)
        fpk_die("feeder_loader_create: %s", feeder_strerror(rc));
    fpk_set_opt(ld, FEEDER_OPT_PIPELINE, FEEDER_PIPELINE_EVAL);
    fpk_set_opt(ld, FEEDER_OPT_SHUFFLE, 0);
    fpk_set_opt(ld, FEEDER_OPT_BATCH_SIZE, o->batch);
    fpk_set_opt(ld, FEEDER_OPT_NUM_WORKERS, workers);
    fpk_set_opt(ld, FEEDER_OPT_HEIGHT, o->height);
    fpk_set_opt(ld, FEEDER_OPT_WIDTH, o->width);
    fpk_set_opt(ld, FEEDER_OPT_RESIZE, o->resize);
    fpk_set_opt(ld, FEEDER_OPT_LAYOUT, o->layout);
    fpk_set_opt(ld, FEEDER_OPT_CHANNELS, fpk_raw_channels(o));
    fpk_set_opt(ld, FEEDER_OPT_IO, o->io);
    fpk_set_opt(ld, FEEDER_OPT_ERROR_POLICY, policy);
    return ld;
}

/* What messages call sample i: its path, or "SHARD: key KEY". */
static void sample_name(const feeder_dataset *ds, uint64_t i, char *name, size_t len)
{
    const char *path = feeder_dataset_path(ds, i), *key = NULL;
    if (path) {
        snprintf(name, len, "%s", path);
        return;
    }
    feeder_dataset_tar_sample(ds, i, &path, &key, NULL, NULL, NULL);
    snprintf(name, len, "%s: key %s", path ? path : "?", key ? key : "?");
}

/* Why the loader left sample i out: it is loaded again alone, in this
 * process, under the fail policy, whose message says why. */
static void raw_bad(const fpk_opts *o, feeder_dataset *ds, uint64_t i)
{
    feeder_sampler *one;
    if (feeder_sampler_subset(&i, 1, 0, 0, &one))
        fpk_die("out of memory");
    feeder_loader *ld = raw_loader(o, ds, one, 0, FEEDER_ON_ERROR_FAIL);
    feeder_batch *b;
    char name[8400];
    sample_name(ds, i, name, sizeof(name));
    int rc = feeder_next(ld, &b);
    if (rc == 0) {
        feeder_batch_release(b, NULL);
        fpk_bad_add(i,
                    "%s: failed to load, then loaded when tried again alone (does it change?)",
                    name);
    } else {
        /* The loader's message names the batch, the sample and its path
         * ("batch 0 of epoch 0: sample I (PATH): why"): keep the why. */
        const char *msg = feeder_loader_errmsg(ld), *why = strstr(msg, name);
        why = why && !strncmp(why + strlen(name), "): ", 3) ? why + strlen(name) + 3 : msg;
        fpk_bad_add(i, "%s: %s", name, why);
    }
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(one);
}

/* RAW: the loader decodes keep[0..nk) (EVAL, sequential, N workers) and
 * leaves out the samples it cannot load (FEEDER_ON_ERROR_DROP); record r is
 * keep[r]'s tensor. A left-out sample is a bad file: its record stays a
 * hole and fpk_pack lists it (then writes nothing, or packs again without
 * it). */
uint64_t fpk_write_raw(const fpk_opts *o, feeder_dataset *ds, const uint64_t *keep,
                       uint64_t nk, shard *v, uint32_t ns, uint64_t rb, progress *pg)
{
    feeder_sampler *sub = NULL;
    if (nk < feeder_dataset_size(ds) && feeder_sampler_subset(keep, nk, 0, 0, &sub))
        fpk_die("out of memory");
    feeder_loader *ld = raw_loader(o, ds, sub, o->workers, FEEDER_ON_ERROR_DROP);
    uint64_t r = 0, bytes = 0, nleft = 0, *left = NULL;
    uint32_t s = 0;
    feeder_batch *b;
    int rc;
    while ((rc = feeder_next(ld, &b)) == 0) {
        for (uint32_t j = 0; j < b->count; j++, r++) {
            for (; r < nk && keep[r] != b->indices[j]; r++) {
                if (!(left = realloc(left, (nleft + 1) * sizeof(*left))))
                    fpk_die("out of memory");
                left[nleft++] = keep[r];
            }
            if (r == nk)
                fpk_die("internal error: the loader delivered sample %llu out of order",
                        (unsigned long long)b->indices[j]);
            s = fpk_shard_of(v, ns, r, s);
            shard *sh = &v[s];
            uint64_t local = r - sh->first, off = sh->h.records_off + local * rb;
            const uint8_t *src = b->data + (size_t)j * b->sample_bytes;
            fpk_pwrite_all(sh, src, rb, off);
            uint32_t seed = feeder__pack_crc_seed(FEEDER__PACK_VERSION, b->labels[j]);
            feeder__pack_entry_encode(sh->index + local * FEEDER__PACK_ENTRY_BYTES, off, rb,
                                      feeder__crc32c(seed, src, rb));
            sh->labels[local] = b->labels[j];
            bytes += rb;
        }
        feeder_batch_release(b, NULL);
        fpk_progress_draw(pg, r, bytes, 0);
    }
    if (rc != FEEDER_DONE)
        fpk_die("%s", feeder_loader_errmsg(ld));
    feeder_loader_destroy(ld);
    feeder_sampler_destroy(sub);
    for (; r < nk; r++) {
        if (!(left = realloc(left, (nleft + 1) * sizeof(*left))))
            fpk_die("out of memory");
        left[nleft++] = keep[r];
    }
    for (uint64_t k = 0; k < nleft; k++)
        raw_bad(o, ds, left[k]);
    free(left);
    return bytes;
}
