// The memory panel on recorded runs: at the end of step 0's forward the saved activations read
// from the trace equal the paper's formula exactly, term by term, in every mode; mid-forward the
// later terms are still short; the charts lie inside the panel with one column per pixel at most
// and mark each rank's peak.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "io/manifest.h"
#include "parallel/layers/layer_decl.h"
#include "parallel/models/memory_model.h"
#include "tests/viz/viz_testing.h"
#include "viz/model/synthetic.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

constexpr PanelSize kPanel{900, 420};

std::size_t rank_index(const TraceFile& t, int rank) {
  return static_cast<std::size_t>(std::find(t.meta.ranks.begin(), t.meta.ranks.end(), rank) -
                                  t.meta.ranks.begin());
}

// Each rank's events before its first event for which stop(event) holds.
template <class Stop>
Snapshot snapshot_before(const TraceFile& t, Stop stop) {
  std::vector<std::size_t> visible(t.meta.ranks.size(), 0);
  std::vector<bool> stopped(t.meta.ranks.size(), false);
  for (const TraceEvent& e : t.events) {
    const std::size_t r = rank_index(t, e.rank);
    stopped[r] = stopped[r] || stop(e);
    if (!stopped[r]) ++visible[r];
  }
  return snapshot_of_trace(t, config_of_trace(t), t.meta.config.value("keep_gathered_input", false),
                           visible);
}

Snapshot end_of_first_forward(const TraceFile& t) {
  return snapshot_before(t, [](const TraceEvent& e) {
    return e.kind == TraceEventKind::op && e.phase == Phase::backward;
  });
}

// Every mode at degree 2 and 4 (single on one device); record_run names its file after the
// test, so the cases run in one test rather than as parameters (whose names hold a '/').
TEST(MemoryView, SavedActivationsAtTheEndOfTheForwardEqualTheFormulaInEveryMode) {
  const std::pair<const char*, int> cases[] = {{"single", 1}, {"tp", 2},    {"tp", 4},
                                               {"tp-sp", 2},  {"tp-sp", 4}, {"ulysses", 2},
                                               {"ulysses", 4}};
  for (const auto& [mode, degree] : cases) {
    SCOPED_TRACE(std::string(mode) + " at degree " + std::to_string(degree));
    const TraceFile t = testing::record_run(mode, degree);
    const Snapshot s = end_of_first_forward(t);
    ASSERT_GT(s.config.dropout, 0) << "the masks are part of the formula tested";
    const ActivationModel model = activation_model(s.config, s.keep_gathered_input);
    for (int rank : t.meta.ranks) {
      const MemoryView v = memory_view(s, rank, kPanel);
      EXPECT_EQ(v.formula_total, model.total_bytes);
      EXPECT_EQ(v.formula, model.formula);
      EXPECT_EQ(v.saved_total, v.formula_total) << "rank " << rank;
      // A single layer is a stack of one: its total is the stack's.
      ASSERT_EQ(v.layers.size(), 1u);
      EXPECT_EQ(v.stack_saved_total, v.saved_total);
      EXPECT_EQ(v.stack_formula_total, v.formula_total);
      ASSERT_EQ(v.saved.size(), model.terms.size()) << "a saving op the formula lacks";
      for (const SavedTermRow& row : v.saved) {
        EXPECT_EQ(row.measured_bytes, row.model_bytes)
            << "rank " << rank << ": " << row.what << " (" << row.saved_by << ")";
        EXPECT_TRUE(row.complete) << row.what;
      }
    }
  }
}

// A stack of 3: at the end of step 0's forward each layer's terms equal the formula (the same for
// every layer), each layer's total does, nothing is saved outside the layers, and the stack's
// total is 3 times the formula.
TEST(MemoryView, EachLayerOfAStackSavesWhatTheFormulaSays) {
  for (const char* mode : {"tp-sp", "ulysses"}) {
    SCOPED_TRACE(mode);
    const TraceFile t = testing::record_stack(mode, 2, 3);
    const Snapshot s = end_of_first_forward(t);
    ASSERT_EQ(s.config.layers, 3);
    const ActivationModel model = activation_model(s.config, s.keep_gathered_input);
    for (int rank : t.meta.ranks) {
      for (int layer = 0; layer < 3; ++layer) {
        SCOPED_TRACE("rank " + std::to_string(rank) + ", layer " + std::to_string(layer));
        const MemoryView v = memory_view(s, rank, kPanel, layer);
        EXPECT_EQ(v.layer, layer);
        EXPECT_EQ(v.formula_total, model.total_bytes);
        EXPECT_EQ(v.saved_total, v.formula_total);
        ASSERT_EQ(v.saved.size(), model.terms.size()) << "a saving op the formula lacks";
        for (const SavedTermRow& row : v.saved) {
          EXPECT_EQ(row.measured_bytes, row.model_bytes) << row.what << " (" << row.saved_by << ")";
        }
        ASSERT_EQ(v.layers.size(), 3u);
        for (const LayerSavedRow& row : v.layers) {
          EXPECT_EQ(row.measured_bytes, model.total_bytes) << "layer " << row.layer;
          EXPECT_TRUE(row.complete) << "layer " << row.layer;
        }
        EXPECT_EQ(v.outside_saved, 0);
        EXPECT_EQ(v.stack_formula_total, 3 * model.total_bytes);
        EXPECT_EQ(v.stack_saved_total, v.stack_formula_total);
      }
    }
  }
}

// Stopped before layer 2's forward: layers 0 and 1 are complete, layer 2 has saved nothing, and
// the view of the rank's own op shows layer 1, the layer it is in.
TEST(MemoryView, MidStackTheLaterLayersHaveSavedNothingYet) {
  const TraceFile t = testing::record_stack("tp-sp", 2, 3);
  const Snapshot s = snapshot_before(t, [](const TraceEvent& e) {
    return e.kind == TraceEventKind::op && e.phase == Phase::forward && e.layer == 2;
  });
  const ActivationModel model = activation_model(s.config, s.keep_gathered_input);
  for (int rank : t.meta.ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const MemoryView own = memory_view(s, rank, kPanel);
    EXPECT_EQ(own.layer, 1) << "the layer of the rank's last op";
    EXPECT_EQ(own.saved_total, model.total_bytes);
    for (int layer : {0, 1}) {
      const MemoryView v = memory_view(s, rank, kPanel, layer);
      EXPECT_EQ(v.saved_total, model.total_bytes) << "layer " << layer;
      for (const SavedTermRow& row : v.saved) EXPECT_TRUE(row.complete) << row.what;
    }
    const MemoryView later = memory_view(s, rank, kPanel, 2);
    EXPECT_EQ(later.saved_total, 0);
    ASSERT_EQ(later.saved.size(), model.terms.size());
    for (const SavedTermRow& row : later.saved) {
      EXPECT_EQ(row.measured_bytes, 0) << row.what;
      EXPECT_FALSE(row.complete) << row.what;
    }
    ASSERT_EQ(later.layers.size(), 3u);
    EXPECT_TRUE(later.layers[0].complete);
    EXPECT_TRUE(later.layers[1].complete);
    EXPECT_EQ(later.layers[2].measured_bytes, 0);
    EXPECT_EQ(later.stack_saved_total, 2 * model.total_bytes);
    EXPECT_EQ(later.stack_formula_total, 3 * model.total_bytes);
  }
  EXPECT_THROW(memory_view(s, 0, kPanel, 3), ArgumentError);
}

// Nothing in a real run saves outside the layers, so an op that did (layer -1, as the loss runs)
// is planted: it counts in the stack's total, apart from every layer's.
TEST(MemoryView, WhatIsSavedOutsideTheLayersCountsInTheStacksTotalAlone) {
  const TraceFile t = testing::record_stack("tp-sp", 2, 3);
  Snapshot s = end_of_first_forward(t);
  const double formula = activation_model(s.config, s.keep_gathered_input).total_bytes;
  TraceEvent outside;
  outside.kind = TraceEventKind::op;
  outside.rank = 0;
  outside.layer = -1;
  outside.scope = "loss";
  outside.op = "sub";
  outside.saved_bytes = 1000;
  outside.saved_extra_bytes = 200;  // statistics, which the table leaves out
  s.events.push_back(outside);
  const MemoryView v = memory_view(s, 0, kPanel, 2);
  EXPECT_EQ(v.outside_saved, 800);
  EXPECT_EQ(v.stack_saved_total, 3 * formula + 800);
  EXPECT_EQ(v.saved_total, formula) << "not layer 2's";
  for (const LayerSavedRow& row : v.layers) EXPECT_EQ(row.measured_bytes, formula);
}

// With --recompute the backward runs forward ops again, which save for their own backward: the
// table stays what the forward saved, the formula, through the whole backward (it grew by every
// recomputed op's saves before).
TEST(MemoryView, RecomputedForwardOpsInTheBackwardAreNotTheForwardsSaves) {
  for (const Recompute recompute : {Recompute::selective, Recompute::full}) {
    SCOPED_TRACE(recompute_name(recompute));
    RunOptions o = testing::run_options("tp-sp", 2);
    o.spec.layer.layers = 2;
    o.spec.layer.recompute = recompute;
    const TraceFile t = testing::record_options(o, recompute_name(recompute));
    // Rank 0's forward ops after its first backward op that save something: the recomputation.
    int recomputed = 0;
    bool in_backward = false;
    for (const TraceEvent& e : t.events) {
      if (e.kind != TraceEventKind::op || e.rank != 0) continue;
      in_backward = in_backward || e.phase == Phase::backward;
      recomputed += in_backward && e.phase == Phase::forward && e.saved_bytes > 0;
    }
    EXPECT_GT(recomputed, 0) << "no forward op ran again in the backward";
    const double formula = activation_model(o.spec.layer, false).total_bytes;
    Replay r(t);
    int backward_stops = 0;
    while (r.step_op()) {
      const Snapshot s = r.snapshot();
      const RankStatus& st = s.status[0];
      if (st.state == RankStatus::State::finished) break;
      if (st.phase != Phase::backward) continue;
      ++backward_stops;
      const MemoryView v = memory_view(s, 0, kPanel);
      ASSERT_EQ(v.stack_saved_total, 2 * formula) << st.where;
      for (const LayerSavedRow& row : v.layers) EXPECT_TRUE(row.complete) << st.where;
    }
    EXPECT_GT(backward_stops, 20);
  }
}

TEST(MemoryView, MidForwardTheMlpTermsAreStillShort) {
  const TraceFile t = testing::record_run("tp-sp", 4);
  const Snapshot s = snapshot_before(
      t, [](const TraceEvent& e) { return e.kind == TraceEventKind::op && e.scope == "mlp.fc1"; });
  const MemoryView v = memory_view(s, 1, kPanel);
  EXPECT_LT(v.saved_total, v.formula_total);
  bool in_mlp = false;
  for (const SavedTermRow& row : v.saved) {
    in_mlp = in_mlp || row.saved_by.rfind("mlp.", 0) == 0;
    if (in_mlp) {
      EXPECT_LT(row.measured_bytes, row.model_bytes) << row.what;
      EXPECT_FALSE(row.complete) << row.what;
    } else {
      EXPECT_EQ(row.measured_bytes, row.model_bytes) << row.what << ": attention is done";
    }
  }
  EXPECT_TRUE(in_mlp);
}

bool inside(const Rect& inner, const Rect& outer) {
  const float eps = 1e-3f;
  return inner.x0 >= outer.x0 - eps && inner.x1 <= outer.x1 + eps && inner.y0 >= outer.y0 - eps &&
         inner.y1 <= outer.y1 + eps && inner.x0 <= inner.x1 && inner.y0 <= inner.y1;
}

TEST(MemoryView, ChartsLieInsideThePanelAndMarkEachRanksPeak) {
  const TraceFile t = testing::record_run("tp", 4);
  const Snapshot s = testing::snapshot_at(t);
  const MemoryView v = memory_view(s, 0, kPanel);
  ASSERT_EQ(v.charts.size(), 4u);
  const Rect panel{0, 0, kPanel.width, kPanel.height};
  for (const MemoryChart& c : v.charts) {
    EXPECT_TRUE(inside(c.frame, panel));
    ASSERT_FALSE(c.segments.empty()) << "rank " << c.rank;
    EXPECT_LE(c.segments.size(), static_cast<std::size_t>(kMemoryCategoryCount * c.frame.width()));
    for (const auto& [rect, color] : c.segments) EXPECT_TRUE(inside(rect, c.frame));
    for (const Label& l : c.labels) {
      EXPECT_GE(l.x, 0);
      EXPECT_LE(l.y + theme::kLabelHeight, kPanel.height);
    }
    double highest = 0;
    for (const TraceEvent& e : s.events) {
      if (e.kind != TraceEventKind::memory || e.rank != c.rank) continue;
      double total = 0;
      for (std::uint64_t b : e.memory) total += static_cast<double>(b);
      highest = std::max(highest, total);
    }
    EXPECT_EQ(c.peak_bytes, highest) << "rank " << c.rank;
    EXPECT_GT(c.peak_bytes, 0);
    ASSERT_EQ(c.peaks.size(), 2u);
    EXPECT_EQ(c.peaks[0].color, theme::kPeak);
    bool labelled = false;
    for (const Label& l : c.labels)
      labelled = labelled || l.text == "peak " + byte_size_text(highest);
    EXPECT_TRUE(labelled) << "rank " << c.rank;
  }
  // The highest column reaches the peak line: segments of one column stack up to it.
  const MemoryChart& c = v.charts[0];
  float top = c.frame.y1;
  for (const auto& [rect, color] : c.segments) top = std::min(top, rect.y0);
  EXPECT_NEAR(top, c.peaks[0].y0, 0.01f);
  ASSERT_EQ(v.legend.size(), static_cast<std::size_t>(kMemoryCategoryCount));
  for (int k = 0; k < kMemoryCategoryCount; ++k) {
    const auto category = static_cast<MemoryCategory>(k);
    EXPECT_EQ(v.legend[static_cast<std::size_t>(k)].text, memory_category_name(category));
    EXPECT_EQ(v.legend[static_cast<std::size_t>(k)].color, theme::memory_color(category));
  }
}

// Issue 19: at small heights the peak label covered the chart. It now sits where it covers no
// column, or is left out (the peak line remains).
TEST(MemoryView, ThePeakLabelCoversNoColumnAtAnyHeight) {
  const Snapshot s = testing::snapshot_at(testing::record_run("tp", 4));
  int labelled = 0;
  for (const float height : {140.0f, 180.0f, 260.0f, 420.0f}) {
    const MemoryView v = memory_view(s, 0, {900, height});
    for (const MemoryChart& c : v.charts) {
      for (const Label& l : c.labels) {
        if (l.text.rfind("peak ", 0) != 0) continue;
        ++labelled;
        const float x1 = l.x + static_cast<float>(l.text.size()) * theme::kCharWidth;
        EXPECT_LE(x1, c.frame.x1 + 0.5f);
        for (const auto& [r, color] : c.segments) {
          const bool apart = r.x1 <= l.x || x1 <= r.x0 || r.y0 >= l.y + theme::kLabelHeight;
          ASSERT_TRUE(apart) << "'" << l.text << "' covers a column at height " << height;
        }
      }
    }
  }
  EXPECT_GT(labelled, 4) << "no peak labelled at the larger sizes";
}

TEST(MemoryView, ASyntheticTraceFoldsToAtMostOneColumnPerPixel) {
  const TraceFile t = synthetic_trace(8, 100000, 3);
  const Snapshot s = testing::snapshot_at(t);
  const PanelSize panel{1000, 600};
  const MemoryView v = memory_view(s, 0, panel);
  ASSERT_EQ(v.charts.size(), 8u);
  for (const MemoryChart& c : v.charts) {
    EXPECT_TRUE(inside(c.frame, Rect{0, 0, panel.width, panel.height}));
    EXPECT_LE(c.segments.size(), static_cast<std::size_t>(kMemoryCategoryCount * c.frame.width()));
    for (const auto& [rect, color] : c.segments) EXPECT_TRUE(inside(rect, c.frame));
    EXPECT_GT(c.peak_bytes, 0);
  }
}

// The synthetic trace is played from the layer's declaration: every op runs in a declared scope
// (or grad_reduce), and what step 0's forward saves on a rank is the activation model's total for
// the trace's configuration, LayerNorm statistics included.
TEST(MemoryView, ASyntheticTraceSavesWhatTheActivationModelSays) {
  const TraceFile t = synthetic_trace(4, 20000, 5);
  const LayerConfig c = layer_config_from_json(t.meta.config, "the synthetic trace");
  const ActivationModel model = activation_model(c, false);
  std::set<std::string> scopes{decl::kGradReduceScope};
  for (const decl::ModuleDecl& m : decl::modules(c)) scopes.insert(m.scope);
  double saved = 0;
  for (const TraceEvent& e : t.events) {
    if (e.kind != TraceEventKind::op) continue;
    EXPECT_TRUE(scopes.count(e.scope)) << "op in undeclared scope \"" << e.scope << "\"";
    if (e.rank == 2 && e.step == 0 && e.phase == Phase::forward) {
      saved += static_cast<double>(e.saved_bytes);
    }
  }
  EXPECT_NEAR(saved, model.total_bytes + model.extras_bytes, 16.0)  // whole bytes per stage
      << mode_name(c.mode) << " t=" << c.degree;
}

}  // namespace
}  // namespace shardscope::viz
