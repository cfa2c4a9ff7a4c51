// GeLU, tanh form (Hendrycks & Gimpel 2016), and its derivative, per element.
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// Evaluated through the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) = s: one exp instead of a
// tanh, which costs about four times as much on the CPU (glibc's tanhf goes through expm1f) and
// is the same function. exp(-2u) overflowing to +inf for very negative x gives s = 0, the limit.
#pragma once

#include <cmath>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

// s = 0.5 (1 + tanh(u)) for u = sqrt(2/pi) (x + 0.044715 x^3), in three steps (a CPU loop runs
// each over many elements, so that only the exp, a libm call, stays scalar): -2u, its exp, s.
template <class T>
SS_HOST_DEVICE T gelu_exp_argument(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(-2) * u;
}

template <class T>
SS_HOST_DEVICE T gelu_s_from_exp(T e) {
  return T(1) / (T(1) + e);
}

template <class T>
SS_HOST_DEVICE T gelu_half_one_plus_tanh(T x) {
  return gelu_s_from_exp(std::exp(gelu_exp_argument(x)));
}

template <class T>
SS_HOST_DEVICE T gelu(T x) {
  return x * gelu_half_one_plus_tanh(x);
}

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  t = tanh(u)
//             = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2)   (1 + t = 2s, 1 - t = 2 - 2s)
// ... given s = gelu_half_one_plus_tanh(x).
template <class T>
SS_HOST_DEVICE T gelu_grad_from_s(T x, T s) {
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return s + T(2) * x * s * (T(1) - s) * du;
}

template <class T>
SS_HOST_DEVICE T gelu_grad(T x) {
  return gelu_grad_from_s(x, gelu_half_one_plus_tanh(x));
}

}  // namespace shardscope::kernels
