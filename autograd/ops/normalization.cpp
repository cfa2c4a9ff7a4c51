// Row-wise ops over the last dim: layernorm, rmsnorm and softmax.
#include <string>

#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {

using ops_detail::new_like;
using ops_detail::OpRecord;

Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  OpRecord r("layernorm", {x, gamma, beta});
  ops_detail::check_floating(r, x, "x");
  ops_detail::check_floating(r, gamma, "weight");
  ops_detail::check_floating(r, beta, "bias");
  ops_detail::check_same_dtype(r, x, gamma);
  ops_detail::check_same_dtype(r, x, beta);
  if (x.rank() < 1) throw ShapeError(r.where() + ": x must have rank >= 1, given " + x.describe());
  const Shape feature{x.dim(-1)};
  if (gamma.shape() != feature || beta.shape() != feature) {
    throw ShapeError(r.where() + ": weight and bias must be " + feature.str() +
                     " (the last dim of x " + x.shape().str() + "), given " + gamma.describe() +
                     " and " + beta.describe());
  }
  if (!(eps > 0.0)) throw ArgumentError(r.where() + ": eps must be > 0");
  std::vector<std::int64_t> rows(x.shape().dims().begin(), x.shape().dims().end() - 1);
  Tensor y = new_like(x);
  // f32 statistics for bf16 / f16 rows (statistics_dtype), so the ledger counts 4 bytes a row.
  Tensor mean = ops_detail::new_tensor(r.ctx(), Shape(rows), statistics_dtype(x.dtype()));
  Tensor rstd = ops_detail::new_tensor(r.ctx(), Shape(rows), statistics_dtype(x.dtype()));
  r.ctx().backend().layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
  if (r.needs_grad()) {
    // xhat = (x - mean) rstd; dxhat = dy gamma;
    // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); dgamma = sum dy xhat; dbeta = sum dy
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      const Tensor& sx = n.saved(0);
      const Tensor& sgamma = n.saved(1);
      Tensor dx = new_like(sx), dgamma = new_like(sgamma), dbeta = new_like(sgamma);
      sx.ctx().backend().layernorm_backward(g[0], sx, sgamma, n.saved(2), n.saved(3), dx, dgamma,
                                            dbeta);
      return std::vector<Tensor>{dx, dgamma, dbeta};
    });
    node.save(x);
    node.save(gamma);                  // a parameter: kept, not counted
    node.save(mean, SaveRole::extra);  // statistics_dtype(x): f32 under bf16 / f16
    node.save(rstd, SaveRole::extra);
  }
  return r.finish(y);
}

Tensor rmsnorm(const Tensor& x, const Tensor& gamma, double eps) {
  OpRecord r("rmsnorm", {x, gamma});
  ops_detail::check_floating(r, x, "x");
  ops_detail::check_floating(r, gamma, "weight");
  ops_detail::check_same_dtype(r, x, gamma);
  if (x.rank() < 1) throw ShapeError(r.where() + ": x must have rank >= 1, given " + x.describe());
  const Shape feature{x.dim(-1)};
  if (gamma.shape() != feature) {
    throw ShapeError(r.where() + ": weight must be " + feature.str() + " (the last dim of x " +
                     x.shape().str() + "), given " + gamma.describe());
  }
  if (!(eps > 0.0)) throw ArgumentError(r.where() + ": eps must be > 0");
  std::vector<std::int64_t> rows(x.shape().dims().begin(), x.shape().dims().end() - 1);
  Tensor y = new_like(x);
  Tensor rstd = ops_detail::new_tensor(r.ctx(), Shape(rows), statistics_dtype(x.dtype()));
  r.ctx().backend().rmsnorm_forward(x, gamma, eps, y, rstd);
  if (r.needs_grad()) {
    // xhat = x rstd; dxhat = dy gamma;
    // dx = rstd (dxhat - xhat mean(dxhat xhat)); dgamma = sum dy xhat
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      const Tensor& sx = n.saved(0);
      const Tensor& sgamma = n.saved(1);
      Tensor dx = new_like(sx), dgamma = new_like(sgamma);
      sx.ctx().backend().rmsnorm_backward(g[0], sx, sgamma, n.saved(2), dx, dgamma);
      return std::vector<Tensor>{dx, dgamma};
    });
    node.save(x);
    node.save(gamma);  // a parameter: kept, not counted
    node.save(rstd, SaveRole::extra);
  }
  return r.finish(y);
}

Tensor softmax(const Tensor& x, bool causal) {
  OpRecord r("softmax", {x});
  ops_detail::check_floating(r, x, "x");
  if (x.rank() < 1 || (causal && x.rank() < 2)) {
    throw ShapeError(r.where() + ": x must have rank >= " + (causal ? "2 (causal)" : "1") +
                     ", given " + x.describe());
  }
  if (causal && x.dim(-1) < x.dim(-2)) {
    throw ShapeError(r.where() + ": a causal mask needs s_k >= s_q, given " + x.describe());
  }
  Tensor y = new_like(x);
  r.ctx().backend().softmax_forward(x, causal, y);
  if (r.needs_grad()) {
    // dx = y (dy - sum(dy y)) per row
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      Tensor dx = new_like(g[0]);
      g[0].ctx().backend().softmax_backward(n.saved(0), g[0], dx);
      return std::vector<Tensor>{dx};
    });
    node.save(y);
  }
  return r.finish(y);
}

}  // namespace shardscope
