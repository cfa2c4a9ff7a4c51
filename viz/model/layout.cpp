// The module layout table: the parameters, their placements and the scopes from the layer's
// declaration (parallel/layers/layer_decl.h); the activations each module reads and writes from
// parallel/layers/parallel_layer.cpp, parallel_linear.cpp,
// attention_core.cpp and layer_run.cpp (the loss).
#include "viz/model/layout.h"

#include <algorithm>
#include <cctype>

#include "autograd/errors.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope::viz {
namespace {

using Dims = std::vector<std::string>;

// The sizes and placements every module builds from.
struct Sizes {
  std::int64_t s, b, h, a, d, f;  // f, the MLP's inner width (4h unless the config sets it)
  LayerConfig config;
  ParallelMode mode;
  bool weights_sharded;  // tp, tp-sp: Megatron's column/row split of the four matrices
  Placement act;         // between blocks: Shard(0) in tp-sp and ulysses, else Replicate
  Placement heads;       // q, k, v, scores, context [b, a, s, *]: Shard(1) on a under any TP
};

Sizes sizes_of(const LayerConfig& c) {
  Sizes z{};
  z.s = c.seq;
  z.b = c.batch;
  z.h = c.hidden;
  z.a = c.heads;
  z.d = c.head_dim();
  z.f = c.ffn_width();
  z.config = c;
  z.mode = c.mode;
  z.weights_sharded = c.mode == ParallelMode::tp || c.mode == ParallelMode::tp_sp;
  const bool seq_sharded = c.mode == ParallelMode::tp_sp || c.mode == ParallelMode::ulysses;
  z.act = seq_sharded ? Placement::shard(0) : Placement::replicate();
  z.heads = c.mode == ParallelMode::single ? Placement::replicate() : Placement::shard(1);
  return z;
}

Placement shard_if(bool sharded, int dim) {
  return sharded ? Placement::shard(dim) : Placement::replicate();
}

ModuleTensor tensor(std::string name, const char* role, Shape global, Placement p, Dims dims) {
  ModuleTensor t;
  t.name = std::move(name);
  t.role = role;
  t.global = std::move(global);
  t.placement = p;
  t.dim_names = std::move(dims);
  return t;
}

ModuleTensor intermediate(std::string name, Shape global, Placement p, Dims dims) {
  ModuleTensor t = tensor(std::move(name), "writes", std::move(global), p, std::move(dims));
  t.intermediate = true;
  return t;
}

ModuleTensor weight(std::string name, std::string parameter, Shape global, Placement p, Dims dims) {
  ModuleTensor t = tensor(std::move(name), "reads", std::move(global), p, std::move(dims));
  t.weight = true;
  t.parameter = std::move(parameter);
  return t;
}

// A parameter as the declaration has it (parallel/layers/layer_decl.h): its symbol, shape, dim
// names and, in this mode, its placement; named as the stack names layer config.layer's
// ("layers.1.attn.qkv.weight"; "attn.qkv.weight" in a stack of one).
ModuleTensor param(const Sizes& z, const std::string& parameter) {
  const decl::Param p = decl::parameter(z.config, parameter);
  return weight(p.decl->symbol, decl::stack_name(z.config, p.name), p.shape,
                decl::placement(*p.decl, z.config), p.dims);
}

// The parameters the module declares, in the declared order.
std::vector<ModuleTensor> params_of(const Sizes& z, const decl::ModuleDecl& module) {
  std::vector<ModuleTensor> v;
  for (const decl::ParamDecl& p : module.params)
    v.push_back(param(z, decl::param_name(module, p.name)));
  return v;
}

// A tensor of the MLP's [s, b, width] activations: Shard(2) where the weights are split.
ModuleTensor mlp_tensor(const Sizes& z, std::string name, const char* role, decl::Width width) {
  const Placement p = z.weights_sharded ? Placement::shard(2) : z.act;
  return tensor(std::move(name), role, Shape{z.s, z.b, decl::width(width, z.config)}, p,
                {"s", "b", decl::width_name(width, z.config)});
}

ModuleTensor act(const Sizes& z, std::string name, const char* role) {
  return tensor(std::move(name), role, Shape{z.s, z.b, z.h}, z.act, {"s", "b", "h"});
}

// ln1, ln2: LayerNorm or RMSNorm over h on whatever rows the rank holds.
std::vector<ModuleTensor> norm(const Sizes& z, const decl::ModuleDecl& ln, const char* input) {
  std::vector<ModuleTensor> v{act(z, input, "reads")};
  for (ModuleTensor& p : params_of(z, ln)) v.push_back(std::move(p));
  v.push_back(act(z, std::string("x (") + ln.scope + " out)", "writes"));
  return v;
}

// attn.qkv, mlp.fc1: a column-parallel linear [s, b, h] -> [s, b, out]. tp-sp all-gathers the
// sequence shards first (gather_matmul); ulysses multiplies its sequence shard by full weights.
std::vector<ModuleTensor> column_linear(const Sizes& z, const decl::ModuleDecl& module,
                                        const std::string& input, const std::string& output) {
  std::vector<ModuleTensor> v{act(z, input, "reads")};
  if (z.mode == ParallelMode::tp_sp) {
    v.push_back(tensor(input + ", gathered", "writes", Shape{z.s, z.b, z.h}, Placement::replicate(),
                       {"s", "b", "h"}));
  }
  for (ModuleTensor& p : params_of(z, module)) v.push_back(std::move(p));
  if (module.params.front().split == decl::TpSplit::columns &&
      module.params.front().in != decl::Width::none && decl::weights(module).size() > 1) {
    // GQA's query and key/value products side by side: [s, b, h + 2gd]. Where the key/value
    // weight is replicated (t > g) every rank makes all g heads' and keeps its own one's.
    const std::int64_t g = z.config.kv_heads_count(), t = z.config.degree;
    const std::int64_t kv = decl::width(decl::Width::kv, z.config);
    const bool own_head = z.weights_sharded && t > g;
    const Placement p = z.weights_sharded ? Placement::shard(2) : z.act;
    const Placement kv_p = own_head ? Placement::replicate() : p;
    v.push_back(intermediate("q product", Shape{z.s, z.b, z.h}, p, {"s", "b", "h"}));
    v.push_back(intermediate("k|v product", Shape{z.s, z.b, kv}, kv_p, {"s", "b", "2gd"}));
    if (own_head) {
      v.push_back(intermediate("products side by side", Shape{z.s, z.b, (z.h / t + kv) * t}, p,
                               {"s", "b", "h/t+2gd"}));
      v.push_back(intermediate("k|v head columns", Shape{z.s, z.b, 2 * z.d}, Placement::replicate(),
                               {"s", "b", "2d"}));
      v.push_back(tensor(output, "writes", Shape{z.s, z.b, (z.h / t + 2 * z.d) * t}, p,
                         {"s", "b", "h/t+2d"}));
      return v;
    }
    v.push_back(tensor(output, "writes", Shape{z.s, z.b, z.h + kv}, p, {"s", "b", "h+2gd"}));
    return v;
  }
  v.push_back(mlp_tensor(z, output, "writes", module.params.front().out));  // the weight's out
  return v;
}

// attn.proj, mlp.fc2: a row-parallel linear [s, b, in] (Shard(2)) -> Partial [s, b, h], summed
// by an all-reduce (tp: Replicate) or a reduce-scatter (tp-sp: Shard(0)), then the bias.
std::vector<ModuleTensor> row_linear(const Sizes& z, const decl::ModuleDecl& module,
                                     const std::string& input, const std::string& output) {
  std::vector<ModuleTensor> v{mlp_tensor(z, input, "reads", module.params.front().in)};
  for (ModuleTensor& p : params_of(z, module)) v.push_back(std::move(p));
  if (z.weights_sharded) {
    v.push_back(tensor(output + " partial", "writes", Shape{z.s, z.b, z.h}, Placement::partial(),
                       {"s", "b", "h"}));
  }
  v.push_back(act(z, output, "writes"));
  return v;
}

// Grouped-query attention (g < a), as the layers run it. The key/value heads attention sees:
// g split over t (t <= g), the one a rank's queries need (tp, tp-sp at t > g), or Ulysses's
// max(g, t) after the repeat, split over t.
struct KvHeads {
  std::int64_t heads;  // global
  Placement placement;
};
KvHeads kv_heads(const Sizes& z) {
  const std::int64_t g = z.config.kv_heads_count(), t = z.config.degree;
  if (z.mode == ParallelMode::single) return {g, Placement::replicate()};
  if (z.mode == ParallelMode::ulysses) return {std::max(g, t), Placement::shard(1)};
  return t <= g ? KvHeads{g, Placement::shard(1)} : KvHeads{1, Placement::replicate()};
}
bool grouped(const Sizes& z) {
  return z.config.kv_heads_count() != z.a;
}
// A key or value [b, heads, s, d], or the queries or products of a group stacked along the
// sequence [b, heads, r s, d or s] (r query heads per key/value head).
ModuleTensor kv_tensor(const Sizes& z, const char* name, const char* role) {
  const KvHeads k = kv_heads(z);
  return tensor(name, role, Shape{z.b, k.heads, z.s, z.d}, k.placement, {"b", "g", "s", "d"});
}
ModuleTensor group_tensor(const Sizes& z, const char* name, bool square) {
  const KvHeads k = kv_heads(z);
  // The query heads of a group on a rank: a / heads where the key/value heads are split, a/t
  // where each rank keeps its own one.
  const std::int64_t r = k.placement.is_shard() || z.mode == ParallelMode::single
                             ? z.a / k.heads
                             : z.a / z.config.degree;
  return intermediate(name, Shape{z.b, k.heads, r * z.s, square ? z.s : z.d}, k.placement,
                      {"b", "g", "r s", square ? "s" : "d"});
}

std::vector<ModuleTensor> grouped_heads_split(const Sizes& z);

std::vector<ModuleTensor> heads_split(const Sizes& z) {
  if (grouped(z)) return grouped_heads_split(z);
  const Placement qkv_placement = z.weights_sharded ? Placement::shard(2) : z.act;
  std::vector<ModuleTensor> v{
      tensor("qkv", "reads", Shape{z.s, z.b, 3 * z.h}, qkv_placement, {"s", "b", "3h"})};
  if (z.mode == ParallelMode::ulysses) {
    // [s/t, b, a, 3, d] -> [3, s/t, b, a, d] -> chunks -> q, k, v [s/t, b, a, d], each sent by
    // an all-to-all from sequence shards to head shards [s, b, a/t, d], then [b, a/t, s, d].
    v.push_back(intermediate("qkv by head", Shape{z.s, z.b, z.a, 3, z.d}, Placement::shard(0),
                             {"s", "b", "a", "3", "d"}));
    v.push_back(intermediate("q|k|v stacked", Shape{3, z.s, z.b, z.a, z.d}, Placement::shard(1),
                             {"3", "s", "b", "a", "d"}));
    v.push_back(intermediate("q|k|v chunk", Shape{1, z.s, z.b, z.a, z.d}, Placement::shard(1),
                             {"1", "s", "b", "a", "d"}));
    v.push_back(tensor("q|k|v by sequence", "writes", Shape{z.s, z.b, z.a, z.d},
                       Placement::shard(0), {"s", "b", "a", "d"}));
    v.push_back(tensor("q|k|v by head", "writes", Shape{z.s, z.b, z.a, z.d}, Placement::shard(2),
                       {"s", "b", "a", "d"}));
  } else {
    // [s, b, a/t, 3, d] -> [3, b, a/t, s, d] -> chunks -> q, k, v: each rank has its own heads.
    v.push_back(intermediate("qkv by head", Shape{z.s, z.b, z.a, 3, z.d},
                             shard_if(z.heads.is_shard(), 2), {"s", "b", "a", "3", "d"}));
    v.push_back(intermediate("q|k|v stacked", Shape{3, z.b, z.a, z.s, z.d},
                             shard_if(z.heads.is_shard(), 2), {"3", "b", "a", "s", "d"}));
    v.push_back(intermediate("q|k|v chunk", Shape{1, z.b, z.a, z.s, z.d},
                             shard_if(z.heads.is_shard(), 2), {"1", "b", "a", "s", "d"}));
  }
  for (const char* name : {"q", "k", "v"}) {
    v.push_back(tensor(name, "writes", Shape{z.b, z.a, z.s, z.d}, z.heads, {"b", "a", "s", "d"}));
  }
  return v;
}

// GQA's attn.heads: the query columns, then the key/value columns grouped by head [g, 2, d], each
// to [b, heads, s, d]; Ulysses sends them by position to head shards, the key/value heads repeated
// to t first where t > g.
std::vector<ModuleTensor> grouped_heads_split(const Sizes& z) {
  const std::int64_t g = z.config.kv_heads_count(), t = z.config.degree;
  const bool own_head = z.weights_sharded && t > g;  // tp, tp-sp keep one key/value head
  // The key/value heads a rank's split yields: g (split over t where the weights are).
  const KvHeads held = own_head ? KvHeads{1, Placement::replicate()}
                                : KvHeads{g, z.weights_sharded ? Placement::shard(2) : z.act};
  const Placement cols = z.weights_sharded ? Placement::shard(2) : z.act;
  const Placement kv_cols = own_head ? Placement::replicate() : cols;
  const std::int64_t qkv_width = own_head ? (z.h / t + 2 * z.d) * t : z.h + 2 * g * z.d;
  std::vector<ModuleTensor> v{
      tensor("qkv", "reads", Shape{z.s, z.b, qkv_width}, cols, {"s", "b", "h+2gd"}),
      intermediate("q columns", Shape{z.s, z.b, z.h}, cols, {"s", "b", "h"}),
      intermediate("k|v columns", Shape{z.s, z.b, 2 * held.heads * z.d}, kv_cols,
                   {"s", "b", "2gd"}),
      intermediate("k|v by head", Shape{z.s, z.b, held.heads, 2, z.d}, kv_cols,
                   {"s", "b", "g", "2", "d"}),
      intermediate("k|v stacked", Shape{2, z.s, z.b, held.heads, z.d},
                   kv_cols.is_shard() ? Placement::shard(kv_cols.dim == 0 ? 1 : 3) : kv_cols,
                   {"2", "s", "b", "g", "d"}),
      intermediate("k|v chunk", Shape{1, z.s, z.b, held.heads, z.d},
                   kv_cols.is_shard() ? Placement::shard(kv_cols.dim == 0 ? 1 : 3) : kv_cols,
                   {"1", "s", "b", "g", "d"}),
      tensor("q by position", "writes", Shape{z.s, z.b, z.a, z.d},
             z.mode == ParallelMode::ulysses ? Placement::shard(0) : shard_if(cols.is_shard(), 2),
             {"s", "b", "a", "d"}),
      tensor("k|v by position", "writes", Shape{z.s, z.b, held.heads, z.d},
             kv_cols.is_shard() ? (kv_cols.dim == 0 ? Placement::shard(0) : Placement::shard(2))
                                : kv_cols,
             {"s", "b", "g", "d"})};
  if (z.mode == ParallelMode::ulysses) {
    const std::int64_t sent = std::max(g, t);
    v.push_back(intermediate("k|v head", Shape{z.s, z.b, 1, z.d}, Placement::shard(0),
                             {"s", "b", "1", "d"}));
    v.push_back(tensor("k|v repeated", "writes", Shape{z.s, z.b, sent, z.d}, Placement::shard(0),
                       {"s", "b", "g'", "d"}));
    v.push_back(tensor("q by head", "writes", Shape{z.s, z.b, z.a, z.d}, Placement::shard(2),
                       {"s", "b", "a", "d"}));
    v.push_back(tensor("k|v by head", "writes", Shape{z.s, z.b, sent, z.d}, Placement::shard(2),
                       {"s", "b", "g'", "d"}));
  }
  v.push_back(tensor("q", "writes", Shape{z.b, z.a, z.s, z.d}, z.heads, {"b", "a", "s", "d"}));
  v.push_back(kv_tensor(z, "k", "writes"));
  v.push_back(kv_tensor(z, "v", "writes"));
  return v;
}

ModuleTensor heads_tensor(const Sizes& z, const char* name, const char* role, bool square);

// attn.rope: q and k rotated by their positions. Ulysses rotates them on its sequence shards,
// before the all-to-all; the other modes on the heads they hold, over the whole sequence.
std::vector<ModuleTensor> rotary(const Sizes& z) {
  std::vector<ModuleTensor> v;
  for (const char* role : {"reads", "writes"}) {
    for (const char* name : {"q", "k"}) {
      const std::string label = std::string(name) + (role[0] == 'w' ? " (rotated)" : "");
      const bool kv = name[0] == 'k' && grouped(z);
      if (z.mode == ParallelMode::ulysses) {
        v.push_back(tensor(label + " by sequence", role,
                           Shape{z.s, z.b, kv ? z.config.kv_heads_count() : z.a, z.d},
                           Placement::shard(0), {"s", "b", kv ? "g" : "a", "d"}));
      } else {
        v.push_back(kv ? kv_tensor(z, label.c_str(), role)
                       : heads_tensor(z, label.c_str(), role, false));
      }
    }
  }
  return v;
}

ModuleTensor heads_tensor(const Sizes& z, const char* name, const char* role, bool square) {
  if (square) {
    return tensor(name, role, Shape{z.b, z.a, z.s, z.s}, z.heads, {"b", "a", "s", "s"});
  }
  return tensor(name, role, Shape{z.b, z.a, z.s, z.d}, z.heads, {"b", "a", "s", "d"});
}

// attn.context: probs x v, then the heads merged back to [s, b, h]: a permute and a reshape
// (each rank keeps its heads: Shard(2)); Ulysses sends the context back to sequence shards with
// an all-to-all first.
std::vector<ModuleTensor> context(const Sizes& z) {
  std::vector<ModuleTensor> v{
      heads_tensor(z, "probs (dropped)", "reads", true),
      grouped(z) ? kv_tensor(z, "v", "reads") : heads_tensor(z, "v", "reads", false),
      heads_tensor(z, "context", "writes", false)};
  if (grouped(z)) {
    v.push_back(group_tensor(z, "probs by group", true));
    v.push_back(group_tensor(z, "context by group", false));
  }
  const Shape by_position{z.s, z.b, z.a, z.d};
  const Dims dims{"s", "b", "a", "d"};
  if (z.mode == ParallelMode::ulysses) {
    v.push_back(tensor("context by head", "writes", by_position, Placement::shard(2), dims));
    v.push_back(tensor("context by sequence", "writes", by_position, Placement::shard(0), dims));
  } else {
    v.push_back(
        intermediate("context by position", by_position, shard_if(z.heads.is_shard(), 2), dims));
  }
  const Placement merged = z.weights_sharded ? Placement::shard(2) : z.act;
  v.push_back(tensor("context (merged)", "writes", Shape{z.s, z.b, z.h}, merged, {"s", "b", "h"}));
  return v;
}

// grad_reduce: the gradients of replicated parameters that each rank computed on its sequence
// shard are partial sums; one all-reduce each makes them whole (in place, so listed once, as
// the Partial the reduction reads). tp computes them on the full sequence: nothing to reduce.
std::vector<ModuleTensor> grad_reduce(const Sizes& z) {
  std::vector<ModuleTensor> v;
  if (z.mode != ParallelMode::tp_sp && z.mode != ParallelMode::ulysses) return v;
  for (const decl::Param& p : decl::parameters(z.config)) {
    ModuleTensor w = param(z, p.name);
    if (w.placement.is_shard()) continue;
    w.name = std::string("grad ") + p.decl->symbol;
    w.placement = Placement::partial();
    v.push_back(std::move(w));
  }
  return v;
}

// Under recomputation (LayerConfig::recompute), the checkpoint op that runs the recomputed
// modules and keeps only their inputs: attn.core (selective) reads Q, K and V and writes the
// context; the layer's (full) reads the layer's input and writes its output.
std::vector<ModuleTensor> checkpoint(const Sizes& z) {
  if (z.config.recompute == Recompute::full) {
    return {act(z, "x (layer input)", "reads"), act(z, "y (layer output)", "writes")};
  }
  return {heads_tensor(z, "q", "reads", false),
          grouped(z) ? kv_tensor(z, "k", "reads") : heads_tensor(z, "k", "reads", false),
          grouped(z) ? kv_tensor(z, "v", "reads") : heads_tensor(z, "v", "reads", false),
          heads_tensor(z, "context", "writes", false)};
}

std::vector<ModuleTensor> tensors_of(const Sizes& z, const std::string& scope) {
  const decl::Modules& m = decl::layer(z.config);
  if (m.recompute && scope == m.recompute->scope) return checkpoint(z);
  if (scope == m.ln1.scope) return norm(z, m.ln1, "x (layer input)");
  if (scope == m.qkv.scope) return column_linear(z, m.qkv, "x (ln1 out)", "qkv");
  if (scope == m.heads.scope) return heads_split(z);
  if (m.rope && scope == m.rope->scope) return rotary(z);
  if (scope == m.scores.scope) {
    if (grouped(z)) {  // each group's queries stacked along the sequence: one product per group
      return {heads_tensor(z, "q", "reads", false), kv_tensor(z, "k", "reads"),
              group_tensor(z, "q by group", false), group_tensor(z, "scores by group", true),
              heads_tensor(z, "scores", "writes", true)};
    }
    return {heads_tensor(z, "q", "reads", false), heads_tensor(z, "k", "reads", false),
            heads_tensor(z, "scores", "writes", true)};
  }
  if (scope == m.softmax.scope) {
    return {heads_tensor(z, "scores", "reads", true), heads_tensor(z, "probs", "writes", true)};
  }
  if (scope == m.attn_dropout.scope) {
    return {heads_tensor(z, "probs", "reads", true),
            heads_tensor(z, "probs (dropped)", "writes", true)};
  }
  if (scope == m.context.scope) return context(z);
  if (scope == m.proj.scope) return row_linear(z, m.proj, "context (merged)", "attn out");
  if (scope == m.out_dropout.scope) {
    return {act(z, "attn out", "reads"), act(z, "attn out (dropped)", "writes")};
  }
  if (scope == m.residual1.scope) {
    return {act(z, "x (layer input)", "reads"), act(z, "attn out (dropped)", "reads"),
            act(z, "h1 (residual1 out)", "writes")};
  }
  if (scope == m.ln2.scope) return norm(z, m.ln2, "h1 (residual1 out)");
  if (scope == m.fc1.scope) return column_linear(z, m.fc1, "x (ln2 out)", "fc1 out");
  const std::string act_out = std::string(m.act.scope).substr(4) + " out";  // "gelu out"
  if (scope == m.act.scope) {
    return {mlp_tensor(z, "fc1 out", "reads", m.fc1.params.front().out),
            mlp_tensor(z, act_out, "writes", m.fc2.params.front().in)};
  }
  if (scope == m.fc2.scope) return row_linear(z, m.fc2, act_out, "mlp out");
  if (scope == m.mlp_dropout.scope) {
    return {act(z, "mlp out", "reads"), act(z, "mlp out (dropped)", "writes")};
  }
  if (scope == m.residual2.scope) {
    return {act(z, "h1 (residual1 out)", "reads"), act(z, "mlp out (dropped)", "reads"),
            act(z, "y (layer output)", "writes")};
  }
  if (scope == decl::kLossScope) {
    // Each rank sums (y - target)^2 over the rows it holds; sharded rows need an all-reduce.
    return {act(z, "y (layer output)", "reads"), act(z, "target", "reads"),
            tensor("sum of (y - target)^2", "writes", Shape{1},
                   z.act.is_shard() ? Placement::partial() : Placement::replicate(), {"1"})};
  }
  if (scope == decl::kGradReduceScope) return grad_reduce(z);
  std::string known;
  for (const std::string& k : module_scopes(z.config)) known += (known.empty() ? "" : ", ") + k;
  throw ArgumentError("module_layout: no module \"" + scope + "\" in a layer of norm " +
                      norm_name(z.config.norm) + ", mlp " + mlp_name(z.config.mlp) +
                      " (known: " + known + ")");
}

}  // namespace

std::vector<std::string> module_scopes(const LayerConfig& config) {
  std::vector<std::string> out;  // the declared modules, then the run's loss and reduction
  for (const decl::ModuleDecl& m : decl::modules(config)) out.emplace_back(m.scope);
  out.emplace_back(decl::kLossScope);
  out.emplace_back(decl::kGradReduceScope);
  return out;
}

bool has_module_layout(const std::string& scope) {
  const std::vector<std::string>& s = decl::known_scopes();
  return std::find(s.begin(), s.end(), scope) != s.end();
}

ModuleLayout module_layout(const LayerConfig& config, const std::string& scope) {
  return {scope, tensors_of(sizes_of(config), scope)};
}

Shape parse_shape_text(const std::string& text) {
  auto bad = [&]() {
    return ArgumentError("parse_shape_text: expected a shape like \"[4, 2, 32]\", given \"" + text +
                         "\"");
  };
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') throw bad();
  std::vector<std::int64_t> dims;
  std::size_t i = 1;
  const std::size_t end = text.size() - 1;
  while (i < end) {
    while (i < end && text[i] == ' ') ++i;
    if (i == end) break;
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) throw bad();
    std::int64_t v = 0;
    while (i < end && std::isdigit(static_cast<unsigned char>(text[i]))) {
      v = v * 10 + (text[i] - '0');
      ++i;
    }
    dims.push_back(v);
    while (i < end && text[i] == ' ') ++i;
    if (i < end && text[i] != ',') throw bad();
    if (i < end) ++i;
  }
  return Shape(std::move(dims));
}

Projection projection_of(const Shape& global, Placement placement) {
  Projection p;
  const int n = global.rank();
  if (n == 0) return p;
  p.col_dim = n - 1;
  p.cols = global[n - 1];
  if (n == 1) return p;
  const int d = placement.dim < 0 ? placement.dim + n : placement.dim;  // Shard(-1): the last
  p.row_dim = placement.is_shard() && d >= 0 && d < n - 1 ? d : 0;
  p.rows = global[p.row_dim];
  return p;
}

std::pair<std::int64_t, std::int64_t> slice_range(const Shape& global, Placement placement, int dim,
                                                  int rank, int t) {
  const std::int64_t n = global[dim];
  const int d = placement.dim < 0 ? placement.dim + global.rank() : placement.dim;
  if (!placement.is_shard() || d != dim || t <= 0) return {0, n};
  const std::int64_t piece = n / t;
  return {piece * rank, piece * (rank + 1)};
}

std::string group_digits(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace shardscope::viz
