/* The TURBO decoder: TurboJPEG full decode, then crop and resize. */
#include <errno.h>

#include "fuzz_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_decode(FEEDER_DECODER_TURBO, data, size);
}
