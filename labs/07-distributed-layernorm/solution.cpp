// Lab 7 solution: the exact distributed LayerNorm (two all-reduces of per-row sums forward, one
// backward), the local model, how far they differ, and the single-device model of the local one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/07-distributed-layernorm/lab.h"

namespace shardscope::labs {
namespace {

std::int64_t rows_of(const Tensor& x) {
  return x.numel() / x.dim(-1);
}

void require_f64(const Tensor& t, const char* what) {
  if (t.dtype() != DType::f64) {
    throw DTypeError(std::string("lab 7: ") + what + " must be f64, given " + t.describe());
  }
}

}  // namespace

RowStatistics distributed_row_statistics(ProcessGroup& group, const Tensor& x_shard, double eps) {
  require_f64(x_shard, "x");
  const std::int64_t rows = rows_of(x_shard), w = x_shard.dim(-1);
  const double f = static_cast<double>(w * group.size());
  const double* x = x_shard.data<double>();
  Context& ctx = x_shard.ctx();
  // Pass 1: sum x over this rank's features, all-reduced: the full row's sum.
  RowStatistics st{Tensor::zeros(ctx, Shape{rows}, DType::f64),
                   Tensor::zeros(ctx, Shape{rows}, DType::f64)};
  double* mean = st.mean.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < w; ++j) mean[r] += x[r * w + j];
  }
  group.all_reduce(st.mean, ReduceOp::sum);
  for (std::int64_t r = 0; r < rows; ++r) mean[r] /= f;
  // Pass 2: squares centred on the full row's mean, all-reduced: f * var. (Centring first avoids
  // the cancellation of E[x^2] - mean^2.)
  double* rstd = st.rstd.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < w; ++j) {
      const double d = x[r * w + j] - mean[r];
      rstd[r] += d * d;
    }
  }
  group.all_reduce(st.rstd, ReduceOp::sum);
  for (std::int64_t r = 0; r < rows; ++r) rstd[r] = 1.0 / std::sqrt(rstd[r] / f + eps);
  return st;
}

Tensor distributed_backward_row_sums(ProcessGroup& group, const Tensor& dy, const Tensor& x_shard,
                                     const Tensor& gamma_shard, const RowStatistics& stats) {
  const std::int64_t rows = rows_of(x_shard), w = x_shard.dim(-1);
  const double *x = x_shard.data<double>(), *g = gamma_shard.data<double>();
  const double *gy = dy.data<double>(), *mean = stats.mean.data<double>(),
               *rstd = stats.rstd.data<double>();
  Tensor sums = Tensor::zeros(x_shard.ctx(), Shape{rows, 2}, DType::f64);
  double* s = sums.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < w; ++j) {
      const double xhat = (x[r * w + j] - mean[r]) * rstd[r];
      const double dxhat = gy[r * w + j] * g[j];
      s[2 * r] += dxhat;
      s[2 * r + 1] += dxhat * xhat;
    }
  }
  group.all_reduce(sums, ReduceOp::sum);  // [rows, 2]: the full rows' sums
  return sums;
}

ParallelTensor layernorm_distributed(ProcessGroup& group, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps) {
  expect_placement("lab_layernorm_distributed", x, Placement::shard(x.global.rank() - 1));
  require_f64(x.local, "x");
  ProcessGroup* g = &group;
  const double f = static_cast<double>(x.global.dims().back());
  const Tensor y = apply_function1(
      "lab_layernorm_distributed", {x.local, gamma_shard, beta_shard},
      // x [rows, w], gamma, beta [w] -> y [rows, w]; saves x, gamma, mean, rstd
      [g, eps](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
        const Tensor &xs = in[0], &gamma = in[1], &beta = in[2];
        const RowStatistics st = distributed_row_statistics(*g, xs, eps);
        const std::int64_t rows = rows_of(xs), w = xs.dim(-1);
        Tensor out = Tensor::empty(xs.ctx(), xs.shape(), DType::f64);
        const double *xv = xs.data<double>(), *gv = gamma.data<double>(), *bv = beta.data<double>(),
                     *mean = st.mean.data<double>(), *rstd = st.rstd.data<double>();
        double* yv = out.data<double>();
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < w; ++j) {
            yv[r * w + j] = (xv[r * w + j] - mean[r]) * rstd[r] * gv[j] + bv[j];
          }
        }
        save = {xs, gamma, st.mean, st.rstd};
        return std::vector<Tensor>{out};
      },
      // dy [rows, w] -> dx [rows, w], dgamma, dbeta [w]; one all-reduce of [rows, 2]
      [g, f](const std::vector<Tensor>& saved, const std::vector<Tensor>& grads) {
        const Tensor &xs = saved[0], &gamma = saved[1], &dy = grads[0];
        const RowStatistics st{saved[2], saved[3]};
        const Tensor sums = distributed_backward_row_sums(*g, dy, xs, gamma, st);
        const std::int64_t rows = rows_of(xs), w = xs.dim(-1);
        Tensor dx = Tensor::empty(xs.ctx(), xs.shape(), DType::f64);
        Tensor dgamma = Tensor::zeros(xs.ctx(), gamma.shape(), DType::f64);
        Tensor dbeta = Tensor::zeros(xs.ctx(), gamma.shape(), DType::f64);
        const double *xv = xs.data<double>(), *gv = gamma.data<double>(), *gy = dy.data<double>(),
                     *s = sums.data<double>(), *mean = st.mean.data<double>(),
                     *rstd = st.rstd.data<double>();
        double *dxv = dx.data<double>(), *dg = dgamma.data<double>(), *db = dbeta.data<double>();
        for (std::int64_t r = 0; r < rows; ++r) {
          const double mean_dxhat = s[2 * r] / f, mean_dxhat_xhat = s[2 * r + 1] / f;
          for (std::int64_t j = 0; j < w; ++j) {
            const double xhat = (xv[r * w + j] - mean[r]) * rstd[r];
            const double dxhat = gy[r * w + j] * gv[j];
            dxv[r * w + j] = rstd[r] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
            dg[j] += gy[r * w + j] * xhat;  // feature j is this rank's: no collective
            db[j] += gy[r * w + j];
          }
        }
        return std::vector<Tensor>{dx, dgamma, dbeta};
      });
  return ParallelTensor{y, x.placement, x.global};
}

ParallelTensor layernorm_local_shard(ProcessGroup& /*group*/, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps) {
  expect_placement("layernorm_local_shard", x, Placement::shard(x.global.rank() - 1));
  return ParallelTensor{layernorm(x.local, gamma_shard, beta_shard, eps), x.placement, x.global};
}

double local_vs_exact_max_difference(ProcessGroup& group, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps) {
  NoGradGuard no_grad(group.ctx());
  const std::vector<double> exact =
      layernorm_distributed(group, x, gamma_shard, beta_shard, eps).local.to_vector();
  const std::vector<double> local =
      layernorm_local_shard(group, x, gamma_shard, beta_shard, eps).local.to_vector();
  double worst = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    worst = std::max(worst, std::abs(local[i] - exact[i]));
  }
  Tensor all = Tensor::full(group.ctx(), Shape{1}, worst, DType::f64);
  group.all_reduce(all, ReduceOp::max);
  return all.item();
}

Tensor layernorm_of_slices(const Tensor& x, const Tensor& gamma, const Tensor& beta, int t,
                           double eps) {
  const std::int64_t f = x.dim(-1);
  if (t < 1 || f % t != 0) {
    throw ShapeError("layernorm_of_slices: t = " + std::to_string(t) +
                     " does not divide f = " + std::to_string(f) + " (x " + x.describe() + ")");
  }
  // [..., f] -> [..., t, f/t]: a LayerNorm over the last dim now normalises each slice alone.
  std::vector<std::int64_t> sliced(x.shape().dims().begin(), x.shape().dims().end() - 1);
  sliced.push_back(t);
  sliced.push_back(f / t);
  const Tensor ones = Tensor::full(x.ctx(), Shape{f / t}, 1.0, x.dtype());
  const Tensor zeros = Tensor::zeros(x.ctx(), Shape{f / t}, x.dtype());
  const Tensor xhat = reshape(layernorm(reshape(x, Shape(sliced)), ones, zeros, eps), x.shape());
  return add(mul(xhat, gamma), beta);  // the per-feature affine of the whole row
}

}  // namespace shardscope::labs
