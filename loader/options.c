/*
 * The loader's options: one table (name, bounds, default, and the plan's
 * field each one fills), values validated when set and written straight
 * into that named field of the loader's settings; the typed setters; the
 * getters of what was set; and the one step that turns the settings into
 * the plan at start (feeder__options_resolve). Nothing else reads an
 * option's value, and nothing reads one by number after start.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dataset/pack.h"
#include "loader/host.h"

#include <sys/random.h>

/* The C type of the plan field an option fills. */
typedef enum { F_INT, F_U32, F_U64, F_I64, F_DBL } field_type;

typedef struct opt_desc {
    int opt;
    const char *name;
    double min, max, def;
    size_t off; /* offsetof(feeder__plan, the field) */
    field_type type;
} opt_desc;

/* An option row: its plan field by name, so a reader follows the setting
 * from this table (the setter's only write) to its use as that field. */
#define FIELD(type, member) offsetof(feeder__plan, member), type

static const opt_desc OPTS[] = {
    {FEEDER_OPT_BATCH_SIZE, "batch_size", 1, 1 << 20, 64, FIELD(F_U32, sampling.batch_size)},
    {FEEDER_OPT_SHUFFLE, "shuffle", 0, 1, 0, FIELD(F_INT, sampling.shuffle)},
    {FEEDER_OPT_SEED, "seed", (double)INT64_MIN, (double)INT64_MAX, 0, FIELD(F_U64, sampling.seed)},
    {FEEDER_OPT_DROP_LAST, "drop_last", 0, 1, 0, FIELD(F_INT, sampling.drop_last)},
    {FEEDER_OPT_NUM_WORKERS, "num_workers", 0, 1024, 0, FIELD(F_U32, workers.num_workers)},
    {FEEDER_OPT_PREFETCH_FACTOR, "prefetch_factor", 1, 64, 2, FIELD(F_U32, workers.prefetch_factor)},
    {FEEDER_OPT_PERSISTENT_WORKERS, "persistent_workers", 0, 1, 0, FIELD(F_INT, workers.persistent)},
    {FEEDER_OPT_IN_ORDER, "in_order", 0, 1, 1, FIELD(F_INT, workers.in_order)},
    {FEEDER_OPT_TIMEOUT_MS, "timeout_ms", 0, 86400000.0 * 365, 0, FIELD(F_I64, workers.timeout_ms)},
    {FEEDER_OPT_PIPELINE, "pipeline", 0, 2, FEEDER_PIPELINE_EVAL, FIELD(F_INT, pipeline.pipeline)},
    {FEEDER_OPT_HEIGHT, "height", 1, 65535, 224, FIELD(F_U32, pipeline.height)},
    {FEEDER_OPT_WIDTH, "width", 1, 65535, 224, FIELD(F_U32, pipeline.width)},
    {FEEDER_OPT_RESIZE, "resize", 1, 65535, 256, FIELD(F_U32, pipeline.resize)},
    {FEEDER_OPT_LAYOUT, "layout", 0, 1, FEEDER_LAYOUT_NHWC, FIELD(F_INT, pipeline.layout)},
    {FEEDER_OPT_DECODER, "decoder", 0, 3, FEEDER_DECODER_ROI, FIELD(F_INT, pipeline.decoder)},
    {FEEDER_OPT_IO, "io", 0, 2, FEEDER_IO_AUTO, FIELD(F_INT, pipeline.io)},
    {FEEDER_OPT_ERROR_POLICY, "error_policy", 0, 2, FEEDER_ON_ERROR_FAIL, FIELD(F_INT, pipeline.error_policy)},
    {FEEDER_OPT_MAX_PIXELS, "max_pixels", 0, 1e15, 178956970, FIELD(F_U64, pipeline.max_pixels)},
    {FEEDER_OPT_POLL_MS, "poll_ms", 1, 60000, 100, FIELD(F_INT, workers.poll_ms)},
    {FEEDER_OPT_MAX_DECODE_BYTES, "max_decode_bytes", 0, 1e15, 256.0 * 1024 * 1024,
     FIELD(F_U64, pipeline.max_decode_bytes)},
    {FEEDER_OPT_MAX_SIDE, "max_side", 0, 2147483647, 65535, FIELD(F_U32, pipeline.max_side)},
    {FEEDER_OPT_ROW_INDEX_BYTES, "row_index_bytes", 0, 1099511627776.0, 256.0 * 1024 * 1024,
     FIELD(F_U64, pipeline.row_index_bytes)},
    {FEEDER_OPT_SPLIT, "split", 0, 1 << 20, 0, FIELD(F_U32, workers.split)},
    {FEEDER_OPT_QUEUE_DEPTH, "queue_depth", 4, 32768, 256, FIELD(F_U32, pipeline.queue_depth)},
    {FEEDER_OPT_BATCH_ROOM, "batch_room", 4096, 1099511627776.0, 64 << 20, FIELD(F_U64, pipeline.batch_room)},
    {FEEDER_OPT_DEVICE, "device", -1, 1023, -1, FIELD(F_INT, device.device)},
    {FEEDER_OPT_PIN_MODE, "pin_mode", 0, 2, FEEDER_PIN_REGISTER, FIELD(F_INT, device.pin_mode)},
    {FEEDER_OPT_GPU_PREFETCH, "gpu_prefetch", 2, 64, 2, FIELD(F_INT, device.gpu_prefetch)},
    {FEEDER_OPT_DTYPE, "dtype", 0, 3, FEEDER_DTYPE_UINT8, FIELD(F_INT, device.dtype)},
    {FEEDER_OPT_PIN_THREADS, "pin_threads", 1, 64, 4, FIELD(F_INT, device.pin_threads)},
    {FEEDER_OPT_GPU_WARMUP, "gpu_warmup", 0, 1, 1, FIELD(F_INT, device.warmup)},
    {FEEDER_OPT_AUGMENT_ON_DEVICE, "augment_on_device", 0, 1, 0, FIELD(F_INT, device.augment_on_device)},
    {FEEDER_OPT_GPU_ROOM, "gpu_room", 0, 1 << 30, 0, FIELD(F_I64, device.gpu_room)},
    {FEEDER_OPT_GPU_DECODE_THREADS, "gpu_decode_threads", 0, 4, 0, FIELD(F_INT, device.decode_threads)},
    {FEEDER_OPT_MEAN_R, "mean_r", -1e6, 1e6, 0.485, FIELD(F_DBL, device.mean[0])},
    {FEEDER_OPT_MEAN_G, "mean_g", -1e6, 1e6, 0.456, FIELD(F_DBL, device.mean[1])},
    {FEEDER_OPT_MEAN_B, "mean_b", -1e6, 1e6, 0.406, FIELD(F_DBL, device.mean[2])},
    {FEEDER_OPT_STD_R, "std_r", 1e-9, 1e6, 0.229, FIELD(F_DBL, device.std[0])},
    {FEEDER_OPT_STD_G, "std_g", 1e-9, 1e6, 0.224, FIELD(F_DBL, device.std[1])},
    {FEEDER_OPT_STD_B, "std_b", 1e-9, 1e6, 0.225, FIELD(F_DBL, device.std[2])},
    {FEEDER_OPT_PACKED_READ, "packed_read", 0, 3, FEEDER_PACKED_READ_AUTO, FIELD(F_INT, pipeline.packed_read)},
    {FEEDER_OPT_VERIFY_CRC, "verify_crc", 0, 1, 0, FIELD(F_INT, pipeline.verify_crc)},
    {FEEDER_OPT_MAX_RESTARTS, "max_restarts", 0, 1000000, 0, FIELD(F_U64, workers.max_restarts)},
    {FEEDER_OPT_CHANNELS, "channels", 1, 3, 3, FIELD(F_U32, pipeline.channels)},
    {FEEDER_OPT_SCALE_MIN, "scale_min", 1e-6, 1, 0.08, FIELD(F_DBL, pipeline.scale_min)},
    {FEEDER_OPT_SCALE_MAX, "scale_max", 1e-6, 1, 1.0, FIELD(F_DBL, pipeline.scale_max)},
    {FEEDER_OPT_RATIO_MIN, "ratio_min", 1e-3, 1e3, 3.0 / 4.0, FIELD(F_DBL, pipeline.ratio_min)},
    {FEEDER_OPT_RATIO_MAX, "ratio_max", 1e-3, 1e3, 4.0 / 3.0, FIELD(F_DBL, pipeline.ratio_max)},
    {FEEDER_OPT_FLIP_PROB, "flip_prob", 0, 1, 0.5, FIELD(F_DBL, pipeline.flip_prob)},
};
#define NOPTS ((int)(sizeof(OPTS) / sizeof(OPTS[0])))
_Static_assert(NOPTS == FEEDER__NOPTS, "loader/host.h sizes the given[] array");

/* Write a value into the settings' field that row d names. An integer
 * option's value was checked against the row's bounds, which the field's
 * type holds. */
static void store(feeder__plan *settings, const opt_desc *d, int64_t v, double dv)
{
    char *f = (char *)settings + d->off;
    switch (d->type) {
    case F_INT: *(int *)f = (int)v; break;
    case F_U32: *(uint32_t *)f = (uint32_t)v; break;
    case F_U64: *(uint64_t *)f = (uint64_t)v; break;
    case F_I64: *(int64_t *)f = v; break;
    case F_DBL: *(double *)f = dv; break;
    }
}

/* The value in row d's field, as feeder_loader_get gives it. A 64-bit
 * unsigned field was set from a signed value (a seed may be negative). */
static double load(const feeder__plan *settings, const opt_desc *d)
{
    const char *f = (const char *)settings + d->off;
    switch (d->type) {
    case F_INT: return *(const int *)f;
    case F_U32: return *(const uint32_t *)f;
    case F_U64: return (double)(int64_t)*(const uint64_t *)f;
    case F_I64: return (double)*(const int64_t *)f;
    case F_DBL: return *(const double *)f;
    }
    return 0;
}

static int feeder__opt_index(int opt)
{
    for (int i = 0; i < NOPTS; i++)
        if (OPTS[i].opt == opt)
            return i;
    return -1;
}

int feeder_option_bounds(feeder_option opt, double *min, double *max)
{
    int i = feeder__opt_index(opt);
    if (i < 0)
        return FEEDER_EINVAL;
    if (min)
        *min = OPTS[i].min;
    if (max)
        *max = OPTS[i].max;
    return 0;
}

const char *feeder_option_name(feeder_option opt)
{
    int i = feeder__opt_index(opt);
    return i < 0 ? NULL : OPTS[i].name;
}

/* A seed from the system when the user sets none, as PyTorch draws one: 53
 * bits, which a double (feeder_loader_get) holds exactly. */
static uint64_t draw_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = feeder__now_ns() ^ ((uint64_t)getpid() << 32);
    return v & (((uint64_t)1 << 53) - 1);
}

void feeder__options_init(feeder_loader *ld)
{
    for (int i = 0; i < NOPTS; i++)
        store(&ld->settings, &OPTS[i], (int64_t)OPTS[i].def, OPTS[i].def);
    ld->settings.sampling.seed = draw_seed();
}

/* What feeder_loader_set and _set_double check before a value: a loader
 * of this process, a known option of the setter's type, not frozen. 0 and
 * the table's entry in *i, or the error with the message set. */
static int set_check(feeder_loader *ld, feeder_option opt, int is_double, const char *fn, int *i)
{
    if (!ld)
        return FEEDER_EINVAL;
    ld->errmsg[0] = 0;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    *i = feeder__opt_index(opt);
    if (*i < 0)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "%s: unknown option %d", fn, (int)opt);
    if ((OPTS[*i].type == F_DBL) != is_double)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "%s: %s takes %s; use %s", fn, OPTS[*i].name,
                                   is_double ? "an integer" : "a double",
                                   is_double ? "feeder_loader_set" : "feeder_loader_set_double");
    if (ld->started)
        return feeder__loader_fail(ld, FEEDER_ESTATE, "%s: %s cannot change after the loader "
                                   "started", fn, OPTS[*i].name);
    return 0;
}

int feeder_loader_set(feeder_loader *ld, feeder_option opt, int64_t value)
{
    int i, rc = set_check(ld, opt, 0, "feeder_loader_set", &i);
    if (rc)
        return rc;
    if ((double)value < OPTS[i].min || (double)value > OPTS[i].max)
        return feeder__loader_fail(ld, FEEDER_ERANGE, "%s = %lld is out of range [%.0f, %.0f]", OPTS[i].name,
                    (long long)value, OPTS[i].min, OPTS[i].max);
    if (opt == FEEDER_OPT_CHANNELS && value == 2)
        return feeder__loader_fail(ld, FEEDER_ERANGE,
                    "channels = 2 is not an image format: 1 (grayscale) or 3 (RGB)");
    store(&ld->settings, &OPTS[i], value, (double)value);
    ld->given[i] = 1;
    return 0;
}

int feeder_loader_set_double(feeder_loader *ld, feeder_option opt, double value)
{
    int i, rc = set_check(ld, opt, 1, "feeder_loader_set_double", &i);
    if (rc)
        return rc;
    if (!(value >= OPTS[i].min && value <= OPTS[i].max))
        return feeder__loader_fail(ld, FEEDER_ERANGE, "%s = %g is out of range [%g, %g]", OPTS[i].name, value,
                    OPTS[i].min, OPTS[i].max);
    store(&ld->settings, &OPTS[i], 0, value);
    return 0;
}

int feeder_loader_get(const feeder_loader *ld, feeder_option opt, double *value)
{
    int i = ld ? feeder__opt_index(opt) : -1;
    if (i < 0 || !value)
        return FEEDER_EINVAL;
    *value = load(&ld->settings, &OPTS[i]);
    if (ld->started) /* the shape in use: a RAW packed file's fills what was not set */
        *value = opt == FEEDER_OPT_HEIGHT     ? ld->plan.pipeline.height
                 : opt == FEEDER_OPT_WIDTH    ? ld->plan.pipeline.width
                 : opt == FEEDER_OPT_CHANNELS ? ld->plan.pipeline.channels
                 : opt == FEEDER_OPT_LAYOUT   ? ld->plan.pipeline.layout
                                              : *value;
    return 0;
}

/* What the typed setters check first: a loader of this process, not yet
 * started. 0, or the error with the message set. */
static int before_start(feeder_loader *ld, const char *fn)
{
    if (!ld)
        return FEEDER_EINVAL;
    ld->errmsg[0] = 0;
    if (feeder__loader_forked(ld))
        return FEEDER_EFORKED;
    if (ld->started)
        return feeder__loader_fail(ld, FEEDER_ESTATE, "%s: the loader started", fn);
    return 0;
}

int feeder_loader_set_worker_init(feeder_loader *ld, feeder_worker_init_fn fn, void *user)
{
    int rc = before_start(ld, "feeder_loader_set_worker_init");
    if (rc)
        return rc;
    ld->init = fn;
    ld->init_user = user;
    return 0;
}

int feeder_loader_set_fork_hooks(feeder_loader *ld, const feeder_fork_hooks *h)
{
    int rc = before_start(ld, "feeder_loader_set_fork_hooks");
    if (rc)
        return rc;
    if (h)
        ld->hooks = *h;
    else
        memset(&ld->hooks, 0, sizeof(ld->hooks));
    return 0;
}

int feeder_loader_set_collate(feeder_loader *ld, feeder_collate_fn fn, void *user)
{
    int rc = before_start(ld, "feeder_loader_set_collate");
    if (rc)
        return rc;
    ld->job.collate = fn;
    ld->job.collate_user = user;
    return 0;
}

int feeder_loader_set_augment(feeder_loader *ld, const feeder_augment *aug)
{
    int rc = before_start(ld, "feeder_loader_set_augment");
    if (rc)
        return rc;
    memset(&ld->job.aug, 0, sizeof(ld->job.aug));
    if (aug)
        ld->job.aug = aug->plan;
    return 0;
}

int feeder_loader_set_trace(feeder_loader *ld, const char *path)
{
    int rc = before_start(ld, "feeder_loader_set_trace");
    if (rc)
        return rc;
    if (path && !*path)
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_trace: empty path");
    char *copy = NULL;
    if (path && !(copy = strdup(path)))
        return feeder__loader_fail(ld, -ENOMEM, "feeder_loader_set_trace: out of memory");
    free(ld->trace_path);
    ld->trace_path = copy;
    return 0;
}

int feeder_loader_set_allocators(feeder_loader *ld, const feeder_allocator *device,
                                 const feeder_allocator *pinned)
{
    int rc = before_start(ld, "feeder_loader_set_allocators");
    if (rc)
        return rc;
    if ((device && (!device->alloc || !device->free)) || (pinned && (!pinned->alloc || !pinned->free)))
        return feeder__loader_fail(ld, FEEDER_EINVAL, "feeder_loader_set_allocators: an allocator needs both alloc and free");
    ld->gpu.layer.dev_alloc = device ? *device : (feeder_allocator){0};
    ld->gpu.layer.pin_alloc = pinned ? *pinned : (feeder_allocator){0};
    return 0;
}

/* Whether the user set the option (a RAW packed file fills the rest of
 * its shape). */
static int opt_given(const feeder_loader *ld, int opt) { return ld->given[feeder__opt_index(opt)]; }

int feeder_loader_decoder(const feeder_loader *ld, const char **reason)
{
    if (reason)
        *reason = "";
    if (!ld)
        return FEEDER_EINVAL;
    if (!ld->started)
        return ld->settings.pipeline.decoder;
    if (reason)
        *reason = ld->decided.decoder_reason;
    return ld->job.t.decoder;
}

int feeder_loader_seed(const feeder_loader *ld, uint64_t *seed)
{
    if (!ld || !seed)
        return FEEDER_EINVAL;
    *seed = ld->settings.sampling.seed;
    return 0;
}

/* HEIGHT, WIDTH, CHANNELS and LAYOUT, or a RAW packed file's for those the
 * user did not set: FEEDER_ESHAPE when one set disagrees with the file. */
static int resolve_shape(const feeder_loader *ld, feeder__plan *p)
{
    if (ld->ds->kind != FEEDER__DS_PACKED || ld->ds->pack->v.h.kind != FEEDER_RECORD_RAW)
        return 0;
    const feeder__pack_header *h = &ld->ds->pack->v.h;
    if ((opt_given(ld, FEEDER_OPT_HEIGHT) && p->pipeline.height != h->height) ||
        (opt_given(ld, FEEDER_OPT_WIDTH) && p->pipeline.width != h->width) ||
        (opt_given(ld, FEEDER_OPT_CHANNELS) && p->pipeline.channels != h->channels))
        return FEEDER_ESHAPE;
    p->pipeline.height = h->height;
    p->pipeline.width = h->width;
    p->pipeline.channels = h->channels;
    /* A layout the user set is checked against the slots' once they are
     * decided (start.c, check_packed_layout). */
    if (!opt_given(ld, FEEDER_OPT_LAYOUT))
        p->pipeline.layout = (int)h->layout;
    return 0;
}

int feeder__options_resolve(const feeder_loader *ld, feeder__plan *p)
{
    *p = ld->settings;
    p->pipeline.pipeline_set = opt_given(ld, FEEDER_OPT_PIPELINE);
    return resolve_shape(ld, p);
}

void feeder__options_adopt_seed(feeder_loader *ld, uint64_t seed)
{
    if (!opt_given(ld, FEEDER_OPT_SEED))
        ld->settings.sampling.seed = seed;
}
