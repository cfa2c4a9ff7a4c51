// The bf16 product on the CPU's own bf16 dot products (AVX512-BF16's vdpbf16ps: each f32 lane
// adds the products of two bf16 pairs), where the CPU has them: twice the multiply-adds per
// instruction of an f32 FMA, and no widening of the operands to f32 buffers first. The products
// are exact in f32 and accumulate in f32, in an order that depends only on k (blocks of
// kBf16BlockK, then pairs in order), never on how the rows are split over threads; each element of
// C is then rounded to bf16 once, as the widening path (CpuBackend::gemm_through_f32) does.
// Differs from that path's sgemm only in the order of the f32 additions, and below 1.2e-38:
// vdpbf16ps takes subnormal inputs as zero and flushes subnormal sums to zero.
#pragma once

#include <cstdint>

#include "autograd/cpu/thread_pool.h"
#include "autograd/gemm.h"

namespace shardscope::cpu {

// The k elements (an even number) of one block of the product.
constexpr std::int64_t kBf16BlockK = 256;

// Whether this build has the kernel and the CPU and the operating system run it (CPUID: AVX512F
// and AVX512_BF16; XGETBV: the OS saves the AVX-512 registers), unless the environment variable
// SHARDSCOPE_CPU_BF16_GEMM is "f32" (the widening path, to compare the two). Read once.
bool bf16_dot_products();

// C = alpha op(A) op(B) + beta C for bf16 A, B and C (their bits, bfloat16's), every entry of the
// batch, split over `threads`. Only when bf16_dot_products(); d is valid.
void gemm_bf16_dot(const GemmDesc& d, const std::uint16_t* a, const std::uint16_t* b,
                   std::uint16_t* c, RowThreads& threads);

}  // namespace shardscope::cpu
