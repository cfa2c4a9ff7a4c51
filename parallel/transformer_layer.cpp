// The single-device Transformer layer.
#include "parallel/transformer_layer.h"

#include <cmath>

#include "autograd/errors.h"
#include "autograd/ops.h"

namespace shardscope {

std::vector<std::pair<std::string, Tensor>> LayerWeights::named() const {
  return {{"ln1.weight", ln1_weight},        {"ln1.bias", ln1_bias},
          {"attn.qkv.weight", qkv_weight},   {"attn.qkv.bias", qkv_bias},
          {"attn.proj.weight", proj_weight}, {"attn.proj.bias", proj_bias},
          {"ln2.weight", ln2_weight},        {"ln2.bias", ln2_bias},
          {"mlp.fc1.weight", fc1_weight},    {"mlp.fc1.bias", fc1_bias},
          {"mlp.fc2.weight", fc2_weight},    {"mlp.fc2.bias", fc2_bias}};
}

std::vector<Tensor> LayerWeights::parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : named()) out.push_back(t);
  return out;
}

LayerWeights make_layer_weights(Context& ctx, const LayerConfig& c) {
  c.validate();
  const std::int64_t h = c.hidden;
  std::uint64_t stream = c.seed * 1000003ULL + static_cast<std::uint64_t>(c.layer) * 101ULL;
  auto normal = [&](const Shape& shape, const char* name) {
    return Tensor::parameter(Tensor::randn(ctx, shape, ++stream, 0.02, c.dtype), name);
  };
  auto constant = [&](const Shape& shape, double value, const char* name) {
    return Tensor::parameter(Tensor::full(ctx, shape, value, c.dtype), name);
  };
  LayerWeights w;
  w.ln1_weight = constant({h}, 1.0, "ln1.weight");
  w.ln1_bias = constant({h}, 0.0, "ln1.bias");
  w.qkv_weight = normal({h, 3 * h}, "attn.qkv.weight");
  w.qkv_bias = normal({3 * h}, "attn.qkv.bias");
  w.proj_weight = normal({h, h}, "attn.proj.weight");
  w.proj_bias = normal({h}, "attn.proj.bias");
  w.ln2_weight = constant({h}, 1.0, "ln2.weight");
  w.ln2_bias = constant({h}, 0.0, "ln2.bias");
  w.fc1_weight = normal({h, 4 * h}, "mlp.fc1.weight");
  w.fc1_bias = normal({4 * h}, "mlp.fc1.bias");
  w.fc2_weight = normal({4 * h, h}, "mlp.fc2.weight");
  w.fc2_bias = normal({h}, "mlp.fc2.bias");
  return w;
}

namespace {

void check_weights(const LayerConfig& c, const LayerWeights& w) {
  const std::int64_t h = c.hidden;
  const std::vector<std::pair<std::string, Shape>> expected = {{"ln1.weight", {h}},
                                                               {"ln1.bias", {h}},
                                                               {"attn.qkv.weight", {h, 3 * h}},
                                                               {"attn.qkv.bias", {3 * h}},
                                                               {"attn.proj.weight", {h, h}},
                                                               {"attn.proj.bias", {h}},
                                                               {"ln2.weight", {h}},
                                                               {"ln2.bias", {h}},
                                                               {"mlp.fc1.weight", {h, 4 * h}},
                                                               {"mlp.fc1.bias", {4 * h}},
                                                               {"mlp.fc2.weight", {4 * h, h}},
                                                               {"mlp.fc2.bias", {h}}};
  const auto named = w.named();
  for (std::size_t i = 0; i < named.size(); ++i) {
    const Tensor& t = named[i].second;
    if (!t.defined() || t.shape() != expected[i].second || t.dtype() != c.dtype) {
      throw ArgumentError("TransformerLayer (layer " + std::to_string(c.layer) +
                          "): " + named[i].first + " must be " + dtype_name(c.dtype) +
                          expected[i].second.str() + ", given " + t.describe());
    }
  }
}

}  // namespace

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

Tensor TransformerLayer::drop(const std::string& scope, const Tensor& x, int site) const {
  ScopeGuard s(x.ctx(), scope);
  DropoutSpec spec;
  spec.p = config_.dropout;
  spec.seed = config_.seed;
  spec.stream = dropout_stream(config_.layer, site);
  spec.step = static_cast<std::uint32_t>(x.ctx().step());
  return dropout(x, spec);
}

Tensor TransformerLayer::attention(const Tensor& x) const {
  Context& ctx = x.ctx();
  ScopeGuard attn(ctx, "attn");
  const std::int64_t s = config_.seq, b = config_.batch, a = config_.heads;
  const std::int64_t d = config_.head_dim();
  Tensor qkv = linear("qkv", x, weights_.qkv_weight, weights_.qkv_bias);  // [s, b, 3h]
  Tensor q, k, v;
  {
    ScopeGuard heads(ctx, "heads");
    // [s, b, a, 3, d] -> [3, b, a, s, d] -> q, k, v each [b, a, s, d]
    Tensor grouped = permute(reshape(qkv, {s, b, a, 3, d}), {3, 1, 2, 0, 4});
    std::vector<Tensor> parts = chunk(grouped, 0, 3);
    q = reshape(parts[0], {b, a, s, d});
    k = reshape(parts[1], {b, a, s, d});
    v = reshape(parts[2], {b, a, s, d});
  }
  Tensor scores;
  {
    ScopeGuard sc(ctx, "scores");
    scores = scale(matmul(q, k, /*transpose_b=*/true), 1.0 / std::sqrt(static_cast<double>(d)));
  }
  Tensor probs;
  {
    ScopeGuard sm(ctx, "softmax");
    probs = softmax(scores, config_.causal);  // [b, a, s, s]
  }
  probs = drop("dropout", probs, kAttentionProbs);
  Tensor context;
  {
    ScopeGuard cx(ctx, "context");
    // [b, a, s, d] -> [s, b, a, d] -> [s, b, h]
    context = reshape(permute(matmul(probs, v), {2, 0, 1, 3}), {s, b, a * d});
  }
  Tensor out = linear("proj", context, weights_.proj_weight, weights_.proj_bias);
  return drop("out_dropout", out, kAttentionOutput);
}

Tensor TransformerLayer::mlp(const Tensor& x) const {
  ScopeGuard m(x.ctx(), "mlp");
  Tensor h = linear("fc1", x, weights_.fc1_weight, weights_.fc1_bias);
  {
    ScopeGuard g(x.ctx(), "gelu");
    h = gelu(h);
  }
  h = linear("fc2", h, weights_.fc2_weight, weights_.fc2_bias);
  return drop("dropout", h, kMlpOutput);
}

Tensor TransformerLayer::forward(const Tensor& x) const {
  Context& ctx = x.ctx();
  const Shape expected{config_.seq, config_.batch, config_.hidden};
  if (x.shape() != expected || x.dtype() != config_.dtype) {
    throw ShapeError("TransformerLayer (layer " + std::to_string(config_.layer) + ", rank " +
                     std::to_string(ctx.rank()) + "): input must be " + dtype_name(config_.dtype) +
                     expected.str() + " [s, b, h], given " + x.describe());
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
