// diagnose: the shapes of difference tried in turn on the elements, then on blocks along each dim.
#include "parallel/run/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace shardscope {
namespace {

using Values = std::vector<double>;

struct Rule {
  double rtol, atol;
  bool close(double a, double b) const {
    return a == b ||
           (std::isfinite(a) && std::isfinite(b) && std::fabs(a - b) <= atol + rtol * std::fabs(b));
  }
};

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

bool all_close(const Values& a, const Values& b, const Rule& rule, double scale = 1) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!rule.close(a[i], scale * b[i])) return false;
  }
  return true;
}

// "a factor of t = 4", "a factor of 1/t (t = 4)", or "" for another ratio.
std::string name_ratio(double k, int t) {
  if (t > 1 && std::fabs(k - t) <= 1e-3 * t) return ": a factor of t = " + std::to_string(t);
  if (t > 1 && std::fabs(k * t - 1) <= 1e-3) {
    return ": a factor of 1/t (t = " + std::to_string(t) + ")";
  }
  return "";
}

// The shapes that need no blocks: zeros, a sign flip, a constant ratio. Kind::none when none fits.
Diagnosis elementwise(const Values& a, const Values& b, int t, const Rule& rule) {
  Diagnosis d;
  std::size_t differ = 0, zero_where_differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (rule.close(a[i], b[i])) continue;
    ++differ;
    zero_where_differ += a[i] == 0;
  }
  if (differ > 0 && zero_where_differ == differ) {
    d.kind = Diagnosis::Kind::zeros;
    d.text = "zeros where values were expected (" + std::to_string(differ) + " of " +
             std::to_string(a.size()) + " elements)";
    return d;
  }
  if (all_close(a, b, rule, -1)) {
    d.kind = Diagnosis::Kind::sign_flip;
    d.ratio = -1;
    d.text = "the sign is flipped: a = -b";
    return d;
  }
  const double ab = std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
  const double bb = std::inner_product(b.begin(), b.end(), b.begin(), 0.0);
  if (bb > 0 && std::isfinite(ab) && std::isfinite(bb)) {
    const double k = ab / bb;
    if (std::fabs(k - 1) > 1e-6 && all_close(a, b, rule, k)) {
      d.kind = Diagnosis::Kind::ratio;
      d.ratio = k;
      d.text = "a constant ratio: a = " + number(k) + " x b" + name_ratio(k, t);
    }
  }
  return d;
}

// The elements of block j of `n` along `dim` of `shape`, row-major.
Values block_of(const Values& v, const Shape& shape, int dim, int n, int j) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (int d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
  const std::int64_t size = shape[dim], part = size / n;
  Values out;
  out.reserve(static_cast<std::size_t>(outer * part * inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    const std::int64_t start = (o * size + j * part) * inner;
    for (std::int64_t i = 0; i < part * inner; ++i)
      out.push_back(v[static_cast<std::size_t>(start + i)]);
  }
  return out;
}

// a - b the same vector over the last dim at every position (rank >= 2, more than one position).
bool by_offset(const Values& a, const Values& b, const Shape& shape, const Rule& rule,
               Diagnosis& d) {
  if (shape.rank() < 2) return false;
  const std::size_t inner = static_cast<std::size_t>(shape[shape.rank() - 1]);
  if (inner == 0 || a.size() <= inner) return false;
  Values offset(inner);
  double largest = 0, smallest = INFINITY;
  for (std::size_t j = 0; j < inner; ++j) {
    offset[j] = a[j] - b[j];
    largest = std::max(largest, std::fabs(offset[j]));
    smallest = std::min(smallest, std::fabs(offset[j]));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!rule.close(a[i], b[i] + offset[i % inner])) return false;
  }
  const bool constant = all_close(offset, Values(inner, offset[0]), rule);
  d.kind = Diagnosis::Kind::offset;
  d.text = constant ? "a constant offset: a = b + " + number(offset[0]) + " everywhere"
                    : "an offset per feature: a = b + the same vector of " + std::to_string(inner) +
                          " values at every position (|offset| " + number(smallest) + " to " +
                          number(largest) + "): an extra bias-like term";
  return true;
}

// Cuts `dim` into n blocks: one block wrong (the others in place), or a permutation of blocks.
bool by_blocks(const Values& a, const Values& b, const Shape& shape, int dim, int n, int t,
               const Rule& rule, Diagnosis& d) {
  std::vector<Values> ab, bb;
  for (int j = 0; j < n; ++j) {
    ab.push_back(block_of(a, shape, dim, n, j));
    bb.push_back(block_of(b, shape, dim, n, j));
  }
  std::vector<int> in_place;
  for (int j = 0; j < n; ++j) {
    if (!all_close(ab[j], bb[j], rule)) in_place.push_back(j);
  }
  if (in_place.size() == 1) {
    const int j = in_place[0];
    const Diagnosis inside =
        elementwise(ab[static_cast<std::size_t>(j)], bb[static_cast<std::size_t>(j)], t, rule);
    d.kind = Diagnosis::Kind::one_block_wrong;
    d.dim = dim;
    d.blocks = n;
    d.block = j;
    d.text =
        "only block " + std::to_string(j) + " of " + std::to_string(n) + " along dim " +
        std::to_string(dim) + " differs" +
        (n == t ? " (rank " + std::to_string(j) + "'s slice, were it sharded on that dim)" : "") +
        (inside.kind == Diagnosis::Kind::none ? "" : ": there, " + inside.text);
    return true;
  }
  std::vector<int> perm(static_cast<std::size_t>(n), -1);
  std::vector<bool> used(static_cast<std::size_t>(n), false);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n && perm[static_cast<std::size_t>(i)] < 0; ++j) {
      if (!used[static_cast<std::size_t>(j)] &&
          all_close(ab[static_cast<std::size_t>(i)], bb[static_cast<std::size_t>(j)], rule)) {
        perm[static_cast<std::size_t>(i)] = j;
        used[static_cast<std::size_t>(j)] = true;
      }
    }
    if (perm[static_cast<std::size_t>(i)] < 0) return false;
  }
  d.kind = Diagnosis::Kind::blocks_permuted;
  d.dim = dim;
  d.blocks = n;
  d.permutation = perm;
  std::string list;
  for (int i = 0; i < n; ++i) {
    list += (i ? ", " : "") + std::to_string(perm[static_cast<std::size_t>(i)]);
  }
  d.text = std::to_string(n) + " blocks along dim " + std::to_string(dim) +
           " are permuted: a's blocks are b's blocks " + list;
  return true;
}

}  // namespace

Diagnosis diagnose(const Values& a, const Values& b, const Shape& shape, int t, double rtol,
                   double atol) {
  const Rule rule{rtol, atol};
  Diagnosis d;
  if (a.size() != b.size() || static_cast<std::int64_t>(a.size()) != shape.numel()) {
    d.kind = Diagnosis::Kind::unstructured;
    d.text = "the sizes differ";
    return d;
  }
  if (all_close(a, b, rule)) {
    d.text = "a matches b";
    return d;
  }
  if (a.size() == 1) {  // one value: nothing to tell a pattern by, unless it is t or 1/t
    const std::string named = b[0] != 0 ? name_ratio(a[0] / b[0], t) : "";
    d.kind = named.empty() ? Diagnosis::Kind::unstructured : Diagnosis::Kind::ratio;
    d.ratio = b[0] != 0 ? a[0] / b[0] : 0;
    d.text = "a = " + number(a[0]) + " where b = " + number(b[0]) +
             (named.empty() ? " (a single value)" : named);
    return d;
  }
  d = elementwise(a, b, t, rule);
  if (d.kind != Diagnosis::Kind::none) return d;
  if (by_offset(a, b, shape, rule, d)) return d;
  std::vector<int> counts;
  if (t > 1) counts.push_back(t);
  for (int n = 2; n <= 8; ++n) {
    if (n != t) counts.push_back(n);
  }
  for (int n : counts) {
    for (int dim = 0; dim < shape.rank(); ++dim) {
      if (shape[dim] < n || shape[dim] % n != 0) continue;
      if (by_blocks(a, b, shape, dim, n, t, rule, d)) return d;
    }
  }
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += !rule.close(a[i], b[i]);
  d.kind = Diagnosis::Kind::unstructured;
  d.text = "no simple pattern (not a ratio, a sign, zeros, or blocks moved or wrong): " +
           std::to_string(differ) + " of " + std::to_string(a.size()) + " elements differ";
  return d;
}

}  // namespace shardscope
