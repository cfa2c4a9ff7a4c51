// The numerical guard (Context::set_check_finite): the first NaN or Inf in a forward output or a
// gradient throws NumericalError naming the op, scope, layer, phase, rank and step, the tensor,
// the first bad element and how many there are; later ops never run. Off by default.
#include <limits>

#include "autograd/optim.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;
using ::testing::Not;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Counts op begin and end events, forward and backward.
class OpCounter final : public Observer {
 public:
  void on_op_begin(const OpEvent&) override { ++begins; }
  void on_op_end(const OpEvent&) override { ++ends; }
  int begins = 0;
  int ends = 0;
};

TEST(FiniteCheck, CountsNaNAndInfAndFindsTheFirst) {
  Context ctx;
  const Tensor t = Tensor::from_vector(ctx, {2, 3}, {1.0, 2.0, kInf, 4.0, kNaN, -kInf}, DType::f32);
  const NonFiniteCount c = count_non_finite(t);
  EXPECT_EQ(c.nan, 1);
  EXPECT_EQ(c.inf, 2);
  EXPECT_EQ(c.first, 2);
  EXPECT_EQ(c.first_value, kInf);
  const NonFiniteCount d = count_non_finite(Tensor::from_vector(ctx, {2}, {-kInf, 0}, DType::f64));
  EXPECT_EQ(d.inf, 1);
  EXPECT_EQ(d.first, 0);
  EXPECT_FALSE(count_non_finite(Tensor::full(ctx, {4}, 3.0e38, DType::f32)).any());
  EXPECT_FALSE(count_non_finite(Tensor::full(ctx, {4}, 255, DType::u8)).any());  // not floating
  EXPECT_FALSE(count_non_finite(Tensor()).any());
}

TEST(FiniteCheck, IsOffByDefaultAndThenLetsNaNThrough) {
  Context ctx;
  EXPECT_FALSE(ctx.check_finite());
  const Tensor x = Tensor::from_vector(ctx, {2}, {1.0, kNaN}).set_requires_grad(true);
  Tensor y;
  EXPECT_NO_THROW({
    y = gelu(scale(x, 2.0));
    sum(y).backward();
  });
  EXPECT_TRUE(count_non_finite(y).any());
  EXPECT_TRUE(count_non_finite(x.grad()).any());
}

// Finite inputs, then an op whose result overflows f32: that op is named (with the scope, layer,
// rank and step) and the ops after it never run.
TEST(FiniteCheck, ForwardNamesTheFirstOpThatMadeAnInfAndStopsThere) {
  Context ctx(2);
  ctx.set_check_finite(true);
  ctx.set_step(7);
  OpCounter counter;
  ObserverGuard attach(ctx, counter);
  const Tensor x = Tensor::from_vector(ctx, {2, 3}, {0.5, 1.0, 0.5, 0.5, 4.0, 0.5});
  bool gelu_ran = false;
  const std::string msg = message_of<NumericalError>([&] {
    LayerGuard layer(ctx, 3);
    ScopeGuard scope(ctx, "block");
    Tensor a = add(x, x);  // finite: 1 2 1 / 1 8 1
    Tensor b;
    {
      ScopeGuard amplify(ctx, "amplify");
      b = scale(a, 1.0e38);  // 2e38 fits in f32, 8e38 does not
    }
    gelu_ran = true;
    gelu(b);
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("op 'scale' in block.amplify (layer 3, forward, rank 2)"),
                         HasSubstr("output 0 f32[2, 3] is not finite at step 7"),
                         HasSubstr("1 of 6 elements (0 NaN, 1 Inf)"),
                         HasSubstr("the first at [1, 1] = inf"),
                         HasSubstr("every input is finite: this op made them")));
  EXPECT_THAT(msg, Not(HasSubstr("'add'")));
  EXPECT_FALSE(gelu_ran);
  EXPECT_EQ(counter.begins, counter.ends);  // the failed op's begin is closed
}

// A NaN that came in with the data is reported at the first op that reads it, saying so.
TEST(FiniteCheck, ForwardNamesTheFirstOpThatReadsANaNInput) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x =
      Tensor::from_vector(ctx, {2, 2}, {0.0, 1.0, kNaN, 3.0}, DType::f64).set_name("data");
  const std::string msg = message_of<NumericalError>([&] {
    ScopeGuard scope(ctx, "attn");
    Tensor p = softmax(x);
    gelu(p);
  });
  EXPECT_THAT(
      msg,
      AllOf(HasSubstr("op 'softmax' in attn (forward, rank 0)"), HasSubstr("output 0 f64[2, 2]"),
            HasSubstr("2 of 4 elements (2 NaN, 0 Inf)"), HasSubstr("the first at [1, 0] = nan"),
            HasSubstr("input 0 data f64[2, 2] already held 1 NaN and 0 Inf")));
  EXPECT_THAT(msg, Not(HasSubstr("gelu")));
}

// softmax of a row holding +inf: exp(inf - inf) is NaN, made by the op from a non-finite input.
TEST(FiniteCheck, SoftmaxOfInfIsNamed) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x = Tensor::from_vector(ctx, {1, 3}, {0.0, kInf, 1.0});
  EXPECT_THAT(message_of<NumericalError>([&] { softmax(x); }),
              AllOf(HasSubstr("op 'softmax'"), HasSubstr("NaN"), HasSubstr("already held")));
}

// The forward is finite; the gradient of x = seed * w overflows f32 in mul's backward.
TEST(FiniteCheck, BackwardNamesTheNodeWhoseGradientBecameInf) {
  Context ctx(1);
  ctx.set_check_finite(true);
  ctx.set_step(4);
  const Tensor x = Tensor::from_vector(ctx, {2}, {1.0, 2.0}).set_requires_grad(true).set_name("x");
  const Tensor w = Tensor::full(ctx, {2}, 1.0e30);
  Tensor y;
  {
    LayerGuard layer(ctx, 0);
    ScopeGuard scope(ctx, "head");
    y = mul(x, w);  // 1e30, 2e30: finite
  }
  const Tensor seed = Tensor::full(ctx, {2}, 1.0e10);
  const std::string msg = message_of<NumericalError>([&] { y.backward(seed); });
  EXPECT_THAT(
      msg, AllOf(HasSubstr("op 'mul' in head (layer 0, backward, rank 1)"),
                 HasSubstr("gradient of input 0 f32[2] is not finite at step 4"),
                 HasSubstr("2 of 2 elements (0 NaN, 2 Inf)"), HasSubstr("the first at [0] = inf"),
                 HasSubstr("the gradients flowing in are finite: this backward made them")));
  EXPECT_FALSE(x.grad().defined());        // the bad gradient never reached the leaf
  EXPECT_EQ(ctx.phase(), Phase::forward);  // the engine's state is restored
}

// The node that throws in backward still gets its end event (with no outputs), so a trace or a
// ledger attributing allocations to the open op stays balanced.
TEST(FiniteCheck, ABackwardThatThrowsClosesItsOpForTheObservers) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x = Tensor::from_vector(ctx, {2}, {1.0, 2.0}).set_requires_grad(true);
  const Tensor y = mul(x, Tensor::full(ctx, {2}, 1.0e30));
  OpCounter counter;
  ObserverGuard watch(ctx, counter);
  EXPECT_THROW(y.backward(Tensor::full(ctx, {2}, 1.0e10)), NumericalError);
  EXPECT_GE(counter.begins, 1);
  EXPECT_EQ(counter.ends, counter.begins);
}

// Two finite gradients whose sum overflows: where a tensor used twice gets them added.
TEST(FiniteCheck, BackwardNamesAGradientSumThatOverflows) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x = Tensor::from_vector(ctx, {2}, {1.0, 1.0}).set_requires_grad(true);
  const Tensor u = scale(x, 1.0);
  const Tensor z = add(scale(u, 1.0), scale(u, 1.0));
  const Tensor seed = Tensor::full(ctx, {2}, 2.0e38);  // each use passes 2e38 back to u
  EXPECT_THAT(
      message_of<NumericalError>([&] { z.backward(seed); }),
      AllOf(HasSubstr("op 'scale'"), HasSubstr("backward"),
            HasSubstr("added to the gradient of its other uses"), HasSubstr("the sum overflowed")));

  // The same on a leaf used twice: its gradients are summed into x.grad.
  const Tensor leaf = Tensor::from_vector(ctx, {2}, {1.0, 1.0}).set_requires_grad(true);
  const Tensor twice = add(scale(leaf, 1.0), scale(leaf, 1.0));
  EXPECT_THAT(message_of<NumericalError>([&] { twice.backward(seed); }),
              AllOf(HasSubstr("added to the leaf's gradient so far"), HasSubstr("backward")));
  // The failed sum is not stored: the leaf keeps the finite gradient of its first use.
  ASSERT_TRUE(leaf.grad().defined());
  const double kept = static_cast<float>(2.0e38);  // the seed, in f32
  EXPECT_EQ(leaf.grad().to_vector(), std::vector<double>({kept, kept}));

  // Backward from the leaf itself, twice: the second seed is added to the first.
  const Tensor root = Tensor::from_vector(ctx, {2}, {1.0, 1.0}).set_requires_grad(true);
  root.backward(seed);
  EXPECT_THAT(message_of<NumericalError>([&] { root.backward(seed); }),
              AllOf(HasSubstr("the gradient given to backward() added to the leaf's gradient"),
                    HasSubstr("the sum overflowed")));
  EXPECT_EQ(root.grad().to_vector(), std::vector<double>({kept, kept}));
}

// The SGD update is checked too: a finite parameter and gradient whose update overflows.
TEST(FiniteCheck, AnSgdUpdateThatOverflowsIsNamed) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor w = Tensor::full(ctx, {1}, 3.0e38).set_requires_grad(true).set_name("w");
  sum(scale(w, 1.0)).backward();  // gradient 1 everywhere
  EXPECT_THAT(
      message_of<NumericalError>([&] { sgd_step({w}, -1.0e38); }),
      AllOf(HasSubstr("op 'sgd_step'"), HasSubstr("the parameter after the update"),
            HasSubstr("w f32[1]"), HasSubstr("the learning rate times the gradient overflowed")));
}

TEST(FiniteCheck, ANonFiniteSeedGradientIsNamed) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x = Tensor::from_vector(ctx, {2}, {1.0, 2.0}).set_requires_grad(true);
  const Tensor y = scale(x, 3.0);
  const Tensor seed = Tensor::from_vector(ctx, {2}, {0.0, kNaN});
  EXPECT_THAT(message_of<NumericalError>([&] { y.backward(seed); }),
              AllOf(HasSubstr("op 'scale'"), HasSubstr("backward"),
                    HasSubstr("the gradient given to backward()"), HasSubstr("= nan")));
}

TEST(FiniteCheck, AFiniteForwardAndBackwardPassTheCheck) {
  Context ctx;
  ctx.set_check_finite(true);
  const Tensor x = Tensor::randn(ctx, {4, 8}, 1).set_requires_grad(true);
  const Tensor gamma = Tensor::full(ctx, {8}, 1.0).set_requires_grad(true);
  const Tensor beta = Tensor::zeros(ctx, {8}).set_requires_grad(true);
  EXPECT_NO_THROW(mean(gelu(softmax(layernorm(x, gamma, beta)))).backward());
  EXPECT_TRUE(x.grad().defined());
}

}  // namespace
}  // namespace shardscope
