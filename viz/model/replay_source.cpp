// The replay source: a Replay behind the Source controls.
#include "viz/model/replay.h"
#include "viz/model/source.h"

namespace shardscope::viz {
namespace {

class ReplaySource final : public Source {
 public:
  explicit ReplaySource(TraceFile trace) : replay_(std::move(trace)) {}

  void step_op() override { moved(replay_.step_op()); }
  void next_collective() override { moved(replay_.next_collective()); }
  void step_layer() override { moved(replay_.step_layer()); }
  void run_continue() override { moved(replay_.run_continue()); }
  void pause() override {}  // a replay never runs on its own
  void add_breakpoint(const Breakpoint& b) override { replay_.add_breakpoint(b); }
  void clear_breakpoints() override { replay_.clear_breakpoints(); }
  bool idle() override { return true; }
  bool wait_idle(std::chrono::milliseconds) override { return true; }
  std::uint64_t version() override { return version_; }
  Snapshot snapshot() override { return replay_.snapshot(); }

 private:
  void moved(bool yes) { version_ += yes ? 1 : 0; }

  Replay replay_;
  std::uint64_t version_ = 1;
};

}  // namespace

std::unique_ptr<Source> make_replay_source(const std::string& trace_path) {
  return std::make_unique<ReplaySource>(read_trace(trace_path));
}

std::unique_ptr<Source> make_replay_source(TraceFile trace) {
  return std::make_unique<ReplaySource>(std::move(trace));
}

}  // namespace shardscope::viz
