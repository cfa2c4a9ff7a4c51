// Lab 1 solution: the backward functions of GeLU (tanh form), LayerNorm and softmax on values.
#include <cmath>
#include <cstddef>

#include "labs/01-autograd/lab.h"

namespace shardscope::labs {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

}  // namespace

std::vector<double> gelu_backward(const std::vector<double>& x, const std::vector<double>& dy) {
  std::vector<double> dx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
    // product rule on 0.5 x (1 + t): 0.5 (1 + t) + 0.5 x (1 - t^2) du
    dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
  }
  return dx;
}

LayerNormGrads layernorm_backward(const std::vector<double>& x, const std::vector<double>& gamma,
                                  const std::vector<double>& dy, std::int64_t rows, std::int64_t h,
                                  double eps) {
  LayerNormGrads g{std::vector<double>(x.size()), std::vector<double>(at(h), 0.0),
                   std::vector<double>(at(h), 0.0)};
  const double n = static_cast<double>(h);
  std::vector<double> xhat(at(h)), dxhat(at(h));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t row = at(r * h);
    double mean = 0.0;
    for (std::int64_t j = 0; j < h; ++j) mean += x[row + at(j)];
    mean /= n;
    double var = 0.0;
    for (std::int64_t j = 0; j < h; ++j) var += (x[row + at(j)] - mean) * (x[row + at(j)] - mean);
    const double rstd = 1.0 / std::sqrt(var / n + eps);
    double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      xhat[at(j)] = (x[row + at(j)] - mean) * rstd;
      dxhat[at(j)] = dy[row + at(j)] * gamma[at(j)];
      sum_dxhat += dxhat[at(j)];
      sum_dxhat_xhat += dxhat[at(j)] * xhat[at(j)];
      g.dgamma[at(j)] += dy[row + at(j)] * xhat[at(j)];
      g.dbeta[at(j)] += dy[row + at(j)];
    }
    for (std::int64_t j = 0; j < h; ++j) {
      g.dx[row + at(j)] = rstd * (dxhat[at(j)] - sum_dxhat / n - xhat[at(j)] * sum_dxhat_xhat / n);
    }
  }
  return g;
}

std::vector<double> softmax_backward(const std::vector<double>& y, const std::vector<double>& dy,
                                     std::int64_t rows, std::int64_t n) {
  std::vector<double> dx(y.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t row = at(r * n);
    double dot = 0.0;
    for (std::int64_t j = 0; j < n; ++j) dot += y[row + at(j)] * dy[row + at(j)];
    for (std::int64_t j = 0; j < n; ++j) dx[row + at(j)] = y[row + at(j)] * (dy[row + at(j)] - dot);
  }
  return dx;
}

}  // namespace shardscope::labs
