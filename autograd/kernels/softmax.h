// Softmax over one row (with the causal mask of attention scores) and its backward, in pieces that
// a sequential CPU loop and a CUDA block both call. A row piece covers elements first,
// first + step, ... below n: the CPU passes (0, 1), a CUDA thread (threadIdx.x, blockDim.x).
// Maxima and sums are kept in double whatever the element type T.
//   forward:  y_j = exp(x_j - max) / sum_k exp(x_k - max) over the visible keys, 0 beyond them
//   backward: dx_j = y_j (dy_j - sum_k dy_k y_k)
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

// How many keys row `row` of a [.., s_q, s_k] tensor sees. Causal: query i (aligned to the end of
// the keys) sees keys 0 .. i + s_k - s_q.
SS_HOST_DEVICE std::int64_t softmax_visible(std::int64_t row, std::int64_t s_q, std::int64_t s_k,
                                            bool causal) {
  return causal ? (row % s_q) + (s_k - s_q) + 1 : s_k;
}

// Whether element i (row-major) of causal probabilities [.., s_q, s_k] lies after its row's
// visible keys: dropped without drawing (DropoutSpec::causal).
SS_HOST_DEVICE bool causal_hidden(std::int64_t i, std::int64_t s_q, std::int64_t s_k) {
  return i % s_k >= softmax_visible(i / s_k, s_q, s_k, true);
}

// std::max(a, b), also on the device.
SS_HOST_DEVICE double max_of(double a, double b) {
  return a < b ? b : a;
}

SS_HOST_DEVICE double negative_infinity() {
  return -std::numeric_limits<double>::infinity();
}

template <class T>
SS_HOST_DEVICE double row_max(const T* x, std::int64_t n, std::int64_t first, std::int64_t step) {
  double m = negative_infinity();
  for (std::int64_t j = first; j < n; j += step) m = max_of(m, static_cast<double>(x[j]));
  return m;
}

// sum exp(x_j - max) over the row piece.
template <class T>
SS_HOST_DEVICE double row_sum_exp(const T* x, std::int64_t n, std::int64_t first, std::int64_t step,
                                  double max) {
  double s = 0.0;
  for (std::int64_t j = first; j < n; j += step) s += std::exp(x[j] - max);
  return s;
}

// y over the row piece of a row of n elements whose first `visible` are unmasked.
template <class T>
SS_HOST_DEVICE void softmax_write_row(const T* x, T* y, std::int64_t n, std::int64_t visible,
                                      std::int64_t first, std::int64_t step, double max,
                                      double sum_exp) {
  for (std::int64_t j = first; j < n; j += step) {
    y[j] = j < visible ? static_cast<T>(std::exp(x[j] - max) / sum_exp) : T(0);
  }
}

// sum dy_j y_j over the row piece.
template <class T>
SS_HOST_DEVICE double softmax_backward_dot(const T* y, const T* dy, std::int64_t n,
                                           std::int64_t first, std::int64_t step) {
  double dot = 0.0;
  for (std::int64_t j = first; j < n; j += step) dot += static_cast<double>(dy[j]) * y[j];
  return dot;
}

template <class T>
SS_HOST_DEVICE void softmax_backward_row(const T* y, const T* dy, T* dx, std::int64_t n,
                                         std::int64_t first, std::int64_t step, double dot) {
  for (std::int64_t j = first; j < n; j += step) dx[j] = static_cast<T>(y[j] * (dy[j] - dot));
}

}  // namespace shardscope::kernels
