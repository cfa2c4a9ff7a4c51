// What the x86-64 CPU running the process can execute beyond the baseline the library is compiled
// for, asked once (CPUID, and XGETBV for whether the operating system saves the wider registers).
// The CPU backend's fast paths compile their kernels for those instructions with a target
// attribute and call them only when these say so; elsewhere (another CPU, another architecture)
// they take the plain path.
#pragma once

#if defined(__x86_64__)
#define SHARDSCOPE_X86 1
#endif

namespace shardscope::cpu {

// AVX2, with the OS saving the SSE and AVX state.
bool cpu_has_avx2();

// AVX512F, with the OS saving the SSE, AVX and AVX-512 state.
bool cpu_has_avx512f();

// AVX512F as above and AVX512_BF16 (vdpbf16ps).
bool cpu_has_avx512_bf16();

// Throws StateError when the CPU backend's loops, compiled for x86-64 level `built_level`
// (SHARDSCOPE_CPU_ISA; 0 or 1: the baseline, nothing to check), would meet a CPU of a lower
// `cpu_level` (x86_level.h; 0 off x86-64). make_backend calls it before it makes a CPU backend;
// the message says which SHARDSCOPE_CPU_ISA this CPU needs.
void check_cpu_isa(int built_level, int cpu_level);

}  // namespace shardscope::cpu
