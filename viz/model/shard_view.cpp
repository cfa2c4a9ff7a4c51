// The shard view: the logical tensors of the module a rank is in (viz/model/layout.h), each drawn
// as a rectangle (rows: its row dim, columns: its last dim, other dims folded) with every rank's
// piece in the rank's colour where it lies. In a stack, the module as the selected layer has it
// (its weights are that layer's, layers.<i>.*), saying so when that is not the op's layer.
#include <algorithm>
#include <functional>
#include <tuple>

#include "autograd/dtype.h"
#include "parallel/layers/layer_decl.h"
#include "viz/model/layer_selection.h"
#include "viz/model/layout.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

// How tall a tensor may be drawn against its width: true proportions, clamped so a vector stays
// a visible band and a tall weight does not squeeze the others.
constexpr float kMinAspect = 1.0f / 8.0f;
constexpr float kMaxAspect = 2.0f;

const RankStatus* status_of(const Snapshot& s, int rank) {
  for (const RankStatus& st : s.status) {
    if (st.rank == rank) return &st;
  }
  return nullptr;
}

// The rank's last op or collective event (the status comes from it), if any.
const TraceEvent* last_event(const Snapshot& s, int rank) {
  for (auto it = s.events.rbegin(); it != s.events.rend(); ++it) {
    if (it->rank == rank &&
        (it->kind == TraceEventKind::op || it->kind == TraceEventKind::collective)) {
      return &*it;
    }
  }
  return nullptr;
}

// The rank's last op or collective in one of the layer's modules (not the check's after them).
const TraceEvent* last_module_event(const Snapshot& s, int rank) {
  for (auto it = s.events.rbegin(); it != s.events.rend(); ++it) {
    if (it->rank == rank &&
        (it->kind == TraceEventKind::op || it->kind == TraceEventKind::collective) &&
        has_module_layout(it->scope)) {
      return &*it;
    }
  }
  return nullptr;
}

std::string title_of(const Snapshot& s, const RankStatus& st) {
  const std::string at = st.scope.empty() ? st.op
                         : st.op.empty()  ? st.scope
                                          : st.scope + "/" + st.op;
  std::string title = at + " " + phase_name(st.phase);
  if (s.config.layers > 1 && st.layer >= 0) {
    title = "layer " + std::to_string(st.layer) + ": " + title;  // a stack's layer first
  }
  if (!st.placement.empty()) title += ": " + st.placement;
  const TraceEvent* e = last_event(s, st.rank);
  if (st.state == RankStatus::State::finished) {
    title = "finished; last: " + title;
  } else if (e && e->kind == TraceEventKind::collective) {
    title += std::string(" (in ") + collective_name(e->collective) + ")";
  }
  return title;
}

std::string dim_label(const ModuleTensor& m, int dim) {
  const std::string name = dim < static_cast<int>(m.dim_names.size())
                               ? m.dim_names[static_cast<std::size_t>(dim)]
                               : "d" + std::to_string(dim);
  return name + "=" + std::to_string(m.global[dim]);
}

// "rank 1: s 4..8, b 0..2, h 0..32 (1,024 B)", plus what a Replicate or Partial piece means.
std::string piece_tooltip(const ModuleTensor& m, int rank, int t, DType dtype) {
  std::string text = "rank " + std::to_string(rank) + ":";
  for (int d = 0; d < m.global.rank(); ++d) {
    const auto [lo, hi] = slice_range(m.global, m.placement, d, rank, t);
    const std::string name = d < static_cast<int>(m.dim_names.size())
                                 ? m.dim_names[static_cast<std::size_t>(d)]
                                 : "d" + std::to_string(d);
    text += (d ? ", " : " ") + name + " " + std::to_string(lo) + ".." + std::to_string(hi);
  }
  const Shape local = local_shape(m.global, m.placement, t);
  const auto bytes = static_cast<std::uint64_t>(local.numel()) * dtype_size(dtype);
  text += " (" + group_digits(bytes) + " B)";
  if (m.placement.kind == Placement::Kind::replicate && t > 1) text += ", a full copy";
  if (m.placement.kind == Placement::Kind::partial) text += ", a partial sum: the value is the sum";
  if (!m.parameter.empty()) text = m.parameter + "\n" + text;  // which layer's weight it is
  return text;
}

// Where rank r's piece lies in `frame`: its slice along the row or column dim for a Shard; one
// horizontal band of t for Replicate and Partial (every rank holds all of it).
Rect piece_rect(const Rect& frame, const ModuleTensor& m, const Projection& p, int r, int t) {
  Rect rect = frame;
  auto part = [](float a, float b, std::int64_t lo, std::int64_t hi, std::int64_t n) {
    const float len = b - a;
    return std::pair<float, float>{a + len * static_cast<float>(lo) / static_cast<float>(n),
                                   a + len * static_cast<float>(hi) / static_cast<float>(n)};
  };
  if (m.placement.is_shard()) {
    const int d = m.placement.dim;
    const auto [lo, hi] = slice_range(m.global, m.placement, d, r, t);
    const std::int64_t n = std::max<std::int64_t>(1, m.global[d]);
    if (d == p.row_dim) std::tie(rect.y0, rect.y1) = part(frame.y0, frame.y1, lo, hi, n);
    if (d == p.col_dim) std::tie(rect.x0, rect.x1) = part(frame.x0, frame.x1, lo, hi, n);
    return rect;
  }
  std::tie(rect.y0, rect.y1) = part(frame.y0, frame.y1, r, r + 1, t);
  return rect;
}

// `text` cut to what fits in `width` pixels (ending in ".." when cut), so a label never runs
// into the next column's.
std::string fit(const std::string& text, float width) {
  const auto chars = static_cast<std::size_t>(std::max(0.0f, width / theme::kApproxCharWidth));
  if (text.size() <= chars) return text;
  return chars <= 2 ? std::string() : text.substr(0, chars - 2) + "..";
}

// One tensor drawn in `cell`; false when the cell is too small for a frame.
bool draw_tensor(const ModuleTensor& m, const Rect& cell, int rank, int t, DType dtype,
                 LogicalTensorView& out) {
  const Projection p = projection_of(m.global, m.placement);
  const std::string row_text = p.row_dim >= 0 ? dim_label(m, p.row_dim) : "";
  std::string col_text = p.col_dim >= 0 ? dim_label(m, p.col_dim) : "";
  std::string folded;
  for (int d = 0; d < m.global.rank(); ++d) {
    if (d != p.row_dim && d != p.col_dim) folded += (folded.empty() ? "" : ", ") + dim_label(m, d);
  }
  if (!folded.empty()) col_text += "  (folded: " + folded + ")";
  const float row_label_width =
      row_text.empty() ? 0.0f : theme::kApproxCharWidth * static_cast<float>(row_text.size() + 1);
  const float ax0 = cell.x0 + row_label_width, ay0 = cell.y0 + theme::kLabelHeight;
  const float aw = cell.x1 - ax0, ah = cell.y1 - theme::kLabelHeight - ay0;
  if (aw < 4.0f || ah < 2.0f) return false;
  const float aspect =
      std::clamp(static_cast<float>(p.rows) / static_cast<float>(p.cols), kMinAspect, kMaxAspect);
  float fw = aw, fh = aw * aspect;
  if (fh > ah) {
    fh = ah;
    fw = std::min(aw, fh / aspect);
  }
  out.frame = {ax0, ay0, ax0 + fw, ay0 + fh};
  out.labels.push_back(
      {cell.x0, cell.y0,
       fit(m.name + "  " + m.role + "  " + m.placement.str() + " of " + m.global.str(),
           cell.width()),
       m.weight ? theme::kTextDim : theme::kText});
  if (!row_text.empty()) {
    out.labels.push_back(
        {cell.x0, ay0 + std::max(0.0f, fh - theme::kLabelHeight) / 2, row_text, theme::kTextDim});
  }
  out.labels.push_back({ax0, ay0 + fh + 1.0f, fit(col_text, cell.x1 - ax0), theme::kTextDim});
  for (int r = 0; r < t; ++r) {
    ShardPiece piece;
    piece.rank = r;
    piece.rect = piece_rect(out.frame, m, p, r, t);
    piece.style = m.placement.is_shard()                         ? PieceStyle::shard
                  : m.placement.kind == Placement::Kind::partial ? PieceStyle::partial
                                                                 : PieceStyle::replicate;
    piece.fill = piece.style == PieceStyle::shard
                     ? theme::rank_color(r)
                     : with_alpha(theme::rank_color(r), theme::kSharedPieceAlpha);
    piece.outline = r == rank ? theme::kSelection : theme::rank_color(r);
    piece.tooltip = piece_tooltip(m, r, t, dtype);
    out.pieces.push_back(std::move(piece));
  }
  return true;
}

// Columns of the grid that give the tensors the most room (wide cells preferred: most tensors
// are wider than tall); 0 when none fits.
int best_columns(std::size_t n, float width, float height, float gap) {
  int best = 0;
  float best_score = 0;
  for (int c = 1; c <= static_cast<int>(n); ++c) {
    const int rows = static_cast<int>((n + static_cast<std::size_t>(c) - 1) / c);
    const float cw = (width - gap * static_cast<float>(c - 1)) / static_cast<float>(c);
    const float ch = (height - gap * static_cast<float>(rows - 1)) / static_cast<float>(rows);
    if (cw <= 0 || ch <= 0) continue;
    const float score = std::min(cw, 2.0f * ch);
    if (score > best_score) {
      best_score = score;
      best = c;
    }
  }
  return best;
}

// Which layer's module the view shows, with notes saying so in a stack: `layer` when given (the
// selector), else the layer of the rank's op; nullopt (with a note) when there is no such layer.
std::optional<int> layer_shown(const Snapshot& s, const RankStatus& st, std::optional<int> layer,
                               const std::function<void(std::string, Color)>& note) {
  const int layers = std::max(1, s.config.layers);
  const int shown = layer ? *layer : shown_layer(s, st.rank, {});
  if (shown < 0 || shown >= layers) {
    note("no layer " + std::to_string(shown) + " in this stack of " + std::to_string(layers) +
             " layers",
         theme::kFailed);
    return std::nullopt;
  }
  if (layers == 1 || st.scope == decl::kLossScope) return shown;  // the loss is in no layer
  if (st.layer >= 0 && st.layer != shown) {
    note("rank " + std::to_string(st.rank) + "'s op is in layer " + std::to_string(st.layer) +
             "; shown: its module in layer " + std::to_string(shown) + " (the layer selector)",
         theme::kWarning);
  }
  note("layer " + std::to_string(shown) + " of " + std::to_string(layers) + ": parameters layers." +
           std::to_string(shown) + ".*",
       theme::kTextDim);
  return shown;
}

}  // namespace

ShardView shard_view(const Snapshot& s, int rank, PanelSize size, std::optional<int> layer) {
  ShardView v;
  const float pad = std::min(theme::kPanelPadding, std::max(0.0f, size.width) / 4);
  float y = pad;
  auto note = [&](std::string text, Color color = theme::kTextDim) {
    v.notes.push_back({pad, y, std::move(text), color});
    y += theme::kLabelHeight;
  };
  const RankStatus* st = status_of(s, rank);
  if (!st) {
    note("no rank " + std::to_string(rank) + " in this run (" + std::to_string(s.ranks) +
         " ranks)");
    return v;
  }
  RankStatus at_end;
  if (st->state == RankStatus::State::finished) {
    // The layout of its last op in the layer's modules, rather than a blank panel.
    const TraceEvent* e = last_module_event(s, rank);
    note("rank " + std::to_string(rank) + " has finished its run" + (e ? "; its last op:" : ""));
    if (!e) return v;
    at_end.rank = rank;
    at_end.state = RankStatus::State::finished;
    at_end.op = e->op;
    at_end.scope = e->scope;
    at_end.phase = e->phase;
    at_end.layer = e->layer;
    at_end.step = e->step;
    at_end.placement = e->placement;
    at_end.inputs = e->inputs;
    st = &at_end;
  }
  if (st->op.empty() && st->scope.empty()) {
    note("no op yet: rank " + std::to_string(rank) + " has not started");
    return v;
  }
  v.title = title_of(s, *st);
  if (!has_module_layout(st->scope)) {
    note("rank " + std::to_string(rank) + " is at " + (st->scope.empty() ? st->op : st->scope) +
         ", outside the layer's modules");
    return v;
  }
  const std::optional<int> shown = layer_shown(s, *st, layer, note);
  if (!shown) return v;
  LayerConfig in_layer = s.config;  // the layer's parameters are named after its index
  in_layer.layer = *shown;
  const int t = s.config.mode == ParallelMode::single ? 1 : std::max(1, s.config.degree);
  std::vector<ModuleTensor> tensors;
  for (ModuleTensor& m : module_layout(in_layer, st->scope).tensors) {
    if (!m.intermediate) tensors.push_back(std::move(m));
  }
  if (st->phase == Phase::backward && st->scope != decl::kGradReduceScope) {
    note("backward: the gradients of these tensors, of the same shapes, flow the other way");
  }
  if (!st->inputs.empty()) {
    std::string inputs;
    for (const std::string& in : st->inputs) inputs += (inputs.empty() ? "" : ", ") + in;
    note("rank " + std::to_string(rank) + "'s op reads " + inputs);
  }
  if (tensors.empty()) {
    note(st->scope + " moves no tensors in " + mode_name(s.config.mode));
    return v;
  }
  const float x0 = pad, x1 = size.width - pad, y1 = size.height - pad;
  const float gap = std::min(theme::kTensorGap, std::max(0.0f, (x1 - x0) / 16));
  const int columns = best_columns(tensors.size(), x1 - x0, y1 - y, gap);
  std::size_t skipped = 0;
  if (columns > 0) {
    const std::size_t cols = static_cast<std::size_t>(columns);
    const std::size_t rows = (tensors.size() + cols - 1) / cols;
    const float cw = (x1 - x0 - gap * static_cast<float>(cols - 1)) / static_cast<float>(cols);
    const float ch = (y1 - y - gap * static_cast<float>(rows - 1)) / static_cast<float>(rows);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const float cx = x0 + static_cast<float>(i % cols) * (cw + gap);
      const float cy = y + static_cast<float>(i / cols) * (ch + gap);
      LogicalTensorView view;
      const ModuleTensor& m = tensors[i];
      view.name = m.name;
      view.role = m.role;
      view.weight = m.weight;
      view.parameter = m.parameter;
      view.global = m.global;
      view.placement = m.placement;
      view.dim_names = m.dim_names;
      if (draw_tensor(m, {cx, cy, cx + cw, cy + ch}, rank, t, s.config.dtype, view)) {
        v.tensors.push_back(std::move(view));
      } else {
        ++skipped;
      }
    }
  } else {
    skipped = tensors.size();
  }
  if (skipped > 0) {
    note("the panel is too small for " + std::to_string(skipped) + " of " +
         std::to_string(tensors.size()) + " tensors");
  }
  return v;
}

const ShardPiece* shard_piece_at(const ShardView& v, float x, float y) {
  for (const LogicalTensorView& t : v.tensors) {
    if (!t.frame.contains(x, y)) continue;
    for (const ShardPiece& p : t.pieces) {
      if (p.rect.contains(x, y)) return &p;
    }
  }
  return nullptr;
}

}  // namespace shardscope::viz
