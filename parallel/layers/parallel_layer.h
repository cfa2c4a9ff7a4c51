// ParallelTransformerLayer: the Transformer layer of transformer_layer.h on a group of t ranks,
// in one of the parallel modes. Each rank holds slices of the full weights, so the single-device
// layer can always be built from the same weights and checked against.
//
//   mode     activations between blocks   weights                      replicated grads reduced
//   tp       Replicate [s, b, h]          QKV, fc1 by columns;         none (inputs replicated)
//                                         proj, fc2 by rows
//   tp-sp    Shard(0) [s/t, b, h]         as tp                        LayerNorms, proj/fc2 bias
//   ulysses  Shard(0) [s/t, b, h]         all replicated; attention    all
//                                         on a/t heads, full sequence
#pragma once

#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/layers/parallel_linear.h"
#include "parallel/layers/placement.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {

// A parameter as one rank holds it.
struct ShardedParameter {
  std::string name;                          // "attn.qkv.weight"
  const decl::ModuleDecl* module = nullptr;  // the declared module it belongs to
  Tensor local;                              // this rank's leaf
  Placement placement;                       // of the full weight
  Shape global;
  bool partial_grad = false;  // replicated, but its gradient sums over sequence shards
};

class ParallelTransformerLayer {
 public:
  // The layer slices its shards from the full weights `full` (in any context) into this rank's
  // context.
  ParallelTransformerLayer(const LayerConfig& config, ProcessGroup& group, const LayerWeights& full,
                           const ParallelLinearOptions& linear = {});

  // Replicate for tp, Shard(0) for tp-sp and ulysses (for the input and the output).
  Placement activation_placement() const;
  ParallelTensor forward(const ParallelTensor& x) const;
  // After backward: all-reduces the gradients that are partial sums (CommPurpose::param_grad).
  void reduce_parameter_gradients();
  // Confirms every replicated parameter and its gradient are identical on every rank
  // (CommPurpose::check); throws naming the parameter and the largest difference.
  void check_replicated() const;
  const std::vector<ShardedParameter>& parameters() const { return params_; }
  const LayerConfig& config() const { return config_; }

 private:
  const Tensor& param(const std::string& name) const;
  Tensor bias(const decl::ModuleDecl& module) const;  // undefined when the module has none
  // A module's weights and biases as this rank holds them (GQA's q and kv ones), in declared
  // order, for local_linear (parallel_linear.h).
  struct LocalWeights {
    std::vector<Tensor> weights, biases;  // no biases without them
  };
  LocalWeights local_weights(const decl::ModuleDecl& module) const;
  // x W + b of a module whose weights are whole on this rank (Ulysses).
  Tensor linear(const decl::ModuleDecl& module, const Tensor& x) const;
  ParallelTensor body(const ParallelTensor& x) const;  // the modules, without full recomputation
  ParallelTensor attention(const ParallelTensor& x) const;
  ParallelTensor attention_ulysses(const ParallelTensor& x) const;
  ParallelTensor mlp(const ParallelTensor& x) const;
  // The norm ln1 or ln2 on the activation x (where layernorm-local-shard is planted).
  Tensor layer_norm(const ParallelTensor& x, const decl::ModuleDecl& norm) const;
  ParallelTensor dropout_block(const decl::ModuleDecl& dropout, const ParallelTensor& x) const;

  LayerConfig config_;
  ProcessGroup& group_;
  ParallelLinearOptions linear_;
  std::vector<ShardedParameter> params_;
};

}  // namespace shardscope
