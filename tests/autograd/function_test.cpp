// apply_function: a hand-written op on the tape, its saved tensors, and its errors.
#include "autograd/function.h"

#include "autograd/memory_ledger.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using testing::const64;
using testing::expect_gradients_match;
using testing::leaf64;
using testing::message_of;

// y = x * x with backward 2 x dy, written as a function: gradcheck agrees.
Tensor square(const Tensor& x) {
  return apply_function1(
      "square", {x},
      [](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
        save.push_back(in[0]);
        return std::vector<Tensor>{mul(in[0], in[0])};
      },
      [](const std::vector<Tensor>& saved, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{scale(mul(saved[0], dy[0]), 2.0)};
      });
}

TEST(ApplyFunction, HandWrittenBackwardPassesGradcheck) {
  Context ctx;
  const Tensor x = leaf64(ctx, {3, 4}, 1, "x");
  expect_gradients_match([](const std::vector<Tensor>& in) { return sum(square(in[0])); }, {x});
}

TEST(ApplyFunction, AWrongBackwardFailsGradcheck) {
  Context ctx;
  const Tensor x = leaf64(ctx, {5}, 2, "x");
  auto wrong = [](const std::vector<Tensor>& in) {
    return sum(apply_function1(
        "square_missing_2", {in[0]},
        [](const std::vector<Tensor>& v, std::vector<Tensor>& save) {
          save.push_back(v[0]);
          return std::vector<Tensor>{mul(v[0], v[0])};
        },
        [](const std::vector<Tensor>& saved, const std::vector<Tensor>& dy) {
          return std::vector<Tensor>{mul(saved[0], dy[0])};
        }));
  };
  EXPECT_FALSE(gradcheck(wrong, {x}, testing::gradcheck_tolerances()).ok);
}

// The identity forward (the f operator's) returns its input: the output gets its own place on the
// tape and the input stays a leaf.
TEST(ApplyFunction, IdentityForwardLeavesTheInputALeaf) {
  Context ctx;
  Tensor x = leaf64(ctx, {4}, 3, "x");
  Tensor y = apply_function1(
      "identity", {x}, [](const std::vector<Tensor>& in, std::vector<Tensor>&) { return in; },
      [](const std::vector<Tensor>&, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{scale(dy[0], 3.0)};
      });
  EXPECT_FALSE(x.grad_fn());
  EXPECT_TRUE(y.grad_fn());
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(4, 3.0));
}

TEST(ApplyFunction, SavedTensorsAreCountedUntilBackward) {
  Context ctx;
  MemoryLedger ledger;
  ctx.add_observer(&ledger);
  Tensor x = leaf64(ctx, {16}, 4, "x");
  Tensor loss = sum(square(x));
  EXPECT_EQ(ledger.saved_activation_bytes(), 16 * 8);
  loss.backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0);
}

TEST(ApplyFunction, WrongGradientCountNamesTheOp) {
  Context ctx;
  Tensor x = leaf64(ctx, {2}, 5, "x");
  Tensor y = apply_function1(
      "two_grads", {x},
      [](const std::vector<Tensor>& in, std::vector<Tensor>&) {
        return std::vector<Tensor>{in[0].clone()};
      },
      [](const std::vector<Tensor>&, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{dy[0], dy[0]};
      });
  const std::string m = message_of<ArgumentError>([&] { sum(y).backward(); });
  EXPECT_THAT(m, ::testing::HasSubstr("op 'two_grads'"));
  EXPECT_THAT(m, ::testing::HasSubstr("backward returned 2 gradients, expected one per input (1)"));
}

TEST(ApplyFunction, NoOutputsIsAnArgumentError) {
  Context ctx;
  const Tensor x = const64(ctx, {2}, 6);
  const std::string m = message_of<ArgumentError>([&] {
    apply_function(
        "nothing", {x},
        [](const std::vector<Tensor>&, std::vector<Tensor>&) { return std::vector<Tensor>{}; },
        [](const std::vector<Tensor>&, const std::vector<Tensor>&) {
          return std::vector<Tensor>{};
        });
  });
  EXPECT_THAT(m, ::testing::HasSubstr("op 'nothing'"));
  EXPECT_THAT(m, ::testing::HasSubstr("forward returned no outputs"));
}

}  // namespace
}  // namespace shardscope
