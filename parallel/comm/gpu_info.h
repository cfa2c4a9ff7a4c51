// What this machine's CUDA runtime and NCCL report for launches: how many devices and, when there
// are none, why (the runtime's error), and NCCL's version for the banner of `shardscope run
// --backend cuda` (the devices, driver, runtime and cuBLAS lines come from the CUDA backend's
// cuda_device_report()); and where the NCCL ranks of one node go when ranks are processes. Built
// in every configuration: without NCCL the count is 0 and the reason says so; with it
// gpu_info_module.cpp forwards to gpu_info_cuda.cpp in the CUDA module.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "autograd/errors.h"

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

// The device of each NCCL rank of one node when ranks are processes: seen[i] is what the CUDA
// runtime reports to the node's process of local rank i (local ranks count the node's processes
// in world-rank order). When every process sees exactly one device (CUDA_VISIBLE_DEVICES set per
// local rank, `srun --gpus-per-task=1`), each uses its device 0, which is its own GPU. Otherwise
// the processes share the node's devices, local rank i on device i, so each must see at least
// one device per process of the node: ArgumentError naming the node, the local rank and the
// counts when one does not.
inline std::vector<int> nccl_devices_on_node(const std::string& node,
                                             const std::vector<CudaDeviceCount>& seen) {
  const int processes = static_cast<int>(seen.size());
  bool one_each = true;
  for (const CudaDeviceCount& found : seen) one_each = one_each && found.count == 1;
  if (one_each) return std::vector<int>(seen.size(), 0);
  for (int local = 0; local < processes; ++local) {
    const CudaDeviceCount& found = seen[static_cast<std::size_t>(local)];
    if (found.count >= processes) continue;
    throw ArgumentError(
        too_few_devices_message("comm nccl under mpirun on node " + node + " (" +
                                    std::to_string(processes) +
                                    (processes == 1 ? " rank" : " ranks") + " there; local rank " +
                                    std::to_string(local) + ")",
                                processes, found) +
        "; or give each rank one device of its own (CUDA_VISIBLE_DEVICES per local rank)");
  }
  std::vector<int> devices(seen.size());
  std::iota(devices.begin(), devices.end(), 0);
  return devices;
}

}  // namespace shardscope
