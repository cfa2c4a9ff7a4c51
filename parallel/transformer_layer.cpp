// The single-device Transformer layer.
#include "parallel/transformer_layer.h"

#include <cmath>

#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "parallel/attention_core.h"

namespace shardscope {

namespace {

// The one table of the layer's parameters: name, member, shape as multiples of h, and how
// make_layer_weights initialises it (a constant, or Normal(0, 0.02) when `normal`).
struct WeightSlot {
  const char* name;
  Tensor LayerWeights::*member;
  std::int64_t in;  // 0 for a vector [out * h]; else a matrix [in * h, out * h]
  std::int64_t out;
  bool normal;
  double constant;
};

constexpr WeightSlot kWeightSlots[] = {
    {"ln1.weight", &LayerWeights::ln1_weight, 0, 1, false, 1.0},
    {"ln1.bias", &LayerWeights::ln1_bias, 0, 1, false, 0.0},
    {"attn.qkv.weight", &LayerWeights::qkv_weight, 1, 3, true, 0.0},
    {"attn.qkv.bias", &LayerWeights::qkv_bias, 0, 3, true, 0.0},
    {"attn.proj.weight", &LayerWeights::proj_weight, 1, 1, true, 0.0},
    {"attn.proj.bias", &LayerWeights::proj_bias, 0, 1, true, 0.0},
    {"ln2.weight", &LayerWeights::ln2_weight, 0, 1, false, 1.0},
    {"ln2.bias", &LayerWeights::ln2_bias, 0, 1, false, 0.0},
    {"mlp.fc1.weight", &LayerWeights::fc1_weight, 1, 4, true, 0.0},
    {"mlp.fc1.bias", &LayerWeights::fc1_bias, 0, 4, true, 0.0},
    {"mlp.fc2.weight", &LayerWeights::fc2_weight, 4, 1, true, 0.0},
    {"mlp.fc2.bias", &LayerWeights::fc2_bias, 0, 1, true, 0.0},
};

Shape slot_shape(const WeightSlot& slot, std::int64_t h) {
  return slot.in == 0 ? Shape{slot.out * h} : Shape{slot.in * h, slot.out * h};
}

// Every weight defined, of its shape and dtype, and in the context of the first one.
void check_weights(const LayerConfig& c, const LayerWeights& w) {
  const Context* ctx = nullptr;
  for (const WeightSlot& slot : kWeightSlots) {
    const Tensor& t = w.*slot.member;
    const Shape expected = slot_shape(slot, c.hidden);
    if (!t.defined() || t.shape() != expected || t.dtype() != c.dtype) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) + "): " + slot.name +
                          " must be " + dtype_name(c.dtype) + expected.str() + ", given " +
                          t.describe());
    }
    if (!ctx) ctx = &t.ctx();
    if (&t.ctx() != ctx) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) + "): " + slot.name +
                          " belongs to rank " + std::to_string(t.ctx().rank()) +
                          "'s context, ln1.weight to rank " + std::to_string(ctx->rank()) + "'s");
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> LayerWeights::named() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const WeightSlot& slot : kWeightSlots) out.emplace_back(slot.name, this->*slot.member);
  return out;
}

std::vector<Tensor> LayerWeights::parameters() const {
  std::vector<Tensor> out;
  for (const WeightSlot& slot : kWeightSlots) out.push_back(this->*slot.member);
  return out;
}

LayerWeights copy_weights(const LayerWeights& from, Context& ctx) {
  LayerWeights w;
  for (const WeightSlot& slot : kWeightSlots) {
    w.*slot.member = Tensor::parameter((from.*slot.member).copy_to(ctx), slot.name);
  }
  return w;
}

LayerWeights make_layer_weights(Context& ctx, const LayerConfig& c) {
  c.validate();
  LayerWeights w;
  std::uint64_t index = kSeedWeights + 64 * static_cast<std::uint64_t>(c.layer);
  for (const WeightSlot& slot : kWeightSlots) {
    const Shape shape = slot_shape(slot, c.hidden);
    const std::uint64_t key = kernels::derive_seed(c.seed, index++);
    Tensor values = slot.normal ? Tensor::randn(ctx, shape, key, 0.02, c.dtype)
                                : Tensor::full(ctx, shape, slot.constant, c.dtype);
    if (!slot.normal && c.random_norms) {  // LayerNorm: constant + Normal(0, 0.1)
      const Tensor noise = Tensor::randn(ctx, shape, key, 0.1, c.dtype);
      ctx.backend().add(values, noise, 1.0, 1.0, values);
    }
    w.*slot.member = Tensor::parameter(values, slot.name);
  }
  return w;
}

TransformerLayer::TransformerLayer(const LayerConfig& config, LayerWeights weights)
    : config_(config), weights_(std::move(weights)) {
  config_.validate();
  check_weights(config_, weights_);
}

Tensor TransformerLayer::linear(const std::string& scope, const Tensor& x, const Tensor& w,
                                const Tensor& b) const {
  ScopeGuard s(x.ctx(), scope);
  return add(matmul(x, w), b);
}

Tensor TransformerLayer::attention(const Tensor& x) const {
  ScopeGuard attn(x.ctx(), "attn");
  Tensor qkv = linear("qkv", x, weights_.qkv_weight, weights_.qkv_bias);  // [s, b, 3h]
  const HeadTensors heads = split_heads(qkv, config_.heads, config_.head_dim());
  Tensor context = merge_heads(attention_core(config_, heads, 0));
  Tensor out = linear("proj", context, weights_.proj_weight, weights_.proj_bias);
  return layer_dropout(config_, "out_dropout", out, kAttentionOutput);
}

Tensor TransformerLayer::mlp(const Tensor& x) const {
  ScopeGuard m(x.ctx(), "mlp");
  Tensor h = linear("fc1", x, weights_.fc1_weight, weights_.fc1_bias);
  {
    ScopeGuard g(x.ctx(), "gelu");
    h = gelu(h);
  }
  h = linear("fc2", h, weights_.fc2_weight, weights_.fc2_bias);
  return layer_dropout(config_, "dropout", h, kMlpOutput);
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
  Tensor ln1;
  {
    ScopeGuard s(ctx, "ln1");
    ln1 = layernorm(x, weights_.ln1_weight, weights_.ln1_bias, config_.layernorm_eps);
  }
  const Tensor attn_out = attention(ln1);
  Tensor h1;
  {
    ScopeGuard r(ctx, "residual1");
    h1 = add(x, attn_out);
  }
  Tensor ln2;
  {
    ScopeGuard s(ctx, "ln2");
    ln2 = layernorm(h1, weights_.ln2_weight, weights_.ln2_bias, config_.layernorm_eps);
  }
  const Tensor mlp_out = mlp(ln2);
  ScopeGuard r(ctx, "residual2");
  return add(h1, mlp_out);
}

}  // namespace shardscope
