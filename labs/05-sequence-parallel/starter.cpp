// Lab 5: sequence parallelism. Your file: replace each TODO with your code (lab.h gives every
// function's contract). Run the tests with `shardscope lab 5`; README.md explains the background.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/05-sequence-parallel/lab.h"
#include "labs/common/lab_support.h"

namespace shardscope::labs {

ParallelTensor g_gather_seq(ProcessGroup& /*group*/, const ParallelTensor& /*x*/) {
  // TODO(task 1): g = all-gather forward, reduce-scatter backward, as one op:
  //   Tensor y = apply_function1("lab_g", {x.local}, forward, backward);
  // - expect_placement(group.ctx().where("g_gather_seq"), x, Placement::shard(0)) first;
  // - forward(inputs, save): group.all_gather(inputs[0]) concatenates the ranks' [s/t, b, h]
  //   along dim 0 in rank order; nothing to save;
  // - backward(saved, dy): group.reduce_scatter(dy[0]) sums the ranks' [s, b, h] gradients and
  //   keeps this rank's s/t rows. The lambdas capture the group by pointer (ProcessGroup* g).
  // - return ParallelTensor::make(y, Placement::replicate(), x.global, group.size()).
  // parallel/layers/collective_ops.cpp (gather_seq) is the framework's version: read it after
  // yours.
  not_implemented("g_gather_seq");
}

ParallelTensor g_bar_reduce_scatter_seq(ProcessGroup& /*group*/, const ParallelTensor& /*x*/) {
  // TODO(task 2): g-bar = reduce-scatter forward, all-gather backward: the mirror image of g.
  // - x is Partial (check it), the result Shard(0) with x.global;
  // - forward: group.reduce_scatter(inputs[0]) (a new tensor: x is left as it was);
  // - backward: group.all_gather(dy[0]).
  not_implemented("g_bar_reduce_scatter_seq");
}

ParallelTensor sequence_parallel_layernorm(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                           const Tensor& /*gamma*/, const Tensor& /*beta*/,
                                           double /*eps*/) {
  // TODO(task 3): check that x is Shard(0), then layernorm(x.local, gamma, beta, eps) on this
  // rank's rows. Does a row's LayerNorm need anything from another rank? What does that make the
  // gradient of gamma on one rank?
  not_implemented("sequence_parallel_layernorm");
}

void all_reduce_partial_gradients(ProcessGroup& /*group*/,
                                  const std::vector<BlockParameter>& /*params*/) {
  // TODO(task 4): for each parameter whose placement is Placement::replicate() and whose
  // tensor.grad() is defined: Tensor grad = p.tensor.grad(); then
  // group.all_reduce(grad, ReduceOp::sum, CommPurpose::param_grad) reduces it in place.
  // Which gradients are partial, and which are already whole? (The framework's version is
  // ParallelTransformerLayer::reduce_parameter_gradients in parallel/layers/parallel_layer.cpp; see
  // which parameters it marks partial_grad in the constructor.)
  not_implemented("all_reduce_partial_gradients");
}

ParallelTensor sp_mlp_block(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                            const SpMlpWeights& /*w*/) {
  // TODO(task 5): LayerNorm (task 3) -> g (task 1) -> add(matmul(., w.fc1_weight), w.fc1_bias)
  // -> gelu -> matmul(., w.fc2_weight) as a Partial of x.global -> g-bar (task 2) -> add fc2's
  // bias -> Shard(0). Use matmul and add directly: the framework's column_parallel_linear and
  // row_parallel_linear bring their own collectives.
  not_implemented("sp_mlp_block");
}

SavedBytes predict_saved_bytes(const BlockShape& /*shape*/, Layout /*layout*/) {
  // TODO(task 6): list what each op of the block saves for backward (layernorm: its input, and the
  // mean and rstd per row; matmul: its input; gelu: its input; add, g and g-bar: nothing) and its
  // shape in each layout. docs/derivations.md ("Activation memory per mode, per rank") has the
  // whole layer's table; parallel/models/memory_model.cpp writes it in code.
  not_implemented("predict_saved_bytes");
}

CommBytes predict_comm_bytes(const BlockShape& /*shape*/, Layout /*layout*/) {
  // TODO(task 7): list the collectives of each layout, forward and backward, and the gradient
  // all-reduces after backward; price each by the ring formula (lab.h,
  // parallel/models/comm_model.h).
  not_implemented("predict_comm_bytes");
}

}  // namespace shardscope::labs
