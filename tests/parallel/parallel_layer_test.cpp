// Every parallel mode against the single-device layer: output, input gradient and every
// parameter gradient (the reference check), saved activation bytes against the mode's formula
// term by term, and the collectives against the communication model, at several degrees, on every
// backend: the ranks are threads over ThreadComm, on the CPU or sharing the CUDA devices with their
// collectives staged through host memory (the cuda instances skip, naming what is missing, without
// a CUDA device; tests/nccl runs the layer over NCCL, a device per rank).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <tuple>

#include "parallel/layers/layer_decl.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/models/comm_model.h"
#include "parallel/models/memory_model.h"
#include "parallel/run/layer_run.h"
#include "tests/backend_testing.h"
#include "tests/parallel/run_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestBackend;

using ModeCase = std::tuple<ParallelMode, int, double, DType, TestBackend>;

// "tp_sp_t2_p10_f32_cuda": the mode, the degree, the dropout in percent, the dtype and the backend.
std::string mode_case_name(const ::testing::TestParamInfo<ModeCase>& info) {
  const auto [mode, degree, dropout, dtype, backend] = info.param;
  return mode_test_name(mode) + "_t" + std::to_string(degree) + "_p" +
         std::to_string(static_cast<int>(std::lround(dropout * 100))) + "_" + dtype_name(dtype) +
         "_" + testing::backend_name(backend);
}

class ParallelModes : public ::testing::TestWithParam<ModeCase> {
 protected:
  void SetUp() override {
    SHARDSCOPE_SKIP_IF_MISSING(
        testing::missing_for_ranks(std::get<4>(GetParam()), std::get<1>(GetParam())));
  }
};

TEST_P(ParallelModes, MatchTheSingleDeviceLayerAndTheModels) {
  const auto [mode, degree, dropout, dtype, backend] = GetParam();
  const LayerRunSpec spec = small_spec(mode, degree, dropout, dtype);
  const std::string what = std::string(mode_name(mode)) + " t=" + std::to_string(degree);
  EXPECT_EQ(decl::parameters(spec.layer).size(), 12u);  // GPT's layer
  expect_checked_and_modelled(spec, run_all_ranks(spec, backend), what);
}

INSTANTIATE_TEST_SUITE_P(AllModes, ParallelModes,
                         ::testing::Combine(::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                                              ParallelMode::ulysses),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(0.0, 0.1),
                                            ::testing::Values(DType::f32, DType::f64),
                                            testing::all_backends()),
                         mode_case_name);

// The runs below go up to degree 4, every rank sharing cuda:0 in the cuda instances.
class ParallelLayerRuns : public ::testing::TestWithParam<TestBackend> {
 protected:
  void SetUp() override { SHARDSCOPE_SKIP_IF_MISSING(testing::missing_for_ranks(GetParam(), 4)); }
};

TEST_P(ParallelLayerRuns, MemoryAndCommunicationMatchTheModelsOnOtherShapes) {
  struct Shape4 {
    std::int64_t s, b, h, a;
  };
  for (const Shape4 shape : {Shape4{8, 3, 32, 4}, Shape4{16, 1, 64, 8}}) {
    for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
      for (int degree : {2, 4}) {
        LayerRunSpec spec = small_spec(mode, degree, 0.1, DType::f32);
        spec.layer.seq = shape.s;
        spec.layer.batch = shape.b;
        spec.layer.hidden = shape.h;
        spec.layer.heads = shape.a;
        spec.check = false;
        const std::string what = std::string(mode_name(mode)) + " t=" + std::to_string(degree) +
                                 " s=" + std::to_string(shape.s) + " b=" + std::to_string(shape.b);
        for (const RankRun& run : run_all_ranks(spec, GetParam())) {
          EXPECT_EQ(run.memory.saved_activation_bytes, run.memory.formula_bytes) << what;
          EXPECT_FALSE(run.check.ran);
          expect_comm_matches_model(run.comm, comm_model(spec.layer, false), what);
        }
      }
    }
  }
}

TEST_P(ParallelLayerRuns, KeepingTheGatheredInputMatchesItsFormula) {
  LayerRunSpec spec = small_spec(ParallelMode::tp_sp, 4, 0.1, DType::f32);
  spec.keep_gathered_input = true;
  const std::vector<RankRun> runs = run_all_ranks(spec, GetParam());
  EXPECT_TRUE(runs[0].check.passed);
  const double A = 4, M = 1, t = 4, sbh = 12.0 * 2 * 48, as2b = 12.0 * 12 * 12 * 2;
  EXPECT_EQ(runs[0].memory.formula_bytes,
            sbh * (2 * A + (14 * A + 2 * M) / t) + as2b * (2 * A + M) / t);
  EXPECT_EQ(runs[0].memory.saved_activation_bytes, runs[0].memory.formula_bytes);
  expect_comm_matches_model(runs[0].comm, comm_model(spec.layer, true), "tp-sp keep");
}

INSTANTIATE_TEST_SUITE_P(Backends, ParallelLayerRuns, testing::all_backends(),
                         testing::BackendName());

// The layer's options (layer_decl.h): RMSNorm, SwiGLU with its own f, no biases, and Llama's
// together with the rotary embedding (Ulysses rotates its sequence shards: global positions), in
// every mode at degrees 1 to 4: the reference check on every tensor, the saved activations equal to
// the model term by term, the collectives equal to the model.
using OptionCase = std::tuple<ParallelMode, int, TestBackend>;

std::vector<std::pair<std::string, LayerConfig>> layer_options(const LayerConfig& base) {
  std::vector<std::pair<std::string, LayerConfig>> out(7, {"", base});
  out[0].first = "llama: rmsnorm, swiglu, no bias, rope";
  out[0].second.norm = Norm::rmsnorm;
  out[0].second.mlp = Mlp::swiglu;
  out[0].second.bias = false;
  out[0].second.rope = true;
  out[1].first = "swiglu, f = 36 (3h/4)";
  out[1].second.mlp = Mlp::swiglu;
  out[1].second.ffn = 36;
  out[2].first = "rmsnorm, random norms";
  out[2].second.norm = Norm::rmsnorm;
  out[2].second.random_norms = true;
  out[3].first = "gelu, no bias, f = 60";
  out[3].second.bias = false;
  out[3].second.ffn = 60;
  // Grouped-query attention at a = 12: g = 12 is MHA; g = 6 and 2 split the key/value heads at
  // t <= g and replicate them where t > g; g = 1 is multi-query (replicated at every t > 1).
  out[4].first = "llama with GQA, g = 6";
  out[4].second = out[0].second;
  out[4].second.kv_heads = 6;
  out[5].first = "GQA, g = 2, biases";
  out[5].second.kv_heads = 2;
  out[6].first = "MQA, g = 1, rope";
  out[6].second.kv_heads = 1;
  out[6].second.rope = true;
  return out;
}

class LayerOptions : public ::testing::TestWithParam<OptionCase> {
 protected:
  void SetUp() override {
    SHARDSCOPE_SKIP_IF_MISSING(
        testing::missing_for_ranks(std::get<2>(GetParam()), std::get<1>(GetParam())));
  }
};

TEST_P(LayerOptions, MatchTheSingleDeviceLayerAndTheModels) {
  const auto [mode, degree, backend] = GetParam();
  for (const auto& [name, layer] : layer_options(small_spec(mode, degree, 0.1, DType::f32).layer)) {
    LayerRunSpec spec = small_spec(mode, degree, 0.1, DType::f32);
    spec.layer = layer;
    const std::string what = name + ", " + mode_name(mode) + " t=" + std::to_string(degree);
    const std::int64_t g = layer.kv_heads_count();
    if (g % degree != 0 && degree % g != 0) {  // refused before any rank starts, naming the rule
      EXPECT_THROW(spec.layer.validate(), ConfigError) << what;
      continue;
    }
    expect_checked_and_modelled(spec, run_all_ranks(spec, backend), what);
  }
}

std::string option_case_name(const ::testing::TestParamInfo<OptionCase>& info) {
  const auto [mode, degree, backend] = info.param;
  return mode_test_name(mode) + "_t" + std::to_string(degree) + "_" +
         testing::backend_name(backend);
}

INSTANTIATE_TEST_SUITE_P(AllModes, LayerOptions,
                         ::testing::Combine(::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                                              ParallelMode::ulysses),
                                            ::testing::Values(1, 2, 3, 4), testing::all_backends()),
                         option_case_name);

// The options' memory and communication models on shapes where s is odd or differs from a and
// from h, in f32 and f64, at every degree 1 to 4 a shape allows (odd s: tp only), with either
// recomputation too: saved activations equal to the formula term by term, to the byte.
TEST(LayerOptionsOnOtherShapes, SavedBytesAndCollectivesEqualTheModels) {
  struct Shape4 {
    std::int64_t s, b, h, a;
  };
  int runs = 0;
  for (const Shape4 shape : {Shape4{7, 3, 48, 12}, Shape4{20, 1, 24, 4}}) {
    LayerConfig base = small_spec(ParallelMode::tp, 1, 0.1, DType::f32).layer;
    base.seq = shape.s;
    base.batch = shape.b;
    base.hidden = shape.h;
    base.heads = shape.a;
    std::vector<std::pair<std::string, LayerConfig>> options = layer_options(base);
    for (const Recompute r : {Recompute::selective, Recompute::full}) {
      options.emplace_back(std::string("llama, recompute ") + recompute_name(r), options[0].second);
      options.back().second.recompute = r;
    }
    for (auto& [name, layer] : options) {
      if (layer.ffn > 0) layer.ffn = 12;  // divisible by every degree
      for (const ParallelMode mode :
           {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
        for (const int degree : {1, 2, 3, 4}) {
          for (const DType dtype : {DType::f32, DType::f64}) {
            LayerRunSpec spec;
            spec.layer = layer;
            spec.layer.mode = mode;
            spec.layer.degree = degree;
            spec.layer.dtype = dtype;
            spec.steps = 1;
            spec.check = false;
            try {
              spec.layer.validate();
            } catch (const ConfigError&) {
              continue;  // this shape cannot run at this degree (refusal tested elsewhere)
            }
            const std::string what = name + ", " + spec.layer.shape_text() + ", " +
                                     mode_name(mode) + " t=" + std::to_string(degree) + " " +
                                     dtype_name(dtype);
            ++runs;
            for (const RankRun& run : run_all_ranks(spec)) {
              EXPECT_EQ(run.memory.saved_activation_bytes, run.memory.formula_bytes) << what;
              EXPECT_EQ(run.memory.extras_bytes, run.memory.formula_extras_bytes) << what;
              for (const MeasuredTerm& term : run.memory.terms) {
                EXPECT_EQ(term.measured_bytes, term.model_bytes) << what << ": " << term.what;
              }
              expect_comm_matches_model(run.comm, comm_model(spec.layer, false), what);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(runs, 200);  // most of the grid runs: the odd s in tp, the other shape everywhere
}

// random_norms starts the LayerNorms away from weight 1 and bias 0 (so their scale and shift act
// on the output), and the parallel layer still matches the single-device one built the same way.
TEST(ParallelLayer, RandomNormsStartAwayFromOneAndZeroAndStillMatch) {
  LayerConfig c;
  c.random_norms = true;
  Context ctx;
  const LayerWeights w = make_layer_weights(ctx, c);
  for (const auto& [name, p] : w.named()) {
    if (name.rfind("ln", 0) != 0) continue;
    const std::vector<double> v = p.to_vector();
    const double start = name.find("weight") != std::string::npos ? 1.0 : 0.0;
    double off = 0;
    for (double x : v) off = std::max(off, std::fabs(x - start));
    EXPECT_GT(off, 0.05) << name << " stayed at " << start;
    EXPECT_LT(off, 0.6) << name;
  }
  for (ParallelMode mode : {ParallelMode::tp_sp, ParallelMode::ulysses}) {
    LayerRunSpec spec = small_spec(mode, 2, 0.1, DType::f32);
    spec.layer.random_norms = true;
    const std::vector<RankRun> runs = run_all_ranks(spec, TestBackend::cpu);
    EXPECT_TRUE(runs[0].check.passed) << mode_name(mode);
  }
}

// The two tests below evaluate formulas and validate configurations on the host: no context, no
// ranks, nothing a backend runs, so they stay plain tests.
TEST(ParallelLayer, FormulasAtThePapersShapesMatchTheirClosedForms) {
  // The per-mode closed forms of docs/derivations.md, evaluated independently of the terms.
  LayerConfig c;
  c.seq = 64;
  c.batch = 2;
  c.hidden = 64;
  c.heads = 8;
  c.degree = 4;
  const double A = 4, M = 1, t = 4, sbh = 64.0 * 2 * 64, as2b = 8.0 * 64 * 64 * 2;
  c.mode = ParallelMode::tp;
  EXPECT_EQ(activation_model(c, false).total_bytes,
            sbh * (4 * A + 2 * M + 12 * A / t) + as2b * (2 * A + M) / t);
  c.mode = ParallelMode::tp_sp;
  EXPECT_EQ(activation_model(c, false).total_bytes,
            (sbh * (16 * A + 2 * M) + as2b * (2 * A + M)) / t);
  c.mode = ParallelMode::ulysses;
  EXPECT_EQ(activation_model(c, false).total_bytes,
            (sbh * (16 * A + 2 * M) + as2b * (2 * A + M)) / t);
}

// The closed form is written from the declared terms: GPT's as the papers print it, and the
// options' with their own coefficients (SwiGLU saves its 2f-wide input; f in its own size where
// it is no multiple of h).
TEST(ParallelLayer, TheFormulaTextIsTheTermsInClosedForm) {
  LayerConfig c;
  c.hidden = 16;
  c.heads = 4;
  c.degree = 2;
  struct Case {
    ParallelMode mode;
    Mlp mlp;
    std::int64_t ffn;
    double dropout;
    const char* formula;
  };
  const Case cases[] = {
      {ParallelMode::single, Mlp::gelu, 0, 0.1, "sbh(16A + 2M) + as^2b(2A + M)"},
      {ParallelMode::tp, Mlp::gelu, 0, 0.1, "sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t"},
      {ParallelMode::tp_sp, Mlp::gelu, 0, 0.1, "(sbh(16A + 2M) + as^2b(2A + M))/t"},
      {ParallelMode::single, Mlp::gelu, 0, 0.0, "sbh(16A) + as^2b(A)"},
      {ParallelMode::single, Mlp::swiglu, 0, 0.1, "sbh(20A + 2M) + as^2b(2A + M)"},
      {ParallelMode::tp, Mlp::swiglu, 24, 0.1, "sbh(4A + 2M + 4A/t) + sbf(3A)/t + as^2b(2A + M)/t"},
      {ParallelMode::ulysses, Mlp::swiglu, 24, 0.0, "(sbh(8A) + sbf(3A) + as^2b(A))/t"},
  };
  for (const Case& k : cases) {
    c.mode = k.mode;
    c.degree = k.mode == ParallelMode::single ? 1 : 2;
    c.mlp = k.mlp;
    c.ffn = k.ffn;
    c.dropout = k.dropout;
    EXPECT_EQ(activation_model(c, false).formula, k.formula)
        << mode_name(k.mode) << " " << mlp_name(k.mlp) << " f=" << c.ffn_width();
  }
  // Grouped-query attention, g = 2 at a = 4 (g d = 8, no multiple of h = 16): keys and values in
  // their own size, split over t where t <= g and over g where t > g.
  c.mlp = Mlp::gelu;
  c.ffn = 0;
  c.dropout = 0.1;
  c.kv_heads = 2;
  c.mode = ParallelMode::single;
  c.degree = 1;
  EXPECT_EQ(activation_model(c, false).formula, "sbh(14A + 2M) + sbgd(2A) + as^2b(2A + M)");
  c.mode = ParallelMode::tp;
  c.degree = 4;
  const ActivationModel gqa = activation_model(c, false);
  EXPECT_EQ(gqa.formula, "sbh(4A + 2M + 10A/t) + sbgd(2A)/g + as^2b(2A + M)/t");
  EXPECT_EQ(gqa.terms[2].what, "QK^T: Q and K");
  EXPECT_EQ(gqa.terms[2].formula, "(A sbh/t + A sbgd/g)");
  c.degree = 2;
  EXPECT_EQ(activation_model(c, false).terms[2].formula, "(A sbh + A sbgd)/t");
  c.kv_heads = 0;
  // tp-sp keeping the gathered inputs: the two linear inputs stay whole.
  c.mode = ParallelMode::tp_sp;
  c.mlp = Mlp::gelu;
  c.ffn = 0;
  c.dropout = 0.1;
  EXPECT_EQ(activation_model(c, true).formula, "sbh(2A + (14A + 2M)/t) + as^2b(2A + M)/t");
}

TEST(ParallelLayer, BadConfigurationsAreRefusedWithTheRule) {
  struct Case {
    ParallelMode mode;
    std::int64_t seq, hidden, heads;
    int degree;
    const char* expected;
  };
  const Case cases[] = {
      {ParallelMode::tp, 16, 32, 4, 3, "mode tp: heads 4 must be divisible by degree 3"},
      {ParallelMode::tp_sp, 10, 32, 4, 4, "mode tp-sp: seq 10 must be divisible by degree 4"},
      {ParallelMode::ulysses, 16, 32, 4, 8, "mode ulysses: degree 8 is above heads 4"},
      {ParallelMode::ulysses, 18, 36, 6, 4, "mode ulysses: heads 6 must be divisible by degree 4"},
      {ParallelMode::tp, 16, 32, 4, 4, "mode tp: ffn 30 must be divisible by degree 4"},
  };
  for (const Case& k : cases) {
    LayerConfig c;
    c.mode = k.mode;
    c.seq = k.seq;
    c.hidden = k.hidden;
    c.heads = k.heads;
    c.degree = k.degree;
    if (std::string(k.expected).find("ffn") != std::string::npos) c.ffn = 30;
    try {
      c.validate();
      ADD_FAILURE() << k.expected << ": accepted";
    } catch (const ConfigError& e) {
      // The library names the configuration's fields, never a command-line flag.
      EXPECT_THAT(e.what(), HasSubstr(k.expected));
      EXPECT_THAT(e.what(), Not(HasSubstr("--")));
      EXPECT_NE(std::find(e.fields().begin(), e.fields().end(), "degree"), e.fields().end())
          << e.what();
    }
  }
}

}  // namespace
}  // namespace shardscope
