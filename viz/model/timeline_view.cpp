// The collectives timeline: one lane per rank, a box per collective in the visible window (culled
// outside it, folded below theme::kFoldPixels), the selected call's flows between ranks by the
// collective's semantics, the cursor, and step 0's totals beside the communication model.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "parallel/comm/comm_log.h"
#include "parallel/models/comm_model.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

// Dear ImGui's default font (ProggyClean, 13 px) is 7 px a character: a label is only set on a
// box it fits in.
constexpr float kCharWidth = 7.0f;
constexpr float kArrowSpacing = 22.0f;  // between the arrows of neighbouring ranks
// Mid-run, room right of the cursor for the latest call's arrows (kArrowSpacing a rank) and a
// label, at most this fraction of the lanes.
constexpr float kFlowLabelRoom = 20 * theme::kCharWidth;
constexpr float kNowRoomFraction = 0.3f;

// `value` with `digits` decimals and a unit; std::to_chars, as a timeline of thousands of boxes
// builds their tooltips every frame and printf's %f is several times slower.
std::string fixed_text(double value, int digits, const char* unit) {
  char text[64];
  const auto [end, error] =
      std::to_chars(text, text + sizeof text - 8, value, std::chars_format::fixed, digits);
  if (error != std::errc()) return "?" + std::string(unit);
  return std::string(text, end) + unit;
}

std::string duration_text(double us) {
  return us >= 1000.0 ? fixed_text(us / 1000.0, 2, " ms") : fixed_text(us, 2, " us");
}

bool fits(const std::string& text, float width) {
  return static_cast<float>(text.size()) * kCharWidth + 4.0f <= width;
}

// The ranks drawn, one lane each: the snapshot's ranks in status order.
std::vector<int> lane_ranks(const Snapshot& s) {
  std::vector<int> ranks;
  for (const RankStatus& st : s.status) ranks.push_back(st.rank);
  if (ranks.empty()) {
    for (int r = 0; r < s.ranks; ++r) ranks.push_back(r);
  }
  return ranks;
}

int lane_of(const std::vector<int>& ranks, int rank) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

// Where an event's slice ends as drawn: a collective still open at the cursor ends there.
double shown_end(const TraceEvent& e, double now) {
  return std::max(e.ts_us, std::min(e.ts_us + e.dur_us, now));
}

// The window shown: the viewport's, or the whole snapshot from its first event to the cursor.
std::pair<double, double> window_of(const Snapshot& s, const TimelineViewport& v) {
  if (v.end_us > v.begin_us) return {v.begin_us, v.end_us};
  double begin = std::numeric_limits<double>::infinity(), end = s.now_us;
  for (const TraceEvent& e : s.events) {
    begin = std::min(begin, e.ts_us);
    end = std::max(end, e.ts_us);
  }
  if (!std::isfinite(begin)) begin = 0;
  if (end <= begin) end = begin + 1;
  return {begin, end};
}

// A box being built: the events it folds, by kind, and their time span.
struct PendingBox {
  TimelineBox box;
  std::array<int, 6> kinds{};
  double bytes_sent = 0, begin_us = 0, end_us = 0;
  bool open = false;  // its last event is still running at the cursor
};

std::string single_tooltip(const TraceEvent& e, bool open) {
  const std::string issuer = (e.scope.empty() ? e.op : e.scope + "/" + e.op);
  std::string t = std::string(collective_name(e.collective)) + ", " + phase_name(e.phase) +
                  ", purpose " + comm_purpose_name(e.purpose) + "\n";
  t += "sends " + byte_size_text(e.bytes_sent) + " (ring) of N = " + byte_size_text(e.full_bytes) +
       "; " + std::to_string(e.count) + " elements " + dtype_name(e.dtype) + " on " +
       std::to_string(e.group_size) + " ranks\n";
  t += "issued by " + issuer + " (op " + std::to_string(e.seq) + ", step " +
       std::to_string(e.step) + ", layer " + std::to_string(e.layer) + ")\n";
  t += duration_text(e.dur_us) + (open ? " so far (in progress)" : "");
  return t;
}

std::string folded_tooltip(const PendingBox& p) {
  std::string t = std::to_string(p.box.folded) + " collectives folded (zoom in to separate):";
  for (std::size_t k = 0; k < p.kinds.size(); ++k) {
    if (p.kinds[k] == 0) continue;
    t += std::string(" ") + collective_name(static_cast<CollectiveKind>(k)) + " x" +
         std::to_string(p.kinds[k]);
  }
  t += "\nsend " + byte_size_text(p.bytes_sent) + " in all (ring)\n";
  t += "from " + duration_text(p.begin_us) + " to " + duration_text(p.end_us);
  return t;
}

TimelineBox finished(PendingBox p, const Snapshot& s) {
  const TraceEvent& first = s.events[p.box.event];
  if (p.box.folded == 1) {
    p.box.fill = theme::collective_color(first.collective);
    p.box.tooltip = single_tooltip(first, p.open);
    const std::string label =
        std::string(collective_name(first.collective)) + " " + byte_size_text(first.full_bytes);
    if (fits(label, p.box.rect.width())) p.box.label = label;
    return p.box;
  }
  const bool one_kind =
      std::count_if(p.kinds.begin(), p.kinds.end(), [](int n) { return n > 0; }) == 1;
  p.box.fill = one_kind ? theme::collective_color(first.collective) : theme::kTextDim;
  p.box.tooltip = folded_tooltip(p);
  const std::string label = std::to_string(p.box.folded) + " collectives";
  if (fits(label, p.box.rect.width())) p.box.label = label;
  return p.box;
}

// Maps time to x in a lane.
struct TimeAxis {
  double begin, end;
  float x0, x1;
  float x(double t) const {
    const double f = (t - begin) / (end - begin);
    return x0 + static_cast<float>(f) * (x1 - x0);
  }
};

// Each lane's boxes in time order. A box takes at least kFoldPixels, and an event that starts
// inside the last box's footprint folds into it: boxes never overlap, so there is at most one
// per kFoldPixels of lane.
void build_boxes(const Snapshot& s, const std::vector<int>& ranks, const TimeAxis& axis,
                 TimelineView& v) {
  std::vector<std::vector<PendingBox>> lanes(ranks.size());
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const TraceEvent& e = s.events[i];
    if (e.kind != TraceEventKind::collective) continue;
    const int lane = lane_of(ranks, e.rank);
    const double end = shown_end(e, s.now_us);
    if (lane < 0 || end < axis.begin || e.ts_us > axis.end) continue;  // culled
    const Rect& r = v.lanes[static_cast<std::size_t>(lane)];
    // At the right edge, the lane's end or the cursor (nothing is drawn after now), the
    // footprint grows leftwards, so it stays kFoldPixels wide.
    const float right = std::min(axis.x1, axis.x(s.now_us));
    const float x0 = std::max(axis.x0, std::min(axis.x(e.ts_us), right - theme::kFoldPixels));
    const float true_x1 = std::min(right, axis.x(end));
    const float x1 = std::max(true_x1, std::min(right, x0 + theme::kFoldPixels));
    const bool open = e.ts_us + e.dur_us > s.now_us;
    std::vector<PendingBox>& boxes = lanes[static_cast<std::size_t>(lane)];
    if (!boxes.empty() && x0 < boxes.back().box.rect.x1) {  // fold
      // The fold grows by its members' true extent, not their footprints, so a dense lane
      // becomes a row of kFoldPixels-wide folds rather than one box.
      PendingBox& p = boxes.back();
      p.box.rect.x1 = std::max(p.box.rect.x1, true_x1);
      ++p.box.folded;
      ++p.kinds[static_cast<std::size_t>(e.collective)];
      p.bytes_sent += e.bytes_sent;
      p.end_us = std::max(p.end_us, end);
      p.open = p.open || open;
      continue;
    }
    PendingBox p;
    p.box.rank = e.rank;
    p.box.rect = {x0, r.y0 + 1.0f, x1, r.y1 - 1.0f};
    p.box.event = i;
    ++p.kinds[static_cast<std::size_t>(e.collective)];
    p.bytes_sent = e.bytes_sent;
    p.begin_us = e.ts_us;
    p.end_us = end;
    p.open = open;
    boxes.push_back(std::move(p));
  }
  for (std::vector<PendingBox>& lane : lanes) {
    for (PendingBox& p : lane) v.boxes.push_back(finished(std::move(p), s));
  }
}

// The same call on every rank: the events of the same step, phase, layer, issuing op, kind and
// purpose, and the same ordinal among such calls of their rank. Returns (lane, event) pairs.
std::vector<std::pair<int, std::size_t>> matching_calls(const Snapshot& s,
                                                        const std::vector<int>& ranks,
                                                        std::size_t selected) {
  const TraceEvent& sel = s.events[selected];
  auto same = [&](const TraceEvent& e) {
    return e.kind == TraceEventKind::collective && e.step == sel.step && e.phase == sel.phase &&
           e.layer == sel.layer && e.collective == sel.collective && e.purpose == sel.purpose &&
           e.scope == sel.scope && e.op == sel.op;
  };
  std::size_t ordinal = 0;
  for (std::size_t i = 0; i < selected; ++i) {
    ordinal += s.events[i].rank == sel.rank && same(s.events[i]) ? 1 : 0;
  }
  std::vector<std::size_t> seen(ranks.size(), 0);
  std::vector<std::pair<int, std::size_t>> calls;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const int lane = lane_of(ranks, s.events[i].rank);
    if (lane < 0 || !same(s.events[i])) continue;
    if (seen[static_cast<std::size_t>(lane)]++ == ordinal) calls.emplace_back(lane, i);
  }
  std::sort(calls.begin(), calls.end());
  return calls;
}

// Who sends what to whom in one call of t ranks with N = full bytes: (from, to, bytes, label).
struct Flow {
  std::size_t from, to;
  double bytes;
  std::string label;
};

std::vector<Flow> flows_of(const TraceEvent& e, std::size_t n) {
  std::vector<Flow> flows;
  const double t = static_cast<double>(std::max(1, e.group_size));
  const double chunk = e.full_bytes / t;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      switch (e.collective) {
        case CollectiveKind::all_gather:      // rank i's chunk to every rank
        case CollectiveKind::reduce_scatter:  // rank i's partial chunk j to rank j
        case CollectiveKind::all_to_all:      // rank i's chunk j to rank j
          flows.push_back({i, j, chunk, byte_size_text(chunk)});
          break;
        case CollectiveKind::all_reduce:  // a reduce-scatter, then an all-gather
          flows.push_back({i, j, 2 * chunk, "2 x " + byte_size_text(chunk)});
          break;
        case CollectiveKind::broadcast:  // the trace holds no root: drawn from the first rank
          if (i == 0) flows.push_back({i, j, e.full_bytes, byte_size_text(e.full_bytes)});
          break;
        case CollectiveKind::barrier:
          break;
      }
    }
  }
  return flows;
}

Rect label_box(const Label& l) {
  return {l.x, l.y, l.x + static_cast<float>(l.text.size()) * theme::kCharWidth,
          l.y + theme::kLabelHeight};
}

bool overlap(const Rect& a, const Rect& b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

// Labels that would overlap one kept before them fold into it: "48.0 KiB (3 arrows)" when they
// say the same, "48.0 KiB (+2 more)" otherwise. Repeated until no two overlap, as a longer text
// may reach a label it did not. Each stays left of `right` (the lanes' edge), so none is cut off.
std::vector<Label> fold_labels(const std::vector<Label>& labels, float right) {
  struct Kept {
    Label label;
    std::string text;  // the first label's
    int arrows = 1;
    bool same = true;
  };
  std::vector<Kept> kept;
  auto clamp = [right](Label& l) {
    l.x = std::max(0.0f,
                   std::min(l.x, right - static_cast<float>(l.text.size()) * theme::kCharWidth));
  };
  for (const Label& l : labels) {
    kept.push_back({l, l.text});
    clamp(kept.back().label);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < kept.size() && !changed; ++i) {
      for (std::size_t j = i + 1; j < kept.size() && !changed; ++j) {
        if (!overlap(label_box(kept[i].label), label_box(kept[j].label))) continue;
        Kept& k = kept[i];
        k.arrows += kept[j].arrows;
        k.same = k.same && kept[j].same && kept[j].text == k.text;
        k.label.text = k.text + (k.same ? " (" + std::to_string(k.arrows) + " arrows)"
                                        : " (+" + std::to_string(k.arrows - 1) + " more)");
        clamp(k.label);
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(j));
        changed = true;
      }
    }
  }
  std::vector<Label> out;
  for (Kept& k : kept) out.push_back(std::move(k.label));
  return out;
}

// Arrows between the lanes of the selected call's ranks, at the moment every rank had entered
// it. Source i leaves at x0 + i * spacing and arrives at x0 + (j + 1/2) * spacing, so the arrows
// i -> j and j -> i never overlap and those into one rank meet at one point.
void build_flows(const Snapshot& s, const std::vector<int>& ranks, const TimeAxis& axis,
                 std::size_t selected, TimelineView& v) {
  if (selected >= s.events.size() || s.events[selected].kind != TraceEventKind::collective) return;
  const auto calls = matching_calls(s, ranks, selected);
  if (calls.size() < 2) return;
  double entered = 0;
  for (const auto& [lane, i] : calls) entered = std::max(entered, s.events[i].ts_us);
  const float span = kArrowSpacing * static_cast<float>(calls.size());
  const float x0 = std::max(axis.x0, std::min(axis.x(entered), axis.x1 - span));
  std::vector<Label> labels;
  for (const Flow& f : flows_of(s.events[selected], calls.size())) {
    const Rect& from = v.lanes[static_cast<std::size_t>(calls[f.from].first)];
    const Rect& to = v.lanes[static_cast<std::size_t>(calls[f.to].first)];
    const bool down = to.y0 > from.y0;
    Line line;
    line.x0 = x0 + kArrowSpacing * static_cast<float>(f.from);
    line.x1 = x0 + kArrowSpacing * (static_cast<float>(f.to) + 0.5f);
    line.y0 = down ? from.y1 : from.y0;
    line.y1 = down ? to.y0 : to.y1;
    line.color = theme::rank_color(ranks[static_cast<std::size_t>(calls[f.from].first)]);
    line.thickness = 1.5f;
    line.arrow = true;
    v.flows.push_back(line);
    labels.push_back({(line.x0 + line.x1) / 2 + 2.0f,
                      (line.y0 + line.y1) / 2 - theme::kLabelHeight / 2, f.label, line.color});
  }
  v.flow_labels = fold_labels(labels, axis.x1);
}

// Step 0's collectives of the first rank by (kind, phase, purpose), beside comm_model's lines:
// every layer's and those outside the layers, or (given `layer`) that layer's alone.
std::vector<CommTotalRow> comm_totals(const Snapshot& s, int rank, std::optional<int> layer) {
  std::vector<CommTotalRow> rows;
  auto row_of = [&rows](CollectiveKind k, Phase p, CommPurpose u) -> CommTotalRow& {
    for (CommTotalRow& r : rows) {
      if (r.kind == collective_name(k) && r.phase == phase_name(p) &&
          r.purpose == comm_purpose_name(u)) {
        return r;
      }
    }
    CommTotalRow row;
    row.kind = collective_name(k);
    row.phase = phase_name(p);
    row.purpose = comm_purpose_name(u);
    rows.push_back(std::move(row));
    return rows.back();
  };
  for (const TraceEvent& e : s.events) {
    if (e.rank == rank && e.step > 0) break;  // a rank's steps only go up: step 0 is over
    if (e.kind != TraceEventKind::collective || e.rank != rank || e.step != 0) continue;
    if (layer && e.layer != *layer) continue;
    CommTotalRow& r = row_of(e.collective, e.phase, e.purpose);
    ++r.calls;
    r.bytes += e.bytes_sent;
  }
  for (const CommLine& l : comm_model(s.config, s.keep_gathered_input)) {
    if (layer && l.layer != *layer) continue;
    CommTotalRow& r = row_of(l.kind, l.phase, l.purpose);
    r.model_calls += l.count;
    r.model_bytes += l.bytes_sent;
  }
  for (CommTotalRow& r : rows) {
    // The model covers the layer's activations and parameter gradients only.
    r.modelled = r.purpose == comm_purpose_name(CommPurpose::activation) ||
                 r.purpose == comm_purpose_name(CommPurpose::param_grad);
    const double tolerance = 1e-9 * std::max(1.0, r.model_bytes);  // sums of ring fractions
    r.matches =
        !r.modelled || (r.calls == r.model_calls && std::abs(r.bytes - r.model_bytes) <= tolerance);
    r.calls_text =
        std::to_string(r.calls) + "/" + (r.modelled ? std::to_string(r.model_calls) : "-");
    r.model_text = r.modelled ? byte_size_text(r.model_bytes) : "no model";
    // Short of the model while the step is still running is pending, not wrong.
    const bool pending = !r.matches && r.calls < r.model_calls && !s.finished;
    r.model_color = !r.modelled ? theme::kTextDim
                    : r.matches ? theme::kPassed
                    : pending   ? theme::kPending
                                : theme::kFailed;
  }
  return rows;
}

}  // namespace

std::string byte_size_text(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t u = 0;
  double v = bytes;
  while (std::abs(v) >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  return fixed_text(v, u == 0 ? 0 : 1, u == 0 ? " B" : (std::string(" ") + units[u]).c_str());
}

TimelineView timeline_view(const Snapshot& s, const TimelineViewport& viewport, PanelSize size) {
  TimelineView v;
  const std::vector<int> ranks = lane_ranks(s);
  const float pad = theme::kPanelPadding;
  const float x0 = pad + theme::kLaneLabelWidth;
  const float x1 = std::max(x0 + 1.0f, size.width - pad);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const float y0 = pad + static_cast<float>(i) * (theme::kLaneHeight + theme::kLaneGap);
    v.lanes.push_back({x0, y0, x1, y0 + theme::kLaneHeight});
    v.lane_labels.push_back({pad, y0 + (theme::kLaneHeight - theme::kLabelHeight) / 2,
                             "rank " + std::to_string(ranks[i]), theme::rank_color(ranks[i])});
  }
  std::tie(v.begin_us, v.end_us) = window_of(s, viewport);
  if (viewport.end_us <= viewport.begin_us && !s.finished && !ranks.empty()) {
    // Mid-run the latest call is at now: the whole-run window ends a little after now, so that
    // the selected call's arrows and their labels have room right of the cursor and are drawn at
    // the call instead of being pushed back from the lanes' edge.
    const float room = std::min((x1 - x0) * kNowRoomFraction,
                                kArrowSpacing * static_cast<float>(ranks.size()) + kFlowLabelRoom);
    const double us_per_px = (v.end_us - v.begin_us) / std::max(1.0f, x1 - x0 - room);
    v.end_us += us_per_px * room;
  }
  const TimeAxis axis{v.begin_us, v.end_us, x0, x1};
  build_boxes(s, ranks, axis, v);
  if (viewport.selected) build_flows(s, ranks, axis, *viewport.selected, v);
  if (!v.lanes.empty() && s.now_us >= v.begin_us && s.now_us <= v.end_us) {
    const float x = axis.x(s.now_us);
    v.cursor = Line{x, v.lanes.front().y0, x, v.lanes.back().y1, theme::kCursor, 1.5f, false};
  }
  if (!ranks.empty()) {
    v.totals = comm_totals(s, ranks.front(), std::nullopt);
    if (viewport.layer) v.layer_totals = comm_totals(s, ranks.front(), viewport.layer);
  }
  return v;
}

const TimelineBox* timeline_box_at(const TimelineView& v, float x, float y) {
  for (const TimelineBox& b : v.boxes) {
    if (b.rect.contains(x, y)) return &b;
  }
  return nullptr;
}

}  // namespace shardscope::viz
