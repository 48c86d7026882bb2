/*
 * The loader's side of the resume state (state.c is the codec): describing
 * where the loader stands, checking a blob against it, keeping a blob to
 * resume from.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/nvtx.h"
#include "common/trace.h"
#include "dataset/pack.h"
#include "loader/host.h"

/* The epoch the next begin_epoch starts. */
uint64_t feeder__resume_next_epoch(const feeder_loader *ld)
{
    if (ld->flow.resume)
        return ld->flow.resume_st.epoch;
    return ld->flow.next_set ? ld->flow.next_epoch : ld->flow.have_epoch ? ld->flow.epoch + 1 : 0;
}

void feeder__resume_drop(feeder_loader *ld)
{
    free(ld->flow.resume);
    ld->flow.resume = NULL;
    ld->flow.resume_len = 0;
    memset(&ld->flow.resume_st, 0, sizeof(ld->flow.resume_st));
}

/* Decode a blob and compare it with the loader: 0 and *st (st->map points
 * into buf), or FEEDER_ESTATEBLOB / FEEDER_EMISMATCH with the message set. */
int feeder__resume_check(feeder_loader *ld, const void *buf, size_t len, feeder__state *st)
{
    int rc = feeder__state_decode(buf, len, st, ld->errmsg, sizeof(ld->errmsg));
    if (rc)
        return rc;
    feeder__state mine;
    if ((rc = feeder__loader_describe(ld, &st->epoch, 1, 0, &mine)))
        return rc;
    return feeder__state_compare(st, &mine, ld->errmsg, sizeof(ld->errmsg));
}

int feeder__loader_started(const feeder_loader *ld) { return ld->started; }

int feeder__loader_keep_resume(feeder_loader *ld, const void *buf, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return feeder__loader_fail(ld, -ENOMEM, "feeder_loader_state_load: out of memory");
    memcpy(copy, buf, len);
    /* A seed the user did not set was drawn from the system: the run being
     * resumed used the blob's. */
    feeder__state st;
    if (feeder__state_decode(copy, len, &st, NULL, 0) == 0)
        feeder__options_adopt_seed(ld, st.seed);
    /* Checked on the copy, so the map points into memory the loader owns. */
    int rc = feeder__resume_check(ld, copy, len, &st);
    if (rc) {
        free(copy);
        return rc;
    }
    feeder__resume_drop(ld);
    ld->flow.resume = copy;
    ld->flow.resume_len = len;
    ld->flow.resume_st = st;
    return 0;
}

/* What the state records of the loader's setup (dataset, plan, whose
 * sampler); the epoch's part is feeder__loader_describe's. */
static void describe_options(const feeder_loader *ld, const feeder__plan *p, feeder__state *st)
{
    st->seed = p->sampling.seed;
    st->dataset_size = ld->ds->n;
    st->fingerprint = ld->ds->fingerprint;
    st->batch_size = p->sampling.batch_size;
    st->drop_last = (uint32_t)p->sampling.drop_last;
    st->shuffle = (uint32_t)p->sampling.shuffle;
    st->user_sampler = ld->sampler && ld->sampler != ld->own_sampler;
    /* The transform the plan asks for (a blob saved after start loads into
     * a new loader before its start); the decoder in use once started. The
     * layout stays the one asked for: float device batches come from NHWC
     * slots whatever it is. */
    feeder__transform t;
    feeder__plan_transform(p, &t);
    if (ld->started)
        t.decoder = ld->job.t.decoder;
    st->pipeline = (uint32_t)t.pipeline;
    st->decoder = (uint32_t)t.decoder;
    st->layout = (uint32_t)t.layout;
    st->height = t.height;
    st->width = t.width;
    st->channels = (uint32_t)feeder__transform_channels(&t);
    st->resize = t.resize;
    st->policy = (uint32_t)p->pipeline.error_policy;
    st->max_pixels = t.max_pixels;
    st->max_decode_bytes = t.max_decode_bytes;
    st->max_side = t.max_side;
    st->limits_known = 1;
    st->scale_min = t.scale_min;
    st->scale_max = t.scale_max;
    st->ratio_min = t.ratio_min;
    st->ratio_max = t.ratio_max;
    st->flip_prob = t.flip_prob;
}

int feeder__loader_describe(const feeder_loader *ld, const uint64_t *at, int want_hash,
                            int hold_epoch, feeder__state *st)
{
    memset(st, 0, sizeof(*st));
    /* Once started, the plan; before, the plan the options make now (a
     * shape that disagrees with the file fails the start). */
    feeder__plan now;
    const feeder__plan *p = &ld->plan;
    if (!ld->started) {
        (void)feeder__options_resolve(ld, &now);
        p = &now;
    }
    describe_options(ld, p, st);
    if (!at && (ld->flow.in_epoch || hold_epoch)) {
        st->epoch = ld->flow.epoch;
        st->sampler_len = ld->flow.order_len;
        st->nbatches = ld->flow.nbatches;
        st->delivered = ld->flow.delivered;
        st->map = ld->flow.done_map;
        if (want_hash)
            st->order_hash = feeder__order_hash(ld->flow.order, ld->flow.order_len);
        return 0;
    }
    st->epoch = at ? *at : feeder__resume_next_epoch(ld);
    if (!at && ld->flow.resume) {
        st->delivered = ld->flow.resume_st.delivered;
        st->map = ld->flow.resume_st.map;
    }
    feeder_sampler *tmp = NULL;
    const feeder_sampler *smp = ld->sampler;
    int rc;
    if (!smp) {
        if ((rc = feeder__loader_default_sampler(ld, p, &tmp)))
            return rc;
        smp = tmp;
    }
    uint64_t len = feeder_sampler_len(smp, st->epoch);
    st->sampler_len = len;
    st->nbatches = feeder_batch_count(len, st->batch_size, (int)st->drop_last);
    rc = 0;
    if (want_hash) {
        uint64_t *order = len > SIZE_MAX / sizeof(uint64_t) ? NULL : malloc(len ? len * 8 : 1);
        if (!order)
            rc = feeder__loader_fail(ld, -ENOMEM, "out of memory for the order of epoch %llu",
                                     (unsigned long long)st->epoch);
        else if ((rc = feeder_sampler_fill(smp, st->epoch, order, len)))
            feeder__loader_fail(ld, rc, "the sampler failed for epoch %llu: %s",
                                (unsigned long long)st->epoch, feeder_strerror(rc));
        else
            st->order_hash = feeder__order_hash(order, len);
        free(order);
    }
    feeder_sampler_destroy(tmp);
    return rc;
}
