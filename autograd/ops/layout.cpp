// Layout ops: reshape (a view), permute, transpose, split, chunk, concat, head_split (copies).
#include <numeric>
#include <string>

#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::OpRecord;

Shape resolve_reshape(const OpRecord& r, const Shape& from, const Shape& to) {
  std::vector<std::int64_t> dims = to.dims();
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < to.rank(); ++i) {
    if (dims[static_cast<std::size_t>(i)] == -1 && infer < 0) {
      infer = i;
    } else if (dims[static_cast<std::size_t>(i)] < 0) {
      throw ShapeError(r.where() + ": bad target shape " + to.str() + " (one -1 at most)");
    } else {
      known *= dims[static_cast<std::size_t>(i)];
    }
  }
  if (infer >= 0 && known > 0 && from.numel() % known == 0) {
    dims[static_cast<std::size_t>(infer)] = from.numel() / known;
  }
  const Shape out(dims);
  if (out.numel() != from.numel() || (infer >= 0 && known == 0)) {
    throw ShapeError(r.where() + ": cannot reshape " + from.str() + " (" +
                     std::to_string(from.numel()) + " elements) to " + to.str());
  }
  return out;
}

std::vector<int> inverse_permutation(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return inv;
}

Tensor permuted_copy(const Tensor& x, const std::vector<int>& perm) {
  std::vector<std::int64_t> dims(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) dims[i] = x.shape()[perm[i]];
  Tensor y = ops_detail::new_tensor(x.ctx(), Shape(dims), x.dtype());  // permute writes it whole
  x.ctx().backend().permute(x, perm, y);
  return y;
}

// Copies the pieces into one tensor along `dim` (the forward of concat, the backward of split).
Tensor join(Context& ctx, const std::vector<Tensor>& pieces, int dim, const Shape& out_shape) {
  // The pieces cover out along dim.
  Tensor out = ops_detail::new_tensor(ctx, out_shape, pieces.front().dtype());
  std::int64_t offset = 0;
  for (const Tensor& p : pieces) {
    const std::int64_t n = p.shape()[dim];
    ctx.backend().copy_slice(p, dim, 0, out, offset, n);
    offset += n;
  }
  return out;
}

// Cuts x into pieces along `dim` (the forward of split, the backward of concat).
std::vector<Tensor> cut(const Tensor& x, int dim, const std::vector<std::int64_t>& sizes) {
  std::vector<Tensor> out;
  std::int64_t offset = 0;
  for (std::int64_t n : sizes) {
    Shape s = x.shape();
    s[dim] = n;
    Tensor piece = ops_detail::new_tensor(x.ctx(), s, x.dtype());  // its slice is all of it
    x.ctx().backend().copy_slice(x, dim, offset, piece, 0, n);
    out.push_back(piece);
    offset += n;
  }
  return out;
}

// Part p of head_split's x [s, b, W] as [b, heads, s, d]: the map from the part's index to x's
// elements (on the source side for forward, the destination side for backward).
StridedCopy head_copy(const Shape& x, std::int64_t d, const HeadColumns& p, bool into_x) {
  const std::int64_t s = x[0], b = x[1], w = x[2];
  StridedCopy c;
  c.dims = {b, p.heads, s, d};
  const std::vector<std::int64_t> in_x = {w, p.stride, b * w, 1};
  const std::vector<std::int64_t> packed = Shape(c.dims).strides();
  c.src_offset = into_x ? 0 : p.first;
  c.dst_offset = into_x ? p.first : 0;
  c.src_strides = into_x ? packed : in_x;
  c.dst_strides = into_x ? in_x : packed;
  return c;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  OpRecord r("reshape", {x});
  ops_detail::check_defined(r, x, "x");
  const Shape out = resolve_reshape(r, x.shape(), shape);
  Tensor y = x.detach();
  y.impl()->shape = out;
  if (r.needs_grad()) {
    const Shape in = x.shape();
    r.record([in](Node&, const std::vector<Tensor>& g) {
      Tensor dx = g[0].detach();
      dx.impl()->shape = in;
      return std::vector<Tensor>{dx};
    });
  }
  return r.finish(y);
}

Tensor permute(const Tensor& x, const std::vector<int>& perm) {
  OpRecord r("permute", {x});
  ops_detail::check_defined(r, x, "x");
  std::vector<int> norm(perm.size());
  std::vector<bool> seen(perm.size(), false);
  bool ok = static_cast<int>(perm.size()) == x.rank();
  for (std::size_t i = 0; ok && i < perm.size(); ++i) {
    const int d = perm[i] < 0 ? perm[i] + x.rank() : perm[i];
    ok = d >= 0 && d < x.rank() && !seen[static_cast<std::size_t>(d)];
    if (ok) seen[static_cast<std::size_t>(d)] = true, norm[i] = d;
  }
  if (!ok) {
    std::string given;
    for (int p : perm) given += (given.empty() ? "" : ", ") + std::to_string(p);
    throw ShapeError(r.where() + ": (" + given + ") is not a permutation of the " +
                     std::to_string(x.rank()) + " dims of " + x.describe());
  }
  Tensor y = permuted_copy(x, norm);
  if (r.needs_grad()) {
    const std::vector<int> inv = inverse_permutation(norm);
    r.record([inv](Node&, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{permuted_copy(g[0], inv)};
    });
  }
  return r.finish(y);
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  const std::string where = x.defined() ? x.ctx().where("transpose") : "op 'transpose'";
  const int d0 = ops_detail::checked_dim(where, x, dim0);
  const int d1 = ops_detail::checked_dim(where, x, dim1);
  std::vector<int> perm(static_cast<std::size_t>(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<std::size_t>(d0)], perm[static_cast<std::size_t>(d1)]);
  return permute(x, perm);
}

std::vector<Tensor> split(const Tensor& x, int dim, const std::vector<std::int64_t>& sizes) {
  OpRecord r("split", {x});
  const int d = ops_detail::checked_dim(r.where(), x, dim);
  std::int64_t total = 0;
  for (std::int64_t n : sizes) {
    if (n < 0) throw ShapeError(r.where() + ": split sizes must be >= 0");
    total += n;
  }
  if (sizes.empty() || total != x.shape()[d]) {
    throw ShapeError(r.where() + ": split sizes add up to " + std::to_string(total) + " but dim " +
                     std::to_string(d) + " of " + x.describe() + " is " +
                     std::to_string(x.shape()[d]));
  }
  std::vector<Tensor> outs = cut(x, d, sizes);
  if (r.needs_grad()) {
    const Shape in = x.shape();
    r.record([in, d](Node& n, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{join(n.ctx(), g, d, in)};
    });
  }
  return r.finish(std::move(outs));
}

std::vector<Tensor> chunk(const Tensor& x, int dim, int chunks) {
  const std::string where = x.defined() ? x.ctx().where("chunk") : "op 'chunk'";
  const std::int64_t n = x.shape()[ops_detail::checked_dim(where, x, dim)];
  if (chunks < 1 || n % chunks != 0) {
    throw ShapeError(where + ": dim " + std::to_string(dim) + " of " + x.describe() + " (size " +
                     std::to_string(n) + ") does not divide into " + std::to_string(chunks) +
                     " equal chunks");
  }
  return split(x, dim, std::vector<std::int64_t>(static_cast<std::size_t>(chunks), n / chunks));
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  OpRecord r("concat", xs);
  if (xs.empty()) throw ShapeError(r.where() + ": nothing to concatenate");
  const Tensor& first = xs.front();
  const int d = ops_detail::checked_dim(r.where(), first, dim);
  Shape out = first.shape();
  out[d] = 0;
  std::vector<std::int64_t> sizes;
  for (const Tensor& t : xs) {
    ops_detail::check_defined(r, t, "an input");
    ops_detail::check_same_dtype(r, first, t);
    Shape probe = t.shape();
    if (probe.rank() == out.rank()) probe[d] = 0;
    if (probe != out) {
      throw ShapeError(r.where() + ": " + t.describe() + " does not match " + first.describe() +
                       " outside dim " + std::to_string(d));
    }
    sizes.push_back(t.shape()[d]);
  }
  for (std::int64_t n : sizes) out[d] += n;
  Tensor y = join(r.ctx(), xs, d, out);
  if (r.needs_grad()) {
    r.record([sizes, d](Node&, const std::vector<Tensor>& g) { return cut(g[0], d, sizes); });
  }
  return r.finish(y);
}

std::vector<Tensor> head_split(const Tensor& x, std::int64_t d,
                               const std::vector<HeadColumns>& parts) {
  OpRecord r("head_split", {x});
  ops_detail::check_defined(r, x, "x");
  if (x.rank() != 3 || d < 1 || x.shape()[2] % d != 0) {
    throw ShapeError(r.where() + ": x must be [s, b, W] with W a multiple of d = " +
                     std::to_string(d) + ", given " + x.describe());
  }
  if (parts.empty()) throw ShapeError(r.where() + ": no parts given");
  const std::int64_t w = x.shape()[2];
  std::vector<int> covered(static_cast<std::size_t>(w), 0);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const HeadColumns& p = parts[i];
    const std::string part = "part " + std::to_string(i) + " (first " + std::to_string(p.first) +
                             ", heads " + std::to_string(p.heads) + ", stride " +
                             std::to_string(p.stride) + ")";
    if (p.heads < 1 || p.first < 0 || p.stride < 0 || (p.heads > 1 && p.stride < d) ||
        p.first + (p.heads - 1) * p.stride + d > w) {
      throw ShapeError(
          r.where() + ": " + part + " must be 1 or more heads of d = " + std::to_string(d) +
          " columns, apart, within the " + std::to_string(w) + " columns of " + x.describe());
    }
    for (std::int64_t h = 0; h < p.heads; ++h) {
      for (std::int64_t c = 0; c < d; ++c)
        ++covered[static_cast<std::size_t>(p.first + h * p.stride + c)];
    }
  }
  for (std::int64_t c = 0; c < w; ++c) {
    const int n = covered[static_cast<std::size_t>(c)];
    if (n != 1) {
      throw ShapeError(r.where() + ": the parts must cover each column of " + x.describe() +
                       " once; column " + std::to_string(c) + " is in " + std::to_string(n));
    }
  }
  std::vector<Tensor> outs;
  for (const HeadColumns& p : parts) {
    const StridedCopy c = head_copy(x.shape(), d, p, false);
    Tensor out = ops_detail::new_tensor(x.ctx(), Shape(c.dims), x.dtype());  // written whole
    x.ctx().backend().copy_strided(c, x, out);
    outs.push_back(out);
  }
  if (r.needs_grad()) {
    const Shape in = x.shape();
    r.record([in, d, parts](Node& n, const std::vector<Tensor>& g) {
      // The parts cover every column: the gradient is written whole.
      Tensor dx = ops_detail::new_tensor(n.ctx(), in, g.front().dtype());
      for (std::size_t i = 0; i < parts.size(); ++i) {
        n.ctx().backend().copy_strided(head_copy(in, d, parts[i], true), g[i], dx);
      }
      return std::vector<Tensor>{dx};
    });
  }
  return r.finish(std::move(outs));
}

}  // namespace shardscope
