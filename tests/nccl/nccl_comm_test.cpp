// NcclComm against ThreadComm: every collective on the same inputs gives the same values on every
// rank (the inputs are small integers, so sums are exact in any order), a mismatch is a CommError
// on every rank naming each rank's call, groups split from an NCCL group run collectives, and the
// call check can be turned off. Each test skips where there are too few CUDA devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/spmd.h"
#include "tests/nccl/nccl_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

struct CollectiveCase {
  const char* name;
  CollectiveKind kind;
  DType dtype;
  ReduceOp reduce = ReduceOp::sum;
};

// Every rank's values after `c` on `world` ranks of `comm`: rank r starts from r * 100 + i in a
// [2 * world, 3] tensor on its context's device.
std::vector<std::vector<double>> run_collective(CommKind comm, int world, const CollectiveCase& c,
                                                bool check_calls = true) {
  std::vector<std::vector<double>> results(static_cast<std::size_t>(world));
  std::mutex mutex;
  SpmdOptions options;
  options.comm = comm;
  options.check_calls = check_calls;
  options.timeout = std::chrono::milliseconds(60000);
  run_spmd(world, options, [&](RankEnv& env) {
    const Shape shape{2 * static_cast<std::int64_t>(world), 3};
    std::vector<double> values(static_cast<std::size_t>(shape.numel()));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<double>(env.rank * 100 + static_cast<int>(i));
    }
    Tensor t = Tensor::from_vector(env.ctx, shape, values, c.dtype);
    Tensor out = t;
    switch (c.kind) {
      case CollectiveKind::all_reduce:
        env.group.all_reduce(t, c.reduce);
        break;
      case CollectiveKind::all_gather:
        out = env.group.all_gather(t);
        break;
      case CollectiveKind::reduce_scatter:
        out = env.group.reduce_scatter(t);
        break;
      case CollectiveKind::all_to_all:
        out = env.group.all_to_all(t);
        break;
      case CollectiveKind::broadcast:
        env.group.broadcast(t, world - 1);
        break;
      case CollectiveKind::barrier:
        env.group.barrier();
        break;
    }
    std::vector<double> got = out.to_vector();
    std::lock_guard<std::mutex> lock(mutex);
    results[static_cast<std::size_t>(env.rank)] = std::move(got);
  });
  return results;
}

class NcclCollectives : public ::testing::TestWithParam<CollectiveCase> {};

TEST_P(NcclCollectives, EqualThreadCommOnEveryRank) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  const int world = count_cuda_devices().count >= 4 ? 4 : 2;
  const auto expected = run_collective(CommKind::threads, world, GetParam());
  const auto got = run_collective(CommKind::nccl, world, GetParam());
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(got[static_cast<std::size_t>(r)], expected[static_cast<std::size_t>(r)])
        << GetParam().name << " on rank " << r << " of " << world;
  }
}

TEST_P(NcclCollectives, OnOneDeviceLeaveTheValuesAsThreadCommDoes) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(1);
  EXPECT_EQ(run_collective(CommKind::nccl, 1, GetParam()),
            run_collective(CommKind::threads, 1, GetParam()));
}

const CollectiveCase kCases[] = {
    {"all_reduce_sum_f32", CollectiveKind::all_reduce, DType::f32},
    {"all_reduce_max_f64", CollectiveKind::all_reduce, DType::f64, ReduceOp::max},
    {"all_gather_f32", CollectiveKind::all_gather, DType::f32},
    {"all_gather_u8", CollectiveKind::all_gather, DType::u8},
    {"reduce_scatter_f32", CollectiveKind::reduce_scatter, DType::f32},
    {"reduce_scatter_f64", CollectiveKind::reduce_scatter, DType::f64},
    {"all_to_all_f32", CollectiveKind::all_to_all, DType::f32},
    {"broadcast_f64", CollectiveKind::broadcast, DType::f64},
    {"barrier", CollectiveKind::barrier, DType::f32},
};

INSTANTIATE_TEST_SUITE_P(EveryKind, NcclCollectives, ::testing::ValuesIn(kCases),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(NcclComm, WithoutTheCallCheckCollectivesStillAgree) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  const CollectiveCase c{"all_reduce", CollectiveKind::all_reduce, DType::f32};
  EXPECT_EQ(run_collective(CommKind::nccl, 2, c, /*check_calls=*/false),
            run_collective(CommKind::threads, 2, c));
}

TEST(NcclComm, AMismatchIsACommErrorOnEveryRankNamingEachCall) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  SpmdOptions options;
  options.comm = CommKind::nccl;
  std::vector<SpmdError::RankError> errors;
  try {
    run_spmd(2, options, [](RankEnv& env) {
      ScopeGuard scope(env.ctx, "attn");
      env.ctx.set_current_op(env.rank == 0 ? "gather_seq" : "reduce_scatter_seq");
      Tensor t = Tensor::zeros(env.ctx, Shape{env.rank == 0 ? 4 : 6});
      env.group.all_reduce(t, ReduceOp::sum);
    });
    ADD_FAILURE() << "run_spmd did not throw";
  } catch (const SpmdError& e) {
    errors = e.errors();
  }
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) {
    EXPECT_THAT(e.message, HasSubstr("collective mismatch")) << "rank " << e.rank;
    EXPECT_THAT(e.message, HasSubstr("rank 0 calls all_reduce(count 4, f32, sum) from gather_seq"));
    EXPECT_THAT(e.message,
                HasSubstr("rank 1 calls all_reduce(count 6, f32, sum) from reduce_scatter_seq"));
  }
}

TEST(NcclComm, ARankThatThrowsReleasesTheOthers) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(2);
  SpmdOptions options;
  options.comm = CommKind::nccl;
  options.timeout = std::chrono::milliseconds(30000);
  std::vector<SpmdError::RankError> errors;
  try {
    run_spmd(2, options, [](RankEnv& env) {
      if (env.rank == 1) throw Error("rank 1 fails on purpose");
      Tensor t = Tensor::zeros(env.ctx, Shape{8});
      env.group.all_reduce(t, ReduceOp::sum);
    });
    ADD_FAILURE() << "run_spmd did not throw";
  } catch (const SpmdError& e) {
    errors = e.errors();
  }
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].rank, 1);
  EXPECT_THAT(errors[1].message, HasSubstr("rank 1 failed: rank 1 fails on purpose"));
}

TEST(NcclComm, SplitGroupsRunTheirOwnCollectives) {
  SHARDSCOPE_SKIP_WITHOUT_DEVICES(4);
  std::vector<std::vector<double>> sums(4);
  std::mutex mutex;
  SpmdOptions options;
  options.comm = CommKind::nccl;
  run_spmd(4, options, [&](RankEnv& env) {
    // Ranks 0 and 2 form one group, 1 and 3 the other; keys reverse the order inside each.
    std::unique_ptr<Communicator> sub = env.comm.split(env.rank % 2, -env.rank);
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), env.rank < 2 ? 1 : 0);
    ProcessGroup group(env.ctx, *sub);
    Tensor t = Tensor::full(env.ctx, Shape{3}, env.rank + 1.0);
    group.all_reduce(t, ReduceOp::sum);
    std::vector<double> got = t.to_vector();
    std::lock_guard<std::mutex> lock(mutex);
    sums[static_cast<std::size_t>(env.rank)] = std::move(got);
  });
  EXPECT_EQ(sums[0], std::vector<double>(3, 1.0 + 3.0));
  EXPECT_EQ(sums[2], std::vector<double>(3, 1.0 + 3.0));
  EXPECT_EQ(sums[1], std::vector<double>(3, 2.0 + 4.0));
  EXPECT_EQ(sums[3], std::vector<double>(3, 2.0 + 4.0));
}

TEST(NcclComm, TooFewDevicesIsALaunchErrorNamingTheCount) {
  const int found = count_cuda_devices().count;
  SpmdOptions options;
  options.comm = CommKind::nccl;
  bool ran = false;
  try {
    run_spmd(found + 1, options, [&](RankEnv&) { ran = true; });
    ADD_FAILURE() << "run_spmd started " << found + 1 << " ranks on " << found << " devices";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("comm nccl (one thread per device) needs " +
                                    std::to_string(found + 1) + " CUDA device"));
    EXPECT_THAT(e.what(), HasSubstr("found " + std::to_string(found)));
  }
  EXPECT_FALSE(ran) << "no rank may start";
}

}  // namespace
}  // namespace shardscope
