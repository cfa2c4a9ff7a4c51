// Context state that a layer changes around its own collectives (the op they are named by, the
// phase) comes back when a collective throws: CurrentOpGuard, and the parallel layer's gradient
// reduction when its peer fails mid-way.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "autograd/context.h"
#include "autograd/ops.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

TEST(CurrentOpGuard, RestoresTheOpAndPhaseWhenTheWorkThrows) {
  Context ctx;
  ctx.set_current_op("matmul");
  ctx.set_phase(Phase::forward);
  try {
    CurrentOpGuard op(ctx, "reduce_parameter_gradients", Phase::backward);
    EXPECT_EQ(ctx.current_op(), "reduce_parameter_gradients");
    EXPECT_EQ(ctx.phase(), Phase::backward);
    throw std::runtime_error("the collective failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(ctx.current_op(), "matmul");
  EXPECT_EQ(ctx.phase(), Phase::forward);
}

// Rank 1 fails before the gradient all-reduces; rank 0's all-reduce throws, and its context is
// left as it was before the reduction (forward phase, no current op), not named after it.
TEST(CurrentOpGuard, AFailedGradientReductionLeavesTheContextAsItWas) {
  LayerConfig c;
  c.mode = ParallelMode::tp_sp;  // replicated parameters with partial gradients to all-reduce
  c.degree = 2;
  c.seq = 4;
  c.batch = 1;
  c.hidden = 8;
  c.heads = 2;
  std::atomic<bool> threw{false}, restored{false};
  EXPECT_THROW(
      run_spmd(2, SpmdOptions{},
               [&](RankEnv& env) {
                 const LayerWeights full = make_layer_weights(env.ctx, c);
                 ParallelTransformerLayer layer(c, env.group, full);
                 const Tensor x = Tensor::randn(env.ctx, {2, 1, 8}, 7);
                 sum(layer.forward({x, Placement::shard(0), Shape{4, 1, 8}}).local).backward();
                 if (env.rank == 1) throw std::runtime_error("rank 1 gives up");
                 const Phase phase = env.ctx.phase();
                 const std::string op = env.ctx.current_op();
                 try {
                   layer.reduce_parameter_gradients();
                 } catch (...) {
                   threw = true;
                   restored = env.ctx.phase() == phase && env.ctx.current_op() == op;
                   throw;
                 }
               }),
      std::exception);
  EXPECT_TRUE(threw) << "rank 0's all-reduce did not fail";
  EXPECT_TRUE(restored) << "rank 0's context kept the reduction's op or phase";
}

}  // namespace
}  // namespace shardscope
