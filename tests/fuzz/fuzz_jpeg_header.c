/* libFuzzer target: the JPEG header walk and its route on any bytes. */
#include <stddef.h>
#include <stdint.h>

#include "decode/jpeg_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    feeder__jpeg_info in;
    int rc = feeder__jpeg_probe(data, size, &in);
    (void)feeder__jpeg_route(rc ? NULL : &in, 178956970);
    return 0;
}
