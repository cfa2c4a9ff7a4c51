// The trace recorder on a tp run at degree 2, written and read back: one process per rank, the
// collectives the tp layer must issue per rank and step, op and node slices with their step,
// memory counters that end where the run left memory, step marks, the bound on kept events, and
// the merge of per-rank files (the MPI path).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "io/trace_writer.h"
#include "parallel/models/memory_model.h"
#include "tests/io/trace_testing.h"

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using trace_testing::RecordedTrace;

const TraceFile& read_back() {
  static const TraceFile file = read_trace(RecordedTrace::get().path);
  return file;
}

std::vector<const TraceEvent*> of_kind(int rank, TraceEventKind kind) {
  std::vector<const TraceEvent*> out;
  for (const TraceEvent& e : read_back().events) {
    if (e.rank == rank && e.kind == kind) out.push_back(&e);
  }
  return out;
}

TEST(Trace, OneProcessPerRankWithNamedLanes) {
  const TraceFile& file = read_back();
  EXPECT_THAT(file.meta.ranks, ElementsAre(0, 1));
  EXPECT_EQ(file.meta.version, kTraceFormatVersion);
  EXPECT_EQ(file.meta.config["mode"], "tp");
  EXPECT_EQ(file.meta.dropped_events, 0u);
  std::map<int, std::string> process_names;
  std::set<std::pair<int, std::string>> lanes;
  for (const nlohmann::json& e : RecordedTrace::get().written["traceEvents"]) {
    if (e["ph"] != "M") continue;
    const std::string name = e["args"].value("name", "");
    if (e["name"] == "process_name") process_names[e["pid"].get<int>()] = name;
    if (e["name"] == "thread_name") lanes.insert({e["tid"].get<int>(), name});
  }
  EXPECT_EQ(process_names, (std::map<int, std::string>{{1, "rank 0"}, {2, "rank 1"}}));
  EXPECT_EQ(lanes, (std::set<std::pair<int, std::string>>{{kComputeLane, "compute"},
                                                          {kCollectiveLane, "collectives"}}));
}

TEST(Trace, ReadingBackGivesWhatWasWritten) {
  const TraceFile& file = read_back();
  EXPECT_EQ(trace_to_json(file.events, file.meta), RecordedTrace::get().written);
  for (std::size_t i = 1; i < file.events.size(); ++i) {
    ASSERT_LE(file.events[i - 1].ts_us, file.events[i].ts_us) << "event " << i;
  }
}

// The op slice (forward) or node slice (backward) whose number and op the collective carries.
bool issued_by_a_slice(const TraceEvent& collective) {
  for (const TraceEvent* e : of_kind(collective.rank, TraceEventKind::op)) {
    if (e->seq == collective.seq && e->op == collective.op && e->phase == collective.phase &&
        e->ts_us <= collective.ts_us) {
      return true;
    }
  }
  return false;
}

// Megatron tp: f and g each all-reduce once per block in one direction: forward after the row
// linears of attention and MLP, backward before the column linears. Only the reference check
// adds others, under its own purpose.
TEST(Trace, TpIssuesTwoActivationAllReducesEachWayPerRankAndStep) {
  for (int rank : {0, 1}) {
    std::map<std::pair<std::int64_t, Phase>, int> activation;
    int loss = 0, check = 0;
    for (const TraceEvent* e : of_kind(rank, TraceEventKind::collective)) {
      EXPECT_EQ(e->group_size, 2);
      EXPECT_GE(e->dur_us, 0);
      if (e->purpose == CommPurpose::loss) ++loss;
      if (e->purpose == CommPurpose::check) ++check;
      if (e->purpose != CommPurpose::activation) continue;
      EXPECT_EQ(e->collective, CollectiveKind::all_reduce);
      EXPECT_GT(e->bytes_sent, 0);
      EXPECT_EQ(e->count, 8 * 2 * 16);  // [s, b, h]
      ++activation[{e->step, e->phase}];
      EXPECT_TRUE(issued_by_a_slice(*e)) << e->op << " seq " << e->seq << " on rank " << rank;
    }
    const std::map<std::pair<std::int64_t, Phase>, int> expected{{{0, Phase::forward}, 2},
                                                                 {{0, Phase::backward}, 2},
                                                                 {{1, Phase::forward}, 2},
                                                                 {{1, Phase::backward}, 2}};
    EXPECT_EQ(activation, expected) << "rank " << rank;
    EXPECT_EQ(loss, 0) << "tp's output is replicated: each rank has the whole loss";
    EXPECT_GT(check, 0) << "the reference check gathers at step 0";
  }
}

TEST(Trace, OpAndNodeSlicesCarryStepShapesAndBytes) {
  for (int rank : {0, 1}) {
    std::map<std::pair<std::int64_t, Phase>, int> slices;
    std::uint64_t saved = 0, released = 0;
    bool qkv = false;
    for (const TraceEvent* e : of_kind(rank, TraceEventKind::op)) {
      ++slices[{e->step, e->phase}];
      EXPECT_GE(e->dur_us, 0);
      EXPECT_EQ(e->layer, 0);
      saved += e->saved_bytes;
      released += e->released_bytes;
      if (e->phase == Phase::forward && e->scope == "attn.qkv" && e->op == "matmul") {
        qkv = true;
        EXPECT_FALSE(e->inputs.empty());
        EXPECT_EQ(e->inputs[0], "[8, 2, 16]");
        EXPECT_EQ(e->outputs.size(), 1u);
        EXPECT_GT(e->alloc_bytes, 0u);
      }
    }
    EXPECT_TRUE(qkv) << "no forward matmul in attn.qkv on rank " << rank;
    for (std::int64_t step : {0, 1}) {
      EXPECT_GT((slices[{step, Phase::forward}]), 5) << "rank " << rank << " step " << step;
      EXPECT_GT((slices[{step, Phase::backward}]), 5) << "rank " << rank << " step " << step;
    }
    EXPECT_GT(saved, 0u);
    EXPECT_EQ(saved, released) << "backward releases what forward saved";
  }
}

// Forward slices split LayerNorm's mean and rstd out of their saved bytes, and count a tensor as
// the ledger does (once, under its first saver): per site they are the ledger's measurement.
TEST(Trace, SavedBytesMatchTheLedgerSiteBySiteWithExtrasApart) {
  const LayerConfig& c = RecordedTrace::get().spec.layer;
  const ActivationModel model = activation_model(c, false);
  for (int rank : {0, 1}) {
    std::vector<SavedAt> sites;
    std::uint64_t extras = 0;
    for (const TraceEvent* e : of_kind(rank, TraceEventKind::op)) {
      if (e->step != 0 || e->phase != Phase::forward || e->layer != c.layer) continue;
      ASSERT_LE(e->saved_extra_bytes, e->saved_bytes) << e->scope << "/" << e->op;
      if (e->saved_extra_bytes > 0) {
        EXPECT_EQ(e->op, "layernorm") << e->scope << ": only LayerNorm saves extras";
      }
      extras += e->saved_extra_bytes;
      sites.push_back(
          {e->scope, e->op, static_cast<double>(e->saved_bytes - e->saved_extra_bytes)});
    }
    const RankMemory& ledger = RecordedTrace::get().runs[static_cast<std::size_t>(rank)].memory;
    EXPECT_EQ(static_cast<double>(extras), ledger.extras_bytes) << "rank " << rank;
    EXPECT_EQ(static_cast<double>(extras), model.extras_bytes) << "rank " << rank;
    const std::vector<MeasuredTerm> measured = measure_sites(model, sites);
    ASSERT_EQ(measured.size(), model.terms.size()) << "a saving site the model lacks";
    for (std::size_t i = 0; i < measured.size(); ++i) {
      EXPECT_EQ(measured[i].measured_bytes, measured[i].model_bytes)
          << "rank " << rank << ": " << measured[i].what;
      if (i < ledger.terms.size()) {
        EXPECT_EQ(measured[i].measured_bytes, ledger.terms[i].measured_bytes)
            << "rank " << rank << ": " << measured[i].what;
      }
    }
  }
}

TEST(Trace, MemoryCountersRiseAndEndWhereTheRunLeftMemory) {
  const RecordedTrace& recorded = RecordedTrace::get();
  for (int rank : {0, 1}) {
    const std::vector<const TraceEvent*> counters = of_kind(rank, TraceEventKind::memory);
    ASSERT_FALSE(counters.empty());
    std::uint64_t max_saved = 0, max_parameters = 0;
    for (const TraceEvent* e : counters) {
      const auto at = [&](MemoryCategory c) { return e->memory[static_cast<std::size_t>(c)]; };
      max_saved = std::max(max_saved, at(MemoryCategory::saved_activation));
      max_parameters = std::max(max_parameters, at(MemoryCategory::parameter));
    }
    const RankMemory& measured = recorded.runs[static_cast<std::size_t>(rank)].memory;
    EXPECT_GE(static_cast<double>(max_saved), measured.saved_activation_bytes);
    EXPECT_GT(max_parameters, 0u);
    for (std::uint64_t bytes : counters.back()->memory) {
      EXPECT_EQ(bytes, 0u) << "rank " << rank << ": run_layer_rank frees all it allocated";
    }
  }
}

// Every event's step is the step of the latest mark before it on its rank.
TEST(Trace, StepMarksOpenEachStepOnEveryRank) {
  for (int rank : {0, 1}) {
    const std::vector<const TraceEvent*> marks = of_kind(rank, TraceEventKind::step);
    std::vector<std::int64_t> steps;
    for (const TraceEvent* m : marks) steps.push_back(m->step);
    EXPECT_THAT(steps, ElementsAre(0, 1)) << "rank " << rank;
    std::int64_t current = -1;
    for (const TraceEvent& e : read_back().events) {
      if (e.rank != rank) continue;
      if (e.kind == TraceEventKind::step) current = e.step;
      if (e.kind == TraceEventKind::op || e.kind == TraceEventKind::memory) {
        ASSERT_EQ(e.step, current) << "rank " << rank << " at " << e.ts_us << " us";
      }
    }
  }
}

TEST(Trace, KeepsAtMostMaxEventsAndCountsTheRest) {
  TraceOptions options;
  options.max_events = 50;
  TraceRecorder recorder(options);
  trace_testing::record_run(trace_testing::tp_spec(1), recorder);
  EXPECT_EQ(recorder.events().size(), 50u);
  EXPECT_GT(recorder.dropped_events(), 0u);
  const std::string path = trace_testing::temp_path("bounded.json");
  recorder.write_chrome_trace(path);
  const TraceFile file = read_trace(path);
  EXPECT_EQ(file.events.size(), 50u);
  EXPECT_EQ(file.meta.dropped_events, recorder.dropped_events());
  EXPECT_EQ(file.meta.max_events, 50u);
  std::remove(path.c_str());
}

// One rank records the same events in the same order every run, so the event at index N of an
// unbounded recording is the first one a recorder bounded at N drops.
TEST(Trace, NamesTheStepOfTheFirstDroppedEvent) {
  LayerRunSpec spec = trace_testing::tp_spec(3);
  spec.layer.mode = ParallelMode::single;
  spec.layer.degree = 1;
  TraceRecorder whole;
  trace_testing::record_run(spec, whole);
  const std::vector<TraceEvent> all = whole.events();
  ASSERT_EQ(whole.dropped_events(), 0u);
  EXPECT_EQ(whole.meta().first_dropped_step, -1);
  EXPECT_FALSE(trace_meta_to_json(whole.meta()).contains("first_dropped_step"));
  for (const std::size_t bound : {all.size() / 6, all.size() / 2, all.size() * 5 / 6}) {
    TraceOptions options;
    options.max_events = bound;
    TraceRecorder bounded(options);
    trace_testing::record_run(spec, bounded);
    ASSERT_EQ(bounded.dropped_events(), all.size() - bound);
    EXPECT_EQ(bounded.meta().first_dropped_step, all[bound].step) << "bound " << bound;
    const std::string path = trace_testing::temp_path("first_dropped.json");
    bounded.write_chrome_trace(path);
    EXPECT_EQ(read_trace(path).meta.first_dropped_step, all[bound].step);
    std::remove(path.c_str());
  }
  EXPECT_EQ(all[all.size() / 6].step, 0);  // the bounds fall in each of the three steps
  EXPECT_EQ(all[all.size() * 5 / 6].step, 2);
}

// The recorder keeps slices and counters as compact records in 2 MiB chunks, their places, texts
// and shapes as ids, a counter as the categories that changed: hooks called directly, enough of
// them to fill several chunks of every store (the order of events, slices, counters and their
// values), on two ranks in turn, with texts that change from event to event, an op whose end names
// another op than its begin, and memory that moves between categories, come back as the events
// they describe.
TEST(Trace, CompactRecordsComeBackAsTheEventsTheyDescribe) {
  TraceRecorder recorder;
  // Texts of equal length among them: a recorder that compared only lengths would mix them up.
  const std::vector<std::string> ops{"matmul", "concat", "add"};
  const std::vector<std::string> scopes{"", "attn.qkv", "attn.out", "mlp.fc1.a.rather.long.name"};
  const std::vector<std::string> placements{"Shard(0) -> Replicate", "Shard(2) -> Replicate", "",
                                            "", "Shard(0) -> Replicate"};
  const std::vector<Shape> shapes_a{Shape{2, 3}}, shapes_b{Shape{4}, Shape{5, 6, 7}};
  using Live = std::array<std::uint64_t, kMemoryCategoryCount>;
  std::vector<Live> expected_counters;
  Live live[2] = {};
  const auto activation = static_cast<std::size_t>(MemoryCategory::activation);
  const auto parameter = static_cast<std::size_t>(MemoryCategory::parameter);
  const auto workspace = static_cast<std::size_t>(MemoryCategory::workspace);
  constexpr int kOps = 150'000;  // a slice and one to three counters each
  for (int i = 0; i < kOps; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const int rank = i % 2;
    Site site;
    site.op = ops[u % 3];
    site.scope = scopes[(u / 3) % 4];
    site.layer = i % 4;
    site.step = i / 1000;
    site.rank = rank;
    OpEvent op;
    op.site = site;
    op.seq = u + 1;
    op.placement = placements[u % 5];
    op.inputs = i % 2 == 0 ? &shapes_a : &shapes_b;
    recorder.on_op_begin(op);
    StorageEvent alloc;
    alloc.site = site;
    alloc.storage_id = u + 1;
    alloc.bytes = u + 1;
    alloc.category = i % 11 == 0 ? MemoryCategory::workspace : MemoryCategory::activation;
    recorder.on_alloc(alloc);
    live[rank][i % 11 == 0 ? workspace : activation] += u + 1;
    expected_counters.push_back(live[rank]);
    if (i % 3 == 0 && i % 11 != 0) {  // activation -> parameter: two categories change
      StorageEvent recategorize = alloc;
      recategorize.previous = MemoryCategory::activation;
      recategorize.category = MemoryCategory::parameter;
      recorder.on_recategorize(recategorize);
      live[rank][activation] -= u + 1;
      live[rank][parameter] += u + 1;
      expected_counters.push_back(live[rank]);
    }
    if (i % 11 == 0) {
      recorder.on_free(alloc);
      live[rank][workspace] -= u + 1;
      expected_counters.push_back(live[rank]);
    }
    op.outputs = &shapes_b;
    if (i % 7 == 0) op.site.op = "renamed";  // the end's op is the slice's
    recorder.on_op_end(op);
  }
  const std::vector<TraceEvent> events = recorder.events();
  std::size_t counters = 0;
  int slices = 0;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceEventKind::step) continue;
    if (e.kind == TraceEventKind::memory) {
      ASSERT_LT(counters, expected_counters.size());
      ASSERT_EQ(e.memory, expected_counters[counters]) << "counter " << counters;
      EXPECT_EQ(e.rank, slices % 2) << "counter " << counters;
      EXPECT_EQ(e.step, slices / 1000) << "counter " << counters;
      ++counters;
      continue;
    }
    ASSERT_EQ(e.kind, TraceEventKind::op);
    const int i = slices++;
    const auto u = static_cast<std::size_t>(i);
    ASSERT_EQ(e.seq, u + 1);
    EXPECT_EQ(e.rank, i % 2);
    EXPECT_EQ(e.layer, i % 4);
    EXPECT_EQ(e.step, i / 1000);
    EXPECT_EQ(e.op, i % 7 == 0 ? "renamed" : ops[u % 3]) << "slice " << i;
    EXPECT_EQ(e.scope, scopes[(u / 3) % 4]) << "slice " << i;
    EXPECT_EQ(e.placement, placements[u % 5]) << "slice " << i;
    EXPECT_EQ(e.inputs.size(), i % 2 == 0 ? 1u : 2u) << "slice " << i;
    ASSERT_EQ(e.outputs.size(), 2u);
    EXPECT_EQ(e.outputs[1], "[5, 6, 7]");
    EXPECT_EQ(e.alloc_bytes, u + 1) << "slice " << i;
  }
  EXPECT_EQ(slices, kOps);
  EXPECT_EQ(counters, expected_counters.size());
  // A step mark where each rank's step changed: at i = 0 and at every 1000th op, per rank.
  EXPECT_EQ(events.size(), kOps + expected_counters.size() + 2u * (kOps / 1000));
}

// Times in microseconds since the recorder was made, from the clock it was given: a slice's start
// and duration and a counter's time, to the nanosecond.
TEST(Trace, TimesAreMicrosecondsSinceTheRecorderWasMade) {
  const auto origin = std::chrono::steady_clock::time_point(std::chrono::hours(5));
  std::chrono::nanoseconds now{0};
  TraceOptions options;
  options.clock = [&] { return origin + now; };
  TraceRecorder recorder(options);
  Site site;
  site.op = "gelu";
  OpEvent op;
  op.site = site;
  op.seq = 1;
  now = std::chrono::nanoseconds(1'500);
  recorder.on_op_begin(op);
  StorageEvent alloc;
  alloc.site = site;
  alloc.storage_id = 1;
  alloc.bytes = 64;
  now = std::chrono::nanoseconds(2'501);
  recorder.on_alloc(alloc);
  now = std::chrono::nanoseconds(4'750);
  recorder.on_op_end(op);
  std::map<TraceEventKind, const TraceEvent*> by_kind;
  const std::vector<TraceEvent> events = recorder.events();
  for (const TraceEvent& e : events) by_kind[e.kind] = &e;
  ASSERT_EQ(by_kind.count(TraceEventKind::op), 1u);
  ASSERT_EQ(by_kind.count(TraceEventKind::memory), 1u);
  EXPECT_DOUBLE_EQ(by_kind[TraceEventKind::op]->ts_us, 1.5);
  EXPECT_DOUBLE_EQ(by_kind[TraceEventKind::op]->dur_us, 3.25);
  EXPECT_DOUBLE_EQ(by_kind[TraceEventKind::memory]->ts_us, 2.501);
}

TEST(Trace, RefusesABoundItsIndicesCannotReach) {
  TraceOptions options;
  options.max_events = TraceRecorder::kMaxEvents;
  EXPECT_NO_THROW(TraceRecorder{options});
  options.max_events = TraceRecorder::kMaxEvents + 1;
  try {
    TraceRecorder recorder(options);
    FAIL() << "a bound above kMaxEvents was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("TraceOptions::max_events: expected at most "
                                               "268435456 events, given 268435457"));
  }
}

TEST(Trace, RankPathsAndMergeForMpiRuns) {
  EXPECT_EQ(rank_trace_path("out/trace.json", 3), "out/trace.rank3.json");
  EXPECT_EQ(rank_trace_path("trace", 0), "trace.rank0.json");
  // Two recorders, one per rank, as two MPI processes would have.
  TraceRecorder rank0, rank1;
  const LayerRunSpec spec = trace_testing::tp_spec(1);
  run_spmd(2, SpmdOptions{}, [&](RankEnv& env) {
    ObserverGuard attach(env.ctx, env.rank == 0 ? rank0 : rank1);
    run_layer_rank(env, spec);
  });
  const std::string base = trace_testing::temp_path("mpi.json");
  rank0.write_chrome_trace(rank_trace_path(base, 0));
  rank1.write_chrome_trace(rank_trace_path(base, 1));
  merge_trace_files({rank_trace_path(base, 0), rank_trace_path(base, 1)}, base);
  const TraceFile merged = read_trace(base);
  EXPECT_THAT(merged.meta.ranks, ElementsAre(0, 1));
  EXPECT_EQ(merged.events.size(), rank0.events().size() + rank1.events().size());
  EXPECT_THROW(merge_traces({read_trace(base), read_trace(rank_trace_path(base, 1))}),
               TraceFormatError);
  for (const std::string& p : {base, rank_trace_path(base, 0), rank_trace_path(base, 1)}) {
    std::remove(p.c_str());
  }
}

}  // namespace
}  // namespace shardscope
