// OpRecord and the checks the ops share.
#include "autograd/ops/record.h"

#include "autograd/errors.h"

namespace shardscope::ops_detail {
namespace {

Context& context_of(const char* op, const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) {
    if (t.defined()) return t.ctx();
  }
  throw ArgumentError(std::string("op '") + op + "': no defined input tensor");
}

// The numerical guard's hint for a non-finite output: whether an input already held NaN or Inf
// (they came from outside the checked ops) or every input was finite (this op made them).
std::string origin_hint(const std::vector<Tensor>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const NonFiniteCount count = count_non_finite(inputs[i]);
    if (count.any()) {
      return "input " + std::to_string(i) + " " + inputs[i].describe() + " already held " +
             std::to_string(count.nan) + " NaN and " + std::to_string(count.inf) +
             " Inf: they came from outside the checked ops (data, a parameter, or a value "
             "computed with the check off)";
    }
  }
  return "every input is finite: this op made them";
}

}  // namespace

OpRecord::OpRecord(const char* op, std::vector<Tensor> inputs, std::string placement)
    : op_(op),
      ctx_(context_of(op, inputs)),
      inputs_(std::move(inputs)),
      placement_(std::move(placement)) {
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const Tensor& t = inputs_[i];
    if (t.defined() && &t.ctx() != &ctx_) {
      throw ArgumentError(where() + ": input " + std::to_string(i) + " " + t.describe() +
                          " belongs to another context (rank " + std::to_string(t.ctx().rank()) +
                          ") than the op's first input (rank " + std::to_string(ctx_.rank()) + ")");
    }
    input_shapes_.push_back(t.defined() ? t.shape() : Shape());
    if (ctx_.grad_enabled() && t.defined() && t.requires_grad()) needs_grad_ = true;
  }
  seq_ = ctx_.next_seq();  // the op's number in begin and end events, and its node's
  if (ctx_.observed()) {
    const OpEvent e = event();
    ctx_.notify([&](Observer& o) { o.on_op_begin(e); });
  }
  previous_op_ = ctx_.current_op();
  ctx_.set_current_op(op_);
  begun_ = true;
}

OpEvent OpRecord::event() const {
  OpEvent e;
  e.site = ctx_.site();
  e.site.op = op_;
  e.seq = seq_;
  e.inputs = &input_shapes_;
  e.input_tensors = &inputs_;
  e.placement = placement_;
  return e;
}

OpRecord::~OpRecord() {
  if (!begun_) return;
  ctx_.set_current_op(previous_op_);
  if (finished_ || !ctx_.observed()) return;
  // The op threw: close its begin event (with no outputs) so observers stay balanced.
  const OpEvent e = event();
  try {
    ctx_.notify([&](Observer& o) { o.on_op_end(e); });
  } catch (...) {  // an exception is already propagating
  }
}

Node& OpRecord::record(Node::BackwardFn backward) {
  node_ = std::make_shared<Node>(ctx_, op_, seq_, std::move(backward));
  node_->input_shapes = input_shapes_;
  for (const Tensor& t : inputs_) {
    node_->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) {
        e.node = t.grad_fn();
        e.output_index = t.output_index();
      } else {
        e.leaf = t.impl();
      }
    }
    node_->add_edge(std::move(e));
  }
  return *node_;
}

std::vector<Tensor> OpRecord::finish(std::vector<Tensor> outs) {
  if (ctx_.check_finite()) {  // before finished_: a failed check closes the op as a throw does
    for (std::size_t i = 0; i < outs.size(); ++i) {
      if (count_non_finite(outs[i]).any()) {
        check_finite(outs[i], where(), "output " + std::to_string(i), origin_hint(inputs_));
      }
    }
  }
  std::vector<Shape> output_shapes;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    output_shapes.push_back(outs[i].shape());
    if (!node_) continue;
    TensorImpl& impl = *outs[i].impl();
    impl.grad_fn = node_;
    impl.output_index = static_cast<int>(i);
    impl.requires_grad = true;
    node_->output_dtypes.push_back(outs[i].dtype());
  }
  if (node_) node_->output_shapes = output_shapes;
  finished_ = true;
  if (ctx_.observed()) {
    OpEvent e = event();
    e.outputs = &output_shapes;
    e.output_tensors = &outs;
    ctx_.notify([&](Observer& o) { o.on_op_end(e); });
  }
  return outs;
}

Tensor OpRecord::finish(Tensor out) {
  std::vector<Tensor> outs{std::move(out)};
  return std::move(finish(std::move(outs))[0]);
}

void check_defined(const OpRecord& r, const Tensor& t, const char* what) {
  if (!t.defined()) throw ArgumentError(r.where() + ": " + what + " is an undefined tensor");
}

void check_floating(const OpRecord& r, const Tensor& t, const char* what) {
  check_defined(r, t, what);
  if (!is_floating(t.dtype())) {
    throw DTypeError(r.where() + ": " + what + " must be floating (f32, f64, bf16 or f16), given " +
                     t.describe());
  }
}

void check_same_dtype(const OpRecord& r, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw DTypeError(r.where() + ": dtype mismatch: " + a.describe() + " and " + b.describe());
  }
}

void check_same_shape(const OpRecord& r, const Tensor& a, const char* a_what, const Tensor& b,
                      const char* b_what) {
  if (a.shape() != b.shape()) {
    throw ShapeError(r.where() + ": " + a_what + " " + a.describe() + " and " + b_what + " " +
                     b.describe() + " must have the same shape");
  }
}

int checked_dim(const std::string& where, const Tensor& x, int dim) {
  if (!x.defined()) throw ArgumentError(where + ": x is an undefined tensor");
  const int r = x.rank();
  const int d = dim < 0 ? dim + r : dim;
  if (d < 0 || d >= r) {
    throw ShapeError(where + ": dim " + std::to_string(dim) + " is out of range for " +
                     x.describe() + " (rank " + std::to_string(r) + ")");
  }
  return d;
}

bool is_suffix(const Shape& suffix, const Shape& full) {
  if (suffix.rank() > full.rank()) return false;
  const int offset = full.rank() - suffix.rank();
  for (int i = 0; i < suffix.rank(); ++i) {
    if (suffix[i] != full[offset + i]) return false;
  }
  return true;
}

Tensor accumulation_target(const Node& node, std::size_t i) {
  const Edge& edge = node.edges().at(i);
  if (!edge.leaf || !edge.leaf->requires_grad || node.ctx().check_finite()) return Tensor();
  const Tensor& grad = edge.leaf->grad;
  if (!grad.defined() || &grad.ctx() != &node.ctx() || grad.shape() != node.input_shapes.at(i) ||
      grad.dtype() != node.input_dtypes.at(i)) {
    return Tensor();
  }
  return grad;
}

Tensor new_like(const Tensor& like) {
  return Tensor::uninitialized(like.ctx(), like.shape(), like.dtype());
}

Tensor new_tensor(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::uninitialized(ctx, shape, dtype);
}

}  // namespace shardscope::ops_detail
