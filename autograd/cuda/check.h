// Check macros for CUDA runtime and cuBLAS calls: a failure throws CudaError with file:line, the
// call that failed and the library's error string, e.g.
//   "autograd/cuda/cuda_backend.cu:88: cudaMalloc failed: out of memory
//   (cudaErrorMemoryAllocation)"
// Only .cu files include this header (it needs the CUDA headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "autograd/errors.h"

namespace shardscope {

// A CUDA runtime or cuBLAS call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace cuda_detail {

// "file:line: name failed: " where name is the called function (the text before '(').
inline std::string where(const char* file, int line, const char* expression) {
  const std::string text(expression);
  return std::string(file) + ":" + std::to_string(line) + ": " + text.substr(0, text.find('(')) +
         " failed: ";
}

inline void check(cudaError_t status, const char* file, int line, const char* call) {
  if (status == cudaSuccess) return;
  throw CudaError(where(file, line, call) + cudaGetErrorString(status) + " (" +
                  cudaGetErrorName(status) + ")");
}

inline void check(cublasStatus_t status, const char* file, int line, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(where(file, line, call) + cublasGetStatusString(status) + " (" +
                  cublasGetStatusName(status) + ")");
}

}  // namespace cuda_detail
}  // namespace shardscope

#define SS_CUDA_CHECK(expr) ::shardscope::cuda_detail::check((expr), __FILE__, __LINE__, #expr)
#define SS_CUBLAS_CHECK(expr) ::shardscope::cuda_detail::check((expr), __FILE__, __LINE__, #expr)
// After a kernel launch: the launch's error, if any, named after the kernel.
#define SS_CUDA_CHECK_LAUNCH(kernel) \
  ::shardscope::cuda_detail::check(cudaGetLastError(), __FILE__, __LINE__, kernel)
