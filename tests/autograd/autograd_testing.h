// Helpers and tolerances shared by the autograd tests. Every tolerance is written here, once,
// with the reason for its size.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"

namespace shardscope::testing {

// f64 results against a reference loop in the test that sums in another order: values are O(1)
// and sums have at most ~100 terms, so they agree to a few ulps (1e-16 each).
constexpr double kF64Tol = 1e-12;
// f32 results against the same computation in f64: f32 keeps 24 bits (6e-8 relative) and the
// small reductions of these tests add a few roundings.
constexpr double kF32Tol = 1e-5;
// Gradient checks use GradcheckOptions' defaults (eps 1e-6, atol 1e-6, rtol 1e-5): on these
// small f64 inputs central differences are accurate to ~1e-9, while a wrong backward is off by a
// large fraction of the gradient itself.
inline GradcheckOptions gradcheck_tolerances() {
  return GradcheckOptions{};
}

// A leaf of N(0, std^2) f64 values that requires grad, named for reports.
inline Tensor leaf64(Context& ctx, const Shape& shape, std::uint64_t seed, const char* name,
                     double std = 1.0, double mean = 0.0) {
  Tensor t = Tensor::randn(ctx, shape, seed, std, DType::f64, mean);
  t.set_requires_grad(true).set_name(name);
  return t;
}

// The same values without requires_grad.
inline Tensor const64(Context& ctx, const Shape& shape, std::uint64_t seed, double std = 1.0) {
  return Tensor::randn(ctx, shape, seed, std, DType::f64);
}

// Fails the calling test at every element of `got` more than `tol` from `want`'s, naming its
// index (and once when the lengths differ).
inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                            double tol = kF64Tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

// Runs gradcheck and fails the calling test with its report when the gradients disagree.
inline void expect_gradients_match(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs, gradcheck_tolerances());
  EXPECT_TRUE(r.ok) << r.report;
}

// Runs `call` and returns the message of the exception of type E it must throw ("" otherwise,
// with a test failure).
template <class E, class F>
std::string message_of(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// The storages of the gradients flowing out of each backward node, in order.
class GradientIds final : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    if (e.site.phase != Phase::backward || e.output_tensors == nullptr) return;
    for (const Tensor& g : *e.output_tensors) {
      if (g.defined()) ids.push_back(g.storage()->id());
    }
  }
  std::vector<std::uint64_t> ids;
};

}  // namespace shardscope::testing
