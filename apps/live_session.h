// LiveSession: the run of `shardscope run` on threads with every rank under a step Debugger,
// paused before its first op, and a controller API over all ranks at once. The terminal debugger
// (`shardscope debug`) and the visualizer (`shardscope-viz`) are its two front ends.
//
// Commands (step, next_collective, step_layer, resume, pause, add_breakpoint) return at once; a
// front end that needs the ranks to have settled (every rank paused, finished, or all of them
// inside one collective) calls wait_settled. What the run showed so far (named tensors, each
// rank's ledger and communication log) is read under the session's lock through the accessors.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/run.h"
#include "autograd/debugger.h"

namespace shardscope {

// A named tensor of a rank's run kept after the run ended (its values copied to the host).
struct FinalTensor {
  TensorSnapshot snapshot;
  std::string placement;  // "Shard(1)"
  std::string global;     // the global shape, "[16, 64]"
};

class LiveSession {
 public:
  enum class RankState : std::uint8_t { not_started, running, paused, in_collective, finished };

  // `observer`, when given, is attached to every rank's context for the whole run (the
  // visualizer's trace recorder); it must be thread-safe and outlive the session.
  // Throws ArgumentError unless options.comm is threads.
  explicit LiveSession(const RunOptions& options, Observer* observer = nullptr);
  ~LiveSession();  // finish()es if the front end did not
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  // Starts the ranks; each stops before its first op.
  void start();
  const RunOptions& options() const { return options_; }
  int ranks() const { return static_cast<int>(slots_.size()); }

  void step();             // every paused rank runs one op and stops again
  void next_collective();  // every rank runs to just before its next collective
  void step_layer();       // every paused rank runs to its first op of another layer or phase
  void resume();           // every rank runs to a breakpoint or its end
  void pause();            // every running rank stops at its next op
  // On every rank; returns the breakpoint's id. Throws ArgumentError for an invalid breakpoint.
  int add_breakpoint(const Breakpoint& breakpoint);
  void clear_breakpoints();
  bool remove_breakpoint(int id);  // on every rank; false when no breakpoint has that id
  std::vector<BreakpointEntry> breakpoints(int rank) const;  // with that rank's hit counts

  // Every rank paused or finished, or inside a collective that a paused rank holds up (one that
  // has not entered it yet, or is stopped at its entrance). Seeing it settled stops the active
  // clock.
  bool settled() const;
  // Polls settled() until it holds twice in a row; false when `limit` passed first.
  bool wait_settled(std::chrono::milliseconds limit);
  bool all_finished() const;

  RankState state(int rank) const;
  std::optional<Stop> stop(int rank) const;
  std::optional<Stop> last_stop(int rank) const;  // kept after the rank moved on or finished
  std::optional<std::string> waiting_in(int rank) const;

  // Calls `fn` with rank's named tensors ("input", "output", parameters; a parameter's gradient
  // is its local tensor's grad()) under the rank's lock. Read values only while the rank is
  // paused: a running rank writes them. The map empties when the rank's run ends (its tensors
  // belong to its context).
  void with_tensors(
      int rank, const std::function<void(const std::map<std::string, ParallelTensor>&)>& fn) const;
  // The tensors of the op where the rank is paused (Debugger::op_tensors); empty otherwise.
  std::vector<TensorSnapshot> op_tensors(int rank) const;
  // The rank's named tensors as its run ended ("input", "output", parameters and their ".grad"),
  // copied as the run let them go; empty before the end.
  std::map<std::string, FinalTensor> final_tensors(int rank) const;
  // What the rank's run returned (losses per step, the check), once it finished without error.
  std::optional<RankRun> result(int rank) const;

  // Calls `fn` with rank's ledger and communication log (nullptr before the run attached them
  // and after it ended) under the rank's lock.
  void with_accounting(int rank,
                       const std::function<void(const MemoryLedger*, const CommLog*)>& fn) const;

  // A clock that runs only while a command has ranks moving: started by every command (and the
  // start), stopped when settled() sees the ranks settled, so time spent looking at a paused run
  // is not on the timeline (the visualizer's trace uses it; see TraceOptions::clock).
  std::chrono::steady_clock::time_point active_now() const;

  // The group's reference check of step 0 (every tensor against the single-device layer), once
  // the ranks have run it; nullopt before, and for runs without a check.
  std::optional<CheckResult> check_result() const;

  // Ends the session: cancels ranks that have not finished (their next op throws DebugCancelled
  // with `reason`) and joins the run. Returns the failure of a rank ("" when none, or when the
  // run was cancelled by this call). Idempotent.
  std::string finish(const std::string& reason = "the live session ended before the run did");
  bool cancelled() const { return cancelled_; }
  // A rank's failure so far, "" when none.
  std::string error() const;

 private:
  struct RankSlot;
  class Inspector;

  void start_clock();
  void stop_clock() const;

  RunOptions options_;
  Observer* observer_;
  mutable std::mutex clock_mutex_;
  mutable bool clock_running_ = false;
  mutable std::chrono::steady_clock::time_point clock_since_;
  mutable std::chrono::steady_clock::duration clock_total_{};
  std::vector<std::unique_ptr<RankSlot>> slots_;
  std::unique_ptr<Inspector> inspector_;
  std::thread runner_;
  mutable std::mutex error_mutex_;
  std::string error_;
  bool cancelled_ = false;
  bool finished_ = false;
};

const char* live_rank_state_name(LiveSession::RankState s);  // "paused", "in collective", ...

// A rank's failure as the session shows it, "rank 1: what", without a second "rank 1: " where
// the error already names the rank first (a communicator's errors do).
std::string rank_failure(int rank, const std::string& what);

}  // namespace shardscope
