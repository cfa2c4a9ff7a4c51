// NcclComm when something goes wrong: a context on another device is refused, a peer that never
// arrives ends the wait at the timeout (which counts from when the queued compute has finished,
// not from the launch), and a rank that throws while holding a split group releases the peer
// waiting in it. Each test skips where there are too few CUDA devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "autograd/context.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "parallel/comm/nccl_comm.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/spmd.h"
#include "tests/nccl/nccl_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

// The errors of a run that must fail, in the order the ranks failed.
std::vector<SpmdError::RankError> failed_run(int world, const SpmdOptions& options,
                                             const RankFn& fn) {
  try {
    run_spmd(world, options, fn);
  } catch (const SpmdError& e) {
    return e.errors();
  }
  ADD_FAILURE() << "run_spmd did not throw";
  return {};
}

TEST(NcclFailure, AttachRefusesAContextOnAnotherDevice) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  std::vector<std::unique_ptr<Communicator>> comms = make_nccl_thread_comms({0, 1});
  {
    Context other(0, Device::cuda(1));
    try {
      comms[0]->attach(other);
      ADD_FAILURE() << "rank 0's communicator on cuda:0 took a context on cuda:1";
    } catch (const ArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr("runs on cuda:0, given a context on cuda:1"));
    }
  }
  close_nccl_thread_comms(comms);
}

TEST(NcclFailure, APeerThatNeverArrivesEndsTheWaitAtTheTimeout) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  SpmdOptions options;
  options.comm = CommKind::nccl;
  options.check_calls = false;  // rank 0 goes straight into the NCCL kernel
  options.timeout = std::chrono::milliseconds(1000);
  const auto errors = failed_run(2, options, [](RankEnv& env) {
    if (env.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(4));
    Tensor t = Tensor::zeros(env.ctx, Shape{8});
    env.group.all_reduce(t, ReduceOp::sum);
  });
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].rank, 0);
  EXPECT_THAT(errors[0].message, HasSubstr("all_reduce"));
  EXPECT_THAT(errors[0].message, HasSubstr("did not finish within 1000 ms"));
}

// Each rank queues about a second of matmuls (f32 4096^3, a few ms each on a current GPU), then
// an all-reduce with a 500 ms limit: the kernels ahead of it are not time spent waiting for a peer.
TEST(NcclFailure, QueuedComputeDoesNotCountTowardTheTimeout) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  SpmdOptions options;
  options.comm = CommKind::nccl;
  options.timeout = std::chrono::milliseconds(500);
  run_spmd(2, options, [](RankEnv& env) {
    const Tensor x = Tensor::randn(env.ctx, {4096, 4096}, 1, 0.01);
    for (int i = 0; i < 400; ++i) matmul(x, x);
    Tensor t = Tensor::full(env.ctx, Shape{8}, 1.0);
    env.group.all_reduce(t, ReduceOp::sum);
    EXPECT_EQ(t.to_vector(), std::vector<double>(8, 2.0));
  });
}

// Rank 1 throws while holding a split group in which rank 0 waits: its group ends by abort as the
// exception unwinds (ncclCommDestroy would wait for rank 0), and rank 0 learns of the failure.
TEST(NcclFailure, ARankThatThrowsHoldingASplitGroupReleasesThePeerInIt) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  SpmdOptions options;
  options.comm = CommKind::nccl;
  options.timeout = std::chrono::milliseconds(30000);
  const auto errors = failed_run(2, options, [](RankEnv& env) {
    std::unique_ptr<Communicator> sub = env.comm.split(0, env.rank);
    ProcessGroup group(env.ctx, *sub);
    if (env.rank == 1) throw Error("rank 1 fails on purpose");
    Tensor t = Tensor::zeros(env.ctx, Shape{8});
    group.all_reduce(t, ReduceOp::sum);
  });
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].rank, 1);
  EXPECT_THAT(errors[1].message, HasSubstr("rank 1 failed: rank 1 fails on purpose"));
}

}  // namespace
}  // namespace shardscope
