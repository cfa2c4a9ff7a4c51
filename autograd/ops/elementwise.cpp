// Elementwise ops: add (bias broadcasting), mul, scale, gelu, swiglu, rope, dropout.
#include <cmath>
#include <sstream>
#include <string>

#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::new_like;
using ops_detail::OpRecord;
using ops_detail::reduce_to;

// Checks a binary op's operands: floating, same dtype, b of a's shape or a suffix of it.
void check_broadcast(const OpRecord& r, const Tensor& a, const Tensor& b) {
  ops_detail::check_floating(r, a, "a");
  ops_detail::check_floating(r, b, "b");
  ops_detail::check_same_dtype(r, a, b);
  if (!ops_detail::is_suffix(b.shape(), a.shape())) {
    throw ShapeError(r.where() + ": b " + b.describe() + " must have a's shape " + a.shape().str() +
                     " or a suffix of it (a bias over the last dims)");
  }
}

}  // namespace

namespace ops_detail {

Tensor reduce_to(const Tensor& dy, const Shape& shape) {
  if (dy.shape() == shape) return dy;
  Tensor out = new_tensor(dy.ctx(), shape, dy.dtype());  // the sums fill it
  dy.ctx().backend().sum_to_suffix(dy, out);
  return out;
}

}  // namespace ops_detail

Tensor add(const Tensor& a, const Tensor& b) {
  OpRecord r("add", {a, b});
  check_broadcast(r, a, b);
  Tensor y = new_like(a);
  r.ctx().backend().add(a, b, 1.0, 1.0, y);
  if (r.needs_grad()) {
    // y = a + b: dA = dY, dB = dY summed over the broadcast dims.
    const Shape b_shape = b.shape();
    r.record([b_shape](Node& n, const std::vector<Tensor>& g) {
      Tensor da = n.needs_input_grad(0) ? g[0] : Tensor();
      Tensor db = n.needs_input_grad(1) ? reduce_to(g[0], b_shape) : Tensor();
      return std::vector<Tensor>{da, db};
    });
  }
  return r.finish(y);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  OpRecord r("mul", {a, b});
  check_broadcast(r, a, b);
  Tensor y = new_like(a);
  r.ctx().backend().mul(a, b, y);
  if (r.needs_grad()) {
    // y = a * b: dA = dY * b, dB = sum over broadcast dims of dY * a.
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      const Tensor& sa = n.saved(0);
      const Tensor& sb = n.saved(1);
      Backend& be = g[0].ctx().backend();
      Tensor da, db;
      if (n.needs_input_grad(0)) {
        da = new_like(g[0]);
        be.mul(g[0], sb, da);
      }
      if (n.needs_input_grad(1)) {
        Tensor full = new_like(g[0]);
        be.mul(g[0], sa, full);
        db = reduce_to(full, n.input_shapes[1]);
      }
      return std::vector<Tensor>{da, db};
    });
    // dA needs b and dB needs a: keep each only when the other operand takes a gradient.
    node.save(node.needs_input_grad(1) ? a : Tensor());
    node.save(node.needs_input_grad(0) ? b : Tensor());
  }
  return r.finish(y);
}

Tensor scale(const Tensor& x, double alpha) {
  OpRecord r("scale", {x});
  ops_detail::check_floating(r, x, "x");
  Tensor y = new_like(x);
  r.ctx().backend().scale(x, alpha, y);
  if (r.needs_grad()) {
    r.record([alpha](Node&, const std::vector<Tensor>& g) {
      Tensor dx = new_like(g[0]);
      g[0].ctx().backend().scale(g[0], alpha, dx);
      return std::vector<Tensor>{dx};
    });
  }
  return r.finish(y);
}

Tensor gelu(const Tensor& x) {
  OpRecord r("gelu", {x});
  ops_detail::check_floating(r, x, "x");
  Tensor y = new_like(x);
  r.ctx().backend().gelu_forward(x, y);
  if (r.needs_grad()) {
    // dx = dy * gelu'(x)
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      Tensor dx = new_like(g[0]);
      g[0].ctx().backend().gelu_backward(n.saved(0), g[0], dx);
      return std::vector<Tensor>{dx};
    });
    node.save(x);
  }
  return r.finish(y);
}

Tensor swiglu(const Tensor& x) {
  OpRecord r("swiglu", {x});
  ops_detail::check_floating(r, x, "x");
  if (x.rank() < 1 || x.dim(-1) % 2 != 0) {
    throw ShapeError(r.where() + ": x must have rank >= 1 and an even last dim (2f: f gate/up " +
                     "pairs, interleaved), given " + x.describe());
  }
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.back() /= 2;
  Tensor y = ops_detail::new_tensor(r.ctx(), Shape(dims), x.dtype());
  r.ctx().backend().swiglu_forward(x, y);
  if (r.needs_grad()) {
    // y = silu(a) b for each pair (a, b) = (x[2j], x[2j + 1]):
    // da = dy b silu'(a), db = dy silu(a)
    Node& node = r.record([](Node& n, const std::vector<Tensor>& g) {
      Tensor dx = new_like(n.saved(0));
      g[0].ctx().backend().swiglu_backward(n.saved(0), g[0], dx);
      return std::vector<Tensor>{dx};
    });
    node.save(x);
  }
  return r.finish(y);
}

Tensor rope(const Tensor& x, int seq_dim, std::int64_t first_position, double base) {
  OpRecord r("rope", {x});
  ops_detail::check_floating(r, x, "x");
  if (x.rank() < 2 || x.dim(-1) < 2 || x.dim(-1) % 2 != 0) {
    throw ShapeError(r.where() + ": x must have rank >= 2 and an even last dim d >= 2 (d/2 " +
                     "pairs (i, i + d/2) to rotate), given " + x.describe());
  }
  if (seq_dim < 0 || seq_dim >= x.rank() - 1) {
    throw ShapeError(r.where() + ": seq_dim must be in [0, " + std::to_string(x.rank() - 1) +
                     ") (a dim before the last, which holds the pairs), given " +
                     std::to_string(seq_dim) + " for x " + x.describe());
  }
  if (first_position < 0) {
    throw ArgumentError(r.where() + ": first_position must be >= 0, given " +
                        std::to_string(first_position));
  }
  if (!(std::isfinite(base) && base > 1.0)) {
    std::ostringstream given;
    given << base;
    throw ArgumentError(r.where() + ": base must be finite and > 1, given " + given.str());
  }
  Tensor y = new_like(x);
  r.ctx().backend().rope_forward(x, seq_dim, first_position, base, false, y);
  if (r.needs_grad()) {
    // y = R(angle) x on each pair (x[i], x[i + d/2]): dx = R(angle)^T dy = R(-angle) dy, the same
    // kernel with inverse set. Nothing saved: the angles come from the settings alone.
    r.record([seq_dim, first_position, base](Node&, const std::vector<Tensor>& g) {
      Tensor dx = new_like(g[0]);
      g[0].ctx().backend().rope_forward(g[0], seq_dim, first_position, base, true, dx);
      return std::vector<Tensor>{dx};
    });
  }
  return r.finish(y);
}

std::uint32_t dropout_stream(int layer, int site) {
  return (static_cast<std::uint32_t>(layer + 1) << 8) | static_cast<std::uint32_t>(site & 0xff);
}

Tensor dropout(const Tensor& x, const DropoutSpec& spec) {
  OpRecord r("dropout", {x});
  ops_detail::check_floating(r, x, "x");
  if (!(spec.p >= 0.0 && spec.p < 1.0)) {
    throw ArgumentError(r.where() + ": dropout probability must be in [0, 1), given " +
                        std::to_string(spec.p));
  }
  const Shape global = spec.global_shape.rank() ? spec.global_shape : x.shape();
  if (global.rank() != x.rank() ||
      (!spec.offset.empty() && static_cast<int>(spec.offset.size()) != x.rank())) {
    throw ShapeError(r.where() + ": the global shape " + global.str() +
                     " and offset must have the rank of the input " + x.describe());
  }
  for (int d = 0; d < x.rank(); ++d) {
    const std::int64_t off = spec.offset.empty() ? 0 : spec.offset[static_cast<std::size_t>(d)];
    if (off < 0 || off + x.shape()[d] > global[d]) {
      throw ShapeError(r.where() + ": the shard " + x.describe() + " at offset dim " +
                       std::to_string(d) + " = " + std::to_string(off) +
                       " does not fit in the global shape " + global.str());
    }
  }
  if (spec.causal && (x.rank() < 2 || x.dim(-1) != global.dim(-1) || x.dim(-2) != global.dim(-2))) {
    throw ShapeError(r.where() +
                     ": DropoutSpec::causal needs each [s_q, s_k] matrix whole, given "
                     "the shard " +
                     x.describe() + " of the global shape " + global.str());
  }
  if (spec.p == 0.0) {
    // The identity: the output shares the input's storage and nothing is saved.
    Tensor y = x.detach();
    if (r.needs_grad()) {
      r.record([](Node&, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
    }
    return r.finish(y);
  }
  Tensor y = new_like(x);
  Tensor mask = Tensor::empty(r.ctx(), x.shape(), DType::u8);
  r.ctx().backend().dropout_forward(x, spec, mask, y);
  if (r.needs_grad()) {
    const double p = spec.p;
    // dx = dy * mask / (1 - p)
    Node& node = r.record([p](Node& n, const std::vector<Tensor>& g) {
      Tensor dx = new_like(g[0]);
      g[0].ctx().backend().dropout_backward(g[0], n.saved(0), p, dx);
      return std::vector<Tensor>{dx};
    });
    node.save(mask);
  }
  return r.finish(y);
}

}  // namespace shardscope
