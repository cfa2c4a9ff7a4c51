#include "autograd/cpu/x86_features.h"

#include <string>

#include "autograd/errors.h"

#ifdef SHARDSCOPE_X86
#include <cpuid.h>
#endif

namespace shardscope::cpu {

#ifdef SHARDSCOPE_X86
namespace {

struct Features {
  bool avx2 = false, avx512f = false, avx512_bf16 = false;
};

Features detect() {
  Features f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return f;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6u) != 0x6u) return f;  // the OS saves the SSE and AVX state
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = (ebx & (1u << 5)) != 0;
  if ((lo & 0xE6u) != 0xE6u || !(ebx & (1u << 16))) return f;  // and the AVX-512 state; AVX512F
  f.avx512f = true;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512_bf16 = (eax & (1u << 5)) != 0;
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

}  // namespace

bool cpu_has_avx2() {
  return features().avx2;
}
bool cpu_has_avx512f() {
  return features().avx512f;
}
bool cpu_has_avx512_bf16() {
  return features().avx512_bf16;
}
#else
bool cpu_has_avx2() {
  return false;
}
bool cpu_has_avx512f() {
  return false;
}
bool cpu_has_avx512_bf16() {
  return false;
}
#endif

namespace {

std::string level_name(int level) {
  return level <= 1 ? "x86-64" : "x86-64-v" + std::to_string(level);
}

}  // namespace

void check_cpu_isa(int built_level, int cpu_level) {
  if (built_level <= 1 || cpu_level >= built_level) return;
  throw StateError("cpu backend: this build's CPU loops use " + level_name(built_level) +
                   " instructions (SHARDSCOPE_CPU_ISA, by default the build machine's level) and "
                   "this CPU is " +
                   (cpu_level == 0 ? std::string("not x86-64") : level_name(cpu_level)) +
                   ": configure the build with SHARDSCOPE_CPU_ISA=" +
                   (cpu_level == 0 ? std::string("none") : level_name(cpu_level)) +
                   " (or native on this machine)");
}

}  // namespace shardscope::cpu
