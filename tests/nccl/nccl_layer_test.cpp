// The Transformer layer with --comm nccl on CUDA devices: in every parallel mode the reference
// check against the single-device layer passes, and the memory and communication figures equal
// those of the same run on threads (they are counted, not timed). Skips with too few devices.
#include <gtest/gtest.h>

#include <mutex>

#include "parallel/run/layer_run.h"
#include "tests/nccl/nccl_testing.h"

namespace shardscope {
namespace {

LayerRunSpec small_spec(ParallelMode mode, int degree) {
  LayerRunSpec spec;
  spec.layer.seq = 16;
  spec.layer.batch = 2;
  spec.layer.hidden = 32;
  spec.layer.heads = 4;
  spec.layer.dropout = 0.1;
  spec.layer.mode = mode;
  spec.layer.degree = degree;
  spec.steps = 2;
  return spec;
}

RankRun run_rank0(const LayerRunSpec& spec, CommKind comm) {
  RankRun rank0;
  std::mutex mutex;
  SpmdOptions options;
  options.comm = comm;
  options.timeout = std::chrono::milliseconds(60000);
  run_spmd(spec.layer.degree, options, [&](RankEnv& env) {
    RankRun run = run_layer_rank(env, spec);
    if (env.rank != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    rank0 = std::move(run);
  });
  return rank0;
}

class NcclLayer : public ::testing::TestWithParam<ParallelMode> {};

TEST_P(NcclLayer, MatchesTheSingleDeviceLayerAndTheThreadsRun) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  const LayerRunSpec spec = small_spec(GetParam(), 2);
  const RankRun nccl = run_rank0(spec, CommKind::nccl);
  const RankRun threads = run_rank0(spec, CommKind::threads);
  ASSERT_TRUE(nccl.check.ran);
  EXPECT_TRUE(nccl.check.passed);
  for (const TensorCheck& t : nccl.check.tensors) {
    EXPECT_TRUE(t.passed) << t.name << ": max_rel_err " << t.max_rel_err;
  }
  EXPECT_EQ(nccl.memory.saved_activation_bytes, threads.memory.saved_activation_bytes);
  EXPECT_EQ(nccl.memory.formula_bytes, threads.memory.formula_bytes);
  ASSERT_EQ(nccl.comm.size(), threads.comm.size());
  for (std::size_t i = 0; i < nccl.comm.size(); ++i) {
    EXPECT_EQ(nccl.comm[i].kind, threads.comm[i].kind);
    EXPECT_EQ(nccl.comm[i].bytes_sent, threads.comm[i].bytes_sent);
  }
  ASSERT_EQ(nccl.steps.size(), threads.steps.size());
  for (std::size_t i = 0; i < nccl.steps.size(); ++i) {
    // Different summation orders (NCCL's ring, cuBLAS) move the last bits of an f32 loss.
    EXPECT_NEAR(nccl.steps[i].loss, threads.steps[i].loss, 1e-4 * std::abs(threads.steps[i].loss));
  }
}

INSTANTIATE_TEST_SUITE_P(ParallelModes, NcclLayer,
                         ::testing::Values(ParallelMode::tp, ParallelMode::tp_sp,
                                           ParallelMode::ulysses),
                         [](const auto& param_info) {
                           std::string name = mode_name(param_info.param);
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// One device: the single layer (the reference itself, so nothing is checked) steps as the CPU's
// does, and tp at degree 1 (a one-rank NCCL communicator) passes its reference check.
TEST(NcclLayer, OneDeviceRunsTheSingleLayerAndTpAtDegreeOne) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(1);
  const LayerRunSpec single = small_spec(ParallelMode::single, 1);
  const RankRun nccl = run_rank0(single, CommKind::nccl);
  const RankRun cpu = run_rank0(single, CommKind::threads);
  EXPECT_FALSE(nccl.check.ran) << "the single layer is the reference";
  ASSERT_EQ(nccl.steps.size(), static_cast<std::size_t>(single.steps));
  ASSERT_EQ(cpu.steps.size(), nccl.steps.size());
  for (std::size_t i = 0; i < nccl.steps.size(); ++i) {
    EXPECT_NEAR(nccl.steps[i].loss, cpu.steps[i].loss, 1e-4 * std::abs(cpu.steps[i].loss))
        << "step " << i;
  }
  const RankRun tp = run_rank0(small_spec(ParallelMode::tp, 1), CommKind::nccl);
  ASSERT_TRUE(tp.check.ran);
  EXPECT_TRUE(tp.check.passed);
  EXPECT_GT(tp.check.steps_checked, 0);
}

}  // namespace
}  // namespace shardscope
