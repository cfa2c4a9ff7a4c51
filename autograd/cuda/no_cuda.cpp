// The CUDA entry points of a build without CUDA: no devices, and a clear error for a backend.
#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"

namespace shardscope {

bool cuda_backend_built() {
  return false;
}

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = "this build has no CUDA backend";
  return 0;
}

std::string cuda_device_report() {
  return "CUDA: this build has no CUDA backend";
}

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions&) {
  throw ArgumentError("no backend for device cuda:" + std::to_string(index) +
                      ": this build has no CUDA backend (configure with -DSHARDSCOPE_CUDA=ON on a "
                      "machine with nvcc)");
}

AllocatorStats cuda_memory_stats(const Backend& backend) {
  throw ArgumentError(std::string("cuda_memory_stats: backend '") + backend.name() +
                      "' is not a CUDA backend (this build has none)");
}

void* cuda_backend_stream(const Backend& backend) {
  throw ArgumentError(std::string("cuda_backend_stream: backend '") + backend.name() +
                      "' is not a CUDA backend (this build has none)");
}

}  // namespace shardscope
