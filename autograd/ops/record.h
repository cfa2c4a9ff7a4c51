// OpRecord: the bookkeeping every forward op shares. It announces the op to observers (a debugger
// may pause here), attributes allocations to it, creates its Node with one edge per input when a
// gradient is needed, and wires the outputs to that node.
#pragma once

#include <string>
#include <vector>

#include "autograd/node.h"

namespace shardscope::ops_detail {

class OpRecord {
 public:
  // `placement` describes a parallel op's input and output placements for observers (traces):
  // "Shard(0) -> Replicate". Plain ops leave it empty.
  OpRecord(const char* op, std::vector<Tensor> inputs, std::string placement = {});
  ~OpRecord();
  OpRecord(const OpRecord&) = delete;
  OpRecord& operator=(const OpRecord&) = delete;

  Context& ctx() const { return ctx_; }
  const char* op() const { return op_; }
  // "op 'matmul' in attn.qkv (layer 0, forward, rank 0)" for error messages.
  std::string where() const { return ctx_.where(op_); }
  bool needs_grad() const { return needs_grad_; }
  // Creates the node (call only when needs_grad()). The backward function must not capture
  // tensors: whatever backward needs goes through node->save() so it is counted.
  Node& record(Node::BackwardFn backward);
  Tensor finish(Tensor out);
  std::vector<Tensor> finish(std::vector<Tensor> outs);

 private:
  OpEvent event() const;  // the begin (and failed end) event of this op

  const char* op_;
  Context& ctx_;
  std::vector<Tensor> inputs_;
  std::vector<Shape> input_shapes_;
  std::string placement_;
  std::shared_ptr<Node> node_;
  std::string previous_op_;
  std::uint64_t seq_ = 0;
  bool needs_grad_ = false;
  bool begun_ = false;
  bool finished_ = false;
};

// Checks shared by the ops; each throws with the op's where() in the message.
void check_defined(const OpRecord& r, const Tensor& t, const char* what);
void check_floating(const OpRecord& r, const Tensor& t, const char* what);
void check_same_dtype(const OpRecord& r, const Tensor& a, const Tensor& b);
void check_same_shape(const OpRecord& r, const Tensor& a, const char* a_what, const Tensor& b,
                      const char* b_what);
// `dim` of `x` in 0..rank-1 (negative counts from the end); throws ShapeError prefixed with
// `where` when out of range, ArgumentError when x is undefined.
int checked_dim(const std::string& where, const Tensor& x, int dim);

// True when `suffix` equals the trailing dims of `full` (bias broadcasting).
bool is_suffix(const Shape& suffix, const Shape& full);
// The gradient of a broadcast operand of `shape` (a suffix of dy's): dy summed over the dims it
// was repeated along; dy itself when the shapes are equal.
Tensor reduce_to(const Tensor& dy, const Shape& shape);

// Matrix products on values (no graph, no events), for ops built from other ops' math such as a
// fused sequence-parallel linear. x is [..., in], w [in, out], dy [..., out].
// x w: [..., out]; with a bias [out], x w + bias in one GEMM (its output starts as the bias rows).
Tensor linear_values(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
Tensor linear_grad_input(const Tensor& dy, const Tensor& w);  // dy w^T: [..., in]
// x^T dy: [in, out]; with `into` defined (accumulation_target), added into it and `into` returned.
Tensor linear_grad_weight(const Tensor& x, const Tensor& dy, const Tensor& into = Tensor());

// Gradient-accumulation fusion (Megatron-LM's gradient_accumulation_fusion): where input `i` of
// `node` is a leaf that already holds a gradient of the input's shape and dtype (a step that
// accumulates into the last one's, micro-batch after micro-batch), that gradient, for the
// backward's product to add its contribution into (beta 1) and return as the input's gradient:
// the engine then leaves the leaf's gradient as it is (Engine: accumulate_into_leaf), where a new
// tensor would cost BLAS's pass that zeroes it and the engine's add over both. Undefined when the
// input is no such leaf, and under Context::check_finite, whose sums are checked before they are
// stored.
Tensor accumulation_target(const Node& node, std::size_t i);

// A new tensor in the op's context with `like`'s shape and dtype (or the given ones), for an
// output the op writes whole: its memory starts with any content (Tensor::uninitialized; NaN
// under the test presets). An output the op writes only in part is Tensor::zeros.
Tensor new_like(const Tensor& like);
Tensor new_tensor(Context& ctx, const Shape& shape, DType dtype);

}  // namespace shardscope::ops_detail
