// The bf16 product on the CPU's AVX512-BF16 dot products (autograd/cpu/gemm_bf16.h), where this
// CPU has them: each element within one rounding to bf16 of the exact product (summed in double
// here) plus the f32 sums' error. Every transpose, batch, stride, alpha and beta is also compared
// with the reference backend by CpuVsReference.GemmEveryTransposeBatchStrideAlphaAndBeta, which
// runs whichever path the CPU backend takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/cpu/gemm_bf16.h"
#include "autograd/errors.h"
#include "autograd/kernels/half.h"

namespace shardscope {
namespace {

using kernels::BFloat16;

TEST(CpuBf16Gemm, DotProductsGiveTheProductRoundedOnce) {
  if (!cpu::bf16_dot_products()) {
    GTEST_SKIP() << "this CPU (or the OS) has no AVX512-BF16 dot products, or "
                    "SHARDSCOPE_CPU_BF16_GEMM=f32: bf16 products take the widening path";
  }
  // Odd k (a pair half empty), m and n off the 8 x 32 tile, and k over one block (256).
  const std::int64_t m = 19, n = 45, k = 301;
  std::vector<std::uint16_t> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  std::vector<double> da(a.size()), db(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const BFloat16 v(std::sin(0.37 * static_cast<double>(i)));
    a[i] = v.bits;
    da[i] = static_cast<float>(v);
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    const BFloat16 v(std::cos(0.11 * static_cast<double>(i)));
    b[i] = v.bits;
    db[i] = static_cast<float>(v);
  }
  std::vector<std::uint16_t> c(static_cast<std::size_t>(m * n));
  cpu::RowThreads threads(2);
  cpu::gemm_bf16_dot(GemmDesc::packed(m, n, k), a.data(), b.data(), c.data(), threads);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = 0, magnitude = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double term =
            da[static_cast<std::size_t>(i * k + p)] * db[static_cast<std::size_t>(p * n + j)];
        exact += term;
        magnitude += std::fabs(term);
      }
      const double got =
          static_cast<float>(BFloat16::from_bits(c[static_cast<std::size_t>(i * n + j)]));
      // One rounding to bf16 (u = 2^-8) and f32 sums of k terms (k 2^-24 of their magnitudes).
      const double bound = 0x1p-8 * std::fabs(exact) + static_cast<double>(k) * 0x1p-24 * magnitude;
      EXPECT_LE(std::fabs(got - exact), bound) << "C[" << i << ", " << j << "]";
    }
  }
}

// With k = 1 each sum is one exact product, so every bit of C is the write-back's: alpha acc +
// beta C in f32, rounded as BFloat16 rounds, in the 16-wide body (columns 0-31) and the tail.
TEST(CpuBf16Gemm, TheWriteBackRoundsAsBFloat16DoesBitForBit) {
  if (!cpu::bf16_dot_products()) {
    GTEST_SKIP() << "this CPU (or the OS) has no AVX512-BF16 dot products, or "
                    "SHARDSCOPE_CPU_BF16_GEMM=f32: bf16 products take the widening path";
  }
  const std::int64_t m = 3, n = 40;
  std::vector<std::uint16_t> a(m), b(n), c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    a[static_cast<std::size_t>(i)] = BFloat16(1.0 + 0.37 * static_cast<double>(i)).bits;
  for (std::int64_t j = 0; j < n; ++j) {
    b[static_cast<std::size_t>(j)] = BFloat16(std::sin(1.3 * static_cast<double>(j)) * 1e3).bits;
  }
  for (std::size_t i = 0; i < c.size(); ++i)
    c[i] = BFloat16(std::cos(0.7 * static_cast<double>(i))).bits;
  const std::vector<std::uint16_t> before = c;
  GemmDesc d = GemmDesc::packed(m, n, 1);
  d.alpha = 1.0 / 3.0;
  d.beta = 0.7;
  cpu::RowThreads threads(1);
  cpu::gemm_bf16_dot(d, a.data(), b.data(), c.data(), threads);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(i * n + j);
      const float product =
          static_cast<float>(BFloat16::from_bits(a[static_cast<std::size_t>(i)])) *
          static_cast<float>(BFloat16::from_bits(b[static_cast<std::size_t>(j)]));
      const float scaled = static_cast<float>(d.alpha) * product;
      const float old =
          static_cast<float>(d.beta) * static_cast<float>(BFloat16::from_bits(before[at]));
      EXPECT_EQ(c[at], BFloat16(scaled + old).bits) << "C[" << i << ", " << j << "]";
    }
  }
}

}  // namespace
}  // namespace shardscope
