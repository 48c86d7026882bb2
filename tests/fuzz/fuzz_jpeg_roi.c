/* The ROI decoder: libjpeg DCT-scaled, cropped decode of only the box. */
#include <errno.h>

#include "fuzz_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_decode(FEEDER_DECODER_ROI, data, size);
}
