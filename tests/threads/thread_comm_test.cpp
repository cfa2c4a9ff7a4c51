// Tests of ThreadComm through run_spmd and ProcessGroup: every collective against a reference
// computed here, for groups of 1 to 4 ranks in f32 and f64; split into subgroups; the checks of
// validate_call; and the CollectiveEvent (with the ring formula's bytes) that ProcessGroup reports.
// Failures (mismatch, a throwing rank, timeouts) are in spmd_test.cpp.
#include "parallel/comm/thread_comm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "autograd/context.h"
#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/spmd.h"
#include "parallel/comm/stream_copy.h"

namespace shardscope {
namespace {

using namespace std::chrono_literals;

ThreadCommOptions long_timeout() {
  ThreadCommOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  return options;
}

// Short enough that a bug fails the test instead of hanging it; a correct run never waits long.
SpmdOptions bounded() {
  SpmdOptions options;
  options.timeout = 2000ms;
  return options;
}

// Values that differ per rank and per element, all small integers: exact in f32 and f64, so the
// reductions must match the reference exactly.
double value(int rank, std::int64_t i) {
  return rank * 100.0 + static_cast<double>(i);
}

std::vector<double> rank_values(int rank, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value(rank, i);
  return v;
}

// For the max reduction: which rank holds the largest value changes from element to element.
double max_value(int rank, int t, std::int64_t i) {
  return static_cast<double>((rank + i) % t) * 100.0 - static_cast<double>(i);
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

// Each rank runs every collective in turn (so one group also goes through many rounds) and
// keeps what it got; the test thread compares with references computed from value().
TEST_P(CollectivesTest, EveryCollectiveMatchesTheReference) {
  const int t = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  const std::int64_t rows = 2, cols = 3, n = rows * cols;  // one rank's chunk: [2, 3]
  const int root = t - 1;                                  // non-zero whenever t > 1
  std::vector<std::map<std::string, std::vector<double>>> got(static_cast<std::size_t>(t));
  std::vector<std::map<std::string, Shape>> shapes(static_cast<std::size_t>(t));
  std::atomic<int> before_barrier{0};
  std::vector<int> seen_at_barrier(static_cast<std::size_t>(t), -1);

  run_spmd(t, bounded(), [&](RankEnv& env) {
    const int r = env.rank;
    auto& mine = got[static_cast<std::size_t>(r)];
    auto& my_shapes = shapes[static_cast<std::size_t>(r)];
    auto keep = [&](const std::string& name, const Tensor& x) {
      EXPECT_EQ(x.dtype(), dtype) << name;
      mine[name] = x.to_vector();
      my_shapes[name] = x.shape();
    };
    Tensor sum = Tensor::from_vector(env.ctx, {rows, cols}, rank_values(r, n), dtype);
    env.group.all_reduce(sum, ReduceOp::sum);
    keep("all_reduce_sum", sum);

    std::vector<double> mx(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) mx[static_cast<std::size_t>(i)] = max_value(r, t, i);
    Tensor maxed = Tensor::from_vector(env.ctx, {rows, cols}, mx, dtype);
    env.group.all_reduce(maxed, ReduceOp::max);
    keep("all_reduce_max", maxed);

    Tensor local = Tensor::from_vector(env.ctx, {rows, cols}, rank_values(r, n), dtype);
    keep("all_gather", env.group.all_gather(local));

    Tensor full = Tensor::from_vector(env.ctx, {t * rows, cols}, rank_values(r, t * n), dtype);
    keep("reduce_scatter", env.group.reduce_scatter(full));
    keep("all_to_all", env.group.all_to_all(full));
    EXPECT_EQ(full.to_vector(), rank_values(r, t * n)) << "the send buffer must be unchanged";

    Tensor b = Tensor::from_vector(env.ctx, {rows, cols}, rank_values(r, n), dtype);
    env.group.broadcast(b, root);
    keep("broadcast", b);

    before_barrier.fetch_add(1);
    env.group.barrier();
    seen_at_barrier[static_cast<std::size_t>(r)] = before_barrier.load();
  });

  for (int r = 0; r < t; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(t));
    const auto& mine = got[static_cast<std::size_t>(r)];
    const auto& my_shapes = shapes[static_cast<std::size_t>(r)];
    std::vector<double> sum(n), mx(n), gathered(t * n), scattered(n), exchanged(t * n), bcast(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      sum[u] = 0;
      mx[u] = max_value(0, t, i);
      for (int q = 0; q < t; ++q) {
        sum[u] += value(q, i);
        mx[u] = std::max(mx[u], max_value(q, t, i));
        scattered[u] += value(q, r * n + i);
        gathered[static_cast<std::size_t>(q * n + i)] = value(q, i);
        exchanged[static_cast<std::size_t>(q * n + i)] = value(q, r * n + i);
      }
      bcast[u] = value(root, i);
    }
    EXPECT_EQ(mine.at("all_reduce_sum"), sum);
    EXPECT_EQ(mine.at("all_reduce_max"), mx);
    EXPECT_EQ(mine.at("all_gather"), gathered);
    EXPECT_EQ(my_shapes.at("all_gather"), Shape({t * rows, cols}));
    EXPECT_EQ(mine.at("reduce_scatter"), scattered);
    EXPECT_EQ(my_shapes.at("reduce_scatter"), Shape({rows, cols}));
    EXPECT_EQ(mine.at("all_to_all"), exchanged);
    EXPECT_EQ(my_shapes.at("all_to_all"), Shape({t * rows, cols}));
    EXPECT_EQ(mine.at("broadcast"), bcast);
    EXPECT_EQ(seen_at_barrier[static_cast<std::size_t>(r)], t) << "left the barrier too early";
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizesAndDTypes, CollectivesTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::f32, DType::f64)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& param_info) {
                           return "t" + std::to_string(std::get<0>(param_info.param)) + "_" +
                                  dtype_name(std::get<1>(param_info.param));
                         });

// Values that round differently in different summation orders: every rank must still get the
// same bits, the property that keeps replicated parameters identical across ranks.
TEST(ThreadComm, AllReduceGivesBitwiseIdenticalResultsOnEveryRank) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const int t = 4;
    const std::int64_t n = 257;
    std::vector<std::vector<unsigned char>> bytes(t);
    run_spmd(t, bounded(), [&](RankEnv& env) {
      std::vector<double> v(n);
      for (std::int64_t i = 0; i < n; ++i) {
        v[static_cast<std::size_t>(i)] =
            0.1 * (env.rank + 1) + 1e-3 * static_cast<double>(i) +
            (env.rank % 2 ? 1e7 : -1e7) / (1.0 + static_cast<double>(i));
      }
      Tensor x = Tensor::from_vector(env.ctx, {n}, v, dtype);
      env.group.all_reduce(x, ReduceOp::sum);
      const auto* p = static_cast<const unsigned char*>(x.raw_data());
      bytes[static_cast<std::size_t>(env.rank)].assign(p, p + x.bytes());
    });
    for (int r = 1; r < t; ++r) {
      EXPECT_EQ(bytes[static_cast<std::size_t>(r)], bytes[0]) << "rank " << r << dtype_name(dtype);
    }
  }
}

// Even and odd ranks of 4 form two groups of 2; key = -rank reverses the order within each.
TEST(ThreadComm, SplitFormsSubgroupsOrderedByKey) {
  const int t = 4;
  std::vector<int> sub_rank(t, -1), sub_size(t, -1);
  std::vector<std::vector<double>> sums(t), members(t), world_sums(t);
  run_spmd(t, bounded(), [&](RankEnv& env) {
    const auto u = static_cast<std::size_t>(env.rank);
    std::unique_ptr<Communicator> sub = env.comm.split(env.rank % 2, -env.rank);
    ProcessGroup group(env.ctx, *sub);
    sub_rank[u] = sub->rank();
    sub_size[u] = sub->size();
    EXPECT_STREQ(sub->backend_name(), "threads");
    Tensor x = Tensor::from_vector(env.ctx, {3}, rank_values(env.rank, 3));
    group.all_reduce(x, ReduceOp::sum);
    sums[u] = x.to_vector();
    Tensor me = Tensor::from_vector(env.ctx, {1}, {static_cast<double>(env.rank)});
    members[u] = group.all_gather(me).to_vector();
    // The world group still works after the split.
    Tensor w = Tensor::from_vector(env.ctx, {1}, {1.0});
    env.group.all_reduce(w, ReduceOp::sum);
    world_sums[u] = w.to_vector();
  });
  const std::vector<int> expected_rank{1, 1, 0,
                                       0};  // world rank 2 is first of the evens, 3 of odds
  for (int r = 0; r < t; ++r) {
    const auto u = static_cast<std::size_t>(r);
    SCOPED_TRACE("world rank " + std::to_string(r));
    EXPECT_EQ(sub_size[u], 2);
    EXPECT_EQ(sub_rank[u], expected_rank[u]);
    const double base = r % 2 == 0 ? 0 + 200 : 100 + 300;  // value(0) + value(2), or 1 and 3
    EXPECT_EQ(sums[u], (std::vector<double>{base, base + 2, base + 4}));
    EXPECT_EQ(members[u], (r % 2 == 0 ? std::vector<double>{2, 0} : std::vector<double>{3, 1}));
    EXPECT_EQ(world_sums[u], std::vector<double>{4.0});
  }
}

// Groups of unequal size (1 and 3), two splits in a row, and a split of a subgroup.
TEST(ThreadComm, SplitHandlesUnequalGroupsAndRepeatedSplits) {
  const int t = 4;
  std::vector<std::vector<double>> first(t), second(t), nested(t);
  run_spmd(t, bounded(), [&](RankEnv& env) {
    const auto u = static_cast<std::size_t>(env.rank);
    auto a = env.comm.split(env.rank == 0 ? 0 : 1, env.rank);  // {0} and {1, 2, 3}
    auto b = env.comm.split(env.rank < 2 ? 0 : 1, env.rank);   // {0, 1} and {2, 3}
    auto c = a->split(0, -a->rank());                          // the same members, reversed
    ProcessGroup ga(env.ctx, *a), gb(env.ctx, *b), gc(env.ctx, *c);
    Tensor me = Tensor::from_vector(env.ctx, {1}, {static_cast<double>(env.rank)});
    first[u] = ga.all_gather(me).to_vector();
    second[u] = gb.all_gather(me).to_vector();
    nested[u] = gc.all_gather(me).to_vector();
  });
  EXPECT_EQ(first[0], std::vector<double>{0});
  EXPECT_EQ(nested[0], std::vector<double>{0});
  for (int r = 1; r < t; ++r) {
    EXPECT_EQ(first[static_cast<std::size_t>(r)], (std::vector<double>{1, 2, 3}));
    EXPECT_EQ(nested[static_cast<std::size_t>(r)], (std::vector<double>{3, 2, 1}));
  }
  for (int r = 0; r < t; ++r) {
    EXPECT_EQ(second[static_cast<std::size_t>(r)],
              (r < 2 ? std::vector<double>{0, 1} : std::vector<double>{2, 3}));
  }
}

// Copies every CollectiveEvent (its Site views the context's strings, so they are copied).
struct RecordedCollective {
  CollectiveEvent event;
  std::string op, scope;
};

class CollectiveRecorder : public Observer {
 public:
  void on_collective(const CollectiveEvent& e) override {
    events.push_back({e, std::string(e.site.op), std::string(e.site.scope)});
  }
  std::vector<RecordedCollective> events;
};

// The ring formulas, written out here from the definitions rather than taken from comm_model:
// per rank, all_reduce sends 2 (t - 1) chunks of N / t, all_gather and reduce_scatter (t - 1)
// chunks of N / t (N: the gathered output or the scattered input), all_to_all keeps one of its t
// chunks and sends the rest, broadcast forwards N, barrier nothing.
TEST(ProcessGroup, ReportsEachCollectiveWithTheRingFormulaBytes) {
  for (int t = 1; t <= 4; ++t) {
    SCOPED_TRACE("t = " + std::to_string(t));
    std::vector<std::vector<RecordedCollective>> recorded(static_cast<std::size_t>(t));
    run_spmd(t, bounded(), [&](RankEnv& env) {
      CollectiveRecorder recorder;
      ObserverGuard attach(env.ctx, recorder);
      Context& ctx = env.ctx;
      {
        ScopeGuard attn(ctx, "attn");
        ScopeGuard qkv(ctx, "qkv");
        LayerGuard layer(ctx, 2);
        ctx.set_phase(Phase::backward);
        ctx.set_step(7);
        ctx.set_current_op("gather_seq");
        env.group.all_gather(Tensor::zeros(ctx, {2, 3}));  // 6 f32 per rank
      }
      ctx.set_phase(Phase::forward);
      ctx.set_current_op("grad_sync");
      Tensor g = Tensor::zeros(ctx, {5}, DType::f64);
      env.group.all_reduce(g, ReduceOp::max, CommPurpose::param_grad);
      ctx.set_current_op("scatter_seq");
      env.group.reduce_scatter(Tensor::zeros(ctx, {2 * t, 3}));
      env.group.all_to_all(Tensor::zeros(ctx, {t, 4}, DType::f64), CommPurpose::check);
      Tensor b = Tensor::zeros(ctx, {10});
      env.group.broadcast(b, 0, CommPurpose::loss);
      env.group.barrier();
      recorded[static_cast<std::size_t>(env.rank)] = recorder.events;
    });
    const double share = static_cast<double>(t - 1) / t;
    struct Expected {
      CollectiveKind kind;
      std::int64_t count;
      DType dtype;
      CommPurpose purpose;
      double full_bytes, bytes_sent;
    };
    const std::vector<Expected> expected{
        {CollectiveKind::all_gather, 6, DType::f32, CommPurpose::activation, 24.0 * t,
         24.0 * (t - 1)},
        {CollectiveKind::all_reduce, 5, DType::f64, CommPurpose::param_grad, 40, 2 * share * 40},
        {CollectiveKind::reduce_scatter, 6 * t, DType::f32, CommPurpose::activation, 24.0 * t,
         24.0 * (t - 1)},
        {CollectiveKind::all_to_all, 4 * t, DType::f64, CommPurpose::check, 32.0 * t,
         32.0 * (t - 1)},
        {CollectiveKind::broadcast, 10, DType::f32, CommPurpose::loss, 40, t > 1 ? 40.0 : 0.0},
        {CollectiveKind::barrier, 0, DType::f32, CommPurpose::activation, 0, 0},
    };
    for (int r = 0; r < t; ++r) {
      const auto& events = recorded[static_cast<std::size_t>(r)];
      ASSERT_EQ(events.size(), expected.size()) << "rank " << r;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        const CollectiveEvent& e = events[i].event;
        SCOPED_TRACE("rank " + std::to_string(r) + ", " + collective_name(expected[i].kind));
        EXPECT_EQ(e.kind, expected[i].kind);
        EXPECT_EQ(e.count, expected[i].count);
        EXPECT_EQ(e.dtype, expected[i].dtype);
        EXPECT_EQ(e.purpose, expected[i].purpose);
        EXPECT_EQ(e.group_size, t);
        EXPECT_EQ(e.site.rank, r);
        EXPECT_DOUBLE_EQ(e.full_bytes, expected[i].full_bytes);
        EXPECT_DOUBLE_EQ(e.bytes_sent, expected[i].bytes_sent);
      }
      const RecordedCollective& gather = events[0];
      EXPECT_EQ(gather.op, "gather_seq");
      EXPECT_EQ(gather.scope, "attn.qkv");
      EXPECT_EQ(gather.event.site.layer, 2);
      EXPECT_EQ(gather.event.site.phase, Phase::backward);
      EXPECT_EQ(gather.event.site.step, 7);
      EXPECT_EQ(events[1].op, "grad_sync");
      EXPECT_EQ(events[1].scope, "");
      EXPECT_EQ(events[1].event.site.layer, -1);
      EXPECT_EQ(events[1].event.site.phase, Phase::forward);
      EXPECT_EQ(events[1].event.reduce, ReduceOp::max);
      EXPECT_EQ(events[2].op, "scatter_seq");
    }
  }
}

CollectiveCall call_of(CollectiveKind kind, std::int64_t count, DType dtype = DType::f32) {
  CollectiveCall call;
  call.kind = kind;
  call.count = count;
  call.dtype = dtype;
  call.site.op = "test_op";
  return call;
}

template <class F>
std::string argument_error_of(F&& f) {
  try {
    f();
  } catch (const ArgumentError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an ArgumentError";
  return "";
}

TEST(ValidateCall, ChunkedCollectivesNeedACountDivisibleByTheGroupSize) {
  for (CollectiveKind kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_to_all}) {
    const std::string m = argument_error_of([&] { validate_call(call_of(kind, 5), 2, 1); });
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string(collective_name(kind)) + "(count 5"), std::string::npos) << m;
    EXPECT_NE(m.find("count must divide into 2 equal chunks"), std::string::npos) << m;
    EXPECT_NO_THROW(validate_call(call_of(kind, 6), 2, 1));
    EXPECT_NO_THROW(validate_call(call_of(kind, 6), 3, 0));
  }
  // all_gather and all_reduce take any count.
  EXPECT_NO_THROW(validate_call(call_of(CollectiveKind::all_gather, 5), 2, 0));
  EXPECT_NO_THROW(validate_call(call_of(CollectiveKind::all_reduce, 5), 2, 0));
}

TEST(ValidateCall, BroadcastNeedsARootInTheGroup) {
  for (int root : {-1, 3, 7}) {
    CollectiveCall call = call_of(CollectiveKind::broadcast, 4);
    call.root = root;
    const std::string m = argument_error_of([&] { validate_call(call, 3, 0); });
    EXPECT_NE(m.find("root " + std::to_string(root)), std::string::npos) << m;
    EXPECT_NE(m.find("root must be in [0, 3)"), std::string::npos) << m;
  }
  CollectiveCall ok = call_of(CollectiveKind::broadcast, 4);
  ok.root = 2;
  EXPECT_NO_THROW(validate_call(ok, 3, 0));
}

TEST(ValidateCall, RejectsNegativeCountsAndReductionsOfBytes) {
  std::string m =
      argument_error_of([&] { validate_call(call_of(CollectiveKind::all_gather, -1), 2, 0); });
  EXPECT_NE(m.find("count must be >= 0"), std::string::npos) << m;
  m = argument_error_of(
      [&] { validate_call(call_of(CollectiveKind::all_reduce, 4, DType::u8), 2, 0); });
  EXPECT_NE(m.find("reductions need f32 or f64"), std::string::npos) << m;
  EXPECT_NO_THROW(validate_call(call_of(CollectiveKind::all_gather, 4, DType::u8), 2, 0));
}

// A malformed call fails on the rank that issued it, before any wait, and leaves the group usable.
TEST(ThreadComm, MalformedCallsThrowArgumentErrorWithoutPoisoningTheGroup) {
  const int t = 2;
  std::vector<std::string> errors(t);
  std::vector<std::vector<double>> after(t);
  run_spmd(t, bounded(), [&](RankEnv& env) {
    const auto u = static_cast<std::size_t>(env.rank);
    std::vector<float> send(3), recv(3);
    const auto start = std::chrono::steady_clock::now();
    errors[u] = argument_error_of([&] {
      env.comm.run(call_of(CollectiveKind::reduce_scatter, 3), send.data(), recv.data());
    });
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count(),
              500);
    Tensor x = Tensor::from_vector(env.ctx, {2}, {1, 2});
    EXPECT_THROW(env.group.broadcast(x, 2), ArgumentError);
    EXPECT_THROW(env.group.reduce_scatter(Tensor::zeros(env.ctx, {3, 2})), ShapeError);
    env.group.all_reduce(x, ReduceOp::sum);
    after[u] = x.to_vector();
  });
  for (int r = 0; r < t; ++r) {
    const auto u = static_cast<std::size_t>(r);
    EXPECT_NE(errors[u].find("rank " + std::to_string(r)), std::string::npos) << errors[u];
    EXPECT_NE(errors[u].find("equal chunks"), std::string::npos) << errors[u];
    EXPECT_EQ(after[u], (std::vector<double>{2, 4}));
  }
}

TEST(ThreadComm, MakeThreadCommsNeedsAtLeastOneRank) {
  EXPECT_THROW(make_thread_comms(0), ArgumentError);
  auto comms = make_thread_comms(3);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->size(), 3);
  }
}

// A ring of buffered sends: every rank sends to the next, then receives from the previous, twice;
// messages between a pair arrive in order and carry their bytes unchanged.
TEST(ThreadCommPointToPoint, RingOfSendsThenReceivesDeliversInOrder) {
  const int t = 4;
  run_spmd(t, bounded(), [&](RankEnv& env) {
    const int next = (env.rank + 1) % t, prev = (env.rank + t - 1) % t;
    for (int round = 0; round < 2; ++round) {
      const std::vector<double> mine{10.0 * env.rank + round, -1.0 * round};
      env.comm.send(mine.data(), mine.size() * sizeof(double), next);
    }
    for (int round = 0; round < 2; ++round) {
      std::vector<double> got(2);
      env.comm.recv(got.data(), got.size() * sizeof(double), prev);
      EXPECT_EQ(got, (std::vector<double>{10.0 * prev + round, -1.0 * round}))
          << "rank " << env.rank << " round " << round;
    }
  });
}

TEST(ThreadCommPointToPoint, SizeMismatchIsAnErrorNamingBothSizes) {
  try {
    run_spmd(2, bounded(), [&](RankEnv& env) {
      std::vector<float> buf(8);
      if (env.rank == 0) env.comm.send(buf.data(), 8 * sizeof(float), 1);
      if (env.rank == 1) env.comm.recv(buf.data(), 4 * sizeof(float), 0);
    });
    FAIL() << "a recv of the wrong size did not throw";
  } catch (const SpmdError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(
                              "rank 1 called recv of 16 bytes from rank 0, whose message has 32"));
  }
}

TEST(ThreadCommPointToPoint, RecvWithoutASenderTimesOutNamingThePeer) {
  ThreadCommOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto comms = make_thread_comms(2, options);
  double x = 0;
  try {
    comms[1]->recv(&x, sizeof x, 0);
    FAIL() << "a recv with no sender did not throw";
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr("in recv of 8 bytes from rank 0, which sent it nothing"));
  }
}

TEST(ThreadCommPointToPoint, PeerOutOfRangeIsAnArgumentError) {
  auto comms = make_thread_comms(2);
  double x = 0;
  EXPECT_THROW(comms[0]->send(&x, sizeof x, 2), ArgumentError);
  EXPECT_THROW(comms[1]->recv(&x, sizeof x, -1), ArgumentError);
}

// A large all_reduce (64 KiB and up) is split among the ranks: rank r sums chunk r of every send
// buffer block by block and writes it into every output. The sums must still be the serial sum
// in rank order (so the same bits as a small all_reduce), for counts that divide neither into the
// group nor into blocks, in place and not, sum and max, f32 and f64; and a large reduce_scatter
// (blocked sums too) the same. Values round differently in other orders, so a wrong order fails.
class LargeReductions : public ::testing::TestWithParam<std::tuple<int, DType>> {};

template <class T>
std::vector<T> large_values(int rank, std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] =
        static_cast<T>(0.1 * (rank + 1) + (rank % 2 ? 3e5 : -3e5) / (1.0 + static_cast<double>(i)) +
                       1e-3 * static_cast<double>((i * 7919 + rank * 104729) % 1000));
  }
  return v;
}

template <class T>
void check_large_reductions(int t) {
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  // Above 64 KiB in both dtypes, a partial last block, and not a multiple of t (all_reduce).
  const std::int64_t n = 40000 + 3;
  const std::int64_t rs_n = (n / t) * t;  // reduce_scatter needs equal chunks
  std::vector<std::vector<T>> in(static_cast<std::size_t>(t));
  for (int r = 0; r < t; ++r) in[static_cast<std::size_t>(r)] = large_values<T>(r, n);
  std::vector<T> sum = in[0], mx = in[0];
  for (int r = 1; r < t; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      sum[u] += in[static_cast<std::size_t>(r)][u];
      mx[u] = std::max(mx[u], in[static_cast<std::size_t>(r)][u]);
    }
  }
  struct Got {
    std::vector<T> sum_out, sum_in_place, max_out, scattered;
    std::vector<T> send_after;
  };
  std::vector<Got> got(static_cast<std::size_t>(t));
  auto comms = make_thread_comms(t, long_timeout());
  std::vector<std::thread> ranks;
  for (int r = 0; r < t; ++r) {
    ranks.emplace_back([&, r] {
      Communicator& c = *comms[static_cast<std::size_t>(r)];
      Got& g = got[static_cast<std::size_t>(r)];
      const std::vector<T>& mine = in[static_cast<std::size_t>(r)];
      CollectiveCall call;
      call.kind = CollectiveKind::all_reduce;
      call.count = n;
      call.dtype = dtype;
      g.sum_out.assign(static_cast<std::size_t>(n), T(0));
      c.run(call, mine.data(), g.sum_out.data());
      g.send_after = mine;
      g.sum_in_place = mine;
      c.run(call, g.sum_in_place.data(), g.sum_in_place.data());
      call.reduce = ReduceOp::max;
      g.max_out.assign(static_cast<std::size_t>(n), T(0));
      c.run(call, mine.data(), g.max_out.data());
      call.kind = CollectiveKind::reduce_scatter;
      call.reduce = ReduceOp::sum;
      call.count = rs_n;
      g.scattered.assign(static_cast<std::size_t>(rs_n / t), T(0));
      c.run(call, mine.data(), g.scattered.data());
    });
  }
  for (std::thread& th : ranks) th.join();
  for (int r = 0; r < t; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(t));
    const Got& g = got[static_cast<std::size_t>(r)];
    EXPECT_TRUE(g.sum_out == sum) << "out of place all_reduce differs from the serial sum";
    EXPECT_TRUE(g.sum_in_place == sum) << "in-place all_reduce differs from the serial sum";
    EXPECT_TRUE(g.max_out == mx) << "all_reduce max differs";
    EXPECT_TRUE(g.send_after == in[static_cast<std::size_t>(r)]) << "send buffer changed";
    const std::int64_t chunk = rs_n / t;
    const std::vector<T> want(sum.begin() + r * chunk, sum.begin() + (r + 1) * chunk);
    EXPECT_TRUE(g.scattered == want) << "reduce_scatter differs from the serial sum";
  }
}

TEST_P(LargeReductions, EqualTheSerialSumInRankOrderBitForBit) {
  const int t = std::get<0>(GetParam());
  if (std::get<1>(GetParam()) == DType::f32) {
    check_large_reductions<float>(t);
  } else {
    check_large_reductions<double>(t);
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizesAndDTypes, LargeReductions,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values(DType::f32, DType::f64)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& param_info) {
                           return "t" + std::to_string(std::get<0>(param_info.param)) + "_" +
                                  dtype_name(std::get<1>(param_info.param));
                         });

// ---- traffic and streamed copies -------------------------------------------------------------

// Every kind, small and large (a split all_reduce of uneven chunks; outputs past
// kStreamOutputBytes, copied with streaming stores), in place and not, for 1 to 4 ranks: the bytes
// each rank reports moving equal thread_comm_traffic's formula.
TEST(ThreadCommTraffic, EachRankMovesTheBytesOfTheModel) {
  struct Case {
    CollectiveKind kind;
    std::int64_t count_per_rank;  // count = this x t (+1 for an all_reduce: uneven chunks)
  };
  const Case cases[] = {{CollectiveKind::all_reduce, 6},     {CollectiveKind::all_reduce, 9000},
                        {CollectiveKind::reduce_scatter, 5}, {CollectiveKind::reduce_scatter, 9000},
                        {CollectiveKind::all_gather, 7},     {CollectiveKind::all_to_all, 3},
                        {CollectiveKind::broadcast, 11},     {CollectiveKind::barrier, 0}};
  for (int t = 1; t <= 4; ++t) {
    for (const Case& k : cases) {
      for (bool in_place : {false, true}) {
        if (in_place &&
            (k.kind == CollectiveKind::all_gather || k.kind == CollectiveKind::reduce_scatter ||
             k.kind == CollectiveKind::barrier))
          continue;  // outputs of another size than the input
        CollectiveCall call;
        call.kind = k.kind;
        call.dtype = DType::f32;
        call.count = k.count_per_rank * (k.kind == CollectiveKind::all_gather ? 1 : t) +
                     (k.kind == CollectiveKind::all_reduce ? 1 : 0);
        call.root = t - 1;
        std::mutex mutex;
        std::map<int, CommTraffic> seen;
        ThreadCommOptions options;
        options.timeout = 2000ms;
        options.on_traffic = [&](int rank, const CommTraffic& traffic) {
          std::lock_guard<std::mutex> lock(mutex);
          seen[rank] = traffic;
        };
        auto comms = make_thread_comms(t, options);
        std::vector<std::thread> threads;
        for (int r = 0; r < t; ++r) {
          threads.emplace_back([&, r] {
            std::vector<float> send(static_cast<std::size_t>(std::max<std::int64_t>(call.count, 1)),
                                    1.0f);
            std::vector<float> recv(
                static_cast<std::size_t>(std::max<std::int64_t>(recv_elements(call, t), 1)));
            comms[static_cast<std::size_t>(r)]->run(call, send.data(),
                                                    in_place ? send.data() : recv.data());
          });
        }
        for (std::thread& th : threads) th.join();
        ASSERT_EQ(seen.size(), static_cast<std::size_t>(t));
        for (int r = 0; r < t; ++r) {
          const CommTraffic want = thread_comm_traffic(call, t, r, in_place);
          SCOPED_TRACE(call.str() + " rank " + std::to_string(r) + " of " + std::to_string(t) +
                       (in_place ? ", in place" : ""));
          EXPECT_EQ(seen[r].read, want.read);
          EXPECT_EQ(seen[r].written, want.written);
        }
      }
    }
  }
}

// The large outputs that ThreadComm writes with streaming stores hold the same bytes as plain
// stores would: every kind past kStreamOutputBytes (a split all_reduce's summed blocks too), into
// outputs that start 4 bytes past a cache line and end mid-line (stream_copy's plain head and
// tail).
TEST(ThreadCommTraffic, StreamedCopiesDeliverEveryByte) {
  const int t = 2;
  const std::int64_t out_count =
      static_cast<std::int64_t>(kStreamOutputBytes / sizeof(float)) + 2 * 7;
  const CollectiveKind kinds[] = {CollectiveKind::all_gather, CollectiveKind::all_to_all,
                                  CollectiveKind::broadcast, CollectiveKind::all_reduce,
                                  CollectiveKind::reduce_scatter};
  for (CollectiveKind kind : kinds) {
    CollectiveCall call;
    call.kind = kind;
    call.dtype = DType::f32;
    call.count = kind == CollectiveKind::all_gather       ? out_count / t
                 : kind == CollectiveKind::reduce_scatter ? out_count * t
                                                          : out_count;
    call.root = 1;
    auto comms = make_thread_comms(t, long_timeout());
    std::vector<std::vector<float>> send(t), recv(t);
    for (int r = 0; r < t; ++r) {
      send[r].resize(static_cast<std::size_t>(call.count));
      for (std::int64_t i = 0; i < call.count; ++i)
        send[r][static_cast<std::size_t>(i)] = static_cast<float>(r * 1000003 + i % 999983);
      recv[r].assign(static_cast<std::size_t>(out_count + 16), -1.0f);
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < t; ++r) {
      threads.emplace_back([&, r] {
        float* out = recv[r].data() + 1;  // 4 bytes past the vector's (16-byte aligned) start
        comms[static_cast<std::size_t>(r)]->run(call, send[r].data(), out);
      });
    }
    for (std::thread& th : threads) th.join();
    for (int r = 0; r < t; ++r) {
      std::vector<float> want(static_cast<std::size_t>(out_count));
      for (std::int64_t i = 0; i < out_count; ++i) {
        const auto u = static_cast<std::size_t>(i);
        const std::int64_t chunk = out_count / t;
        switch (kind) {
          case CollectiveKind::all_gather:
            want[u] = send[i / call.count][static_cast<std::size_t>(i % call.count)];
            break;
          case CollectiveKind::all_to_all:
            want[u] = send[i / chunk][static_cast<std::size_t>(r * chunk + i % chunk)];
            break;
          case CollectiveKind::all_reduce:  // small integers: the f32 sums are exact
            want[u] = send[0][u] + send[1][u];
            break;
          case CollectiveKind::reduce_scatter: {
            const auto from = static_cast<std::size_t>(r * out_count + i);
            want[u] = send[0][from] + send[1][from];
            break;
          }
          default:
            want[u] = send[1][u];
        }
      }
      const std::vector<float> got(recv[r].begin() + 1, recv[r].begin() + 1 + out_count);
      EXPECT_TRUE(got == want) << collective_name(kind) << ", rank " << r;
      EXPECT_EQ(recv[r][0], -1.0f) << "wrote before the output";
      EXPECT_EQ(recv[r][static_cast<std::size_t>(out_count + 1)], -1.0f) << "wrote past the output";
    }
  }
}

}  // namespace
}  // namespace shardscope
