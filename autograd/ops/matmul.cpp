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
#include "autograd/strided_copy.h"

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

// One GEMM call of an op, announced to the observers first.
void submit_gemm(Context& ctx, const GemmDesc& d, DType dtype, const void* a, const void* b,
                 void* c) {
  if (ctx.observed()) {
    const GemmEvent event{ctx.site(), &d, dtype, a, b, c};
    ctx.notify([&](Observer& o) { o.on_gemm(event); });
  }
  ctx.backend().gemm(d, dtype, a, b, c);
}

// C = alpha op(A) op(B) per batch entry into a new C (ops_detail::new_tensor: written whole), or
// with `accumulate` C += alpha op(A) op(B) into what C holds; a shared B has stride 0. An empty
// product (a zero m, n, k or batch) is C = 0, or leaves C as it is.
void run_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, std::int64_t m,
              std::int64_t n, std::int64_t k, std::int64_t batch, bool shared_b, double alpha = 1.0,
              bool accumulate = false) {
  if (m == 0 || n == 0 || k == 0 || batch == 0) {
    if (c.numel() > 0 && !accumulate) c.ctx().backend().fill(c, 0.0);
    return;
  }
  GemmDesc d = GemmDesc::packed(m, n, k, ta, tb);
  d.batch = batch;
  d.alpha = alpha;
  d.beta = accumulate ? 1.0 : 0.0;
  if (shared_b) d.stride_b = 0;
  submit_gemm(c.ctx(), d, c.dtype(), a.raw_data(), b.raw_data(), c.raw_data());
}

// ---- causal products (causal_matmul) ----------------------------------------------------------

// Which stored matrix of a product is score-shaped, [r s_q, s_k] with query q = row mod s_q seeing
// key j when j <= q + s_k - s_q, and the blocks of queries it is taken in.
struct CausalShape {
  bool masked_c = false;  // C is score-shaped (its entries above the diagonal stay 0); else A is
                          // (as stored, read as 0 above the diagonal)
  std::int64_t queries = 0, keys = 0, periods = 1;  // s_q, s_k, r
  std::int64_t block = 0;                           // queries per block
};

// Blocks of 1/8 of the queries, at least 32 and a multiple of 16: about 9/16 of the dense products
// computed, in pieces large enough for the GEMM kernels.
std::int64_t causal_block(std::int64_t queries) {
  const std::int64_t eighth = (queries + 7) / 8;
  return std::min(queries, (std::max<std::int64_t>(32, eighth) + 15) / 16 * 16);
}

// C = alpha op(A) op(B) per batch entry under `cs`, into a new C (zeroed when cs.masked_c: the keys
// after each block's square are never written; else written whole), as pieces of the
// dense product: for each block of queries, the keys before the block's diagonal square are a
// plain product and the square goes through Backend::lower_triangle (C's square zeroed above the
// diagonal after its product; A's square copied, zeroed above it, into a scratch first). Keys after
// the square are skipped: their C stays 0, their A is not read.
void run_causal_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, std::int64_t m,
                     std::int64_t n, std::int64_t k, std::int64_t batch, const CausalShape& cs,
                     double alpha) {
  if (m == 0 || n == 0 || k == 0 || batch == 0) return;
  Context& ctx = c.ctx();
  const DType dtype = c.dtype();
  const std::size_t es = dtype_size(dtype);
  GemmDesc full = GemmDesc::packed(m, n, k, ta, tb);
  full.batch = batch;
  full.alpha = alpha;
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  auto* pc = static_cast<unsigned char*>(c.raw_data());
  auto at = [es](auto* base, std::int64_t offset) {
    return base + static_cast<std::size_t>(offset) * es;
  };
  // Offsets of row i / column p of op(A), row p / column j of op(B), and (i, j) of C.
  auto a_row = [&](std::int64_t i) { return ta ? i : i * full.lda; };
  auto a_col = [&](std::int64_t p) { return ta ? p * full.lda : p; };
  auto b_row = [&](std::int64_t p) { return tb ? p : p * full.ldb; };
  auto c_at = [&](std::int64_t i, std::int64_t j) { return i * full.ldc + j; };
  // A piece: rows x cols of C from inner products of length `inner`; beta 1 adds to an earlier
  // piece's sums.
  auto piece = [&](GemmDesc d, std::int64_t rows, std::int64_t cols, std::int64_t inner,
                   const void* x, const void* y, void* z, bool accumulate) {
    if (rows == 0 || cols == 0 || inner == 0) return;
    d.m = rows;
    d.n = cols;
    d.k = inner;
    d.beta = accumulate ? 1.0 : 0.0;
    submit_gemm(ctx, d, dtype, x, y, z);
  };
  const std::int64_t offset = cs.keys - cs.queries, block = cs.block;
  // A's squares, zeroed above the diagonal, while their piece runs: [batch, block, block].
  Tensor scratch;
  GemmDesc from_scratch = full;
  if (!cs.masked_c) {
    scratch = ops_detail::new_tensor(ctx, Shape{batch, block, block}, dtype);
    from_scratch.lda = block;
    from_scratch.stride_a = block * block;
  }
  // side x side squares of every batch entry, src's lower triangle to dst, 0 above it.
  auto triangle = [&](std::int64_t side, const void* src, std::int64_t ld_src,
                      std::int64_t stride_src, void* dst, std::int64_t ld_dst,
                      std::int64_t stride_dst) {
    TriangleDesc t;
    t.n = side;
    t.batch = batch;
    t.ld_src = ld_src;
    t.stride_src = stride_src;
    t.ld_dst = ld_dst;
    t.stride_dst = stride_dst;
    ctx.backend().lower_triangle(t, dtype, src, dst);
  };
  auto square_of_a = [&](std::int64_t at_offset, std::int64_t side) {
    triangle(side, at(pa, at_offset), full.lda, full.stride_a, scratch.raw_data(), block,
             block * block);
  };
  if (cs.masked_c) {  // C [r s_q, s_k]: each block of rows up to its diagonal
    // C comes zeroed (its keys after each square are never written), so each piece adds to it
    // (beta 1): with beta 0 BLAS zeroes the piece again first, a pass of its own in every call
    // (OpenBLAS's sgemm_beta; a quarter of the scores' product's cycles at s=128, d=32).
    for (std::int64_t r = 0; r < cs.periods; ++r) {
      for (std::int64_t q0 = 0; q0 < cs.queries; q0 += block) {
        const std::int64_t side = std::min(block, cs.queries - q0), i0 = r * cs.queries + q0;
        piece(full, side, q0 + side + offset, k, at(pa, a_row(i0)), pb, at(pc, c_at(i0, 0)), true);
        void* square = at(pc, c_at(i0, q0 + offset));
        triangle(side, square, full.ldc, full.stride_c, square, full.ldc, full.stride_c);
      }
    }
    return;
  }
  if (!ta) {  // op(A) = A [r s_q, s_k]: each block of rows over the keys up to its diagonal
    for (std::int64_t r = 0; r < cs.periods; ++r) {
      for (std::int64_t q0 = 0; q0 < cs.queries; q0 += block) {
        const std::int64_t side = std::min(block, cs.queries - q0), i0 = r * cs.queries + q0;
        const std::int64_t before = q0 + offset;  // keys every query of the block sees
        void* out = at(pc, c_at(i0, 0));
        piece(full, side, n, before, at(pa, a_row(i0)), pb, out, false);
        square_of_a(a_row(i0) + a_col(before), side);
        piece(from_scratch, side, n, side, scratch.raw_data(), at(pb, b_row(before)), out,
              before > 0);
      }
    }
    return;
  }
  // op(A) = A^T, A stored [r s_q, s_k]: C's rows are keys. The first s_k - s_q keys are seen by
  // every query; each later block of keys by the queries from its diagonal square on.
  piece(full, offset, n, k, pa, pb, pc, false);
  for (std::int64_t q0 = 0; q0 < cs.queries; q0 += block) {
    const std::int64_t side = std::min(block, cs.queries - q0), j0 = q0 + offset;
    void* out = at(pc, c_at(j0, 0));
    bool accumulate = false;
    for (std::int64_t r = 0; r < cs.periods; ++r) {
      const std::int64_t first = r * cs.queries + q0, after = first + side;
      const std::int64_t later = cs.queries - q0 - side;  // queries after the square
      piece(full, side, n, later, at(pa, a_row(j0) + a_col(after)), at(pb, b_row(after)), out,
            accumulate);
      accumulate = accumulate || later > 0;
      square_of_a(a_col(first) + a_row(j0), side);
      GemmDesc d = from_scratch;
      d.trans_a = true;
      piece(d, side, n, side, scratch.raw_data(), at(pb, b_row(first)), out, accumulate);
      accumulate = true;
    }
  }
}

std::vector<Tensor> matmul_backward(Node& node, const std::vector<Tensor>& grads,
                                    const MatmulPlan& p, bool transpose_b, double alpha) {
  const Tensor& a = node.saved(0);
  const Tensor& b = node.saved(1);
  const Tensor& dc = grads[0];  // [..., m, n]
  // Each gradient is written into a new tensor, or added into the gradient its input, a leaf,
  // already holds (ops_detail::accumulation_target).
  Tensor da, db;
  if (node.needs_input_grad(0)) {
    // dA = alpha dC op(B)^T: [m, n] x [n, k]
    const Tensor into = ops_detail::accumulation_target(node, 0);
    da = into.defined() ? into : ops_detail::new_tensor(dc.ctx(), node.input_shapes[0], dc.dtype());
    run_gemm(dc, false, b, !transpose_b, da, p.m, p.k, p.n, p.batch, p.shared_b, alpha,
             into.defined());
  }
  if (node.needs_input_grad(1)) {
    const Tensor into = ops_detail::accumulation_target(node, 1);
    db = into.defined() ? into : ops_detail::new_tensor(dc.ctx(), node.input_shapes[1], dc.dtype());
    if (!transpose_b) {
      // dB = alpha A^T dC: [k, m] x [m, n]; a shared B sums over every row of the batch.
      run_gemm(a, true, dc, false, db, p.k, p.n, p.m, p.batch, false, alpha, into.defined());
    } else {
      // B holds [n, k]: dB = alpha dC^T A: [n, m] x [m, k]
      run_gemm(dc, true, a, false, db, p.n, p.k, p.m, p.batch, false, alpha, into.defined());
    }
  }
  return {da, db};
}

// causal_matmul's backward: matmul's, each product with its score-shaped operand as in forward.
std::vector<Tensor> causal_matmul_backward(Node& node, const std::vector<Tensor>& grads,
                                           const MatmulPlan& p, bool transpose_b, CausalShape cs,
                                           double alpha) {
  const Tensor& a = node.saved(0);
  const Tensor& b = node.saved(1);
  const Tensor& dc = grads[0];
  Tensor da, db;
  if (node.needs_input_grad(0)) {
    // The probabilities' gradient is score-shaped: zeros above the diagonal, never written.
    da = transpose_b ? ops_detail::new_tensor(dc.ctx(), node.input_shapes[0], dc.dtype())
                     : Tensor::zeros(dc.ctx(), node.input_shapes[0], dc.dtype());
    CausalShape shape = cs;
    // Scores: dA = dC B, dC score-shaped. Probabilities: dA = dC V^T, dA score-shaped.
    shape.masked_c = !transpose_b;
    run_causal_gemm(dc, false, b, !transpose_b, da, p.m, p.k, p.n, p.batch, shape, alpha);
  }
  if (node.needs_input_grad(1)) {
    db = ops_detail::new_tensor(dc.ctx(), node.input_shapes[1], dc.dtype());
    CausalShape shape = cs;
    shape.masked_c = false;
    if (transpose_b) {  // dK = dC^T Q
      run_causal_gemm(dc, true, a, false, db, p.n, p.k, p.m, p.batch, shape, alpha);
    } else {  // dV = P^T dC
      run_causal_gemm(a, true, dc, false, db, p.k, p.n, p.m, p.batch, shape, alpha);
    }
  }
  return {da, db};
}

}  // namespace

namespace ops_detail {

Tensor linear_values(const Tensor& x, const Tensor& w, const Tensor& bias) {
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.back() = w.dim(1);
  Tensor y = new_tensor(x.ctx(), Shape(dims), x.dtype());
  const std::int64_t rows = x.numel() / std::max<std::int64_t>(x.dim(-1), 1);
  if (bias.defined() && y.numel() > 0) {
    // y starts as the bias on every row (a copy that reads it rows times), and the GEMM adds x w
    // into it (beta 1), as PyTorch's addmm: no separate add, and no pass of BLAS's own to zero y
    // first (OpenBLAS's sgemm_beta, which a product with beta 0 makes).
    StridedCopy rows_of_bias;
    rows_of_bias.dims = {rows, w.dim(1)};
    rows_of_bias.src_strides = {0, 1};
    rows_of_bias.dst_strides = {w.dim(1), 1};
    x.ctx().backend().copy_strided(rows_of_bias, bias, y);
  }
  run_gemm(x, false, w, false, y, rows, w.dim(1), w.dim(0), 1, true, 1.0, bias.defined());
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

Tensor linear_grad_weight(const Tensor& x, const Tensor& dy, const Tensor& into) {
  Tensor dw = into.defined() ? into : new_tensor(x.ctx(), Shape{x.dim(-1), dy.dim(-1)}, x.dtype());
  run_gemm(x, true, dy, false, dw, x.dim(-1), dy.dim(-1),
           x.numel() / std::max<std::int64_t>(x.dim(-1), 1), 1, false, 1.0, into.defined());
  return dw;
}

}  // namespace ops_detail

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_b, double alpha) {
  OpRecord r("matmul", {a, b});
  ops_detail::check_floating(r, a, "a");
  ops_detail::check_floating(r, b, "b");
  ops_detail::check_same_dtype(r, a, b);
  const MatmulPlan p = plan_matmul(r, a.shape(), b.shape(), transpose_b);
  Tensor c = ops_detail::new_tensor(r.ctx(), p.out_shape, a.dtype());
  run_gemm(a, false, b, transpose_b, c, p.m, p.n, p.k, p.batch, p.shared_b, alpha);
  if (r.needs_grad()) {
    Node& node = r.record([p, transpose_b, alpha](Node& n, const std::vector<Tensor>& g) {
      return matmul_backward(n, g, p, transpose_b, alpha);
    });
    // dA needs b and dB needs a: keep each only when the other operand takes a gradient.
    node.save(node.needs_input_grad(1) ? a : Tensor());
    node.save(node.needs_input_grad(0) ? b : Tensor());
  }
  return r.finish(c);
}

}  // namespace shardscope

namespace shardscope {

Tensor causal_matmul(const Tensor& a, const Tensor& b, bool transpose_b, std::int64_t queries,
                     double alpha) {
  OpRecord r("causal_matmul", {a, b});
  ops_detail::check_floating(r, a, "a");
  ops_detail::check_floating(r, b, "b");
  ops_detail::check_same_dtype(r, a, b);
  const MatmulPlan p = plan_matmul(r, a.shape(), b.shape(), transpose_b);
  if (p.shared_b || a.rank() < 3) {
    throw ShapeError(r.where() +
                     ": the operands of a causal product are batched [.., rows, cols], "
                     "given " +
                     a.describe() + " and " + b.describe());
  }
  CausalShape cs;
  cs.masked_c = transpose_b;
  cs.keys = transpose_b ? p.n : p.k;
  cs.queries = queries;
  if (queries < 1 || p.m % queries != 0 || cs.keys < queries) {
    throw ShapeError(r.where() + ": queries must divide the " + std::to_string(p.m) +
                     " rows (r heads of s_q queries each) and be at most the " +
                     std::to_string(cs.keys) + " keys, given queries = " + std::to_string(queries));
  }
  cs.periods = p.m / queries;
  cs.block = causal_block(queries);
  // The scores are 0 above the diagonal, where they are never written.
  Tensor c = transpose_b ? Tensor::zeros(r.ctx(), p.out_shape, a.dtype())
                         : ops_detail::new_tensor(r.ctx(), p.out_shape, a.dtype());
  run_causal_gemm(a, false, b, transpose_b, c, p.m, p.n, p.k, p.batch, cs, alpha);
  if (r.needs_grad()) {
    Node& node = r.record([p, transpose_b, cs, alpha](Node& n, const std::vector<Tensor>& g) {
      return causal_matmul_backward(n, g, p, transpose_b, cs, alpha);
    });
    node.save(node.needs_input_grad(1) ? a : Tensor());
    node.save(node.needs_input_grad(0) ? b : Tensor());
  }
  return r.finish(c);
}

}  // namespace shardscope
