// gpu_info from the CUDA runtime API and NCCL (a build with CUDA and NCCL).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "parallel/gpu_info.h"

namespace shardscope {
namespace {

std::string cuda_error_text(const char* call, cudaError_t code) {
  return std::string(call) + ": " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code);
}

// 22809 -> "2.28.9"
std::string nccl_version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

CudaDeviceCount count_cuda_devices() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();  // clear the error, so later runtime calls do not report it again
    return {0, cuda_error_text("cudaGetDeviceCount", code)};
  }
  if (count == 0) return {0, "cudaGetDeviceCount reports no device"};
  return {count, ""};
}

std::string nccl_version_report() {
  int nccl = 0;
  const std::string built = nccl_version_text(NCCL_VERSION_CODE);
  if (ncclGetVersion(&nccl) != ncclSuccess)
    return "NCCL: ncclGetVersion failed (built with " + built + ")";
  return "NCCL " + nccl_version_text(nccl) + " (built with " + built + ")";
}

}  // namespace shardscope
