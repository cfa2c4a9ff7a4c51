// The terminal debugger's commands as people use gdb and pdb, driven by a script: a breakpoint on
// an op, scope or layer the run never reaches is refused with the nearest real names; step N and
// a bad step; delete and info breakpoints; help; print of the paused op's tensors; and the end of
// the run, with its losses, its check and its final tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

#include "apps/debug_session.h"
#include "apps/op_sites.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunOptions small_run(ParallelMode mode = ParallelMode::tp, int steps = 1) {
  RunOptions o;
  o.spec.layer.mode = mode;
  o.spec.layer.degree = 2;
  o.spec.layer.seq = 8;
  o.spec.layer.batch = 2;
  o.spec.layer.hidden = 16;
  o.spec.layer.heads = 4;
  o.spec.steps = steps;
  return o;
}

std::string session(const RunOptions& o, const std::string& script) {
  std::istringstream in(script);
  std::ostringstream out;
  debug_main(o, in, out);
  return out.str();
}

// The text after `prefix` up to the end of its line (the first match), "" when absent.
std::string rest_of_line(const std::string& out, const std::string& prefix) {
  const std::size_t at = out.find(prefix);
  if (at == std::string::npos) return "";
  const std::size_t from = at + prefix.size();
  return out.substr(from, out.find('\n', from) - from);
}

TEST(DebugBreakpoints, OnAnOpScopeOrLayerThatDoesNotRunAreRefusedWithTheNearestNames) {
  const std::string out =
      session(small_run(),
              "break attn.qkv/matmull\nbreak layer 5\nbreak mlp.fc9/\nbreak gelu\n"
              "info breakpoints\ncontinue\nquit\n");
  EXPECT_THAT(out, HasSubstr("breakpoint refused: no op 'attn.qkv/matmull' "
                             "runs in this layer; nearest: attn.qkv/matmul,"));
  EXPECT_THAT(out, HasSubstr("breakpoint refused: no op of this run is in layer "
                             "5; its ops are in layer -1 (outside any layer), 0\n"));
  EXPECT_THAT(out, HasSubstr("breakpoint refused: no op 'mlp.fc9/' runs in this "
                             "layer; nearest: mlp.fc1/"));
  // The refused ones take no number: the real one is breakpoint 1, and it is the only one.
  EXPECT_THAT(out, HasSubstr("breakpoint 1: gelu, on every rank"));
  EXPECT_THAT(out, HasSubstr("> info breakpoints\nbreakpoint 1: gelu, hits per rank: 0 0\n>"));
  EXPECT_THAT(out, HasSubstr("mlp.gelu/gelu forward (layer 0, step 0, rank 1)"));
}

// The ops the dry run lists are those of the mode: the collectives' ops of tp-sp, not of tp.
TEST(DebugBreakpoints, TheLayersOpsComeFromARunOfThatMode) {
  LayerRunSpec spec = small_run(ParallelMode::tp_sp).spec;
  const std::set<OpSite> sites = collect_op_sites(spec);
  Breakpoint gather;
  gather.op = "attn.qkv/gather_matmul";
  Breakpoint reduce;
  reduce.op = "reduce_from_tp";
  EXPECT_EQ(unmatched_breakpoint(gather, sites), "");
  EXPECT_THAT(unmatched_breakpoint(reduce, sites), HasSubstr("no op 'reduce_from_tp'"));
  spec.layer.mode = ParallelMode::tp;
  EXPECT_EQ(unmatched_breakpoint(reduce, collect_op_sites(spec)), "");
}

TEST(DebugStep, TakesACountAndRefusesABadOne) {
  const std::string out = session(small_run(), "step x\nstep 0\nstep 2 3\nstep 3\nquit\n");
  EXPECT_THAT(out, HasSubstr("> step x\nstep: expected a count of ops from 1 to 1000000 (step 5), "
                             "given 'x'\n"));
  EXPECT_THAT(out, HasSubstr("> step 0\nstep: expected a count of ops"));
  EXPECT_THAT(out, HasSubstr("given '2 3'"));
  // Three ops from the first: op 4, and no stop in between was printed.
  EXPECT_THAT(out, HasSubstr("> step 3\nrank 0: paused, stop 4 at op 4:"));
  EXPECT_THAT(out, Not(HasSubstr("at op 2:")));
}

TEST(DebugBreakpoints, DeleteAndInfoBreakpoints) {
  const std::string out =
      session(small_run(),
              "break mlp.fc1/\nbreak gelu\ncontinue\ninfo breakpoints\ndelete 1\n"
              "delete 9\ninfo b\ndelete x\ndelete\ninfo breakpoints\nquit\n");
  EXPECT_THAT(out, HasSubstr("breakpoint 1: mlp.fc1/, hits per rank: 1 1\n"
                             "breakpoint 2: gelu, hits per rank: 0 0\n"));
  EXPECT_THAT(out, HasSubstr("> delete 1\nbreakpoint 1 deleted\n"));
  EXPECT_THAT(out, HasSubstr("> delete 9\nno breakpoint 9 (info breakpoints lists them)\n"));
  EXPECT_THAT(out, HasSubstr("> info b\nbreakpoint 2: gelu, hits per rank: 0 0\n>"));
  EXPECT_THAT(out, HasSubstr("> delete x\ndelete: expected a breakpoint number"));
  EXPECT_THAT(out, HasSubstr("> delete\nevery breakpoint deleted\n> info breakpoints\n"
                             "no breakpoints\n"));
}

TEST(DebugHelp, ListsEveryCommand) {
  const std::string out = session(small_run(), "help\nquit\n");
  const std::string help = out.substr(out.find("> help\n"));
  for (const char* command :
       {"step [N]", "next-collective", "continue", "break <what>", "delete [N]", "info breakpoints",
        "where", "print <tensor>", "mem", "comm", "help", "quit"}) {
    EXPECT_THAT(help, HasSubstr(std::string("\n  ") + command)) << command;
  }
}

TEST(DebugPrint, ReachesThePausedOpsInputsAndThePreviousOpsOutput) {
  // Op 3 of tp is attn.qkv's product, its bias the third input; op 4 the heads' split, whose
  // input 0 is op 3's output.
  const std::string out =
      session(small_run(),
              "step 2\nprint input2\nstep\nprint input0\nprint input1\nprint output0\n"
              "break phase backward\ncontinue\nprint input0\nprint output0\ndelete\ncontinue\n"
              "print input0\n");
  EXPECT_THAT(out, HasSubstr("rank 0: input2 (input 2 of attn.qkv/matmul forward) attn.qkv.bias"));
  EXPECT_THAT(out, HasSubstr("rank 1: input0 (input 0 of attn.heads/head_split forward) "
                             "f32[8, 2, 24]"));
  EXPECT_THAT(out, HasSubstr("> print input1\nrank 0: no tensor 'input1' here"));
  EXPECT_THAT(out, HasSubstr("rank 0: output0 (output 0 of attn.qkv/matmul forward, the op run "
                             "just before) f32[8, 2, 24]"));
  const std::string input =
      rest_of_line(out, "rank 0: input0 (input 0 of attn.heads/head_split forward)");
  ASSERT_FALSE(input.empty());
  EXPECT_EQ(input, rest_of_line(out,
                                "rank 0: output0 (output 0 of attn.qkv/matmul forward, the "
                                "op run just before)"));
  // At a backward node: the gradients flowing in; reached by continue, so the op before it was
  // not seen. After the run: no op tensors.
  EXPECT_THAT(out, HasSubstr("rank 0: input0 (gradient flowing in 0 of residual2/add backward)"));
  EXPECT_THAT(out, HasSubstr("> print output0\nrank 0: no tensor 'output0' here"));
  EXPECT_THAT(out, HasSubstr("check passed\n(print shows each rank's final tensors)\n> print "
                             "input0\nrank 0: no tensor 'input0' here"));
}

// Stopped before a collective, the rank is inside the op issuing it: print reaches that op's
// inputs (tp-sp: the sequence shard of ln1's output that the all-gather before QKV gathers).
TEST(DebugPrint, AtACollectiveReachesTheInputsOfTheOpIssuingIt) {
  const std::string out =
      session(small_run(ParallelMode::tp_sp), "next-collective\nprint input0\n");
  EXPECT_THAT(out, HasSubstr("before all_gather"));
  EXPECT_THAT(
      out, HasSubstr("rank 1: input0 (input 0 of attn.qkv/gather_matmul forward) f32[4, 2, 16]"));
  EXPECT_THAT(out, Not(HasSubstr("no tensor 'input0' here")));
}

TEST(DebugRunEnd, PrintsTheLossesAndTheCheckAndKeepsTheFinalTensors) {
  const RunOptions o = small_run(ParallelMode::tp_sp, 2);
  const std::string out = session(o, "continue\nprint output\nprint attn.qkv.weight\nquit\n");
  std::ostringstream run_out;
  const RunResult run = run_layer(o, run_out);
  std::ostringstream losses;
  losses << "the run ended; loss per step: 0: " << run.rank0.steps[0].loss
         << " 1: " << run.rank0.steps[1].loss << "\n";
  EXPECT_THAT(out, HasSubstr(losses.str()));
  EXPECT_THAT(out, HasSubstr("steps 0-1 checked, every tensor passed"));
  EXPECT_THAT(out, HasSubstr("check passed\n"));
  EXPECT_THAT(out, HasSubstr("rank 1: output Shard(0) of [8, 2, 16], local f32[4, 2, 16] (final)"));
  EXPECT_THAT(out, HasSubstr("rank 0: attn.qkv.weight Shard(1) of [16, 48], local attn.qkv.weight "
                             "f32[16, 24] (final)"));
}

TEST(DebugCommandParse, StepDeleteInfoAndHelp) {
  using Kind = DebugCommand::Kind;
  EXPECT_EQ(parse_debug_command("s").count, 1);
  EXPECT_EQ(parse_debug_command("step 12").count, 12);
  EXPECT_THAT(parse_debug_command("step -1").error, HasSubstr("given '-1'"));
  EXPECT_THAT(parse_debug_command("step 1x").error, HasSubstr("given '1x'"));
  EXPECT_EQ(parse_debug_command("d 3").id, 3);
  EXPECT_EQ(parse_debug_command("delete").id, 0);
  EXPECT_EQ(parse_debug_command("delete").kind, Kind::remove_break);
  EXPECT_THAT(parse_debug_command("delete 0").error, HasSubstr("expected a breakpoint number"));
  EXPECT_EQ(parse_debug_command("i b").kind, Kind::info_breaks);
  EXPECT_TRUE(parse_debug_command("info breakpoints").error.empty());
  EXPECT_THAT(parse_debug_command("info registers").error, HasSubstr("expected info breakpoints"));
  EXPECT_THAT(parse_debug_command("info breakpoints 2").error,
              HasSubstr("given 'info breakpoints 2'"));
  EXPECT_EQ(parse_debug_command("help").kind, Kind::help);
  EXPECT_EQ(parse_debug_command("?").kind, Kind::help);
}

}  // namespace
}  // namespace shardscope
