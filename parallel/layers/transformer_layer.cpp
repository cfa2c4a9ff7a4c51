// The single-device Transformer layer.
#include "parallel/layers/transformer_layer.h"

#include <cmath>

#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

namespace {

// LayerWeights' members in the order of the declared parameters (decl::parameters): the names,
// shapes and initialisation come from the declaration; this only says which member holds each.
constexpr Tensor LayerWeights::*kMembers[] = {
    &LayerWeights::ln1_weight, &LayerWeights::ln1_bias,    &LayerWeights::qkv_weight,
    &LayerWeights::qkv_bias,   &LayerWeights::proj_weight, &LayerWeights::proj_bias,
    &LayerWeights::ln2_weight, &LayerWeights::ln2_bias,    &LayerWeights::fc1_weight,
    &LayerWeights::fc1_bias,   &LayerWeights::fc2_weight,  &LayerWeights::fc2_bias,
};
constexpr std::size_t kMemberCount = sizeof(kMembers) / sizeof(kMembers[0]);

// The declared parameters with the member of each: the declaration's parameter names, in order.
struct Slot {
  decl::Param param;
  Tensor LayerWeights::*member;
};
std::vector<Slot> slots(const LayerConfig& c) {
  const std::vector<decl::Param> params = decl::parameters(c);
  if (params.size() != kMemberCount) {
    throw StateError("LayerWeights has " + std::to_string(kMemberCount) +
                     " members, the layer declaration " + std::to_string(params.size()) +
                     " parameters");
  }
  std::vector<Slot> out;
  for (std::size_t i = 0; i < params.size(); ++i) out.push_back({params[i], kMembers[i]});
  return out;
}

// Every weight defined, of its shape and dtype, and in the context of the first one.
void check_weights(const LayerConfig& c, const LayerWeights& w) {
  const Context* ctx = nullptr;
  std::string first;
  for (const Slot& slot : slots(c)) {
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
    out.emplace_back(parameter_names()[i], this->*kMembers[i]);
  }
  return out;
}

std::vector<Tensor> LayerWeights::parameters() const {
  std::vector<Tensor> out;
  for (Tensor LayerWeights::*member : kMembers) out.push_back(this->*member);
  return out;
}

const std::vector<std::string>& LayerWeights::parameter_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;  // the names do not depend on the configuration's sizes
    for (const Slot& slot : slots(LayerConfig())) out.push_back(slot.param.name);
    return out;
  }();
  return names;
}

LayerWeights copy_weights(const LayerWeights& from, Context& ctx) {
  LayerWeights w;
  for (std::size_t i = 0; i < kMemberCount; ++i) {
    w.*kMembers[i] =
        Tensor::parameter((from.*kMembers[i]).copy_to(ctx), LayerWeights::parameter_names()[i]);
  }
  return w;
}

LayerWeights make_layer_weights(Context& ctx, const LayerConfig& c) {
  c.validate();
  LayerWeights w;
  std::uint64_t index = kSeedWeights + 64 * static_cast<std::uint64_t>(c.layer);
  for (const Slot& slot : slots(c)) {
    const Shape& shape = slot.param.shape;
    const std::uint64_t key = kernels::derive_seed(c.seed, index++);
    const decl::Init init = slot.param.decl->init;
    Tensor values = init == decl::Init::normal
                        ? Tensor::randn(ctx, shape, key, 0.02, c.dtype)
                        : Tensor::full(ctx, shape, init == decl::Init::one ? 1.0 : 0.0, c.dtype);
    if (init != decl::Init::normal && c.random_norms) {  // LayerNorm: constant + Normal(0, 0.1)
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
  return add(matmul(x, w), b);
}

Tensor TransformerLayer::attention(const Tensor& x) const {
  const decl::Modules& m = decl::layer();
  Tensor qkv = linear(m.qkv, x, weights_.qkv_weight, weights_.qkv_bias);  // [s, b, 3h]
  const HeadTensors heads = split_heads(qkv, config_.heads, config_.head_dim());
  Tensor context = merge_heads(attention_core(config_, heads, 0));
  Tensor out = linear(m.proj, context, weights_.proj_weight, weights_.proj_bias);
  return layer_dropout(config_, m.out_dropout, out);
}

Tensor TransformerLayer::mlp(const Tensor& x) const {
  const decl::Modules& m = decl::layer();
  Tensor h = linear(m.fc1, x, weights_.fc1_weight, weights_.fc1_bias);
  {
    ScopeGuard g(x.ctx(), m.gelu.scope);
    h = gelu(h);
  }
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
  const decl::Modules& m = decl::layer();
  Tensor ln1;
  {
    ScopeGuard s(ctx, m.ln1.scope);
    ln1 = layernorm(x, weights_.ln1_weight, weights_.ln1_bias, config_.layernorm_eps);
  }
  const Tensor attn_out = attention(ln1);
  Tensor h1;
  {
    ScopeGuard r(ctx, m.residual1.scope);
    h1 = add(x, attn_out);
  }
  Tensor ln2;
  {
    ScopeGuard s(ctx, m.ln2.scope);
    ln2 = layernorm(h1, weights_.ln2_weight, weights_.ln2_bias, config_.layernorm_eps);
  }
  const Tensor mlp_out = mlp(ln2);
  ScopeGuard r(ctx, m.residual2.scope);
  return add(h1, mlp_out);
}

}  // namespace shardscope
