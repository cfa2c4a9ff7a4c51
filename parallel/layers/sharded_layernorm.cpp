// LayerNorm over a sharded feature dim: the exact distributed op (statistics combined across the
// group, forward and backward side by side) and the local one (each shard normalised alone).
#include "parallel/layers/sharded_layernorm.h"

#include <vector>

#include "autograd/cpu/dispatch.h"
#include "autograd/kernels/layernorm.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::new_like;
using ops_detail::OpRecord;

constexpr std::int64_t kStatistics = 3;  // per row: count, mean, M2
constexpr std::int64_t kRowSums = 2;     // per row: sum(dxhat), sum(dxhat * xhat)

std::int64_t row_count(const Tensor& x) {
  return x.numel() / x.dim(-1);
}

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// The full rows' mean and rstd, in f64 (the single-device kernel normalises in f64 too).
struct RowStatistics {
  std::vector<double> mean, rstd;
};

// x [rows, w] -> [rows, 3] f64: this shard's (count, mean, M2) per row, by Welford.
template <class T>
Tensor shard_statistics(const Tensor& x) {
  const std::int64_t rows = row_count(x), w = x.dim(-1);
  Tensor stats = Tensor::empty(x.ctx(), Shape{rows, kStatistics}, DType::f64);
  double* out = stats.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const kernels::Welford<double> acc =
        kernels::layernorm_row_statistics(x.data<T>() + r * w, w, 0, 1);
    out[r * kStatistics] = acc.count;
    out[r * kStatistics + 1] = acc.mean;
    out[r * kStatistics + 2] = acc.m2;
  }
  return stats;
}

// gathered [t * rows, 3] (rank k's rows at k * rows) -> the full rows' statistics, combined in
// rank order so that every rank gets the same bits.
RowStatistics combine_statistics(const Tensor& gathered, int t, double eps) {
  const std::int64_t rows = gathered.dim(0) / t;
  const double* s = gathered.data<double>();
  RowStatistics out{std::vector<double>(at(rows)), std::vector<double>(at(rows))};
  for (std::int64_t r = 0; r < rows; ++r) {
    kernels::Welford<double> full;
    for (int k = 0; k < t; ++k) {
      const double* part = s + (k * rows + r) * kStatistics;
      full = kernels::welford_combine(full, kernels::Welford<double>{part[0], part[1], part[2]});
    }
    out.mean[at(r)] = full.mean;
    out.rstd[at(r)] = kernels::layernorm_rstd(full, eps);
  }
  return out;
}

// y = (x - mean) rstd gamma + beta on the shard, as the single-device kernel rounds it.
template <class T>
void normalise_shard(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const RowStatistics& st, Tensor& y, Tensor& mean, Tensor& rstd) {
  const std::int64_t rows = row_count(x), w = x.dim(-1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double mu = st.mean[at(r)], inv = st.rstd[at(r)];
    kernels::layernorm_normalise_row(x.data<T>() + r * w, gamma.data<T>(), beta.data<T>(),
                                     y.data<T>() + r * w, w, 0, 1, mu, inv);
    mean.data<T>()[r] = static_cast<T>(mu);
    rstd.data<T>()[r] = static_cast<T>(inv);
  }
}

// [rows, 2] f64: this shard's part of sum(dxhat) and sum(dxhat * xhat) per row, dxhat = dy gamma.
template <class T>
Tensor shard_row_sums(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                      const Tensor& rstd) {
  const std::int64_t rows = row_count(x), w = x.dim(-1);
  Tensor sums = Tensor::empty(x.ctx(), Shape{rows, kRowSums}, DType::f64);
  double* out = sums.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const kernels::LayerNormRowSums s = kernels::layernorm_backward_row_sums(
        dy.data<T>() + r * w, x.data<T>() + r * w, gamma.data<T>(), w, 0, 1, mean.data<T>()[r],
        rstd.data<T>()[r]);
    out[r * kRowSums] = s.dxhat;
    out[r * kRowSums + 1] = s.dxhat_xhat;
  }
  return sums;
}

// dgamma = sum_rows dy xhat and dbeta = sum_rows dy on this shard's columns; when `sums` (the
// all-reduced row sums) is defined, dx = rstd (dxhat - sum(dxhat)/f - xhat sum(dxhat xhat)/f)
// with f the full feature count.
template <class T>
void shard_gradients(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                     const Tensor& rstd, const Tensor& sums, double f, Tensor& dx, Tensor& dgamma,
                     Tensor& dbeta) {
  const std::int64_t rows = row_count(x), w = x.dim(-1);
  const T* g = gamma.data<T>();
  std::vector<double> dg(at(w), 0.0), db(at(w), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = x.data<T>() + r * w;
    const T* gy = dy.data<T>() + r * w;
    const double mu = mean.data<T>()[r], inv = rstd.data<T>()[r];
    const double mean_dxhat = sums.defined() ? sums.data<double>()[r * kRowSums] / f : 0.0;
    const double mean_dxhat_xhat = sums.defined() ? sums.data<double>()[r * kRowSums + 1] / f : 0.0;
    for (std::int64_t j = 0; j < w; ++j) {
      kernels::layernorm_param_grad_add(dg[at(j)], db[at(j)], gy[j], in[j], mu, inv);
    }
    if (sums.defined()) {
      kernels::layernorm_backward_row(gy, in, g, dx.data<T>() + r * w, w, 0, 1, mu, inv, mean_dxhat,
                                      mean_dxhat_xhat);
    }
  }
  for (std::int64_t j = 0; j < w; ++j) {
    dgamma.data<T>()[j] = static_cast<T>(dg[at(j)]);
    dbeta.data<T>()[j] = static_cast<T>(db[at(j)]);
  }
}

// The checks of layernorm_exact, each naming the op, its scope and rank.
void check_exact_inputs(const OpRecord& r, ProcessGroup& g, const ParallelTensor& x,
                        const Tensor& gamma, const Tensor& beta, double eps) {
  ops_detail::check_floating(r, x.local, "x");
  ops_detail::check_floating(r, gamma, "weight");
  ops_detail::check_floating(r, beta, "bias");
  ops_detail::check_same_dtype(r, x.local, gamma);
  ops_detail::check_same_dtype(r, x.local, beta);
  if (x.global.rank() < 1)
    throw ShapeError(r.where() + ": x must have rank >= 1, given " + x.str());
  expect_placement(r.where(), x, Placement::shard(x.global.rank() - 1));
  const std::int64_t f = x.global.dims().back();
  if (f == 0 || f % g.size() != 0 ||
      x.local.shape() != local_shape(x.global, x.placement, g.size())) {
    throw ShapeError(r.where() + ": x is not a non-empty " + x.placement.str() + " of " +
                     x.global.str() + " over " + std::to_string(g.size()) + " ranks: " + x.str());
  }
  const Shape feature{x.local.dim(-1)};
  if (gamma.shape() != feature || beta.shape() != feature) {
    throw ShapeError(r.where() + ": weight and bias shards must be " + feature.str() +
                     " (the local last dim of x, " + x.str() + "), given " + gamma.describe() +
                     " and " + beta.describe());
  }
  if (&g.ctx() != &x.local.ctx()) {
    throw ArgumentError(r.where() + ": x belongs to rank " + std::to_string(x.local.ctx().rank()) +
                        "'s context, the group to rank " + std::to_string(g.ctx().rank()) + "'s");
  }
  if (!x.local.device().host_memory()) {
    throw DTypeError(r.where() +
                     ": runs on host memory (the cpu or reference backend) only, given " +
                     x.local.describe() + " on " + x.local.device().str());
  }
  if (!(eps > 0.0)) throw ArgumentError(r.where() + ": eps must be > 0");
}

}  // namespace

ParallelTensor layernorm_exact(ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                               const Tensor& beta, double eps) {
  OpRecord r("layernorm_exact", {x.local, gamma, beta},
             x.placement.str() + " -> " + x.placement.str());
  check_exact_inputs(r, g, x, gamma, beta, eps);
  const std::vector<std::int64_t> rows(x.local.shape().dims().begin(),
                                       x.local.shape().dims().end() - 1);
  Tensor y = new_like(x.local);
  Tensor mean = ops_detail::new_tensor(r.ctx(), Shape(rows), x.local.dtype());
  Tensor rstd = ops_detail::new_tensor(r.ctx(), Shape(rows), x.local.dtype());
  cpu::dispatch_floating(x.local.dtype(), "layernorm_exact", [&](auto tag) {
    using T = decltype(tag);
    // [rows, 3] per rank -> [t * rows, 3] on every rank -> (mean, rstd) of the full rows
    const Tensor gathered = g.all_gather(shard_statistics<T>(x.local));
    normalise_shard<T>(x.local, gamma, beta, combine_statistics(gathered, g.size(), eps), y, mean,
                       rstd);
  });
  if (r.needs_grad()) {
    // xhat = (x - mean) rstd; dxhat = dy gamma; all-reduce the row sums of dxhat and dxhat xhat;
    // dx = rstd (dxhat - sum(dxhat)/f - xhat sum(dxhat xhat)/f); dgamma, dbeta on the shard.
    ProcessGroup* group = &g;
    const double f = static_cast<double>(x.global.dims().back());
    Node& node = r.record([group, f](Node& n, const std::vector<Tensor>& grads) {
      const Tensor& sx = n.saved(0);
      const Tensor& sgamma = n.saved(1);
      Tensor dx, dgamma = new_like(sgamma), dbeta = new_like(sgamma), sums;
      cpu::dispatch_floating(sx.dtype(), "layernorm_exact backward", [&](auto tag) {
        using T = decltype(tag);
        if (n.needs_input_grad(0)) {
          sums = shard_row_sums<T>(grads[0], sx, sgamma, n.saved(2), n.saved(3));
          group->all_reduce(sums, ReduceOp::sum);  // [rows, 2]: the full rows' sums
          dx = new_like(sx);
        }
        shard_gradients<T>(grads[0], sx, sgamma, n.saved(2), n.saved(3), sums, f, dx, dgamma,
                           dbeta);
      });
      return std::vector<Tensor>{dx, dgamma, dbeta};
    });
    node.save(x.local);
    node.save(gamma);  // a parameter: kept, not counted
    node.save(mean, SaveRole::extra);
    node.save(rstd, SaveRole::extra);
  }
  return ParallelTensor{r.finish(y), x.placement, x.global};
}

ParallelTensor layernorm_local(ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                               const Tensor& beta, double eps) {
  Context& ctx = x.local.ctx();
  ScopeGuard scope(ctx, "layernorm_local");
  if (x.global.rank() < 1) {
    throw ShapeError(ctx.where("layernorm_local") + ": x must have rank >= 1, given " + x.str());
  }
  expect_placement(ctx.where("layernorm_local"), x, Placement::shard(x.global.rank() - 1));
  return ParallelTensor::make(layernorm(x.local, gamma, beta, eps), x.placement, x.global,
                              g.size());
}

}  // namespace shardscope
