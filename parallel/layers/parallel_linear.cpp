// Column- and row-parallel linears.
#include "parallel/layers/parallel_linear.h"

#include "autograd/ops.h"
#include "autograd/ops/record.h"
#include "parallel/layers/collective_ops.h"

namespace shardscope {
namespace {

// The sequence all-gather of x [s/t, b, in] -> [s, b, in].
Tensor gather_sequence(ProcessGroup& g, const Tensor& x_shard, PlantedBug bug) {
  if (bug != PlantedBug::sp_gather_wrong_dim) return g.all_gather(x_shard);
  // PLANTED BUG sp-gather-wrong-dim: gathered along dim 1 (batch), [s/t, b t, in], and then read
  // as [s, b, in]: the same bytes, so no shape error, but the positions of the ranks' shards
  // interleave instead of following each other.
  Tensor wrong = gather_to_full(g, x_shard, Placement::shard(1), CommPurpose::activation).detach();
  Shape s = x_shard.shape();
  s[0] *= g.size();
  wrong.impl()->shape = s;
  return wrong;
}

}  // namespace

Tensor gather_matmul(ProcessGroup& g, const Tensor& x_shard, const Tensor& weight,
                     bool keep_gathered_input, PlantedBug bug) {
  ops_detail::OpRecord r("gather_matmul", {x_shard, weight},
                         "Shard(0) -> Shard(" + std::to_string(x_shard.rank() - 1) + ")");
  ops_detail::check_floating(r, x_shard, "x");
  ops_detail::check_same_dtype(r, x_shard, weight);
  if (weight.rank() != 2 || x_shard.rank() < 2 || x_shard.dim(-1) != weight.dim(0)) {
    throw ShapeError(r.where() + ": x " + x_shard.describe() + " and weight " + weight.describe() +
                     " need x [..., in] and weight [in, out]");
  }
  Tensor total = gather_sequence(g, x_shard, bug);  // [s, ..., in]
  Tensor y = ops_detail::linear_values(total, weight);
  if (r.needs_grad()) {
    ProcessGroup* group = &g;
    // dW = total^T dY (total re-gathered unless kept); dx = reduce_scatter(dY W^T)
    Node& node =
        r.record([group, keep_gathered_input, bug](Node& n, const std::vector<Tensor>& grads) {
          const Tensor& dy = grads[0];
          Tensor dx, dw;
          if (n.needs_input_grad(1)) {
            const Tensor full =
                keep_gathered_input ? n.saved(0) : gather_sequence(*group, n.saved(0), bug);
            dw = ops_detail::linear_grad_weight(full, dy);
          }
          if (n.needs_input_grad(0))
            dx = group->reduce_scatter(ops_detail::linear_grad_input(dy, n.saved(1)));
          return std::vector<Tensor>{dx, dw};
        });
    node.save(keep_gathered_input ? total : x_shard);
    node.save(weight);
  }
  return r.finish(y);
}

ParallelTensor column_parallel_linear(ProcessGroup& g, const ParallelTensor& x,
                                      const Tensor& weight_shard, const Tensor& bias_shard,
                                      const ParallelLinearOptions& options) {
  Shape global = x.global;
  global[global.rank() - 1] = weight_shard.dim(1) * g.size();
  const Placement out = Placement::shard(global.rank() - 1);
  Tensor y;
  if (options.sequence_parallel) {
    expect_placement(x.local.ctx().where("column_parallel_linear (sequence parallel)"), x,
                     Placement::shard(0));
    global[0] = x.global[0];
    y = gather_matmul(g, x.local, weight_shard, options.keep_gathered_input, options.planted_bug);
  } else {
    y = matmul(copy_to_tp(g, x, options.planted_bug).local, weight_shard);
  }
  if (bias_shard.defined()) y = add(y, bias_shard);
  return ParallelTensor::make(y, out, global, g.size());
}

ParallelTensor row_parallel_linear(ProcessGroup& g, const ParallelTensor& x,
                                   const Tensor& weight_shard, const Tensor& bias,
                                   const ParallelLinearOptions& options) {
  const int last = x.global.rank() - 1;
  expect_placement(x.local.ctx().where("row_parallel_linear"), x, Placement::shard(last));
  Shape global = x.global;
  global[last] = weight_shard.dim(1);
  Tensor partial_sum = matmul(x.local, weight_shard);
  // PLANTED BUG row-bias-added-every-rank: the bias added to each rank's partial sum, as a
  // single-device linear would, so the all-reduce (or reduce-scatter) adds it t times.
  const bool bias_on_every_rank = options.planted_bug == PlantedBug::row_bias_added_every_rank;
  if (bias_on_every_rank) partial_sum = add(partial_sum, bias);
  const ParallelTensor partial =
      ParallelTensor::make(partial_sum, Placement::partial(), global, g.size());
  const ParallelTensor reduced =
      options.sequence_parallel ? reduce_scatter_seq(g, partial) : reduce_from_tp(g, partial);
  if (bias_on_every_rank || !bias.defined()) return reduced;
  return ParallelTensor{add(reduced.local, bias), reduced.placement, reduced.global};
}

}  // namespace shardscope
