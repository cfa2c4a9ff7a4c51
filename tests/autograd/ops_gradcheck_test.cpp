// Finite-difference gradient checks in f64 for every op of autograd/ops.h, including the
// broadcasting, batching, masking and multi-output cases. gradcheck_test.cpp shows that the
// checker catches wrong gradients, so a pass here means something. Every check runs on every
// backend; on cuda the inputs live on the device.
#include "tests/autograd/autograd_testing.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

using testing::leaf64;
using Inputs = std::vector<Tensor>;

using testing::expect_gradients_match;

class OpsGradcheck : public testing::BackendTest {};

TEST_P(OpsGradcheck, MatmulTwoD) {
  const Tensor a = leaf64(ctx, {3, 4}, 1, "a"), b = leaf64(ctx, {4, 5}, 2, "b");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
}

TEST_P(OpsGradcheck, MatmulSharedWeightWithThreeDimInput) {
  const Tensor x = leaf64(ctx, {3, 2, 4}, 3, "x");  // [s, b, h]
  const Tensor w = Tensor::parameter(Tensor::randn(ctx, {4, 5}, 4, 0.5, DType::f64), "w");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1]); }, {x, w});
}

TEST_P(OpsGradcheck, MatmulBatched) {
  const Tensor a = leaf64(ctx, {2, 3, 4, 5}, 5, "a"), b = leaf64(ctx, {2, 3, 5, 2}, 6, "b");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
}

TEST_P(OpsGradcheck, MatmulTransposeBBatchedAndShared) {
  const Tensor q = leaf64(ctx, {2, 3, 4}, 7, "q"), k = leaf64(ctx, {2, 5, 4}, 8, "k");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1], true); }, {q, k});
  const Tensor w = leaf64(ctx, {6, 4}, 9, "w_out_in");  // [n, k]
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1], true); }, {q, w});
}

TEST_P(OpsGradcheck, MatmulScaledInsideTheGemm) {
  // alpha in forward and in both gradients, shared and batched b.
  const Tensor q = leaf64(ctx, {2, 3, 4}, 35, "q"), k = leaf64(ctx, {2, 5, 4}, 36, "k");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1], true, 0.37); }, {q, k});
  const Tensor x = leaf64(ctx, {3, 2, 4}, 37, "x"), w = leaf64(ctx, {4, 5}, 38, "w");
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1], false, -1.5); },
                         {x, w});
  const Tensor q2 = leaf64(ctx, {1, 68, 2}, 39, "q"), k2 = leaf64(ctx, {1, 37, 2}, 40, "k");
  expect_gradients_match(
      [](const Inputs& in) { return causal_matmul(in[0], in[1], true, 34, 0.37); }, {q2, k2});
}

TEST_P(OpsGradcheck, CausalMatmulScoresAndContextAcrossBlocksWithStackedHeads) {
  // 2 heads of 34 queries stacked (blocks of 32 and 2), 37 keys: every piece of causal_matmul.
  const Tensor q = leaf64(ctx, {1, 68, 2}, 31, "q"), k = leaf64(ctx, {1, 37, 2}, 32, "k");
  expect_gradients_match([](const Inputs& in) { return causal_matmul(in[0], in[1], true, 34); },
                         {q, k});
  const Tensor p = leaf64(ctx, {1, 68, 37}, 33, "p"), v = leaf64(ctx, {1, 37, 2}, 34, "v");
  expect_gradients_match([](const Inputs& in) { return causal_matmul(in[0], in[1], false, 34); },
                         {p, v});
}

TEST_P(OpsGradcheck, MatmulOnlyOneOperandRequiresGrad) {
  const Tensor a = leaf64(ctx, {3, 4}, 10, "a");
  const Tensor b = testing::const64(ctx, {4, 2}, 11);
  expect_gradients_match([](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b});
  expect_gradients_match([](const Inputs& in) { return matmul(in[1], in[0], true); },
                         {leaf64(ctx, {2, 4}, 12, "b"), testing::const64(ctx, {3, 4}, 13)});
}

TEST_P(OpsGradcheck, AddSameShapeAndBias) {
  const Tensor a = leaf64(ctx, {3, 2, 4}, 14, "a"), b = leaf64(ctx, {3, 2, 4}, 15, "b");
  const Tensor bias = leaf64(ctx, {4}, 16, "bias"), plane = leaf64(ctx, {2, 4}, 17, "plane");
  const auto f = [](const Inputs& in) { return add(in[0], in[1]); };
  expect_gradients_match(f, {a, b});
  expect_gradients_match(f, {a, bias});
  expect_gradients_match(f, {a, plane});
  expect_gradients_match(f, {a, a});  // the same tensor twice: its gradient is the sum
}

TEST_P(OpsGradcheck, MulSameShapeAndBroadcast) {
  const Tensor a = leaf64(ctx, {3, 2, 4}, 18, "a"), b = leaf64(ctx, {3, 2, 4}, 19, "b");
  const Tensor gain = leaf64(ctx, {4}, 20, "gain");
  const auto f = [](const Inputs& in) { return mul(in[0], in[1]); };
  expect_gradients_match(f, {a, b});
  expect_gradients_match(f, {a, gain});
  expect_gradients_match(f, {a, a});  // x * x
}

TEST_P(OpsGradcheck, Scale) {
  expect_gradients_match([](const Inputs& in) { return scale(in[0], -2.5); },
                         {leaf64(ctx, {2, 3}, 21, "x")});
}

TEST_P(OpsGradcheck, Gelu) {
  // std 2 covers the flat tails and the curved middle of the tanh.
  expect_gradients_match([](const Inputs& in) { return gelu(in[0]); },
                         {leaf64(ctx, {4, 5}, 22, "x", 2.0)});
}

TEST_P(OpsGradcheck, LayerNormInputWeightAndBias) {
  const Tensor x = leaf64(ctx, {3, 2, 6}, 23, "x", 1.5, 0.3);
  const Tensor gamma = leaf64(ctx, {6}, 24, "weight", 0.2, 1.0);
  const Tensor beta = leaf64(ctx, {6}, 25, "bias", 0.2);
  expect_gradients_match([](const Inputs& in) { return layernorm(in[0], in[1], in[2]); },
                         {x, gamma, beta});
}

TEST_P(OpsGradcheck, RmsNormInputAndWeight) {
  // A mean of 0.3 makes a centring bug show (RMSNorm does not subtract the mean).
  const Tensor x = leaf64(ctx, {3, 2, 6}, 45, "x", 1.5, 0.3);
  const Tensor gamma = leaf64(ctx, {6}, 46, "weight", 0.2, 1.0);
  const auto f = [](const Inputs& in) { return rmsnorm(in[0], in[1]); };
  expect_gradients_match(f, {x, gamma});
  // A large eps weighs in the statistics: its place in rstd must be right for dx too.
  expect_gradients_match([](const Inputs& in) { return rmsnorm(in[0], in[1], 0.5); }, {x, gamma});
  // dgamma alone (x a constant) and dx alone.
  expect_gradients_match(f, {testing::const64(ctx, {4, 5}, 47), leaf64(ctx, {5}, 48, "weight")});
  expect_gradients_match(f, {leaf64(ctx, {4, 5}, 49, "x"), testing::const64(ctx, {5}, 50)});
}

TEST_P(OpsGradcheck, Swiglu) {
  // std 2 covers the flat negative tail of silu, its dip and its linear positive side.
  expect_gradients_match([](const Inputs& in) { return swiglu(in[0]); },
                         {leaf64(ctx, {3, 2, 8}, 51, "x", 2.0)});
  // After a nonlinear op that reads the pairs' order: a gate/up mix-up shows in dx.
  expect_gradients_match([](const Inputs& in) { return gelu(swiglu(in[0])); },
                         {leaf64(ctx, {4, 2}, 52, "x", 1.5)});
}

TEST_P(OpsGradcheck, RopeBothSequenceLayouts) {
  // [s, b, h, d] with the positions along dim 0, and [b, h, s, d] along dim 2; base 100 turns the
  // slow pairs by whole radians too, so a wrong sign of any sine shows.
  expect_gradients_match([](const Inputs& in) { return rope(in[0], 0, 3, 100.0); },
                         {leaf64(ctx, {3, 2, 2, 6}, 53, "x_sbhd")});
  expect_gradients_match([](const Inputs& in) { return rope(in[0], 2, 5); },
                         {leaf64(ctx, {2, 2, 3, 6}, 54, "x_bhsd")});
  // After a nonlinear op, so the upstream gradient differs per element.
  expect_gradients_match([](const Inputs& in) { return gelu(rope(in[0], 1, 0, 100.0)); },
                         {leaf64(ctx, {2, 4, 4}, 55, "x", 1.5)});
}

TEST_P(OpsGradcheck, SoftmaxPlainAndCausal) {
  const auto plain = [](const Inputs& in) { return softmax(in[0]); };
  const auto causal = [](const Inputs& in) { return softmax(in[0], true); };
  expect_gradients_match(plain, {leaf64(ctx, {2, 3, 5}, 26, "scores")});
  expect_gradients_match(causal, {leaf64(ctx, {2, 4, 4}, 27, "square")});
  // s_k > s_q: the queries are the last s_q positions of the keys.
  expect_gradients_match(causal, {leaf64(ctx, {2, 3, 5}, 28, "wide")});
}

TEST_P(OpsGradcheck, DropoutWithFixedMaskAndIdentity) {
  DropoutSpec spec;
  spec.p = 0.3;
  spec.seed = 77;
  spec.stream = dropout_stream(0, 1);
  const Tensor x = leaf64(ctx, {4, 2, 6}, 29, "x");
  expect_gradients_match([spec](const Inputs& in) { return dropout(in[0], spec); }, {x});
  DropoutSpec none = spec;
  none.p = 0.0;
  expect_gradients_match([none](const Inputs& in) { return dropout(in[0], none); }, {x});
}

TEST_P(OpsGradcheck, ReshapePermuteTranspose) {
  const Tensor x = leaf64(ctx, {2, 3, 4}, 30, "x");
  // A nonlinear op after the view makes the gradient depend on where each element went.
  expect_gradients_match([](const Inputs& in) { return gelu(reshape(in[0], {4, -1})); }, {x});
  expect_gradients_match([](const Inputs& in) { return gelu(permute(in[0], {2, 0, 1})); }, {x});
  expect_gradients_match([](const Inputs& in) { return gelu(permute(in[0], {-1, 1, 0})); }, {x});
  expect_gradients_match([](const Inputs& in) { return gelu(transpose(in[0], 0, 2)); }, {x});
  expect_gradients_match([](const Inputs& in) { return gelu(transpose(in[0], -1, -2)); }, {x});
}

TEST_P(OpsGradcheck, HeadSplitBothLayouts) {
  // Each part through a different function, so that a gradient written to another part's columns
  // shows.
  auto parts_apart = [](const std::vector<Tensor>& p) {
    return add(add(sum(mul(p[0], p[0])), sum(gelu(p[1]))), scale(sum(p[2]), 3.0));
  };
  expect_gradients_match(
      [&](const Inputs& in) {
        return parts_apart(head_split(in[0], 2, {{0, 2, 6}, {2, 2, 6}, {4, 2, 6}}));
      },
      {leaf64(ctx, {3, 2, 12}, 33, "x")});
  expect_gradients_match(
      [&](const Inputs& in) {
        return parts_apart(head_split(in[0], 2, {{0, 4, 2}, {8, 2, 4}, {10, 2, 4}}));
      },
      {leaf64(ctx, {3, 2, 16}, 34, "x")});
}

TEST_P(OpsGradcheck, SplitUnequalPieces) {
  const Tensor x = leaf64(ctx, {3, 6, 2}, 31, "x");
  // Each piece goes through a different function so a misrouted gradient shows.
  expect_gradients_match(
      [](const Inputs& in) {
        const std::vector<Tensor> p = split(in[0], 1, {1, 3, 2});
        return add(add(sum(mul(p[0], p[0])), sum(gelu(p[1]))), scale(sum(p[2]), 3.0));
      },
      {x});
}

TEST_P(OpsGradcheck, SplitWithAnUnusedPiece) {
  // The engine must feed zeros for the piece nobody used.
  expect_gradients_match(
      [](const Inputs& in) {
        return gelu(split(in[0], -1, {2, 3})[1]);
      },
      {leaf64(ctx, {2, 5}, 32, "x")});
}

TEST_P(OpsGradcheck, ChunkAlongLastDim) {
  expect_gradients_match(
      [](const Inputs& in) {
        const std::vector<Tensor> c = chunk(in[0], -1, 3);
        return add(mul(c[0], c[1]), gelu(c[2]));
      },
      {leaf64(ctx, {2, 3, 6}, 33, "x")});
}

TEST_P(OpsGradcheck, ConcatAlongFirstAndLastDim) {
  const Tensor a = leaf64(ctx, {2, 3}, 34, "a"), b = leaf64(ctx, {1, 3}, 35, "b");
  const Tensor c = testing::const64(ctx, {2, 3}, 36);  // needs no gradient
  expect_gradients_match([](const Inputs& in) { return gelu(concat(in, 0)); }, {a, b, c});
  const Tensor d = leaf64(ctx, {2, 4}, 37, "d");
  expect_gradients_match([](const Inputs& in) { return gelu(concat(in, -1)); }, {a, d, c});
}

TEST_P(OpsGradcheck, SumAndMean) {
  const Tensor x = leaf64(ctx, {3, 4}, 38, "x");
  expect_gradients_match([](const Inputs& in) { return sum(in[0]); }, {x});
  expect_gradients_match([](const Inputs& in) { return mean(in[0]); }, {x});
  expect_gradients_match([](const Inputs& in) { return mean(gelu(in[0])); }, {x});
}

TEST_P(OpsGradcheck, MseLossWithRespectToPrediction) {
  const Tensor pred = leaf64(ctx, {3, 4}, 39, "pred");
  const Tensor target = testing::const64(ctx, {3, 4}, 40);  // takes no gradient by design
  expect_gradients_match([](const Inputs& in) { return mse_loss(in[0], in[1]); }, {pred, target});
}

TEST_P(OpsGradcheck, CrossEntropy) {
  const std::vector<std::int64_t> targets{2, 0, 4, 4};
  expect_gradients_match([targets](const Inputs& in) { return cross_entropy(in[0], targets); },
                         {leaf64(ctx, {4, 5}, 41, "logits", 2.0)});
}

TEST_P(OpsGradcheck, CausalAttentionChain) {
  // softmax(q k^T / sqrt(d), causal) v over [b*a, s, d]: many nodes, tensors used twice.
  const Tensor x = leaf64(ctx, {2, 4, 3}, 42, "x");
  const Tensor wq = leaf64(ctx, {3, 3}, 43, "wq"), wv = leaf64(ctx, {3, 3}, 44, "wv");
  expect_gradients_match(
      [](const Inputs& in) {
        const Tensor q = matmul(in[0], in[1]);
        const Tensor v = matmul(in[0], in[2]);
        const Tensor p = softmax(scale(matmul(q, in[0], true), 0.577), true);
        return matmul(p, v);
      },
      {x, wq, wv});
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsGradcheck, testing::all_backends(), testing::BackendName());

}  // namespace
}  // namespace shardscope
