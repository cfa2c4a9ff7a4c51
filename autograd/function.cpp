// apply_function: OpRecord around a forward and a backward given as functions.
#include "autograd/function.h"

#include <string>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/node.h"
#include "autograd/ops/record.h"

namespace shardscope {

std::vector<Tensor> apply_function(const char* name, const std::vector<Tensor>& inputs,
                                   const FunctionForward& forward, FunctionBackward backward) {
  ops_detail::OpRecord r(name, inputs);
  std::vector<Tensor> save;
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad(r.ctx());
    outputs = forward(inputs, save);
  }
  if (outputs.empty()) throw ArgumentError(r.where() + ": forward returned no outputs");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) {
      throw ArgumentError(r.where() + ": forward returned an undefined output " +
                          std::to_string(i));
    }
    // A new tensor on the same storage: a forward may return an input as it is (the identity of
    // the f operator), and the output's place on the tape must not be written into the input.
    outputs[i] = outputs[i].detach();
  }
  if (r.needs_grad()) {
    const std::size_t n_inputs = inputs.size();
    const std::string where = r.where();
    Node& node = r.record([backward = std::move(backward), n_inputs, where](
                              Node& n, const std::vector<Tensor>& grads) {
      std::vector<Tensor> saved;
      for (std::size_t i = 0; i < n.saved_count(); ++i) saved.push_back(n.saved(i));
      std::vector<Tensor> dx = backward(saved, grads);
      if (dx.size() != n_inputs) {
        throw ArgumentError(where + ": backward returned " + std::to_string(dx.size()) +
                            " gradients, expected one per input (" + std::to_string(n_inputs) +
                            ")");
      }
      for (std::size_t i = 0; i < dx.size(); ++i) {
        if (!n.needs_input_grad(i)) dx[i] = Tensor();
      }
      return dx;
    });
    for (const Tensor& t : save) node.save(t);
  }
  return r.finish(std::move(outputs));
}

Tensor apply_function1(const char* name, const std::vector<Tensor>& inputs,
                       const FunctionForward& forward, FunctionBackward backward) {
  std::vector<Tensor> out = apply_function(name, inputs, forward, std::move(backward));
  if (out.size() != 1) {
    throw ArgumentError(std::string("op '") + name + "': forward returned " +
                        std::to_string(out.size()) + " outputs, expected 1");
  }
  return out[0];
}

}  // namespace shardscope
