// Replay: steps through a recorded trace (io/trace_reader.h) with the same controls as a live
// run. Each rank has its own cursor into its own events, as each live rank has its own debugger:
// "step op" moves every rank to its next op, "next collective" to its next collective, "step
// layer" to its first op of another layer or phase, "continue" to its next op a breakpoint
// matches (or its end). A rank is "at" the last event its cursor passed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "autograd/debugger.h"
#include "io/trace_reader.h"
#include "viz/model/snapshot.h"

namespace shardscope::viz {

// The run's LayerConfig from a trace's otherData.config (shardscope run --trace writes it).
// Throws TraceFormatError naming the source and the missing or malformed field.
LayerConfig config_of_trace(const TraceFile& trace);

class Replay {
 public:
  // Throws TraceFormatError when the trace has no usable config or no ranks.
  explicit Replay(TraceFile trace);

  // Events every rank's cursor has passed, in all; size() when every rank is at its end.
  std::size_t cursor() const;
  std::size_t size() const { return trace_.events.size(); }
  const TraceFile& trace() const { return trace_; }
  // Puts every rank where it was when the first `cursor` events of the trace (in start-time
  // order) had happened; clamped to size().
  void seek(std::size_t cursor);

  // Each returns false when the cursor did not move (already at the end).
  bool step_op();
  bool next_collective();
  bool step_layer();
  bool run_continue();  // to just after the next op a breakpoint matches, else to the end
  void add_breakpoint(Breakpoint b);  // validated (ArgumentError)
  void clear_breakpoints() { breakpoints_.clear(); }
  const std::vector<Breakpoint>& breakpoints() const { return breakpoints_; }

  Snapshot snapshot() const;

 private:
  // Moves each rank's cursor past its next event for which stop(rank, event) holds (or to its
  // end); false when no cursor moved.
  template <class StopAt>
  bool advance(StopAt stop);
  const TraceEvent& event_of(std::size_t rank_index, std::size_t k) const {
    return trace_.events[by_rank_[rank_index][k]];
  }

  TraceFile trace_;
  LayerConfig config_;
  bool keep_gathered_input_ = false;
  std::vector<std::vector<std::size_t>> by_rank_;  // per rank (meta.ranks order): event indices
  std::vector<std::size_t> pos_;                   // per rank: how many of them have happened
  std::vector<Breakpoint> breakpoints_;
};

// "1234 events dropped from step 3 (the recorder keeps the first 2000000)", or "" when none were.
std::string dropped_events_note(const TraceMeta& meta);
// Why `trace` ends before its run did, or "" when it does not look cut short: events dropped at
// the recorder's bound (otherData.dropped_events, first_dropped_step), a rank whose events end
// before the last of config.steps, or a rank with fewer op and collective slices than another.
std::string incomplete_trace_note(const TraceFile& trace);

// A snapshot of `trace` where, for each rank (meta.ranks order), the first visible[i] of its
// events have happened.
Snapshot snapshot_of_trace(const TraceFile& trace, const LayerConfig& config,
                           bool keep_gathered_input, const std::vector<std::size_t>& visible);

}  // namespace shardscope::viz
