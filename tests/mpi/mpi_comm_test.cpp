// Tests of MpiComm, run by mpiexec as a world of 4 processes (label mpi): every collective against
// a reference every rank computes for itself, out of place and in place, split, and the checks
// (a mismatch or a malformed call fails on every rank, and the ranks go on). Every rank runs every
// test in the same order, so a test must never skip a collective on some ranks only: assertions
// that return early come before the first collective or are the same on every rank.
#include "parallel/comm/mpi_comm.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "parallel/comm/spmd.h"

namespace shardscope {
namespace {

constexpr int kWorld = 4;

// Rank r's element i. Inputs are small integers, so every sum below is exact in f32 and f64:
// results compare with ==.
double value(int rank, std::int64_t i) {
  return rank * 100.0 + static_cast<double>(i);
}

template <class T>
std::vector<T> rank_values(int rank, std::int64_t n) {
  std::vector<T> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = T(value(rank, i));
  return out;
}

CollectiveCall make_call(CollectiveKind kind, std::int64_t count, DType dtype = DType::f32) {
  CollectiveCall call;
  call.kind = kind;
  call.count = count;
  call.dtype = dtype;
  call.site.op = "mpi_comm_test";
  return call;
}

template <class T>
void expect_values(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << what << " element " << i;
  }
}

TEST(MpiComm, ReportsTheWorld) {
  MpiComm comm(MPI_COMM_WORLD);
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  ASSERT_EQ(comm.size(), kWorld) << "run this binary with mpiexec -n " << kWorld;
  EXPECT_EQ(comm.rank(), world_rank);
  EXPECT_STREQ(comm.backend_name(), "mpi");
}

template <class T>
void check_all_reduce(MpiComm& comm, DType dtype, ReduceOp op, bool in_place) {
  constexpr std::int64_t n = 12;
  std::vector<T> send = rank_values<T>(comm.rank(), n);
  std::vector<T> recv(send.size(), T(-1));
  std::vector<T> want(send.size(), T(0));
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<T> other = rank_values<T>(r, n);
    for (std::size_t i = 0; i < want.size(); ++i) {
      want[i] = op == ReduceOp::sum ? T(want[i] + other[i]) : std::max(want[i], other[i]);
    }
  }
  CollectiveCall call = make_call(CollectiveKind::all_reduce, n, dtype);
  call.reduce = op;
  comm.run(call, send.data(), in_place ? send.data() : recv.data());
  expect_values(in_place ? send : recv, want, call.str() + (in_place ? " in place" : ""));
}

TEST(MpiComm, AllReduceSumsAndMaxesEveryRanksValues) {
  MpiComm comm(MPI_COMM_WORLD);
  for (bool in_place : {false, true}) {
    check_all_reduce<float>(comm, DType::f32, ReduceOp::sum, in_place);
    check_all_reduce<float>(comm, DType::f32, ReduceOp::max, in_place);
    check_all_reduce<double>(comm, DType::f64, ReduceOp::sum, in_place);
    check_all_reduce<double>(comm, DType::f64, ReduceOp::max, in_place);
  }
}

template <class T>
void check_all_gather(MpiComm& comm, DType dtype, bool in_place) {
  constexpr std::int64_t n = 5;
  std::vector<T> send = rank_values<T>(comm.rank(), n);
  std::vector<T> recv(static_cast<std::size_t>(kWorld * n), T(0));
  std::vector<T> want;
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<T> other = rank_values<T>(r, n);
    want.insert(want.end(), other.begin(), other.end());
  }
  const CollectiveCall call = make_call(CollectiveKind::all_gather, n, dtype);
  if (in_place) std::copy(send.begin(), send.end(), recv.begin());  // send is the start of recv
  comm.run(call, in_place ? recv.data() : send.data(), recv.data());
  expect_values(recv, want, call.str() + (in_place ? " in place" : ""));
}

TEST(MpiComm, AllGatherConcatenatesInRankOrder) {
  MpiComm comm(MPI_COMM_WORLD);
  for (bool in_place : {false, true}) {
    check_all_gather<float>(comm, DType::f32, in_place);
    check_all_gather<double>(comm, DType::f64, in_place);
    check_all_gather<unsigned char>(comm, DType::u8, in_place);  // values < 256 for n = 5
  }
}

TEST(MpiComm, ReduceScatterSumsEachRanksChunk) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr std::int64_t chunk = 3;
  constexpr std::int64_t n = kWorld * chunk;
  std::vector<float> want(static_cast<std::size_t>(chunk), 0.0f);
  for (int r = 0; r < kWorld; ++r) {
    for (std::int64_t i = 0; i < chunk; ++i) {
      want[static_cast<std::size_t>(i)] += float(value(r, comm.rank() * chunk + i));
    }
  }
  const CollectiveCall call = make_call(CollectiveKind::reduce_scatter, n);
  std::vector<float> send = rank_values<float>(comm.rank(), n);
  std::vector<float> recv(static_cast<std::size_t>(chunk), -1.0f);
  comm.run(call, send.data(), recv.data());
  expect_values(recv, want, call.str());
  comm.run(call, send.data(), send.data());  // in place: the result is the first chunk
  send.resize(static_cast<std::size_t>(chunk));
  expect_values(send, want, call.str() + " in place");
}

TEST(MpiComm, AllToAllSendsChunkJToRankJ) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr std::int64_t chunk = 2;
  constexpr std::int64_t n = kWorld * chunk;
  std::vector<double> want;
  for (int r = 0; r < kWorld; ++r) {
    for (std::int64_t i = 0; i < chunk; ++i) want.push_back(value(r, comm.rank() * chunk + i));
  }
  const CollectiveCall call = make_call(CollectiveKind::all_to_all, n, DType::f64);
  std::vector<double> send = rank_values<double>(comm.rank(), n);
  std::vector<double> recv(static_cast<std::size_t>(n), -1.0);
  comm.run(call, send.data(), recv.data());
  expect_values(recv, want, call.str());
  comm.run(call, send.data(), send.data());
  expect_values(send, want, call.str() + " in place");
}

TEST(MpiComm, BroadcastCopiesTheRootsValues) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr std::int64_t n = 7;
  CollectiveCall call = make_call(CollectiveKind::broadcast, n);
  call.root = 2;
  const std::vector<float> want = rank_values<float>(call.root, n);
  std::vector<float> send = rank_values<float>(comm.rank(), n);
  std::vector<float> recv(static_cast<std::size_t>(n), -1.0f);
  comm.run(call, send.data(), recv.data());
  expect_values(recv, want, call.str());
  comm.run(call, send.data(), send.data());
  expect_values(send, want, call.str() + " in place");
}

TEST(MpiComm, BarrierAndEmptyCallsComplete) {
  MpiComm comm(MPI_COMM_WORLD);
  comm.run(make_call(CollectiveKind::barrier, 0), nullptr, nullptr);
  float none = 0;
  comm.run(make_call(CollectiveKind::all_reduce, 0), &none, &none);
  comm.run(make_call(CollectiveKind::all_gather, 0), &none, &none);
  comm.run(make_call(CollectiveKind::all_to_all, 0), &none, &none);
}

// Large enough that OpenMPI leaves its eager path for its large-message protocol.
TEST(MpiComm, LargeAllReduceIsExact) {
  MpiComm comm(MPI_COMM_WORLD);
  constexpr std::int64_t n = 1 << 20;
  std::vector<float> data(static_cast<std::size_t>(n), float(comm.rank() + 1));
  comm.run(make_call(CollectiveKind::all_reduce, n), data.data(), data.data());
  const float want = kWorld * (kWorld + 1) / 2;
  std::int64_t wrong = 0;
  for (float x : data) wrong += x != want;
  EXPECT_EQ(wrong, 0) << "elements differ from " << want;
}

TEST(MpiComm, SplitOrdersRanksByKeyThenOldRank) {
  MpiComm comm(MPI_COMM_WORLD);
  // Colors: even ranks {0, 2}, odd ranks {1, 3}; key -rank reverses each group.
  std::unique_ptr<Communicator> half = comm.split(comm.rank() % 2, -comm.rank());
  ASSERT_EQ(half->size(), 2);
  EXPECT_EQ(half->rank(), comm.rank() < 2 ? 1 : 0);
  EXPECT_STREQ(half->backend_name(), "mpi");
  double mine = comm.rank();
  std::vector<double> members(2, -1.0);
  half->run(make_call(CollectiveKind::all_gather, 1, DType::f64), &mine, members.data());
  const double low = comm.rank() % 2;
  expect_values(members, {low + 2, low}, "members of the split, in new-rank order");
  half->run(make_call(CollectiveKind::all_reduce, 1, DType::f64), &mine, &mine);
  EXPECT_EQ(mine, 2 * low + 2);
}

TEST(MpiComm, SplitRejectsANegativeColorOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  try {
    comm.split(comm.rank() == 1 ? -1 : 0, 0);
    ADD_FAILURE() << "split with a negative color on rank 1 did not throw";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 passed color -1"), std::string::npos) << e.what();
  }
}

CollectiveCall layer_call(CollectiveKind kind, const char* op, const char* scope) {
  CollectiveCall call = make_call(kind, 64);
  call.site.op = op;
  call.site.scope = scope;
  call.site.layer = 0;
  call.site.step = 3;
  return call;
}

// Rank 2 gathers while the others all-reduce: every rank gets a CommError naming each rank's
// call and call site, and the communicator still works afterwards.
TEST(MpiComm, MismatchThrowsOnEveryRankNamingEachCall) {
  MpiComm comm(MPI_COMM_WORLD);
  const CollectiveCall call =
      comm.rank() == 2 ? layer_call(CollectiveKind::all_gather, "gather_seq", "attn.qkv")
                       : layer_call(CollectiveKind::all_reduce, "reduce_from_tp", "mlp.fc2");
  std::vector<float> send(64, 1.0f);
  std::vector<float> recv(kWorld * 64, 0.0f);
  try {
    comm.run(call, send.data(), recv.data());
    ADD_FAILURE() << "rank " << comm.rank() << ": the mismatched collective did not throw";
  } catch (const CommError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("collective mismatch"), std::string::npos) << message;
    for (int r = 0; r < kWorld; ++r) {
      const std::string line =
          "rank " + std::to_string(r) + " calls " +
          (r == 2 ? "all_gather(count 64, f32) from gather_seq in attn.qkv"
                  : "all_reduce(count 64, f32, sum) from reduce_from_tp in mlp.fc2") +
          " (layer 0, forward, step 3)";
      EXPECT_NE(message.find(line), std::string::npos) << "missing: " << line << "\n" << message;
    }
  }
  double one = 1.0;
  comm.run(make_call(CollectiveKind::all_reduce, 1, DType::f64), &one, &one);
  EXPECT_EQ(one, kWorld) << "the communicator after a mismatch";
}

TEST(MpiComm, LongCallSitesAreTruncatedInTheMismatchMessage) {
  MpiComm comm(MPI_COMM_WORLD);
  CollectiveCall call = make_call(CollectiveKind::barrier, comm.rank() == 0 ? 1 : 0);
  call.site.scope = std::string(400, 's');
  try {
    comm.run(call, nullptr, nullptr);
    ADD_FAILURE() << "barriers of different counts did not throw";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("sss...\n  rank 1 calls barrier(count 0"),
              std::string::npos)
        << e.what();
  }
}

// Every rank validates the same call after the check, so all of them throw and none waits.
TEST(MpiComm, MalformedCallFailsOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  std::vector<float> send(6, 0.0f);
  std::vector<float> recv(6, 0.0f);
  EXPECT_THROW(comm.run(make_call(CollectiveKind::reduce_scatter, 6), send.data(), recv.data()),
               ArgumentError);
  CollectiveCall bad_root = make_call(CollectiveKind::broadcast, 6);
  bad_root.root = kWorld;
  EXPECT_THROW(comm.run(bad_root, send.data(), recv.data()), ArgumentError);
  comm.run(make_call(CollectiveKind::barrier, 0), nullptr, nullptr);
}

TEST(RunSpmdMpi, RunsTheRankFunctionInEveryProcess) {
  SpmdOptions options;
  options.comm = CommKind::mpi;
  int ran = 0;
  run_spmd(kWorld, options, [&](RankEnv& env) {
    ++ran;
    EXPECT_EQ(env.world, kWorld);
    EXPECT_EQ(env.comm.rank(), env.rank);
    EXPECT_EQ(env.ctx.rank(), env.rank);
    EXPECT_STREQ(env.comm.backend_name(), "mpi");
    Tensor t = Tensor::full(env.ctx, {3}, env.rank + 1.0);
    env.group.all_reduce(t, ReduceOp::sum);
    expect_values(t.to_vector(), {10.0, 10.0, 10.0}, "ProcessGroup::all_reduce");
    Tensor gathered = env.group.all_gather(Tensor::full(env.ctx, {1, 2}, env.rank));
    expect_values(gathered.to_vector(), {0, 0, 1, 1, 2, 2, 3, 3}, "ProcessGroup::all_gather");
  });
  EXPECT_EQ(ran, 1) << "this process runs its own rank only";
}

TEST(RunSpmdMpi, RejectsADegreeOtherThanTheWorldSize) {
  SpmdOptions options;
  options.comm = CommKind::mpi;
  try {
    run_spmd(kWorld - 1, options, [](RankEnv&) { ADD_FAILURE() << "the rank function ran"; });
    ADD_FAILURE() << "--degree 3 under a world of 4 did not throw";
  } catch (const ArgumentError& e) {
    EXPECT_STREQ(e.what(), "world 3 but mpirun started 4 processes");
  }
}

// Ranks other than 0 print only their failures, each line marked with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new shardscope::RankFailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS();
  int any_failed = 0;  // every process exits with the same status
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
