// Debugger: the step debugger, an Observer that pauses one rank before a forward op or a backward
// node runs and lets another thread (the terminal front end, the visualizer, a test) inspect the
// stop, step to the next op or resume. One Debugger per rank: attach it to that rank's Context.
//
// The rank thread blocks inside on_op_begin while it is paused; controller calls (request_pause,
// step, resume, wait_for_stop, shutdown) may come from any thread. The rank thread marks the end
// of its run with DebugRunGuard (or mark_finished) so a controller in wait_for_stop never hangs.
//
//   Debugger debugger(Debugger::StartMode::stop_at_first_op);    // the controller owns it
//   rank thread:  ObserverGuard attach(ctx, debugger); DebugRunGuard run(debugger); ...ops...
//   controller:   while (auto stop = debugger.wait_for_stop(5s)) { show(*stop); debugger.step(); }
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/errors.h"
#include "autograd/observer.h"

namespace shardscope {

// Where to stop. Every set field must match; an empty breakpoint matches every op.
//  op: "" matches any op; "matmul" matches the op kind in any scope; a name with a '/' is a scoped
//      name "scope/op" that matches that op kind in exactly that module scope ("attn.qkv/matmul";
//      "/matmul" is a matmul outside any scope; "mlp.fc1/" is every op in scope mlp.fc1).
//  phase: forward ops, backward nodes, or both when unset.
//  layer: ops tagged with that layer by LayerGuard (-1: ops outside any layer), any when unset.
struct Breakpoint {
  std::string op;
  std::optional<Phase> phase;
  std::optional<int> layer;

  // Throws ArgumentError for a name with more than one '/' or a layer below -1.
  void validate() const;
  // The text form every front end takes: "<op>" ("gelu", "attn.qkv/matmul", "mlp.fc1/"),
  // "layer <N>" or "phase forward|backward". Validated; ArgumentError names the text and the
  // accepted forms.
  static Breakpoint parse(const std::string& text);
  bool matches(const Site& site) const;
  // "gelu backward layer 0", "attn.qkv/matmul", "any op"
  std::string str() const;
};

// A breakpoint as the debugger holds it: its id (for remove_breakpoint) and how often it stopped.
struct BreakpointEntry {
  int id = 0;
  Breakpoint breakpoint;
  std::uint64_t hits = 0;
};

// Why the rank stopped. With several reasons at once, the first in this order is reported.
enum class StopReason : std::uint8_t { breakpoint, step, pause_request, first_op, collective };
const char* stop_reason_name(StopReason r);

// One stop of the rank: the op it is about to run and why it stopped.
struct Stop {
  std::string op;     // op kind: "matmul"
  std::string scope;  // module scope: "attn.qkv" (empty outside modules)
  Phase phase = Phase::forward;
  int layer = -1;
  std::int64_t step = 0;
  int rank = 0;
  // The engine's op number (Context::next_seq): a forward op and its backward node share it.
  std::uint64_t seq = 0;
  // Forward: the op's input shapes (outputs are not computed yet, so `outputs` is empty).
  // Backward: the gradients flowing in (one per forward output) and out (one per forward input).
  std::vector<Shape> inputs;
  std::vector<Shape> outputs;
  std::uint64_t op_index = 0;  // 1-based count of ops this debugger has seen begin, this one too
  std::uint64_t number = 0;    // 1-based count of stops, this one too
  StopReason reason = StopReason::step;
  int breakpoint_id = -1;  // the first matching breakpoint, -1 when none matched
  // Set when the rank stopped before a collective (StopReason::collective): the call, such as
  // "all_gather(count 512, f32, 4 ranks, activation)"; op and scope are the op issuing it.
  std::string collective;
  // A parallel op's placements, "Shard(0) -> Shard(2)" (empty for other ops).
  std::string placement;

  // "attn.qkv/matmul" (the form a scoped breakpoint matches), "matmul" outside any scope.
  std::string name() const;
  // "stop 3 at op 5: attn.qkv/matmul backward (layer 0, step 0, rank 0) in [2, 4] out [2, 3]
  // [3, 4] (breakpoint 1)"
  std::string str() const;
};

// A tensor's values copied to the host, so it can be shown after the rank moved on or its context
// went away: the op tensors of a stop, the final tensors of a run.
struct TensorSnapshot {
  std::string name;      // "input0", "output0", "attn.qkv.weight"
  std::string what;      // "input 0 of attn.qkv/matmul forward"
  std::string describe;  // Tensor::describe(): "input0 f32[2, 4]"
  Shape shape;
  std::vector<double> values;
};
// A snapshot of `t` under `name` (describe() and values; `what` is left to the caller).
TensorSnapshot snapshot_tensor(const std::string& name, const Tensor& t);

class Debugger : public Observer {
 public:
  enum class StartMode : std::uint8_t {
    running,           // stop only at breakpoints and pause requests
    stop_at_first_op,  // stop before the first op, as if a pause had been requested
  };

  explicit Debugger(StartMode mode = StartMode::running);
  // Shuts down (releasing a paused rank) and waits for the rank thread to leave the hooks. Detach
  // the debugger from its Context (ObserverGuard) before the debugger is destroyed.
  ~Debugger() override;
  Debugger(const Debugger&) = delete;
  Debugger& operator=(const Debugger&) = delete;

  // Breakpoints; thread-safe. add_breakpoint validates and returns the new breakpoint's id.
  int add_breakpoint(Breakpoint breakpoint);
  bool remove_breakpoint(int id);  // false when no breakpoint has that id
  void clear_breakpoints();
  std::vector<BreakpointEntry> breakpoints() const;

  // Controller side, from any thread.
  // Stops the rank at its next op. A no-op while paused.
  void request_pause();
  // Releases a paused rank and stops it again at its very next op. When the rank is running,
  // this is request_pause(). paused() is false from this call until the rank stops again.
  void step();
  // Releases a paused rank and cancels a pending pause or step: it runs until a breakpoint or a
  // pause request. paused() is false from this call until the rank stops again.
  void resume();
  // Waits until the rank is paused and returns its stop (at once when it is already paused, so
  // two calls without step/resume between them return the same stop). Returns nullopt when the
  // timeout passes, the run has finished (mark_finished) or the debugger was shut down.
  std::optional<Stop> wait_for_stop(std::chrono::milliseconds timeout);
  bool paused() const;
  // The stop the rank is paused at; nullopt while it runs.
  std::optional<Stop> current_stop() const;
  // The rank's latest stop, kept after it was released (nullopt before the first stop).
  std::optional<Stop> last_stop() const;
  std::uint64_t stop_count() const;
  // Collectives the rank has entered (on_collective_begin), the one it may be inside included.
  std::uint64_t collectives_entered() const;
  // Releases a paused rank and stops it again before its next collective (or a breakpoint or
  // pause request on the way). When the rank is running, it stops before its next collective.
  void run_to_next_collective();
  // Releases a paused rank and stops it again at its first op of another layer or phase than the
  // op it was paused at (a breakpoint or pause request on the way stops it too): "finish this
  // layer's forward". When the rank is running, this is request_pause().
  void step_layer();
  // Releases a paused rank and turns the debugger off for good: it never stops again and
  // wait_for_stop returns nullopt at once. Idempotent; the destructor calls it.
  void shutdown();
  bool is_shut_down() const;
  // Ends the run: releases a paused rank, whose next op or collective then throws
  // DebugCancelled with `reason` (so the run unwinds instead of running to its end).
  void cancel(const std::string& reason);
  // The collective the rank has entered and not yet left ("all_gather(count 64, f32, ...) from
  // gather_matmul in attn.qkv"), nullopt outside collectives.
  std::optional<std::string> waiting_in() const;

  // The tensors of the op the rank is paused at, copied: "input0", "input1", ... (a forward
  // op's inputs; a backward node's gradients flowing in), and "output0", ... of the op the rank
  // ran just before this stop when it was released from a stop there (step), so its outputs
  // were seen. Empty while the rank runs.
  std::vector<TensorSnapshot> op_tensors() const;

  // Rank side: the rank's run is over (or starting again); wakes controllers in wait_for_stop.
  void mark_finished();
  void mark_running();
  bool finished() const;

  // Observer hooks, called on the rank thread; on_op_begin and on_collective_begin block while
  // the rank is paused.
  void on_op_begin(const OpEvent& event) override;
  void on_op_end(const OpEvent& event) override;
  void on_collective_begin(const CollectiveEvent& event) override;
  void on_collective(const CollectiveEvent& event) override;

 private:
  // Why the op must stop, if it must; sets breakpoint_id and counts the hit. Lock held.
  std::optional<StopReason> stop_reason(const Site& site, int& breakpoint_id);
  // A stop at `site` with the counters filled in (pause_here numbers it). Lock held.
  Stop stop_at(const Site& site, std::uint64_t seq, StopReason reason) const;
  Stop make_stop(const OpEvent& event, StopReason reason, int breakpoint_id) const;
  // Publishes `stop` and blocks the rank until a controller releases it. Lock held.
  void pause_here(std::unique_lock<std::mutex>& lock, Stop stop);
  void throw_if_cancelled() const;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // any change of paused_, finished_, shut_down_, in_hook_
  std::vector<BreakpointEntry> breakpoints_;
  int next_breakpoint_id_ = 1;
  bool stop_at_next_op_ = false;     // set by a step
  bool pause_requested_ = false;     // set by request_pause (and by StartMode::stop_at_first_op)
  bool first_op_pending_ = false;    // StartMode::stop_at_first_op, until the first op
  bool stop_at_collective_ = false;  // set by run_to_next_collective
  std::optional<std::pair<int, Phase>> stop_outside_;  // set by step_layer: (layer, phase)
  std::string cancelled_;                              // non-empty: the reason cancel() gave
  std::optional<std::string> waiting_in_;
  bool paused_ = false;
  bool finished_ = false;
  bool shut_down_ = false;
  int in_hook_ = 0;  // rank threads inside on_op_begin, so the destructor can wait for them
  std::optional<Stop> current_;
  std::optional<Stop> last_;
  // The ops begun and not yet ended, innermost last, with their inputs (valid until their end
  // event): a stop shows the inputs of the op it is before, or of the op issuing the collective
  // it is before.
  struct RunningOp {
    std::uint64_t seq = 0;
    Phase phase = Phase::forward;
    const std::vector<Tensor>* inputs = nullptr;
  };
  std::vector<RunningOp> running_;
  // The op released from a stop, whose end event copies its outputs into last_outputs_.
  std::optional<std::pair<std::uint64_t, Phase>> watch_outputs_;
  std::uint64_t watched_op_index_ = 0;
  std::vector<TensorSnapshot> last_outputs_;
  std::uint64_t last_outputs_op_index_ = 0;  // op_index of the op last_outputs_ came from
  std::uint64_t op_count_ = 0;
  std::uint64_t stop_count_ = 0;
  std::uint64_t collectives_entered_ = 0;
};

// Thrown on a rank whose debug session was cancelled (quit).
class DebugCancelled : public Error {
 public:
  using Error::Error;
};

// Marks the run of a rank thread: mark_running() on entry and mark_finished() on exit, also when
// the run throws, so a controller waiting for a stop is woken instead of hanging.
class DebugRunGuard {
 public:
  explicit DebugRunGuard(Debugger& debugger) : debugger_(debugger) { debugger.mark_running(); }
  ~DebugRunGuard() { debugger_.mark_finished(); }
  DebugRunGuard(const DebugRunGuard&) = delete;
  DebugRunGuard& operator=(const DebugRunGuard&) = delete;

 private:
  Debugger& debugger_;
};

}  // namespace shardscope
