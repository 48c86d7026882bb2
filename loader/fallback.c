/*
 * The GPU layer's CPU fallback: a sample nvJPEG refused, decoded on the
 * loader's side the way the workers decode it (the job's CPU decoder), one
 * decoder per GPU decode thread.
 */
#include <errno.h>

#include "loader/host.h"

int feeder__loader_decode_cpu(feeder_loader *ld, unsigned who, const uint8_t *jpeg, size_t len,
                              uint64_t epoch, uint64_t index, uint8_t *dst, char *msg, size_t msglen)
{
    if (who >= FEEDER__FALLBACK_DECODERS)
        return -EINVAL;
    feeder__decoder **dec = &ld->gpu.fallback_dec[who];
    if (!*dec && feeder__decoder_create(dec))
        return -ENOMEM;
    feeder__transform t = ld->job.t;
    t.decoder = ld->job.cpu_decoder;
    char derr[512] = "";
    int rc = feeder__decode_sample(*dec, &t, jpeg, len, ld->job.seed, epoch, index,
                                   dst, NULL, derr, sizeof(derr));
    if (rc) {
        const char *path = feeder_dataset_path(ld->ds, index);
        feeder__fmt(msg, msglen, "sample %llu (%s): %s", (unsigned long long)index,
                    path ? path : "?", derr[0] ? derr : feeder_strerror(rc));
    }
    return rc;
}
