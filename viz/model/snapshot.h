// Snapshot: everything the visualizer draws, copied out of a source (a live run or a replayed
// trace) at one instant. The source owns capture (Tracy's worker); the view model turns a
// snapshot into shapes (view_model.h); the drawing code only draws those. Nothing here knows
// ImGui, so the whole data side is tested without a window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/live_session.h"
#include "autograd/observer.h"
#include "autograd/shape.h"
#include "io/trace_event.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"
#include "parallel/run/tensor_compare.h"

namespace shardscope::viz {

// One rank as the controls show it.
struct RankStatus {
  int rank = 0;
  using State = LiveSession::RankState;  // a replayed rank takes the same states
  State state = State::not_started;
  std::string where;  // "paused before attn.qkv/gather_matmul forward (step 0)", "waits in ..."
  // The op the rank is at (paused before it, or, in replay, the last one begun): empty when none.
  std::string op, scope;
  Phase phase = Phase::forward;
  // The stack's layer the op runs in (Context::layer): 0 to L - 1, or -1 outside every layer (the
  // loss, the check) and before the first op.
  int layer = -1;
  std::int64_t step = 0;
  std::uint64_t seq = 0;
  std::vector<std::string> inputs;  // its input shapes, "[4, 2, 32]" (as in TraceEvent)
  std::string placement;            // a parallel op's "Shard(0) -> Shard(2)", else empty
  // The line under the rank's state: "step 0, forward" ("step 0, forward, layer 1" in a stack);
  // empty once finished (`where` then says "finished after 2 steps, final loss 1.0312").
  std::string summary;
  std::optional<double> final_loss;  // a finished live rank's last step's loss
};
// "step 0, forward": the summary of a rank that has not finished; in a stack of `layers` > 1
// layers, with the layer its op runs in: "step 0, forward, layer 1".
inline std::string step_phase_text(const RankStatus& st, int layers) {
  std::string text = "step " + std::to_string(st.step) + ", " + phase_name(st.phase);
  if (layers > 1 && st.layer >= 0) text += ", layer " + std::to_string(st.layer);
  return text;
}
inline const char* rank_state_name(RankStatus::State s) {  // "not started", "running", ...
  return live_rank_state_name(s);
}

// A named tensor of the run with each rank's local values (live runs only; a trace has none).
struct TensorValues {
  std::string name;  // "input", "output", "attn.qkv.weight", "attn.qkv.weight.grad"
  Shape global;
  Placement placement;
  std::vector<Shape> local_shapes;        // per rank
  std::vector<std::vector<float>> local;  // per rank, row-major; empty when not available
  // A tensor of the op where each rank is paused ("op input0", "op output0": Debugger::
  // op_tensors): each rank's own, with no full view, and `what` says which op per rank ("input 0
  // of attn.qkv/matmul forward"). The ranks may be paused at different ops.
  bool at_op = false;
  std::vector<std::string> what;  // per rank, at_op tensors only
};
// The name an op tensor has in the snapshot: "op input0".
inline std::string op_tensor_name(const std::string& debugger_name) {
  return "op " + debugger_name;
}

// One row of the Check panel: a tensor against the single-device reference.
struct CheckRow {
  std::string name;
  bool available = false;   // false until the tensor exists on every rank
  std::int64_t failed = 0;  // elements out of tolerance
  std::int64_t elements = 0;
  double max_abs_err = 0;
  double max_rel_err = 0;
  bool passed = true;
};

struct Snapshot {
  std::string source;  // "live tp-sp on 4 threads" or the trace's path
  bool live = false;
  LayerConfig config;  // from the run's options or the trace's otherData.config
  bool keep_gathered_input = false;
  int ranks = 1;
  // Events so far (live) or up to the cursor (replay), by start time; the op and collective
  // slices, memory counters and step marks of every rank (io/trace_event.h).
  std::vector<TraceEvent> events;
  double now_us = 0;               // the cursor's time: events ending after it are in progress
  std::uint64_t total_events = 0;  // in the whole trace (replay) or so far (live)
  std::vector<RankStatus> status;  // one per rank
  std::vector<TensorValues> tensors;
  std::vector<CheckRow> checks;
  Tolerance tolerance;     // the checks' rule (parallel/run/tensor_compare.h)
  std::string check_note;  // why checks are missing ("a trace holds no tensor values"), or ""
  bool finished = false;   // every rank has finished (or the replay is at its end)
  std::string error;       // a rank's failure, or ""
  // What the source may be missing, shown beside the controls: a trace cut short (events dropped
  // at the recorder's bound, or a file that ends mid-run), or "".
  std::string warning;
};

}  // namespace shardscope::viz
