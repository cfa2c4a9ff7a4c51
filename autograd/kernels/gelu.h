// GeLU, tanh form (Hendrycks & Gimpel 2016), and its derivative, per element.
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
#pragma once

#include <cmath>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

template <class T>
SS_HOST_DEVICE T gelu(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  t = tanh(u)
template <class T>
SS_HOST_DEVICE T gelu_grad(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  const T t = std::tanh(u);
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

}  // namespace shardscope::kernels
