// What a lab's tests use to judge an implementation against the framework's reference: an
// element-wise comparison that, on a mismatch, names the largest error and where it is, and
// recognises the relations that common mistakes leave behind (a factor of t, a sign, zeros, a
// transposed or shifted shard) to say which mistake is likely.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope::labs {

// Tolerances: the labs compare f64 runs, where an implementation with the reference's math agrees
// to rounding (sums of up to a few thousand O(1) terms: ~1e-13); any real mistake is off by far
// more. Labs with f32 or other orders of summation pass their own.
struct Tolerance {
  double atol = 1e-9;
  double rtol = 1e-7;
};

// Hints shown when `got` stands in a recognisable relation to `want`; empty ones are not shown.
struct Hints {
  std::string times_t;  // got = t * want
  std::string over_t;   // got = want / t
  std::string negated;  // got = -want
  std::string zeros;    // got is all zeros
  std::string other;    // none of the above
  Hints& if_times_t(std::string h) { return times_t = std::move(h), *this; }
  Hints& if_over_t(std::string h) { return over_t = std::move(h), *this; }
  Hints& if_negated(std::string h) { return negated = std::move(h), *this; }
  Hints& if_zeros(std::string h) { return zeros = std::move(h), *this; }
  Hints& otherwise(std::string h) { return other = std::move(h), *this; }
};

namespace detail {

inline bool close_all(const std::vector<double>& got, const std::vector<double>& want, double k,
                      const Tolerance& tol) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = k * want[i];
    if (!(std::abs(got[i] - w) <= tol.atol + tol.rtol * std::abs(w))) return false;
  }
  return true;
}

inline bool all_zero(const std::vector<double>& v) {
  for (double x : v) {
    if (x != 0.0) return false;
  }
  return true;
}

}  // namespace detail

// Passes when got and want agree element-wise; otherwise the message reads, for example:
//   "input gradient (rank 1): 64 of 64 elements differ, largest |got - want| = 0.75 at element 3
//    (got 1, want 0.25); got = 4 x want (t = 4): is the backward all-reduce applied twice?"
inline ::testing::AssertionResult matches(const std::string& what, const std::vector<double>& got,
                                          const std::vector<double>& want, int t,
                                          const Hints& hints = {}, const Tolerance& tol = {}) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, expected " << want.size();
  }
  std::size_t bad = 0, worst = 0;
  double worst_err = -1.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= tol.atol + tol.rtol * std::abs(want[i]))) {
      ++bad;
      if (!(err <= worst_err)) {  // NaN counts as the worst
        worst_err = err;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream m;
  m << what << ": " << bad << " of " << want.size()
    << " elements differ, largest |got - want| = " << worst_err << " at element " << worst
    << " (got " << got[worst] << ", want " << want[worst] << ")";
  const double td = static_cast<double>(t);
  if (detail::all_zero(got) && !detail::all_zero(want)) {
    m << "; got is all zeros" << (hints.zeros.empty() ? "" : ": " + hints.zeros);
  } else if (t > 1 && detail::close_all(got, want, td, tol)) {
    m << "; got = " << t << " x want (t = " << t << ")"
      << (hints.times_t.empty() ? "" : ": " + hints.times_t);
  } else if (t > 1 && detail::close_all(got, want, 1.0 / td, tol)) {
    m << "; got = want / " << t << " (t = " << t << ")"
      << (hints.over_t.empty() ? "" : ": " + hints.over_t);
  } else if (detail::close_all(got, want, -1.0, tol)) {
    m << "; got = -want" << (hints.negated.empty() ? "" : ": " + hints.negated);
  } else if (!hints.other.empty()) {
    m << "; " << hints.other;
  }
  return ::testing::AssertionFailure() << m.str();
}

// The same on tensors, with their shapes checked first.
inline ::testing::AssertionResult matches(const std::string& what, const Tensor& got,
                                          const Tensor& want, int t, const Hints& hints = {},
                                          const Tolerance& tol = {}) {
  if (!got.defined()) return ::testing::AssertionFailure() << what << ": got no tensor";
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << what << ": shape " << got.shape().str() << ", expected " << want.shape().str();
  }
  return matches(what, got.to_vector(), want.to_vector(), t, hints, tol);
}

}  // namespace shardscope::labs
