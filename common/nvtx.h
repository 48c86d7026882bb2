/*
 * NVTX ranges on the spans the trace records (consumer next, pin copies, the
 * enqueue of a batch's copies; read, decode+transform and callbacks in the
 * workers), so Nsight Systems shows feeder's stages beside the user's
 * kernels. NVTX3 is header-only: with no profiler attached a push or pop is
 * a call through a null-checked pointer, so the ranges are always on when
 * built (FEEDER_NVTX, CMake option of the same name, on when CUDA and the
 * header are found) and compile to nothing otherwise.
 *
 * A range pushed in a thread must be popped in the same thread: every use
 * here pushes and pops around one call.
 */
#ifndef FEEDER_COMMON_NVTX_H
#define FEEDER_COMMON_NVTX_H

#if defined(FEEDER_NVTX) && FEEDER_NVTX
#include <nvtx3/nvToolsExt.h>
#define FEEDER_NVTX_PUSH(name) ((void)nvtxRangePushA(name))
#define FEEDER_NVTX_POP() ((void)nvtxRangePop())
#else
#define FEEDER_NVTX_PUSH(name) ((void)0)
#define FEEDER_NVTX_POP() ((void)0)
#endif

#endif
