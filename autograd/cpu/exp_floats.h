// exp of f32 values in a loop that vectorises: no libm call (glibc's expf is scalar and was the
// largest element cost of a small bf16 or f32 step, in GeLU and SwiGLU). Cody and Waite's range
// reduction x = n ln2 + r (ln2 in two parts, so r is exact), Cephes's degree-7 polynomial for
// exp(r) on |r| <= ln2 / 2, and 2^n applied as two powers of two, so that results down to the
// subnormals round once. Branch-free: +inf above ln(FLT_MAX), 0 far below, NaN stays NaN. Within
// 1.5 ulp of the exact value (0.97 measured: tests/autograd/exp_floats_test.cpp), so GeLU and
// SwiGLU differ from libm's by f32 roundings, below the CPU backend's tolerance against the
// reference backend.
#pragma once

#include <cstdint>
#include <cstring>

namespace shardscope::cpu {

inline float exp_float(float x) {
  // Above ln(FLT_MAX) = 88.7228 the last product overflows to +inf by itself; 89 keeps 2^n finite.
  constexpr float kHigh = 89.0f;
  constexpr float kLow = -104.0f;  // exp(x) < 2^-150 below it: rounds to 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  // Clamped, NaN as kLow (so that every conversion below is defined; restored at the end): a
  // maximum and a minimum, each one instruction when vectorised.
  const float low = x > kLow ? x : kLow;
  const float c = low < kHigh ? low : kHigh;
  const float n = (c * kLog2e + kRound) - kRound;  // round(c / ln2), in [-150, 128]
  const float r = (c - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n = 2^half 2^(n - half), each a normal float for n in [-150, 128] (half rounds down: one
  // shift; the first product is exact, the second rounds once).
  const std::int32_t whole = static_cast<std::int32_t>(n), half = whole >> 1;
  const std::uint32_t bits1 = static_cast<std::uint32_t>(half + 127) << 23;
  const std::uint32_t bits2 = static_cast<std::uint32_t>(whole - half + 127) << 23;
  float scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof scale1);
  std::memcpy(&scale2, &bits2, sizeof scale2);
  const float result = p * scale1 * scale2;
  return x != x ? x : result;
}

// v[j] = exp(v[j]) for j < n: exp_float in a loop compiled for AVX-512, for AVX2 with FMA and
// for the x86-64 baseline, the one this CPU runs chosen when the library loads
// (exp_floats.cpp). With FMA the polynomial rounds less often: results may differ from the
// baseline's in the last bit, within the same bound.
void exp_floats(float* v, std::int64_t n);

}  // namespace shardscope::cpu
