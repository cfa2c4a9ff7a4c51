// Layout ops: reshape (a view), permute, transpose, split, chunk, concat (copies).
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

}  // namespace shardscope
