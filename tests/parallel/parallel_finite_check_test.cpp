// The numerical guard in a parallel run on threads: a NaN in one rank's shard is reported by that
// rank at the first op that reads it (op, scope, layer, phase, step, rank), and the other ranks
// fail with an error naming it instead of waiting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "autograd/errors.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

LayerRunSpec small_spec(ParallelMode mode) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 2;
  spec.layer.hidden = 16;
  spec.layer.heads = 4;
  spec.layer.mode = mode;
  spec.layer.degree = 2;
  spec.steps = 2;
  spec.check_finite = true;
  return spec;
}

// Writes NaN into element `index` of the full tensor `name` as the run loads its data.
void plant_nan(LayerRunSpec& spec, std::string name, std::int64_t index) {
  spec.load = [name = std::move(name), index](const std::string& loaded, const Tensor& full) {
    if (loaded == name) full.data<float>()[index] = std::numeric_limits<float>::quiet_NaN();
  };
}

// Runs the spec on threads and returns the SpmdError it must end with.
std::vector<SpmdError::RankError> failures(const LayerRunSpec& spec) {
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(10000);
  try {
    run_spmd(spec.layer.degree, options, [&](RankEnv& env) { run_layer_rank(env, spec); });
  } catch (const SpmdError& e) {
    return e.errors();
  }
  ADD_FAILURE() << "the run ended without an error";
  return {};
}

// tp-sp shards the input by sequence: s = 8 over 2 ranks puts position 5 on rank 1 (its row 1).
TEST(ParallelFiniteCheck, ANaNInOneRanksInputShardIsNamedByThatRank) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp);
  const std::int64_t row = 5 * spec.layer.batch * spec.layer.hidden;  // [5, 0, 0] of [s, b, h]
  plant_nan(spec, "input", row + 3);
  const std::vector<SpmdError::RankError> errors = failures(spec);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].rank, 1);  // the cause comes first
  EXPECT_THAT(errors[0].message,
              AllOf(HasSubstr("op 'layernorm' in ln1 (layer 0, forward, rank 1)"),
                    HasSubstr("output 0 f32[4, 2, 16] is not finite at step 0"),
                    HasSubstr("16 of 128 elements (16 NaN, 0 Inf), the first at [1, 0, 0]"),
                    HasSubstr("input 0 input f32[4, 2, 16] already held 1 NaN")));
  EXPECT_EQ(errors[1].rank, 0);
  EXPECT_THAT(errors[1].message, HasSubstr("rank 1 failed: op 'layernorm' in ln1"));
}

// tp shards attn.qkv.weight [h, 3h] by columns: the last column is rank 1's. The input is
// replicated and finite, so rank 1's QKV product is the first non-finite tensor.
TEST(ParallelFiniteCheck, ANaNInOneRanksWeightShardIsNamedAtTheOpThatUsesIt) {
  LayerRunSpec spec = small_spec(ParallelMode::tp);
  const std::int64_t h = spec.layer.hidden;
  plant_nan(spec, "attn.qkv.weight", 3 * h - 1);  // [0, 3h - 1]
  const std::vector<SpmdError::RankError> errors = failures(spec);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].rank, 1);
  EXPECT_THAT(errors[0].message,
              AllOf(HasSubstr("in attn.qkv (layer 0, forward, rank 1)"),
                    HasSubstr("is not finite at step 0"), HasSubstr("already held 1 NaN")));
  EXPECT_THAT(errors[1].message, HasSubstr("rank 1 failed"));
}

// Off (the default), the same NaN flows through the ops unchecked, and the run ends at the loss,
// naming the step on every rank; no loss is reported as a number.
TEST(ParallelFiniteCheck, OffTheNaNReachesTheLossWhichEndsTheRunNamingTheStep) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp);
  spec.check_finite = false;
  plant_nan(spec, "input", 5 * spec.layer.batch * spec.layer.hidden);
  const std::vector<SpmdError::RankError> errors = failures(spec);
  ASSERT_EQ(errors.size(), 2u);
  for (const SpmdError::RankError& e : errors) {
    EXPECT_THAT(e.message, HasSubstr("step 0: the loss is not finite (nan, rank " +
                                     std::to_string(e.rank) + ")"));
    EXPECT_THAT(e.message, HasSubstr("LayerRunSpec::check_finite"));
  }
}

// A loss that overflows later (a learning rate of 1e30 at step 1), in the single layer and in tp,
// where the check against the reference and of the replicated parameters never gets to blame it.
TEST(ParallelFiniteCheck, ALossThatOverflowsEndsTheRunAtItsStep) {
  for (const ParallelMode mode : {ParallelMode::single, ParallelMode::tp}) {
    LayerRunSpec spec = small_spec(mode);
    spec.check_finite = false;
    spec.learning_rate = 1e30;
    spec.steps = 3;
    if (mode == ParallelMode::single) spec.layer.degree = 1;
    const std::vector<SpmdError::RankError> errors = failures(spec);
    ASSERT_EQ(errors.size(), static_cast<std::size_t>(spec.layer.degree)) << mode_name(mode);
    EXPECT_THAT(errors[0].message, HasSubstr("step 1: the loss is not finite")) << mode_name(mode);
  }
}

// A replicated parameter that holds NaN is not blamed on a missing gradient all-reduce.
TEST(ParallelFiniteCheck, AReplicatedParameterHoldingNaNIsNotBlamedOnAnAllReduce) {
  LayerRunSpec spec = small_spec(ParallelMode::tp);
  std::vector<std::string> messages(2);
  run_spmd(2, SpmdOptions{}, [&](RankEnv& env) {
    const LayerWeights full = make_layer_weights(env.ctx, spec.layer);
    ParallelTransformerLayer layer(spec.layer, env.group, full);
    for (const ShardedParameter& p : layer.parameters()) {
      if (p.name == "ln2.bias") p.local.data<float>()[2] = std::numeric_limits<float>::infinity();
    }
    try {
      layer.check_replicated();
    } catch (const Error& e) {
      messages[static_cast<std::size_t>(env.rank)] = e.what();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_THAT(m, HasSubstr("replicated parameter ln2.bias holds inf"));
    EXPECT_THAT(m, HasSubstr("overflowed or became NaN, not a missing all-reduce"));
    EXPECT_THAT(m, ::testing::Not(HasSubstr("is a gradient all-reduce missing")));
  }
}

}  // namespace
}  // namespace shardscope
