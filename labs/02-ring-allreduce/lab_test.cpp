// Lab 2's tests: the ring reduce-scatter, all-gather and all-reduce against ProcessGroup's
// collectives on the same data (t = 1, 2, 3, 4, 8 ranks as threads), and the traffic each rank
// sends, counted by a Communicator that wraps the real one, against the ring formulas:
// (t - 1) messages of N / t elements per half, 2 (t - 1) / t * N * sizeof(double) bytes for the
// all-reduce. Then a measurement that prints (never asserts) the time and bus bandwidth of the
// ring against ThreadComm's built-in all-reduce, and a disabled stretch test for uneven chunks.
#include "labs/02-ring-allreduce/lab.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "labs/common/lab_testing.h"
#include "parallel/comm/process_group.h"
#include "parallel/comm/spmd.h"

namespace shardscope::labs {
namespace {

using namespace std::chrono_literals;

constexpr int kDegrees[] = {1, 2, 3, 4, 8};
constexpr std::size_t kChunk = 5;  // elements per chunk in the correctness tests: N = 5 t

// What one rank's ring sent and received, as counted by CountingComm.
struct Traffic {
  int sends = 0, recvs = 0;
  std::size_t bytes_sent = 0, bytes_received = 0;
  std::set<int> send_peers, recv_peers;
  std::vector<std::size_t> message_bytes;   // of each send, in order
  std::vector<CollectiveKind> collectives;  // built-in collectives called through run()
};

// A Communicator that forwards every call to the rank's real one and counts what passes through
// send, recv and run. The tests hand it to the student's functions.
class CountingComm final : public Communicator {
 public:
  explicit CountingComm(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* backend_name() const override { return inner_.backend_name(); }
  void run(const CollectiveCall& call, const void* send, void* recv) override {
    traffic_.collectives.push_back(call.kind);
    inner_.run(call, send, recv);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_.split(color, key);
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  void send(const void* data, std::size_t bytes, int peer) override {
    ++traffic_.sends;
    traffic_.bytes_sent += bytes;
    traffic_.send_peers.insert(peer);
    traffic_.message_bytes.push_back(bytes);
    inner_.send(data, bytes, peer);
  }
  void recv(void* data, std::size_t bytes, int peer) override {
    ++traffic_.recvs;
    traffic_.bytes_received += bytes;
    traffic_.recv_peers.insert(peer);
    inner_.recv(data, bytes, peer);
  }
  const Traffic& traffic() const { return traffic_; }

 private:
  Communicator& inner_;
  Traffic traffic_;
};

// A rank's inputs: normal values, different for every rank and degree, in f64.
std::vector<double> rank_input(Context& ctx, std::size_t n, int rank, int t) {
  return Tensor::randn(ctx, {static_cast<std::int64_t>(n)}, 1000u * t + rank, 1.0, DType::f64)
      .to_vector();
}

Tensor as_tensor(Context& ctx, const std::vector<double>& v) {
  return Tensor::from_vector(ctx, {static_cast<std::int64_t>(v.size())}, v, DType::f64);
}

std::vector<double> slice(const std::vector<double>& v, std::size_t first, std::size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(first),
          v.begin() + static_cast<std::ptrdiff_t>(first + n)};
}

// One rank's outcome: the student's result, the framework's, everything the diagnosis needs.
struct RankOutcome {
  std::vector<double> input, got, want, full_sum;
  std::vector<double> scattered;  // the stretch test's reduce-scatter result
  Traffic traffic;
};

using RankCase = std::function<void(RankEnv&, CountingComm&, RankOutcome&)>;

// Runs `body` on t ranks as threads; a rank that fails (a throw, a recv nobody answers within the
// timeout) fails the run with every rank's message.
std::vector<RankOutcome> run_ranks(int t, const RankCase& body,
                                   std::chrono::milliseconds timeout = 3000ms) {
  std::vector<RankOutcome> out(static_cast<std::size_t>(t));
  SpmdOptions options;
  options.timeout = timeout;
  try {
    run_spmd(t, options, [&](RankEnv& env) {
      CountingComm counting(env.comm);
      RankOutcome& mine = out[static_cast<std::size_t>(env.rank)];
      body(env, counting, mine);
      mine.traffic = counting.traffic();
    });
  } catch (const SpmdError& e) {
    const std::string what = e.what();
    const bool waited = what.find(" waited ") != std::string::npos;
    throw Error("with t = " + std::to_string(t) + " ranks: " + what +
                (waited ? "\n  (a recv that no send matches: rank r sends to (r + 1) % t and "
                          "receives from (r - 1 + t) % t, once per step, every step)"
                        : ""));
  }
  return out;
}

// Said on a wrong result at t > 2 when t = 2 was right.
std::string indexing_hint(int t, bool two_passed) {
  if (t <= 2 || !two_passed) return "";
  return " [t = 2 passes but t = " + std::to_string(t) +
         " does not: with two ranks every chunk index is right or off by one, so the chunk "
         "indexing is likely wrong: which chunk does rank r send and receive at step k?]";
}

// ---- correctness against ProcessGroup ----

TEST(RingReduceScatter, MatchesProcessGroupReduceScatter) {
  bool two_passed = false;
  for (int t : kDegrees) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const std::size_t n = kChunk, n_total = kChunk * static_cast<std::size_t>(t);
    const auto ranks = run_ranks(t, [&](RankEnv& env, CountingComm& comm, RankOutcome& o) {
      o.input = rank_input(env.ctx, n_total, env.rank, t);
      o.got = ring_reduce_scatter(comm, o.input);
      o.want = env.group.reduce_scatter(as_tensor(env.ctx, o.input)).to_vector();
      Tensor sum = as_tensor(env.ctx, o.input);
      env.group.all_reduce(sum, ReduceOp::sum);
      o.full_sum = sum.to_vector();
    });
    bool all_ok = true;
    for (int r = 0; r < t; ++r) {
      const RankOutcome& o = ranks[static_cast<std::size_t>(r)];
      const auto result = matches(
          "ring_reduce_scatter (t = " + std::to_string(t) + ", rank " + std::to_string(r) + ")",
          o.got, o.want, t,
          Hints()
              .if_times_t("every rank's values were added t times: is a chunk reduced again "
                          "after it is complete, or summed into a buffer that already holds it?")
              .if_zeros("are you returning a fresh buffer instead of your running sums?"));
      if (result) continue;
      all_ok = false;
      std::string why;
      if (o.got.size() == n) {
        for (int c = 0; c < t; ++c) {
          if (c != r && matches("", o.got, slice(o.full_sum, c * n, n), t)) {
            why = " [you returned chunk " + std::to_string(c) + " of the sum; rank " +
                  std::to_string(r) + " must end with chunk " + std::to_string(r) +
                  ": shift which chunk each step sends]";
          }
        }
        if (why.empty() && matches("", o.got, slice(o.input, r * n, n), t)) {
          why =
              " [you returned this rank's own chunk r unchanged: nothing was added to it; the "
              "last step must receive into chunk r]";
        }
      }
      EXPECT_TRUE(result) << (why.empty() ? indexing_hint(t, two_passed) : why);
      break;  // the first rank that is wrong at this degree says enough
    }
    if (t == 2) two_passed = all_ok;
  }
}

TEST(RingAllGather, MatchesProcessGroupAllGather) {
  bool two_passed = false;
  for (int t : kDegrees) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const std::size_t n = kChunk;
    const auto ranks = run_ranks(t, [&](RankEnv& env, CountingComm& comm, RankOutcome& o) {
      o.input = rank_input(env.ctx, n, env.rank, t);
      o.got = ring_all_gather(comm, o.input);
      o.want = env.group.all_gather(as_tensor(env.ctx, o.input)).to_vector();
    });
    bool all_ok = true;
    for (int r = 0; r < t; ++r) {
      const RankOutcome& o = ranks[static_cast<std::size_t>(r)];
      const auto result = matches(
          "ring_all_gather (t = " + std::to_string(t) + ", rank " + std::to_string(r) + ")", o.got,
          o.want, t, Hints().if_zeros("is the received data copied into the output?"));
      if (result) continue;
      all_ok = false;
      // Which rank's chunk sits in each slot of the output?
      std::ostringstream slots;
      bool misplaced = false;
      if (o.got.size() == o.want.size()) {
        for (int slot = 0; slot < t; ++slot) {
          const std::vector<double> part = slice(o.got, slot * n, n);
          for (int from = 0; from < t; ++from) {
            if (from != slot && matches("", part, ranks[static_cast<std::size_t>(from)].input, t)) {
              slots << " slot " << slot << " holds rank " << from << "'s chunk;";
              misplaced = true;
            }
          }
        }
      }
      EXPECT_TRUE(result) << (misplaced ? " [" + slots.str() +
                                              " slot i must hold rank i's chunk: which rank's "
                                              "chunk arrives from the left at step k?]"
                                        : indexing_hint(t, two_passed));
      break;
    }
    if (t == 2) two_passed = all_ok;
  }
}

// ring_all_reduce's result on rank r against ProcessGroup's.
::testing::AssertionResult judge_all_reduce(int t, int r, const RankOutcome& o) {
  const std::size_t n = o.want.size() / static_cast<std::size_t>(t);
  const std::string what =
      "ring_all_reduce (t = " + std::to_string(t) + ", rank " + std::to_string(r) + ")";
  if (t > 1 && o.got.size() == n &&
      matches("", o.got, slice(o.want, static_cast<std::size_t>(r) * n, n), t)) {
    return ::testing::AssertionFailure()
           << what << ": " << n << " elements, expected " << o.want.size()
           << ": only your own chunk is complete: you returned the reduce-scatter's chunk " << r
           << "; is the all-gather phase missing? ring_all_gather it to every rank";
  }
  // The reduce-scatter's result, chunk r, is right but the rest is not: the all-gather is missing.
  const bool own_chunk_only = t > 1 && o.got.size() == o.want.size() &&
                              matches("", slice(o.got, static_cast<std::size_t>(r) * n, n),
                                      slice(o.want, static_cast<std::size_t>(r) * n, n), t);
  return matches(
      what, o.got, o.want, t,
      Hints()
          .if_times_t("reduced twice: the complete sums went through a second reduction "
                      "(a second reduce-scatter, or an all-gather that adds what it receives "
                      "to sums instead of copying it)")
          .if_over_t("averaged instead of summed?")
          .if_zeros("is the all-gather's result returned?")
          .otherwise(own_chunk_only
                         ? "only your own chunk is complete: chunk " + std::to_string(r) +
                               " holds the sum, the other chunks do not; is the all-gather phase "
                               "missing? After the reduce-scatter, ring_all_gather the complete "
                               "chunk to every rank"
                         : "ring_all_reduce is ring_reduce_scatter, then ring_all_gather of its "
                           "result: do the RingReduceScatter and RingAllGather tests pass?"));
}

TEST(RingAllReduce, MatchesProcessGroupAllReduce) {
  bool two_passed = false;
  for (int t : kDegrees) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const std::size_t n_total = kChunk * static_cast<std::size_t>(t);
    const auto ranks = run_ranks(t, [&](RankEnv& env, CountingComm& comm, RankOutcome& o) {
      o.input = rank_input(env.ctx, n_total, env.rank, t);
      o.got = ring_all_reduce(comm, o.input);
      Tensor want = as_tensor(env.ctx, o.input);
      env.group.all_reduce(want, ReduceOp::sum);
      o.want = want.to_vector();
    });
    bool all_ok = true;
    for (int r = 0; r < t; ++r) {
      const auto result = judge_all_reduce(t, r, ranks[static_cast<std::size_t>(r)]);
      if (result) continue;
      all_ok = false;
      EXPECT_TRUE(result) << indexing_hint(t, two_passed);
      break;
    }
    if (t == 2) two_passed = all_ok;
  }
}

// ---- the traffic: messages and bytes per rank against the ring formulas ----

// What is wrong with one rank's traffic for `halves` ring halves (1: reduce-scatter or
// all-gather, 2: all-reduce) over a buffer of n_total doubles, or "" when it is right: (t - 1)
// messages per half, each one chunk of n_total / t elements, all to one neighbour, each received,
// and no built-in collective.
std::string ring_traffic_problem(const Traffic& tr, int t, int r, std::size_t n_total, int halves) {
  std::ostringstream m;
  for (CollectiveKind kind : tr.collectives) {
    m << "\n  called the built-in collective " << collective_name(kind)
      << " through comm.run: build the ring from comm.send and comm.recv only";
  }
  const std::size_t chunk_bytes = n_total / static_cast<std::size_t>(t) * sizeof(double);
  const int want_messages = halves * (t - 1);
  const std::size_t want_bytes = static_cast<std::size_t>(want_messages) * chunk_bytes;
  if (tr.bytes_sent != want_bytes || tr.sends != want_messages) {
    m << "\n  sent " << tr.sends << " messages, " << tr.bytes_sent << " bytes; want "
      << (halves == 2 ? "2 (t - 1)" : "t - 1") << " = " << want_messages << " messages of one chunk"
      << " (N/t = " << n_total / static_cast<std::size_t>(t) << " doubles), "
      << (halves == 2 ? "2 (t - 1)/t" : "(t - 1)/t") << " x N x 8 = " << want_bytes
      << " bytes (N = " << n_total << " doubles): ";
    const auto whole =
        std::count(tr.message_bytes.begin(), tr.message_bytes.end(), n_total * sizeof(double));
    if (t > 1 && whole > 0) {
      m << "each step sends the whole buffer instead of one chunk of N/t (" << whole << " of the "
        << tr.sends << " messages carry all N elements)";
    } else if (tr.sends != want_messages) {
      m << "each ring half is t - 1 steps of one message each"
        << (halves == 2 ? " (ring_all_reduce is one reduce-scatter, then one all-gather)" : "");
    } else {
      m << "each message must be exactly one chunk of N/t elements";
    }
  }
  if (tr.recvs != tr.sends) {
    m << "\n  received " << tr.recvs << " messages but sent " << tr.sends
      << ": at every ring step a rank sends one chunk and receives one";
  }
  const int right = (r + 1) % t, left = (r - 1 + t) % t;
  const bool ring = tr.send_peers.empty() ||
                    (tr.send_peers.size() == 1 &&
                     (*tr.send_peers.begin() == right || *tr.send_peers.begin() == left));
  if (!ring) {
    m << "\n  sent to ranks";
    for (int p : tr.send_peers) m << " " << p;
    m << ": on a ring a rank sends to one neighbour only, (r + 1) % t = " << right;
  }
  return m.str();
}

// Runs `fn` at every degree and checks each rank's traffic; stops at the first degree with a
// problem and reports its first rank that has one.
void expect_ring_traffic(
    const char* what, int halves,
    const std::function<std::vector<double>(RankEnv&, Communicator&, int t)>& fn,
    const std::function<std::size_t(int t)>& n_total_of) {
  for (int t : kDegrees) {
    const auto ranks = run_ranks(
        t, [&](RankEnv& env, CountingComm& comm, RankOutcome& o) { o.got = fn(env, comm, t); });
    for (int r = 0; r < t; ++r) {
      const std::string problem = ring_traffic_problem(ranks[static_cast<std::size_t>(r)].traffic,
                                                       t, r, n_total_of(t), halves);
      if (!problem.empty()) {
        ADD_FAILURE() << what << " at t = " << t << ", rank " << r << ":" << problem;
        return;
      }
    }
  }
}

TEST(RingReduceScatter, SendsTMinusOneChunksToTheNextRank) {
  expect_ring_traffic(
      "ring_reduce_scatter", 1,
      [](RankEnv& env, Communicator& comm, int t) {
        return ring_reduce_scatter(comm, rank_input(env.ctx, kChunk * t, env.rank, t));
      },
      [](int t) { return kChunk * t; });
}

TEST(RingAllGather, SendsTMinusOneChunksToTheNextRank) {
  expect_ring_traffic(
      "ring_all_gather", 1,
      [](RankEnv& env, Communicator& comm, int t) {
        return ring_all_gather(comm, rank_input(env.ctx, kChunk, env.rank, t));
      },
      [](int t) { return kChunk * t; });
}

TEST(RingAllReduce, SendsTwoTimesTMinusOneOverTTimesNBytes) {
  expect_ring_traffic(
      "ring_all_reduce", 2,
      [](RankEnv& env, Communicator& comm, int t) {
        return ring_all_reduce(comm, rank_input(env.ctx, kChunk * t, env.rank, t));
      },
      [](int t) { return kChunk * t; });
}

// ---- the measurement: prints, never asserts on time ----

// Buffer sizes in MiB: SHARDSCOPE_LAB02_MIB="1,4,16,64" to measure more; the default stays small
// so that the lab's tests run in a couple of seconds.
std::vector<int> bench_sizes_mib() {
  std::vector<int> sizes;
  const char* env = std::getenv("SHARDSCOPE_LAB02_MIB");
  std::stringstream list(env && *env ? env : "1,2,4");
  std::string item;
  while (std::getline(list, item, ',')) {
    const int mib = std::atoi(item.c_str());
    if (mib > 0) sizes.push_back(mib);
  }
  return sizes;
}

struct Timing {
  double ring_s = 0, builtin_s = 0;  // best of the repetitions
};

TEST(RingAllReduce, MeasureTimeAndBusBandwidthAgainstTheBuiltIn) {
  constexpr int t = 4, kRepeats = 3;
  std::printf(
      "\nall-reduce of S bytes (f64) on t = %d ranks as threads, best of %d; "
      "algbw = S / time, busbw = algbw * 2(t-1)/t\n"
      "%9s | %10s %12s %12s | %10s %12s %12s\n",
      t, kRepeats, "S", "ring time", "ring algbw", "ring busbw", "built-in", "algbw", "busbw");
  for (int mib : bench_sizes_mib()) {
    const std::size_t n_total = static_cast<std::size_t>(mib) * (1u << 20) / sizeof(double);
    Timing timing;
    std::vector<std::vector<double>> ring_out(t), builtin_out(t);
    SpmdOptions options;
    options.timeout = 60000ms;
    run_spmd(t, options, [&](RankEnv& env) {
      const std::vector<double> input(n_total, 1.0 + env.rank);
      auto time_it = [&](const std::function<void()>& fn) {
        env.group.barrier();
        const auto start = std::chrono::steady_clock::now();
        fn();
        env.group.barrier();  // the time of the slowest rank
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      };
      double ring_best = 1e30, builtin_best = 1e30;
      std::vector<double> ring_result;
      Tensor builtin = as_tensor(env.ctx, input);
      for (int rep = 0; rep < kRepeats; ++rep) {
        ring_best =
            std::min(ring_best, time_it([&] { ring_result = ring_all_reduce(env.comm, input); }));
        std::copy(input.begin(), input.end(), builtin.data<double>());
        builtin_best =
            std::min(builtin_best, time_it([&] { env.group.all_reduce(builtin, ReduceOp::sum); }));
      }
      ring_out[static_cast<std::size_t>(env.rank)] = std::move(ring_result);
      builtin_out[static_cast<std::size_t>(env.rank)] = builtin.to_vector();
      if (env.rank == 0) timing = {ring_best, builtin_best};
    });
    const double bytes = static_cast<double>(n_total * sizeof(double));
    const double bus = 2.0 * (t - 1) / t;
    auto gbs = [](double b, double s) { return b / s / 1e9; };
    std::printf("%5d MiB | %8.2f ms %7.2f GB/s %7.2f GB/s | %7.2f ms %7.2f GB/s %7.2f GB/s\n", mib,
                timing.ring_s * 1e3, gbs(bytes, timing.ring_s), gbs(bytes, timing.ring_s) * bus,
                timing.builtin_s * 1e3, gbs(bytes, timing.builtin_s),
                gbs(bytes, timing.builtin_s) * bus);
    EXPECT_TRUE(matches("ring_all_reduce of " + std::to_string(mib) + " MiB (rank 0)", ring_out[0],
                        builtin_out[0], t))
        << " (the timing above is of a wrong result)";
  }
  std::fflush(stdout);
}

// ---- stretch task (not required): N not divisible by t ----
// Run with --gtest_also_run_disabled_tests. Chunk c has N / t elements, one more for the first
// N % t chunks (numpy.array_split's cut); N < t leaves some chunks empty.

TEST(RingStretch, DISABLED_UnevenChunks) {
  for (int t : {3, 4}) {
    for (std::size_t n_total : {std::size_t{10}, std::size_t{3}, std::size_t{1}}) {
      SCOPED_TRACE("t = " + std::to_string(t) + ", N = " + std::to_string(n_total));
      const auto ranks = run_ranks(t, [&](RankEnv& env, CountingComm& comm, RankOutcome& o) {
        o.input = rank_input(env.ctx, n_total, env.rank, t);
        o.scattered = ring_reduce_scatter(comm, o.input);
        o.got = ring_all_reduce(comm, o.input);
      });
      std::vector<double> sum(n_total, 0.0);
      for (const RankOutcome& o : ranks) {
        for (std::size_t i = 0; i < n_total; ++i) sum[i] += o.input[i];
      }
      std::size_t first = 0;
      for (int r = 0; r < t; ++r) {
        const RankOutcome& o = ranks[static_cast<std::size_t>(r)];
        const std::size_t n = n_total / t + (static_cast<std::size_t>(r) < n_total % t ? 1 : 0);
        EXPECT_TRUE(matches("ring_all_reduce, rank " + std::to_string(r), o.got, sum, t));
        EXPECT_TRUE(matches("ring_reduce_scatter, rank " + std::to_string(r), o.scattered,
                            slice(sum, first, n), t));
        first += n;
      }
    }
  }
}

#ifdef SHARDSCOPE_LAB_GRADER_TESTS
// ---- the graders' own tests (the instructor's tree only) ----------------------------------------
// A planted student mistake, judged by the helper the lab's test uses: the hint must name it.

TEST(GraderHints, AllReduceWithoutTheAllGatherIsNamed) {
  constexpr int t = 4;
  const auto ranks = run_ranks(t, [&](RankEnv& env, CountingComm& /*comm*/, RankOutcome& o) {
    o.input = rank_input(env.ctx, kChunk * t, env.rank, t);
    // The planted ring_all_reduce: the reduce-scatter into chunk r, and no all-gather.
    const std::vector<double> mine =
        env.group.reduce_scatter(as_tensor(env.ctx, o.input)).to_vector();
    o.got = o.input;
    std::copy(mine.begin(), mine.end(),
              o.got.begin() + static_cast<std::ptrdiff_t>(env.rank * kChunk));
    Tensor want = as_tensor(env.ctx, o.input);
    env.group.all_reduce(want, ReduceOp::sum);
    o.want = want.to_vector();
  });
  const ::testing::AssertionResult r = judge_all_reduce(t, 1, ranks[1]);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.message(), ::testing::HasSubstr("only your own chunk is complete"));
  // The other form: the reduce-scatter's chunk returned as the result.
  RankOutcome chunk_only = ranks[1];
  chunk_only.got = slice(chunk_only.want, kChunk, kChunk);
  const ::testing::AssertionResult c = judge_all_reduce(t, 1, chunk_only);
  ASSERT_FALSE(c);
  EXPECT_THAT(c.message(), ::testing::HasSubstr("only your own chunk is complete"));
}
#endif

}  // namespace
}  // namespace shardscope::labs
