// The layer in bf16 and f16 (2-byte storage, computed and summed in f32): every mode at degrees 1
// to 4 passes the reference check at the 2-byte tolerance (tensor_compare.h), against the
// single-device layer in its own dtype and (step 0) in f32, with saved
// activations equal to the models to the byte, which with A = 2 and M = 1 are Korthikanti et
// al.'s numbers literally: 34 sbh + 5 as^2b on one device, sbh(10 + 24/t + 5as/(ht)) under tp,
// (34 sbh + 5 as^2b)/t under tp-sp and Ulysses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "autograd/kernels/half.h"
#include "parallel/layers/planted_bug.h"
#include "parallel/run/tensor_compare.h"
#include "tests/parallel/run_testing.h"

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using TwoByteCase = std::tuple<ParallelMode, int, DType>;

class TwoByteTypes : public ::testing::TestWithParam<TwoByteCase> {};

TEST_P(TwoByteTypes, MatchTheSingleDeviceLayerAndTheModels) {
  const auto [mode, degree, dtype] = GetParam();
  LayerRunSpec spec = small_spec(mode, degree, 0.1, dtype);
  spec.steps = 2;
  for (const LayerConfig& layer : {spec.layer, llama_layer(spec.layer, 6)}) {
    LayerRunSpec s = spec;
    s.layer = layer;
    const std::string what = layer.shape_text() + " " + dtype_name(dtype) + ", " + mode_name(mode) +
                             " t=" + std::to_string(degree);
    const std::int64_t g = layer.kv_heads_count();
    if (g % degree != 0 && degree % g != 0) continue;  // refused (tested with the options)
    const std::vector<RankRun> runs = run_all_ranks(s);
    expect_checked_and_modelled(s, runs, what);
    // The norms keep their statistics in f32 (statistics_dtype): 4 bytes a row each.
    EXPECT_GT(runs[0].memory.extras_bytes, 0) << what;
  }
}

std::string two_byte_case_name(const ::testing::TestParamInfo<TwoByteCase>& info) {
  const auto [mode, degree, dtype] = info.param;
  return mode_test_name(mode) + "_t" + std::to_string(degree) + "_" + dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(AllModes, TwoByteTypes,
                         ::testing::Combine(::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                                              ParallelMode::ulysses),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::bf16, DType::f16)),
                         two_byte_case_name);

// The paper's formulas with A = 2 and M = 1, to the byte, measured by a run (s != a, odd s / a).
TEST(TwoByteTypes, SavedBytesAreThePapersNumbersLiterally) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const ParallelMode mode :
         {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
      const int t = mode == ParallelMode::single ? 1 : 4;
      LayerRunSpec spec = small_spec(mode, t, 0.1, dtype);
      spec.layer.seq = 20;  // s = 20, a = 12: s != a
      spec.check = false;
      const double s = 20, b = 2, h = 48, a = 12;
      const double sbh = s * b * h, as2b = a * s * s * b;
      const double want = mode == ParallelMode::single ? 34 * sbh + 5 * as2b
                          : mode == ParallelMode::tp   ? sbh * (10 + 24 / t + 5 * a * s / (h * t))
                                                       : (34 * sbh + 5 * as2b) / t;
      const std::string what = std::string(dtype_name(dtype)) + " " + mode_name(mode);
      for (const RankRun& run : run_all_ranks(spec)) {
        EXPECT_EQ(run.memory.saved_activation_bytes, want) << what;
        EXPECT_EQ(run.memory.formula_bytes, want) << what;
        // LayerNorm's mean and rstd, f32, for the rows the rank normalises, two norms.
        const double rows = mode == ParallelMode::tp ? s * b : s * b / t;
        EXPECT_EQ(run.memory.extras_bytes, 2 * 2 * 4 * rows) << what;
      }
    }
  }
}

TEST(TwoByteTypes, TheToleranceIsEightUnitRoundoffs) {
  EXPECT_EQ(default_tolerance(DType::bf16).rtol, 8 * 0x1p-8);
  EXPECT_EQ(default_tolerance(DType::f16).atol, 8 * 0x1p-11);
  EXPECT_EQ(f32_reference_tolerance(DType::bf16).rtol, 8 * 0x1p-8);
  EXPECT_EQ(f32_reference_tolerance(DType::f16).atol, 8 * 0x1p-11);
  try {
    f32_reference_tolerance(DType::f32);
    ADD_FAILURE() << "an f32 run has no f32 reference of its own";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.fields(), ElementsAre("dtype"));
    EXPECT_THAT(e.what(), HasSubstr("dtype is f32"));
  }
}

// A bug fails the check against f32 too, naming and diagnosing the tensors it breaks: one that
// breaks the forward and one that breaks only a gradient (in 2 bytes neither moves the output
// alone past its bound: docs/derivations.md). f32 and f64 runs have no f32 check.
TEST(TwoByteTypes, TheCheckAgainstF32CatchesBugs) {
  for (const PlantedBug bug : {PlantedBug::qkv_block_split, PlantedBug::replicated_grad_averaged}) {
    LayerRunSpec spec = small_spec(first_mode(bug), 2, 0.1, DType::bf16);
    spec.layer.planted_bug = bug;
    spec.steps = 1;
    const CheckResult wide = run_all_ranks(spec)[0].f32_check;
    ASSERT_TRUE(wide.ran);
    EXPECT_FALSE(wide.passed) << planted_bug_name(bug);
    int failed = 0;
    for (const TensorCheck& t : wide.tensors) {
      if (t.passed) continue;
      ++failed;
      EXPECT_GT(t.worst, 1) << t.name;
      EXPECT_THAT(t.diagnosis, Not(IsEmpty())) << t.name;
    }
    EXPECT_GT(failed, 0) << planted_bug_name(bug);
  }
  EXPECT_FALSE(run_all_ranks(small_spec(ParallelMode::tp, 2, 0.1, DType::f32))[0].f32_check.ran);
}

// The f32 reference starts from the run's own 2-byte values, loaded ones included: an input
// element set to 100 reaches both references, or the f32 one would differ at the output.
TEST(TwoByteTypes, TheF32ReferenceStartsFromTheRunsValues) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp, 2, 0.1, DType::bf16);
  spec.steps = 1;
  spec.load = [](const std::string& name, const Tensor& full) {
    if (name == "input") full.data<kernels::BFloat16>()[5] = kernels::BFloat16(100.0f);
  };
  const std::vector<RankRun> runs = run_all_ranks(spec);
  EXPECT_TRUE(runs[0].check.passed);
  EXPECT_TRUE(runs[0].f32_check.passed);
  EXPECT_EQ(runs[0].f32_check.tensors.size(), runs[0].check.tensors.size());
}

}  // namespace
}  // namespace shardscope
