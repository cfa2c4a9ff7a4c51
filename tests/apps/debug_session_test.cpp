// The terminal debugger driven by a script, as a person types it: it starts paused before the
// first op on every rank, steps every rank together, reaches a collective and says where each rank
// is, stops at breakpoints, prints tensors, memory and collectives, and quits cleanly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "apps/debug_session.h"
#include "apps/live_session.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunOptions small_run(ParallelMode mode, int degree) {
  RunOptions o;
  o.spec.layer.mode = mode;
  o.spec.layer.degree = degree;
  o.spec.layer.seq = 8;
  o.spec.layer.batch = 2;
  o.spec.layer.hidden = 16;
  o.spec.layer.heads = 4;
  o.spec.steps = 1;
  return o;
}

std::string session(const RunOptions& o, const std::string& script, int* code = nullptr) {
  std::istringstream in(script);
  std::ostringstream out;
  const int rc = debug_main(o, in, out);
  if (code) *code = rc;
  return out.str();
}

TEST(DebugSession, StartsPausedAndStepsEveryRankTogether) {
  const std::string out = session(small_run(ParallelMode::tp_sp, 2), "step\nwhere\nquit\n");
  EXPECT_THAT(out, HasSubstr("rank 0: paused, stop 1 at op 1: ln1/layernorm forward"));
  EXPECT_THAT(out, HasSubstr("rank 1: paused, stop 1 at op 1: ln1/layernorm forward"));
  EXPECT_THAT(out, HasSubstr("rank 0: paused, stop 2 at op 2: attn.qkv/gather_matmul forward"));
  EXPECT_THAT(out, HasSubstr("rank 1: paused, stop 2 at op 2: attn.qkv/gather_matmul forward"));
  EXPECT_THAT(out, HasSubstr("debug session ended; the run was stopped"));
}

TEST(DebugSession, NextCollectiveReachesACollectiveAndSaysWhereEachRankIs) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const std::string out = session(small_run(mode, 2), "next-collective\ncomm\nquit\n");
    SCOPED_TRACE(mode_name(mode));
    const char* first = mode == ParallelMode::tp      ? "attn.proj/reduce_from_tp forward"
                        : mode == ParallelMode::tp_sp ? "attn.qkv/gather_matmul forward"
                                                      : "attn.heads/seq_to_heads forward";
    const char* kind = mode == ParallelMode::tp      ? "before all_reduce(count 256, f32, 2 ranks"
                       : mode == ParallelMode::tp_sp ? "before all_gather(count 128, f32, 2 ranks"
                                                     : "before all_to_all(count 128, f32, 2 ranks";
    for (const char* rank : {"rank 0: paused", "rank 1: paused"}) {
      EXPECT_THAT(out, HasSubstr(std::string(rank) + ", stop 2 at op")) << out;
    }
    EXPECT_THAT(out, HasSubstr(first)) << out;
    EXPECT_THAT(out, HasSubstr(kind)) << out;
    EXPECT_THAT(out, HasSubstr("no collectives yet")) << out;  // paused before the first one
  }
}

TEST(DebugSession, BreakpointsPrintMemAndHelp) {
  const std::string out =
      session(small_run(ParallelMode::tp, 2),
              "frobnicate\nbreak gelu\ncontinue\nprint mlp.fc1.weight\nprint output\nmem\n"
              "break phase backward\ncontinue\nprint mlp.fc2.weight.grad\nquit\n");
  EXPECT_THAT(out, HasSubstr("unknown command 'frobnicate'; commands: step [N], next-collective"));
  EXPECT_THAT(out, HasSubstr("breakpoint 1: gelu, on every rank"));
  EXPECT_THAT(out, HasSubstr("rank 0: paused, stop 2 at op"));
  EXPECT_THAT(out, HasSubstr("mlp.gelu/gelu forward (layer 0, step 0, rank 1)"));
  EXPECT_THAT(out, HasSubstr("rank 1: mlp.fc1.weight Shard(1) of [16, 64], local mlp.fc1.weight "
                             "f32[16, 32]"));
  EXPECT_THAT(out, HasSubstr("rank 0: no tensor 'output' here"));
  EXPECT_THAT(out, HasSubstr("saved activations of layer 0 now"));
  EXPECT_THAT(out, HasSubstr("breakpoint 2: any op backward, on every rank"));
  EXPECT_THAT(out, HasSubstr("backward (layer 0, step 0, rank 0)"));
  // The first backward node runs before any parameter gradient exists.
  EXPECT_THAT(out, HasSubstr("rank 0: no tensor 'mlp.fc2.weight.grad' here"));
}

// The session's parser alone (what fuzz/debugger_fuzz.cpp drives): no run is started.
TEST(DebugCommandParse, NamesTheCommandItsShortFormAndItsArgument) {
  using Kind = DebugCommand::Kind;
  EXPECT_EQ(parse_debug_command("").kind, Kind::none);
  EXPECT_EQ(parse_debug_command("  \t ").kind, Kind::none);
  EXPECT_EQ(parse_debug_command("nc").kind, Kind::next_collective);
  EXPECT_EQ(parse_debug_command("  continue  ").kind, Kind::resume);
  const DebugCommand print = parse_debug_command("p attn.qkv.weight.grad extra");
  EXPECT_EQ(print.kind, Kind::print);
  EXPECT_EQ(print.tensor, "attn.qkv.weight.grad");
  const DebugCommand layer = parse_debug_command("b layer 3");
  ASSERT_TRUE(layer.breakpoint.has_value());
  EXPECT_EQ(layer.breakpoint->layer, 3);
  EXPECT_TRUE(layer.error.empty());
  const DebugCommand bad = parse_debug_command("break a/b/c");
  EXPECT_EQ(bad.kind, Kind::add_break);
  EXPECT_FALSE(bad.breakpoint.has_value());
  EXPECT_THAT(bad.error, HasSubstr("more than one '/'"));
  EXPECT_THAT(parse_debug_command("break layer 99999999999").error,
              HasSubstr("expected <op> (gelu, attn.qkv/matmul, mlp.fc1/), layer <N>"));
  const DebugCommand unknown = parse_debug_command("frobnicate now");
  EXPECT_EQ(unknown.kind, Kind::unknown);
  EXPECT_EQ(unknown.word, "frobnicate");
}

// A communicator's error already begins with its rank: the session does not say it twice.
TEST(DebugSession, ARanksFailureNamesTheRankOnce) {
  EXPECT_EQ(rank_failure(1, "boom"), "rank 1: boom");
  EXPECT_EQ(rank_failure(1, "rank 1: all_gather(count 8) with peer 0: count mismatch"),
            "rank 1: all_gather(count 8) with peer 0: count mismatch");
  EXPECT_EQ(rank_failure(1, "rank 12: x"), "rank 1: rank 12: x") << "another rank's words";
}

TEST(DebugSession, ContinueToTheEndFinishesTheRun) {
  int code = -1;
  const std::string out = session(small_run(ParallelMode::ulysses, 2), "continue\n", &code);
  EXPECT_EQ(code, 0);
  EXPECT_THAT(out, HasSubstr("rank 0: finished"));
  EXPECT_THAT(out, HasSubstr("rank 1: finished"));
  EXPECT_THAT(out, HasSubstr("the run finished"));
  EXPECT_THAT(out, Not(HasSubstr("the run failed")));
}

}  // namespace
}  // namespace shardscope

#include "io/trace_reader.h"
#include "tests/temp_path.h"

namespace shardscope {
namespace {

// `run --trace` writes a trace that parses and holds, per rank, the mode's collectives.
TEST(RunTrace, HoldsTheExpectedCollectivesPerRank) {
  RunOptions o = small_run(ParallelMode::tp_sp, 2);
  o.spec.steps = 2;
  const testing_files::ScratchPath trace_file("run_trace.json");
  o.trace_path = trace_file.string();
  std::ostringstream out;
  run_layer(o, out);
  const TraceFile trace = read_trace(o.trace_path);
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 2; ++step) {
      int gathers = 0, scatters = 0;
      for (const TraceEvent& e : trace.events) {
        if (e.kind != TraceEventKind::collective || e.rank != rank || e.step != step ||
            e.purpose != CommPurpose::activation || e.phase != Phase::forward) {
          continue;
        }
        gathers += e.collective == CollectiveKind::all_gather;
        scatters += e.collective == CollectiveKind::reduce_scatter;
        // The placements of the op that issued it ride along.
        EXPECT_EQ(e.placement, e.collective == CollectiveKind::all_gather ? "Shard(0) -> Shard(2)"
                                                                          : "Partial -> Shard(0)");
      }
      EXPECT_EQ(gathers, 2) << "rank " << rank << " step " << step;
      EXPECT_EQ(scatters, 2) << "rank " << rank << " step " << step;
    }
  }
}

}  // namespace
}  // namespace shardscope
