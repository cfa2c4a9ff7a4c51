// Faults in a parallel layer run: a rank that throws mid-forward, and ranks whose layers issue
// different collectives, end within the timeout with an error on every rank that names the ranks
// and the ops involved. Never a hang. On every backend: the cuda instances run the ranks as threads
// sharing the CUDA devices, their collectives staged through host memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "parallel/run/layer_run.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using testing::TestBackend;

SpmdOptions options_for(TestBackend backend) {
  SpmdOptions options;
  options.backend = backend == TestBackend::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  options.timeout = std::chrono::milliseconds(5000);
  return options;
}

class ParallelFaults : public ::testing::TestWithParam<TestBackend> {
 protected:
  void SetUp() override { SHARDSCOPE_SKIP_IF_MISSING(testing::missing_for_ranks(GetParam(), 4)); }
};

// Throws when rank `rank` reaches a forward op of kind `op`.
class ThrowAtOp final : public Observer {
 public:
  ThrowAtOp(int rank, std::string op) : rank_(rank), op_(std::move(op)) {}
  void on_op_begin(const OpEvent& e) override {
    if (e.site.rank == rank_ && e.site.phase == Phase::forward && e.site.op == op_) {
      throw Error("injected failure at " + op_ + " in " + std::string(e.site.scope));
    }
  }

 private:
  int rank_;
  std::string op_;
};

LayerRunSpec spec_for(ParallelMode mode) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 2;
  spec.layer.hidden = 16;
  spec.layer.heads = 4;
  spec.layer.mode = mode;
  spec.layer.degree = 4;
  spec.steps = 1;
  return spec;
}

TEST_P(ParallelFaults, ARankThatThrowsMidForwardFailsEveryRankQuickly) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const SpmdOptions options = options_for(GetParam());
    const auto start = std::chrono::steady_clock::now();
    try {
      run_spmd(4, options, [&](RankEnv& env) {
        ThrowAtOp fault(2, "gelu");
        ObserverGuard attach(env.ctx, fault);
        run_layer_rank(env, spec_for(mode));
      });
      ADD_FAILURE() << mode_name(mode) << ": no error";
    } catch (const SpmdError& e) {
      ASSERT_EQ(e.errors().size(), 4u) << e.what();
      EXPECT_EQ(e.errors()[0].rank, 2);  // the cause comes first
      EXPECT_THAT(e.errors()[0].message, HasSubstr("injected failure at gelu in mlp.gelu"));
      for (std::size_t i = 1; i < 4; ++i) {
        EXPECT_THAT(e.errors()[i].message, HasSubstr("rank 2 failed: injected failure"));
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 4.0) << mode_name(mode) << ": the others waited for the timeout";
  }
}

TEST_P(ParallelFaults, RanksRunningDifferentModesReportEachRanksCall) {
  const SpmdOptions options = options_for(GetParam());
  try {
    run_spmd(2, options, [&](RankEnv& env) {
      LayerRunSpec spec = spec_for(env.rank == 0 ? ParallelMode::tp : ParallelMode::tp_sp);
      spec.layer.degree = 2;
      run_layer_rank(env, spec);
    });
    FAIL() << "a tp rank and a tp-sp rank ran together";
  } catch (const SpmdError& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    for (const auto& r : e.errors()) {
      EXPECT_THAT(r.message, HasSubstr("collective mismatch"));
      EXPECT_THAT(r.message, HasSubstr("rank 0 calls all_reduce"));
      EXPECT_THAT(r.message, HasSubstr("rank 1 calls all_gather"));
      EXPECT_THAT(r.message, HasSubstr("attn.qkv (layer 0, forward"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ParallelFaults, testing::all_backends(), testing::BackendName());

}  // namespace
}  // namespace shardscope
