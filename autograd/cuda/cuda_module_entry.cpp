// The CUDA module's autograd entry: the table of cuda_backend.h's entry points as the module
// implements them (cuda_backend.cu, device_info.cpp), for the loader in libshardscope_autograd.so
// (cuda_module.h). The module is linked with -Bsymbolic-functions, so these addresses are the
// module's own functions, not the forwarders of the same names in libshardscope_autograd.so.
#include "autograd/cuda/cuda_backend.h"
#include "autograd/cuda/cuda_module.h"

namespace shardscope {

extern "C" __attribute__((visibility("default"))) const CudaAutogradEntries*
shardscope_cuda_autograd_entries() {
  static const CudaAutogradEntries entries{kCudaModuleVersion,  &cuda_device_count,
                                           &cuda_device_report, &make_cuda_backend,
                                           &cuda_memory_stats,  &cuda_backend_stream};
  return &entries;
}

}  // namespace shardscope
