/*
 * The names of the enum-valued options' values: one table, so every program,
 * the Python binding and every message spell them the same way and in the
 * same order (the enum's).
 */
#include <stdio.h>
#include <strings.h>

#include "feeder.h"

typedef struct value_names {
    feeder_option opt;
    const char *const *names; /* indexed by value, NULL-terminated */
} value_names;

static const char *const pipeline_names[] = {"eval", "train", "resize", NULL};
static const char *const layout_names[] = {"nhwc", "nchw", NULL};
static const char *const decoder_names[] = {"turbo", "roi", "nvjpeg", "hybrid", NULL};
static const char *const io_names[] = {"auto", "uring", "pread", NULL};
static const char *const policy_names[] = {"fail", "skip", "drop", NULL};
static const char *const pin_names[] = {"none", "copy", "register", NULL};
static const char *const dtype_names[] = {"uint8", "float16", "bfloat16", "float32", NULL};
static const char *const packed_read_names[] = {"mmap", "uring", "direct", "auto", NULL};

static const value_names TABLE[] = {
    {FEEDER_OPT_PIPELINE, pipeline_names},  {FEEDER_OPT_LAYOUT, layout_names},
    {FEEDER_OPT_DECODER, decoder_names},    {FEEDER_OPT_IO, io_names},
    {FEEDER_OPT_ERROR_POLICY, policy_names}, {FEEDER_OPT_PIN_MODE, pin_names},
    {FEEDER_OPT_DTYPE, dtype_names},        {FEEDER_OPT_PACKED_READ, packed_read_names},
};

static const char *const *names_of(feeder_option opt)
{
    for (size_t i = 0; i < sizeof(TABLE) / sizeof(TABLE[0]); i++)
        if (TABLE[i].opt == opt)
            return TABLE[i].names;
    return NULL;
}

const char *feeder_option_value_name(feeder_option opt, int value)
{
    const char *const *names = names_of(opt);
    if (!names || value < 0)
        return NULL;
    for (int i = 0; names[i]; i++)
        if (i == value)
            return names[i];
    return NULL;
}

int feeder_option_value(feeder_option opt, const char *name, int *value)
{
    const char *const *names = names_of(opt);
    if (!names || !name || !value)
        return FEEDER_EINVAL;
    for (int i = 0; names[i]; i++)
        if (strcasecmp(name, names[i]) == 0) {
            *value = i;
            return 0;
        }
    return FEEDER_EINVAL;
}

int feeder_option_value_names(feeder_option opt, const char *sep, char *out, size_t len)
{
    const char *const *names = names_of(opt);
    if (!names || !sep || (!out && len))
        return FEEDER_EINVAL;
    size_t n = 0;
    if (len)
        out[0] = '\0';
    for (int i = 0; names[i]; i++) {
        int w = snprintf(n < len ? out + n : NULL, n < len ? len - n : 0, "%s%s", i ? sep : "",
                         names[i]);
        if (w < 0)
            return FEEDER_EINVAL;
        n += (size_t)w;
    }
    return n > (size_t)0x7fffffff ? FEEDER_EINVAL : (int)n;
}
