// SharedReference: ranks that are threads of one process share one single-device reference (made
// by the first rank that needs it, sliced under a lock into each rank's context). The check it
// gives is the per-rank reference's, to the bit, in every mode; under ThreadSanitizer this is also
// the test of its locking.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <vector>

#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

CheckResult check_of(const LayerRunSpec& spec) {
  CheckResult out;
  std::mutex mutex;
  run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
    const RankRun run = run_layer_rank(env, spec);
    std::lock_guard<std::mutex> lock(mutex);
    if (env.rank == 0) out = run.check;
  });
  return out;
}

TEST(SharedReference, GivesThePerRankReferencesCheckInEveryMode) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    LayerRunSpec spec;
    spec.layer.seq = 8;
    spec.layer.batch = 2;
    spec.layer.hidden = 16;
    spec.layer.heads = 4;
    spec.layer.mode = mode;
    spec.layer.degree = 4;
    spec.steps = 1;
    const CheckResult own = check_of(spec);
    spec.reference = std::make_shared<SharedReference>();
    const CheckResult shared = check_of(spec);
    ASSERT_TRUE(shared.ran) << mode_name(mode);
    EXPECT_TRUE(shared.passed) << mode_name(mode);
    ASSERT_EQ(shared.tensors.size(), own.tensors.size()) << mode_name(mode);
    for (std::size_t i = 0; i < own.tensors.size(); ++i) {
      EXPECT_EQ(shared.tensors[i].name, own.tensors[i].name);
      EXPECT_EQ(shared.tensors[i].max_abs_err, own.tensors[i].max_abs_err)
          << mode_name(mode) << " " << own.tensors[i].name;
    }
  }
}

}  // namespace
}  // namespace shardscope
