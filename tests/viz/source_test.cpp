// The visualizer's sources: a live run stepped by script commands, and a replayed trace behind
// the same controls.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <thread>

#include "parallel/models/memory_model.h"
#include "tests/viz/viz_testing.h"
#include "viz/model/source.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

using namespace std::chrono_literals;
constexpr std::chrono::milliseconds kLimit = 60s;  // generous for sanitizer builds

RunOptions live_options(const std::string& mode, int degree) {
  RunOptions o;
  o.spec.layer.mode = parse_mode(mode);
  o.spec.layer.degree = degree;
  o.spec.layer.seq = 16;
  o.spec.layer.batch = 2;
  o.spec.layer.hidden = 32;
  o.spec.layer.heads = 4;
  o.spec.steps = 2;
  return o;
}

TEST(LiveSource, StartsWithEveryRankPausedBeforeTheFirstOp) {
  auto source = make_live_source(live_options("tp-sp", 4));
  ASSERT_TRUE(source->wait_idle(kLimit));
  const Snapshot s = source->snapshot();
  EXPECT_TRUE(s.live);
  ASSERT_EQ(s.status.size(), 4u);
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::paused) << st.where;
    EXPECT_EQ(st.scope, "ln1") << st.where;
    EXPECT_EQ(st.op, "layernorm") << st.where;
  }
  // Every rank's input and weights are there to inspect, with their placements.
  bool saw_input = false;
  for (const TensorValues& t : s.tensors) {
    if (t.name != "input") continue;
    saw_input = true;
    EXPECT_EQ(t.placement, Placement::shard(0));
    ASSERT_EQ(t.local.size(), 4u);
    EXPECT_EQ(t.local[0].size(), 4u * 2 * 32);
  }
  EXPECT_TRUE(saw_input);
}

// A live run past the recorder's bound says so, as a replay of its trace would.
TEST(LiveSource, SaysWhenTheRecorderDroppedEvents) {
  RunOptions o = live_options("tp", 2);
  o.trace_events = 150;  // about 100 are recorded before the first op
  auto source = make_live_source(o);
  ASSERT_TRUE(source->wait_idle(kLimit));
  EXPECT_EQ(source->snapshot().warning, "");
  run_script(*source, "next-collective 3", kLimit);
  const Snapshot s = source->snapshot();
  EXPECT_NE(s.warning.find("events dropped from step 0 (the recorder keeps the first 150)"),
            std::string::npos)
      << s.warning;
}

TEST(LiveSource, NextCollectiveStopsEveryRankAtTheAllGatherBeforeQkv) {
  auto source = make_live_source(live_options("tp-sp", 4));
  ASSERT_TRUE(source->wait_idle(kLimit));
  run_script(*source, "next-collective", kLimit);
  const Snapshot s = source->snapshot();
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::paused) << st.where;
    EXPECT_EQ(st.scope, "attn.qkv") << st.where;
    EXPECT_NE(st.where.find("all_gather"), std::string::npos) << st.where;
  }
  // The op slices of ln1 are recorded, and the all-gather every rank stands at is on the
  // timeline, open (it reaches the snapshot's now).
  int collectives = 0, ops = 0;
  for (const TraceEvent& e : s.events) {
    ops += e.kind == TraceEventKind::op;
    if (e.kind != TraceEventKind::collective) continue;
    ++collectives;
    EXPECT_EQ(e.collective, CollectiveKind::all_gather);
    EXPECT_EQ(e.scope, "attn.qkv");
    EXPECT_GE(e.ts_us + e.dur_us, s.now_us - 1e-6);
  }
  EXPECT_EQ(collectives, 4);
  EXPECT_GT(ops, 0);
}

TEST(LiveSource, ChecksTheOutputAfterForwardAndEverythingAfterBackward) {
  auto source = make_live_source(live_options("tp", 2));
  ASSERT_TRUE(source->wait_idle(kLimit));
  Snapshot s = source->snapshot();
  for (const CheckRow& row : s.checks) EXPECT_FALSE(row.available) << row.name;
  run_script(*source, "step-layer; step-layer", kLimit);  // the forward, then the loss
  s = source->snapshot();
  ASSERT_FALSE(s.checks.empty());
  EXPECT_EQ(s.checks.front().name, "output");
  EXPECT_TRUE(s.checks.front().available) << s.status[0].where;
  EXPECT_TRUE(s.checks.front().passed);
  EXPECT_EQ(s.checks.front().failed, 0);
  EXPECT_GT(s.checks.front().elements, 0);
  run_script(*source, "continue", kLimit);
  s = source->snapshot();
  EXPECT_TRUE(s.finished) << s.error;
  EXPECT_EQ(s.error, "");
  for (const CheckRow& row : s.checks) {
    EXPECT_TRUE(row.available) << row.name;
    EXPECT_TRUE(row.passed) << row.name << " " << row.max_rel_err;
  }
}

TEST(LiveSource, BreakpointScriptStopsInBackward) {
  auto source = make_live_source(live_options("ulysses", 2));
  ASSERT_TRUE(source->wait_idle(kLimit));
  run_script(*source, "break phase backward; continue", kLimit);
  const Snapshot s = source->snapshot();
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::paused) << st.where;
    EXPECT_EQ(st.phase, Phase::backward) << st.where;
  }
}

TEST(LiveSource, RefusesMpiRanks) {
  RunOptions o = live_options("tp", 2);
  o.comm = CommKind::mpi;
  EXPECT_THROW(make_live_source(o), ArgumentError);
}

TEST(Script, NamesTheBadCommandAndTheAcceptedForms) {
  auto source = make_live_source(live_options("tp", 2));
  try {
    run_script(*source, "step; jump 3", kLimit);
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'jump 3'"), std::string::npos) << m;
    EXPECT_NE(m.find("next-collective"), std::string::npos) << m;
  }
  EXPECT_THROW(run_script(*source, "step 0", kLimit), ArgumentError);
  EXPECT_THROW(run_script(*source, "step two", kLimit), ArgumentError);
  EXPECT_THROW(run_script(*source, "break phase sideways", kLimit), ArgumentError);
}

TEST(ReplaySource, StepsARecordedTraceLikeALiveRun) {
  RunOptions o = live_options("tp-sp", 4);
  o.trace_path = ::testing::TempDir() + "replay_source_test.json";
  std::ostringstream out;
  run_layer(o, out);
  auto source = make_replay_source(o.trace_path);
  std::remove(o.trace_path.c_str());
  const std::uint64_t v0 = source->version();
  run_script(*source, "next-collective", kLimit);
  EXPECT_NE(source->version(), v0);
  const Snapshot s = source->snapshot();
  EXPECT_FALSE(s.live);
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::in_collective) << st.where;
    EXPECT_EQ(st.scope, "attn.qkv") << st.where;
  }
}

TEST(ReplaySource, NamesAFileThatIsNotATrace) {
  const std::string path = ::testing::TempDir() + "not_a_trace.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\"hello\": 1}", f);
    std::fclose(f);
  }
  try {
    make_replay_source(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace shardscope::viz

namespace shardscope::viz {
namespace {

TEST(LiveSource, TheTimelineLeavesOutTimeSpentPaused) {
  auto source = make_live_source(live_options("tp", 2));
  ASSERT_TRUE(source->wait_idle(kLimit));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a person looking
  run_script(*source, "step 3", kLimit);
  const Snapshot s = source->snapshot();
  ASSERT_FALSE(s.events.empty());
  // Three ops of a tiny layer take far less than the 1.5 s the ranks sat paused.
  EXPECT_LT(s.now_us, 1.5e6) << "the pause is on the timeline";
}

// Issue 19: a finished rank repeated its last stop ("step 0, forward", the op it was paused at
// before `continue`); it now says it finished with its final loss, and the shard panel keeps the
// layout of its last op in the layer instead of going blank.
TEST(LiveSource, FinishedRanksSayFinishedWithTheirFinalLoss) {
  const RunOptions o = live_options("tp", 2);
  std::ostringstream printed;
  const double loss = run_layer(o, printed).rank0.steps.back().loss;  // the same run, unpaused
  auto source = make_live_source(o);
  ASSERT_TRUE(source->wait_idle(kLimit));
  run_script(*source, "step; continue", kLimit);
  const Snapshot s = source->snapshot();
  ASSERT_TRUE(s.finished) << s.error;
  for (const RankStatus& st : s.status) {
    EXPECT_EQ(st.state, RankStatus::State::finished);
    ASSERT_TRUE(st.final_loss.has_value()) << st.where;
    EXPECT_DOUBLE_EQ(*st.final_loss, loss);
    EXPECT_EQ(st.step, 1);
    EXPECT_NE(st.where.find("finished after 2 steps, final loss "), std::string::npos) << st.where;
    EXPECT_EQ(st.where.find("forward"), std::string::npos) << st.where;
    EXPECT_EQ(st.summary, "") << "no step and phase line under a finished rank";
    const ShardView v = shard_view(s, st.rank, {600, 400});
    EXPECT_FALSE(v.tensors.empty()) << "the shard panel went blank";
    EXPECT_NE(v.title.find("backward"), std::string::npos) << v.title;
  }
  EXPECT_FALSE(s.tensors.empty()) << "the values copied at the last stop are kept";
}

const TensorValues* find_tensor(const Snapshot& s, const std::string& name) {
  for (const TensorValues& t : s.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// The inspector's op tensors: each rank's inputs of the op where it is paused, and the output of
// the op a step just ran, following the ranks as they move.
TEST(LiveSource, TheInspectorFollowsTheOpWhereTheRanksArePaused) {
  auto source = make_live_source(live_options("tp-sp", 2));
  ASSERT_TRUE(source->wait_idle(kLimit));
  Snapshot s = source->snapshot();
  EXPECT_EQ(inspected_tensor(s, "", true), "op input0");
  EXPECT_EQ(inspected_tensor(s, "", false), "input") << "not following: the layer's input";
  EXPECT_EQ(inspected_tensor(s, "attn.qkv.weight", false), "attn.qkv.weight");
  EXPECT_EQ(inspected_tensor(s, "attn.qkv.weight", true), "op input0");
  const TensorValues* in = find_tensor(s, "op input0");
  const TensorValues* layer_input = find_tensor(s, "input");
  ASSERT_TRUE(in && layer_input);
  EXPECT_TRUE(in->at_op);
  EXPECT_FALSE(layer_input->at_op);
  EXPECT_EQ(find_tensor(s, "op output0"), nullptr) << "no op has run yet";
  ASSERT_EQ(in->local.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) {
    // Before ln1's LayerNorm, its input is the rank's shard of the layer's input (tp-sp: the
    // sequence is split, so each rank's values differ).
    EXPECT_EQ(in->what[r], "input 0 of ln1/layernorm forward");
    EXPECT_EQ(in->local_shapes[r], layer_input->local_shapes[r]);
    EXPECT_EQ(in->local[r], layer_input->local[r]) << "rank " << r;
  }
  EXPECT_NE(in->local[0], in->local[1]) << "each rank's own shard";
  const std::optional<HeatMap> full = heat_map(s, "op input0", -1, {300, 200});
  ASSERT_TRUE(full);  // no full view of an op tensor: the first rank's
  EXPECT_NE(full->title.find("input 0 of ln1/layernorm forward  (rank 0, [8, 2, 32])"),
            std::string::npos)
      << full->title;
  const std::optional<HeatMap> one = heat_map(s, "op input0", 1, {300, 200});
  ASSERT_TRUE(one);
  EXPECT_NE(one->title.find("(rank 1,"), std::string::npos) << one->title;

  const TensorValues before = *layer_input;
  run_script(*source, "step", kLimit);  // LayerNorm runs; the ranks pause before the next op
  s = source->snapshot();
  EXPECT_EQ(inspected_tensor(s, "op input0", true), "op input0");
  const TensorValues* next = find_tensor(s, "op input0");
  const TensorValues* out = find_tensor(s, "op output0");
  ASSERT_TRUE(next && out);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(out->what[r], "output 0 of ln1/layernorm forward, the op run just before");
    EXPECT_NE(next->what[r], "input 0 of ln1/layernorm forward") << "it moved on";
    EXPECT_EQ(out->local_shapes[r], (Shape{8, 2, 32}));
    EXPECT_NE(out->local[r], before.local[r]) << "normalised";
  }

  // Stopped before a collective, inside the op that issues it: that op's inputs.
  run_script(*source, "next-collective", kLimit);
  s = source->snapshot();
  const TensorValues* gathered = find_tensor(s, "op input0");
  ASSERT_TRUE(gathered);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(gathered->what[r], "input 0 of attn.qkv/gather_matmul forward");
    EXPECT_EQ(gathered->local_shapes[r], (Shape{8, 2, 32}));
  }
}

TEST(LiveSource, PausedRanksSayTheirStepAndPhase) {
  auto source = make_live_source(live_options("tp", 2));
  ASSERT_TRUE(source->wait_idle(kLimit));
  for (const RankStatus& st : source->snapshot().status) {
    EXPECT_EQ(st.summary, "step 0, forward");
    EXPECT_FALSE(st.final_loss.has_value());
  }
}

// `shardscope-viz --layers 3 --mode tp-sp --degree 2`: each rank says which layer its op is in,
// the selector follows it from layer to layer, and the memory and shard panels show that layer.
TEST(LiveSource, AStackSaysWhichLayerEachRankIsInAndThePanelsFollowIt) {
  RunOptions o = live_options("tp-sp", 2);
  o.spec.layer.layers = 3;
  o.spec.steps = 1;
  auto source = make_live_source(o);
  ASSERT_TRUE(source->wait_idle(kLimit));
  const ActivationModel model = activation_model(o.spec.layer, false);
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    if (layer > 0) run_script(*source, "step-layer", kLimit);  // to the layer's first op
    const Snapshot s = source->snapshot();
    for (const RankStatus& st : s.status) {
      EXPECT_EQ(st.layer, layer) << st.where;
      EXPECT_EQ(st.scope, "ln1") << st.where;
      EXPECT_EQ(st.summary, "step 0, forward, layer " + std::to_string(layer));
      EXPECT_EQ(shown_layer(s, st.rank, {}), layer);
      EXPECT_EQ(shown_layer(s, st.rank, LayerSelection{false, 2}), 2) << "a picked layer stays";
    }
    // Paused before the layer's first op: the layers before it have saved their terms.
    const MemoryView v = memory_view(s, 1, {800, 400});
    EXPECT_EQ(v.layer, layer);
    EXPECT_EQ(v.saved_total, 0);
    for (const LayerSavedRow& row : v.layers) {
      EXPECT_EQ(row.measured_bytes, row.layer < layer ? model.total_bytes : 0)
          << "layer " << row.layer;
    }
    const ShardView shard = shard_view(s, 1, {900, 600});
    EXPECT_EQ(shard.title.rfind("layer " + std::to_string(layer) + ": ln1/", 0), 0u) << shard.title;
  }
  // The script picks the layer the panels show, and hands it back to the op.
  LayerSelection view;
  run_script(*source, "show-layer 2", kLimit, &view);
  EXPECT_FALSE(view.follow);
  EXPECT_EQ(view.layer, 2);
  run_script(*source, "show-layer follow", kLimit, &view);
  EXPECT_TRUE(view.follow);
  try {
    run_script(*source, "show-layer 3", kLimit, &view);
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("0 to 2 (a stack of 3 layers), given '3'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(run_script(*source, "show-layer", kLimit, &view), ArgumentError);
  EXPECT_THROW(run_script(*source, "show-layer 1 2", kLimit, &view), ArgumentError);
  EXPECT_THROW(run_script(*source, "show-layer 1", kLimit), ArgumentError) << "no panels";
  run_script(*source, "continue", kLimit);
  const Snapshot end = source->snapshot();
  EXPECT_TRUE(end.finished) << end.error;
  EXPECT_EQ(end.error, "");
  for (const CheckRow& row : end.checks) EXPECT_TRUE(row.passed) << row.name;
}

}  // namespace
}  // namespace shardscope::viz
