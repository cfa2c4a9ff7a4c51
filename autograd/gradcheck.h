// gradcheck: compares the gradients backward computes with central finite differences, in f64 on
// any device (elements are perturbed through the backend's host copies). The tests of every op use
// it, and so do the course labs: when a check fails, the report names the input, the worst element
// and both values, and hints at common mistakes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

struct GradcheckOptions {
  // Central-difference step. Its truncation error is O(eps^2) and its rounding error about
  // 1e-16 * |L| / eps, so 1e-6 keeps both near 1e-10 for the small inputs of a test.
  double eps = 1e-6;
  // An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
  double atol = 1e-6;
  double rtol = 1e-5;
  // Seed of the fixed random weights w that turn f's output into the scalar sum(f(x) * w).
  std::uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;  // max |analytic - numeric| over every checked element
  // max |analytic - numeric| / max(|analytic|, |numeric|) over the elements where that
  // denominator exceeds atol (rounding noise around zero would otherwise read as 100%).
  double max_rel_error = 0.0;
  std::string report;  // one line per checked input, plus the failure and hints
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradient of the scalar L = sum(f(inputs) * w), where w holds fixed random weights
// of f's output shape (so every output element matters), with respect to every input that
// requires grad. The analytic gradient comes from one backward seeded with w; the numeric one
// perturbs each element by +-eps and recomputes f under NoGradGuard.
//
// Inputs must be defined f64 leaves (on any one device) (DTypeError / ArgumentError otherwise), and
// at least one must require grad. Inputs are left as they were: perturbed values are restored, even
// when f throws, and any .grad they held before is put back. f must be deterministic (a dropout
// needs a fixed DropoutSpec); a function whose output changes between two identical calls fails the
// check.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace shardscope
