// SS_HOST_DEVICE marks the per-element math that both the CPU backend and the CUDA kernels call.
#pragma once

#if defined(__CUDACC__)
#define SS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SS_HOST_DEVICE inline
#endif
