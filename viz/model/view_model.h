// The view model: from a Snapshot and a panel's size, everything that panel draws, as flat lists
// of rectangles, lines and labels in panel coordinates (pixels, origin at the panel's top left,
// y down). The drawing code (viz/app) walks these lists and calls ImDrawList; it computes
// nothing. Each builder culls what lies outside the panel and folds what is under
// theme::kFoldPixels wide, so a trace of 8 ranks and 100k events yields a few thousand shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/models/memory_model.h"
#include "viz/model/layer_selection.h"
#include "viz/model/snapshot.h"
#include "viz/model/theme.h"

namespace shardscope::viz {

struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float width() const { return x1 - x0; }
  float height() const { return y1 - y0; }
  bool contains(float x, float y) const { return x >= x0 && x < x1 && y >= y0 && y < y1; }
};

struct Label {
  float x = 0, y = 0;  // top left of the text
  std::string text;
  Color color = theme::kText;
};

struct Line {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  Color color = theme::kOutline;
  float thickness = 1.0f;
  bool arrow = false;  // an arrow head at (x1, y1)
};

struct PanelSize {
  float width = 0, height = 0;
};

// ---- Shard layout ------------------------------------------------------------------------------

// How a rank's piece of a logical tensor is drawn.
enum class PieceStyle : std::uint8_t {
  shard,      // a solid block in the rank's colour where its slice lies
  replicate,  // every rank holds the whole tensor: one band per rank across the full rectangle
  partial,    // every rank holds a full-size summand: hatched in the rank's colour, marked "sum"
};

struct ShardPiece {
  int rank = 0;
  Rect rect;
  PieceStyle style = PieceStyle::shard;
  Color fill = 0;
  Color outline = 0;
  // "rank 1: s 4..8, b 0..2, h 0..32 (1,024 B)"; a weight's starts with its parameter's name
  // and a line break ("layers.1.attn.qkv.weight\nrank 1: ...").
  std::string tooltip;
};

// One logical (full) tensor of the current op's module.
struct LogicalTensorView {
  std::string name;  // "x (ln1 output)", "W_qkv"
  std::string role;  // "reads" or "writes"
  bool weight = false;
  std::string parameter;  // a weight's, as the stack names it ("layers.1.attn.qkv.weight")
  Shape global;
  Placement placement;
  std::vector<std::string> dim_names;  // "s", "b", "h", ...
  Rect frame;                          // the full tensor
  std::vector<Label> labels;           // name, dims ("s=16" along rows, "h=32" along columns)
  std::vector<ShardPiece> pieces;      // one per rank (or one band per rank)
};

struct ShardView {
  // "attn.qkv/gather_matmul forward: Shard(0) -> Shard(2)"; in a stack, the op's layer first:
  // "layer 1: attn.qkv/gather_matmul forward: ..."
  std::string title;
  std::vector<LogicalTensorView> tensors;
  // e.g. "no op yet", "rank 0 shown; ranks differ"; in a stack, the layer shown ("layer 1 of 3:
  // parameters layers.1.*") and, when it is not the op's, that it is not
  std::vector<Label> notes;
};

// The current op of `rank` (its status) in its module: the logical tensors it reads and writes
// with each rank's shard in place. In a stack, the module as layer `layer` has it (its
// parameters, layers.<layer>.*); nullopt: the layer of the rank's op (shown_layer following it).
ShardView shard_view(const Snapshot& s, int rank, PanelSize size,
                     std::optional<int> layer = std::nullopt);
// The piece under the mouse, if any.
const ShardPiece* shard_piece_at(const ShardView& v, float x, float y);

// ---- Collectives -------------------------------------------------------------------------------

struct TimelineViewport {
  double begin_us = 0, end_us = 0;      // the visible time window; end <= begin: the whole snapshot
  std::optional<std::size_t> selected;  // index into Snapshot::events of the selected collective
  std::optional<int> layer;             // a stack's layer whose totals layer_totals lists
};

struct TimelineBox {
  int rank = 0;
  Rect rect;
  Color fill = 0;
  std::string label;       // "all_gather 4.0 KiB" when wide enough, else ""
  std::string tooltip;     // kind, bytes, issuing op, phase, purpose, duration
  std::size_t event = 0;   // index into Snapshot::events (the first, when folded)
  std::size_t folded = 1;  // events drawn as this one box (> 1 when folded)
};

struct CommTotalRow {
  std::string kind, phase, purpose;
  int calls = 0, model_calls = 0;
  double bytes = 0, model_bytes = 0;  // per rank; model only for activation and param_grad
  bool modelled = true;               // false for the loss and the check: comm_model has no line
  bool matches = true;                // an unmodelled row never mismatches
  // What the table shows, as `shardscope run` prints it: "3/3" calls against the model ("3/-"
  // unmodelled), and the model's bytes ("no model" unmodelled) in model_color: passed when it
  // matches, pending when short while the run goes on, failed otherwise, dim when unmodelled.
  std::string calls_text, model_text;
  Color model_color = theme::kPassed;
};

struct TimelineView {
  std::vector<Rect> lanes;           // one per rank
  std::vector<Label> lane_labels;    // "rank 0"
  std::vector<TimelineBox> boxes;    // collectives, by lane then time
  std::vector<Line> flows;           // who sends what to whom for the selected call
  std::vector<Label> flow_labels;    // bytes per arrow
  std::optional<Line> cursor;        // the current time
  std::vector<CommTotalRow> totals;  // step 0's collectives beside comm_model (every layer's)
  // With viewport.layer: that layer's step-0 collectives beside its comm_model lines (no loss or
  // check rows: they run outside every layer).
  std::vector<CommTotalRow> layer_totals;
  double begin_us = 0, end_us = 0;  // the window actually shown
};

TimelineView timeline_view(const Snapshot& s, const TimelineViewport& viewport, PanelSize size);
const TimelineBox* timeline_box_at(const TimelineView& v, float x, float y);

// "512 B", "4.0 KiB", "1.2 MiB": the byte counts of the timeline and memory panels.
std::string byte_size_text(double bytes);

// ---- Memory ------------------------------------------------------------------------------------

struct MemoryChart {
  int rank = 0;
  Rect frame;
  std::vector<std::pair<Rect, Color>> segments;  // stacked columns by category, folded to pixels
  std::vector<Line> peaks;                       // the peak total, and where it happened
  std::vector<Label> labels;                     // "rank 0", "peak 1.2 MiB"
  double peak_bytes = 0;
};

struct SavedTermRow {
  std::string what, saved_by, formula;
  double model_bytes = 0;
  double measured_bytes = 0;  // saved by the current step's forward so far on the chosen rank
  bool complete = false;      // measured == model
};

// One layer's saved activations (extras apart) beside the layer's formula.
struct LayerSavedRow {
  int layer = 0;
  double measured_bytes = 0, model_bytes = 0;
  bool complete = false;  // measured == model
};

struct MemoryView {
  std::vector<MemoryChart> charts;  // one per rank
  // The chosen rank's saved activations in layer `layer` beside the formula, which is every
  // layer's: its terms and their totals.
  int layer = 0;
  std::vector<SavedTermRow> saved;
  double saved_total = 0, formula_total = 0;
  std::string formula;  // "sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t"
  // The whole stack on the chosen rank: each layer's total (L rows), what ops outside every layer
  // saved (the model says nothing), and the sum of both beside L times the formula.
  std::vector<LayerSavedRow> layers;
  double outside_saved = 0;
  double stack_saved_total = 0, stack_formula_total = 0;
  std::vector<Label> legend;  // category names in their colours
};

// The charts of every rank and `rank`'s saved activations of its current step's forward, those
// of layer `layer` term by term (nullopt: the layer of the rank's op, shown_layer following it).
MemoryView memory_view(const Snapshot& s, int rank, PanelSize size,
                       std::optional<int> layer = std::nullopt);

// ---- Check -------------------------------------------------------------------------------------

struct CheckView {
  struct Row {
    std::string name, failed, abs_err, rel_err;  // failed: "0 of 1024" elements
    Color color = theme::kPending;               // passed, failed or pending
  };
  std::vector<Row> rows;
  // "12 of 14 checked, all within |a - b| <= 1e-3 max|b| + 1e-3 |b|" or the snapshot's note
  std::string summary;
};

CheckView check_view(const Snapshot& s);

// ---- Tensor inspector --------------------------------------------------------------------------

struct HeatMap {
  std::string title;  // "attn.qkv.weight  Shard(1) of [32, 96]  (full)" / "(rank 2)"
  Rect frame;
  std::vector<std::pair<Rect, Color>> cells;  // folded to at most kHeatMapMaxCells per side
  std::vector<Line> shard_outlines;           // full view: each rank's slice outlined
  double min_value = 0, max_value = 0;
};

// rank < 0: the full tensor assembled from every rank's shard (a Partial tensor is summed);
// else rank's local shard. An op tensor (TensorValues::at_op) has no full view: rank < 0 shows
// the first rank that holds it. nullopt when the snapshot has no values for `name`.
std::optional<HeatMap> heat_map(const Snapshot& s, const std::string& name, int rank,
                                PanelSize size);

// The tensor the inspector shows. Following the op (`follow_op`), it is the op tensor of that
// name where the ranks are paused now ("op input0" stays "op input0" as they move on), else the
// op's first input, else (no op tensor in the snapshot) as when not following: `current` when the
// snapshot has it as a layer tensor, else the layer's input (a 2-D picture with every rank's
// shard in it), else the first tensor; `current` when the snapshot has none.
std::string inspected_tensor(const Snapshot& s, const std::string& current, bool follow_op);

}  // namespace shardscope::viz
