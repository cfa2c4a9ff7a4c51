// The CUDA devices this process sees and the library versions, for the CLI's start-up lines. Plain
// C++ against the CUDA runtime and cuBLAS (built with the CUDA part only).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "autograd/cuda/cuda_backend.h"

namespace shardscope {
namespace {

std::string version_string(int v) {  // CUDA's 1000 * major + 10 * minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

int cuda_device_count(std::string* why_none) {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not see it
    if (why_none) {
      *why_none = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(code) + ": " +
                  cudaGetErrorString(code);
    }
    return 0;
  }
  if (count == 0 && why_none) *why_none = "cudaGetDeviceCount reports no device";
  return count;
}

std::string cuda_device_report() {
  int driver = 0, runtime = 0, major = 0, minor = 0, patch = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  std::string out = "CUDA runtime " + version_string(runtime) + ", driver " +
                    (driver ? version_string(driver) : std::string("none")) + ", cuBLAS " +
                    std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(patch);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return out + "; no device: " + cudaGetErrorString(status);
  }
  out += "; " + std::to_string(count) + " device(s)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out += "\ncuda:" + std::to_string(i) + " " + prop.name + " (sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB)";
  }
  return out;
}

}  // namespace shardscope
