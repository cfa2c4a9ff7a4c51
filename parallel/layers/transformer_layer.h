// The pre-LayerNorm Transformer layer, single device. Activations are [s, b, h]:
//   x -> LN1 -> QKV linear -> attention core (scores, 1/sqrt(d), causal softmax, dropout,
//   probs x V) -> output linear -> dropout -> + x = h1
//   h1 -> LN2 -> fc1 (4h) -> GeLU -> fc2 -> dropout -> + h1 = y
// or as the configuration chooses: RMSNorm for LayerNorm, SwiGLU for GeLU (fc1 then makes 2f
// columns, the gate and up values of each of the f outputs side by side), no linear biases.
// Weights are [in, out]. The QKV columns are grouped by head: column (head * 3 + j) * d + i holds
// element i of the head's query (j = 0), key (j = 1) or value (j = 2), d = h / a, so a column
// shard of whole heads holds their q, k and v together (docs/architecture.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

// The layer's parameters, a member each; those the configuration does not declare (a bias with
// LayerConfig::bias off, RMSNorm's bias) are undefined.
struct LayerWeights {
  Tensor ln1_weight, ln1_bias;  // [h]
  Tensor qkv_weight, qkv_bias;  // [h, 3h], [3h]
  // Grouped-query attention (g < a) instead of qkv_weight and qkv_bias: [h, h], [h], [h, 2gd],
  // [2gd].
  Tensor q_weight, q_bias, kv_weight, kv_bias;
  Tensor proj_weight, proj_bias;  // [h, h], [h]
  Tensor ln2_weight, ln2_bias;    // [h]
  Tensor fc1_weight, fc1_bias;    // [h, f], [f] (SwiGLU: [h, 2f], [2f], gate and up interleaved)
  Tensor fc2_weight, fc2_bias;    // [f, h], [h]

  // The defined ones with their declared names (decl::parameters, layer_decl.h), in the declared
  // order.
  std::vector<std::pair<std::string, Tensor>> named() const;
  std::vector<Tensor> parameters() const;
  // The parameter named `name` ("attn.qkv.weight"); ArgumentError when it is undefined or no
  // declaration has it.
  const Tensor& at(const std::string& name) const;
};

// What a seed is drawn for: kernels::derive_seed(config.seed, purpose) keys each stream.
enum SeedPurpose : std::uint64_t {
  kSeedInput = 1,
  kSeedTarget = 2,
  kSeedOutputGrad = 3,
  kSeedWeights = 0x10000,  // + 64 * layer + parameter index
};

// Deterministic weights from config.seed: linear weights and biases Normal(0, 0.02), norm
// weights 1 and biases 0 (the usual GPT-2 / Megatron start). Each parameter draws from its own
// stream, keyed by its index in the fullest declaration, so a parameter has the same values
// whichever others the configuration declares.
LayerWeights make_layer_weights(Context& ctx, const LayerConfig& config);
// The same values as parameters of another context (another rank, a reference run).
LayerWeights copy_weights(const LayerWeights& weights, Context& ctx);

// The dropout sites of a layer, numbered for their Philox streams: the declared dropout modules'
// ModuleDecl::dropout_site (attn.dropout, attn.out_dropout, mlp.dropout), named for the labs.
enum DropoutSite : int { kAttentionProbs = 0, kAttentionOutput = 1, kMlpOutput = 2 };

class TransformerLayer {
 public:
  // Throws ArgumentError on a bad config or weights of the wrong shape.
  TransformerLayer(const LayerConfig& config, LayerWeights weights);

  // x [s, b, h] -> [s, b, h]. Ops run in the scopes of the declared modules (layer_decl.h).
  Tensor forward(const Tensor& x) const;

  const LayerConfig& config() const { return config_; }
  const LayerWeights& weights() const { return weights_; }
  std::vector<Tensor> parameters() const { return weights_.parameters(); }

 private:
  Tensor body(const Tensor& x) const;  // the layer's modules, without a full recomputation
  Tensor attention(const Tensor& x) const;

  Tensor mlp(const Tensor& x) const;
  // A declared linear or norm module on x, with the weights it declares (decl::weights, biases).
  Tensor linear(const decl::ModuleDecl& module, const Tensor& x) const;
  Tensor norm(const decl::ModuleDecl& module, const Tensor& x) const;

  LayerConfig config_;
  LayerWeights weights_;
};

}  // namespace shardscope
