// gpu_info and run_spmd_nccl in a build with NCCL: each forwards to the CUDA module
// (libshardscope_cuda.so, which holds NcclComm and links the CUDA runtime and NCCL), loaded on
// first use. When it cannot be loaded, the device count is 0 and the reason is the loader's error,
// which names the file and what is missing.
#include <string>

#include "autograd/cuda/cuda_module.h"
#include "autograd/errors.h"
#include "parallel/comm/gpu_info.h"
#include "parallel/comm/nccl_module.h"
#include "parallel/comm/spmd_launch.h"

namespace shardscope {
namespace {

// The module's parallel entries, or null with `why` set to the load error.
const CudaParallelEntries* entries_or_why(std::string& why) {
  return cuda_module_table_or_why<CudaParallelEntries>(kCudaParallelEntry, why);
}

}  // namespace

CudaDeviceCount count_cuda_devices() {
  std::string why;
  const CudaParallelEntries* entries = entries_or_why(why);
  if (!entries) return {0, why};
  return entries->count_devices();
}

std::string nccl_version_report() {
  std::string why;
  const CudaParallelEntries* entries = entries_or_why(why);
  return entries ? entries->nccl_version_report() : "NCCL: " + why;
}

void run_spmd_nccl(int world, const SpmdOptions& options, const RankFn& fn) {
  std::string why;
  const CudaParallelEntries* entries = entries_or_why(why);
  if (!entries) throw Error("comm nccl: " + why);
  entries->run_spmd_nccl(world, options, fn);
}

}  // namespace shardscope
