// gpu_info from the CUDA runtime API and NCCL (a build with CUDA and NCCL).
#include <nccl.h>

#include "autograd/cuda/cuda_backend.h"
#include "parallel/comm/gpu_info.h"

namespace shardscope {
namespace {

// 22809 -> "2.28.9"
std::string nccl_version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

CudaDeviceCount count_cuda_devices() {
  CudaDeviceCount found;
  found.count = cuda_device_count(&found.why_none);  // the CUDA backend's one runtime query
  return found;
}

std::string nccl_version_report() {
  int nccl = 0;
  const std::string built = nccl_version_text(NCCL_VERSION_CODE);
  if (ncclGetVersion(&nccl) != ncclSuccess)
    return "NCCL: ncclGetVersion failed (built with " + built + ")";
  return "NCCL " + nccl_version_text(nccl) + " (built with " + built + ")";
}

}  // namespace shardscope
