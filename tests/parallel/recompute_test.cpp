// Activation recomputation (LayerConfig::recompute) in every mode: selective (the attention core
// recomputed from Q, K and V) and full (the layer recomputed from its input) pass the reference
// check at degrees 1 to 4 with their saved activations and collectives equal to the models, keep
// what Korthikanti et al. 2022 (Table 2) say they keep, and give bitwise the run without
// recomputation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "tests/parallel/run_testing.h"

namespace shardscope {
namespace {

using RecomputeCase = std::tuple<ParallelMode, int, Recompute>;

class Recomputation : public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(Recomputation, MatchesTheSingleDeviceLayerAndTheModels) {
  const auto [mode, degree, recompute] = GetParam();
  LayerRunSpec spec = small_spec(mode, degree, 0.1, DType::f32);
  spec.layer.recompute = recompute;
  spec.steps = 2;
  for (const LayerConfig& layer : {spec.layer, llama_layer(spec.layer, 6)}) {
    LayerRunSpec s = spec;
    s.layer = layer;
    const std::int64_t g = layer.kv_heads_count();
    const std::string what =
        layer.shape_text() + ", " + mode_name(mode) + " t=" + std::to_string(degree);
    if (g % degree != 0 && degree % g != 0) {
      EXPECT_THROW(s.layer.validate(), ConfigError) << what;
      continue;
    }
    expect_checked_and_modelled(s, run_all_ranks(s), what);
  }
}

std::string recompute_case_name(const ::testing::TestParamInfo<RecomputeCase>& info) {
  const auto [mode, degree, recompute] = info.param;
  return mode_test_name(mode) + "_t" + std::to_string(degree) + "_" + recompute_name(recompute);
}

INSTANTIATE_TEST_SUITE_P(AllModes, Recomputation,
                         ::testing::Combine(::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                                              ParallelMode::ulysses),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Recompute::selective,
                                                              Recompute::full)),
                         recompute_case_name);

// Every tensor of step 0 (a dump) on every rank, and each step's loss.
struct RunValues {
  std::map<std::string, std::vector<double>> tensors;  // "rank 0: attn.qkv.weight.grad"
  std::vector<double> losses;
};

RunValues values_of(LayerRunSpec spec) {
  RunValues out;
  std::mutex mutex;
  spec.check = false;
  spec.dump = [&](RankEnv& env, const std::vector<RankTensor>& tensors) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const RankTensor& t : tensors) {
      out.tensors["rank " + std::to_string(env.rank) + ": " + t.name] = t.local.to_vector();
    }
  };
  for (const RankRun& run : run_all_ranks(spec)) {
    for (const StepRecord& step : run.steps) out.losses.push_back(step.loss);
  }
  return out;
}

// The recomputed forward makes the same values (the dropout masks come from the step's streams),
// and backward runs the same ops on them: every output, gradient and loss is bitwise the same.
TEST(Recomputation, GivesBitwiseTheRunWithoutIt) {
  for (const ParallelMode mode :
       {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const int degree = mode == ParallelMode::single ? 1 : 2;
    LayerRunSpec spec = small_spec(mode, degree, 0.1, DType::f32);
    spec.steps = 3;
    spec.layer.layers = 2;
    const RunValues plain = values_of(spec);
    for (const Recompute r : {Recompute::selective, Recompute::full}) {
      spec.layer.recompute = r;
      const RunValues again = values_of(spec);
      const std::string what = std::string(mode_name(mode)) + " " + recompute_name(r);
      ASSERT_EQ(again.tensors.size(), plain.tensors.size()) << what;
      for (const auto& [name, values] : plain.tensors) {
        EXPECT_EQ(again.tensors.at(name), values) << what << ": " << name;
      }
      EXPECT_EQ(again.losses, plain.losses) << what;
    }
  }
}

// What each keeps per layer, as Korthikanti et al. 2022 write it (Table 2: selective sbh(10 + 24/t)
// under tp, 34 sbh / t under tp-sp; full 2 sbh, the input), in the model's closed form and bytes.
TEST(Recomputation, KeepsWhatThePaperSays) {
  LayerConfig c;
  c.seq = 64;
  c.batch = 2;
  c.hidden = 128;
  c.heads = 8;
  c.degree = 4;
  const double sbh = 64.0 * 2 * 128, A = 4, M = 1, t = 4;
  auto model = [&](ParallelMode mode, Recompute r) {
    LayerConfig x = c;
    x.mode = mode;
    x.degree = mode == ParallelMode::single ? 1 : 4;
    x.recompute = r;
    return activation_model(x, false);
  };
  const ActivationModel tp = model(ParallelMode::tp, Recompute::selective);
  EXPECT_EQ(tp.formula, "sbh(4A + 2M + 12A/t)");
  EXPECT_EQ(tp.total_bytes, sbh * (4 * A + 2 * M + 12 * A / t));
  const ActivationModel sp = model(ParallelMode::tp_sp, Recompute::selective);
  EXPECT_EQ(sp.formula, "sbh(16A + 2M)/t");
  EXPECT_EQ(sp.total_bytes, sbh * (16 * A + 2 * M) / t);
  EXPECT_EQ(model(ParallelMode::single, Recompute::selective).formula, "sbh(16A + 2M)");
  EXPECT_EQ(model(ParallelMode::tp, Recompute::full).formula, "sbh(A)");
  EXPECT_EQ(model(ParallelMode::tp, Recompute::full).total_bytes, sbh * A);
  EXPECT_EQ(model(ParallelMode::tp_sp, Recompute::full).formula, "sbh(A)/t");
  EXPECT_EQ(model(ParallelMode::ulysses, Recompute::full).total_bytes, sbh * A / t);
  EXPECT_EQ(model(ParallelMode::tp, Recompute::full).extras_bytes, 0);  // norms recomputed too
}

TEST(Recomputation, AnUnknownKindIsRefusedNamingTheField) {
  try {
    parse_recompute("partial");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("expected none, selective or full"));
    EXPECT_EQ(e.fields(), std::vector<std::string>{"recompute"});
  }
}

}  // namespace
}  // namespace shardscope
