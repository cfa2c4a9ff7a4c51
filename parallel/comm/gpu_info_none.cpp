// gpu_info for a build without NCCL: no devices for NCCL, and the reason names the build.
#include "parallel/comm/gpu_info.h"

namespace shardscope {

CudaDeviceCount count_cuda_devices() {
  return {0, "this build has no NCCL: configure with the CUDA toolkit (nvcc and NCCL) on the PATH"};
}

std::string nccl_version_report() {
  return "NCCL: this build has no NCCL";
}

}  // namespace shardscope
