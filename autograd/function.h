// apply_function: an op written outside the engine, as a forward on values and a hand-written
// backward, recorded on the tape like a built-in op (observer events, a debugger stop, saved bytes
// in the MemoryLedger). The course labs write their backward functions and the f / g operators of
// tensor parallelism with it. Ops called inside `forward` and `backward` record nothing.
#pragma once

#include <functional>
#include <vector>

#include "autograd/tensor.h"

namespace shardscope {

// forward(inputs, save) returns the outputs and appends to `save` the tensors backward needs;
// they are kept (and counted as activations) until backward has run.
using FunctionForward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs,
                                                          std::vector<Tensor>& save)>;
// backward(saved, grad_outputs) returns one gradient per input, each with its input's shape and
// dtype; an undefined Tensor for an input that takes no gradient. grad_outputs has one gradient
// per output (zeros where an output got none).
using FunctionBackward = std::function<std::vector<Tensor>(
    const std::vector<Tensor>& saved, const std::vector<Tensor>& grad_outputs)>;

// Runs `forward` on `inputs` (all in one context) as the op `name`, a string with static storage
// ("lab_gelu"). A wrong number of outputs or gradients is an ArgumentError naming the op; a
// gradient of the wrong shape a ShapeError, as for every op.
std::vector<Tensor> apply_function(const char* name, const std::vector<Tensor>& inputs,
                                   const FunctionForward& forward, FunctionBackward backward);

// The one-output case.
Tensor apply_function1(const char* name, const std::vector<Tensor>& inputs,
                       const FunctionForward& forward, FunctionBackward backward);

}  // namespace shardscope
