// Plain SGD: p -= lr * p.grad for each parameter, then the gradients are cleared.
#pragma once

#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

// Parameters without a gradient are skipped. Runs without recording a graph.
void sgd_step(const std::vector<Tensor>& parameters, double learning_rate);

}  // namespace shardscope
