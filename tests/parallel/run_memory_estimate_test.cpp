// estimate_run_memory against the ledger: in every mode and on shapes where the weights, the
// activations or the attention scores dominate, the estimate of a rank's bytes is at most the
// peak the ledger measures, and within a factor of 1.5 of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "parallel/models/memory_model.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

TEST(RunMemoryEstimate, ARanksEstimateIsAtMostItsMeasuredPeakAndWithinAFactorOfOneAndAHalf) {
  struct Shape3 {
    int seq, hidden, heads, layers;
  };
  const Shape3 shapes[] = {{32, 64, 4, 1}, {128, 32, 8, 1}, {8, 128, 4, 1}, {32, 64, 4, 3}};
  const ParallelMode modes[] = {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp,
                                ParallelMode::ulysses};
  for (const ParallelMode mode : modes) {
    for (const Shape3& s : shapes) {
      LayerRunSpec spec;
      spec.layer.seq = s.seq;
      spec.layer.batch = 2;
      spec.layer.hidden = s.hidden;
      spec.layer.heads = s.heads;
      spec.layer.layers = s.layers;
      spec.layer.mode = mode;
      spec.layer.degree = mode == ParallelMode::single ? 1 : 2;
      spec.steps = 1;
      spec.check = false;
      double peak = 0;
      std::mutex mutex;
      run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
        const RankRun run = run_layer_rank(env, spec);
        std::lock_guard<std::mutex> lock(mutex);
        peak = std::max(peak, run.memory.peak_bytes);
      });
      const double estimate = estimate_run_memory(spec.layer, false, false, 1).per_rank_bytes;
      const std::string where = std::string(mode_name(mode)) + " s=" + std::to_string(s.seq) +
                                " h=" + std::to_string(s.hidden) + " L=" + std::to_string(s.layers);
      EXPECT_LE(estimate, peak) << where;
      EXPECT_GE(1.5 * estimate, peak) << where;
    }
  }
}

TEST(RunMemoryEstimate, TheProcessHoldsEveryThreadRankAndTheReference) {
  LayerConfig c;
  c.seq = 32;
  c.batch = 2;
  c.hidden = 64;
  c.heads = 4;
  c.mode = ParallelMode::tp;
  c.degree = 4;
  const RunMemoryEstimate one = estimate_run_memory(c, false, false, 1);
  const RunMemoryEstimate threads = estimate_run_memory(c, false, false, 4);
  const RunMemoryEstimate checked = estimate_run_memory(c, false, true, 4);
  EXPECT_DOUBLE_EQ(threads.process_bytes, 4 * one.process_bytes);
  EXPECT_GT(one.process_bytes, one.per_rank_bytes) << "the rank's full weights and data";
  LayerConfig single = c;
  single.mode = ParallelMode::single;
  single.degree = 1;
  EXPECT_DOUBLE_EQ(checked.process_bytes - threads.process_bytes,
                   estimate_run_memory(single, false, false, 1).process_bytes);
}

}  // namespace
}  // namespace shardscope
