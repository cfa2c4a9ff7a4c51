// Engine: reverse-mode differentiation over the recorded graph, without recursion.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/backend.h"
#include "autograd/errors.h"
#include "autograd/node.h"

namespace shardscope {
namespace {

// Sets the context to backward, no-grad, and the running node's scope/layer; restores on exit.
class BackwardState {
 public:
  explicit BackwardState(Context& ctx) : ctx_(ctx), saved_(ctx) {
    ctx.exchange_scope("");
    ctx.set_phase(Phase::backward);
    ctx.set_grad_enabled(false);
  }
  BackwardState(const BackwardState&) = delete;
  BackwardState& operator=(const BackwardState&) = delete;

  void enter(const Node& node) {
    ctx_.set_layer(node.layer());
    ctx_.set_current_op(node.op());
    ctx_.exchange_scope(node.scope());
  }

 private:
  Context& ctx_;
  EngineStateGuard saved_;
};

// The numerical guard on a sum: `n`'s gradient of input `i`, finite, added to `onto`.
std::string gradient_sum_what(std::size_t i, const char* onto) {
  return "gradient of input " + std::to_string(i) + " added to " + onto;
}

// Whether `g` can become the leaf's gradient as it is, as PyTorch's AccumulateGrad takes a
// gradient nothing else holds: its tensor and its storage referenced only by the backward's list
// of gradients (no view, no observer or caller keeping it), in the leaf's context, of its shape
// and dtype, and no graph of its own.
bool adoptable(const TensorImpl& leaf, const Tensor& g) {
  return g.impl().use_count() == 1 && g.storage().use_count() == 1 && !g.requires_grad() &&
         !g.grad_fn() && g.impl()->ctx == leaf.ctx && g.shape() == leaf.shape &&
         g.dtype() == leaf.dtype;
}

// Adds `g`, the gradient of input `i` of node `n` (null: the seed of a backward from the leaf
// itself), into the leaf's gradient. When it has none, `g` becomes it (adoptable: no copy, no
// second buffer at the peak), else a copy. Under the numerical guard a sum is made aside and
// checked before it is stored, so a failed check leaves the leaf's gradient as it was (a copy of
// a checked gradient needs no look).
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g, const Node* n, std::size_t i) {
  // A backward that added its contribution into the leaf's gradient itself hands that gradient
  // back (ops_detail::accumulation_target): nothing is left to add. (A seed that is the leaf's
  // own gradient, root.backward(root.grad()), is added as any seed.)
  if (n != nullptr && leaf.grad.defined() && g.impl() == leaf.grad.impl()) return;
  Context& ctx = *leaf.ctx;
  if (!leaf.grad.defined() && adoptable(leaf, g)) {
    g.storage()->set_category(MemoryCategory::gradient);
    leaf.grad = g;
    return;
  }
  if (!leaf.grad.defined()) {
    Tensor fresh = Tensor::uninitialized(ctx, leaf.shape, leaf.dtype);  // the copy fills it
    fresh.storage()->set_category(MemoryCategory::gradient);
    ctx.backend().copy(g, fresh);
    leaf.grad = fresh;
    return;
  }
  if (!ctx.check_finite()) {
    ctx.backend().add(leaf.grad, g, 1.0, 1.0, leaf.grad);
    return;
  }
  Tensor sum = Tensor::uninitialized(ctx, leaf.shape, leaf.dtype);
  ctx.backend().add(leaf.grad, g, 1.0, 1.0, sum);
  check_finite(sum, n ? n->where() : "backward of a leaf " + g.describe(),
               n ? gradient_sum_what(i, "the leaf's gradient so far")
                 : "the gradient given to backward() added to the leaf's gradient so far",
               "the gradient coming in was finite: the sum overflowed, or the leaf's gradient "
               "already held NaN or Inf");
  ctx.backend().copy(sum, leaf.grad);
}

Tensor sum_gradients(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::uninitialized(a.ctx(), a.shape(), a.dtype());
  a.ctx().backend().add(a, b, 1.0, 1.0, out);
  return out;
}

Tensor seed_gradient(const Tensor& root, const Tensor& grad) {
  if (!grad.defined()) {
    if (root.numel() != 1) {
      throw StateError("backward() without a gradient needs a one-element output, given " +
                       root.describe() +
                       (root.grad_fn() ? " from " + root.grad_fn()->where() : "") +
                       "; pass a gradient of shape " + root.shape().str());
    }
    return Tensor::full(root.ctx(), root.shape(), 1.0, root.dtype());
  }
  if (&grad.ctx() != &root.ctx()) {
    throw ArgumentError("backward: the gradient " + grad.describe() + " belongs to rank " +
                        std::to_string(grad.ctx().rank()) + "'s context, the output " +
                        root.describe() + " to rank " + std::to_string(root.ctx().rank()) + "'s");
  }
  if (grad.dtype() != root.dtype()) {
    throw DTypeError("backward: the gradient must match the output " + root.describe() +
                     ", given " + grad.describe());
  }
  if (grad.shape() != root.shape()) {
    throw ShapeError("backward: the gradient must match the output " + root.describe() +
                     ", given " + grad.describe());
  }
  return grad;
}

// Counts, for every node reachable from `root`, how many edges lead into it.
std::unordered_map<Node*, int> count_dependencies(Node* root) {
  std::unordered_map<Node*, int> deps{{root, 0}};
  std::unordered_set<Node*> seen{root};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges()) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return deps;
}

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->seq() < b->seq(); }
};

OpEvent backward_event(const Node& n) {
  OpEvent e;
  e.site = n.site(Phase::backward);
  e.seq = n.seq();
  e.inputs = &n.output_shapes;  // the gradients flowing in
  e.outputs = &n.input_shapes;  // the gradients flowing out
  return e;
}

// Runs one node's backward on its summed gradients (zeros for outputs that got none) and
// releases what it saved. A node that received no gradient at all is skipped: its inputs get
// none either, and its saved tensors stay for a later backward that does reach it.
std::vector<Tensor> run_node(Context& ctx, BackwardState& state, Node& n,
                             std::vector<Tensor> grads) {
  grads.resize(n.output_shapes.size());
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return std::vector<Tensor>(n.edges().size());
  state.enter(n);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) grads[i] = Tensor::zeros(ctx, n.output_shapes[i], n.output_dtypes[i]);
  }
  OpEvent event = backward_event(n);
  event.input_tensors = &grads;
  if (ctx.observed()) ctx.notify([&](Observer& o) { o.on_op_begin(event); });
  event.input_tensors = nullptr;  // the end event's tensors are the gradients flowing out
  std::vector<Tensor> input_grads;
  try {
    input_grads = n.apply(grads);
  } catch (...) {
    // Close the begin event (with no outputs, as a forward op that threw) so observers stay
    // balanced, then let the error go on.
    if (ctx.observed()) {
      OpEvent failed = event;
      failed.outputs = nullptr;
      failed.output_tensors = nullptr;
      try {
        ctx.notify([&](Observer& o) { o.on_op_end(failed); });
      } catch (...) {  // the node's own error is the one to report
      }
    }
    throw;
  }
  grads.clear();
  n.release_saved();
  event.output_tensors = &input_grads;
  if (ctx.observed()) ctx.notify([&](Observer& o) { o.on_op_end(event); });
  return input_grads;
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad) {
  if (!root.requires_grad()) {
    throw StateError("backward on " + root.describe() +
                     ", which does not require grad: no recorded op leads to it from a tensor "
                     "that requires grad (or it was computed under NoGradGuard)");
  }
  Context& ctx = root.ctx();
  BackwardState state(ctx);
  Tensor seed = seed_gradient(root, grad);
  if (ctx.check_finite()) {
    const std::string where =
        root.grad_fn() ? root.grad_fn()->where() : "backward of " + root.describe();
    check_finite(seed, where, "the gradient given to backward()");
  }
  if (root.is_leaf()) {
    accumulate_into_leaf(*root.impl(), seed, nullptr, 0);
    return;
  }
  Node* root_node = root.grad_fn().get();
  std::unordered_map<Node*, int> deps = count_dependencies(root_node);
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  pending[root_node].resize(root_node->output_shapes.size());
  pending[root_node][static_cast<std::size_t>(root.output_index())] = seed;
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  ready.push(root_node);

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(pending[n]);
    pending.erase(n);
    const std::vector<Tensor> input_grads = run_node(ctx, state, *n, std::move(grads));
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Edge& e = n->edges()[i];
      const Tensor& g = input_grads[i];
      if (e.leaf && g.defined() && e.leaf->requires_grad) {
        accumulate_into_leaf(*e.leaf, g, n, i);
      }
      if (!e.node) continue;
      if (g.defined()) {
        std::vector<Tensor>& slot = pending[e.node.get()];
        slot.resize(e.node->output_shapes.size());
        Tensor& acc = slot[static_cast<std::size_t>(e.output_index)];
        if (acc.defined()) {
          acc = sum_gradients(acc, g);
          if (ctx.check_finite()) {
            check_finite(acc, n->where(), gradient_sum_what(i, "the gradient of its other uses"),
                         "both were finite: the sum overflowed");
          }
        } else {
          acc = g;
        }
      }
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace shardscope
