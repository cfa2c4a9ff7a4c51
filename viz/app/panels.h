// VizUi: the visualizer's panels, drawn with Dear ImGui from the view model (viz/model). Every
// panel asks the view model what to draw for its size and only walks the lists it gets back;
// what the person selects (rank, collective, tensor, a stack's layer) lives in UiState.
//
// Panels, left to right and top to bottom (a fixed layout, the same on every start):
//   Controls           step op / next collective / step layer / continue / pause, breakpoints,
//                      a stack's layer selector, every rank's state and op
//   Shard layout       the current op's logical tensors with each rank's shard in place
//   Tensor inspector   a heat map of the paused op's inputs and output, or of a layer tensor,
//                      full or one rank's shard
//   Collectives        one lane per rank, a box per call, who sends what to whom, totals vs model
//   Memory             live bytes by category per rank, peaks, saved activations vs the formula
//   Check              per tensor, the error against the single-device reference
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viz/model/source.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {

// Where a panel was drawn, in framebuffer pixels (for screenshot tests and --panels output).
struct PanelRegion {
  std::string name;
  Rect rect;
};

struct UiState {
  int rank = 0;  // whose current op the shard panel shows
  // The stack's layer the shard and memory panels show (and the collectives' layer table):
  // following the rank's op unless a layer was picked; layer is kept as shown_layer says.
  LayerSelection layer;
  // The clicked collective by identity (its rank and start time): event indices move as new
  // events are sorted in. Unset: the rank's latest collective is shown.
  std::optional<std::pair<int, double>> collective;
  double time_begin = 0, time_end = 0;  // the timeline's window (us); end <= begin: everything
  std::string tensor;                   // the inspected tensor (inspected_tensor picks it)
  bool follow_op = true;                // inspect the paused op's tensors as the ranks move
  int tensor_rank = -1;                 // -1: the full tensor; else that rank's shard
  char breakpoint[96] = {};             // the text of the breakpoint being typed
  std::string message;                  // the last command's error, shown in Controls
  bool help = false;                    // the keys' overlay is shown
};

class VizUi {
 public:
  explicit VizUi(Source& source) : source_(source) {}
  // Draws every panel into a frame of width x height pixels (between begin_frame and
  // end_frame). Reads a new snapshot only when the source's version changed.
  void frame(float width, float height);
  const std::vector<PanelRegion>& regions() const { return regions_; }
  const Snapshot& snapshot() const { return snapshot_; }
  UiState& state() { return state_; }
  // Drops every cached view (not the snapshot), so the next frame rebuilds them all (benchmarks).
  void invalidate() {
    shard_cache_.key.clear();
    heat_cache_.key.clear();
    timeline_cache_.key.clear();
    memory_cache_.key.clear();
    check_cache_.key.clear();
  }

 private:
  void refresh();
  std::optional<std::size_t> latest_collective() const;    // of the selected rank
  std::optional<std::size_t> selected_collective() const;  // the clicked one, else the latest
  // Wheel zooms the timeline around the mouse, right-drag pans it, double-click shows it all.
  void zoom_and_pan(const TimelineView& v, float mouse_x, float width);
  void keys();  // the controls' keyboard shortcuts and the help key
  void help_overlay(float width, float height);
  void controls(const Rect& r);
  void layer_selector();  // a stack's: in Controls
  void shard_layout(const Rect& r);
  void tensor_inspector(const Rect& r);
  void collectives(const Rect& r);
  void comm_table(const char* id, const std::vector<CommTotalRow>& rows, float height);
  void memory(const Rect& r);
  void stack_memory(const MemoryView& v);
  void check(const Rect& r);
  // Opens a fixed panel window at r; false when it is collapsed (nothing to draw).
  bool begin_panel(const char* name, const Rect& r);

  // A view kept until the snapshot, the canvas size or the selection it was built for changes,
  // so an idle frame of a 100k-event trace rebuilds nothing.
  template <class View>
  struct Cached {
    std::string key;
    View view;
  };
  template <class View, class Build>
  const View& cached(Cached<View>& cache, const std::string& selection, PanelSize size,
                     Build build);
  // The selection the shard and memory views are built for: the rank and the layer shown.
  std::string layer_key() const {
    return std::to_string(state_.rank) + "@" + std::to_string(state_.layer.layer);
  }

  Cached<ShardView> shard_cache_;
  Cached<std::optional<HeatMap>> heat_cache_;
  Cached<TimelineView> timeline_cache_;
  Cached<MemoryView> memory_cache_;
  Cached<CheckView> check_cache_;

  Source& source_;
  Snapshot snapshot_;
  std::uint64_t version_ = ~0ull;
  UiState state_;
  std::vector<PanelRegion> regions_;
};

}  // namespace shardscope::viz
