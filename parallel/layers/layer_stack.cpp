// A stack of layers of one configuration.
#include "parallel/layers/layer_stack.h"

#include "autograd/errors.h"

namespace shardscope {

LayerConfig stack_layer(const LayerConfig& c, int i) {
  LayerConfig layer = c;
  layer.layer = i;
  layer.validate();  // names layer and layers when i is out of the stack
  return layer;
}

std::vector<LayerWeights> make_stack_weights(Context& ctx, const LayerConfig& c) {
  std::vector<LayerWeights> out;
  for (int i = 0; i < c.layers; ++i) out.push_back(make_layer_weights(ctx, stack_layer(c, i)));
  return out;
}

namespace {

void require_layers(const LayerConfig& c, std::size_t given, const char* where) {
  if (given != static_cast<std::size_t>(c.layers)) {
    throw ArgumentError(std::string(where) + ": a stack of layers " + std::to_string(c.layers) +
                        " needs the weights of " + std::to_string(c.layers) + " layers, given " +
                        std::to_string(given));
  }
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> stack_named(const LayerConfig& c,
                                                        const std::vector<LayerWeights>& weights) {
  require_layers(c, weights.size(), "stack_named");
  std::vector<std::pair<std::string, Tensor>> out;
  for (int i = 0; i < c.layers; ++i) {
    const LayerConfig layer = stack_layer(c, i);
    for (auto& [name, t] : weights[static_cast<std::size_t>(i)].named()) {
      out.emplace_back(decl::stack_name(layer, name), t);
    }
  }
  return out;
}

TransformerStack::TransformerStack(const LayerConfig& config, std::vector<LayerWeights> weights)
    : config_(config) {
  require_layers(config_, weights.size(), "TransformerStack");
  for (int i = 0; i < config_.layers; ++i) {
    layers_.emplace_back(stack_layer(config_, i), std::move(weights[static_cast<std::size_t>(i)]));
  }
}

Tensor TransformerStack::forward(const Tensor& x) const {
  Tensor y = x;
  for (const TransformerLayer& layer : layers_) y = layer.forward(y);
  return y;
}

std::vector<std::pair<std::string, Tensor>> TransformerStack::named() const {
  std::vector<LayerWeights> weights;  // handles on the layers' tensors
  for (const TransformerLayer& layer : layers_) weights.push_back(layer.weights());
  return stack_named(config_, weights);
}

std::vector<Tensor> TransformerStack::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named()) out.push_back(t);
  return out;
}

ParallelTransformerStack::ParallelTransformerStack(const LayerConfig& config, ProcessGroup& group,
                                                   const std::vector<LayerWeights>& full,
                                                   const ParallelLinearOptions& linear) {
  require_layers(config, full.size(), "ParallelTransformerStack");
  for (int i = 0; i < config.layers; ++i) {
    layers_.push_back(std::make_unique<ParallelTransformerLayer>(
        stack_layer(config, i), group, full[static_cast<std::size_t>(i)], linear));
    const std::vector<ShardedParameter>& mine = layers_.back()->parameters();
    params_.insert(params_.end(), mine.begin(), mine.end());
  }
}

ParallelTensor ParallelTransformerStack::forward(const ParallelTensor& x) const {
  ParallelTensor y = x;
  for (const auto& layer : layers_) y = layer->forward(y);
  return y;
}

void ParallelTransformerStack::reduce_parameter_gradients() {
  for (const auto& layer : layers_) layer->reduce_parameter_gradients();
}

void ParallelTransformerStack::check_replicated() const {
  for (const auto& layer : layers_) layer->check_replicated();
}

}  // namespace shardscope
