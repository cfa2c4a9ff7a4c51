// Activation recomputation (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
// Korthikanti et al. 2022 for Transformer layers): run a piece of the forward without keeping what
// its ops would save, keep only its inputs, and run it again in backward to get its gradients.
#pragma once

#include <functional>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs) without recording its graph (its ops run, report their events and issue their
// collectives, but save nothing), then records one op "checkpoint" in scope `scope` (a string with
// static storage, nested in the current scope) that saves the inputs (SaveRole::activation: a
// parameter among them is kept, not counted). Its backward runs fn again on the saved inputs, in
// phase forward with the gradient on (the recomputation: its ops save what they save, in the
// scopes fn sets, under the checkpoint's layer), then backpropagates the incoming gradient through
// that graph: the gradients of the inputs flow on, those of any parameter fn uses accumulate into
// it. fn must compute the same values both times (its dropout masks come from counter-based
// streams keyed by the step, so they do); the gradients are then bitwise those of fn run without
// the checkpoint. ArgumentError when fn returns an undefined tensor or one in another context.
Tensor checkpoint(const char* scope, const std::vector<Tensor>& inputs, const CheckpointFn& fn);

}  // namespace shardscope
