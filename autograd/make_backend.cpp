// make_backend, which checks that the CPU can run the CPU backend's loops before it makes one.
// Compiled at the compiler's default instruction set (autograd/CMakeLists.txt), unlike those
// loops, so that the check itself runs anywhere.
#include "autograd/backend.h"
#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/x86_features.h"
#include "autograd/cpu/x86_level.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/reference/reference_backend.h"

#ifndef SHARDSCOPE_CPU_LEVEL
#define SHARDSCOPE_CPU_LEVEL 0  // the loops at the compiler's default: nothing to check
#endif

namespace shardscope {

std::unique_ptr<Backend> make_backend(Device device) {
  if (device.kind == DeviceKind::cpu) {
    cpu::check_cpu_isa(SHARDSCOPE_CPU_LEVEL, cpu::x86_level());
    return std::make_unique<CpuBackend>();
  }
  if (device.kind == DeviceKind::reference) return make_reference_backend();
  return make_cuda_backend(device.index);
}

}  // namespace shardscope
