// checkpoint: a forward without its graph, and a backward that recomputes it.
#include "autograd/checkpoint.h"

#include <string>

#include "autograd/context.h"
#include "autograd/engine.h"
#include "autograd/errors.h"
#include "autograd/node.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

// The context as the forward had it around fn: phase forward, the gradient on, no scope (fn sets
// its own), and the checkpoint's layer; restored on exit, also when fn throws.
class RecomputeState {
 public:
  RecomputeState(Context& ctx, int layer) : saved_(ctx) {
    ctx.exchange_scope("");
    ctx.set_phase(Phase::forward);
    ctx.set_grad_enabled(true);
    ctx.set_layer(layer);
  }

 private:
  EngineStateGuard saved_;
};

void check_output(const Tensor& out, Context& ctx, const std::string& where) {
  if (!out.defined()) throw ArgumentError(where + ": the checkpointed function returned no tensor");
  if (&out.ctx() != &ctx) {
    throw ArgumentError(where + ": the checkpointed function returned " + out.describe() +
                        " of rank " + std::to_string(out.ctx().rank()) +
                        "'s context, its inputs are rank " + std::to_string(ctx.rank()) + "'s");
  }
}

}  // namespace

Tensor checkpoint(const char* scope, const std::vector<Tensor>& inputs, const CheckpointFn& fn) {
  if (inputs.empty() || !inputs.front().defined()) {
    throw ArgumentError(std::string("checkpoint in ") + scope + ": no defined input tensor");
  }
  Context& ctx = inputs.front().ctx();
  Tensor out;
  {
    NoGradGuard no_graph(ctx);
    out = fn(inputs);
  }
  ScopeGuard in_scope(ctx, scope);
  ops_detail::OpRecord r("checkpoint", inputs);
  check_output(out, ctx, r.where());
  if (r.needs_grad()) {
    Node& node = r.record([fn](Node& n, const std::vector<Tensor>& grads) {
      std::vector<Tensor> leaves;
      for (std::size_t i = 0; i < n.saved_count(); ++i) {
        Tensor leaf = n.saved(i).detach();
        if (n.needs_input_grad(i)) leaf.set_requires_grad(true);
        leaves.push_back(leaf);
      }
      Tensor again;
      {
        RecomputeState forward(n.ctx(), n.layer());
        again = fn(leaves);
      }
      check_output(again, n.ctx(), n.where());
      std::vector<Tensor> dx(leaves.size());
      if (!again.requires_grad()) return dx;  // nothing in fn takes a gradient
      run_backward(again, grads.at(0));
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        if (n.needs_input_grad(i)) dx[i] = leaves[i].grad();
      }
      return dx;
    });
    for (const Tensor& t : inputs) node.save(t);
  }
  return r.finish(out.detach());
}

}  // namespace shardscope
