// Lab 3, the instructor's solution: f and g as hand-written autograd ops, the column- and
// row-parallel linears built on them, and the MLP.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/03-tp-mlp/lab.h"
#include "labs/common/lab_support.h"
#include "parallel/layers/collective_ops.h"

namespace shardscope::labs {

ParallelTensor f_copy_to_tp(ProcessGroup& group, const ParallelTensor& x) {
  expect_placement(group.ctx().where("f_copy_to_tp"), x, Placement::replicate());
  ProcessGroup* g = &group;  // outlives the backward: it runs inside the same rank function
  Tensor y = apply_function1(
      "lab_f", {x.local},
      // forward: identity
      [](const std::vector<Tensor>& in, std::vector<Tensor>& /*save*/) { return in; },
      // backward: dx = sum over ranks of dy (on a copy: dy may be shared with other gradients)
      [g](const std::vector<Tensor>& /*saved*/, const std::vector<Tensor>& dy) {
        Tensor dx = dy[0].clone();
        g->all_reduce(dx, ReduceOp::sum);
        return std::vector<Tensor>{dx};
      });
  return ParallelTensor::make(y, Placement::replicate(), x.global, group.size());
}

ParallelTensor g_reduce_from_tp(ProcessGroup& group, const ParallelTensor& x) {
  expect_placement(group.ctx().where("g_reduce_from_tp"), x, Placement::partial());
  ProcessGroup* g = &group;
  Tensor y = apply_function1(
      "lab_g", {x.local},
      // forward: y = sum over ranks of x (into a new tensor: x stays as it was)
      [g](const std::vector<Tensor>& in, std::vector<Tensor>& /*save*/) {
        Tensor sum = in[0].clone();
        g->all_reduce(sum, ReduceOp::sum);
        return std::vector<Tensor>{sum};
      },
      // backward: identity
      [](const std::vector<Tensor>& /*saved*/, const std::vector<Tensor>& dy) { return dy; });
  return ParallelTensor::make(y, Placement::replicate(), x.global, group.size());
}

MlpWeights shard_mlp_weights(ProcessGroup& group, const MlpWeights& full) {
  auto shard = [&](const Tensor& weight, Placement placement, const char* name) {
    const Tensor slice = slice_of_full(weight, placement, group.rank(), group.size());
    return Tensor::parameter(slice, name);
  };
  MlpWeights w;
  w.fc1_weight = shard(full.fc1_weight, Placement::shard(1), "mlp.fc1.weight");  // columns
  w.fc1_bias = shard(full.fc1_bias, Placement::shard(0), "mlp.fc1.bias");
  w.fc2_weight = shard(full.fc2_weight, Placement::shard(0), "mlp.fc2.weight");  // rows
  w.fc2_bias = shard(full.fc2_bias, Placement::replicate(), "mlp.fc2.bias");
  return w;
}

ParallelTensor column_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                      const Tensor& weight_shard, const Tensor& bias_shard) {
  expect_placement(group.ctx().where("column_parallel_linear"), x, Placement::replicate());
  const int last = x.global.rank() - 1;
  Shape global = x.global;
  global[last] = weight_shard.dim(1) * group.size();
  const Tensor y = add(matmul(f_copy_to_tp(group, x).local, weight_shard), bias_shard);
  return ParallelTensor::make(y, Placement::shard(last), global, group.size());
}

ParallelTensor row_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                   const Tensor& weight_shard, const Tensor& bias) {
  const int last = x.global.rank() - 1;
  expect_placement(group.ctx().where("row_parallel_linear"), x, Placement::shard(last));
  Shape global = x.global;
  global[last] = weight_shard.dim(1);
  const ParallelTensor partial = ParallelTensor::make(matmul(x.local, weight_shard),
                                                      Placement::partial(), global, group.size());
  const ParallelTensor reduced = g_reduce_from_tp(group, partial);
  return ParallelTensor::make(add(reduced.local, bias), Placement::replicate(), global,
                              group.size());
}

ParallelTensor parallel_mlp(ProcessGroup& group, const ParallelTensor& x, const MlpWeights& shard) {
  ParallelTensor h = column_parallel_linear(group, x, shard.fc1_weight, shard.fc1_bias);
  h.local = gelu(h.local);  // elementwise: each rank applies it to its own columns
  return row_parallel_linear(group, h, shard.fc2_weight, shard.fc2_bias);
}

}  // namespace shardscope::labs
