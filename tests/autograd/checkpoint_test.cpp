// checkpoint: the forward keeps only the inputs; backward recomputes the function (its ops in
// phase forward, in their own scopes) and its gradients are bitwise those of the plain function.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/flop_counter.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

// gelu(x w) with a dropout, then times x: saves x, w's product input, gelu's input, the mask and
// both factors of the product.
Tensor block(const Tensor& x, const Tensor& w) {
  Context& ctx = x.ctx();
  ScopeGuard scope(ctx, "block");
  DropoutSpec spec;
  spec.p = 0.25;
  spec.seed = 11;
  spec.stream = dropout_stream(0, 1);
  spec.step = static_cast<std::uint32_t>(ctx.step());
  return mul(dropout(gelu(matmul(x, w)), spec), x);
}

struct Grads {
  std::vector<double> y, dx, dw;
};

Grads run(bool recompute, MemoryLedger* ledger = nullptr, std::size_t* saved = nullptr,
          std::vector<MemoryLedger::SavedSite>* sites = nullptr) {
  Context ctx(0);
  ctx.set_step(3);
  std::unique_ptr<ObserverGuard> attach;
  if (ledger) attach = std::make_unique<ObserverGuard>(ctx, *ledger);
  Tensor x = Tensor::randn(ctx, Shape{6, 8}, 1, 1.0, DType::f64).set_requires_grad(true);
  Tensor w = Tensor::parameter(Tensor::randn(ctx, Shape{8, 8}, 2, 0.5, DType::f64), "w");
  Tensor y = recompute ? checkpoint("ckpt", {x},
                                    [&w](const std::vector<Tensor>& in) { return block(in[0], w); })
                       : block(x, w);
  if (saved) *saved = ledger->saved_activation_bytes();
  if (sites) *sites = ledger->saved_by_site();  // before backward releases them
  sum(mul(y, y)).backward();
  return {y.to_vector(), x.grad().to_vector(), w.grad().to_vector()};
}

TEST(Checkpoint, GradientsAreBitwiseThoseOfThePlainFunction) {
  const Grads plain = run(false), again = run(true);
  EXPECT_EQ(plain.y, again.y);
  EXPECT_EQ(plain.dx, again.dx);  // through the recomputed graph, dropout mask included
  EXPECT_EQ(plain.dw, again.dw);  // a parameter fn uses accumulates its gradient
}

TEST(Checkpoint, TheForwardKeepsOnlyTheInputs) {
  MemoryLedger plain_ledger, ledger;
  std::size_t plain = 0, kept = 0;
  run(false, &plain_ledger, &plain);
  std::vector<MemoryLedger::SavedSite> sites;
  run(true, &ledger, &kept, &sites);
  EXPECT_EQ(kept, 6u * 8u * 8u);  // x, f64
  EXPECT_GT(plain, kept);
  bool at_checkpoint = false;
  for (const MemoryLedger::SavedSite& s : sites) {
    if (s.scope == "ckpt" && s.op == "checkpoint") at_checkpoint = s.bytes == kept;
  }
  EXPECT_TRUE(at_checkpoint) << "x is saved by the checkpoint op in its scope";
}

// Records the forward ops (phase, scope) it sees.
struct ForwardOps : Observer {
  std::vector<std::string> seen;
  void on_op_begin(const OpEvent& e) override {
    if (e.site.phase == Phase::forward)
      seen.push_back(std::string(e.site.scope) + "/" + std::string(e.site.op));
  }
};

TEST(Checkpoint, BackwardRecomputesTheOpsInPhaseForwardInTheirScopes) {
  Context ctx(0);
  Tensor x = Tensor::randn(ctx, Shape{4, 8}, 1, 1.0, DType::f64).set_requires_grad(true);
  Tensor w = Tensor::parameter(Tensor::randn(ctx, Shape{8, 8}, 2, 0.5, DType::f64), "w");
  ForwardOps ops;
  ObserverGuard attach(ctx, ops);
  Tensor y =
      checkpoint("ckpt", {x}, [&w](const std::vector<Tensor>& in) { return block(in[0], w); });
  const std::vector<std::string> forward = ops.seen;
  EXPECT_THAT(forward, ::testing::ElementsAre("block/matmul", "block/gelu", "block/dropout",
                                              "block/mul", "ckpt/checkpoint"));
  ops.seen.clear();
  {
    ScopeGuard outer(ctx, "loss");
    y = sum(y);
  }
  ops.seen.clear();
  y.backward();
  // The recomputation: the function's ops again, in phase forward, in their own scopes (not nested
  // in the checkpoint's).
  EXPECT_THAT(ops.seen,
              ::testing::ElementsAre("block/matmul", "block/gelu", "block/dropout", "block/mul"));
  EXPECT_EQ(ctx.phase(), Phase::forward);
  EXPECT_TRUE(ctx.grad_enabled());
  EXPECT_EQ(ctx.scope(), "");
}

// The products' FLOPs: forward once; with the checkpoint, the same again inside backward.
TEST(Checkpoint, GemmFlopsCountsTheForwardAndWhatBackwardRecomputes) {
  for (const bool recompute : {false, true}) {
    Context ctx(0);
    GemmFlops flops;
    ObserverGuard attach(ctx, flops);
    Tensor x = Tensor::randn(ctx, Shape{6, 8}, 1, 1.0, DType::f64).set_requires_grad(true);
    Tensor w = Tensor::parameter(Tensor::randn(ctx, Shape{8, 4}, 2, 0.5, DType::f64), "w");
    auto fn = [&w](const std::vector<Tensor>& in) { return gelu(matmul(in[0], w)); };
    Tensor y = recompute ? checkpoint("ckpt", {x}, fn) : fn({x});
    EXPECT_EQ(flops.forward(), 2.0 * 6 * 8 * 4);  // 2 k per output element
    sum(y).backward();
    EXPECT_EQ(flops.forward(), 2.0 * 6 * 8 * 4);
    EXPECT_EQ(flops.recomputed(), recompute ? 2.0 * 6 * 8 * 4 : 0.0) << recompute;
  }
}

TEST(Checkpoint, AFunctionThatReturnsNothingIsNamed) {
  Context ctx(0);
  Tensor x = Tensor::randn(ctx, Shape{2, 2}, 1, 1.0, DType::f64).set_requires_grad(true);
  try {
    checkpoint("ckpt", {x}, [](const std::vector<Tensor>&) { return Tensor(); });
    FAIL() << "an undefined result accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("op 'checkpoint' in ckpt"));
    EXPECT_THAT(e.what(), HasSubstr("the checkpointed function returned no tensor"));
  }
  EXPECT_THROW(checkpoint("ckpt", {}, [](const std::vector<Tensor>& in) { return in[0]; }),
               ArgumentError);
}

}  // namespace
}  // namespace shardscope
