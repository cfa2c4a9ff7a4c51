// The bug catalogue (parallel/layers/planted_bug.h) against the reference check: every planted bug
// makes the check fail, in every mode it applies to, on the tensors the catalogue names (only those
// where it says so), and the diagnosis of its main tensor is the catalogue's. These are the
// checker's own tests: a check that always passed would fail them. Also the table's names and
// the config errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/layers/planted_bug.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

// s = 8, b = 1, h = 16, a = 4 at t = 2, in f64 so that small effects stand out of the rounding.
LayerRunSpec bug_spec(PlantedBug bug, ParallelMode mode) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 1;
  spec.layer.hidden = 16;
  spec.layer.heads = 4;
  spec.layer.dropout = bug != PlantedBug::none && planted_bug_info(bug).needs_dropout ? 0.1 : 0.0;
  spec.layer.rope = bug != PlantedBug::none && planted_bug_info(bug).needs_rope;
  spec.layer.dtype = DType::f64;
  spec.layer.mode = mode;
  spec.layer.degree = 2;
  spec.layer.planted_bug = bug;
  spec.steps = 1;
  return spec;
}

struct BugRun {
  CheckResult check;
  std::vector<std::vector<double>> main_tensor;  // each rank's full copy of the main tensor
};

// Runs every rank; each gathers the full main tensor (its own copy when replicated) at the dump.
BugRun run_with_bug(const LayerRunSpec& spec, const std::string& main_tensor) {
  BugRun out;
  out.main_tensor.resize(static_cast<std::size_t>(spec.layer.degree));
  std::mutex mutex;
  LayerRunSpec with_dump = spec;
  with_dump.dump = [&](RankEnv& env, const std::vector<RankTensor>& tensors) {
    for (const RankTensor& t : tensors) {
      if (t.name != main_tensor) continue;
      const Tensor full = gather_to_full(env.group, t.local, t.placement, CommPurpose::check);
      std::lock_guard<std::mutex> lock(mutex);
      out.main_tensor[static_cast<std::size_t>(env.rank)] = full.to_vector();
    }
  };
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  run_spmd(spec.layer.degree, options, [&](RankEnv& env) {
    RankRun run = run_layer_rank(env, with_dump);
    if (env.rank == 0) out.check = run.check;
  });
  return out;
}

std::set<std::string> failed_names(const CheckResult& check) {
  std::set<std::string> names;
  for (const TensorCheck& t : check.tensors) {
    if (!t.passed) names.insert(t.name);
  }
  return names;
}

// The first rank's copy that differs from the reference, diagnosed (a replicated tensor may be
// right on some ranks: dropout-per-rank-seed is right on rank 0).
Diagnosis diagnose_main(const LayerRunSpec& spec, const BugRun& run, const std::string& name) {
  Context ref(0);
  std::vector<double> want;
  Shape shape;
  for (const auto& [n, t] : single_device_reference(ref, spec)) {
    if (n == name) {
      want = t.to_vector();
      shape = t.shape();
    }
  }
  EXPECT_FALSE(want.empty()) << "the reference has no " << name;
  Diagnosis d;
  for (const std::vector<double>& got : run.main_tensor) {
    EXPECT_EQ(got.size(), want.size()) << name;
    if (got.size() != want.size()) return d;
    d = diagnose(got, want, shape, spec.layer.degree, 1e-6, 1e-12);
    if (d.kind != Diagnosis::Kind::none) return d;
  }
  return d;
}

// The words diagnose() uses for each kind (parallel/run/diagnosis.cpp).
std::string kind_phrase(Diagnosis::Kind kind) {
  switch (kind) {
    case Diagnosis::Kind::ratio:
      return "a constant ratio";
    case Diagnosis::Kind::sign_flip:
      return "the sign is flipped";
    case Diagnosis::Kind::zeros:
      return "zeros where values were expected";
    case Diagnosis::Kind::offset:
      return "offset";
    case Diagnosis::Kind::blocks_permuted:
      return "blocks along dim";
    case Diagnosis::Kind::one_block_wrong:
      return "only block";
    case Diagnosis::Kind::unstructured:
      return "no simple pattern";
    case Diagnosis::Kind::none:
      break;
  }
  return "a matches b";
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  std::string name = planted_bugs()[info.param].name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class PlantedBugs : public ::testing::TestWithParam<std::size_t> {
 protected:
  const PlantedBugInfo& info() const { return planted_bugs()[GetParam()]; }
};

TEST_P(PlantedBugs, FailTheCheckOnTheCataloguedTensorsInEveryModeTheyApplyTo) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    if (!planted_bug_applies(info().bug, mode)) continue;
    const std::string what = std::string(info().name) + " in " + mode_name(mode);
    const LayerRunSpec spec = bug_spec(info().bug, mode);
    const BugRun run = run_with_bug(spec, info().main_tensor);
    ASSERT_TRUE(run.check.ran) << what;
    EXPECT_FALSE(run.check.passed) << what;
    const std::set<std::string> failed = failed_names(run.check);
    for (const std::string& name : diverging_tensors(info().bug)) {
      EXPECT_EQ(failed.count(name), 1u) << what << ": " << name << " passed";
    }
    if (info().output_ok) {
      EXPECT_EQ(failed.count("output"), 0u) << what << ": the output failed";
    }
    // Every bug shows at step 0, where the check stops: its gradients are wrong there.
    EXPECT_EQ(run.check.step, 0) << what;
    if (info().exact && mode == first_mode(info().bug)) {
      // The listed tensors, and each parameter whose listed gradient made its update wrong.
      std::set<std::string> want;
      for (const std::string& name : diverging_tensors(info().bug)) {
        want.insert(name);
        const std::string grad = ".grad";
        if (name.size() > grad.size() &&
            name.compare(name.size() - grad.size(), grad.size(), grad) == 0 &&
            name != "input.grad") {
          want.insert(name.substr(0, name.size() - grad.size()));
        }
      }
      EXPECT_EQ(failed, want) << what;
    }
  }
}

TEST_P(PlantedBugs, TheMainTensorsDiagnosisIsTheCataloguesOne) {
  const LayerRunSpec spec = bug_spec(info().bug, first_mode(info().bug));
  const BugRun run = run_with_bug(spec, info().main_tensor);
  const Diagnosis d = diagnose_main(spec, run, info().main_tensor);
  RecordProperty("diagnosis", info().main_tensor + std::string(": ") + d.text);
  EXPECT_EQ(static_cast<int>(d.kind), static_cast<int>(info().diagnosis))
      << info().name << ": " << info().main_tensor << ": " << d.text;
  // The run's own check says the same of the tensor it failed.
  const TensorCheck* mine = nullptr;
  for (const TensorCheck& t : run.check.tensors) {
    if (t.name == info().main_tensor) mine = &t;
  }
  ASSERT_NE(mine, nullptr) << info().name;
  EXPECT_FALSE(mine->passed) << info().name;
  EXPECT_THAT(mine->diagnosis, HasSubstr(kind_phrase(info().diagnosis))) << info().name;
  if (info().bug == PlantedBug::loss_times_t) {
    EXPECT_THAT(d.text, HasSubstr("a factor of t = 2"));
  }
  if (info().bug == PlantedBug::replicated_grad_averaged) {
    EXPECT_THAT(d.text, HasSubstr("a factor of 1/t (t = 2)"));
  }
  if (info().bug == PlantedBug::grad_scaled_twice) {
    EXPECT_THAT(d.text, HasSubstr("0.25 x b"));
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, PlantedBugs,
                         ::testing::Range<std::size_t>(0, planted_bugs().size()), case_name);

TEST(PlantedBugTable, NamesParseBackAndUnknownNamesListTheCatalogue) {
  EXPECT_GE(planted_bugs().size(), 12u);
  for (const PlantedBugInfo& info : planted_bugs()) {
    EXPECT_EQ(parse_planted_bug(info.name), info.bug);
    EXPECT_STREQ(planted_bug_name(info.bug), info.name);
    EXPECT_FALSE(planted_bug_modes(info.bug).empty()) << info.name;
    EXPECT_FALSE(planted_bug_applies(info.bug, ParallelMode::single)) << info.name;
    EXPECT_FALSE(diverging_tensors(info.bug).empty()) << info.name;
  }
  EXPECT_EQ(parse_planted_bug("none"), PlantedBug::none);
  try {
    parse_planted_bug("f-and-g");
    FAIL() << "an unknown name parsed";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("planted_bug 'f-and-g'"));
    EXPECT_THAT(e.what(), HasSubstr("sp-layernorm-grad-not-reduced"));
    EXPECT_THAT(e.what(), HasSubstr("replicated-grad-averaged"));
  }
}

TEST(PlantedBugTable, ABugPlantedWhereItDoesNotApplyIsAnErrorNamingTheFieldAndItsModes) {
  LayerConfig c;
  c.mode = ParallelMode::tp;
  c.degree = 2;
  c.planted_bug = PlantedBug::sp_layernorm_grad_not_reduced;
  try {
    c.validate();
    FAIL() << "planted in tp";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("planted_bug sp-layernorm-grad-not-reduced"));
    EXPECT_THAT(e.what(), HasSubstr("mode tp-sp, given mode tp"));
  }
  c.planted_bug = PlantedBug::dropout_per_rank_seed;
  c.dropout = 0;
  EXPECT_THROW(c.validate(), ArgumentError);
  c.dropout = 0.1;
  EXPECT_NO_THROW(c.validate());
  c.mode = ParallelMode::single;
  c.degree = 1;
  EXPECT_THROW(c.validate(), ArgumentError);  // single device: nothing to plant
}

// The catalogue's bugs in Llama's layer (RMSNorm, SwiGLU, no biases): a bug of the norms' weight
// gradients is caught there too, on those gradients alone; the bugs of parts the layer lacks (the
// row-parallel biases, LayerNorm's centring) are refused naming what they need.
TEST(PlantedBugTable, InLlamasLayerTheNormBugIsCaughtAndBugsOfMissingPartsAreRefused) {
  LayerRunSpec spec = bug_spec(PlantedBug::sp_layernorm_grad_not_reduced, ParallelMode::tp_sp);
  spec.layer.norm = Norm::rmsnorm;
  spec.layer.mlp = Mlp::swiglu;
  spec.layer.bias = false;
  const BugRun run = run_with_bug(spec, "ln2.weight.grad");
  EXPECT_FALSE(run.check.passed);
  // The gradients, and the weights the update makes from them.
  EXPECT_EQ(failed_names(run.check), (std::set<std::string>{"ln1.weight", "ln1.weight.grad",
                                                            "ln2.weight", "ln2.weight.grad"}));
  LayerConfig c = spec.layer;
  c.planted_bug = PlantedBug::row_bias_grad_not_reduced;
  try {
    c.validate();
    FAIL() << "a row-bias bug planted into a layer without biases";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it needs bias on"));
  }
  c.planted_bug = PlantedBug::layernorm_local_shard;
  c.mode = first_mode(c.planted_bug);
  try {
    c.validate();
    FAIL() << "a LayerNorm bug planted into RMSNorm";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs norm layernorm, given rmsnorm"));
  }
  c.planted_bug = PlantedBug::f_backward_identity;
  c.mode = ParallelMode::tp;
  EXPECT_NO_THROW(c.validate());
}

// Lab 8 with Llama's layer (`--model llama`, with and without grouped-query attention): every bug
// that can be planted there, in each mode it applies to, fails the check; those that cannot are
// the ones of parts the layer lacks.
TEST(PlantedBugTable, EveryBugPlantableInLlamasLayerFailsTheCheck) {
  for (const std::int64_t kv_heads : {0, 2}) {
    for (const ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
      LayerRunSpec spec = bug_spec(PlantedBug::none, mode);
      apply_model("llama", spec.layer);
      spec.layer.kv_heads = kv_heads;
      const std::vector<PlantedBug> bugs = plantable_bugs(spec.layer);
      EXPECT_FALSE(bugs.empty()) << mode_name(mode);
      for (const PlantedBug bug : bugs) {
        spec.layer.planted_bug = bug;
        const BugRun run = run_with_bug(spec, "output");
        EXPECT_FALSE(run.check.passed) << planted_bug_name(bug) << " in " << mode_name(mode)
                                       << " at kv_heads " << kv_heads << " passed the check";
      }
    }
  }
  LayerConfig llama;
  apply_model("llama", llama);
  llama.mode = ParallelMode::tp_sp;
  llama.degree = 2;
  for (const PlantedBug missing :
       {PlantedBug::row_bias_grad_not_reduced, PlantedBug::layernorm_local_shard,
        PlantedBug::dropout_per_rank_seed}) {
    const std::vector<PlantedBug> bugs = plantable_bugs(llama);
    EXPECT_EQ(std::count(bugs.begin(), bugs.end(), missing), 0) << planted_bug_name(missing);
  }
}

TEST(PlantedBugTable, TheReferenceIgnoresTheBug) {
  Context a(0), b(0);
  const LayerRunSpec clean = bug_spec(PlantedBug::none, ParallelMode::tp_sp);
  const LayerRunSpec planted = bug_spec(PlantedBug::loss_times_t, ParallelMode::tp_sp);
  const auto want = single_device_reference(a, clean);
  const auto got = single_device_reference(b, planted);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].second.to_vector(), want[i].second.to_vector()) << want[i].first;
  }
}

// --plant-bug random (lab 8): the same seed and config always hide the same bug; every bug it
// hides can be planted into the config (mode, dropout); over a few hundred seeds it reaches every
// such bug, so a class's seeds spread over the catalogue.
TEST(ChooseRandomBug, IsDeterministicPlantableAndReachesEveryBugOfTheMode) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    for (double dropout : {0.0, 0.1}) {
      LayerConfig c;
      c.mode = mode;
      c.degree = 2;
      c.dropout = dropout;
      const std::vector<PlantedBug> plantable = plantable_bugs(c);
      std::set<PlantedBug> reached;
      for (std::uint64_t seed = 0; seed < 300; ++seed) {
        const PlantedBug bug = choose_random_bug(seed, c);
        EXPECT_EQ(choose_random_bug(seed, c), bug);
        c.planted_bug = bug;
        EXPECT_NO_THROW(c.validate()) << planted_bug_name(bug) << " in " << mode_name(mode);
        reached.insert(bug);
      }
      EXPECT_EQ(reached, std::set<PlantedBug>(plantable.begin(), plantable.end()))
          << mode_name(mode) << " dropout " << dropout;
      EXPECT_GE(reached.size(), 5u) << mode_name(mode);
    }
  }
  LayerConfig tp;
  tp.mode = ParallelMode::tp;
  tp.dropout = 0;
  const std::vector<PlantedBug> no_dropout = plantable_bugs(tp);
  EXPECT_EQ(std::count(no_dropout.begin(), no_dropout.end(), PlantedBug::dropout_per_rank_seed), 0);
  tp.dropout = 0.1;
  const std::vector<PlantedBug> with_dropout = plantable_bugs(tp);
  EXPECT_EQ(std::count(with_dropout.begin(), with_dropout.end(), PlantedBug::dropout_per_rank_seed),
            1);
}

TEST(ChooseRandomBug, ThrowsNamingTheModeWhenNoBugApplies) {
  LayerConfig single;
  try {
    choose_random_bug(7, single);
    FAIL() << "a bug chosen for mode single";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("mode single"));
  }
}

}  // namespace
}  // namespace shardscope
