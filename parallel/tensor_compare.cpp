// The reference comparison.
#include "parallel/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/errors.h"

namespace shardscope {

double check_tolerance(DType dtype) {
  return dtype == DType::f64 ? 1e-10 : 1e-4;
}

ErrorParts error_parts(const std::string& name, const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  if (a.size() != b.size()) {
    throw ShapeError("comparing " + name + ": " + got.describe() + " against the reference " +
                     want.describe());
  }
  ErrorParts p;
  for (std::size_t i = 0; i < a.size(); ++i) {
    p.scale = std::max(p.scale, std::fabs(b[i]));
    const double d = std::fabs(a[i] - b[i]);
    if (!std::isfinite(a[i]) || !(d <= p.max_abs)) {
      p.max_abs = std::isfinite(d) ? d : std::numeric_limits<double>::infinity();
    }
  }
  return p;
}

TensorCheck finish_check(const std::string& name, const ErrorParts& parts, double tolerance) {
  TensorCheck c;
  c.name = name;
  c.max_abs_err = parts.max_abs;
  c.max_rel_err = parts.scale > 0 ? parts.max_abs / parts.scale : parts.max_abs;
  c.passed = c.max_rel_err <= tolerance;  // false for NaN and infinity
  return c;
}

TensorCheck compare_tensors(const std::string& name, const Tensor& got, const Tensor& want,
                            double tolerance) {
  return finish_check(name, error_parts(name, got, want), tolerance);
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
