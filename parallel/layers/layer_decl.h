// The Transformer layer declared once, as data: its modules in forward order, each with its scope,
// what it computes (its kind), its parameters (name, shape, initialisation, and how tensor
// parallelism splits them), and the activations it saves for backward (the terms of the memory
// model, with the formula each contributes). What other parts of shardscope know of the layer's
// structure they derive from this table: the parameter table of the single-device layer
// (transformer_layer.cpp), the placement of every parameter in each parallel mode
// (parallel_layer.cpp, the visualizer's layout), which gradients need a reduction, the activation
// model (models/memory_model.cpp) and the scopes a breakpoint or a layout can name.
// docs/architecture.md, "The layer's declaration", shows how to add a module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/shape.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"

namespace shardscope::decl {

// A width of the layer, resolved against a configuration (width()).
enum class Width : std::uint8_t {
  none,     // a vector parameter has no input width
  hidden,   // h
  qkv,      // the fused query, key and value columns: 3h (GPT's attention, g = a)
  kv,       // the key and value columns of g heads: 2 g d (grouped-query attention, g < a)
  kv_head,  // one of key or value: g d (= h when g = a)
  ffn,      // the MLP's inner width f (LayerConfig::ffn_width(), 4h unless set)
  gate_up,  // SwiGLU's fc1 output: the gate and up values, 2f
};
std::int64_t width(Width w, const LayerConfig& c);
// A width as a multiple of its unit: h, f for the MLP's widths, g d for the keys' and values'; in
// h where that unit is a whole multiple of h (GPT's f = 4h, g d = h when g = a), so f = 1.5h keeps
// 2f as "2f", not "3h". The memory model writes its sizes (sbh, sbf, sbgd) the same way.
struct WidthIn {
  std::int64_t k;    // how many units
  const char* unit;  // "h", "f" or "gd"
};
WidthIn width_in(Width w, const LayerConfig& c);
// "h", "3h", "4h", "8h", "f", "2f", "gd", "2gd" (width_in written out); "" for Width::none.
std::string width_name(Width w, const LayerConfig& c);

enum class Init : std::uint8_t {
  normal,  // Normal(0, 0.02), the GPT-2 / Megatron start of linear weights and biases
  one,     // a norm's weight
  zero,    // LayerNorm's bias
};

// How Megatron's tensor parallelism (tp, tp-sp) splits a parameter; the other modes replicate all.
enum class TpSplit : std::uint8_t {
  none,       // replicated (the norms, the bias added after a row-parallel reduction)
  columns,    // a column-parallel linear's output dim: weight Shard(1), bias Shard(0)
  rows,       // a row-parallel linear's input dim: weight Shard(0)
  kv_groups,  // the key/value columns of g heads: split as columns where t <= g (g/t whole heads
              // each), replicated where t > g (each rank uses the head its query heads need, and
              // its gradient is that head's part: a partial sum the ranks all-reduce)
};

struct ParamDecl {
  const char* name;    // within the module: "weight", "bias" (GQA's attn.qkv: "q_weight",
                       // "kv_weight", "q_bias", "kv_bias")
  const char* symbol;  // in the papers' and the visualizer's notation: "W_qkv", "b_qkv"
  Width in;            // none: a vector [out]; else a matrix [in, out] (weights are [in, out])
  Width out;
  Init init;
  TpSplit split;
};

// What a module computes; the single-device and parallel layers run each kind their own way.
enum class Kind : std::uint8_t {
  layernorm,
  rmsnorm,
  column_linear,  // tp: Shard(2) output from a replicated (tp-sp: gathered) input
  row_linear,     // tp: Shard(2) input, a Partial sum reduced (tp-sp: reduce-scattered)
  scores,         // q k^T / sqrt(d)
  softmax,        // causal softmax over the scores
  dropout,
  context,  // probs x v, the heads merged back to [s, b, h]
  heads,    // the fused qkv split into per-head q, k, v (Ulysses: an all-to-all each)
  rope,     // the rotary position embedding of q and k (saves nothing: its backward rotates back)
  gelu,
  swiglu,  // silu(gate) * up of fc1's interleaved gate and up columns
  residual,
  recompute,  // a checkpoint (LayerConfig::recompute): keeps the inputs of what backward
              // recomputes (attn.core: Q, K and V; layer: the layer's input)
};
bool is_norm(Kind kind);  // layernorm or rmsnorm

// How a saved activation is split across t ranks in each mode (models/memory_model.cpp):
enum class SavedSplit : std::uint8_t {
  block,     // an [s, b, h] activation between the blocks: whole under tp, s/t rows otherwise
  input,     // a column-parallel linear's input: whole under tp (and tp-sp keeping the gathered
             // input), s/t rows otherwise
  heads,     // inside attention: a/t query heads (or, for [s, b, h] ones, h/t columns) in every
             // mode
  kv_heads,  // a key or value [b, g, s, d]: g/t heads where t <= g, one of the g where t > g
             // (each rank holds the key/value head its query heads need)
  columns    // the MLP's inner activations: f/t columns under tp, s/t rows under Ulysses
};

// One part of a saved activation: `coeff` elements of `unit` (A: the activation dtype's size,
// M = 1: a byte mask) per element of the size, s b w (w the part's width: h, g d, f, 2f) or
// a s^2 b (as2b), split over the ranks by `split`.
struct SavedPart {
  double coeff;
  char unit;  // 'A' or 'M'
  bool as2b;  // the size is a s^2 b, else s b w
  Width width;
  SavedSplit split;
};

// One term of the activation model: what one op saves, the sum of its parts.
struct SavedDecl {
  const char* what;  // "LayerNorm 1 input"
  const char* op;    // the op that saves it, as the memory ledger names it ("layernorm"); empty:
                     // the module's column-parallel linear op (matmul, or gather_matmul in tp-sp)
  std::vector<SavedPart> parts;
  enum class When : std::uint8_t { always, with_dropout, without_dropout } when = When::always;
  // Whether the term is saved by a layer with (dropout) or without dropout.
  bool applies(bool dropout) const;
};

struct ModuleDecl {
  const char* scope;  // "attn.qkv": the ops of the module run in this scope
  Kind kind;
  std::vector<ParamDecl> params;
  std::vector<SavedDecl> saved;
  int dropout_site = -1;  // Kind::dropout: the Philox stream of its mask (DropoutSite)
  // A norm's statistics per normalised row, kept for backward beside the formula's terms
  // (LayerNorm: mean and rstd; RMSNorm: rstd).
  int row_statistics = 0;
};

// The declared modules by role, for the code that runs them: each refers into the declaration's
// modules. `act` is the MLP's activation: GeLU, or SwiGLU; `rope` is null without rotary
// embeddings; `recompute` the checkpoint module (attn.core or layer), null without
// recomputation.
struct Modules {
  const ModuleDecl &ln1, &qkv, &heads, &scores, &softmax, &attn_dropout, &context, &proj,
      &out_dropout, &residual1, &ln2, &fc1, &act, &fc2, &mlp_dropout, &residual2;
  const ModuleDecl* rope;
  const ModuleDecl* recompute;
};

// The declaration of one layer's structure: what the configuration's norm, mlp, bias and rope
// fields choose. Shapes are resolved against a whole configuration (parameters()).
struct LayerDecl {
  explicit LayerDecl(std::vector<ModuleDecl> declared);
  LayerDecl(const LayerDecl&) = delete;
  LayerDecl& operator=(const LayerDecl&) = delete;

  std::vector<ModuleDecl> modules;  // in forward order
  Modules roles;
};

// Whether attention's two products skip the blocks above the causal diagonal (causal_matmul)
// rather than run dense (matmul): under the causal mask, unless the planted bug
// causal-mask-local-positions replaces it with a dense additive mask.
bool causal_products(const LayerConfig& c);

// The declaration for `c` (made once per choice of norm, mlp, bias, rope, grouped key/value heads
// and recomputation; thread-safe).
const LayerDecl& declaration(const LayerConfig& c);
inline const std::vector<ModuleDecl>& modules(const LayerConfig& c) {
  return declaration(c).modules;
}
inline const Modules& layer(const LayerConfig& c) {
  return declaration(c).roles;
}

// Scopes of a run around the layer's modules: the loss, and the all-reduces that complete the
// partial gradients of replicated parameters.
inline constexpr const char* kLossScope = "loss";
inline constexpr const char* kGradReduceScope = "grad_reduce";

// The full name of a module's parameter: "attn.qkv.weight". Throws ArgumentError when the module
// declares no parameter of that name.
std::string param_name(const ModuleDecl& m, const char* name);
std::string weight(const ModuleDecl& m);  // param_name(m, "weight")
std::string bias(const ModuleDecl& m);    // param_name(m, "bias")
bool has_bias(const ModuleDecl& m);       // without biases (LayerConfig::bias) linears have none
// The module of `scope`; throws ArgumentError naming the declared scopes when there is none.
const ModuleDecl& module(const LayerConfig& c, const std::string& scope);
// The scopes a layer of any configuration can run ops in, in forward order (every module of
// every choice of norm and mlp), then the run's loss and gradient-reduction scopes.
const std::vector<std::string>& known_scopes();

// A parameter of the layer, resolved against a configuration.
struct Param {
  std::string name;  // "attn.qkv.weight": module scope + "." + parameter name
  const ModuleDecl* module;
  const ParamDecl* decl;
  Shape shape;
  std::vector<std::string> dims;  // {"h", "3h"}: the names of the shape's dims
};
// The name of the layer's parameter `name` in a stack of c.layers layers: "layers.<c.layer>." +
// name, as Megatron-LM and Hugging Face name a stack's parameters, or `name` alone in a stack of
// one (the names of dumps and reports of a single layer stay as they were).
std::string stack_name(const LayerConfig& c, const std::string& name);
// Every parameter of the layer, in module order (the order of LayerWeights and of dumps).
std::vector<Param> parameters(const LayerConfig& c);
// The parameter named `name` ("attn.qkv.weight"); throws ArgumentError naming the declared ones.
Param parameter(const LayerConfig& c, const std::string& name);
// How many modules of `kind` the layer of `c` declares.
int count(const LayerConfig& c, Kind kind);

// Where a rank's shard of the parameter comes from in c.mode on c.degree ranks: tp and tp-sp split
// it as its TpSplit says, every other mode replicates it.
Placement placement(const ParamDecl& p, const LayerConfig& c);
// Whether each rank's gradient of the parameter is a partial sum that an all-reduce completes:
// a replicated parameter applied to sequence-sharded activations (tp-sp, ulysses), or key/value
// weights replicated over more ranks than heads (tp, tp-sp at t > g).
bool partial_grad(const ParamDecl& p, const LayerConfig& c);
// The module's matrices (weights), or its vectors (biases), in declared order: attn.qkv's q and kv
// weights under GQA, else the one weight. The layers multiply by their concatenation.
std::vector<std::string> weights(const ModuleDecl& m);
std::vector<std::string> biases(const ModuleDecl& m);

}  // namespace shardscope::decl
