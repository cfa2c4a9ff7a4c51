// The memory panel: per rank a chart of live bytes by category over time from the memory
// counters (stacked columns, at most one per pixel, each the highest moment it covers), the
// rank's peak; and the chosen rank's saved activations of the current step's forward beside the
// terms of the paper's formula, matched to their saving ops as the ledger's measurement is: in a
// stack, one layer's term by term, each layer's total, and the stack's beside L times the formula.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

#include "autograd/errors.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

std::uint64_t total_of(const TraceEvent& e) {
  std::uint64_t total = 0;
  for (std::uint64_t b : e.memory) total += b;
  return total;
}

// A memory counter as the chart reads it: compact, so the passes after the one over the events
// stay in cache (a TraceEvent is some 300 bytes).
struct Sample {
  double ts_us;
  std::uint64_t total;
  const TraceEvent* event;  // its bytes by category
};

std::vector<int> chart_ranks(const Snapshot& s) {
  std::vector<int> ranks;
  for (const RankStatus& st : s.status) ranks.push_back(st.rank);
  if (ranks.empty()) {
    for (int r = 0; r < s.ranks; ++r) ranks.push_back(r);
  }
  return ranks;
}

struct ChartScale {
  double begin_us, end_us;
  double top_bytes;  // the height of a frame: the highest total of any rank
};

// For each pixel column of the frame, the rank's counter with the highest total among those live
// during it (-1 before the first). A counter holds from its time to the next counter's.
std::vector<std::ptrdiff_t> highest_per_column(const std::vector<Sample>& counters,
                                               const Rect& frame, const ChartScale& scale) {
  const auto columns = static_cast<std::ptrdiff_t>(std::max(1.0f, std::floor(frame.width())));
  std::vector<std::ptrdiff_t> best(static_cast<std::size_t>(columns), -1);
  std::vector<std::uint64_t> best_total(best.size(), 0);
  auto column_of = [&](double t) {
    const double f = (t - scale.begin_us) / (scale.end_us - scale.begin_us);
    const auto c = static_cast<std::ptrdiff_t>(std::floor(f * static_cast<double>(columns)));
    return std::clamp<std::ptrdiff_t>(c, 0, columns - 1);
  };
  for (std::size_t k = 0; k < counters.size(); ++k) {
    const double until = k + 1 < counters.size() ? counters[k + 1].ts_us : scale.end_us;
    if (until < scale.begin_us || counters[k].ts_us > scale.end_us) continue;
    const std::uint64_t total = counters[k].total;
    for (std::ptrdiff_t c = column_of(counters[k].ts_us); c <= column_of(until); ++c) {
      const auto i = static_cast<std::size_t>(c);
      if (best[i] < 0 || total > best_total[i]) {
        best[i] = static_cast<std::ptrdiff_t>(k);
        best_total[i] = total;
      }
    }
  }
  return best;
}

// Runs of columns showing the same counter become one stacked column of category segments.
void stack_columns(const std::vector<Sample>& counters, const std::vector<std::ptrdiff_t>& best,
                   const ChartScale& scale, MemoryChart& chart) {
  const Rect& f = chart.frame;
  const float column_width = f.width() / static_cast<float>(best.size());
  for (std::size_t c = 0; c < best.size();) {
    std::size_t run = c + 1;
    while (run < best.size() && best[run] == best[c]) ++run;
    if (best[c] >= 0) {
      const TraceEvent& e = *counters[static_cast<std::size_t>(best[c])].event;
      const float x0 = f.x0 + column_width * static_cast<float>(c);
      const float x1 = f.x0 + column_width * static_cast<float>(run);
      float y = f.y1;
      for (int k = 0; k < kMemoryCategoryCount; ++k) {
        const std::uint64_t bytes = e.memory[static_cast<std::size_t>(k)];
        if (bytes == 0) continue;
        const float h =
            static_cast<float>(static_cast<double>(bytes) / scale.top_bytes) * f.height();
        chart.segments.push_back(
            {Rect{x0, y - h, x1, y}, theme::memory_color(static_cast<MemoryCategory>(k))});
        y -= h;
      }
    }
    c = run;
  }
}

// The peak's label at height `y`, as far right as it covers no column of the chart (at small
// heights the columns fill the frame: then it is left out, the peak line still drawn).
void label_peak(const Rect& f, float y, MemoryChart& chart) {
  const std::string text = "peak " + byte_size_text(chart.peak_bytes);
  const float width = static_cast<float>(text.size()) * theme::kCharWidth;
  // Each pixel column's top (the highest segment over it), from the frame's left.
  const std::size_t columns = static_cast<std::size_t>(std::max(0.0f, std::ceil(f.width())));
  std::vector<float> top(columns, f.y1);
  for (const auto& [r, color] : chart.segments) {
    const auto a = static_cast<std::size_t>(std::max(0.0f, std::floor(r.x0 - f.x0)));
    const auto b = static_cast<std::size_t>(std::max(0.0f, std::ceil(r.x1 - f.x0)));
    for (std::size_t c = a; c < std::min(b, columns); ++c) top[c] = std::min(top[c], r.y0);
  }
  const float bottom = y + theme::kLabelHeight;
  const auto span = static_cast<std::size_t>(std::ceil(width + 2));
  if (span > columns) return;
  std::size_t clear = 0;  // free columns ending at c, scanning from the right
  for (std::size_t c = columns; c-- > 0;) {
    clear = top[c] >= bottom ? clear + 1 : 0;
    if (clear >= span) {
      chart.labels.push_back({f.x0 + static_cast<float>(c) + 1, y, text, theme::kPeak});
      return;
    }
  }
}

// The peak total: a line across the frame at its height, a mark where it happened, its label.
void mark_peak(const std::vector<Sample>& counters, const ChartScale& scale, MemoryChart& chart) {
  const Sample* peak = nullptr;
  for (const Sample& sample : counters) {
    if (peak == nullptr || sample.total > peak->total) peak = &sample;
  }
  if (peak == nullptr) {
    chart.labels.push_back(
        {chart.frame.x0 + 4, chart.frame.y0, "no memory events yet", theme::kTextDim});
    return;
  }
  const Rect& f = chart.frame;
  chart.peak_bytes = static_cast<double>(peak->total);
  const float y = f.y1 - static_cast<float>(chart.peak_bytes / scale.top_bytes) * f.height();
  const double at = (peak->ts_us - scale.begin_us) / (scale.end_us - scale.begin_us);
  const float x = std::clamp(f.x0 + static_cast<float>(at) * f.width(), f.x0, f.x1);
  chart.peaks.push_back({f.x0, y, f.x1, y, theme::kPeak, 1.0f, false});
  chart.peaks.push_back({x, y, x, f.y1, theme::kPeak, 1.0f, false});
  label_peak(f, std::max(f.y0, y - theme::kLabelHeight), chart);
}

MemoryChart chart_of(const std::vector<Sample>& counters, int rank, const Rect& frame,
                     const ChartScale& scale) {
  MemoryChart chart;
  chart.rank = rank;
  chart.frame = frame;
  chart.labels.push_back(
      {theme::kPanelPadding, frame.y0, "rank " + std::to_string(rank), theme::rank_color(rank)});
  stack_columns(counters, highest_per_column(counters, frame, scale), scale, chart);
  mark_peak(counters, scale, chart);
  return chart;
}

// The step `rank` is in: its status's, else that of its last event.
std::int64_t current_step(const Snapshot& s, int rank) {
  for (const RankStatus& st : s.status) {
    if (st.rank == rank) return st.step;
  }
  std::int64_t step = 0;
  for (const TraceEvent& e : s.events) {
    if (e.rank == rank) step = e.step;
  }
  return step;
}

// The saved activations (extras apart) of `rank`'s forward slices in its current step, by the
// layer they ran in (-1: outside every layer) and site. Read from the end: a rank's steps only go
// up, so its first event of an earlier step ends it. Forward slices after the step's first
// backward op are recomputations (--recompute), which save for their own backward, not the
// forward's: they are left out.
std::map<int, std::vector<SavedAt>> saved_sites(const Snapshot& s, int rank) {
  const std::int64_t step = current_step(s, rank);
  auto of_step = [&](const TraceEvent& e) {
    return e.kind == TraceEventKind::op && e.rank == rank && e.step == step;
  };
  std::size_t backward_from = s.events.size();  // the index of the step's first backward op
  for (std::size_t i = s.events.size(); i-- > 0;) {
    const TraceEvent& e = s.events[i];
    if (e.rank == rank && e.step < step) break;
    if (of_step(e) && e.phase == Phase::backward) backward_from = i;
  }
  std::map<int, std::vector<SavedAt>> by_layer;
  for (std::size_t i = backward_from; i-- > 0;) {
    const TraceEvent& e = s.events[i];
    if (e.rank == rank && e.step < step) break;
    if (!of_step(e) || e.phase != Phase::forward) continue;
    const auto bytes =
        static_cast<double>(e.saved_bytes - std::min(e.saved_extra_bytes, e.saved_bytes));
    std::vector<SavedAt>& sites = by_layer[e.layer];
    auto it = std::find_if(sites.begin(), sites.end(), [&](const SavedAt& site) {
      return site.scope == e.scope && site.op == e.op;
    });
    if (it == sites.end()) {
      sites.push_back({e.scope, e.op, bytes});
    } else {
      it->bytes += bytes;
    }
  }
  for (auto& [layer, sites] : by_layer) {
    std::reverse(sites.begin(), sites.end());  // in the order the ops saved
  }
  return by_layer;
}

double bytes_of(const std::vector<SavedAt>& sites) {
  double bytes = 0;
  for (const SavedAt& site : sites) bytes += site.bytes;
  return bytes;
}

// Layer `layer`'s terms beside the formula (every layer's model is the same), then each layer's
// total and the stack's beside L times the formula.
void saved_table(const Snapshot& s, int rank, int layer, MemoryView& v) {
  const ActivationModel model = activation_model(s.config, s.keep_gathered_input);
  const std::map<int, std::vector<SavedAt>> sites = saved_sites(s, rank);
  const std::vector<SavedAt> none;
  auto sites_of = [&](int l) -> const std::vector<SavedAt>& {
    const auto it = sites.find(l);
    return it == sites.end() ? none : it->second;
  };
  const int layers = std::max(1, s.config.layers);
  v.layer = layer;
  v.formula = model.formula;
  v.formula_total = model.total_bytes;
  for (int l = 0; l < layers; ++l) {
    LayerSavedRow row;
    row.layer = l;
    row.measured_bytes = bytes_of(sites_of(l));
    row.model_bytes = model.total_bytes;
    row.complete = row.model_bytes > 0 && row.measured_bytes == row.model_bytes;
    v.stack_saved_total += row.measured_bytes;
    v.layers.push_back(row);
  }
  v.outside_saved = bytes_of(sites_of(-1));
  v.stack_saved_total += v.outside_saved;
  v.stack_formula_total = static_cast<double>(layers) * model.total_bytes;
  for (const MeasuredTerm& t : measure_sites(model, sites_of(layer))) {
    SavedTermRow row;
    row.what = t.what;
    row.saved_by = t.scope.empty() ? t.op : t.scope + "/" + t.op;
    row.formula = t.formula;
    row.model_bytes = t.model_bytes;
    row.measured_bytes = t.measured_bytes;
    row.complete = t.model_bytes > 0 && t.measured_bytes == t.model_bytes;
    v.saved_total += t.measured_bytes;
    v.saved.push_back(std::move(row));
  }
}

}  // namespace

MemoryView memory_view(const Snapshot& s, int rank, PanelSize size, std::optional<int> layer) {
  const int shown = layer ? *layer : shown_layer(s, rank, {});
  if (shown < 0 || shown >= std::max(1, s.config.layers)) {
    throw ArgumentError("memory_view: no layer " + std::to_string(shown) + " in a stack of " +
                        std::to_string(s.config.layers) + " layers (0 to " +
                        std::to_string(s.config.layers - 1) + ")");
  }
  MemoryView v;
  const float pad = theme::kPanelPadding;
  float x = pad;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    const std::string name = memory_category_name(category);
    v.legend.push_back({x, pad, name, theme::memory_color(category)});
    x += static_cast<float>(name.size() + 2) * theme::kCharWidth;
  }
  const std::vector<int> ranks = chart_ranks(s);
  // One pass over the events: each rank's counters, their time span (to the cursor: one axis for
  // all charts) and the highest total of all (one height).
  ChartScale scale{std::numeric_limits<double>::infinity(), s.now_us, 1.0};
  std::vector<std::vector<Sample>> counters(ranks.size());
  for (const TraceEvent& e : s.events) {
    if (e.kind != TraceEventKind::memory) continue;
    const Sample sample{e.ts_us, total_of(e), &e};
    scale.begin_us = std::min(scale.begin_us, e.ts_us);
    scale.end_us = std::max(scale.end_us, e.ts_us);
    scale.top_bytes = std::max(scale.top_bytes, static_cast<double>(sample.total));
    const auto it = std::find(ranks.begin(), ranks.end(), e.rank);
    if (it != ranks.end()) counters[static_cast<std::size_t>(it - ranks.begin())].push_back(sample);
  }
  if (!std::isfinite(scale.begin_us)) scale.begin_us = 0;
  if (scale.end_us <= scale.begin_us) scale.end_us = scale.begin_us + 1;
  const float top = pad + theme::kLabelHeight + pad;
  const float n = static_cast<float>(std::max<std::size_t>(1, ranks.size()));
  const float height = std::max(1.0f, (size.height - top - pad - (n - 1) * theme::kLaneGap) / n);
  const float x0 = pad + theme::kLaneLabelWidth;
  const float x1 = std::max(x0 + 1.0f, size.width - pad);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const float y0 = top + static_cast<float>(i) * (height + theme::kLaneGap);
    v.charts.push_back(chart_of(counters[i], ranks[i], Rect{x0, y0, x1, y0 + height}, scale));
  }
  saved_table(s, rank, shown, v);
  return v;
}

}  // namespace shardscope::viz
