// Column- and row-parallel linears.
#include "parallel/layers/parallel_linear.h"

#include "autograd/errors.h"
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

Tensor concat_biases(const std::vector<Tensor>& biases) {
  if (biases.empty()) return Tensor();
  return biases.size() == 1 ? biases[0] : concat(biases, 0);
}

namespace {

// x w + b as one op, a matmul with the bias as a third input: its output starts as the bias rows
// and the GEMM adds x w into them (ops_detail::linear_values). Backward: matmul's, and the bias's
// gradient dy summed over the rows.
Tensor biased_matmul(const Tensor& x, const Tensor& w, const Tensor& b) {
  ops_detail::OpRecord r("matmul", {x, w, b});
  ops_detail::check_floating(r, x, "x");
  ops_detail::check_same_dtype(r, x, w);
  ops_detail::check_same_dtype(r, x, b);
  if (w.rank() != 2 || x.rank() < 2 || x.dim(-1) != w.dim(0) || b.rank() != 1 ||
      b.dim(0) != w.dim(1)) {
    throw ShapeError(r.where() + ": x " + x.describe() + ", weight " + w.describe() + " and bias " +
                     b.describe() + " need x [..., in], weight [in, out] and bias [out]");
  }
  Tensor y = ops_detail::linear_values(x, w, b);
  if (r.needs_grad()) {
    Node& node = r.record([](Node& self, const std::vector<Tensor>& grads) {
      const Tensor& dy = grads[0];
      std::vector<Tensor> out(3);
      if (self.needs_input_grad(0)) out[0] = ops_detail::linear_grad_input(dy, self.saved(1));
      if (self.needs_input_grad(1)) {
        out[1] = ops_detail::linear_grad_weight(self.saved(0), dy,
                                                ops_detail::accumulation_target(self, 1));
      }
      if (self.needs_input_grad(2)) out[2] = ops_detail::reduce_to(dy, self.input_shapes[2]);
      return out;
    });
    // dx needs w and dw needs x, as matmul keeps them; the bias's gradient needs neither.
    node.save(node.needs_input_grad(1) ? x : Tensor());
    node.save(node.needs_input_grad(0) ? w : Tensor());
  }
  return r.finish(y);
}

}  // namespace

Tensor local_linear(const Tensor& x, const std::vector<Tensor>& weights,
                    const std::vector<Tensor>& biases) {
  if (weights.size() == 1 && biases.size() == 1 && biases[0].defined()) {
    return biased_matmul(x, weights[0], biases[0]);
  }
  std::vector<Tensor> products;
  for (const Tensor& w : weights) products.push_back(matmul(x, w));
  const Tensor y = products.size() == 1 ? products[0] : concat(products, x.rank() - 1);
  const Tensor b = concat_biases(biases);
  return b.defined() ? add(y, b) : y;
}

Tensor gather_matmul(ProcessGroup& g, const Tensor& x_shard, const Tensor& weight,
                     bool keep_gathered_input, PlantedBug bug) {
  return gather_matmul(g, x_shard, std::vector<Tensor>{weight}, keep_gathered_input, bug);
}

namespace {

// The weights side by side, [in, sum of out], copied outside autograd: a value the op uses, never
// saved (the op saves the weights themselves, which are parameters).
Tensor side_by_side(const std::vector<Tensor>& weights) {
  if (weights.size() == 1) return weights[0];
  std::int64_t columns = 0;
  for (const Tensor& w : weights) columns += w.dim(1);
  Tensor out = ops_detail::new_tensor(weights[0].ctx(), Shape{weights[0].dim(0), columns},
                                      weights[0].dtype());
  std::int64_t at = 0;
  for (const Tensor& w : weights) {
    out.ctx().backend().copy_slice(w, 1, 0, out, at, w.dim(1));
    at += w.dim(1);
  }
  return out;
}

// The inverse: `fused` [in, sum of out] cut into pieces as wide as the weights.
std::vector<Tensor> cut_like(const Tensor& fused, const std::vector<Tensor>& weights) {
  if (weights.size() == 1) return {fused};
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (const Tensor& w : weights) {
    Tensor piece = ops_detail::new_tensor(fused.ctx(), w.shape(), fused.dtype());
    fused.ctx().backend().copy_slice(fused, 1, at, piece, 0, w.dim(1));
    out.push_back(piece);
    at += w.dim(1);
  }
  return out;
}

}  // namespace

Tensor gather_matmul(ProcessGroup& g, const Tensor& x_shard, const std::vector<Tensor>& weights,
                     bool keep_gathered_input, PlantedBug bug) {
  std::vector<Tensor> inputs{x_shard};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  ops_detail::OpRecord r("gather_matmul", inputs,
                         "Shard(0) -> Shard(" + std::to_string(x_shard.rank() - 1) + ")");
  ops_detail::check_floating(r, x_shard, "x");
  if (weights.empty()) throw ArgumentError(r.where() + ": no weight");
  for (const Tensor& weight : weights) {
    ops_detail::check_same_dtype(r, x_shard, weight);
    if (weight.rank() != 2 || x_shard.rank() < 2 || x_shard.dim(-1) != weight.dim(0)) {
      throw ShapeError(r.where() + ": x " + x_shard.describe() + " and weight " +
                       weight.describe() + " need x [..., in] and weight [in, out]");
    }
  }
  Tensor total = gather_sequence(g, x_shard, bug);  // [s, ..., in]
  Tensor y = ops_detail::linear_values(total, side_by_side(weights));
  if (r.needs_grad()) {
    ProcessGroup* group = &g;
    const std::size_t n = weights.size();
    // dW = total^T dY (total re-gathered unless kept), cut per weight; dx = reduce_scatter(dY W^T)
    Node& node = r.record(
        [group, keep_gathered_input, bug, n](Node& self, const std::vector<Tensor>& grads) {
          const Tensor& dy = grads[0];
          std::vector<Tensor> ws;
          for (std::size_t i = 0; i < n; ++i) ws.push_back(self.saved(1 + i));
          std::vector<Tensor> out(1 + n);
          bool any_weight = false;
          for (std::size_t i = 0; i < n; ++i)
            any_weight = any_weight || self.needs_input_grad(1 + i);
          if (any_weight) {
            const Tensor full =
                keep_gathered_input ? self.saved(0) : gather_sequence(*group, self.saved(0), bug);
            const std::vector<Tensor> dw = cut_like(ops_detail::linear_grad_weight(full, dy), ws);
            for (std::size_t i = 0; i < n; ++i) {
              if (self.needs_input_grad(1 + i)) out[1 + i] = dw[i];
            }
          }
          if (self.needs_input_grad(0)) {
            out[0] = group->reduce_scatter(ops_detail::linear_grad_input(dy, side_by_side(ws)));
          }
          return out;
        });
    node.save(keep_gathered_input ? total : x_shard);
    for (const Tensor& weight : weights) node.save(weight);
  }
  return r.finish(y);
}

ParallelTensor column_parallel_linear(ProcessGroup& g, const ParallelTensor& x,
                                      const Tensor& weight_shard, const Tensor& bias_shard,
                                      const ParallelLinearOptions& options) {
  return column_parallel_linear(g, x, std::vector<Tensor>{weight_shard}, bias_shard, options);
}

ParallelTensor column_parallel_linear(ProcessGroup& g, const ParallelTensor& x,
                                      const std::vector<Tensor>& weight_shards,
                                      const Tensor& bias_shard,
                                      const ParallelLinearOptions& options) {
  Shape global = x.global;
  std::int64_t columns = 0;
  for (const Tensor& w : weight_shards) columns += w.dim(1);
  global[global.rank() - 1] = columns * g.size();
  const Placement out = Placement::shard(global.rank() - 1);
  Tensor y;
  if (options.sequence_parallel) {
    expect_placement(x.local.ctx().where("column_parallel_linear (sequence parallel)"), x,
                     Placement::shard(0));
    global[0] = x.global[0];
    y = gather_matmul(g, x.local, weight_shards, options.keep_gathered_input, options.planted_bug);
    if (bias_shard.defined()) y = add(y, bias_shard);
  } else {
    // One copy_to_tp (one all-reduce of its gradient) for every weight, and the bias in the
    // product (local_linear).
    std::vector<Tensor> biases;
    if (bias_shard.defined()) biases.push_back(bias_shard);
    y = local_linear(copy_to_tp(g, x, options.planted_bug).local, weight_shards, biases);
  }
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
