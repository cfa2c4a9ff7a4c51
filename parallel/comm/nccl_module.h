// The CUDA module's parallel entries: gpu_info.h's queries and the NCCL launcher as
// libshardscope_cuda.so implements them (gpu_info_cuda.cpp, spmd_nccl.cpp), reached through the
// loader of autograd/cuda/cuda_module.h. libshardscope_parallel.so forwards gpu_info.h and
// run_spmd_nccl to this table (gpu_info_module.cpp) where NCCL is built.
#pragma once

#include <string>

#include "parallel/comm/gpu_info.h"
#include "parallel/comm/spmd.h"

namespace shardscope {

struct CudaParallelEntries {
  int version;  // kCudaModuleVersion of the build that made the module
  CudaDeviceCount (*count_devices)();
  std::string (*nccl_version_report)();
  void (*run_spmd_nccl)(int world, const SpmdOptions& options, const RankFn& fn);
};

// The extern "C" entry of the module that returns its CudaParallelEntries (nccl_module_entry.cpp).
constexpr const char* kCudaParallelEntry = "shardscope_cuda_parallel_entries";
extern "C" const CudaParallelEntries* shardscope_cuda_parallel_entries();

}  // namespace shardscope
