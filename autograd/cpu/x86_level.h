// The x86-64 microarchitecture level (the psABI's x86-64-v2, -v3, -v4) of the CPU running the
// process, from the features that define each level, as the compiler's runtime library reports
// them (CPUID, and for AVX and AVX-512 whether the operating system saves their registers): the
// features GCC's and Clang's __builtin_cpu_supports both name (not CX16, F16C, LZCNT or MOVBE,
// which every CPU with the rest of its level has).
// Header-only: cmake/cpu_isa_probe.cpp includes it to find the build machine's level
// (SHARDSCOPE_CPU_ISA=native), and the library to check that the CPU it runs on has the level its
// loops were compiled for (x86_features.h, check_cpu_isa).
#pragma once

namespace shardscope::cpu {

// 1 (the x86-64 baseline) to 4; 0 off x86-64.
inline int x86_level() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("sse3") &&
                  __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("fma");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
#else
  return 0;
#endif
}

}  // namespace shardscope::cpu
