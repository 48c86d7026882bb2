/*
 * A user's sampler: its callbacks give each epoch's length and order.
 */
#include "sampler/kind.h"

static uint64_t len_callback(const feeder_sampler *s, uint64_t epoch)
{
    return s->cb.len(s->user, epoch);
}

static int fill_callback(const feeder_sampler *s, uint64_t epoch, uint64_t *out, uint64_t count)
{
    int rc = s->cb.fill(s->user, epoch, out, count);
    /* A positive value would read as a status, not a failure. */
    return rc > 0 ? FEEDER_ECALLBACK : rc;
}

static void destroy_callback(feeder_sampler *s)
{
    if (s->cb.destroy)
        s->cb.destroy(s->user);
}

/* Not pure: the order may change with whatever the user's code reads. */
const feeder__sampler_kind feeder__sampler_callback_kind = {.name = "callback",
                                                            .len = len_callback,
                                                            .fill = fill_callback,
                                                            .destroy = destroy_callback};

int feeder_sampler_set_ahead(feeder_sampler *s, int on)
{
    if (!s || s->kind != &feeder__sampler_callback_kind)
        return FEEDER_EINVAL;
    s->ahead = on != 0;
    return 0;
}

int feeder_sampler_create(const feeder_sampler_callbacks *cb, void *user, feeder_sampler **out)
{
    if (!cb || !cb->len || !cb->fill)
        return FEEDER_EINVAL;
    feeder_sampler *s;
    int rc = feeder__sampler_make(&feeder__sampler_callback_kind, out, &s);
    if (rc)
        return rc;
    s->cb = *cb;
    s->user = user;
    *out = s;
    return 0;
}
