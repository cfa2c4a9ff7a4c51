// The single-device Transformer layer.
#include "parallel/layers/transformer_layer.h"

#include <algorithm>
#include <cmath>

#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

namespace {

// LayerWeights' members in the order of the parameters of the fullest declaration (LayerNorms
// and biases: the default configuration's decl::parameters). A configuration declares these or a
// part of them (RMSNorm has no bias; bias off drops the linears'); the members it does not
// declare stay undefined. The names, shapes and initialisation come from the declaration; this
// only says which member holds each.
constexpr Tensor LayerWeights::*kMembers[] = {
    &LayerWeights::ln1_weight, &LayerWeights::ln1_bias,    &LayerWeights::qkv_weight,
    &LayerWeights::qkv_bias,   &LayerWeights::proj_weight, &LayerWeights::proj_bias,
    &LayerWeights::ln2_weight, &LayerWeights::ln2_bias,    &LayerWeights::fc1_weight,
    &LayerWeights::fc1_bias,   &LayerWeights::fc2_weight,  &LayerWeights::fc2_bias,
};
constexpr std::size_t kMemberCount = sizeof(kMembers) / sizeof(kMembers[0]);

// The fullest declaration's parameter names: kMembers[i] holds the parameter named names[i].
const std::vector<std::string>& member_names() {
  static const std::vector<std::string> names = [] {
    const std::vector<decl::Param> params = decl::parameters(LayerConfig());
    if (params.size() != kMemberCount) {
      throw StateError("LayerWeights has " + std::to_string(kMemberCount) +
                       " members, the layer declaration " + std::to_string(params.size()) +
                       " parameters");
    }
    std::vector<std::string> out;
    for (const decl::Param& p : params) out.push_back(p.name);
    return out;
  }();
  return names;
}

// The declared parameters of `c` with the member of each.
struct Slot {
  decl::Param param;
  Tensor LayerWeights::*member;
  std::uint64_t index;  // in the fullest declaration: keys the parameter's random stream
};
std::vector<Slot> slots(const LayerConfig& c) {
  const std::vector<std::string>& names = member_names();
  std::vector<Slot> out;
  for (decl::Param& p : decl::parameters(c)) {
    const auto at = std::find(names.begin(), names.end(), p.name);
    if (at == names.end()) {
      throw StateError("LayerWeights has no member for the declared parameter " + p.name);
    }
    const auto i = static_cast<std::size_t>(at - names.begin());
    out.push_back({std::move(p), kMembers[i], i});
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
                          "): " + member_names()[i] + " is given, but a layer of norm " +
                          norm_name(c.norm) + ", bias " + (c.bias ? "on" : "off") +
                          " has no such parameter");
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
    if ((this->*kMembers[i]).defined()) out.emplace_back(member_names()[i], this->*kMembers[i]);
  }
  return out;
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
    if (t.defined()) w.*kMembers[i] = Tensor::parameter(t.copy_to(ctx), member_names()[i]);
  }
  return w;
}

LayerWeights make_layer_weights(Context& ctx, const LayerConfig& c) {
  c.validate();
  LayerWeights w;
  const std::uint64_t first = kSeedWeights + 64 * static_cast<std::uint64_t>(c.layer);
  for (const Slot& slot : slots(c)) {
    const Shape& shape = slot.param.shape;
    const std::uint64_t key = kernels::derive_seed(c.seed, first + slot.index);
    const decl::Init init = slot.param.decl->init;
    Tensor values = init == decl::Init::normal
                        ? Tensor::randn(ctx, shape, key, 0.02, c.dtype)
                        : Tensor::full(ctx, shape, init == decl::Init::one ? 1.0 : 0.0, c.dtype);
    if (init != decl::Init::normal && c.random_norms) {  // a norm: constant + Normal(0, 0.1)
      const Tensor noise = Tensor::randn(ctx, shape, key, 0.1, c.dtype);
      ctx.backend().add(values, noise, 1.0, 1.0, values);
    }
    w.*slot.member = Tensor::parameter(values, slot.param.name);
  }
  return w;
}

TransformerLayer::TransformerLayer(const LayerConfig& config, LayerWeights weights)
    : config_(config), weights_(std::move(weights)) {
  config_.validate();
  check_weights(config_, weights_);
}

Tensor TransformerLayer::linear(const decl::ModuleDecl& module, const Tensor& x, const Tensor& w,
                                const Tensor& b) const {
  ScopeGuard s(x.ctx(), module.scope);
  const Tensor y = matmul(x, w);
  return b.defined() ? add(y, b) : y;
}

Tensor TransformerLayer::norm(const decl::ModuleDecl& module, const Tensor& x, const Tensor& w,
                              const Tensor& b) const {
  ScopeGuard s(x.ctx(), module.scope);
  return norm_op(module, x, w, b, config_.layernorm_eps);
}

Tensor TransformerLayer::attention(const Tensor& x) const {
  const decl::Modules& m = decl::layer(config_);
  Tensor qkv = linear(m.qkv, x, weights_.qkv_weight, weights_.qkv_bias);  // [s, b, 3h]
  const HeadTensors heads = rotary(config_, split_heads(config_, qkv, config_.heads), 2, 0);
  Tensor context = merge_heads(config_, attention_core(config_, heads, 0));
  Tensor out = linear(m.proj, context, weights_.proj_weight, weights_.proj_bias);
  return layer_dropout(config_, m.out_dropout, out);
}

Tensor TransformerLayer::mlp(const Tensor& x) const {
  const decl::Modules& m = decl::layer(config_);
  Tensor h = linear(m.fc1, x, weights_.fc1_weight, weights_.fc1_bias);
  h = mlp_activation(m.act, h);
  h = linear(m.fc2, h, weights_.fc2_weight, weights_.fc2_bias);
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
  const decl::Modules& m = decl::layer(config_);
  const Tensor ln1 = norm(m.ln1, x, weights_.ln1_weight, weights_.ln1_bias);
  const Tensor attn_out = attention(ln1);
  Tensor h1;
  {
    ScopeGuard r(ctx, m.residual1.scope);
    h1 = add(x, attn_out);
  }
  const Tensor ln2 = norm(m.ln2, h1, weights_.ln2_weight, weights_.ln2_bias);
  const Tensor mlp_out = mlp(ln2);
  ScopeGuard r(ctx, m.residual2.scope);
  return add(h1, mlp_out);
}

}  // namespace shardscope
