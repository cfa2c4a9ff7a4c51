// The CUDA entry points of cuda_backend.h in a build with the CUDA part: each forwards to the CUDA
// module (libshardscope_cuda.so), which is loaded on first use, so a process that never asks for
// CUDA never loads the CUDA runtime or cuBLAS. When the module cannot be loaded (no cuBLAS on this
// machine, say), the answers carry the loader's error, which names the file and what is missing.
#include <string>

#include "autograd/cuda/cuda_backend.h"
#include "autograd/cuda/cuda_module.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

// The module's entries, or null with `why` set to the load error.
const CudaAutogradEntries* entries_or_why(std::string& why) {
  return cuda_module_table_or_why<CudaAutogradEntries>(kCudaAutogradEntry, why);
}

// A backend that did not come from the module is not a CUDA backend; asking about one must not
// load the module (a CPU run checks this on its CPU backend).
bool from_module(const Backend& backend) {
  return std::string(backend.name()) == "cuda";
}

ArgumentError not_cuda(const char* caller, const Backend& backend) {
  return ArgumentError(std::string(caller) + ": backend '" + backend.name() +
                       "' is not a CUDA backend");
}

}  // namespace

bool cuda_backend_built() {
  return true;
}

int cuda_device_count(std::string* why_none) {
  std::string why;
  const CudaAutogradEntries* entries = entries_or_why(why);
  if (entries) return entries->device_count(why_none);
  if (why_none) *why_none = why;
  return 0;
}

std::string cuda_device_report() {
  std::string why;
  const CudaAutogradEntries* entries = entries_or_why(why);
  return entries ? entries->device_report() : "CUDA: " + why;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options) {
  std::string why;
  const CudaAutogradEntries* entries = entries_or_why(why);
  if (!entries) throw Error("no backend for device cuda:" + std::to_string(index) + ": " + why);
  return entries->make_backend(index, options);
}

AllocatorStats cuda_memory_stats(const Backend& backend) {
  if (!from_module(backend)) throw not_cuda("cuda_memory_stats", backend);
  return cuda_module_table<CudaAutogradEntries>(kCudaAutogradEntry).memory_stats(backend);
}

void* cuda_backend_stream(const Backend& backend) {
  if (!from_module(backend)) throw not_cuda("cuda_backend_stream", backend);
  return cuda_module_table<CudaAutogradEntries>(kCudaAutogradEntry).backend_stream(backend);
}

}  // namespace shardscope
