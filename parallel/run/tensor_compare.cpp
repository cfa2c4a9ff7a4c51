// The comparison rule of every check.
#include "parallel/run/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/errors.h"

namespace shardscope {

// Chosen with bench/check_margins (docs/derivations.md, "The tolerance of the reference check"):
// correct runs stay at least 100x inside these bounds and every catalogued bug at least 100x
// outside them (f64: on the output alone too).
// How many of a 2-byte type's unit roundoffs the check allows (docs/derivations.md).
constexpr double kTwoByteUlps = 8;

Tolerance default_tolerance(DType dtype) {
  if (dtype == DType::f64) return {1e-11, 1e-11};
  // The 2-byte types: a few units of their roundoff u (bf16 2^-8, f16 2^-11), derived in
  // docs/derivations.md ("The 2-byte types") and measured with bench/check_margins.
  if (dtype == DType::bf16) return {kTwoByteUlps * 0x1p-8, kTwoByteUlps * 0x1p-8};
  if (dtype == DType::f16) return {kTwoByteUlps * 0x1p-11, kTwoByteUlps * 0x1p-11};
  return {3e-5, 3e-5};
}

Tolerance f32_reference_tolerance(DType dtype) {
  if (!is_half(dtype)) {
    throw ConfigError(std::string("the check against an f32 reference is for the 2-byte dtypes "
                                  "(bf16, f16); dtype is ") +
                          dtype_name(dtype),
                      {"dtype"});
  }
  // The same count of unit roundoffs as between two 2-byte runs: docs/derivations.md ("The 2-byte
  // types") derives it and bench/check_margins --against f32 measures it.
  return default_tolerance(dtype);
}

double scale_of(const std::vector<double>& values) {
  double s = 0;
  for (double v : values) {
    if (std::isfinite(v)) s = std::max(s, std::fabs(v));
  }
  return s;
}

ElementStats compare_elements(const std::string& name, const std::vector<double>& got,
                              const std::vector<double>& want, double scale,
                              const Tolerance& tolerance) {
  if (got.size() != want.size()) {
    throw ShapeError("comparing " + name + ": " + std::to_string(got.size()) +
                     " elements against the reference's " + std::to_string(want.size()));
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ElementStats s;
  s.elements = static_cast<std::int64_t>(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (a == b) continue;  // also an infinity both sides hold
    const double diff = std::fabs(a - b);
    const double bound = element_bound(b, scale, tolerance);
    const bool finite = std::isfinite(a) && std::isfinite(b);
    const bool ok = finite && diff <= bound;
    s.failed += ok ? 0 : 1;
    s.max_abs = finite ? std::max(s.max_abs, diff) : kInf;
    s.worst = std::max(s.worst, finite && bound > 0 ? diff / bound : kInf);
  }
  return s;
}

ElementStats merge(const ElementStats& a, const ElementStats& b) {
  return {a.elements + b.elements, a.failed + b.failed, std::max(a.max_abs, b.max_abs),
          std::max(a.worst, b.worst)};
}

TensorCheck finish_check(const std::string& name, const ElementStats& stats, double scale) {
  TensorCheck c;
  c.name = name;
  c.failed = stats.failed;
  c.elements = stats.elements;
  c.max_abs_err = stats.max_abs;
  c.max_rel_err = scale > 0 ? stats.max_abs / scale : stats.max_abs;
  c.worst = stats.worst;
  c.passed = stats.failed == 0;
  return c;
}

TensorCheck check_tensor(const std::string& name, const Tensor& got, const Tensor& want,
                         const Tolerance& tolerance) {
  if (got.numel() != want.numel()) {
    throw ShapeError("comparing " + name + ": " + got.describe() + " against the reference " +
                     want.describe());
  }
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  const double scale = scale_of(b);
  return finish_check(name, compare_elements(name, a, b, scale, tolerance), scale);
}

std::vector<std::size_t> pair_by_name(const std::vector<std::string>& got,
                                      const std::vector<std::string>& want,
                                      const std::string& what) {
  auto listing = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  std::vector<std::size_t> index;
  std::vector<bool> used(want.size(), false);
  for (const std::string& name : got) {
    const auto at = std::find(want.begin(), want.end(), name);
    if (at == want.end()) {
      throw StateError(what + ": '" + name +
                       "' has no tensor of that name to compare with (there: " + listing(want) +
                       ")");
    }
    const auto i = static_cast<std::size_t>(at - want.begin());
    if (used[i]) throw StateError(what + ": '" + name + "' is named twice");
    used[i] = true;
    index.push_back(i);
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!used[i]) {
      throw StateError(what + ": '" + want[i] +
                       "' has no tensor of that name to be compared with "
                       "(compared: " +
                       listing(got) + ")");
    }
  }
  return index;
}

}  // namespace shardscope
