// The numerical guard in a parallel run on threads: a NaN in one rank's shard is reported by that
// rank at the first op that reads it (op, scope, layer, phase, step, rank), and the other ranks
// fail with an error naming it instead of waiting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "autograd/errors.h"
#include "parallel/layer_run.h"

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

// Off (the default), the same NaN flows through the run without an error.
TEST(ParallelFiniteCheck, OffTheNaNGoesThrough) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp);
  spec.check_finite = false;
  spec.check = false;  // the reference check would report the NaN as a failed comparison
  plant_nan(spec, "input", 5 * spec.layer.batch * spec.layer.hidden);
  SpmdOptions options;
  std::vector<double> losses;
  run_spmd(2, options, [&](RankEnv& env) {
    const RankRun run = run_layer_rank(env, spec);
    if (env.rank == 0) losses.push_back(run.steps[0].loss);
  });
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_TRUE(std::isnan(losses[0]));
}

}  // namespace
}  // namespace shardscope
