/* WEBP files through feeder__decode_sample: the format is sniffed from the
 * bytes, decoded whole, then cropped and resized (fuzz_decode.h has the
 * input's two settings bytes). */
#include <errno.h>

#include "fuzz_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_decode(FEEDER_DECODER_TURBO, data, size);
}
