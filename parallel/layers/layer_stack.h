// A stack of LayerConfig::layers layers of one configuration, run one after another: layer i's
// output is layer i + 1's input. Each layer has weights of its own (drawn from the seed under its
// index), its own dropout streams, and runs under its index (Context::layer), so the memory
// ledger, the communication log and traces tell the layers apart. A stack of one is the layer.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/layers/parallel_layer.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {

// The configuration of the stack's layer i: `c` with layer = i. Throws ConfigError (fields
// "layer", "layers") when i is not in [0, c.layers).
LayerConfig stack_layer(const LayerConfig& c, int i);

// Every layer's full weights, layer i's as make_layer_weights draws them for layer i.
std::vector<LayerWeights> make_stack_weights(Context& ctx, const LayerConfig& c);
// Every parameter of the stack, layer by layer, named as decl::stack_name names them
// ("layers.1.attn.qkv.weight"; "attn.qkv.weight" in a stack of one). Throws ArgumentError when
// `weights` does not hold c.layers layers.
std::vector<std::pair<std::string, Tensor>> stack_named(const LayerConfig& c,
                                                        const std::vector<LayerWeights>& weights);

// The single-device stack.
class TransformerStack {
 public:
  TransformerStack(const LayerConfig& config, std::vector<LayerWeights> weights);
  Tensor forward(const Tensor& x) const;
  const std::vector<TransformerLayer>& layers() const { return layers_; }
  // stack_named of the layers' weights.
  std::vector<std::pair<std::string, Tensor>> named() const;
  std::vector<Tensor> parameters() const;

 private:
  LayerConfig config_;
  std::vector<TransformerLayer> layers_;
};

// The stack on a group of t ranks: each layer a ParallelTransformerLayer of c.mode.
class ParallelTransformerStack {
 public:
  ParallelTransformerStack(const LayerConfig& config, ProcessGroup& group,
                           const std::vector<LayerWeights>& full,
                           const ParallelLinearOptions& linear = {});
  Placement activation_placement() const { return layers_.front()->activation_placement(); }
  ParallelTensor forward(const ParallelTensor& x) const;
  void reduce_parameter_gradients();  // every layer's, each under its index
  void check_replicated() const;
  // Every layer's parameters, in layer order, named by decl::stack_name.
  const std::vector<ShardedParameter>& parameters() const { return params_; }

 private:
  std::vector<std::unique_ptr<ParallelTransformerLayer>> layers_;
  std::vector<ShardedParameter> params_;
};

}  // namespace shardscope
