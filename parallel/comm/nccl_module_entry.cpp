// The CUDA module's parallel entry: the table of gpu_info.h's queries and run_spmd_nccl as the
// module implements them, for the forwarders in libshardscope_parallel.so (gpu_info_module.cpp).
// The module is linked with -Bsymbolic-functions, so these are the module's own functions.
#include "autograd/cuda/cuda_module.h"
#include "parallel/comm/gpu_info.h"
#include "parallel/comm/nccl_module.h"
#include "parallel/comm/spmd_launch.h"

namespace shardscope {

extern "C" __attribute__((visibility("default"))) const CudaParallelEntries*
shardscope_cuda_parallel_entries() {
  static const CudaParallelEntries entries{kCudaModuleVersion, &count_cuda_devices,
                                           &nccl_version_report, &run_spmd_nccl};
  return &entries;
}

}  // namespace shardscope
