// Lab 1: the backward math of three ops, on plain values. The tests wrap each function into an
// autograd op with apply_function (forward = the framework's op, backward = yours) and judge it
// with the finite-difference gradient checker and against the framework's own backward.
// All arrays are row-major; "rows" is the product of every dim but the last.
#pragma once

#include <cstdint>
#include <vector>

namespace shardscope::labs {

// GeLU in the tanh form the framework uses (autograd/kernels/gelu.h):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// Returns dx with dx[i] = dy[i] * gelu'(x[i]). x and dy have the same length.
std::vector<double> gelu_backward(const std::vector<double>& x, const std::vector<double>& dy);

// The three gradients of a LayerNorm.
struct LayerNormGrads {
  std::vector<double> dx;      // [rows, h]
  std::vector<double> dgamma;  // [h]
  std::vector<double> dbeta;   // [h]
};

// LayerNorm over the last dim of x [rows, h] (biased variance, as autograd/ops.h):
//   mean = sum_j x_j / h,  var = sum_j (x_j - mean)^2 / h,  rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) rstd,  y = gamma xhat + beta
// Given x [rows, h], gamma [h] and the output gradient dy [rows, h], returns dx [rows, h],
// dgamma [h] and dbeta [h]. The forward's mean and rstd are not passed: recompute them per row.
LayerNormGrads layernorm_backward(const std::vector<double>& x, const std::vector<double>& gamma,
                                  const std::vector<double>& dy, std::int64_t rows, std::int64_t h,
                                  double eps);

// Softmax over the last dim of [rows, n]: y_j = exp(x_j) / sum_k exp(x_k), per row. Given the
// forward's output y [rows, n] (causal rows hold exact zeros past their last visible key) and
// dy [rows, n], returns dx [rows, n].
std::vector<double> softmax_backward(const std::vector<double>& y, const std::vector<double>& dy,
                                     std::int64_t rows, std::int64_t n);

}  // namespace shardscope::labs
