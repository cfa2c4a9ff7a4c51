// Node: saved tensors, their accounting, and the checked call of the backward function.
#include "autograd/node.h"

#include "autograd/errors.h"

namespace shardscope {
namespace {

// The numerical guard's hint for a non-finite gradient: whether one flowing in already held NaN or
// Inf or all were finite (this node's backward made them).
std::string incoming_hint(const std::vector<Tensor>& grad_outputs) {
  for (std::size_t j = 0; j < grad_outputs.size(); ++j) {
    const NonFiniteCount count = count_non_finite(grad_outputs[j]);
    if (count.any()) {
      return "the gradient of output " + std::to_string(j) + " flowing in already held " +
             std::to_string(count.nan) + " NaN and " + std::to_string(count.inf) + " Inf";
    }
  }
  return "the gradients flowing in are finite: this backward made them";
}

}  // namespace

Node::Node(Context& ctx, std::string op, std::uint64_t seq, BackwardFn backward)
    : ctx_(ctx),
      op_(std::move(op)),
      scope_(ctx.scope()),
      layer_(ctx.layer()),
      seq_(seq),
      backward_(std::move(backward)) {}

Node::~Node() {
  // A graph dropped without backward still releases what it saved, so ledgers balance.
  if (!released_) release_saved();
  // Tear down the producers this node alone keeps alive with an explicit stack: destroying a
  // long chain through nested shared_ptr destructors would recurse once per op.
  std::vector<std::shared_ptr<Node>> doomed;
  auto take_sole = [&doomed](std::vector<Edge>& edges) {
    for (Edge& e : edges) {
      if (e.node && e.node.use_count() == 1) doomed.push_back(std::move(e.node));
    }
  };
  take_sole(edges_);
  while (!doomed.empty()) {
    std::shared_ptr<Node> n = std::move(doomed.back());
    doomed.pop_back();
    take_sole(n->edges_);
  }  // n dies here with no sole-owned producers left, so its destructor does not recurse
}

Site Node::site(Phase phase) const {
  Site s;
  s.op = op_;
  s.scope = scope_;
  s.phase = phase;
  s.layer = layer_;
  s.step = ctx_.step();
  s.rank = ctx_.rank();
  return s;
}

std::string Node::where() const {
  return format_where(op_, scope_, layer_, Phase::backward, ctx_.rank());
}

SaveEvent Node::save_event(const Tensor& t, SaveRole role, Phase phase) const {
  SaveEvent e;
  e.site = site(phase);
  e.storage_id = t.storage()->id();
  e.bytes = t.storage()->bytes();
  e.data = t.storage()->data();
  e.role = role;
  e.storage_category = t.storage()->category();
  return e;
}

void Node::save(const Tensor& t, SaveRole role) {
  if (released_) throw StateError(where() + ": save() after its saved tensors were released");
  if (!t.defined()) {  // a placeholder: backward will not need this slot
    saved_.emplace_back();
    roles_.push_back(role);
    return;
  }
  Tensor kept = t.detach();  // no grad_fn: a node never keeps its own output's history alive
  if (ctx_.observed()) {
    const SaveEvent e = save_event(kept, role, Phase::forward);
    ctx_.notify([&](Observer& o) { o.on_save(e); });
  }
  saved_.push_back(std::move(kept));
  roles_.push_back(role);
}

const Tensor& Node::saved(std::size_t i) const {
  if (released_) {
    throw StateError(where() +
                     ": its saved tensors were already released by an earlier backward; run "
                     "the forward again before calling backward a second time");
  }
  return saved_.at(i);
}

void Node::release_saved() {
  if (released_) return;
  released_ = true;
  if (ctx_.observed()) {
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined()) continue;
      const SaveEvent e = save_event(saved_[i], roles_[i], Phase::backward);
      ctx_.notify([&](Observer& o) { o.on_release(e); });
    }
  }
  saved_.clear();
  roles_.clear();
}

std::vector<Tensor> Node::apply(const std::vector<Tensor>& grad_outputs) {
  if (released_) {
    throw StateError(where() +
                     ": backward through this graph a second time; its saved tensors were "
                     "released by the first backward (run the forward again)");
  }
  std::vector<Tensor> grads = backward_(*this, grad_outputs);
  if (grads.size() != edges_.size()) {
    throw StateError(where() + ": backward returned " + std::to_string(grads.size()) +
                     " gradients for " + std::to_string(edges_.size()) + " inputs");
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!edges_[i].active() || !grads[i].defined()) continue;
    const std::string which = "gradient of input " + std::to_string(i);
    if (grads[i].shape() != input_shapes.at(i)) {
      throw ShapeError(where() + ": " + which + " has shape " + grads[i].shape().str() +
                       ", expected " + input_shapes[i].str());
    }
    if (grads[i].dtype() != input_dtypes.at(i)) {
      throw DTypeError(where() + ": " + which + " is " + dtype_name(grads[i].dtype()) +
                       ", expected " + dtype_name(input_dtypes[i]));
    }
    if (&grads[i].ctx() != &ctx_) {
      throw ArgumentError(where() + ": " + which + " belongs to another context (rank " +
                          std::to_string(grads[i].ctx().rank()) + ")");
    }
    if (ctx_.check_finite() && count_non_finite(grads[i]).any()) {
      check_finite(grads[i], where(), which, incoming_hint(grad_outputs));
    }
  }
  return grads;
}

}  // namespace shardscope
