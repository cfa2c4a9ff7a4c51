// Lab 3: the tensor-parallel MLP. Your file: replace each TODO with your code (lab.h gives every
// function's contract). Run the tests with `shardscope lab 3`; README.md explains the background.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/03-tp-mlp/lab.h"
#include "labs/common/lab_support.h"
#include "parallel/layers/collective_ops.h"

namespace shardscope::labs {

ParallelTensor f_copy_to_tp(ProcessGroup& /*group*/, const ParallelTensor& /*x*/) {
  // TODO(task 1): f = identity forward, all-reduce backward, as one op:
  //   Tensor y = apply_function1("lab_f", {x.local}, forward, backward);
  // - forward(inputs, save) returns the inputs as they are (nothing to save);
  // - backward(saved, dy) returns {dx} with dx = sum over ranks of dy[0]: clone dy[0], then
  //   group.all_reduce(dx, ReduceOp::sum). The lambda captures the group by pointer.
  // - return ParallelTensor::make(y, Placement::replicate(), x.global, group.size()).
  // expect_placement(group.ctx().where("f_copy_to_tp"), x, Placement::replicate()) first turns a
  // wrong input placement into a clear error.
  not_implemented("f_copy_to_tp");
}

ParallelTensor g_reduce_from_tp(ProcessGroup& /*group*/, const ParallelTensor& /*x*/) {
  // TODO(task 2): g = all-reduce forward, identity backward: the mirror image of f.
  // - forward: all-reduce a clone of inputs[0] (never the input itself: x must stay as it was);
  // - backward: return dy as it is;
  // - x is Partial, the result Replicate with x.global.
  not_implemented("g_reduce_from_tp");
}

MlpWeights shard_mlp_weights(ProcessGroup& /*group*/, const MlpWeights& /*full*/) {
  // TODO(task 3): slice_of_full(full_tensor, placement, group.rank(), group.size())
  // (parallel/layers/collective_ops.h) cuts this rank's slice; Tensor::parameter(slice,
  // "mlp.fc1.weight") makes it a leaf that collects its gradient. Which placement for each of the
  // four tensors? (parallel/layers/parallel_layer.cpp, tp_placement, does the same for the whole
  // layer.)
  not_implemented("shard_mlp_weights");
}

ParallelTensor column_parallel_linear(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                      const Tensor& /*weight_shard*/,
                                      const Tensor& /*bias_shard*/) {
  // TODO(task 4): f on x, then add(matmul(..., weight_shard), bias_shard). The output is
  // Shard(last dim) and its global last dim is weight_shard.dim(1) * t.
  not_implemented("column_parallel_linear");
}

ParallelTensor row_parallel_linear(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                   const Tensor& /*weight_shard*/, const Tensor& /*bias*/) {
  // TODO(task 5): matmul(x.local, weight_shard) is this rank's Partial term of x W; g sums the
  // terms; then add the bias, once. The global last dim is weight_shard.dim(1).
  not_implemented("row_parallel_linear");
}

ParallelTensor parallel_mlp(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                            const MlpWeights& /*shard*/) {
  // TODO(task 6): fc1 column parallel -> gelu on the local columns -> fc2 row parallel.
  not_implemented("parallel_mlp");
}

}  // namespace shardscope::labs
