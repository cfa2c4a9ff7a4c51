// The per-row and per-element parts of the losses, shared by the CPU backend and the CUDA kernels.
//   MSE:            mean over elements of (pred - target)^2
//   cross-entropy:  probs = softmax(logits) (kernels/softmax.h),
//                   loss row r = log(sum_j exp(x_j - max)) + max - x_target,
//                   dlogits = scale (probs - onehot(target))
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

template <class T>
SS_HOST_DEVICE double squared_error(T pred, T target) {
  const double d = static_cast<double>(pred) - target;
  return d * d;
}

// -log softmax(x)_target of one row, from its max and sum exp(x_j - max).
SS_HOST_DEVICE double cross_entropy_row_loss(double sum_exp, double max, double x_target) {
  return std::log(sum_exp) + max - x_target;
}

template <class T>
SS_HOST_DEVICE T cross_entropy_grad(T prob, bool is_target, double scale) {
  return static_cast<T>(scale * (prob - (is_target ? 1.0 : 0.0)));
}

}  // namespace shardscope::kernels
