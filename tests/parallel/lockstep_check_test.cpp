// The reference check at every step: the single-device layer steps in lockstep with the parallel
// one, so a parallel layer that leaves the reference's path at step k (here: a parameter changed
// behind the run's back after the check of step k - 1) fails at step k, not before and not never,
// and the failed tensors are named and diagnosed. `check_steps` limits the steps compared.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/backend.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

LayerRunSpec spec_of(ParallelMode mode, int steps) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 1;
  spec.layer.hidden = 16;
  spec.layer.heads = 4;
  spec.layer.dropout = 0.1;
  spec.layer.dtype = DType::f64;
  spec.layer.mode = mode;
  spec.layer.degree = 2;
  spec.steps = steps;
  return spec;
}

// Scales parameter `name` by `factor` on every rank after the check of step `after` (the planted
// mistake: the parallel layer leaves the reference's path from step after + 1 on).
class ScaleAfterCheck : public RunInspector {
 public:
  ScaleAfterCheck(std::string name, double factor, int after)
      : name_(std::move(name)), factor_(factor), after_(after) {}
  void tensor(int rank, const std::string& name, const ParallelTensor& t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (name == name_) params_[rank] = t.local;
  }
  void check(int rank, const CheckResult& result) override {
    Tensor p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (result.step != after_ || !params_.count(rank)) return;
      p = params_[rank];
    }
    NoGradGuard no_grad(p.ctx());
    Tensor target = p;
    p.ctx().backend().scale(p, factor_, target);
  }
  void detach(int rank) override {
    std::lock_guard<std::mutex> lock(mutex_);
    params_.erase(rank);
  }

 private:
  std::string name_;
  double factor_;
  int after_;
  std::mutex mutex_;
  std::map<int, Tensor> params_;
};

CheckResult check_of(const LayerRunSpec& spec, RunInspector* inspector = nullptr) {
  CheckResult out;
  std::mutex mutex;
  LayerRunSpec shared = spec;
  shared.reference = std::make_shared<SharedReference>();
  run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
    const RankRun run = run_layer_rank(env, shared, inspector);
    std::lock_guard<std::mutex> lock(mutex);
    if (env.rank == 0) out = run.check;
  });
  return out;
}

const TensorCheck* find(const CheckResult& r, const std::string& name) {
  for (const TensorCheck& t : r.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(LockstepCheck, ACorrectRunPassesEveryStepInEveryMode) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const CheckResult r = check_of(spec_of(mode, 3));
    EXPECT_TRUE(r.passed) << mode_name(mode);
    EXPECT_EQ(r.steps_checked, 3) << mode_name(mode);
    EXPECT_EQ(r.step, 2) << mode_name(mode);
  }
}

TEST(LockstepCheck, ALayerThatLeavesTheReferencesPathAtStepTwoFailsThereNamingAndDiagnosingIt) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    ScaleAfterCheck plant("ln1.weight", 2.0, /*after=*/1);
    const CheckResult r = check_of(spec_of(mode, 4), &plant);
    const std::string what = mode_name(mode);
    EXPECT_FALSE(r.passed) << what;
    EXPECT_EQ(r.step, 2) << what << ": steps 0 and 1 were right";
    EXPECT_EQ(r.steps_checked, 3) << what << ": the check stops at the first failure";
    const TensorCheck* out = find(r, "output");
    ASSERT_NE(out, nullptr) << what;
    EXPECT_FALSE(out->passed) << what;
    EXPECT_GT(out->failed, 0) << what;
    const TensorCheck* w = find(r, "ln1.weight");
    ASSERT_NE(w, nullptr) << what;
    EXPECT_FALSE(w->passed) << what;
    for (const TensorCheck& t : r.tensors) {  // each failure says what it looks like
      EXPECT_EQ(t.passed, t.diagnosis.empty()) << what << ": " << t.name << ": " << t.diagnosis;
    }
  }
}

TEST(LockstepCheck, CheckStepsLimitsTheStepsCompared) {
  LayerRunSpec spec = spec_of(ParallelMode::tp_sp, 4);
  spec.check_steps = 2;
  ScaleAfterCheck plant("ln1.weight", 2.0, /*after=*/1);
  const CheckResult r = check_of(spec, &plant);
  EXPECT_TRUE(r.passed) << "the change after step 1 is never compared";
  EXPECT_EQ(r.steps_checked, 2);
  EXPECT_EQ(r.step, 1);
}

}  // namespace
}  // namespace shardscope
