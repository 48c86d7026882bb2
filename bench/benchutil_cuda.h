/*
 * The benchmarks' and examples' check of a CUDA runtime call. Header only:
 * it needs cuda_runtime_api.h, which the rest of benchutil does not. A failure
 * names the call, where it was made and the runtime's own text, then exits 1
 * (cli_die).
 *   #define CK(call) BU_CK(PROG, call)
 */
#ifndef FEEDER_BENCHUTIL_CUDA_H
#define FEEDER_BENCHUTIL_CUDA_H

#include <cuda_runtime_api.h>

#include "cli.h"

static inline void bu_cuda_check(const char *prog, cudaError_t e, const char *what,
                                 const char *file, int line)
{
    if (e == cudaSuccess)
        return;
    cli_die(prog, "%s:%d: %s failed: %s (%s)", file, line, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
}
#define BU_CK(prog, call) bu_cuda_check((prog), (call), #call, __FILE__, __LINE__)

#endif
