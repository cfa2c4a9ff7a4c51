// matmul: forward and backward side by side. All products go through the GEMM descriptor.
#include <algorithm>
#include <string>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/gemm.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::OpRecord;

// How a matmul maps onto one (possibly batched) GEMM.
struct MatmulPlan {
  std::int64_t batch = 1;  // 1 when b is shared: a's leading dims fold into m
  std::int64_t m = 0, n = 0, k = 0;
  bool shared_b = true;
  Shape out_shape;
};

MatmulPlan plan_matmul(const OpRecord& r, const Shape& a, const Shape& b, bool transpose_b) {
  if (a.rank() < 2 || b.rank() < 2) {
    throw ShapeError(r.where() + ": operands need rank >= 2, given " + a.str() + " and " + b.str());
  }
  MatmulPlan p;
  p.k = a.dim(-1);
  const std::int64_t b_k = transpose_b ? b.dim(-1) : b.dim(-2);
  p.n = transpose_b ? b.dim(-2) : b.dim(-1);
  if (b_k != p.k) {
    throw ShapeError(r.where() + ": inner dims differ: a " + a.str() +
                     " has k = " + std::to_string(p.k) + ", b " + b.str() +
                     (transpose_b ? " (transposed)" : "") + " has k = " + std::to_string(b_k));
  }
  std::vector<std::int64_t> out = a.dims();
  out.back() = p.n;
  p.out_shape = Shape(out);
  p.shared_b = b.rank() == 2;
  auto product = [](auto first, auto last) {
    std::int64_t n = 1;
    for (auto it = first; it != last; ++it) n *= *it;
    return n;
  };
  if (p.shared_b) {  // a's leading dims fold into m
    p.m = product(a.dims().begin(), a.dims().end() - 1);
    return p;
  }
  if (b.rank() != a.rank() || !std::equal(a.dims().begin(), a.dims().end() - 2, b.dims().begin())) {
    throw ShapeError(r.where() + ": batched operands need the same leading dims, given " + a.str() +
                     " and " + b.str());
  }
  p.m = a.dim(-2);
  p.batch = product(a.dims().begin(), a.dims().end() - 2);
  return p;
}

// C = op(A) op(B) per batch entry into a freshly allocated (zeroed) C; a shared B has stride 0.
// An empty product (a zero m, n, k or batch) leaves C at zero, which is its value.
void run_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, std::int64_t m,
              std::int64_t n, std::int64_t k, std::int64_t batch, bool shared_b) {
  if (m == 0 || n == 0 || k == 0 || batch == 0) return;
  GemmDesc d = GemmDesc::packed(m, n, k, ta, tb);
  d.batch = batch;
  if (shared_b) d.stride_b = 0;
  Context& ctx = c.ctx();
  if (ctx.observed()) {
    const GemmEvent event{ctx.site(), &d, c.dtype()};
    ctx.notify([&](Observer& o) { o.on_gemm(event); });
  }
  ctx.backend().gemm(d, c.dtype(), a.raw_data(), b.raw_data(), c.raw_data());
}

std::vector<Tensor> matmul_backward(Node& node, const std::vector<Tensor>& grads,
                                    const MatmulPlan& p, bool transpose_b) {
  const Tensor& a = node.saved(0);
  const Tensor& b = node.saved(1);
  const Tensor& dc = grads[0];  // [..., m, n]
  Tensor da, db;
  if (node.needs_input_grad(0)) {
    // dA = dC op(B)^T: [m, n] x [n, k]
    da = ops_detail::new_tensor(dc.ctx(), node.input_shapes[0], dc.dtype());
    run_gemm(dc, false, b, !transpose_b, da, p.m, p.k, p.n, p.batch, p.shared_b);
  }
  if (node.needs_input_grad(1)) {
    db = ops_detail::new_tensor(dc.ctx(), node.input_shapes[1], dc.dtype());
    if (!transpose_b) {
      // dB = A^T dC: [k, m] x [m, n]; a shared B sums over every row of the batch.
      run_gemm(a, true, dc, false, db, p.k, p.n, p.m, p.batch, false);
    } else {
      // B holds [n, k]: dB = dC^T A: [n, m] x [m, k]
      run_gemm(dc, true, a, false, db, p.n, p.k, p.m, p.batch, false);
    }
  }
  return {da, db};
}

}  // namespace

namespace ops_detail {

Tensor linear_values(const Tensor& x, const Tensor& w) {
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.back() = w.dim(1);
  Tensor y = new_tensor(x.ctx(), Shape(dims), x.dtype());
  run_gemm(x, false, w, false, y, x.numel() / std::max<std::int64_t>(x.dim(-1), 1), w.dim(1),
           w.dim(0), 1, true);
  return y;
}

Tensor linear_grad_input(const Tensor& dy, const Tensor& w) {
  std::vector<std::int64_t> dims = dy.shape().dims();
  dims.back() = w.dim(0);
  Tensor dx = new_tensor(dy.ctx(), Shape(dims), dy.dtype());
  run_gemm(dy, false, w, true, dx, dy.numel() / std::max<std::int64_t>(dy.dim(-1), 1), w.dim(0),
           w.dim(1), 1, true);
  return dx;
}

Tensor linear_grad_weight(const Tensor& x, const Tensor& dy) {
  Tensor dw = new_tensor(x.ctx(), Shape{x.dim(-1), dy.dim(-1)}, x.dtype());
  run_gemm(x, true, dy, false, dw, x.dim(-1), dy.dim(-1),
           x.numel() / std::max<std::int64_t>(x.dim(-1), 1), 1, false);
  return dw;
}

}  // namespace ops_detail

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b) {
  OpRecord r("matmul", {a, b});
  ops_detail::check_floating(r, a, "a");
  ops_detail::check_floating(r, b, "b");
  ops_detail::check_same_dtype(r, a, b);
  const MatmulPlan p = plan_matmul(r, a.shape(), b.shape(), transpose_b);
  Tensor c = ops_detail::new_tensor(r.ctx(), p.out_shape, a.dtype());
  run_gemm(a, false, b, transpose_b, c, p.m, p.n, p.k, p.batch, p.shared_b);
  if (r.needs_grad()) {
    Node& node = r.record([p, transpose_b](Node& n, const std::vector<Tensor>& g) {
      return matmul_backward(n, g, p, transpose_b);
    });
    // dA needs b and dB needs a: keep each only when the other operand takes a gradient.
    node.save(node.needs_input_grad(1) ? a : Tensor());
    node.save(node.needs_input_grad(0) ? b : Tensor());
  }
  return r.finish(c);
}

}  // namespace shardscope
