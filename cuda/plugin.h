/*
 * The boundary between libfeeder and its GPU plugin, libfeeder_cuda.so.0
 * (docs/ARCHITECTURE.md, "The GPU plugin"). libfeeder holds no CUDA code:
 * its plugin.c implements cuda/gpu.h by forwarding every call through this
 * table, which it gets by dlopen()ing the plugin the first time a device is
 * asked for. The plugin is the rest of this room (and the GPU decoder); its
 * plugin_table.c fills the table, and FEEDER__PLUGIN_SYMBOL, the function
 * that returns it, is the only symbol the plugin exports.
 *
 * The table passes cuda/gpu.h's structs by pointer, so core and plugin must
 * be built from the same sources: the core refuses a table whose ABI,
 * feeder version or struct sizes differ from its own.
 */
#ifndef FEEDER_CUDA_PLUGIN_H
#define FEEDER_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/gpu.h"

#define FEEDER__PLUGIN_FILE "libfeeder_cuda.so.0"
#define FEEDER__PLUGIN_SYMBOL "feeder__cuda_plugin_v1"
/* Raised whenever a function is added to, removed from or changed in the table. */
#define FEEDER__PLUGIN_ABI 3

typedef struct feeder__gpu_plugin {
    uint32_t abi;        /* FEEDER__PLUGIN_ABI */
    uint32_t version;    /* FEEDER_VERSION_NUMBER of the plugin's build */
    uint32_t size;       /* sizeof(feeder__gpu_plugin) */
    uint32_t config_size; /* sizeof(feeder__gpu_config) */
    uint32_t stats_size; /* sizeof(feeder_stats) */
    uint32_t batch_size; /* sizeof(feeder_batch) */
    /* cuda/gpu.h's functions of the same names, less feeder__gpu_. */
    int (*probe)(int device, char *why, size_t whylen);
    int (*start)(const feeder__gpu_config *cfg, feeder__gpu **out, char *why, size_t whylen);
    void (*finish_start)(feeder__gpu *gpu);
    int (*next)(feeder__gpu *gpu, feeder_batch **out);
    int (*release)(feeder_batch *b, void *stream);
    feeder__gpu *(*of)(const feeder_batch *b);
    void *(*host)(const feeder__gpu *gpu);
    const char *(*errmsg)(const feeder__gpu *gpu);
    void (*drop)(feeder__gpu *gpu);
    const char *(*describe)(const feeder__gpu *gpu);
    void (*stats)(const feeder__gpu *gpu, feeder_stats *st);
    void (*destroy)(feeder__gpu *gpu);
    int (*pending)(const feeder__gpu *gpu, uint64_t epoch, uint64_t *out, int cap, int *open);
    int (*decodes)(const feeder__gpu *gpu);
    const char *(*decode_why)(const feeder__gpu *gpu);
    int (*packed_direct)(const feeder__gpu *gpu);
    int (*owns)(const feeder_batch *b);
} feeder__gpu_plugin;

/* The plugin's one export (plugin_table.c): its table, static, never NULL. */
const feeder__gpu_plugin *feeder__cuda_plugin_v1(void);

#endif
