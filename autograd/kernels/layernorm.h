// LayerNorm over one row, split into the pieces a sequential CPU loop and a CUDA block both call.
// A row piece covers elements first, first + step, first + 2 step, ... below n: the CPU passes
// (0, 1), a CUDA thread (threadIdx.x, blockDim.x) and then combines the threads' partial results.
// Statistics and sums are kept in double whatever the element type T.
//   forward:  mean, rstd = 1 / sqrt(M2 / n + eps),  y = (x - mean) rstd gamma + beta
//   backward: xhat = (x - mean) rstd,  dxhat = dy gamma,
//             dx = rstd (dxhat - sum(dxhat) / n - xhat sum(dxhat xhat) / n),
//             dgamma += dy xhat,  dbeta += dy  (summed over rows)
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/kernels/host_device.h"
#include "autograd/kernels/welford.h"

namespace shardscope::kernels {

// Welford statistics (count, mean, M2) of the row piece.
template <class T>
SS_HOST_DEVICE Welford<double> layernorm_row_statistics(const T* x, std::int64_t n,
                                                        std::int64_t first, std::int64_t step) {
  Welford<double> w;
  for (std::int64_t j = first; j < n; j += step) welford_add(w, static_cast<double>(x[j]));
  return w;
}

// 1 / sqrt(variance + eps) of a row whose statistics are complete (count = the row length).
SS_HOST_DEVICE double layernorm_rstd(const Welford<double>& w, double eps) {
  return 1.0 / std::sqrt(w.m2 / w.count + eps);
}

// y = (x - mean) rstd gamma + beta on the row piece; the normalisation is rounded to T before
// the affine part, as the single-device and sharded LayerNorms both do.
template <class T>
SS_HOST_DEVICE void layernorm_normalise_row(const T* x, const T* gamma, const T* beta, T* y,
                                            std::int64_t n, std::int64_t first, std::int64_t step,
                                            double mean, double rstd) {
  for (std::int64_t j = first; j < n; j += step) {
    y[j] = static_cast<T>((static_cast<double>(x[j]) - mean) * rstd) * gamma[j] + beta[j];
  }
}

// The row sums backward needs: sum(dxhat) and sum(dxhat xhat).
struct LayerNormRowSums {
  double dxhat = 0.0;
  double dxhat_xhat = 0.0;
};

SS_HOST_DEVICE LayerNormRowSums operator+(const LayerNormRowSums& a, const LayerNormRowSums& b) {
  return LayerNormRowSums{a.dxhat + b.dxhat, a.dxhat_xhat + b.dxhat_xhat};
}

template <class T>
SS_HOST_DEVICE LayerNormRowSums layernorm_backward_row_sums(const T* dy, const T* x, const T* gamma,
                                                            std::int64_t n, std::int64_t first,
                                                            std::int64_t step, double mean,
                                                            double rstd) {
  LayerNormRowSums s;
  for (std::int64_t j = first; j < n; j += step) {
    const double xhat = (x[j] - mean) * rstd;
    const double dxhat = static_cast<double>(dy[j]) * gamma[j];
    s.dxhat += dxhat;
    s.dxhat_xhat += dxhat * xhat;
  }
  return s;
}

// dx on the row piece, given the full row's sums divided by the full row length (the sharded
// LayerNorm passes sums all-reduced over its group).
template <class T>
SS_HOST_DEVICE void layernorm_backward_row(const T* dy, const T* x, const T* gamma, T* dx,
                                           std::int64_t n, std::int64_t first, std::int64_t step,
                                           double mean, double rstd, double mean_dxhat,
                                           double mean_dxhat_xhat) {
  for (std::int64_t j = first; j < n; j += step) {
    const double xhat = (x[j] - mean) * rstd;
    const double dxhat = static_cast<double>(dy[j]) * gamma[j];
    dx[j] = static_cast<T>(rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// One row's contribution to dgamma[j] and dbeta[j]; callers sum over rows in row order.
template <class T>
SS_HOST_DEVICE void layernorm_param_grad_add(double& dgamma, double& dbeta, T dy, T x, double mean,
                                             double rstd) {
  const double xhat = (x - mean) * rstd;
  dgamma += dy * xhat;
  dbeta += dy;
}

}  // namespace shardscope::kernels
