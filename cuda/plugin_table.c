/*
 * The GPU plugin's one export: the table of this room's cuda/gpu.h functions
 * that libfeeder's plugin.c forwards to (cuda/plugin.h). Built only into
 * libfeeder_cuda.so.0, whose version script (plugin.map) hides every other
 * symbol, so the plugin's copies of common/ and decode/ helpers never meet
 * libfeeder's.
 */
#include "cuda/gpu.h"
#include "cuda/plugin.h"

static const feeder__gpu_plugin TABLE = {
    .abi = FEEDER__PLUGIN_ABI,
    .version = FEEDER_VERSION_NUMBER,
    .size = sizeof(feeder__gpu_plugin),
    .config_size = sizeof(feeder__gpu_config),
    .stats_size = sizeof(feeder_stats),
    .batch_size = sizeof(feeder_batch),
    .probe = feeder__gpu_probe,
    .start = feeder__gpu_start,
    .finish_start = feeder__gpu_finish_start,
    .next = feeder__gpu_next,
    .release = feeder__gpu_release,
    .of = feeder__gpu_of,
    .host = feeder__gpu_host,
    .errmsg = feeder__gpu_errmsg,
    .drop = feeder__gpu_drop,
    .describe = feeder__gpu_describe,
    .stats = feeder__gpu_stats,
    .destroy = feeder__gpu_destroy,
    .pending = feeder__gpu_pending,
    .decodes = feeder__gpu_decodes,
    .decode_why = feeder__gpu_decode_why,
    .packed_direct = feeder__gpu_packed_direct,
    .owns = feeder__gpu_owns,
};

__attribute__((visibility("default"))) const feeder__gpu_plugin *feeder__cuda_plugin_v1(void)
{
    return &TABLE;
}
