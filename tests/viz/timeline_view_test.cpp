// The collectives timeline on a recorded tp-sp run at degree 4 (lanes, boxes by kind, step 0's
// totals against the communication model, the selected all-gather's flows, the cursor, hit
// testing, zoom) and on a synthetic trace of 8 ranks and 100,000 events (culling and folding
// keep the boxes few and inside the panel).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/viz/viz_testing.h"
#include "viz/model/synthetic.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

constexpr PanelSize kPanel{1200, 160};

const TraceFile& tp_sp_4() {
  static const TraceFile trace = testing::record_run("tp-sp", 4);
  return trace;
}

std::size_t collectives_in(const Snapshot& s) {
  return static_cast<std::size_t>(
      std::count_if(s.events.begin(), s.events.end(),
                    [](const TraceEvent& e) { return e.kind == TraceEventKind::collective; }));
}

std::size_t folded_in(const TimelineView& v) {
  std::size_t n = 0;
  for (const TimelineBox& b : v.boxes) n += b.folded;
  return n;
}

bool inside(const Rect& inner, const Rect& outer) {
  return inner.x0 >= outer.x0 && inner.x1 <= outer.x1 && inner.y0 >= outer.y0 &&
         inner.y1 <= outer.y1 && inner.x0 <= inner.x1;
}

// Index of the lane whose top or bottom edge is at y, or -1.
int lane_at_edge(const TimelineView& v, float y) {
  for (std::size_t i = 0; i < v.lanes.size(); ++i) {
    if (y == v.lanes[i].y0 || y == v.lanes[i].y1) return static_cast<int>(i);
  }
  return -1;
}

TEST(TimelineView, OneLanePerRankAndABoxPerCollectiveInItsKindsColour) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  const TimelineView v = timeline_view(s, {}, kPanel);
  ASSERT_EQ(v.lanes.size(), 4u);
  ASSERT_EQ(v.lane_labels.size(), 4u);
  std::set<int> ranks_with_boxes;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(v.lane_labels[static_cast<std::size_t>(r)].text, "rank " + std::to_string(r));
    EXPECT_EQ(v.lane_labels[static_cast<std::size_t>(r)].color, theme::rank_color(r));
  }
  for (const TimelineBox& b : v.boxes) {
    ASSERT_GE(b.rank, 0);
    ASSERT_LT(b.rank, 4);
    EXPECT_TRUE(inside(b.rect, v.lanes[static_cast<std::size_t>(b.rank)])) << b.tooltip;
    const TraceEvent& e = s.events[b.event];
    EXPECT_EQ(e.kind, TraceEventKind::collective);
    EXPECT_EQ(e.rank, b.rank);
    if (b.folded == 1) {
      EXPECT_EQ(b.fill, theme::collective_color(e.collective)) << b.tooltip;
      EXPECT_NE(b.tooltip.find(collective_name(e.collective)), std::string::npos);
      const std::string issuer = e.scope.empty() ? e.op : e.scope + "/" + e.op;
      EXPECT_NE(b.tooltip.find("issued by " + issuer), std::string::npos) << b.tooltip;
      EXPECT_NE(b.tooltip.find(comm_purpose_name(e.purpose)), std::string::npos);
    }
    if (!b.label.empty()) {
      EXPECT_GE(b.rect.width(), 7.0f * static_cast<float>(b.label.size()));
    }
    ranks_with_boxes.insert(b.rank);
  }
  EXPECT_EQ(ranks_with_boxes.size(), 4u);
  EXPECT_EQ(folded_in(v), collectives_in(s)) << "the whole run is in the window";
}

TEST(TimelineView, LabelsAWideBoxWithKindAndSize) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  // Zoomed onto the first collective alone: its box spans the lane.
  const TraceEvent* first = nullptr;
  for (const TraceEvent& e : s.events) {
    if (e.kind == TraceEventKind::collective && e.rank == 0) {
      first = &e;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  TimelineViewport zoom;
  zoom.begin_us = first->ts_us;
  zoom.end_us = first->ts_us + std::max(first->dur_us, 1e-3);
  const TimelineView v = timeline_view(s, zoom, kPanel);
  const TimelineBox* b = timeline_box_at(v, v.lanes[0].x0 + 10, v.lanes[0].y0 + 5);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->label, std::string(collective_name(first->collective)) + " " +
                          byte_size_text(first->full_bytes));
}

TEST(TimelineView, StepZeroTotalsMatchTheCommModel) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  const TimelineView v = timeline_view(s, {}, kPanel);
  int activation_rows = 0;
  for (const CommTotalRow& r : v.totals) {
    if (r.purpose != "activation" && r.purpose != "param_grad") continue;
    activation_rows += r.purpose == "activation";
    EXPECT_TRUE(r.matches) << r.kind << " " << r.phase << " " << r.purpose << ": " << r.calls
                           << " calls, " << r.bytes << " B; model " << r.model_calls << ", "
                           << r.model_bytes;
    EXPECT_GT(r.calls, 0) << r.kind << " " << r.phase;
  }
  EXPECT_EQ(activation_rows, 4) << "all-gather and reduce-scatter, forward and backward";
  // Drop one forward all-gather of rank 0: the totals no longer match the model.
  Snapshot missing = s;
  for (auto it = missing.events.begin(); it != missing.events.end(); ++it) {
    if (it->kind == TraceEventKind::collective && it->rank == 0 &&
        it->collective == CollectiveKind::all_gather && it->phase == Phase::forward) {
      missing.events.erase(it);
      break;
    }
  }
  bool mismatch = false;
  for (const CommTotalRow& r : timeline_view(missing, {}, kPanel).totals) {
    mismatch = mismatch || (!r.matches && r.kind == "all_gather" && r.phase == "forward");
  }
  EXPECT_TRUE(mismatch);
}

// A stack of 3: step 0's totals of every layer together match the model's lines of every layer,
// and each layer's alone match its own lines (the same counts as a single layer's).
TEST(TimelineView, EachLayerOfAStacksCollectivesMatchItsCommModelLines) {
  const TraceFile t = testing::record_stack("tp-sp", 2, 3);
  const Snapshot s = testing::snapshot_at(t);
  const TimelineView all = timeline_view(s, {}, kPanel);
  EXPECT_TRUE(all.layer_totals.empty()) << "no layer asked for";
  std::map<std::string, int> stack_calls;
  for (const CommTotalRow& r : all.totals) {
    if (!r.modelled) continue;
    EXPECT_TRUE(r.matches) << r.kind << " " << r.phase << " " << r.purpose << ": " << r.calls_text;
    stack_calls[r.kind + " " + r.phase + " " + r.purpose] = r.calls;
  }
  EXPECT_EQ(stack_calls.size(), 5u) << "gathers and scatters both ways, the gradients' all-reduce";
  std::map<std::string, int> summed;
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    TimelineViewport viewport;
    viewport.layer = layer;
    const TimelineView v = timeline_view(s, viewport, kPanel);
    EXPECT_EQ(v.totals.size(), all.totals.size()) << "the stack's table stays";
    ASSERT_EQ(v.layer_totals.size(), 5u) << "no loss or check rows in a layer";
    for (const CommTotalRow& r : v.layer_totals) {
      const std::string what = r.kind + " " + r.phase + " " + r.purpose;
      EXPECT_TRUE(r.modelled) << what;
      EXPECT_TRUE(r.matches) << what << ": " << r.calls_text << ", " << r.bytes << " B of "
                             << r.model_bytes;
      EXPECT_GT(r.calls, 0) << what;
      summed[what] += r.calls;
    }
  }
  EXPECT_EQ(summed, stack_calls);
  // Stopped before layer 2's forward: layer 0's forward calls are all there, layer 2's none.
  std::vector<std::size_t> visible(t.meta.ranks.size(), 0);
  std::vector<bool> stopped(t.meta.ranks.size(), false);
  for (const TraceEvent& e : t.events) {
    const auto r = static_cast<std::size_t>(e.rank);
    stopped[r] = stopped[r] || (e.kind == TraceEventKind::op && e.layer == 2);
    if (!stopped[r]) ++visible[r];
  }
  const Snapshot mid = snapshot_of_trace(t, config_of_trace(t), false, visible);
  for (int layer : {0, 2}) {
    TimelineViewport viewport;
    viewport.layer = layer;
    for (const CommTotalRow& r : timeline_view(mid, viewport, kPanel).layer_totals) {
      if (r.phase != "forward") continue;
      const std::string what = "layer " + std::to_string(layer) + " " + r.kind + " " + r.phase;
      EXPECT_EQ(r.calls, layer == 0 ? r.model_calls : 0) << what;
      EXPECT_EQ(r.model_color, layer == 0 ? theme::kPassed : theme::kPending) << what;
    }
  }
}

// Issue 19: the loss and check rows showed "n/0" and a green "0 B" model; `shardscope run`
// prints "-" and "no model" for them, and so does the panel now.
TEST(TimelineView, LossAndCheckRowsHaveNoModelAsTheCliSays) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  int unmodelled = 0;
  for (const CommTotalRow& r : timeline_view(s, {}, kPanel).totals) {
    const std::string what = r.kind + " " + r.phase + " " + r.purpose;
    if (r.purpose == "activation" || r.purpose == "param_grad") {
      EXPECT_TRUE(r.modelled) << what;
      EXPECT_EQ(r.calls_text, std::to_string(r.calls) + "/" + std::to_string(r.model_calls));
      EXPECT_EQ(r.model_text, byte_size_text(r.model_bytes)) << what;
      EXPECT_EQ(r.model_color, theme::kPassed) << what;
      continue;
    }
    ++unmodelled;
    EXPECT_FALSE(r.modelled) << what;
    EXPECT_EQ(r.calls_text, std::to_string(r.calls) + "/-") << what;
    EXPECT_EQ(r.model_text, "no model") << what;
    EXPECT_EQ(r.model_color, theme::kTextDim) << what;
  }
  EXPECT_GT(unmodelled, 0) << "the loss and the check's collectives are in step 0";
}

// Issue 19: the 12 byte labels of a 4-rank call were drawn on top of each other. Labels that
// would overlap fold into one ("48.0 KiB (4 arrows)"): no two overlap, every arrow is counted
// once, and each says what every arrow carries.
void expect_folded_labels(const TimelineView& v, const std::string& each) {
  int arrows = 0;
  for (std::size_t i = 0; i < v.flow_labels.size(); ++i) {
    const Label& l = v.flow_labels[i];
    ASSERT_EQ(l.text.rfind(each, 0), 0u) << l.text;
    const std::string rest = l.text.substr(each.size());
    if (rest.empty()) {
      ++arrows;
    } else {
      ASSERT_EQ(rest.substr(rest.size() - 8), " arrows)") << l.text;
      arrows += std::stoi(rest.substr(2));
    }
    const float w = static_cast<float>(l.text.size()) * theme::kCharWidth;
    EXPECT_LE(l.x + w, v.lanes[0].x1 + 0.5f) << "'" << l.text << "' runs past the lanes";
    for (std::size_t j = 0; j < i; ++j) {
      const Label& o = v.flow_labels[j];
      const float wo = static_cast<float>(o.text.size()) * theme::kCharWidth;
      const bool apart = l.x + w <= o.x || o.x + wo <= l.x || l.y + theme::kLabelHeight <= o.y ||
                         o.y + theme::kLabelHeight <= l.y;
      EXPECT_TRUE(apart) << "'" << l.text << "' overlaps '" << o.text << "'";
    }
  }
  EXPECT_EQ(arrows, static_cast<int>(v.flows.size()));
  EXPECT_LT(v.flow_labels.size(), v.flows.size()) << "nothing folded at this size";
}

// The call a run is stopped at is at the timeline's right edge: its labels stay inside.
TEST(TimelineView, FlowLabelsOfTheLatestCallStayInsideTheLanes) {
  Replay r(tp_sp_4());
  ASSERT_TRUE(r.next_collective());
  const Snapshot s = r.snapshot();
  TimelineViewport viewport;
  viewport.selected = s.events.size() - 1;
  ASSERT_EQ(s.events.back().kind, TraceEventKind::collective);
  const TimelineView v = timeline_view(s, viewport, kPanel);
  ASSERT_EQ(v.flows.size(), 12u);
  expect_folded_labels(v, byte_size_text(s.events.back().full_bytes / 4));
  // Drawn at the call (where the last rank entered it), not pushed back from the lanes' edge.
  double entered = 0;
  for (const TraceEvent& e : s.events) {
    if (e.kind == TraceEventKind::collective && e.seq == s.events.back().seq) {
      entered = std::max(entered, e.ts_us);
    }
  }
  const Rect& lane = v.lanes[0];
  const float call_x =
      lane.x0 +
      static_cast<float>((entered - v.begin_us) / (v.end_us - v.begin_us)) * (lane.x1 - lane.x0);
  float first = lane.x1;
  for (const Line& f : v.flows) {
    first = std::min(first, f.x0);
    EXPECT_LE(std::max(f.x0, f.x1), lane.x1) << "an arrow past the lanes";
  }
  EXPECT_NEAR(first, call_x, 0.5f) << "the arrows leave from the call";
  ASSERT_TRUE(v.cursor);
  EXPECT_LE(call_x, v.cursor->x0 + 1e-3f);
}

TEST(TimelineView, TheSelectedForwardAllGatherFlowsBetweenEveryPairOfRanks) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  std::optional<std::size_t> gather;
  for (std::size_t i = 0; i < s.events.size() && !gather; ++i) {
    const TraceEvent& e = s.events[i];
    if (e.kind == TraceEventKind::collective && e.rank == 2 && e.phase == Phase::forward &&
        e.collective == CollectiveKind::all_gather) {
      gather = i;
    }
  }
  ASSERT_TRUE(gather);
  const TraceEvent& e = s.events[*gather];
  EXPECT_EQ(e.scope, "attn.qkv");
  TimelineViewport viewport;
  viewport.selected = gather;
  const TimelineView v = timeline_view(s, viewport, kPanel);
  ASSERT_EQ(v.flows.size(), 12u) << "every rank's chunk to each of the 3 others";
  std::set<std::pair<int, int>> pairs;
  for (std::size_t k = 0; k < v.flows.size(); ++k) {
    const Line& f = v.flows[k];
    const int from = lane_at_edge(v, f.y0), to = lane_at_edge(v, f.y1);
    ASSERT_GE(from, 0);
    ASSERT_GE(to, 0);
    EXPECT_NE(from, to);
    EXPECT_TRUE(f.arrow);
    EXPECT_EQ(f.color, theme::rank_color(from));
    pairs.insert({from, to});
  }
  expect_folded_labels(v, byte_size_text(e.full_bytes / 4));
  EXPECT_EQ(pairs.size(), 12u);
  // What each rank sends to the others is what the ring formula says it sends.
  EXPECT_DOUBLE_EQ(3 * e.full_bytes / 4, e.bytes_sent);
  // An op slice selected: no flows.
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    if (s.events[i].kind != TraceEventKind::op) continue;
    viewport.selected = i;
    EXPECT_TRUE(timeline_view(s, viewport, kPanel).flows.empty());
    break;
  }
}

TEST(TimelineView, AnAllReduceFlowsBothWaysBetweenEveryPair) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  TimelineViewport viewport;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    if (s.events[i].kind == TraceEventKind::collective &&
        s.events[i].collective == CollectiveKind::all_reduce &&
        s.events[i].purpose == CommPurpose::param_grad) {
      viewport.selected = i;
      break;
    }
  }
  ASSERT_TRUE(viewport.selected);
  const TimelineView v = timeline_view(s, viewport, kPanel);
  ASSERT_EQ(v.flows.size(), 12u);
  const double chunk = s.events[*viewport.selected].full_bytes / 4;
  expect_folded_labels(v, "2 x " + byte_size_text(chunk));
}

TEST(TimelineView, MidRunTheCursorIsAtNowAndOpenCollectivesEndThere) {
  const TraceFile& t = tp_sp_4();
  const Snapshot s = testing::snapshot_at(t, t.events.size() / 2);
  const TimelineView v = timeline_view(s, {}, kPanel);
  ASSERT_TRUE(v.cursor);
  // The window ends a little after now: room right of the cursor for the latest call's arrows.
  EXPECT_GT(v.end_us, s.now_us);
  EXPECT_LT(v.cursor->x0, v.lanes[0].x1 - 4 * 20.0f) << "no room for 4 ranks' arrows";
  EXPECT_GT(v.cursor->x0, v.lanes[0].x0 + 0.6f * (v.lanes[0].x1 - v.lanes[0].x0));
  EXPECT_EQ(v.cursor->y0, v.lanes.front().y0);
  EXPECT_EQ(v.cursor->y1, v.lanes.back().y1);
  for (const TimelineBox& b : v.boxes) EXPECT_LE(b.rect.x1, v.cursor->x0 + 1e-3f);
}

TEST(TimelineView, ZoomingCullsWhatLiesOutsideTheWindow) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  const TimelineView whole = timeline_view(s, {}, kPanel);
  TimelineViewport zoom;
  const double span = whole.end_us - whole.begin_us;
  zoom.begin_us = whole.begin_us + 0.45 * span;
  zoom.end_us = whole.begin_us + 0.55 * span;
  const TimelineView v = timeline_view(s, zoom, kPanel);
  EXPECT_EQ(v.begin_us, zoom.begin_us);
  EXPECT_EQ(v.end_us, zoom.end_us);
  EXPECT_LT(folded_in(v), folded_in(whole));
  for (const TimelineBox& b : v.boxes) {
    EXPECT_TRUE(inside(b.rect, v.lanes[static_cast<std::size_t>(b.rank)]));
    const TraceEvent& e = s.events[b.event];
    EXPECT_LE(e.ts_us, zoom.end_us);
    EXPECT_GE(e.ts_us + e.dur_us, zoom.begin_us);
  }
  // A window after the run holds nothing.
  zoom.begin_us = whole.end_us + 10;
  zoom.end_us = whole.end_us + 20;
  EXPECT_TRUE(timeline_view(s, zoom, kPanel).boxes.empty());
}

TEST(TimelineView, BoxAtFindsTheBoxUnderThePoint) {
  const Snapshot s = testing::snapshot_at(tp_sp_4());
  const TimelineView v = timeline_view(s, {}, kPanel);
  ASSERT_FALSE(v.boxes.empty());
  for (const TimelineBox& b : v.boxes) {
    const float x = (b.rect.x0 + b.rect.x1) / 2, y = (b.rect.y0 + b.rect.y1) / 2;
    EXPECT_EQ(timeline_box_at(v, x, y), &b);
  }
  EXPECT_EQ(timeline_box_at(v, 1, v.lanes[0].y0 + 5), nullptr) << "the label column";
  EXPECT_EQ(timeline_box_at(v, v.lanes[0].x0 + 5, kPanel.height - 1), nullptr) << "below lanes";
}

TEST(TimelineView, ASyntheticTraceOf100kEventsFoldsToAFewBoxesInsideThePanel) {
  const TraceFile t = synthetic_trace(8, 100000, 42);
  ASSERT_EQ(t.events.size(), 100000u);
  EXPECT_EQ(config_of_trace(t).degree, 8);
  const Snapshot s = testing::snapshot_at(t);
  const PanelSize panel{1600, 240};
  const TimelineView v = timeline_view(s, {}, panel);
  ASSERT_EQ(v.lanes.size(), 8u);
  const float lane_width = v.lanes[0].width();
  const auto bound = static_cast<std::size_t>(8 * (lane_width / theme::kFoldPixels + 1));
  EXPECT_LE(v.boxes.size(), bound);
  EXPECT_GT(collectives_in(s), 3 * bound) << "the trace must be dense enough to fold";
  EXPECT_EQ(folded_in(v), collectives_in(s));
  const Rect whole{0, 0, panel.width, panel.height};
  for (const TimelineBox& b : v.boxes) {
    EXPECT_TRUE(inside(b.rect, whole));
    EXPECT_GE(b.rect.width(), theme::kFoldPixels - 1e-3f);
  }
  for (const Label& l : v.lane_labels) EXPECT_LT(l.y + theme::kLabelHeight, panel.height);
  // Each lane's boxes never overlap, so a point finds exactly one.
  for (std::size_t i = 1; i < v.boxes.size(); ++i) {
    if (v.boxes[i].rank == v.boxes[i - 1].rank) {
      EXPECT_GE(v.boxes[i].rect.x0, v.boxes[i - 1].rect.x1);
    }
  }
}

TEST(TimelineView, SyntheticTracesAreReproducible) {
  const TraceFile a = synthetic_trace(3, 5000, 9), b = synthetic_trace(3, 5000, 9);
  const TraceFile c = synthetic_trace(3, 5000, 10);
  ASSERT_EQ(a.events.size(), b.events.size());
  bool differs = false;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].ts_us, b.events[i].ts_us) << "event " << i;
    differs = differs || a.events[i].ts_us != c.events[i].ts_us;
  }
  EXPECT_TRUE(differs);
  for (std::size_t i = 1; i < a.events.size(); ++i) {
    ASSERT_LE(a.events[i - 1].ts_us, a.events[i].ts_us) << "by start time, event " << i;
  }
  EXPECT_THROW(synthetic_trace(0, 10, 1), ArgumentError);
}

TEST(TimelineView, ByteSizes) {
  EXPECT_EQ(byte_size_text(512), "512 B");
  EXPECT_EQ(byte_size_text(4096), "4.0 KiB");
  EXPECT_EQ(byte_size_text(1.25 * 1024 * 1024), "1.2 MiB");
}

}  // namespace
}  // namespace shardscope::viz
