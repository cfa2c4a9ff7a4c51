// Source: where the visualizer's snapshots come from and what its controls act on, either a live
// run (every rank a thread under a step Debugger, apps/live_session.h) or a recorded trace
// (replay.h). The drawing code holds a Source and never knows which.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "apps/run.h"
#include "autograd/debugger.h"
#include "io/trace_reader.h"
#include "viz/model/layer_selection.h"
#include "viz/model/snapshot.h"

namespace shardscope::viz {

class Source {
 public:
  virtual ~Source() = default;

  // The controls. Each returns at once; a live run moves on its own threads.
  virtual void step_op() = 0;          // every rank runs (replay: passes) one op
  virtual void next_collective() = 0;  // every rank to just before its next collective
  virtual void step_layer() = 0;       // every rank to its first op of another layer or phase
  virtual void run_continue() = 0;     // to a breakpoint or the end
  virtual void pause() = 0;            // stops running ranks at their next op (live only)
  // Throws ArgumentError for an invalid breakpoint.
  virtual void add_breakpoint(const Breakpoint& breakpoint) = 0;
  virtual void clear_breakpoints() = 0;

  // False while ranks are moving after a command (live runs); a replay is always idle.
  virtual bool idle() = 0;
  // Waits until idle; false when `limit` passed first.
  virtual bool wait_idle(std::chrono::milliseconds limit) = 0;
  // Changes whenever a snapshot would differ, so a frame rebuilds only then.
  virtual std::uint64_t version() = 0;
  virtual Snapshot snapshot() = 0;
};

// Starts the run of `options` (threads) with every rank paused before its first op. Throws
// ArgumentError for options a live run cannot take.
std::unique_ptr<Source> make_live_source(const RunOptions& options);
// Opens a trace (TraceFormatError naming the file when it is not a usable shardscope trace).
std::unique_ptr<Source> make_replay_source(const std::string& trace_path);
// The same for a trace already in memory (a synthetic one, for the frame-time benchmark).
std::unique_ptr<Source> make_replay_source(TraceFile trace);

// Runs one script command on `source` and waits until it is idle: "step [N]", "next-collective
// [N]", "step-layer [N]", "continue", "pause", "break <op|layer N|phase forward|backward>",
// "clear"; or sets `view`, the layer the panels show: "show-layer N" (0 to L - 1) or "show-layer
// follow" (an ArgumentError without a view). Throws ArgumentError naming the command and the
// accepted forms.
void run_script_command(Source& source, const std::string& command, std::chrono::milliseconds limit,
                        LayerSelection* view = nullptr);
// Runs a script: commands separated by ';' or newlines ("step 40; next-collective").
void run_script(Source& source, const std::string& script, std::chrono::milliseconds limit,
                LayerSelection* view = nullptr);

}  // namespace shardscope::viz
