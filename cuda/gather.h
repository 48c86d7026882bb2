/* The record gather kernel's launcher (gather.cu), callable from C. */
#ifndef FEEDER_CUDA_GATHER_H
#define FEEDER_CUDA_GATHER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy n records of rec_bytes each, record r from base + src_off[r] to
 * dst + r * rec_bytes, on `stream` (a cudaStream_t). `base` is the device's
 * view of mapped (registered) host memory and src_off a device array; the
 * SMs read the host memory over PCIe themselves, so one launch moves a whole
 * shuffled batch. aligned16: base, every offset and rec_bytes are multiples
 * of 16 (16-byte words, else byte by byte). Returns a cudaError_t (0 = success). */
int feeder__gather_launch(const uint8_t *base, const uint64_t *src_off, uint8_t *dst,
                          size_t rec_bytes, uint32_t n, int aligned16, void *stream);

#ifdef __cplusplus
}
#endif
#endif
