// Fault injection (parallel/comm/fault_injection.h) on ranks as threads: the plan's parser and
// checks, and every kind of fault at a collective kind and at an op name, in a real layer run. Each
// run must end (the others by their timeout at worst, never a hang) with an error on every rank
// that names rank R, and with OP named by rank R's error or by the line the fault prints.
#include "parallel/comm/fault_injection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "parallel/comm/spmd.h"
#include "parallel/run/layer_run.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

using namespace std::chrono_literals;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

// ---- the plan -----------------------------------------------------------------------------

TEST(FaultPlanParse, TakesThePairsInAnyOrderWithThrowByDefault) {
  const FaultPlan a = parse_fault_plan("rank=1,at=all_gather");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.at, "all_gather");
  EXPECT_EQ(a.kind, FaultKind::throw_error);
  const FaultPlan b = parse_fault_plan("kind=skip-collective,at=gather_matmul,rank=0");
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.at, "gather_matmul");
  EXPECT_EQ(b.kind, FaultKind::skip_collective);
  EXPECT_EQ(parse_fault_plan("rank=3,at=matmul,kind=hang").kind, FaultKind::hang);
  EXPECT_EQ(parse_fault_plan("rank=3,at=matmul,kind=wrong-size").kind, FaultKind::wrong_size);
  EXPECT_EQ(parse_fault_plan("at=matmul,rank=12,kind=wrong-size").str(),
            "rank=12,at=matmul,kind=wrong-size");
}

TEST(FaultPlanParse, RefusesEachMalformedPlanNamingTheFlagWhatWasGivenAndTheForm) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "'' is not a key=value pair"},
      {"rank=1", "at is missing"},
      {"at=matmul", "rank is missing"},
      {"rank=1,at=", "at is empty"},
      {"rank=one,at=matmul", "rank 'one' is not a non-negative integer"},
      {"rank=-1,at=matmul", "rank '-1' is not a non-negative integer"},
      {"rank=1,at=matmul,kind=explode", "kind 'explode' is not a fault kind"},
      {"rank=1,at=matmul,kind=", "kind '' is not a fault kind"},
      {"rank=1,at=matmul,color=red", "'color' is not a key (the keys are rank, at and kind)"},
      {"rank=1,rank=2,at=matmul", "rank is given twice"},
      {"rank=1;at=matmul", "rank '1;at=matmul' is not a non-negative integer"},
      {"rank=1,at=matmul,", "'' is not a key=value pair"},
      {"rank=1,at=all-gather", "at=all-gather is spelled at=all_gather"},
  };
  for (const Case& c : cases) {
    try {
      parse_fault_plan(c.text);
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const ArgumentError& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("fault plan '" + std::string(c.text) + "'"), HasSubstr(c.why),
                        HasSubstr("expected rank=R,at=OP[,kind=throw|wrong-size|"
                                  "skip-collective|hang]")))
          << c.text;
    }
  }
}

TEST(FaultPlanCheck, RefusesARankOutsideTheGroupAndSizeFaultsWithoutTheCallCheck) {
  const FaultPlan far = parse_fault_plan("rank=2,at=all_gather");
  EXPECT_NO_THROW(check_fault_plan(far, 3, true));
  try {
    check_fault_plan(far, 2, true);
    ADD_FAILURE() << "rank 2 of 2 accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fault plan rank=2,at=all_gather,kind=throw: rank 2 is "
                                    "not a rank of this run: expected 0..1 (world 2)"));
  }
  for (const char* kind : {"wrong-size", "skip-collective"}) {
    const FaultPlan plan = parse_fault_plan(std::string("rank=0,at=all_gather,kind=") + kind);
    EXPECT_THROW(check_fault_plan(plan, 2, false), ArgumentError) << kind;
  }
  EXPECT_NO_THROW(check_fault_plan(parse_fault_plan("rank=0,at=x,kind=hang"), 2, false));
}

TEST(FaultPlanCheck, RunSpmdRefusesTheRankBeforeAnyRankStarts) {
  SpmdOptions options;
  options.fault = parse_fault_plan("rank=4,at=barrier");
  bool ran = false;
  EXPECT_THROW(run_spmd(4, options, [&](RankEnv&) { ran = true; }), ArgumentError);
  EXPECT_FALSE(ran);
}

// ---- faults in a layer run ------------------------------------------------------------------

struct Outcome {
  std::vector<SpmdError::RankError> errors;  // empty when run_spmd threw something else
  std::string printed;                       // stderr during the run (the faults' lines)
  long long took_ms = 0;
};

// Two ranks run the layer in `mode` (s=8 b=2 h=16 a=2, one step) with `plan` and `timeout`, on the
// CPU or sharing the CUDA devices (their collectives staged through host memory).
Outcome run_with_fault(ParallelMode mode, const std::string& plan,
                       std::chrono::milliseconds timeout, DeviceKind backend = DeviceKind::cpu) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 2;
  spec.layer.hidden = 16;
  spec.layer.heads = 2;
  spec.layer.mode = mode;
  spec.layer.degree = 2;
  spec.steps = 1;
  SpmdOptions options;
  options.timeout = timeout;
  options.backend = backend;
  options.fault = parse_fault_plan(plan);
  Outcome out;
  ::testing::internal::CaptureStderr();
  const auto start = Clock::now();
  try {
    run_spmd(2, options, [&](RankEnv& env) { run_layer_rank(env, spec); });
    ADD_FAILURE() << plan << ": the run succeeded";
  } catch (const SpmdError& e) {
    out.errors = e.errors();
  } catch (const std::exception& e) {
    ADD_FAILURE() << plan << ": not an SpmdError: " << e.what();
  }
  out.took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  out.printed = ::testing::internal::GetCapturedStderr();
  return out;
}

// Every rank failed, rank 1's error among them, and each error names rank 1.
void expect_every_rank_names_rank_1(const Outcome& o) {
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_NE(o.errors[0].rank, o.errors[1].rank);
  for (const auto& e : o.errors) EXPECT_THAT(e.message, HasSubstr("rank 1")) << e.message;
}

const std::string& message_of(const Outcome& o, int rank) {
  for (const auto& e : o.errors) {
    if (e.rank == rank) return e.message;
  }
  static const std::string none = "(no error from this rank)";
  return none;
}

// Faults that end at once (throw, wrong-size) run with a long timeout: the others must be
// released by the failure, not by waiting it out.
constexpr auto kLongTimeout = 5000ms;
// Faults that end by the others' timeout (skip-collective, hang) run with a short one.
constexpr auto kShortTimeout = 1000ms;

TEST(FaultInjection, ThrowAtACollectiveKindFailsEveryRankAtOnce) {
  const Outcome o = run_with_fault(ParallelMode::tp_sp, "rank=1,at=all_gather", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_EQ(o.errors[0].rank, 1);  // the cause comes first
  EXPECT_THAT(o.errors[0].message,
              HasSubstr("injected fault on rank 1 at all_gather (all_gather(count 128, f32) from "
                        "gather_matmul"));
  EXPECT_THAT(o.errors[1].message, HasSubstr("rank 1 failed: injected fault on rank 1 at "
                                             "all_gather"));
  EXPECT_LT(o.took_ms, kLongTimeout.count()) << "rank 0 waited for its timeout";
}

TEST(FaultInjection, ThrowAtAnOpNameFiresAtTheOpsFirstBegin) {
  const Outcome o = run_with_fault(ParallelMode::tp, "rank=1,at=matmul,kind=throw", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_EQ(o.errors[0].rank, 1);
  EXPECT_THAT(o.errors[0].message,
              HasSubstr("injected fault on rank 1 at matmul (op 'matmul' in attn.qkv (layer 0, "
                        "forward, rank 1))"));
  EXPECT_THAT(o.errors[1].message, HasSubstr("rank 1 failed: injected fault on rank 1 at matmul"));
  EXPECT_LT(o.took_ms, kLongTimeout.count());
}

TEST(FaultInjection, ThrowAtAnOpThatIsNoEngineOpMatchesTheCollectivesSite) {
  // reduce_parameter_gradients names the all-reduces of the replicated parameters' gradients.
  const Outcome o =
      run_with_fault(ParallelMode::tp_sp, "rank=1,at=reduce_parameter_gradients", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_THAT(message_of(o, 1), HasSubstr("injected fault on rank 1 at reduce_parameter_gradients "
                                          "(all_reduce(count "));
}

TEST(FaultInjection, WrongSizeAtACollectiveKindIsAMismatchNamingEachRanksCount) {
  const Outcome o =
      run_with_fault(ParallelMode::tp_sp, "rank=1,at=all_gather,kind=wrong-size", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  for (const auto& e : o.errors) {
    EXPECT_THAT(e.message,
                AllOf(HasSubstr("collective mismatch"),
                      HasSubstr("rank 0 calls all_gather(count 128, f32) from gather_matmul"),
                      HasSubstr("rank 1 calls all_gather(count 127, f32) from gather_matmul")));
  }
  EXPECT_THAT(message_of(o, 1), HasSubstr("on purpose: fault plan "
                                          "rank=1,at=all_gather,kind=wrong-size"));
  EXPECT_THAT(o.printed, HasSubstr("injected fault: rank 1 runs all_gather(count 128"));
  EXPECT_LT(o.took_ms, kLongTimeout.count());
}

TEST(FaultInjection, WrongSizeOfAChunkedKindStaysDivisibleByTheGroup) {
  // reduce_scatter_seq cuts [s, b, h] = 256 elements into 2 chunks: rank 1 sends 254, one element
  // fewer per chunk, so the call is well formed and the mismatch check is what fails it.
  const Outcome o =
      run_with_fault(ParallelMode::tp_sp, "rank=1,at=reduce_scatter,kind=wrong-size", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  for (const auto& e : o.errors) {
    EXPECT_THAT(e.message, AllOf(HasSubstr("collective mismatch"),
                                 HasSubstr("rank 0 calls reduce_scatter(count 256, f32, sum)"),
                                 HasSubstr("rank 1 calls reduce_scatter(count 254, f32, sum)")));
  }
}

TEST(FaultInjection, WrongSizeAtAnOpNameActsOnTheCollectiveItIssues) {
  const Outcome o =
      run_with_fault(ParallelMode::tp_sp, "rank=1,at=gather_matmul,kind=wrong-size", kLongTimeout);
  expect_every_rank_names_rank_1(o);
  for (const auto& e : o.errors) {
    EXPECT_THAT(e.message, HasSubstr("rank 1 calls all_gather(count 127, f32) from gather_matmul"));
  }
}

TEST(FaultInjection, SkipCollectiveAtACollectiveKindEndsByAMismatchOrTheTimeout) {
  const Outcome o =
      run_with_fault(ParallelMode::tp, "rank=1,at=all_reduce,kind=skip-collective", kShortTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_THAT(message_of(o, 1),
              AllOf(HasSubstr("skipped all_reduce("), HasSubstr("reduce_from_tp")));
  EXPECT_THAT(o.printed, HasSubstr("injected fault: rank 1 skips all_reduce("));
  EXPECT_LT(o.took_ms, 3 * kShortTimeout.count());
}

TEST(FaultInjection, SkipCollectiveAtAnOpNameSkipsTheCollectiveItIssues) {
  const Outcome o = run_with_fault(ParallelMode::tp_sp,
                                   "rank=1,at=gather_matmul,kind=skip-collective", kShortTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_THAT(message_of(o, 1), HasSubstr("skipped all_gather(count 128, f32) from gather_matmul"));
  EXPECT_THAT(o.printed, HasSubstr("injected fault: rank 1 skips all_gather(count 128, f32) from "
                                   "gather_matmul"));
  EXPECT_LT(o.took_ms, 3 * kShortTimeout.count());
}

TEST(FaultInjection, HangAtACollectiveKindTimesTheOthersOutFirst) {
  const Outcome o =
      run_with_fault(ParallelMode::tp_sp, "rank=1,at=all_gather,kind=hang", kShortTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_EQ(o.errors[0].rank, 0);  // rank 0 times out before rank 1's hang ends
  EXPECT_THAT(o.errors[0].message,
              AllOf(HasSubstr("collective timed out after 1000 ms"),
                    HasSubstr("rank 0 waits in all_gather(count 128, f32) from gather_matmul"),
                    HasSubstr("rank 1 has not arrived")));
  // Rank 1 wakes as soon as rank 0 failed, long before its limit (1000 + 1000 ms).
  EXPECT_THAT(message_of(o, 1),
              AllOf(HasSubstr("injected hang on rank 1 at all_gather ended after"),
                    HasSubstr("ms (another rank failed): it slept instead of running "
                              "all_gather(count 128")));
  EXPECT_THAT(o.printed, HasSubstr("injected fault: rank 1 hangs instead of running all_gather"));
  EXPECT_LT(o.took_ms, 3 * kShortTimeout.count());
}

TEST(FaultInjection, HangAtAnOpNameLeavesTheOthersWaitingAtTheirNextCollective) {
  const Outcome o = run_with_fault(ParallelMode::tp, "rank=1,at=softmax,kind=hang", kShortTimeout);
  expect_every_rank_names_rank_1(o);
  EXPECT_EQ(o.errors[0].rank, 0);
  EXPECT_THAT(o.errors[0].message, AllOf(HasSubstr("collective timed out after 1000 ms"),
                                         HasSubstr("rank 1 has not arrived")));
  EXPECT_THAT(message_of(o, 1),
              AllOf(HasSubstr("injected hang on rank 1 at softmax ended after"),
                    HasSubstr("it slept instead of running op 'softmax' in attn")));
  EXPECT_LT(o.took_ms, 3 * kShortTimeout.count());
}

// Every kind of fault on ranks sharing a GPU: the staged collectives fail as ThreadComm's do, an
// error on every rank naming rank 1, within the bounds above. Its cuda instance has label gpu.
class FaultInjectionOnBackends : public ::testing::TestWithParam<testing::TestBackend> {
 protected:
  void SetUp() override { SHARDSCOPE_SKIP_IF_MISSING(testing::missing_for_ranks(GetParam(), 2)); }
};

TEST_P(FaultInjectionOnBackends, EveryKindFailsEveryRankNamingTheFaultyRank) {
  const DeviceKind backend = testing::device_of(GetParam()).kind;
  struct Case {
    const char* plan;
    std::chrono::milliseconds timeout;
    const char* said;  // by rank 1's error
  };
  const Case cases[] = {
      {"rank=1,at=all_gather", kLongTimeout, "injected fault on rank 1 at all_gather"},
      {"rank=1,at=all_gather,kind=wrong-size", kLongTimeout,
       "rank 1 calls all_gather(count 127, f32) from gather_matmul"},
      {"rank=1,at=all_reduce,kind=skip-collective", kShortTimeout, "skipped all_reduce("},
      {"rank=1,at=all_gather,kind=hang", kShortTimeout, "injected hang on rank 1 at all_gather"},
  };
  for (const Case& c : cases) {
    const Outcome o = run_with_fault(ParallelMode::tp_sp, c.plan, c.timeout, backend);
    expect_every_rank_names_rank_1(o);
    EXPECT_THAT(message_of(o, 1), HasSubstr(c.said)) << c.plan;
    EXPECT_LT(o.took_ms, 3 * c.timeout.count()) << c.plan;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjectionOnBackends,
                         ::testing::Values(testing::TestBackend::cuda), testing::BackendName());

TEST(FaultInjection, AFaultThatNeverFiresIsAnErrorAfterTheRun) {
  // tp issues no all-to-all.
  // Checked before the launcher's final barrier, so rank 0 fails in that barrier naming rank 1
  // (instead of going on to report a run that rank 1 fails).
  const Outcome o = run_with_fault(ParallelMode::tp, "rank=1,at=all_to_all", kLongTimeout);
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0].rank, 1);
  EXPECT_THAT(o.errors[0].message,
              AllOf(HasSubstr("injected fault: rank 1 never reached all_to_all (rank 1 issued "),
                    HasSubstr("(kinds: all_gather, all_reduce"), HasSubstr("matmul")));
  EXPECT_EQ(o.errors[1].rank, 0);
  EXPECT_THAT(o.errors[1].message,
              HasSubstr("rank 1 failed: injected fault: rank 1 never reached all_to_all"));
  EXPECT_LT(o.took_ms, kLongTimeout.count() / 2) << "the barrier must fail at once, not time out";
}

TEST(FaultInjection, ASizeFaultAtAnOpThatIssuesNoCollectiveNeverFires) {
  const Outcome o =
      run_with_fault(ParallelMode::tp, "rank=1,at=matmul,kind=skip-collective", kLongTimeout);
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0].rank, 1);
  EXPECT_THAT(o.errors[0].message,
              HasSubstr("injected fault: rank 1 never reached a collective issued by matmul: "
                        "kind skip-collective acts on collectives"));
}

// ---- without a layer: one rank, split communicators -------------------------------------

TEST(FaultInjection, OneRankCannotDisagreeWithItselfSoWrongSizeStillFails) {
  SpmdOptions options;
  options.fault = parse_fault_plan("rank=0,at=barrier,kind=wrong-size");
  ::testing::internal::CaptureStderr();
  try {
    run_spmd(1, options, [](RankEnv&) {});  // the launcher's final barrier
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    EXPECT_THAT(e.what(), HasSubstr("injected wrong-size on rank 0 at barrier: rank 0 runs "
                                    "barrier(count 0, f32) from end of the rank function"));
    EXPECT_THAT(e.what(), HasSubstr("with count 1 instead of 0, and the call check let it "
                                    "through (a group of 1 rank)"));
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(FaultInjection, SkippingTheLastCollectiveIsStillAnErrorWithoutWaitingForTheTimeout) {
  // Rank 1 skips the launcher's final barrier, so nothing is left to disagree with: its own check
  // after the run fails it (under MPI the others would otherwise wait in the barrier for ever).
  SpmdOptions options;
  options.timeout = kLongTimeout;
  options.fault = parse_fault_plan("rank=1,at=barrier,kind=skip-collective");
  ::testing::internal::CaptureStderr();
  const auto start = Clock::now();
  try {
    run_spmd(2, options, [](RankEnv&) {});
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_EQ(e.errors()[0].rank, 1);
    EXPECT_THAT(e.errors()[0].message,
                HasSubstr("injected skip-collective on rank 1 at barrier: rank 1 skipped "
                          "barrier(count 0, f32) from end of the rank function"));
    EXPECT_THAT(e.errors()[1].message, HasSubstr("rank 1 failed: injected skip-collective"));
  }
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count(),
            kLongTimeout.count());
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("injected fault: rank 1 skips barrier(count 0, f32)"));
}

TEST(FaultInjection, ACommunicatorSplitFromTheRanksCarriesTheFault) {
  SpmdOptions options;
  options.timeout = kLongTimeout;
  options.fault = parse_fault_plan("rank=1,at=broadcast");
  try {
    run_spmd(2, options, [](RankEnv& env) {
      std::unique_ptr<Communicator> sub = env.comm.split(0, env.rank);
      ProcessGroup group(env.ctx, *sub);
      Tensor x = Tensor::zeros(env.ctx, {4}, DType::f32);
      env.ctx.set_current_op("handing out the seed");
      group.broadcast(x, 0);
    });
    ADD_FAILURE() << "no error";
  } catch (const SpmdError& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_THAT(e.errors()[0].message,
                HasSubstr("injected fault on rank 1 at broadcast (broadcast(count 4, f32, root 0) "
                          "from handing out the seed"));
  }
}

TEST(FaultInjection, TheOtherRanksRunWithoutTheFault) {
  // Rank 0's plan on rank 0 only: rank 1 issues its collectives untouched, so the throw comes
  // from rank 0 and rank 1 fails only as its peer.
  const Outcome o = run_with_fault(ParallelMode::tp, "rank=0,at=all_reduce", kLongTimeout);
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0].rank, 0);
  EXPECT_THAT(message_of(o, 1), HasSubstr("rank 0 failed: injected fault on rank 0"));
  EXPECT_THAT(message_of(o, 1), Not(HasSubstr("injected fault on rank 1")));
}

}  // namespace
}  // namespace shardscope
