// Engine: runs backward over the graph recorded by the forward ops.
#pragma once

#include "autograd/tensor.h"

namespace shardscope {

// Computes gradients of `root` with respect to every leaf that requires grad and accumulates
// them into the leaves' .grad. Nodes run in reverse creation order (the reverse of the forward);
// a node runs once every gradient flowing into it has been summed, and its saved tensors are
// released right after. `grad` seeds the root; an undefined `grad` requires a one-element root.
void run_backward(const Tensor& root, const Tensor& grad);

}  // namespace shardscope
