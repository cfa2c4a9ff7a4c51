// Reductions and losses: sum, mean, mse_loss, cross_entropy. Each returns a tensor of shape [].
#include <string>

#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::new_like;
using ops_detail::OpRecord;

// A tensor of `shape` filled with the scalar gradient times `factor`.
Tensor broadcast_scalar(const Tensor& scalar_grad, const Shape& shape, double factor) {
  Tensor out =
      Tensor::full(scalar_grad.ctx(), shape, scalar_grad.item() * factor, scalar_grad.dtype());
  return out;
}

Tensor reduce_all(const char* op, const Tensor& x, double factor) {
  OpRecord r(op, {x});
  ops_detail::check_floating(r, x, "x");
  if (x.numel() == 0)
    throw ShapeError(r.where() + ": cannot reduce the empty tensor " + x.describe());
  Tensor y = ops_detail::new_tensor(r.ctx(), Shape{}, x.dtype());
  r.ctx().backend().sum_all(x, y);
  if (factor != 1.0) r.ctx().backend().scale(y, factor, y);
  if (r.needs_grad()) {
    const Shape in = x.shape();
    // dx = dy * factor everywhere
    r.record([in, factor](Node&, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{broadcast_scalar(g[0], in, factor)};
    });
  }
  return r.finish(y);
}

}  // namespace

Tensor sum(const Tensor& x) {
  return reduce_all("sum", x, 1.0);
}

Tensor mean(const Tensor& x) {
  return reduce_all("mean", x,
                    x.defined() && x.numel() ? 1.0 / static_cast<double>(x.numel()) : 1.0);
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  OpRecord r("mse_loss", {pred, target});
  ops_detail::check_floating(r, pred, "pred");
  ops_detail::check_floating(r, target, "target");
  ops_detail::check_same_dtype(r, pred, target);
  ops_detail::check_same_shape(r, pred, "pred", target, "target");
  if (pred.numel() == 0) throw ShapeError(r.where() + ": empty input " + pred.describe());
  Tensor loss = ops_detail::new_tensor(r.ctx(), Shape{}, pred.dtype());
  r.ctx().backend().mse_forward(pred, target, loss);
  if (r.needs_grad()) {
    // d pred = dloss * 2 (pred - target) / N = -d target
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      const Tensor& p = n.saved(0);
      const double k = 2.0 * g[0].item() / static_cast<double>(p.numel());
      Tensor dp = new_like(p), dt;
      p.ctx().backend().add(p, n.saved(1), k, -k, dp);
      if (n.needs_input_grad(1)) {
        dt = new_like(p);
        p.ctx().backend().scale(dp, -1.0, dt);
      }
      return std::vector<Tensor>{n.needs_input_grad(0) ? dp : Tensor(), dt};
    });
    node.save(pred);
    node.save(target);
  }
  return r.finish(loss);
}

Tensor cross_entropy(const Tensor& logits, const std::vector<std::int64_t>& targets) {
  OpRecord r("cross_entropy", {logits});
  ops_detail::check_floating(r, logits, "logits");
  if (logits.rank() != 2 || logits.dim(0) != static_cast<std::int64_t>(targets.size()) ||
      logits.dim(0) == 0) {
    throw ShapeError(r.where() + ": logits must be [N, C] with N = " +
                     std::to_string(targets.size()) + " targets, given " + logits.describe());
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0 || targets[i] >= logits.dim(1)) {
      throw ArgumentError(r.where() + ": target " + std::to_string(i) + " is " +
                          std::to_string(targets[i]) + ", expected a class in [0, " +
                          std::to_string(logits.dim(1)) + ")");
    }
  }
  Tensor probs = new_like(logits);
  Tensor loss = ops_detail::new_tensor(r.ctx(), Shape{}, logits.dtype());
  r.ctx().backend().cross_entropy_forward(logits, targets.data(), probs, loss);
  if (r.needs_grad()) {
    // dlogits = dloss (probs - onehot(target)) / N
    Node& node = r.record([targets](Node& n, const std::vector<Tensor>& g) {
      const Tensor& p = n.saved(0);
      Tensor dlogits = new_like(p);
      const double k = g[0].item() / static_cast<double>(targets.size());
      p.ctx().backend().cross_entropy_backward(p, targets.data(), k, dlogits);
      return std::vector<Tensor>{dlogits};
    });
    node.save(probs);
  }
  return r.finish(loss);
}

}  // namespace shardscope
