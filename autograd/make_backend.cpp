// make_backend, and the check that the CPU can run the CPU backend's loops. Compiled at the
// compiler's default instruction set (autograd/CMakeLists.txt), unlike those loops, so that the
// check itself runs anywhere.
#include <string>

#include "autograd/backend.h"
#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/x86_features.h"
#include "autograd/cpu/x86_level.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"
#include "autograd/reference/reference_backend.h"

#ifndef SHARDSCOPE_CPU_LEVEL
#define SHARDSCOPE_CPU_LEVEL 0  // the loops at the compiler's default: nothing to check
#endif

namespace shardscope {
namespace {

std::string level_name(int level) {
  return level <= 1 ? "x86-64" : "x86-64-v" + std::to_string(level);
}

}  // namespace

void cpu::check_cpu_isa(int built_level, int cpu_level) {
  if (built_level <= 1 || cpu_level >= built_level) return;
  throw StateError("cpu backend: this build's CPU loops use " + level_name(built_level) +
                   " instructions (SHARDSCOPE_CPU_ISA, by default the build machine's level) and "
                   "this CPU is " +
                   (cpu_level == 0 ? std::string("not x86-64") : level_name(cpu_level)) +
                   ": configure the build with SHARDSCOPE_CPU_ISA=" +
                   (cpu_level == 0 ? std::string("none") : level_name(cpu_level)) +
                   " (or native on this machine)");
}

std::unique_ptr<Backend> make_backend(Device device) {
  if (device.kind == DeviceKind::cpu) {
    cpu::check_cpu_isa(SHARDSCOPE_CPU_LEVEL, cpu::x86_level());
    return std::make_unique<CpuBackend>();
  }
  if (device.kind == DeviceKind::reference) return make_reference_backend();
  return make_cuda_backend(device.index);
}

}  // namespace shardscope
