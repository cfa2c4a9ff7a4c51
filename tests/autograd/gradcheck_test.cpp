// Tests of gradcheck itself: it passes a right backward, catches planted mistakes with a report
// that names the input, the element and both values, leaves its inputs untouched, and refuses
// inputs it cannot check.
#include <functional>

#include "autograd/node.h"
#include "autograd/ops/record.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using testing::leaf64;
using ::testing::Not;
using Inputs = std::vector<Tensor>;

// dx from x, dy and the flat element index, computed on the host.
using PlantedGrad = std::function<double(double x, double dy, std::size_t i)>;

// y = x * x, or x reversed when `reverse`, with the backward `grad` (nullptr: no gradient), so
// that a test can plant a mistake a student might make.
Tensor planted_op(const Tensor& x, PlantedGrad grad, bool reverse = false) {
  ops_detail::OpRecord r("planted", {x});
  std::vector<double> v = x.to_vector();
  const std::size_t n = v.size();
  std::vector<double> y(n);
  for (std::size_t i = 0; i < n; ++i) y[i] = reverse ? v[n - 1 - i] : v[i] * v[i];
  Tensor out = Tensor::from_vector(x.ctx(), x.shape(), y, x.dtype());
  if (r.needs_grad()) {
    Node& node = r.record([grad](Node& nd, const std::vector<Tensor>& g) {
      if (!grad) return std::vector<Tensor>{Tensor()};
      const std::vector<double> xs = nd.saved(0).to_vector(), dy = g[0].to_vector();
      std::vector<double> dx(xs.size());
      for (std::size_t i = 0; i < xs.size(); ++i) dx[i] = grad(xs[i], dy[i], i);
      return std::vector<Tensor>{Tensor::from_vector(nd.ctx(), g[0].shape(), dx, DType::f64)};
    });
    node.save(x);
  }
  return r.finish(out);
}

class Gradcheck : public ::testing::Test {
 protected:
  GradcheckResult check(PlantedGrad grad, bool reverse = false) {
    return gradcheck([=](const Inputs& in) { return planted_op(in[0], grad, reverse); }, {x});
  }
  Context ctx;
  Tensor x = leaf64(ctx, {2, 3}, 5, "x");
};

TEST_F(Gradcheck, PassesARightBackward) {
  const GradcheckResult r = check([](double v, double dy, std::size_t) { return 2 * v * dy; });
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_LT(r.max_abs_error, 1e-6);
  EXPECT_THAT(r.report, HasSubstr("gradcheck passed"));
  EXPECT_THAT(r.report, HasSubstr("input 0 (x f64[2, 3]): ok"));
}

TEST_F(Gradcheck, NamesTheWorstElementAndBothValues) {
  // Right everywhere except flat element 4, i.e. [1, 1] of [2, 3].
  const GradcheckResult r =
      check([](double v, double dy, std::size_t i) { return 2 * v * dy + (i == 4 ? 1.0 : 0.0); });
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.max_abs_error, 0.5);
  EXPECT_THAT(r.report, HasSubstr("gradcheck FAILED"));
  EXPECT_THAT(r.report, HasSubstr("input 0 (x f64[2, 3]): 1 of 6 elements out of tolerance"));
  EXPECT_THAT(r.report, HasSubstr("element [1, 1]: analytic"));
  EXPECT_THAT(r.report, HasSubstr("vs numeric"));
}

TEST_F(Gradcheck, HintsAtAConstantFactor) {
  const GradcheckResult r = check([](double v, double dy, std::size_t) { return 3 * v * dy; });
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("analytic = 1.5 x numeric"));
  EXPECT_THAT(r.report, HasSubstr("6 of 6 elements"));
}

TEST_F(Gradcheck, HintsAtAFlippedSign) {
  const GradcheckResult r = check([](double v, double dy, std::size_t) { return -2 * v * dy; });
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("sign is flipped"));
}

TEST_F(Gradcheck, HintsAtZeroAndMissingGradients) {
  GradcheckResult r = check([](double, double, std::size_t) { return 0.0; });
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("zero everywhere"));
  r = check(nullptr);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("backward never reached this input"));
}

TEST_F(Gradcheck, RandomWeightsCatchAGradientSentToTheWrongElement) {
  // The forward reverses x; this backward forgets to reverse dy back. With L = sum(y) every dy
  // would be 1 and the mistake invisible; random weights expose it.
  const GradcheckResult r = check([](double, double dy, std::size_t) { return dy; }, true);
  EXPECT_FALSE(r.ok) << r.report;
}

TEST_F(Gradcheck, CatchesAnOutputThatIsNotTracked) {
  const GradcheckResult r = gradcheck(
      [this](const Inputs& in) {
        NoGradGuard off(ctx);
        return gelu(in[0]);
      },
      {x});
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("f's output does not require grad"));
}

TEST_F(Gradcheck, CatchesANonDeterministicFunction) {
  std::uint32_t calls = 0;
  const GradcheckResult r = gradcheck(
      [&calls](const Inputs& in) {
        DropoutSpec spec;
        spec.p = 0.5;
        spec.step = calls++;  // a new mask every call
        return dropout(in[0], spec);
      },
      {x});
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.report, HasSubstr("f is not deterministic"));
}

TEST_F(Gradcheck, RestoresValuesAndPreviousGrad) {
  const std::vector<double> before = x.to_vector();
  const Tensor old_grad = Tensor::full(ctx, {2, 3}, 7.0, DType::f64);
  x.set_grad(old_grad);
  EXPECT_TRUE(check([](double v, double dy, std::size_t) { return 2 * v * dy; }).ok);
  EXPECT_FALSE(check([](double v, double dy, std::size_t) { return v * dy; }).ok);
  EXPECT_EQ(x.to_vector(), before);  // exact: perturbations must be undone, not approximated
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().same(old_grad));
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(6, 7.0));
}

TEST_F(Gradcheck, RestoresValuesWhenFThrows) {
  const std::vector<double> before = x.to_vector();
  int calls = 0;
  const auto f = [&calls](const Inputs& in) {
    if (++calls == 4) throw std::runtime_error("boom");  // while an element is perturbed
    return gelu(in[0]);
  };
  EXPECT_THROW(gradcheck(f, {x}), std::runtime_error);
  EXPECT_EQ(x.to_vector(), before);
}

TEST_F(Gradcheck, SkipsInputsWithoutGrad) {
  const Tensor w = testing::const64(ctx, {2, 3}, 6).set_name("w");
  const GradcheckResult r = gradcheck([](const Inputs& in) { return mul(in[0], in[1]); }, {x, w});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_THAT(r.report, HasSubstr("input 1 (w f64[2, 3]): does not require grad, skipped"));
}

TEST_F(Gradcheck, RefusesInputsItCannotCheck) {
  const auto f = [](const Inputs& in) { return gelu(in[0]); };
  Tensor f32 = Tensor::randn(ctx, {2, 2}, 1, 1.0, DType::f32).set_name("h");
  f32.set_requires_grad(true);
  std::string msg = testing::message_of<DTypeError>([&] { gradcheck(f, {f32}); });
  EXPECT_THAT(msg, HasSubstr("input 0 (h f32[2, 2])"));
  EXPECT_THAT(msg, HasSubstr("must be f64"));
  msg = testing::message_of<ArgumentError>([&] { gradcheck(f, {testing::const64(ctx, {2}, 1)}); });
  EXPECT_THAT(msg, HasSubstr("no input requires grad"));
  msg = testing::message_of<ArgumentError>([&] { gradcheck(f, {scale(x, 2.0)}); });
  EXPECT_THAT(msg, HasSubstr("produced by an op"));
  GradcheckOptions bad;
  bad.eps = 0.0;
  EXPECT_THROW(gradcheck(f, {x}, bad), ArgumentError);
  EXPECT_THAT(gradcheck(f, {x}).report, Not(HasSubstr("FAILED")));
}

}  // namespace
}  // namespace shardscope
