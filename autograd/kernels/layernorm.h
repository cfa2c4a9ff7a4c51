// LayerNorm and RMSNorm over one row, split into the pieces a sequential CPU loop and a CUDA
// block both call. A row piece covers elements first, first + step, first + 2 step, ... below n:
// the CPU passes (0, 1), a CUDA thread (threadIdx.x, blockDim.x) and then combines the threads'
// partial results. Statistics and sums are kept in double whatever the element type T (f32,
// f64, or a 2-byte type of kernels/half.h).
//   forward:  mean, rstd = 1 / sqrt(M2 / n + eps),  y = (x - mean) rstd gamma + beta
//   backward: xhat = (x - mean) rstd,  dxhat = dy gamma,
//             dx = rstd (dxhat - sum(dxhat) / n - xhat sum(dxhat xhat) / n),
//             dgamma += dy xhat,  dbeta += dy  (summed over rows)
// RMSNorm (Zhang & Sennrich 2019) is the uncentered case, the same pieces with mean = 0 and no
// beta: the statistics with centered = false give M2 = sum x^2, so rstd = 1 / sqrt(mean(x^2) +
// eps); y = x rstd gamma; and with mean = 0 and mean(dxhat) = 0 the backward row is its
//   dx = rstd (dxhat - xhat sum(dxhat xhat) / n),  dgamma += dy xhat  (no dbeta).
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/kernels/half.h"
#include "autograd/kernels/host_device.h"
#include "autograd/kernels/welford.h"

namespace shardscope::kernels {

// One value into a row's statistics: Welford's update, or with centered = false (RMSNorm) the
// mean pinned at 0, so that M2 = sum x^2. welford_combine merges uncentered pieces exactly too:
// their means are both 0, so it adds the counts and the M2s.
SS_HOST_DEVICE void row_statistics_add(Welford<double>& w, double x, bool centered) {
  if (centered) {
    welford_add(w, x);
  } else {
    w.count += 1.0;
    w.m2 += x * x;
  }
}

// Welford statistics (count, mean, M2) of the row piece; centered = false: (count, 0, sum x^2).
template <class T>
SS_HOST_DEVICE Welford<double> layernorm_row_statistics(const T* x, std::int64_t n,
                                                        std::int64_t first, std::int64_t step,
                                                        bool centered = true) {
  Welford<double> w;
  for (std::int64_t j = first; j < n; j += step) {
    row_statistics_add(w, static_cast<double>(x[j]), centered);
  }
  return w;
}

// 1 / sqrt(M2 / n + eps) of a row whose statistics are complete (count = the row length n): for
// LayerNorm 1 / sqrt(variance + eps), for RMSNorm's uncentered statistics 1 / sqrt(mean(x^2) +
// eps).
SS_HOST_DEVICE double layernorm_rstd(const Welford<double>& w, double eps) {
  return 1.0 / std::sqrt(w.m2 / w.count + eps);
}

// y = (x - mean) rstd gamma + beta on the row piece; the normalisation is rounded to T's compute
// type C (T itself, f32 for the 2-byte types) before the affine part, as the single-device and
// sharded LayerNorms both do, and y to T once. beta == nullptr leaves out the shift: RMSNorm's
// y = x rstd gamma (with mean = 0).
template <class T>
SS_HOST_DEVICE void layernorm_normalise_row(const T* x, const T* gamma, const T* beta, T* y,
                                            std::int64_t n, std::int64_t first, std::int64_t step,
                                            double mean, double rstd) {
  using C = compute_t<T>;
  for (std::int64_t j = first; j < n; j += step) {
    const C normalised = static_cast<C>((static_cast<double>(x[j]) - mean) * rstd);
    const C scaled = normalised * static_cast<C>(gamma[j]);
    y[j] = static_cast<T>(beta ? scaled + static_cast<C>(beta[j]) : scaled);
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

// One row's contribution to dgamma[j] and dbeta[j]; callers sum over rows in row order. dbeta ==
// nullptr: RMSNorm's dgamma alone (with mean = 0).
template <class T>
SS_HOST_DEVICE void layernorm_param_grad_add(double& dgamma, double* dbeta, T dy, T x, double mean,
                                             double rstd) {
  const double xhat = (x - mean) * rstd;
  dgamma += dy * xhat;
  if (dbeta) *dbeta += dy;
}

template <class T>
SS_HOST_DEVICE void layernorm_param_grad_add(double& dgamma, double& dbeta, T dy, T x, double mean,
                                             double rstd) {
  layernorm_param_grad_add(dgamma, &dbeta, dy, x, mean, rstd);
}

}  // namespace shardscope::kernels
