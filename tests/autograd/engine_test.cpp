// The backward engine: accumulation, no_grad, release of saved tensors, node order, and the
// context state (phase, grad mode, scope stack) around backward.
#include <string>

#include "autograd/backend.h"
#include "autograd/observer.h"
#include "autograd/ops/record.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using testing::expect_near_all;
using ::testing::HasSubstr;
using testing::leaf64;

// Records the backward nodes as they run, and the saved bytes kept and released.
class BackwardLog : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override {
    if (e.site.phase != Phase::backward) return;
    ops.emplace_back(e.site.op);
    seqs.push_back(e.seq);
    scopes.emplace_back(e.site.scope);
  }
  void on_save(const SaveEvent& e) override { saved_bytes += e.bytes; }
  void on_release(const SaveEvent& e) override { released_bytes += e.bytes; }

  std::vector<std::string> ops;
  std::vector<std::uint64_t> seqs;
  std::vector<std::string> scopes;
  std::size_t saved_bytes = 0;
  std::size_t released_bytes = 0;
};

class Engine : public ::testing::Test {
 protected:
  Context ctx;
  Tensor x = leaf64(ctx, {2, 3}, 1, "x");
  std::vector<double> xv = x.to_vector();
};

TEST_F(Engine, TensorUsedTwiceAccumulatesBothGradients) {
  sum(add(mul(x, x), x)).backward();  // d/dx (x^2 + x) = 2x + 1
  std::vector<double> want;
  for (double v : xv) want.push_back(2 * v + 1);
  expect_near_all(x.grad().to_vector(), want);
}

TEST_F(Engine, IntermediateUsedTwiceAccumulatesBeforeItsNodeRuns) {
  const Tensor h = scale(x, 3.0);
  sum(add(mul(h, h), h)).backward();  // d/dx (9x^2 + 3x) = 18x + 3
  std::vector<double> want;
  for (double v : xv) want.push_back(18 * v + 3);
  expect_near_all(x.grad().to_vector(), want);
}

TEST_F(Engine, LeafGradAccumulatesOverTwoBackwards) {
  sum(scale(x, 2.0)).backward();
  sum(scale(x, 3.0)).backward();
  expect_near_all(x.grad().to_vector(), std::vector<double>(6, 5.0));
  EXPECT_EQ(x.grad().storage()->category(), MemoryCategory::gradient);
  x.zero_grad();
  sum(scale(x, 3.0)).backward();
  expect_near_all(x.grad().to_vector(), std::vector<double>(6, 3.0));
}

// The gradients flowing out of each backward node: their storages' ids, and, when `keep`, the
// tensors themselves (which then hold them).
class GradientsOut : public Observer {
 public:
  explicit GradientsOut(bool keep) : keep_(keep) {}
  void on_op_end(const OpEvent& e) override {
    if (e.site.phase != Phase::backward || e.output_tensors == nullptr) return;
    for (const Tensor& g : *e.output_tensors) {
      if (!g.defined()) continue;
      ids.push_back(g.storage()->id());
      if (keep_) kept.push_back(g);
    }
  }
  std::vector<std::uint64_t> ids;
  std::vector<Tensor> kept;

 private:
  bool keep_;
};

TEST_F(Engine, ALeafTakesAGradientNothingElseHolds) {
  GradientsOut out(false);
  {
    const ObserverGuard watch(ctx, out);
    sum(scale(x, 2.0)).backward();
  }
  ASSERT_EQ(out.ids.size(), 2u);  // sum's gradient, then scale's (x's)
  EXPECT_EQ(x.grad().storage()->id(), out.ids.back())
      << "the leaf's gradient is a copy of scale's, though nothing else held that";
  EXPECT_EQ(x.grad().storage()->category(), MemoryCategory::gradient);
  expect_near_all(x.grad().to_vector(), std::vector<double>(6, 2.0));
}

TEST_F(Engine, ALeafCopiesAGradientSomethingElseHolds) {
  GradientsOut out(true);
  {
    const ObserverGuard watch(ctx, out);
    sum(scale(x, 2.0)).backward();
  }
  ASSERT_EQ(out.kept.size(), 2u);
  const Tensor& held = out.kept.back();
  EXPECT_NE(x.grad().storage()->id(), held.storage()->id())
      << "the leaf took a gradient that an observer still holds";
  EXPECT_EQ(held.storage()->category(), MemoryCategory::workspace);
  Tensor overwritten = held;
  ctx.backend().fill(overwritten, -1.0);
  expect_near_all(x.grad().to_vector(), std::vector<double>(6, 2.0));
}

TEST_F(Engine, ExplicitGradientSeedsANonScalarOutput) {
  const Tensor g = Tensor::from_vector(ctx, {2, 3}, {1, 2, 3, 4, 5, 6}, DType::f64);
  scale(x, 3.0).backward(g);
  expect_near_all(x.grad().to_vector(), {3, 6, 9, 12, 15, 18});
  x.zero_grad();
  x.backward(g);  // a leaf root takes the seed itself
  expect_near_all(x.grad().to_vector(), {1, 2, 3, 4, 5, 6});
}

TEST_F(Engine, InputsWithoutRequiresGradGetNoGradient) {
  const Tensor w = testing::const64(ctx, {3, 2}, 2);
  sum(matmul(x, w)).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST_F(Engine, NoGradRecordsNothing) {
  {
    NoGradGuard off(ctx);
    const Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    {
      NoGradGuard nested(ctx);
      EXPECT_FALSE(ctx.grad_enabled());
    }
    EXPECT_FALSE(ctx.grad_enabled());  // the nested guard restores "off", not "on"
    EXPECT_THROW(sum(y).backward(), StateError);
  }
  EXPECT_TRUE(ctx.grad_enabled());
  EXPECT_TRUE(mul(x, x).requires_grad());
}

TEST_F(Engine, SavedTensorsAreReleasedAfterBackward) {
  BackwardLog log;
  ObserverGuard watch(ctx, log);
  const Tensor h = gelu(scale(x, 2.0));
  const std::shared_ptr<Node> node = h.grad_fn();
  ASSERT_TRUE(node);
  EXPECT_EQ(node->op(), "gelu");
  EXPECT_EQ(node->saved_count(), 1u);
  EXPECT_FALSE(node->released());
  const Tensor loss = mean(h);
  loss.backward();
  EXPECT_TRUE(node->released());
  EXPECT_EQ(node->saved_count(), 0u);
  EXPECT_GT(log.saved_bytes, 0u);
  EXPECT_EQ(log.released_bytes, log.saved_bytes);
  const std::string msg = testing::message_of<StateError>([&] { node->saved(0); });
  EXPECT_THAT(msg, HasSubstr("op 'gelu'"));
  EXPECT_THAT(msg, HasSubstr("released"));
}

TEST_F(Engine, SecondBackwardThroughTheSameGraphThrowsNamingTheOp) {
  const Tensor h = gelu(x);
  const Tensor loss = sum(h);
  loss.backward();
  const std::vector<double> first = x.grad().to_vector();
  std::string msg = testing::message_of<StateError>([&] { loss.backward(); });
  EXPECT_THAT(msg, HasSubstr("op 'sum'"));
  EXPECT_THAT(msg, HasSubstr("second time"));
  EXPECT_EQ(x.grad().to_vector(), first);  // nothing was accumulated
  // A new root over the old, released part of the graph fails at the first released node.
  msg = testing::message_of<StateError>([&] { sum(scale(h, 2.0)).backward(); });
  EXPECT_THAT(msg, HasSubstr("op 'gelu'"));
}

TEST_F(Engine, NodesRunInReverseCreationOrder) {
  // A diamond: h feeds two branches, so h's node must wait for both.
  BackwardLog log;
  ObserverGuard watch(ctx, log);
  const Tensor w = leaf64(ctx, {2, 3}, 3, "w");
  const Tensor h = gelu(x);
  const Tensor branch_a = mul(h, w);  // named: argument evaluation order is unspecified
  const Tensor branch_b = scale(h, 3.0);
  const Tensor loss = sum(add(branch_a, branch_b));
  loss.backward();
  EXPECT_THAT(log.ops, ElementsAre("sum", "add", "scale", "mul", "gelu"));
  EXPECT_EQ(log.seqs.back(), h.grad_fn()->seq());
  for (std::size_t i = 1; i < log.seqs.size(); ++i) EXPECT_GT(log.seqs[i - 1], log.seqs[i]);
  // And h's gradient is the sum of both branches: dloss/dx = gelu'(x) (w + 3).
  Tensor x2 = x.detach();
  x2.set_requires_grad(true);
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor hh = gelu(in[0]);
        return add(mul(hh, in[1]), scale(hh, 3.0));
      },
      {x2, w});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST_F(Engine, BackwardNodesRunInTheirForwardScope) {
  BackwardLog log;
  ObserverGuard watch(ctx, log);
  Tensor loss;
  {
    ScopeGuard attn(ctx, "attn");
    const Tensor h = gelu(x);
    ScopeGuard out(ctx, "out");
    loss = sum(h);
  }
  loss.backward();
  EXPECT_THAT(log.scopes, ElementsAre("attn.out", "attn"));
}

TEST_F(Engine, BackwardRestoresPhaseGradModeLayerAndScopeStack) {
  const Tensor loss = sum(gelu(x));
  {
    ScopeGuard step(ctx, "step");
    LayerGuard layer(ctx, 2);
    {
      ScopeGuard inner(ctx, "inner");
      loss.backward();
      EXPECT_EQ(ctx.scope(), "step.inner");
      EXPECT_EQ(ctx.phase(), Phase::forward);
      EXPECT_TRUE(ctx.grad_enabled());
      EXPECT_EQ(ctx.layer(), 2);
    }
    EXPECT_EQ(ctx.scope(), "step");  // the enclosing guards still pop what they pushed
  }
  EXPECT_EQ(ctx.scope(), "");
  EXPECT_EQ(ctx.layer(), -1);
}

}  // namespace
}  // namespace shardscope

namespace shardscope {
namespace {

// A chain of 300k ops is dropped without recursing once per node (which would overflow
// the stack), and backward through a long chain works without recursion as well.
TEST(EngineLongChains, AreDestroyedAndDifferentiatedIteratively) {
  Context ctx;
  Tensor x = Tensor::full(ctx, {1}, 1.0, DType::f64).set_requires_grad(true);
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = scale(y, 1.0);
  }
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = scale(y, 1.0);
  y.backward();
  EXPECT_EQ(x.grad().item(), 1.0);
}

}  // namespace
}  // namespace shardscope

namespace shardscope {
namespace {

// An op whose backward gives its input no gradient (a stop-gradient), built with OpRecord.
Tensor stop_gradient(const Tensor& x) {
  ops_detail::OpRecord r("stop_gradient", {x});
  Tensor y = x.clone();
  if (r.needs_grad()) {
    r.record([](Node&, const std::vector<Tensor>&) { return std::vector<Tensor>{Tensor()}; });
  }
  return r.finish(y);
}

// A node that receives no gradient is skipped: it does not run, its saved tensors stay for a
// later backward that does reach it, and its inputs get no gradient from this one.
TEST(EngineSkips, NodesThatReceiveNoGradient) {
  Context ctx;
  Tensor w = Tensor::parameter(Tensor::randn(ctx, {3}, 1, 1.0, DType::f64), "w");
  Tensor z = gelu(w);
  sum(stop_gradient(z)).backward();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(z.grad_fn()->released());
  sum(z).backward();  // the gelu node still has its input
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(z.grad_fn()->released());
}

TEST(EngineSkips, MseLossGivesTheTargetItsGradient) {
  Context ctx;
  Tensor pred = Tensor::from_vector(ctx, {2}, {1.0, 2.0}, DType::f64).set_requires_grad(true);
  Tensor target = Tensor::from_vector(ctx, {2}, {0.0, 4.0}, DType::f64).set_requires_grad(true);
  mse_loss(pred, target).backward();
  // L = ((1-0)^2 + (2-4)^2) / 2; dL/dpred = (pred - target); dL/dtarget = -(pred - target)
  EXPECT_EQ(pred.grad().to_vector(), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(target.grad().to_vector(), (std::vector<double>{-1.0, 2.0}));
}

TEST(EngineSkips, ParametersDoNotAliasTheirInitialValues) {
  Context ctx;
  Tensor init = Tensor::full(ctx, {2}, 1.0);
  Tensor a = Tensor::parameter(init, "a");
  Tensor b = Tensor::parameter(init, "b");
  EXPECT_NE(a.raw_data(), b.raw_data());
  EXPECT_NE(a.raw_data(), init.raw_data());
  sum(a).backward();
  ctx.backend().add(a, a.grad(), 1.0, -0.5, a);  // an SGD step on a alone
  EXPECT_EQ(a.to_vector(), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(b.to_vector(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(init.to_vector(), (std::vector<double>{1.0, 1.0}));
}

}  // namespace
}  // namespace shardscope
