// The declaration of the layer: the one table of its modules, parameters and saved activations.
#include "parallel/layers/layer_decl.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "autograd/errors.h"

namespace shardscope::decl {
namespace {

using When = SavedDecl::When;

// The parameters of a norm, a column-parallel and a row-parallel linear; `bias`: the linears
// have biases (LayerConfig::bias).
std::vector<ParamDecl> norm_params(const LayerConfig& c, const char* weight_symbol,
                                   const char* bias_symbol) {
  std::vector<ParamDecl> p{
      {"weight", weight_symbol, Width::none, Width::hidden, Init::one, TpSplit::none}};
  if (c.norm == Norm::layernorm) {
    p.push_back({"bias", bias_symbol, Width::none, Width::hidden, Init::zero, TpSplit::none});
  }
  return p;
}
std::vector<ParamDecl> column_params(const LayerConfig& c, const char* w, const char* b, Width in,
                                     Width out) {
  std::vector<ParamDecl> p{{"weight", w, in, out, Init::normal, TpSplit::columns}};
  if (c.bias) p.push_back({"bias", b, Width::none, out, Init::normal, TpSplit::columns});
  return p;
}
std::vector<ParamDecl> row_params(const LayerConfig& c, const char* w, const char* b, Width in,
                                  Width out) {
  // The bias is added once, after the partial sums are reduced: replicated.
  std::vector<ParamDecl> p{{"weight", w, in, out, Init::normal, TpSplit::rows}};
  if (c.bias) p.push_back({"bias", b, Width::none, out, Init::normal, TpSplit::none});
  return p;
}

// Saved-activation parts and terms.
SavedPart a_sb(double coeff, Width width, SavedSplit split) {  // coeff A s b w
  return {coeff, 'A', false, width, split};
}
SavedPart m_sb(Width width, SavedSplit split) {  // M s b w: a mask
  return {1, 'M', false, width, split};
}
SavedPart a_as2b(SavedSplit split) {  // A a s^2 b
  return {1, 'A', true, Width::none, split};
}
SavedPart m_as2b(SavedSplit split) {  // M a s^2 b
  return {1, 'M', true, Width::none, split};
}
SavedDecl term(const char* what, const char* op, std::vector<SavedPart> parts,
               When when = When::always) {
  return {what, op, std::move(parts), when};
}
SavedDecl act(const char* what, const char* op, double coeff, SavedSplit split,
              Width width = Width::hidden) {
  return term(what, op, {a_sb(coeff, width, split)});
}

// The attention's input projection: GPT's fused QKV [h, 3h] (columns grouped by head, q, k, v of
// each head side by side), or under grouped-query attention (g < a) the query weight [h, h] and
// the key/value weight [h, 2 g d] (grouped by key/value head, its k and v side by side), which
// tensor parallelism splits differently when t > g. The layers multiply by the concatenation.
std::vector<ParamDecl> qkv_params(const LayerConfig& c) {
  if (c.kv_heads_count() == c.heads)
    return column_params(c, "W_qkv", "b_qkv", Width::hidden, Width::qkv);
  std::vector<ParamDecl> p{
      {"q_weight", "W_q", Width::hidden, Width::hidden, Init::normal, TpSplit::columns}};
  if (c.bias)
    p.push_back({"q_bias", "b_q", Width::none, Width::hidden, Init::normal, TpSplit::columns});
  p.push_back({"kv_weight", "W_kv", Width::hidden, Width::kv, Init::normal, TpSplit::kv_groups});
  if (c.bias)
    p.push_back({"kv_bias", "b_kv", Width::none, Width::kv, Init::normal, TpSplit::kv_groups});
  return p;
}

// A norm module: LayerNorm or RMSNorm, saving its input and its per-row statistics.
ModuleDecl norm(const LayerConfig& c, const char* scope, const char* ln_what, const char* rms_what,
                const char* weight, const char* bias) {
  const bool ln = c.norm == Norm::layernorm;
  return {scope,
          ln ? Kind::layernorm : Kind::rmsnorm,
          norm_params(c, weight, bias),
          {act(ln ? ln_what : rms_what, ln ? "layernorm" : "rmsnorm", 1, SavedSplit::block)},
          -1,
          ln ? 2 : 1};
}

// The MLP's activation: GeLU of fc1's f columns, or SwiGLU of its 2f gate and up columns.
ModuleDecl mlp_activation(const LayerConfig& c) {
  if (c.mlp == Mlp::swiglu) {
    return {"mlp.swiglu",
            Kind::swiglu,
            {},
            {act("SwiGLU input (gate and up)", "swiglu", 1, SavedSplit::columns, Width::gate_up)}};
  }
  return {
      "mlp.gelu", Kind::gelu, {}, {act("GeLU input", "gelu", 1, SavedSplit::columns, Width::ffn)}};
}

// What recomputation (LayerConfig::recompute) leaves saved: the recomputed modules save nothing
// in the forward (only in backward, while they are recomputed), and a checkpoint module keeps
// their inputs. Selective: attn.core, before attn.scores, keeps Q, K and V (the parts attn.scores
// and attn.context would keep of them); the a s^2 b terms are gone. Full: the module "layer",
// first, keeps the layer's input, and nothing else is kept, the norms' statistics neither.
std::vector<ModuleDecl> recomputed(const LayerConfig& c, std::vector<ModuleDecl> modules) {
  auto module_at = [&](const char* scope) {
    return std::find_if(modules.begin(), modules.end(),
                        [&](const ModuleDecl& m) { return std::string(m.scope) == scope; });
  };
  if (c.recompute == Recompute::selective) {
    for (const char* scope : {"attn.scores", "attn.softmax", "attn.dropout", "attn.context"}) {
      module_at(scope)->saved.clear();
    }
    const SavedDecl inputs = term(
        "attention core inputs: Q, K and V", "checkpoint",
        {a_sb(1, Width::hidden, SavedSplit::heads), a_sb(2, Width::kv_head, SavedSplit::kv_heads)});
    modules.insert(module_at("attn.scores"),
                   ModuleDecl{"attn.core", Kind::recompute, {}, {inputs}});
  } else if (c.recompute == Recompute::full) {
    for (ModuleDecl& m : modules) {
      m.saved.clear();
      m.row_statistics = 0;
    }
    modules.insert(modules.begin(),
                   ModuleDecl{"layer",
                              Kind::recompute,
                              {},
                              {act("layer input", "checkpoint", 1, SavedSplit::block)}});
  }
  return modules;
}

std::vector<ModuleDecl> declare(const LayerConfig& c) {
  // Scopes name where each module's ops run; their order is the forward's. Ops of no module
  // (there are none inside the layer) would run in the layer's own scope.
  const Width fc1_out = c.mlp == Mlp::swiglu ? Width::gate_up : Width::ffn;
  const char* product = causal_products(c) ? "causal_matmul" : "matmul";
  std::vector<ModuleDecl> modules{
      norm(c, "ln1", "LayerNorm 1 input", "RMSNorm 1 input", "ln1 weight", "ln1 bias"),
      {"attn.qkv",
       Kind::column_linear,
       qkv_params(c),
       {act("QKV linear input", "", 1, SavedSplit::input)}},
      {"attn.heads", Kind::heads, {}, {}},
      {"attn.scores",
       Kind::scores,
       {},
       {term("QK^T: Q and K", product,
             {a_sb(1, Width::hidden, SavedSplit::heads),
              a_sb(1, Width::kv_head, SavedSplit::kv_heads)})}},
      {"attn.softmax",
       Kind::softmax,
       {},
       {term("softmax output", "softmax", {a_as2b(SavedSplit::heads)})}},
      {"attn.dropout",
       Kind::dropout,
       {},
       {term("attention dropout mask", "dropout", {m_as2b(SavedSplit::heads)}, When::with_dropout)},
       0},
      {"attn.context",
       Kind::context,
       {},
       {term("probs x V: dropout output and V", product,
             {a_as2b(SavedSplit::heads), a_sb(1, Width::kv_head, SavedSplit::kv_heads)},
             When::with_dropout),
        term("probs x V: V (probs are the softmax output)", product,
             {a_sb(1, Width::kv_head, SavedSplit::kv_heads)}, When::without_dropout)}},
      {"attn.proj",
       Kind::row_linear,
       row_params(c, "W_proj", "b_proj", Width::hidden, Width::hidden),
       {act("output linear input", "matmul", 1, SavedSplit::heads)}},
      {"attn.out_dropout",
       Kind::dropout,
       {},
       {term("attention output dropout mask", "dropout", {m_sb(Width::hidden, SavedSplit::block)},
             When::with_dropout)},
       1},
      {"residual1", Kind::residual, {}, {}},
      norm(c, "ln2", "LayerNorm 2 input", "RMSNorm 2 input", "ln2 weight", "ln2 bias"),
      {"mlp.fc1",
       Kind::column_linear,
       column_params(c, "W_fc1", "b_fc1", Width::hidden, fc1_out),
       {act("fc1 input", "", 1, SavedSplit::input)}},
      mlp_activation(c),
      {"mlp.fc2",
       Kind::row_linear,
       row_params(c, "W_fc2", "b_fc2", Width::ffn, Width::hidden),
       {act("fc2 input", "matmul", 1, SavedSplit::columns, Width::ffn)}},
      {"mlp.dropout",
       Kind::dropout,
       {},
       {term("MLP dropout mask", "dropout", {m_sb(Width::hidden, SavedSplit::block)},
             When::with_dropout)},
       2},
      {"residual2", Kind::residual, {}, {}},
  };
  if (c.rope) {  // after the heads are split: q and k rotated where they stand
    const auto heads = std::find_if(modules.begin(), modules.end(),
                                    [](const ModuleDecl& m) { return m.kind == Kind::heads; });
    modules.insert(heads + 1, ModuleDecl{"attn.rope", Kind::rope, {}, {}});
  }
  return recomputed(c, std::move(modules));
}

const ModuleDecl& find_module(const std::vector<ModuleDecl>& modules, const std::string& scope);

// The roles, by scope: the MLP's activation is whichever of GeLU and SwiGLU was declared.
Modules roles_of(const std::vector<ModuleDecl>& d) {
  auto m = [&](const char* scope) -> const ModuleDecl& { return find_module(d, scope); };
  const auto act = std::find_if(d.begin(), d.end(), [](const ModuleDecl& x) {
    return x.kind == Kind::gelu || x.kind == Kind::swiglu;
  });
  if (act == d.end()) throw StateError("layer declaration: no MLP activation (GeLU or SwiGLU)");
  const auto rope =
      std::find_if(d.begin(), d.end(), [](const ModuleDecl& x) { return x.kind == Kind::rope; });
  const auto recompute = std::find_if(
      d.begin(), d.end(), [](const ModuleDecl& x) { return x.kind == Kind::recompute; });
  return {m("ln1"),
          m("attn.qkv"),
          m("attn.heads"),
          m("attn.scores"),
          m("attn.softmax"),
          m("attn.dropout"),
          m("attn.context"),
          m("attn.proj"),
          m("attn.out_dropout"),
          m("residual1"),
          m("ln2"),
          m("mlp.fc1"),
          *act,
          m("mlp.fc2"),
          m("mlp.dropout"),
          m("residual2"),
          rope == d.end() ? nullptr : &*rope,
          recompute == d.end() ? nullptr : &*recompute};
}

const ParamDecl* find_param(const ModuleDecl& m, const char* name) {
  for (const ParamDecl& p : m.params) {
    if (std::string(p.name) == name) return &p;
  }
  return nullptr;
}

// "a, b, c" for the error messages that list what is declared; "none" for nothing.
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

const ModuleDecl& find_module(const std::vector<ModuleDecl>& modules, const std::string& scope) {
  for (const ModuleDecl& m : modules) {
    if (scope == m.scope) return m;
  }
  std::vector<std::string> scopes;
  for (const ModuleDecl& m : modules) scopes.emplace_back(m.scope);
  throw ArgumentError("layer declaration: no module \"" + scope +
                      "\" (declared: " + joined(scopes) + ")");
}

std::string full_name(const ModuleDecl& m, const ParamDecl& p) {
  return std::string(m.scope) + "." + p.name;
}

}  // namespace

std::int64_t width(Width w, const LayerConfig& c) {
  switch (w) {
    case Width::none:
      return 0;
    case Width::hidden:
      return c.hidden;
    case Width::qkv:
      return 3 * c.hidden;
    case Width::kv:
      return 2 * c.kv_heads_count() * c.head_dim();
    case Width::kv_head:
      return c.kv_heads_count() * c.head_dim();
    case Width::ffn:
      return c.ffn_width();
    case Width::gate_up:
      return 2 * c.ffn_width();
  }
  return 0;
}

WidthIn width_in(Width w, const LayerConfig& c) {
  const bool kv = w == Width::kv || w == Width::kv_head;
  const bool mlp = w == Width::ffn || w == Width::gate_up;
  const std::int64_t unit = kv ? c.kv_heads_count() * c.head_dim() : mlp ? c.ffn_width() : c.hidden;
  if (unit % c.hidden == 0) return {width(w, c) / c.hidden, "h"};
  return {width(w, c) / unit, kv ? "gd" : "f"};
}

std::string width_name(Width w, const LayerConfig& c) {
  if (w == Width::none) return "";
  const WidthIn in = width_in(w, c);
  return (in.k == 1 ? "" : std::to_string(in.k)) + in.unit;
}

bool is_norm(Kind kind) {
  return kind == Kind::layernorm || kind == Kind::rmsnorm;
}

LayerDecl::LayerDecl(std::vector<ModuleDecl> declared)
    : modules(std::move(declared)), roles(roles_of(modules)) {}

bool causal_products(const LayerConfig& c) {
  return c.causal && c.planted_bug != PlantedBug::causal_mask_local_positions;
}

const LayerDecl& declaration(const LayerConfig& c) {
  // One declaration per choice of the fields that shape it; ranks (threads) share them.
  static std::mutex mutex;
  static std::map<std::tuple<Norm, Mlp, bool, bool, bool, Recompute, bool>,
                  std::unique_ptr<LayerDecl>>
      made;
  const std::lock_guard<std::mutex> lock(mutex);
  const bool grouped = c.kv_heads_count() != c.heads;
  std::unique_ptr<LayerDecl>& d =
      made[{c.norm, c.mlp, c.bias, c.rope, grouped, c.recompute, causal_products(c)}];
  if (!d) d = std::make_unique<LayerDecl>(declare(c));
  return *d;
}

const ModuleDecl& module(const LayerConfig& c, const std::string& scope) {
  return find_module(modules(c), scope);
}

const std::vector<std::string>& known_scopes() {
  static const std::vector<std::string> scopes = [] {
    std::vector<std::string> out;
    for (const Recompute recompute : {Recompute::full, Recompute::selective}) {
      for (const Mlp mlp : {Mlp::gelu, Mlp::swiglu}) {
        LayerConfig c;
        c.mlp = mlp;
        c.rope = true;
        c.recompute = recompute;
        for (const ModuleDecl& m : modules(c)) {
          if (std::find(out.begin(), out.end(), m.scope) == out.end()) out.emplace_back(m.scope);
        }
      }
    }
    out.emplace_back(kLossScope);
    out.emplace_back(kGradReduceScope);
    return out;
  }();
  return scopes;
}

std::string param_name(const ModuleDecl& m, const char* name) {
  const ParamDecl* p = find_param(m, name);
  if (!p) {
    std::vector<std::string> declared;
    for (const ParamDecl& d : m.params) declared.emplace_back(d.name);
    throw ArgumentError(std::string("layer declaration: module ") + m.scope + " has no parameter " +
                        name + " (declared: " + joined(declared) + ")");
  }
  return full_name(m, *p);
}

std::string weight(const ModuleDecl& m) {
  return param_name(m, "weight");
}
std::string bias(const ModuleDecl& m) {
  return param_name(m, "bias");
}
bool has_bias(const ModuleDecl& m) {
  return find_param(m, "bias") != nullptr;
}

std::vector<Param> parameters(const LayerConfig& c) {
  std::vector<Param> out;
  for (const ModuleDecl& m : modules(c)) {
    for (const ParamDecl& p : m.params) {
      Param r;
      r.name = full_name(m, p);
      r.module = &m;
      r.decl = &p;
      if (p.in == Width::none) {
        r.shape = Shape{width(p.out, c)};
        r.dims = {width_name(p.out, c)};
      } else {
        r.shape = Shape{width(p.in, c), width(p.out, c)};
        r.dims = {width_name(p.in, c), width_name(p.out, c)};
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::string stack_name(const LayerConfig& c, const std::string& name) {
  return c.layers > 1 ? "layers." + std::to_string(c.layer) + "." + name : name;
}

Param parameter(const LayerConfig& c, const std::string& name) {
  std::vector<std::string> declared;
  for (Param& p : parameters(c)) {
    if (p.name == name) return p;
    declared.push_back(p.name);
  }
  throw ArgumentError("layer declaration: no parameter \"" + name +
                      "\" (declared: " + joined(declared) + ")");
}

int count(const LayerConfig& c, Kind kind) {
  int n = 0;
  for (const ModuleDecl& m : modules(c)) n += m.kind == kind;
  return n;
}

bool SavedDecl::applies(bool dropout) const {
  return when == When::always || (when == When::with_dropout) == dropout;
}

Placement placement(const ParamDecl& p, const LayerConfig& c) {
  if (c.mode != ParallelMode::tp && c.mode != ParallelMode::tp_sp) return Placement::replicate();
  const int last = p.in == Width::none ? 0 : 1;  // a weight's columns, a bias's elements
  switch (p.split) {
    case TpSplit::none:
      return Placement::replicate();
    case TpSplit::columns:
      return Placement::shard(last);
    case TpSplit::rows:
      return Placement::shard(0);
    case TpSplit::kv_groups:
      return c.degree <= c.kv_heads_count() ? Placement::shard(last) : Placement::replicate();
  }
  return Placement::replicate();
}

bool partial_grad(const ParamDecl& p, const LayerConfig& c) {
  if (placement(p, c).is_shard() || c.mode == ParallelMode::single) return false;
  // Replicated: the ranks' gradients are partial sums over their sequence shards (tp-sp,
  // ulysses), or over their query heads' use of shared key/value heads (t > g).
  return c.mode == ParallelMode::tp_sp || c.mode == ParallelMode::ulysses ||
         p.split == TpSplit::kv_groups;
}

std::vector<std::string> weights(const ModuleDecl& m) {
  std::vector<std::string> out;
  for (const ParamDecl& p : m.params) {
    if (p.in != Width::none) out.push_back(full_name(m, p));
  }
  return out;
}

std::vector<std::string> biases(const ModuleDecl& m) {
  std::vector<std::string> out;
  for (const ParamDecl& p : m.params) {
    if (p.in == Width::none) out.push_back(full_name(m, p));
  }
  return out;
}

}  // namespace shardscope::decl
