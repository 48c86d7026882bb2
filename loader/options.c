/*
 * The loader's options: one table (name, bounds, default), values validated
 * when set and frozen at start; the typed setters; the getters of what was
 * set; and the one step that reads them all into the plan at start
 * (feeder__options_resolve). Nothing else reads an option's value.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "dataset/pack.h"
#include "loader/host.h"

#include <sys/random.h>

typedef struct opt_desc {
    int opt;
    const char *name;
    int is_double;
    double min, max, def;
} opt_desc;

static const opt_desc OPTS[] = {
    {FEEDER_OPT_BATCH_SIZE, "batch_size", 0, 1, 1 << 20, 64},
    {FEEDER_OPT_SHUFFLE, "shuffle", 0, 0, 1, 0},
    {FEEDER_OPT_SEED, "seed", 0, (double)INT64_MIN, (double)INT64_MAX, 0},
    {FEEDER_OPT_DROP_LAST, "drop_last", 0, 0, 1, 0},
    {FEEDER_OPT_NUM_WORKERS, "num_workers", 0, 0, 1024, 0},
    {FEEDER_OPT_PREFETCH_FACTOR, "prefetch_factor", 0, 1, 64, 2},
    {FEEDER_OPT_PERSISTENT_WORKERS, "persistent_workers", 0, 0, 1, 0},
    {FEEDER_OPT_IN_ORDER, "in_order", 0, 0, 1, 1},
    {FEEDER_OPT_TIMEOUT_MS, "timeout_ms", 0, 0, 86400000.0 * 365, 0},
    {FEEDER_OPT_PIPELINE, "pipeline", 0, 0, 2, FEEDER_PIPELINE_EVAL},
    {FEEDER_OPT_HEIGHT, "height", 0, 1, 65535, 224},
    {FEEDER_OPT_WIDTH, "width", 0, 1, 65535, 224},
    {FEEDER_OPT_RESIZE, "resize", 0, 1, 65535, 256},
    {FEEDER_OPT_LAYOUT, "layout", 0, 0, 1, FEEDER_LAYOUT_NHWC},
    {FEEDER_OPT_DECODER, "decoder", 0, 0, 3, FEEDER_DECODER_ROI},
    {FEEDER_OPT_IO, "io", 0, 0, 2, FEEDER_IO_AUTO},
    {FEEDER_OPT_ERROR_POLICY, "error_policy", 0, 0, 2, FEEDER_ON_ERROR_FAIL},
    {FEEDER_OPT_MAX_PIXELS, "max_pixels", 0, 0, 1e15, 178956970},
    {FEEDER_OPT_POLL_MS, "poll_ms", 0, 1, 60000, 100},
    {FEEDER_OPT_MAX_DECODE_BYTES, "max_decode_bytes", 0, 0, 1e15, 256.0 * 1024 * 1024},
    {FEEDER_OPT_MAX_SIDE, "max_side", 0, 0, 2147483647, 65535},
    {FEEDER_OPT_SPLIT, "split", 0, 0, 1 << 20, 0},
    {FEEDER_OPT_QUEUE_DEPTH, "queue_depth", 0, 4, 32768, 256},
    {FEEDER_OPT_BATCH_ROOM, "batch_room", 0, 4096, 1099511627776.0, 64 << 20},
    {FEEDER_OPT_DEVICE, "device", 0, -1, 1023, -1},
    {FEEDER_OPT_PIN_MODE, "pin_mode", 0, 0, 2, FEEDER_PIN_REGISTER},
    {FEEDER_OPT_GPU_PREFETCH, "gpu_prefetch", 0, 2, 64, 2},
    {FEEDER_OPT_DTYPE, "dtype", 0, 0, 3, FEEDER_DTYPE_UINT8},
    {FEEDER_OPT_PIN_THREADS, "pin_threads", 0, 1, 64, 4},
    {FEEDER_OPT_GPU_WARMUP, "gpu_warmup", 0, 0, 1, 1},
    {FEEDER_OPT_AUGMENT_ON_DEVICE, "augment_on_device", 0, 0, 1, 0},
    {FEEDER_OPT_GPU_ROOM, "gpu_room", 0, 0, 1 << 30, 0},
    {FEEDER_OPT_GPU_DECODE_THREADS, "gpu_decode_threads", 0, 0, 4, 0},
    {FEEDER_OPT_MEAN_R, "mean_r", 1, -1e6, 1e6, 0.485},
    {FEEDER_OPT_MEAN_G, "mean_g", 1, -1e6, 1e6, 0.456},
    {FEEDER_OPT_MEAN_B, "mean_b", 1, -1e6, 1e6, 0.406},
    {FEEDER_OPT_STD_R, "std_r", 1, 1e-9, 1e6, 0.229},
    {FEEDER_OPT_STD_G, "std_g", 1, 1e-9, 1e6, 0.224},
    {FEEDER_OPT_STD_B, "std_b", 1, 1e-9, 1e6, 0.225},
    {FEEDER_OPT_PACKED_READ, "packed_read", 0, 0, 3, FEEDER_PACKED_READ_AUTO},
    {FEEDER_OPT_VERIFY_CRC, "verify_crc", 0, 0, 1, 0},
    {FEEDER_OPT_MAX_RESTARTS, "max_restarts", 0, 0, 1000000, 0},
    {FEEDER_OPT_CHANNELS, "channels", 0, 1, 3, 3},
    {FEEDER_OPT_SCALE_MIN, "scale_min", 1, 1e-6, 1, 0.08},
    {FEEDER_OPT_SCALE_MAX, "scale_max", 1, 1e-6, 1, 1.0},
    {FEEDER_OPT_RATIO_MIN, "ratio_min", 1, 1e-3, 1e3, 3.0 / 4.0},
    {FEEDER_OPT_RATIO_MAX, "ratio_max", 1, 1e-3, 1e3, 4.0 / 3.0},
    {FEEDER_OPT_FLIP_PROB, "flip_prob", 1, 0, 1, 0.5},
};
#define NOPTS ((int)(sizeof(OPTS) / sizeof(OPTS[0])))
_Static_assert(NOPTS == FEEDER__NOPTS, "loader/host.h sizes the option arrays");

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
    for (int i = 0; i < NOPTS; i++) {
        ld->ival[i] = (int64_t)OPTS[i].def;
        ld->dval[i] = OPTS[i].def;
    }
    uint64_t seed = draw_seed();
    ld->ival[feeder__opt_index(FEEDER_OPT_SEED)] = (int64_t)seed;
    ld->dval[feeder__opt_index(FEEDER_OPT_SEED)] = (double)seed;
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
    if (OPTS[*i].is_double != is_double)
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
    ld->ival[i] = value;
    ld->dval[i] = (double)value;
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
    ld->dval[i] = value;
    return 0;
}

int feeder_loader_get(const feeder_loader *ld, feeder_option opt, double *value)
{
    int i = ld ? feeder__opt_index(opt) : -1;
    if (i < 0 || !value)
        return FEEDER_EINVAL;
    *value = OPTS[i].is_double ? ld->dval[i] : (double)ld->ival[i];
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

/* An option's value as set or defaulted: the table's read for the plan. */
static int64_t opt_i(const feeder_loader *ld, int opt) { return ld->ival[feeder__opt_index(opt)]; }
static double opt_d(const feeder_loader *ld, int opt) { return ld->dval[feeder__opt_index(opt)]; }
static int opt_given(const feeder_loader *ld, int opt) { return ld->given[feeder__opt_index(opt)]; }

int feeder_loader_decoder(const feeder_loader *ld, const char **reason)
{
    if (reason)
        *reason = "";
    if (!ld)
        return FEEDER_EINVAL;
    if (!ld->started)
        return (int)opt_i(ld, FEEDER_OPT_DECODER);
    if (reason)
        *reason = ld->decided.decoder_reason;
    return ld->job.t.decoder;
}

int feeder_loader_seed(const feeder_loader *ld, uint64_t *seed)
{
    if (!ld || !seed)
        return FEEDER_EINVAL;
    *seed = (uint64_t)opt_i(ld, FEEDER_OPT_SEED);
    return 0;
}

/* HEIGHT, WIDTH, CHANNELS and LAYOUT, or a RAW packed file's for those the
 * user did not set: FEEDER_ESHAPE when one set disagrees with the file. */
static int resolve_shape(const feeder_loader *ld, feeder__plan *p)
{
    p->pipeline.height = (uint32_t)opt_i(ld, FEEDER_OPT_HEIGHT);
    p->pipeline.width = (uint32_t)opt_i(ld, FEEDER_OPT_WIDTH);
    p->pipeline.channels = (uint32_t)opt_i(ld, FEEDER_OPT_CHANNELS);
    p->pipeline.layout = (int)opt_i(ld, FEEDER_OPT_LAYOUT);
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
    memset(p, 0, sizeof(*p));
    p->sampling.batch_size = (uint32_t)opt_i(ld, FEEDER_OPT_BATCH_SIZE);
    p->sampling.shuffle = (int)opt_i(ld, FEEDER_OPT_SHUFFLE);
    p->sampling.seed = (uint64_t)opt_i(ld, FEEDER_OPT_SEED);
    p->sampling.drop_last = (int)opt_i(ld, FEEDER_OPT_DROP_LAST);

    p->workers.num_workers = (uint32_t)opt_i(ld, FEEDER_OPT_NUM_WORKERS);
    p->workers.prefetch_factor = (uint32_t)opt_i(ld, FEEDER_OPT_PREFETCH_FACTOR);
    p->workers.split = (uint32_t)opt_i(ld, FEEDER_OPT_SPLIT);
    p->workers.persistent = (int)opt_i(ld, FEEDER_OPT_PERSISTENT_WORKERS);
    p->workers.in_order = (int)opt_i(ld, FEEDER_OPT_IN_ORDER);
    p->workers.timeout_ms = opt_i(ld, FEEDER_OPT_TIMEOUT_MS);
    p->workers.poll_ms = (int)opt_i(ld, FEEDER_OPT_POLL_MS);
    p->workers.max_restarts = (uint64_t)opt_i(ld, FEEDER_OPT_MAX_RESTARTS);

    p->pipeline.pipeline = (int)opt_i(ld, FEEDER_OPT_PIPELINE);
    p->pipeline.pipeline_set = opt_given(ld, FEEDER_OPT_PIPELINE);
    p->pipeline.decoder = (int)opt_i(ld, FEEDER_OPT_DECODER);
    p->pipeline.resize = (uint32_t)opt_i(ld, FEEDER_OPT_RESIZE);
    p->pipeline.scale_min = opt_d(ld, FEEDER_OPT_SCALE_MIN);
    p->pipeline.scale_max = opt_d(ld, FEEDER_OPT_SCALE_MAX);
    p->pipeline.ratio_min = opt_d(ld, FEEDER_OPT_RATIO_MIN);
    p->pipeline.ratio_max = opt_d(ld, FEEDER_OPT_RATIO_MAX);
    p->pipeline.flip_prob = opt_d(ld, FEEDER_OPT_FLIP_PROB);
    p->pipeline.max_pixels = (uint64_t)opt_i(ld, FEEDER_OPT_MAX_PIXELS);
    p->pipeline.max_decode_bytes = (uint64_t)opt_i(ld, FEEDER_OPT_MAX_DECODE_BYTES);
    p->pipeline.max_side = (uint32_t)opt_i(ld, FEEDER_OPT_MAX_SIDE);
    p->pipeline.error_policy = (int)opt_i(ld, FEEDER_OPT_ERROR_POLICY);
    p->pipeline.io = (int)opt_i(ld, FEEDER_OPT_IO);
    p->pipeline.queue_depth = (unsigned)opt_i(ld, FEEDER_OPT_QUEUE_DEPTH);
    p->pipeline.packed_read = (int)opt_i(ld, FEEDER_OPT_PACKED_READ);
    p->pipeline.verify_crc = (int)opt_i(ld, FEEDER_OPT_VERIFY_CRC);
    p->pipeline.batch_room = (uint64_t)opt_i(ld, FEEDER_OPT_BATCH_ROOM);

    p->device.device = (int)opt_i(ld, FEEDER_OPT_DEVICE);
    p->device.pin_mode = (int)opt_i(ld, FEEDER_OPT_PIN_MODE);
    p->device.gpu_prefetch = (int)opt_i(ld, FEEDER_OPT_GPU_PREFETCH);
    p->device.dtype = (int)opt_i(ld, FEEDER_OPT_DTYPE);
    p->device.pin_threads = (int)opt_i(ld, FEEDER_OPT_PIN_THREADS);
    p->device.warmup = (int)opt_i(ld, FEEDER_OPT_GPU_WARMUP);
    p->device.decode_threads = (int)opt_i(ld, FEEDER_OPT_GPU_DECODE_THREADS);
    p->device.augment_on_device = (int)opt_i(ld, FEEDER_OPT_AUGMENT_ON_DEVICE);
    p->device.gpu_room = opt_i(ld, FEEDER_OPT_GPU_ROOM);
    static const int mean[3] = {FEEDER_OPT_MEAN_R, FEEDER_OPT_MEAN_G, FEEDER_OPT_MEAN_B};
    static const int std[3] = {FEEDER_OPT_STD_R, FEEDER_OPT_STD_G, FEEDER_OPT_STD_B};
    for (int k = 0; k < 3; k++) {
        p->device.mean[k] = opt_d(ld, mean[k]);
        p->device.std[k] = opt_d(ld, std[k]);
    }
    return resolve_shape(ld, p);
}

void feeder__options_adopt_seed(feeder_loader *ld, uint64_t seed)
{
    int i = feeder__opt_index(FEEDER_OPT_SEED);
    if (ld->given[i])
        return;
    ld->ival[i] = (int64_t)seed;
    ld->dval[i] = (double)seed;
}
