// Stepping through a recorded trace.
#include "viz/model/replay.h"

#include <algorithm>
#include <map>
#include <set>

#include "io/manifest.h"

namespace shardscope::viz {

LayerConfig config_of_trace(const TraceFile& trace) {
  const nlohmann::json& j = trace.meta.config;
  if (!j.is_object() || !j.contains("mode") || !j.contains("seq")) {
    throw TraceFormatError(trace.source +
                           ": otherData.config holds no layer configuration (expected mode, "
                           "degree, seq, batch, hidden, heads as `shardscope run --trace` writes)");
  }
  LayerConfig c;
  try {
    c = layer_config_from_json(j, trace.source);  // its errors name the file and the field
  } catch (const Error& e) {
    throw TraceFormatError(e.what());
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw TraceFormatError(trace.source + ": otherData.config: " + e.what());
  }
  return c;
}

Replay::Replay(TraceFile trace) : trace_(std::move(trace)), config_(config_of_trace(trace_)) {
  if (trace_.meta.ranks.empty()) {
    throw TraceFormatError(trace_.source + ": the trace names no ranks");
  }
  if (trace_.meta.config.contains("keep_gathered_input")) {
    const auto& keep = trace_.meta.config.at("keep_gathered_input");
    if (!keep.is_boolean()) {
      throw TraceFormatError(
          trace_.source + ": otherData.config.keep_gathered_input must be true or false, given " +
          keep.dump());
    }
    keep_gathered_input_ = keep.get<bool>();
  }
  by_rank_.resize(trace_.meta.ranks.size());
  pos_.assign(trace_.meta.ranks.size(), 0);
  for (std::size_t i = 0; i < trace_.events.size(); ++i) {
    const auto it =
        std::find(trace_.meta.ranks.begin(), trace_.meta.ranks.end(), trace_.events[i].rank);
    if (it == trace_.meta.ranks.end()) {
      throw TraceFormatError(trace_.source + ": event " + std::to_string(i) + " is of rank " +
                             std::to_string(trace_.events[i].rank) +
                             ", which otherData.ranks does not list");
    }
    by_rank_[static_cast<std::size_t>(it - trace_.meta.ranks.begin())].push_back(i);
  }
}

std::size_t Replay::cursor() const {
  std::size_t n = 0;
  for (std::size_t p : pos_) n += p;
  return n;
}

void Replay::seek(std::size_t cursor) {
  cursor = std::min(cursor, size());
  for (std::size_t r = 0; r < by_rank_.size(); ++r) {
    const auto& idx = by_rank_[r];
    pos_[r] =
        static_cast<std::size_t>(std::lower_bound(idx.begin(), idx.end(), cursor) - idx.begin());
  }
}

template <class StopAt>
bool Replay::advance(StopAt stop) {
  bool moved = false;
  for (std::size_t r = 0; r < by_rank_.size(); ++r) {
    const std::size_t n = by_rank_[r].size();
    const std::size_t start = pos_[r];
    while (pos_[r] < n) {
      const std::size_t k = pos_[r]++;
      if (stop(r, event_of(r, k))) break;
    }
    moved = moved || pos_[r] != start;
  }
  return moved;
}

bool Replay::step_op() {
  return advance([](std::size_t, const TraceEvent& e) { return e.kind == TraceEventKind::op; });
}

bool Replay::next_collective() {
  return advance(
      [](std::size_t, const TraceEvent& e) { return e.kind == TraceEventKind::collective; });
}

bool Replay::step_layer() {
  // Each rank's current op (the last op its cursor passed), then its first op elsewhere.
  std::vector<std::optional<std::pair<int, Phase>>> at(by_rank_.size());
  for (std::size_t r = 0; r < by_rank_.size(); ++r) {
    for (std::size_t k = pos_[r]; k-- > 0;) {
      const TraceEvent& e = event_of(r, k);
      if (e.kind == TraceEventKind::op) {
        at[r] = {e.layer, e.phase};
        break;
      }
    }
  }
  return advance([&](std::size_t r, const TraceEvent& e) {
    if (e.kind != TraceEventKind::op) return false;
    if (!at[r]) {
      at[r] = {e.layer, e.phase};
      return false;
    }
    return at[r]->first != e.layer || at[r]->second != e.phase;
  });
}

bool Replay::run_continue() {
  return advance([&](std::size_t, const TraceEvent& e) {
    if (e.kind != TraceEventKind::op) return false;
    Site site;
    site.op = e.op;
    site.scope = e.scope;
    site.phase = e.phase;
    site.layer = e.layer;
    site.step = e.step;
    site.rank = e.rank;
    return std::any_of(breakpoints_.begin(), breakpoints_.end(),
                       [&](const Breakpoint& b) { return b.matches(site); });
  });
}

void Replay::add_breakpoint(Breakpoint b) {
  b.validate();
  breakpoints_.push_back(std::move(b));
}

Snapshot Replay::snapshot() const {
  return snapshot_of_trace(trace_, config_, keep_gathered_input_, pos_);
}

// "step 1 of a 2-step run": the config's step count, when the trace records it.
std::optional<std::int64_t> steps_of_trace(const TraceFile& trace) {
  const nlohmann::json& j = trace.meta.config;
  if (!j.is_object() || !j.contains("steps") || !j.at("steps").is_number_integer()) return {};
  return j.at("steps").get<std::int64_t>();
}

std::string dropped_events_note(const TraceMeta& m) {
  if (m.dropped_events == 0) return "";
  return std::to_string(m.dropped_events) + " events dropped from step " +
         std::to_string(m.first_dropped_step) + " (the recorder keeps the first " +
         std::to_string(m.max_events) + ")";
}

std::string incomplete_trace_note(const TraceFile& trace) {
  const TraceMeta& m = trace.meta;
  if (m.dropped_events > 0) {
    return dropped_events_note(m) + ": the trace ends there, not at the run's end";
  }
  // Per rank: its last step, and its op and collective slices (every rank runs the same ones).
  std::map<int, std::pair<std::int64_t, std::size_t>> by_rank;
  for (int rank : m.ranks) by_rank[rank] = {-1, 0};
  for (const TraceEvent& e : trace.events) {
    auto& [step, slices] = by_rank[e.rank];
    step = std::max(step, e.step);
    if (e.kind == TraceEventKind::op || e.kind == TraceEventKind::collective) ++slices;
  }
  const std::optional<std::int64_t> steps = steps_of_trace(trace);
  for (const auto& [rank, last] : by_rank) {
    if (steps && last.first < *steps - 1) {
      return "rank " + std::to_string(rank) + "'s events end in step " +
             std::to_string(last.first) + " of a " + std::to_string(*steps) +
             "-step run: the trace is cut short";
    }
  }
  const auto most = std::max_element(by_rank.begin(), by_rank.end(), [](auto& a, auto& b) {
    return a.second.second < b.second.second;
  });
  for (const auto& [rank, last] : by_rank) {
    if (last.second < most->second.second) {
      return "rank " + std::to_string(rank) + " has " + std::to_string(last.second) +
             " op and collective slices, rank " + std::to_string(most->first) + " " +
             std::to_string(most->second.second) + ": the trace is cut short";
    }
  }
  return "";
}

Snapshot snapshot_of_trace(const TraceFile& trace, const LayerConfig& config,
                           bool keep_gathered_input, const std::vector<std::size_t>& visible) {
  const std::vector<int>& ranks = trace.meta.ranks;
  Snapshot s;
  s.source = trace.source;
  s.live = false;
  s.config = config;
  s.keep_gathered_input = keep_gathered_input;
  s.ranks = static_cast<int>(ranks.size());
  s.total_events = trace.events.size();
  s.check_note = "a trace holds no tensor values: compare dumps with `shardscope check`";
  s.warning = incomplete_trace_note(trace);
  const bool complete = s.warning.empty();
  std::vector<std::size_t> seen(ranks.size(), 0), total(ranks.size(), 0);
  std::vector<const TraceEvent*> last(ranks.size(), nullptr);  // last op or collective passed
  auto index_of = [&](int rank) {
    return static_cast<std::size_t>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
  };
  for (const TraceEvent& e : trace.events) ++total[index_of(e.rank)];
  for (const TraceEvent& e : trace.events) {
    const std::size_t r = index_of(e.rank);
    if (seen[r] >= (r < visible.size() ? visible[r] : 0)) continue;
    ++seen[r];
    s.events.push_back(e);
    s.now_us = std::max(s.now_us, e.ts_us);
    if (e.kind == TraceEventKind::op || e.kind == TraceEventKind::collective) last[r] = &e;
  }
  s.finished = true;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    RankStatus st;
    st.rank = ranks[r];
    // An incomplete trace's end is not the run's: its ranks stay at their last event.
    const bool at_end = seen[r] == total[r];
    const bool done = at_end && complete;
    s.finished = s.finished && done;
    if (done) {
      st.state = RankStatus::State::finished;
    } else if (seen[r] == 0) {
      st.state = RankStatus::State::not_started;
    }
    if (const TraceEvent* e = last[r]) {
      st.op = e->op;
      st.scope = e->scope;
      st.phase = e->phase;
      st.layer = e->layer;
      st.step = e->step;
      st.seq = e->seq;
      st.placement = e->placement;
      st.inputs = e->inputs;
      const std::string name = e->scope.empty() ? e->op : e->scope + "/" + e->op;
      // In a stack, the layer first, as a live rank's stop says it.
      const std::string in_layer = config.layers > 1 && e->layer >= 0
                                       ? "layer " + std::to_string(e->layer) + ", "
                                       : std::string();
      const std::string at = name + " " + phase_name(e->phase) + " (" + in_layer + "step " +
                             std::to_string(e->step) + ", op " + std::to_string(e->seq) + ")";
      if (e->kind == TraceEventKind::collective) {
        if (!done) st.state = RankStatus::State::in_collective;
        st.where = std::string("in ") + collective_name(e->collective) + " from " + at;
      } else {
        if (!done) st.state = RankStatus::State::paused;
        st.where = "at " + at;
      }
    }
    if (done) st.where = "finished" + (st.where.empty() ? "" : ", last " + st.where);
    if (!done) st.summary = step_phase_text(st, config.layers);
    if (at_end && !complete) {
      st.where = "the trace ends here" + (st.where.empty() ? "" : ", " + st.where);
    }
    s.status.push_back(std::move(st));
  }
  return s;
}

}  // namespace shardscope::viz
