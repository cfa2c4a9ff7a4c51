// The declaration of the layer: the one table of its modules, parameters and saved activations.
#include "parallel/layers/layer_decl.h"

#include "autograd/errors.h"

namespace shardscope::decl {
namespace {

using When = SavedDecl::When;

// The parameters of a LayerNorm, a column-parallel and a row-parallel linear.
std::vector<ParamDecl> norm_params(const char* weight_symbol, const char* bias_symbol) {
  return {{"weight", weight_symbol, Width::none, Width::hidden, Init::one, TpSplit::none},
          {"bias", bias_symbol, Width::none, Width::hidden, Init::zero, TpSplit::none}};
}
std::vector<ParamDecl> column_params(const char* w, const char* b, Width in, Width out) {
  return {{"weight", w, in, out, Init::normal, TpSplit::columns},
          {"bias", b, Width::none, out, Init::normal, TpSplit::columns}};
}
std::vector<ParamDecl> row_params(const char* w, const char* b, Width in, Width out) {
  // The bias is added once, after the partial sums are reduced: replicated.
  return {{"weight", w, in, out, Init::normal, TpSplit::rows},
          {"bias", b, Width::none, out, Init::normal, TpSplit::none}};
}

// Saved-activation terms: A sbh-sized and M (mask) terms.
SavedDecl act(const char* what, const char* op, double a_sbh, SavedSplit split) {
  return {what, op, a_sbh, 0, 0, 0, split, When::always};
}

std::vector<ModuleDecl> declare() {
  // Scopes name where each module's ops run; their order is the forward's. Ops of no module
  // (there are none inside the layer) would run in the layer's own scope.
  return {
      {"ln1",
       Kind::layernorm,
       norm_params("ln1 weight", "ln1 bias"),
       {act("LayerNorm 1 input", "layernorm", 1, SavedSplit::block)}},
      {"attn.qkv",
       Kind::column_linear,
       column_params("W_qkv", "b_qkv", Width::hidden, Width::qkv),
       {act("QKV linear input", "", 1, SavedSplit::input)}},
      {"attn.heads", Kind::heads, {}, {}},
      {"attn.scores", Kind::scores, {}, {act("QK^T: Q and K", "matmul", 2, SavedSplit::heads)}},
      {"attn.softmax",
       Kind::softmax,
       {},
       {{"softmax output", "softmax", 0, 0, 1, 0, SavedSplit::heads, When::always}}},
      {"attn.dropout",
       Kind::dropout,
       {},
       {{"attention dropout mask", "dropout", 0, 0, 0, 1, SavedSplit::heads, When::with_dropout}},
       0},
      {"attn.context",
       Kind::context,
       {},
       {{"probs x V: dropout output and V", "matmul", 1, 0, 1, 0, SavedSplit::heads,
         When::with_dropout},
        {"probs x V: V (probs are the softmax output)", "matmul", 1, 0, 0, 0, SavedSplit::heads,
         When::without_dropout}}},
      {"attn.proj",
       Kind::row_linear,
       row_params("W_proj", "b_proj", Width::hidden, Width::hidden),
       {act("output linear input", "matmul", 1, SavedSplit::heads)}},
      {"attn.out_dropout",
       Kind::dropout,
       {},
       {{"attention output dropout mask", "dropout", 0, 1, 0, 0, SavedSplit::block,
         When::with_dropout}},
       1},
      {"residual1", Kind::residual, {}, {}},
      {"ln2",
       Kind::layernorm,
       norm_params("ln2 weight", "ln2 bias"),
       {act("LayerNorm 2 input", "layernorm", 1, SavedSplit::block)}},
      {"mlp.fc1",
       Kind::column_linear,
       column_params("W_fc1", "b_fc1", Width::hidden, Width::ffn),
       {act("fc1 input", "", 1, SavedSplit::input)}},
      {"mlp.gelu", Kind::gelu, {}, {act("GeLU input", "gelu", 4, SavedSplit::columns)}},
      {"mlp.fc2",
       Kind::row_linear,
       row_params("W_fc2", "b_fc2", Width::ffn, Width::hidden),
       {act("fc2 input", "matmul", 4, SavedSplit::columns)}},
      {"mlp.dropout",
       Kind::dropout,
       {},
       {{"MLP dropout mask", "dropout", 0, 1, 0, 0, SavedSplit::block, When::with_dropout}},
       2},
      {"residual2", Kind::residual, {}, {}},
  };
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

std::string declared_scopes() {
  std::vector<std::string> scopes;
  for (const ModuleDecl& m : modules()) scopes.emplace_back(m.scope);
  return joined(scopes);
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
    case Width::ffn:
      return 4 * c.hidden;
  }
  return 0;
}

const char* width_name(Width w) {
  switch (w) {
    case Width::none:
      return "";
    case Width::hidden:
      return "h";
    case Width::qkv:
      return "3h";
    case Width::ffn:
      return "4h";
  }
  return "?";
}

const std::vector<ModuleDecl>& modules() {
  static const std::vector<ModuleDecl> declared = declare();
  return declared;
}

const ModuleDecl& module(const std::string& scope) {
  for (const ModuleDecl& m : modules()) {
    if (scope == m.scope) return m;
  }
  throw ArgumentError("layer declaration: no module \"" + scope +
                      "\" (declared: " + declared_scopes() + ")");
}

const Modules& layer() {
  static const Modules roles{
      module("ln1"),          module("attn.qkv"),     module("attn.heads"),
      module("attn.scores"),  module("attn.softmax"), module("attn.dropout"),
      module("attn.context"), module("attn.proj"),    module("attn.out_dropout"),
      module("residual1"),    module("ln2"),          module("mlp.fc1"),
      module("mlp.gelu"),     module("mlp.fc2"),      module("mlp.dropout"),
      module("residual2")};
  return roles;
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

std::vector<Param> parameters(const LayerConfig& c) {
  std::vector<Param> out;
  for (const ModuleDecl& m : modules()) {
    for (const ParamDecl& p : m.params) {
      Param r;
      r.name = full_name(m, p);
      r.module = &m;
      r.decl = &p;
      if (p.in == Width::none) {
        r.shape = Shape{width(p.out, c)};
        r.dims = {width_name(p.out)};
      } else {
        r.shape = Shape{width(p.in, c), width(p.out, c)};
        r.dims = {width_name(p.in), width_name(p.out)};
      }
      out.push_back(std::move(r));
    }
  }
  return out;
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

int count(Kind kind) {
  int n = 0;
  for (const ModuleDecl& m : modules()) n += m.kind == kind;
  return n;
}

bool SavedDecl::applies(bool dropout) const {
  return when == When::always || (when == When::with_dropout) == dropout;
}

Placement placement(const ParamDecl& p, ParallelMode mode) {
  if (mode != ParallelMode::tp && mode != ParallelMode::tp_sp) return Placement::replicate();
  switch (p.split) {
    case TpSplit::none:
      return Placement::replicate();
    case TpSplit::columns:  // the last dim: a weight's columns, a bias's elements
      return Placement::shard(p.in == Width::none ? 0 : 1);
    case TpSplit::rows:
      return Placement::shard(0);
  }
  return Placement::replicate();
}

bool partial_grad(const ParamDecl& p, ParallelMode mode) {
  return (mode == ParallelMode::tp_sp || mode == ParallelMode::ulysses) &&
         !placement(p, mode).is_shard();
}

}  // namespace shardscope::decl
