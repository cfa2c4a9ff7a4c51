// The tensor inspector's heat map: one rank's local values, or the full tensor assembled from
// every rank's shard by its placement, projected to rows x columns like the shard view and
// folded to at most theme::kHeatMapMaxCells a side (each cell shows the value of largest
// magnitude in its block, so a spike is never averaged away).
#include <algorithm>
#include <cmath>

#include "autograd/errors.h"
#include "viz/model/layout.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

void check_size(const TensorValues& t, std::size_t r) {
  const std::int64_t want = t.local_shapes.at(r).numel();
  if (static_cast<std::int64_t>(t.local[r].size()) != want) {
    throw ArgumentError("heat_map: tensor " + t.name + " on rank " + std::to_string(r) +
                        " has local shape " + t.local_shapes[r].str() + " (" +
                        std::to_string(want) + " values), given " +
                        std::to_string(t.local[r].size()) + " values");
  }
}

// Rank r's offset along the sharded dim: the ranks before it hold the slices before its own.
std::int64_t shard_offset(const TensorValues& t, int dim, std::size_t r) {
  std::int64_t offset = 0;
  for (std::size_t q = 0; q < r; ++q) offset += t.local_shapes[q][dim];
  return offset;
}

// The full tensor: Replicate is rank 0's copy, Partial the elementwise sum, Shard(d) the
// concatenation along d in rank order.
std::vector<float> assemble(const TensorValues& t, Placement placement) {
  const std::size_t ranks = t.local.size();
  for (std::size_t r = 0; r < ranks; ++r) check_size(t, r);
  const auto n = static_cast<std::size_t>(t.global.numel());
  if (placement.kind == Placement::Kind::replicate) return t.local[0];
  std::vector<float> full(n, 0.0f);
  if (placement.kind == Placement::Kind::partial) {
    for (std::size_t r = 0; r < ranks; ++r) {
      if (t.local[r].size() != n) {
        throw ArgumentError("heat_map: Partial tensor " + t.name + " needs the global shape " +
                            t.global.str() + " on every rank, rank " + std::to_string(r) +
                            " holds " + t.local_shapes[r].str());
      }
      for (std::size_t i = 0; i < n; ++i) full[i] += t.local[r][i];
    }
    return full;
  }
  const int d = placement.dim;
  std::int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= t.global[k];
  for (int k = d + 1; k < t.global.rank(); ++k) inner *= t.global[k];
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::int64_t len = t.local_shapes[r][d], offset = shard_offset(t, d, r);
    if (offset + len > t.global[d]) {
      throw ArgumentError("heat_map: the shards of " + t.name + " along dim " + std::to_string(d) +
                          " exceed the global shape " + t.global.str());
    }
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto src = static_cast<std::size_t>(o * len * inner);
      const auto dst = static_cast<std::size_t>((o * t.global[d] + offset) * inner);
      std::copy_n(t.local[r].begin() + static_cast<std::ptrdiff_t>(src),
                  static_cast<std::size_t>(len * inner),
                  full.begin() + static_cast<std::ptrdiff_t>(dst));
    }
  }
  return full;
}

// The first index of block i of n folded into `blocks` (blocks <= n).
std::int64_t block_start(std::int64_t i, std::int64_t n, std::int64_t blocks) {
  return (i * n + blocks - 1) / blocks;
}

Color lerp(Color a, Color b, float f) {
  auto mix = [f](std::uint8_t x, std::uint8_t y) {
    return static_cast<std::uint8_t>(std::lround(x + (y - x) * f));
  };
  return rgba(mix(red_of(a), red_of(b)), mix(green_of(a), green_of(b)),
              mix(blue_of(a), blue_of(b)));
}

// The diverging scale: 0 is kHeatZero, +-scale the palette's ends; NaN is drawn as a failure.
Color heat_color(float v, double scale) {
  if (std::isnan(v)) return theme::kFailed;
  if (scale <= 0) return theme::kHeatZero;
  const float f = static_cast<float>(std::min(1.0, std::abs(v) / scale));
  return lerp(theme::kHeatZero, v < 0 ? theme::kHeatNegative : theme::kHeatPositive, f);
}

void outline(std::vector<Line>& lines, const Rect& r, Color c) {
  lines.push_back({r.x0, r.y0, r.x1, r.y0, c, theme::kOutlineWidth, false});
  lines.push_back({r.x1, r.y0, r.x1, r.y1, c, theme::kOutlineWidth, false});
  lines.push_back({r.x1, r.y1, r.x0, r.y1, c, theme::kOutlineWidth, false});
  lines.push_back({r.x0, r.y1, r.x0, r.y0, c, theme::kOutlineWidth, false});
}

}  // namespace

std::optional<HeatMap> heat_map(const Snapshot& s, const std::string& name, int rank,
                                PanelSize size) {
  const auto it = std::find_if(s.tensors.begin(), s.tensors.end(),
                               [&](const TensorValues& t) { return t.name == name; });
  if (it == s.tensors.end() || it->local.empty()) return std::nullopt;
  const TensorValues& t = *it;
  if (t.local_shapes.size() != t.local.size()) {
    throw ArgumentError("heat_map: tensor " + name + " has " + std::to_string(t.local.size()) +
                        " ranks' values but " + std::to_string(t.local_shapes.size()) +
                        " local shapes");
  }
  if (t.at_op && rank < 0) {  // no full view of an op tensor: the first rank that holds it
    for (std::size_t r = 0; r < t.local.size() && rank < 0; ++r) {
      if (!t.local[r].empty()) rank = static_cast<int>(r);
    }
    if (rank < 0) return std::nullopt;
  }
  const bool full = rank < 0;
  if (!full && static_cast<std::size_t>(rank) >= t.local.size()) return std::nullopt;
  for (std::size_t r = 0; r < t.local.size(); ++r) {
    if ((full || r == static_cast<std::size_t>(rank)) && t.local[r].empty()) return std::nullopt;
  }
  const auto r_index = static_cast<std::size_t>(full ? 0 : rank);
  Placement placement = t.placement;  // Shard(-1) counts from the last dim
  if (placement.is_shard() && placement.dim < 0) placement.dim += t.global.rank();
  if (placement.is_shard() && (placement.dim < 0 || placement.dim >= t.global.rank())) {
    throw ArgumentError("heat_map: tensor " + name + " is " + t.placement.str() +
                        " but its global shape " + t.global.str() + " has no such dim");
  }
  std::vector<float> values;
  if (full) {
    values = assemble(t, placement);
  } else {
    check_size(t, r_index);
    values = t.local[r_index];
  }
  const Shape& shape = full ? t.global : t.local_shapes[r_index];

  HeatMap map;
  if (t.at_op) {  // "input 0 of attn.qkv/matmul forward  (rank 1, [8, 2, 32])"
    const std::string what = r_index < t.what.size() ? t.what[r_index] : name;
    map.title = what + "  (rank " + std::to_string(rank) + ", " + shape.str() + ")";
  } else {
    map.title = name + "  " + t.placement.str() + " of " + t.global.str() +
                (full ? std::string("  (full)")
                      : "  (rank " + std::to_string(rank) + ", local " + shape.str() + ")");
  }
  // Rows and columns, then each value into its block, keeping the largest magnitude.
  const Projection p = projection_of(shape, placement);
  const std::int64_t rows = std::max<std::int64_t>(1, p.rows),
                     cols = std::max<std::int64_t>(1, p.cols);
  const std::int64_t max_cells = theme::kHeatMapMaxCells;
  const std::int64_t row_blocks = std::min(rows, max_cells), col_blocks = std::min(cols, max_cells);
  if (row_blocks < rows || col_blocks < cols) map.title += "  folded, max |x|";
  std::vector<float> block(static_cast<std::size_t>(row_blocks * col_blocks), 0.0f);
  std::vector<bool> filled(block.size(), false);
  const std::vector<std::int64_t> strides = shape.strides();
  double lo = 0, hi = 0, scale = 0;
  bool any = false;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto idx = static_cast<std::int64_t>(i);
    const std::int64_t row =
        p.row_dim >= 0 ? idx / strides[static_cast<std::size_t>(p.row_dim)] % shape[p.row_dim] : 0;
    const std::int64_t col = p.col_dim >= 0 ? idx % shape[p.col_dim] : 0;
    const std::size_t b =
        static_cast<std::size_t>(row * row_blocks / rows * col_blocks + col * col_blocks / cols);
    const float v = values[i];
    if (std::isnan(v)) {  // a NaN wins its block: it must not hide behind a large value
      block[b] = v;
      filled[b] = true;
      continue;
    }
    if (!filled[b] || (!std::isnan(block[b]) && std::abs(v) > std::abs(block[b]))) block[b] = v;
    filled[b] = true;
    lo = any ? std::min(lo, static_cast<double>(v)) : v;
    hi = any ? std::max(hi, static_cast<double>(v)) : v;
    any = true;
    scale = std::max(scale, std::abs(static_cast<double>(v)));
  }
  map.min_value = lo;
  map.max_value = hi;

  // Square cells as large as fit; each block's rect spans its share of rows and columns.
  const float pad =
      std::min(theme::kPanelPadding, std::max(0.0f, std::min(size.width, size.height)) / 4);
  const float aw = size.width - 2 * pad, ah = size.height - 2 * pad;
  const float cell =
      std::min(aw / static_cast<float>(col_blocks), ah / static_cast<float>(row_blocks));
  if (!(cell > 0)) return map;  // no room: the title and range only
  const float fw = cell * static_cast<float>(col_blocks),
              fh = cell * static_cast<float>(row_blocks);
  map.frame = {pad, pad, pad + fw, pad + fh};
  auto x_at = [&](std::int64_t c) {
    return pad + fw * static_cast<float>(c) / static_cast<float>(cols);
  };
  auto y_at = [&](std::int64_t r) {
    return pad + fh * static_cast<float>(r) / static_cast<float>(rows);
  };
  for (std::int64_t br = 0; br < row_blocks; ++br) {
    const float y0 = y_at(block_start(br, rows, row_blocks));
    const float y1 = y_at(block_start(br + 1, rows, row_blocks));
    for (std::int64_t bc = 0; bc < col_blocks; ++bc) {
      const float x0 = x_at(block_start(bc, cols, col_blocks));
      const float x1 = x_at(block_start(bc + 1, cols, col_blocks));
      const float v = block[static_cast<std::size_t>(br * col_blocks + bc)];
      map.cells.push_back({Rect{x0, y0, x1, y1}, heat_color(v, scale)});
    }
  }
  if (!full) return map;
  // Each rank's slice of the full tensor; Replicate and Partial: every rank holds the whole.
  const int d = placement.dim;
  if (!placement.is_shard() || (d != p.row_dim && d != p.col_dim)) {
    outline(map.shard_outlines, map.frame, theme::kOutline);
    return map;
  }
  for (std::size_t r = 0; r < t.local.size(); ++r) {
    const std::int64_t begin = shard_offset(t, d, r), end = begin + t.local_shapes[r][d];
    Rect slice = map.frame;
    if (d == p.row_dim) {
      slice.y0 = y_at(begin);
      slice.y1 = y_at(end);
    } else {
      slice.x0 = x_at(begin);
      slice.x1 = x_at(end);
    }
    outline(map.shard_outlines, slice, theme::rank_color(static_cast<int>(r)));
  }
  return map;
}

std::string inspected_tensor(const Snapshot& s, const std::string& current, bool follow_op) {
  auto has = [&](const std::string& name, bool at_op) {
    return std::any_of(s.tensors.begin(), s.tensors.end(),
                       [&](const TensorValues& t) { return t.name == name && t.at_op == at_op; });
  };
  if (follow_op) {
    if (has(current, true)) return current;
    for (const TensorValues& t : s.tensors) {  // the op's first input, else its first tensor
      if (t.at_op && t.name == op_tensor_name("input0")) return t.name;
    }
    for (const TensorValues& t : s.tensors) {
      if (t.at_op) return t.name;
    }
  }
  if (has(current, false)) return current;
  if (has("input", false)) return "input";
  for (const TensorValues& t : s.tensors) {
    if (!t.at_op) return t.name;
  }
  return s.tensors.empty() ? current : s.tensors.front().name;
}

}  // namespace shardscope::viz
