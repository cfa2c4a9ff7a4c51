// The CUDA backend's entry points, callable from any build: a build without CUDA links
// no_cuda.cpp, whose versions report that there is no CUDA backend; a build with it links
// cuda_forward.cpp, which forwards them to the CUDA module (libshardscope_cuda.so, loaded on first
// use by cuda_module.h) where cuda_backend.cu and device_info.cpp define them. The backend itself
// (cuda_backend.cu) runs the same kernel table as CpuBackend, launching the per-row math of
// autograd/kernels/, with cuBLAS for GEMMs and a caching allocator for device memory.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "autograd/backend.h"
#include "autograd/caching_allocator.h"

namespace shardscope {

struct CudaOptions {
  // TF32 tensor-core GEMMs for f32 (faster, about 10 mantissa bits). Off by default so that
  // reference checks against the CPU hold; SHARDSCOPE_TF32=1 turns it on.
  bool tf32 = false;
};

// The options from the environment: SHARDSCOPE_TF32=1 sets tf32.
inline CudaOptions cuda_options_from_env() {
  CudaOptions options;
  const char* tf32 = std::getenv("SHARDSCOPE_TF32");
  options.tf32 = tf32 != nullptr && std::string(tf32) == "1";
  return options;
}

// True when this build compiled the CUDA backend.
bool cuda_backend_built();

// The number of visible CUDA devices; 0 without a driver, a device or a CUDA build, and then
// `why_none` (when given) receives the reason ("cudaGetDeviceCount: cudaErrorNoDevice: ...").
int cuda_device_count(std::string* why_none = nullptr);

// One line per device plus the driver, runtime and cuBLAS versions, for the CLI to print; says
// why there is nothing when there is no CUDA build or no device.
std::string cuda_device_report();

// A backend on CUDA device `index`. Throws ArgumentError in a build without CUDA and Error
// ("no CUDA device: ...") when the device does not exist.
std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options);
// The caching allocator's statistics of a CUDA backend; ArgumentError for another backend.
AllocatorStats cuda_memory_stats(const Backend& backend);

// The stream all of a CUDA backend's work runs on, as a cudaStream_t (void* here so that this
// header needs no CUDA headers): a communicator orders its collectives after the compute on it.
// ArgumentError for another backend.
void* cuda_backend_stream(const Backend& backend);

inline std::unique_ptr<Backend> make_cuda_backend(int index) {
  return make_cuda_backend(index, cuda_options_from_env());
}

}  // namespace shardscope
