// Tests of how run_spmd and ThreadComm fail: ranks that issue different collectives, a rank that
// throws while the others wait, a rank that never arrives, and collectives after a failure. Each
// must end with a CommError on every waiting rank (and SpmdError from run_spmd) that says what
// every rank was doing, within a bounded time: never a hang.
#include "parallel/comm/spmd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "autograd/context.h"
#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"

namespace shardscope {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

SpmdOptions with_timeout(std::chrono::milliseconds timeout) {
  SpmdOptions options;
  options.timeout = timeout;
  return options;
}

long long ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `fn` on `world` ranks, expecting SpmdError; returns it, or a default when none was thrown.
std::vector<SpmdError::RankError> spmd_errors(int world, std::chrono::milliseconds timeout,
                                              const RankFn& fn) {
  try {
    run_spmd(world, with_timeout(timeout), fn);
  } catch (const SpmdError& e) {
    return e.errors();
  }
  ADD_FAILURE() << "run_spmd did not throw SpmdError";
  return {};
}

// Each rank's collective in a mismatch test, issued from inside a named op, scope and layer.
struct RankCall {
  CollectiveKind kind;
  std::int64_t count;
  DType dtype;
  int root = 0;
};

void issue(RankEnv& env, const RankCall& c, const std::string& op, int layer) {
  ScopeGuard block(env.ctx, "block" + std::to_string(env.rank));
  ScopeGuard attn(env.ctx, "attn");
  LayerGuard guard(env.ctx, layer);
  env.ctx.set_current_op(op);
  Tensor x = Tensor::zeros(env.ctx, {c.count}, c.dtype);
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      env.group.all_reduce(x, ReduceOp::sum);
      break;
    case CollectiveKind::all_gather:
      env.group.all_gather(x);
      break;
    case CollectiveKind::broadcast:
      env.group.broadcast(x, c.root);
      break;
    default:
      FAIL() << "not used here";
  }
}

struct MismatchCase {
  const char* name;
  std::vector<RankCall> calls;         // one per rank
  std::vector<std::string> described;  // how the message must describe each rank's call
};

class MismatchTest : public ::testing::TestWithParam<MismatchCase> {};

// Every rank gets a CommError naming each rank's call and where it came from; afterwards the
// group stays failed, so the next collective throws at once.
TEST_P(MismatchTest, EveryRankGetsACommErrorNamingEachRanksCall) {
  const MismatchCase& c = GetParam();
  const int world = static_cast<int>(c.calls.size());
  std::vector<std::string> comm_errors(c.calls.size()), later(c.calls.size());
  std::vector<Clock::duration> later_took(c.calls.size());
  const auto errors = spmd_errors(world, 2000ms, [&](RankEnv& env) {
    const auto u = static_cast<std::size_t>(env.rank);
    try {
      issue(env, c.calls[u], "op" + std::to_string(env.rank), 10 + env.rank);
    } catch (const CommError& e) {
      comm_errors[u] = e.what();  // each rank writes only its own entry
    }
    const auto start = Clock::now();
    try {
      env.group.barrier();
    } catch (const CommError& e) {
      later[u] = e.what();
    }
    later_took[u] = Clock::now() - start;
    throw std::runtime_error("rank " + std::to_string(env.rank) + " saw the mismatch");
  });
  EXPECT_EQ(errors.size(), c.calls.size());
  for (int r = 0; r < world; ++r) {
    const auto u = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::string& m = comm_errors[u];
    ASSERT_FALSE(m.empty()) << "rank " << r << " got no CommError";
    EXPECT_TRUE(contains(m, "collective mismatch")) << m;
    for (int q = 0; q < world; ++q) {
      const std::string line = "rank " + std::to_string(q) + " calls " +
                               c.described[static_cast<std::size_t>(q)] + " from op" +
                               std::to_string(q) + " in block" + std::to_string(q) +
                               ".attn (layer " + std::to_string(10 + q) + ", forward, step 0)";
      EXPECT_TRUE(contains(m, line)) << "missing: " << line << "\nin: " << m;
    }
    EXPECT_EQ(later[u], m) << "a later collective must throw the same failure";
    EXPECT_LT(ms(later_took[u]), 200);
  }
}

const MismatchCase kMismatches[] = {
    {"DifferentCollective",
     {{CollectiveKind::all_gather, 4, DType::f32}, {CollectiveKind::all_reduce, 4, DType::f32}},
     {"all_gather(count 4, f32)", "all_reduce(count 4, f32, sum)"}},
    {"DifferentCount",
     {{CollectiveKind::all_reduce, 4, DType::f32},
      {CollectiveKind::all_reduce, 4, DType::f32},
      {CollectiveKind::all_reduce, 6, DType::f32}},
     {"all_reduce(count 4, f32, sum)", "all_reduce(count 4, f32, sum)",
      "all_reduce(count 6, f32, sum)"}},
    {"DifferentDType",
     {{CollectiveKind::all_gather, 3, DType::f32},
      {CollectiveKind::all_gather, 3, DType::f64},
      {CollectiveKind::all_gather, 3, DType::f32},
      {CollectiveKind::all_gather, 3, DType::f32}},
     {"all_gather(count 3, f32)", "all_gather(count 3, f64)", "all_gather(count 3, f32)",
      "all_gather(count 3, f32)"}},
    {"DifferentRoot",
     {{CollectiveKind::broadcast, 2, DType::f64, 0}, {CollectiveKind::broadcast, 2, DType::f64, 1}},
     {"broadcast(count 2, f64, root 0)", "broadcast(count 2, f64, root 1)"}},
};

INSTANTIATE_TEST_SUITE_P(Calls, MismatchTest, ::testing::ValuesIn(kMismatches),
                         [](const ::testing::TestParamInfo<MismatchCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// Without catching: run_spmd's SpmdError lists every rank, each with the mismatch message.
TEST(Spmd, MismatchReachesRunSpmdWithEveryRank) {
  const auto errors = spmd_errors(3, 2000ms, [](RankEnv& env) {
    env.ctx.set_current_op(env.rank == 1 ? "gather_seq" : "reduce_seq");
    Tensor x = Tensor::zeros(env.ctx, {4});
    if (env.rank == 1) {
      env.group.all_gather(x);
    } else {
      env.group.all_reduce(x, ReduceOp::sum);
    }
  });
  ASSERT_EQ(errors.size(), 3u);
  std::vector<bool> seen(3, false);
  for (const auto& e : errors) {
    ASSERT_TRUE(e.rank >= 0 && e.rank < 3);
    seen[static_cast<std::size_t>(e.rank)] = true;
    EXPECT_TRUE(contains(e.message, "rank 1 calls all_gather(count 4, f32) from gather_seq"))
        << e.message;
    EXPECT_TRUE(contains(e.message, "rank 2 calls all_reduce(count 4, f32, sum) from reduce_seq"))
        << e.message;
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
}

// A rank throws before a collective the others already wait in: they are released at once with
// a CommError naming it, and the thrower's own message comes first. Repeated, because the order
// in which the ranks record their errors is a race that a single run may not show.
TEST(Spmd, ThrowingRankReleasesTheOthersAtOnce) {
  const int world = 4, thrower = 2;
  for (int iteration = 0; iteration < 30; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    const auto start = Clock::now();
    const auto errors = spmd_errors(world, 5000ms, [&](RankEnv& env) {
      Tensor x = Tensor::full(env.ctx, {8}, 1.0);
      env.group.all_reduce(x, ReduceOp::sum);  // one round that succeeds
      if (env.rank == thrower) {
        std::this_thread::sleep_for(5ms);  // let the others reach the next collective
        throw std::runtime_error("rank two ran out of coffee");
      }
      env.group.all_reduce(x, ReduceOp::sum);
    });
    EXPECT_LT(ms(Clock::now() - start), 1000) << "the waiting ranks were not released promptly";
    ASSERT_EQ(errors.size(), static_cast<std::size_t>(world));
    EXPECT_EQ(errors[0].rank, thrower);
    EXPECT_EQ(errors[0].message, "rank two ran out of coffee");
    std::vector<bool> seen(world, false);
    for (const auto& e : errors) seen[static_cast<std::size_t>(e.rank)] = true;
    EXPECT_EQ(seen, std::vector<bool>(world, true));
    for (std::size_t i = 1; i < errors.size(); ++i) {
      EXPECT_TRUE(contains(errors[i].message, "rank 2 failed: rank two ran out of coffee"))
          << errors[i].message;
    }
    if (HasFailure()) break;
  }
}

// The SpmdError's own message lists every rank's error too.
TEST(Spmd, SpmdErrorMessageListsEveryRank) {
  try {
    run_spmd(2, with_timeout(2000ms),
             [](RankEnv& env) { throw std::runtime_error("boom on " + std::to_string(env.rank)); });
    FAIL() << "expected SpmdError";
  } catch (const SpmdError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "2 rank(s) failed")) << m;
    EXPECT_TRUE(contains(m, "rank 0: boom on 0")) << m;
    EXPECT_TRUE(contains(m, "rank 1: boom on 1")) << m;
  }
}

// A rank that never arrives: the waiting ranks time out with a message saying where every rank
// is, and the latecomer's own collective then fails at once instead of waiting again.
TEST(Spmd, TimeoutSaysWhereEveryRankIs) {
  const auto timeout = 200ms;
  std::vector<std::string> late(3);
  std::vector<Clock::duration> late_took(3);
  const auto start = Clock::now();
  const auto errors = spmd_errors(3, timeout, [&](RankEnv& env) {
    {
      ScopeGuard embed(env.ctx, "embed");
      env.ctx.set_current_op("warmup");
      Tensor x = Tensor::full(env.ctx, {2}, 1.0);
      env.group.all_reduce(x, ReduceOp::sum);
    }
    if (env.rank == 1) {
      std::this_thread::sleep_for(600ms);  // far past the timeout; returns without a collective
      const auto before = Clock::now();
      try {
        env.group.barrier();
      } catch (const CommError& e) {
        late[1] = e.what();
      }
      late_took[1] = Clock::now() - before;
      return;
    }
    ScopeGuard attn(env.ctx, "attn");
    env.ctx.set_current_op("gather_seq");
    env.group.all_gather(Tensor::zeros(env.ctx, {3}));
  });
  EXPECT_LT(ms(Clock::now() - start), 3000);
  // Ranks 0 and 2 timed out; rank 1 returned, and its end-of-function barrier found the group
  // failed: every rank ends with an error.
  ASSERT_EQ(errors.size(), 3u);
  for (const auto& e : errors) {
    SCOPED_TRACE("rank " + std::to_string(e.rank));
    const std::string& m = e.message;
    EXPECT_TRUE(contains(m, "timed out after 200 ms")) << m;
    EXPECT_TRUE(contains(m, "rank 0 waits in all_gather(count 3, f32) from gather_seq in attn"))
        << m;
    EXPECT_TRUE(contains(m, "rank 2 waits in all_gather(count 3, f32) from gather_seq in attn"))
        << m;
    EXPECT_TRUE(contains(m,
                         "rank 1 has not arrived (last completed: all_reduce(count 2, f32, "
                         "sum) from warmup in embed"))
        << m;
  }
  EXPECT_TRUE(contains(late[1], "timed out")) << late[1];
  EXPECT_LT(ms(late_took[1]), 200);
}

// A rank that fails while others wait in a subgroup collective releases them too: the failure
// reaches the groups split from the world, not only the world group.
TEST(Spmd, ThrowingRankReleasesRanksWaitingInASubgroup) {
  const auto start = Clock::now();
  const auto errors = spmd_errors(4, 5000ms, [](RankEnv& env) {
    auto pair = env.comm.split(env.rank / 2, env.rank);  // {0, 1} and {2, 3}
    ProcessGroup group(env.ctx, *pair);
    if (env.rank == 3) {
      std::this_thread::sleep_for(5ms);
      throw std::runtime_error("rank three gave up");
    }
    Tensor x = Tensor::full(env.ctx, {4}, 1.0);
    group.all_reduce(x, ReduceOp::sum);  // ranks 0, 1 succeed; rank 2 waits for rank 3
    env.group.barrier();                 // ranks 0, 1 wait for 2 and 3
  });
  EXPECT_LT(ms(Clock::now() - start), 1000) << "a rank waited for the timeout in the subgroup";
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0].rank, 3);
  for (std::size_t i = 1; i < errors.size(); ++i) {
    EXPECT_TRUE(contains(errors[i].message, "rank three gave up")) << errors[i].message;
  }
}

// A failure that reaches a group while a round is under way lets that round finish on every rank:
// a rank that left early would let its caller overwrite a send buffer its peer is still reading.
// Ranks 0 and 1 all_gather in their pair and overwrite the send buffer at once, until rank 3's
// failure stops them; every gather that completed must hold exactly what was sent.
TEST(Spmd, FailureDuringARoundLetsEveryRankFinishReading) {
  std::vector<int> completed(4, 0), wrong(4, 0);
  const auto start = Clock::now();
  const auto errors = spmd_errors(4, 5000ms, [&](RankEnv& env) {
    const auto u = static_cast<std::size_t>(env.rank);
    auto pair = env.comm.split(env.rank / 2, env.rank);  // {0, 1} and {2, 3}
    ProcessGroup group(env.ctx, *pair);
    if (env.rank == 3) {
      std::this_thread::sleep_for(20ms);
      throw std::runtime_error("rank three gave up");
    }
    if (env.rank == 2) group.barrier();  // released by rank 3's failure
    const std::int64_t n = 1 << 14;
    Tensor local = Tensor::zeros(env.ctx, {n});
    for (int it = 0; Clock::now() - start < 3s; ++it) {
      const float mine = static_cast<float>(env.rank * 1000000 + it);
      std::fill(local.data<float>(), local.data<float>() + n, mine);
      const Tensor gathered = group.all_gather(local);
      std::fill(local.data<float>(), local.data<float>() + n, -1.0f);  // reuse the buffer at once
      const float* g = gathered.data<float>();
      for (std::int64_t i = 0; i < 2 * n; ++i) {
        if (g[i] != static_cast<float>((i / n) * 1000000 + it)) {
          ++wrong[u];
          break;
        }
      }
      ++completed[u];
    }
  });
  EXPECT_LT(ms(Clock::now() - start), 1000);
  EXPECT_EQ(errors.size(), 4u);
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  EXPECT_GT(completed[0], 0);
}

TEST(Spmd, RejectsBadWorldsAndCommKinds) {
  EXPECT_THROW(run_spmd(0, with_timeout(100ms), [](RankEnv&) {}), ArgumentError);
  EXPECT_EQ(parse_comm_kind("threads"), CommKind::threads);
  EXPECT_THROW(parse_comm_kind("carrier-pigeon"), ArgumentError);
  EXPECT_STREQ(comm_kind_name(CommKind::threads), "threads");
  if (!mpi_available()) {
    SpmdOptions options;
    options.comm = CommKind::mpi;
    EXPECT_THROW(run_spmd(2, options, [](RankEnv&) {}), ArgumentError);
  }
}

}  // namespace
}  // namespace shardscope

namespace shardscope {
namespace {

// A rank whose function returns while the others still wait in a collective meets them with its
// end-of-function barrier: a mismatch error on every rank at once, not a timeout.
TEST(SpmdEarlyReturn, IsAMismatchAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  try {
    run_spmd(2, options, [](RankEnv& env) {
      if (env.rank == 1) return;
      env.ctx.set_current_op("gather_seq");
      Tensor x = Tensor::full(env.ctx, {2}, 1.0);
      env.group.all_reduce(x, ReduceOp::sum);
    });
    FAIL() << "no error";
  } catch (const SpmdError& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    for (const auto& r : e.errors()) {
      EXPECT_NE(r.message.find("collective mismatch"), std::string::npos) << r.message;
      EXPECT_NE(r.message.find("rank 1 calls barrier(count 0, f32) from end of the rank function"),
                std::string::npos)
          << r.message;
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
}

}  // namespace
}  // namespace shardscope
