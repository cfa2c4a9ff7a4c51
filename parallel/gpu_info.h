// What this machine's CUDA runtime and NCCL report for launches: how many devices and, when there
// are none, why (the runtime's error), and NCCL's version for the banner of `shardscope run
// --backend cuda` (the devices, driver, runtime and cuBLAS lines come from the CUDA backend's
// cuda_device_report()). Built in every configuration: without NCCL the count is 0 and the reason
// says so; with it gpu_info_module.cpp forwards to gpu_info_cuda.cpp in the CUDA module.
#pragma once

#include <string>

namespace shardscope {

struct CudaDeviceCount {
  int count = 0;
  std::string why_none;  // when count is 0: "cudaGetDeviceCount: cudaErrorNoDevice: ..."
};

CudaDeviceCount count_cuda_devices();

// "NCCL 2.28.9 (built with 2.28.9)"; "NCCL: this build has no NCCL" without it.
std::string nccl_version_report();

// "--comm nccl needs 4 CUDA devices, found 0 (cudaGetDeviceCount: ...)": the launch error when
// `needed` devices are wanted and `found` has fewer.
inline std::string too_few_devices_message(const std::string& what, int needed,
                                           const CudaDeviceCount& found) {
  std::string out = what + " needs " + std::to_string(needed) + " CUDA device" +
                    (needed == 1 ? "" : "s") + ", found " + std::to_string(found.count);
  return found.why_none.empty() ? out : out + " (" + found.why_none + ")";
}

}  // namespace shardscope
