/* gpu_step.h in a build without CUDA: there is no device to run steps on. */
#include <stdio.h>

#include "gpu_step.h"

int bg_device_count(void) { return 0; }
int bg_create(int device, bg_ctx **out, char *err, size_t errlen)
{
    snprintf(err, errlen, "feeder was built without CUDA: no GPU steps (device %d)", device);
    *out = NULL;
    return -1;
}
void bg_destroy(bg_ctx *g) {}
void *bg_stream(bg_ctx *g) { return NULL; }
const char *bg_device_name(bg_ctx *g) { return ""; }
int bg_step(bg_ctx *g, unsigned i, const void *ready_event, const void *data, size_t bytes,
            double ms, char *err, size_t errlen)
{
    snprintf(err, errlen, "built without CUDA");
    return -1;
}
int bg_wait_step(bg_ctx *g, unsigned i, char *err, size_t errlen)
{
    snprintf(err, errlen, "built without CUDA");
    return -1;
}
int bg_busy_ms(bg_ctx *g, unsigned n, double *ms, char *err, size_t errlen)
{
    snprintf(err, errlen, "built without CUDA");
    return -1;
}
int bg_compute_alone(bg_ctx *g, size_t bytes, double ms, unsigned n, double *seconds, char *err,
                     size_t errlen)
{
    snprintf(err, errlen, "built without CUDA");
    return -1;
}
int bg_to_host(bg_ctx *g, const void *ready_event, void *dst, const void *src, size_t bytes,
               char *err, size_t errlen)
{
    snprintf(err, errlen, "built without CUDA");
    return -1;
}
