// The replay: stepping a recorded trace as the live controls step a run.
#include <gtest/gtest.h>

#include "tests/viz/viz_testing.h"

namespace shardscope::viz {
namespace {

using testing::record_run;

TEST(Replay, ReadsTheRunConfigFromTheTrace) {
  const TraceFile t = record_run("tp-sp", 4);
  const LayerConfig c = config_of_trace(t);
  EXPECT_EQ(c.mode, ParallelMode::tp_sp);
  EXPECT_EQ(c.degree, 4);
  EXPECT_EQ(c.seq, 16);
  EXPECT_EQ(c.hidden, 32);
}

TEST(Replay, RefusesATraceWithoutAConfig) {
  TraceFile t = record_run("tp", 2);
  t.meta.config = nlohmann::json::object();
  try {
    Replay r(t);
    FAIL() << "expected TraceFormatError";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("otherData.config"), std::string::npos) << e.what();
  }
}

// Found in review: a config whose integers are floats, or whose keep_gathered_input is not a
// bool, escaped as a JSON library exception (or an undefined conversion); now named.
TEST(Replay, RefusesAConfigWithFieldsOfTheWrongType) {
  TraceFile t = record_run("tp", 2);
  t.meta.config["keep_gathered_input"] = "yes";
  try {
    Replay r(t);
    FAIL() << "expected TraceFormatError";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(
        std::string(e.what()).find("keep_gathered_input must be true or false, given \"yes\""),
        std::string::npos)
        << e.what();
  }
  t = record_run("tp", 2);
  t.meta.config["degree"] = 1e300;
  try {
    Replay r(t);
    FAIL() << "expected TraceFormatError";
  } catch (const TraceFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("field 'degree' must be an integer in [1, 2147483647]"),
              std::string::npos)
        << e.what();
    const std::string what = e.what(), file = t.source + ":";
    EXPECT_EQ(what.find(file, what.find(file) + 1), std::string::npos) << "named twice: " << what;
  }
}

// Found with issue 19: a config that fails validation was "otherData.config: ...", without the
// file; every other trace error starts with the file.
TEST(Replay, AnInvalidConfigNamesTheFile) {
  TraceFile t = record_run("tp", 2);
  t.source = "cut.json";
  t.meta.config["seq"] = -1;
  try {
    Replay r(t);
    FAIL() << "expected TraceFormatError";
  } catch (const TraceFormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cut.json: otherData.config: ", 0), 0u) << e.what();
  }
}

TEST(Replay, StepOpMovesEveryRankByOneOp) {
  Replay r(record_run("tp", 2));
  ASSERT_TRUE(r.step_op());
  Snapshot s = r.snapshot();
  ASSERT_EQ(s.status.size(), 2u);
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::paused) << st.where;
    EXPECT_EQ(st.scope, "ln1") << st.where;
  }
  ASSERT_TRUE(r.step_op());
  s = r.snapshot();
  for (const RankStatus& st : s.status) EXPECT_NE(st.op, "layernorm") << st.where;
}

TEST(Replay, NextCollectiveStopsAtTheAllGatherBeforeQkvInTpSp) {
  Replay r(record_run("tp-sp", 4));
  ASSERT_TRUE(r.next_collective());
  const Snapshot s = r.snapshot();
  ASSERT_FALSE(s.events.empty());
  const TraceEvent& last = s.events.back();
  EXPECT_EQ(last.kind, TraceEventKind::collective);
  EXPECT_EQ(last.collective, CollectiveKind::all_gather);
  EXPECT_EQ(last.scope, "attn.qkv");
  int gathers = 0;
  for (const TraceEvent& e : s.events) gathers += e.kind == TraceEventKind::collective;
  EXPECT_EQ(gathers, 4);  // one per rank, none further
}

TEST(Replay, StepLayerRunsToTheEndOfThePhase) {
  Replay r(record_run("tp", 2));
  ASSERT_TRUE(r.step_op());
  ASSERT_TRUE(r.step_layer());
  const Snapshot s = r.snapshot();
  // The forward of layer 0 is over: the last op event is rank 0's first op of another phase or
  // layer.
  const TraceEvent* last_op = nullptr;
  for (const TraceEvent& e : s.events) {
    if (e.kind == TraceEventKind::op && e.rank == 0) last_op = &e;
  }
  ASSERT_NE(last_op, nullptr);
  EXPECT_TRUE(last_op->phase == Phase::backward || last_op->layer != 0)
      << last_op->scope << "/" << last_op->op;
}

TEST(Replay, ContinueStopsAtABreakpointThenRunsToTheEnd) {
  Replay r(record_run("tp", 2));
  Breakpoint b;
  b.op = "mlp.gelu/gelu";
  b.phase = Phase::backward;
  r.add_breakpoint(b);
  ASSERT_TRUE(r.run_continue());
  Snapshot s = r.snapshot();
  EXPECT_EQ(s.events.back().scope, "mlp.gelu");
  EXPECT_EQ(s.events.back().phase, Phase::backward);
  EXPECT_FALSE(s.finished);
  r.clear_breakpoints();
  ASSERT_TRUE(r.run_continue());
  s = r.snapshot();
  EXPECT_TRUE(s.finished);
  EXPECT_FALSE(r.run_continue());
}

TEST(Replay, SnapshotNotesThatATraceHasNoValues) {
  const Snapshot s = testing::snapshot_at(record_run("tp", 2));
  EXPECT_FALSE(s.live);
  EXPECT_TRUE(s.tensors.empty());
  EXPECT_NE(s.check_note.find("shardscope check"), std::string::npos);
  EXPECT_EQ(s.events.size(), s.total_events);
}

// Issue 19: a trace cut in half (still valid JSON) was replayed to its end and shown "finished".
TEST(Replay, ATraceCutShortIsNotFinishedAndSaysWhy) {
  TraceFile t = record_run("tp", 2, 2);
  ASSERT_TRUE(testing::snapshot_at(t).finished);
  EXPECT_EQ(testing::snapshot_at(t).warning, "");
  t.events.resize(t.events.size() / 2);
  Replay r(t);
  EXPECT_NE(r.snapshot().warning, "");  // from the first frame, not only at the end
  while (r.run_continue()) {
  }
  const Snapshot s = r.snapshot();
  EXPECT_FALSE(s.finished);
  EXPECT_NE(s.warning.find("cut short"), std::string::npos) << s.warning;
  for (const RankStatus& st : s.status) {
    EXPECT_NE(st.state, RankStatus::State::finished) << st.where;
    EXPECT_EQ(st.where.find("finished"), std::string::npos) << st.where;
    EXPECT_NE(st.where.find("the trace ends here"), std::string::npos) << st.where;
  }
}

// One rank's last events cut off, in the run's last step: the ranks' slice counts differ.
TEST(Replay, ATraceWithOneRankCutShortSaysWhich) {
  TraceFile t = record_run("tp", 2);
  for (std::size_t i = t.events.size(); i-- > 0;) {
    if (t.events[i].rank == 1 && t.events[i].kind == TraceEventKind::collective) {
      t.events.erase(t.events.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  const std::string note = incomplete_trace_note(t);
  EXPECT_NE(note.find("rank 1 has"), std::string::npos) << note;
  EXPECT_FALSE(testing::snapshot_at(t).finished);
}

// A trace that hit the recorder's bound says how many events it lost and from which step.
TEST(Replay, ATraceWithDroppedEventsSaysHowManyFromWhichStep) {
  TraceFile t = record_run("tp", 2);
  t.meta.dropped_events = 1234;
  t.meta.first_dropped_step = 0;
  const Snapshot s = testing::snapshot_at(t);
  EXPECT_FALSE(s.finished);
  EXPECT_NE(s.warning.find("1234 events dropped from step 0"), std::string::npos) << s.warning;
}

}  // namespace
}  // namespace shardscope::viz
