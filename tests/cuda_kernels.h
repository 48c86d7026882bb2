#ifndef FEEDER_TESTS_CUDA_KERNELS_H
#define FEEDER_TESTS_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* On `stream`: spin spin_ns, then add a position-weighted sum of the batch's
 * bytes and labels to *out (device memory). Returns a cudaError_t. */
int tk_spin_sum(const uint8_t *data, size_t bytes, const int64_t *labels, uint32_t count,
                uint64_t spin_ns, unsigned long long *out, void *stream);
/* The same sum on the host. */
unsigned long long tk_host_sum(const uint8_t *data, size_t bytes, const int64_t *labels,
                               uint32_t count);
#ifdef __cplusplus
}
#endif
#endif
