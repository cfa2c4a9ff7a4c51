// The module layout table: for each module scope of the layer ("ln1", "attn.qkv", ...,
// "grad_reduce") and each parallel mode, the logical (full) tensors the module reads and writes,
// with their global shapes, placements and dim names. These are the facts of the Megatron
// (Shoeybi et al. 2019), sequence-parallel (Korthikanti et al. 2022) and Ulysses (Jacobs et al.
// 2023) papers as parallel/layers/parallel_layer.cpp implements them; tests/viz/layout_test.cpp
// checks every op of real runs against this table. The shard view draws it; nothing here knows
// ImGui.
#pragma once

#include <string>
#include <vector>

#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"

namespace shardscope::viz {

// One logical tensor of a module.
struct ModuleTensor {
  std::string name;     // "x (ln1 out)", "W_qkv", "qkv", "scores"
  std::string role;     // "reads" or "writes"
  bool weight = false;  // a parameter (or, in grad_reduce, a parameter's gradient)
  // A weight's parameter as the stack names it ("attn.qkv.weight"; in a stack of L > 1 layers,
  // "layers.1.attn.qkv.weight" for layer 1), else "".
  std::string parameter;
  // A reshaped, permuted or chunked view that only lives between two ops of the module (the
  // head split and merge). Listed so every op's shapes are accounted for; the shard view leaves
  // these out to keep the picture to the tensors the papers draw.
  bool intermediate = false;
  Shape global;
  Placement placement;
  std::vector<std::string> dim_names;  // one per dim: "s", "b", "h", "3h", "a", "d", ...
};

struct ModuleLayout {
  std::string scope;
  std::vector<ModuleTensor> tensors;
};

// The module scopes of the layer of `config`, in forward order, then "loss" and "grad_reduce".
std::vector<std::string> module_scopes(const LayerConfig& config);
// Whether `scope` is a module of a layer of any configuration (decl::known_scopes).
bool has_module_layout(const std::string& scope);

// The layout of `scope` for config.mode at config.degree (single: degree 1, all Replicate), in
// layer config.layer of the stack (every layer's is the same but for its parameters' names:
// pass stack_layer(config, i) for layer i). Throws ArgumentError naming the scope and the known
// ones when `scope` is not a module.
ModuleLayout module_layout(const LayerConfig& config, const std::string& scope);

// "[4, 2, 32]" (TraceEvent's shape text) -> Shape; "[]" is a scalar. Throws ArgumentError
// naming the text when it is not a bracketed list of non-negative integers.
Shape parse_shape_text(const std::string& text);

// How a tensor is drawn in two dimensions: rows along row_dim and columns along col_dim; every
// other dim is folded. The row dim is the sharded dim when that is not the last one (so a shard
// is a band of rows), else dim 0; columns are the last dim. A vector is one row (row_dim -1),
// a scalar one cell (both -1).
struct Projection {
  int row_dim = -1;
  int col_dim = -1;
  std::int64_t rows = 1, cols = 1;
};
Projection projection_of(const Shape& global, Placement placement);

// Rank r's half-open index range [begin, end) along `dim` of a `global` tensor under
// `placement` in a group of t: the r-th equal slice for Shard(dim), else the whole dim.
std::pair<std::int64_t, std::int64_t> slice_range(const Shape& global, Placement placement, int dim,
                                                  int rank, int t);

// 1234567 -> "1,234,567": byte counts in tooltips.
std::string group_digits(std::uint64_t n);

}  // namespace shardscope::viz
