// The single-device Transformer layer.
#include "parallel/layers/transformer_layer.h"

#include <algorithm>
#include <cmath>

#include "autograd/checkpoint.h"
#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/layer_decl.h"
#include "parallel/layers/parallel_linear.h"

namespace shardscope {

namespace {

// LayerWeights' members, in the order of the parameters of the two fullest declarations merged
// (LayerNorms and biases, with GPT's fused QKV and with grouped-query attention's q and kv
// weights): a configuration declares some of them, in this order; the members it does not
// declare stay undefined. The names, shapes and initialisation come from the declaration; this
// only says which member holds each.
constexpr Tensor LayerWeights::*kMembers[] = {
    &LayerWeights::ln1_weight, &LayerWeights::ln1_bias,   &LayerWeights::q_weight,
    &LayerWeights::q_bias,     &LayerWeights::kv_weight,  &LayerWeights::kv_bias,
    &LayerWeights::qkv_weight, &LayerWeights::qkv_bias,   &LayerWeights::proj_weight,
    &LayerWeights::proj_bias,  &LayerWeights::ln2_weight, &LayerWeights::ln2_bias,
    &LayerWeights::fc1_weight, &LayerWeights::fc1_bias,   &LayerWeights::fc2_weight,
    &LayerWeights::fc2_bias,
};
constexpr std::size_t kMemberCount = sizeof(kMembers) / sizeof(kMembers[0]);

struct MemberNames {
  std::vector<std::string> names;       // kMembers[i] holds the parameter names[i]
  std::vector<std::uint64_t> seed_key;  // its random stream: GPT's parameters keep their index in
                                        // GPT's list, the grouped ones follow
};

// The two declarations' parameter names merged: GPT's, with grouped-query attention's own ones
// inserted where that declaration has them.
const MemberNames& member_names() {
  static const MemberNames names = [] {
    std::vector<std::string> gpt, gqa;
    for (const decl::Param& p : decl::parameters(LayerConfig())) gpt.push_back(p.name);
    LayerConfig grouped;
    grouped.kv_heads = 1;
    for (const decl::Param& p : decl::parameters(grouped)) gqa.push_back(p.name);
    MemberNames out;
    out.names = gpt;
    for (std::size_t i = 0; i < gpt.size(); ++i) out.seed_key.push_back(i);
    std::uint64_t next = gpt.size();
    std::size_t at = 0;  // where the next name of gqa goes: after the last one placed
    for (const std::string& n : gqa) {
      const auto found = std::find(out.names.begin(), out.names.end(), n);
      if (found != out.names.end()) {
        at = static_cast<std::size_t>(found - out.names.begin()) + 1;
        continue;
      }
      out.names.insert(out.names.begin() + static_cast<std::ptrdiff_t>(at), n);
      out.seed_key.insert(out.seed_key.begin() + static_cast<std::ptrdiff_t>(at), next++);
      ++at;
    }
    if (out.names.size() != kMemberCount) {
      throw StateError("LayerWeights has " + std::to_string(kMemberCount) +
                       " members, the layer declarations " + std::to_string(out.names.size()) +
                       " parameters");
    }
    return out;
  }();
  return names;
}

// The declared parameters of `c` with the member of each.
struct Slot {
  decl::Param param;
  Tensor LayerWeights::*member;
  std::size_t index;       // of the member
  std::uint64_t seed_key;  // keys the parameter's random stream
};
std::vector<Slot> slots(const LayerConfig& c) {
  const std::vector<std::string>& names = member_names().names;
  std::vector<Slot> out;
  for (decl::Param& p : decl::parameters(c)) {
    const auto at = std::find(names.begin(), names.end(), p.name);
    if (at == names.end()) {
      throw StateError("LayerWeights has no member for the declared parameter " + p.name);
    }
    const auto i = static_cast<std::size_t>(at - names.begin());
    out.push_back({std::move(p), kMembers[i], i, member_names().seed_key[i]});
  }
  return out;
}

// Every weight defined, of its shape and dtype, and in the context of the first one.
void check_weights(const LayerConfig& c, const LayerWeights& w) {
  const Context* ctx = nullptr;
  std::string first;
  const std::vector<Slot> declared = slots(c);
  for (std::size_t i = 0; i < kMemberCount; ++i) {  // none the configuration does not declare
    const bool is_declared = std::any_of(declared.begin(), declared.end(),
                                         [&](const Slot& slot) { return slot.index == i; });
    if (!is_declared && (w.*kMembers[i]).defined()) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) +
                          "): " + member_names().names[i] + " is given, but a layer of " +
                          c.shape_text() + " has no such parameter");
    }
  }
  for (const Slot& slot : declared) {
    const Tensor& t = w.*slot.member;
    const Shape& expected = slot.param.shape;
    if (!t.defined() || t.shape() != expected || t.dtype() != c.dtype) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) +
                          "): " + slot.param.name + " must be " + dtype_name(c.dtype) +
                          expected.str() + ", given " + t.describe());
    }
    if (!ctx) {
      ctx = &t.ctx();
      first = slot.param.name;
    }
    if (&t.ctx() != ctx) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) +
                          "): " + slot.param.name + " belongs to rank " +
                          std::to_string(t.ctx().rank()) + "'s context, " + first + " to rank " +
                          std::to_string(ctx->rank()) + "'s");
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> LayerWeights::named() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t i = 0; i < kMemberCount; ++i) {
    if ((this->*kMembers[i]).defined())
      out.emplace_back(member_names().names[i], this->*kMembers[i]);
  }
  return out;
}

const Tensor& LayerWeights::at(const std::string& name) const {
  const std::vector<std::string>& names = member_names().names;
  const auto i = std::find(names.begin(), names.end(), name);
  if (i == names.end() || !(this->*kMembers[i - names.begin()]).defined()) {
    throw ArgumentError("LayerWeights: no parameter " + name);
  }
  return this->*kMembers[i - names.begin()];
}

std::vector<Tensor> LayerWeights::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named()) out.push_back(tensor);
  return out;
}

LayerWeights copy_weights(const LayerWeights& from, Context& ctx) {
  LayerWeights w;
  for (std::size_t i = 0; i < kMemberCount; ++i) {
    const Tensor& t = from.*kMembers[i];
    if (t.defined()) w.*kMembers[i] = Tensor::parameter(t.copy_to(ctx), t.name());
  }
  return w;
}

LayerWeights make_layer_weights(Context& ctx, const LayerConfig& c) {
  c.validate();
  LayerWeights w;
  const std::uint64_t first = kSeedWeights + 64 * static_cast<std::uint64_t>(c.layer);
  for (const Slot& slot : slots(c)) {
    const Shape& shape = slot.param.shape;
    const std::uint64_t key = kernels::derive_seed(c.seed, first + slot.seed_key);
    const decl::Init init = slot.param.decl->init;
    Tensor values = init == decl::Init::normal
                        ? Tensor::randn(ctx, shape, key, 0.02, c.dtype)
                        : Tensor::full(ctx, shape, init == decl::Init::one ? 1.0 : 0.0, c.dtype);
    if (init != decl::Init::normal && c.random_norms) {  // a norm: constant + Normal(0, 0.1)
      const Tensor noise = Tensor::randn(ctx, shape, key, 0.1, c.dtype);
      ctx.backend().add(values, noise, 1.0, 1.0, values);
    }
    w.*slot.member = Tensor::parameter(values, decl::stack_name(c, slot.param.name));
  }
  return w;
}

TransformerLayer::TransformerLayer(const LayerConfig& config, LayerWeights weights)
    : config_(config), weights_(std::move(weights)) {
  config_.validate();
  check_weights(config_, weights_);
}

Tensor TransformerLayer::linear(const decl::ModuleDecl& module, const Tensor& x) const {
  ScopeGuard s(x.ctx(), module.scope);
  auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<Tensor> out;
    for (const std::string& n : names) out.push_back(weights_.at(n));
    return out;
  };
  return local_linear(x, tensors(decl::weights(module)), tensors(decl::biases(module)));
}

Tensor TransformerLayer::norm(const decl::ModuleDecl& module, const Tensor& x) const {
  ScopeGuard s(x.ctx(), module.scope);
  const Tensor bias = decl::has_bias(module) ? weights_.at(decl::bias(module)) : Tensor();
  return norm_op(module, x, weights_.at(decl::weight(module)), bias, config_.layernorm_eps);
}

Tensor TransformerLayer::attention(const Tensor& x) const {
  const decl::Modules& m = decl::layer(config_);
  // [s, b, 3h], or under GQA [s, b, h + 2gd]: the queries', then the keys' and values'.
  const Tensor qkv = linear(m.qkv, x);
  const HeadTensors heads =
      rotary(config_, split_heads(config_, qkv, config_.heads, config_.kv_heads_count()), 2, 0);
  Tensor context = merge_heads(config_, attention_core(config_, heads, 0));
  Tensor out = linear(m.proj, context);
  return layer_dropout(config_, m.out_dropout, out);
}

Tensor TransformerLayer::mlp(const Tensor& x) const {
  const decl::Modules& m = decl::layer(config_);
  Tensor h = mlp_activation(m.act, linear(m.fc1, x));
  h = linear(m.fc2, h);
  return layer_dropout(config_, m.mlp_dropout, h);
}

Tensor TransformerLayer::forward(const Tensor& x) const {
  Context& ctx = x.ctx();
  const Shape expected{config_.seq, config_.batch, config_.hidden};
  if (x.shape() != expected || x.dtype() != config_.dtype) {
    throw ShapeError("TransformerLayer (layer " + std::to_string(config_.layer) + ", rank " +
                     std::to_string(ctx.rank()) + "): input must be " + dtype_name(config_.dtype) +
                     expected.str() + " [s, b, h], given " + x.describe());
  }
  if (&ctx != &weights_.ln1_weight.ctx()) {
    throw ArgumentError("TransformerLayer (layer " + std::to_string(config_.layer) +
                        "): the input belongs to rank " + std::to_string(ctx.rank()) +
                        "'s context, the weights to rank " +
                        std::to_string(weights_.ln1_weight.ctx().rank()) + "'s");
  }
  LayerGuard layer(ctx, config_.layer);
  if (config_.recompute != Recompute::full) return body(x);
  // Full recomputation: only the layer's input is kept; backward runs the layer again.
  return checkpoint(decl::layer(config_).recompute->scope, {x},
                    [this](const std::vector<Tensor>& in) { return body(in[0]); });
}

Tensor TransformerLayer::body(const Tensor& x) const {
  Context& ctx = x.ctx();
  const decl::Modules& m = decl::layer(config_);
  const Tensor ln1 = norm(m.ln1, x);
  const Tensor attn_out = attention(ln1);
  Tensor h1;
  {
    ScopeGuard r(ctx, m.residual1.scope);
    h1 = add(x, attn_out);
  }
  const Tensor ln2 = norm(m.ln2, h1);
  const Tensor mlp_out = mlp(ln2);
  ScopeGuard r(ctx, m.residual2.scope);
  return add(h1, mlp_out);
}

}  // namespace shardscope
