// Lab 5, the instructor's solution: g and g-bar as hand-written autograd ops, the LayerNorm of the
// sequence-parallel region with its gradient all-reduce, the TP-SP MLP block, and the predictions
// of its memory and communication.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/05-sequence-parallel/lab.h"
#include "labs/common/lab_support.h"

namespace shardscope::labs {

ParallelTensor g_gather_seq(ProcessGroup& group, const ParallelTensor& x) {
  expect_placement(group.ctx().where("g_gather_seq"), x, Placement::shard(0));
  ProcessGroup* g = &group;  // outlives the backward: it runs inside the same rank function
  Tensor y = apply_function1(
      "lab_g", {x.local},
      // forward: [s/t, b, h] on each rank -> [s, b, h], rank q's rows at q s/t
      [g](const std::vector<Tensor>& in, std::vector<Tensor>& /*save*/) {
        return std::vector<Tensor>{g->all_gather(in[0])};
      },
      // backward: sum the ranks' [s, b, h] gradients and keep this rank's s/t rows
      [g](const std::vector<Tensor>& /*saved*/, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{g->reduce_scatter(dy[0])};
      });
  return ParallelTensor::make(y, Placement::replicate(), x.global, group.size());
}

ParallelTensor g_bar_reduce_scatter_seq(ProcessGroup& group, const ParallelTensor& x) {
  expect_placement(group.ctx().where("g_bar_reduce_scatter_seq"), x, Placement::partial());
  ProcessGroup* g = &group;
  Tensor y = apply_function1(
      "lab_g_bar", {x.local},
      // forward: rows r s/t .. of the sum over ranks (a new tensor: x stays as it was)
      [g](const std::vector<Tensor>& in, std::vector<Tensor>& /*save*/) {
        return std::vector<Tensor>{g->reduce_scatter(in[0])};
      },
      // backward: every rank's term fed every row: gather the rows' gradients from all ranks
      [g](const std::vector<Tensor>& /*saved*/, const std::vector<Tensor>& dy) {
        return std::vector<Tensor>{g->all_gather(dy[0])};
      });
  return ParallelTensor::make(y, Placement::shard(0), x.global, group.size());
}

ParallelTensor sequence_parallel_layernorm(ProcessGroup& group, const ParallelTensor& x,
                                           const Tensor& gamma, const Tensor& beta, double eps) {
  expect_placement(group.ctx().where("sequence_parallel_layernorm"), x, Placement::shard(0));
  // LayerNorm normalises each row over h: a rank's rows need nothing from the other ranks.
  return ParallelTensor::make(layernorm(x.local, gamma, beta, eps), Placement::shard(0), x.global,
                              group.size());
}

void all_reduce_partial_gradients(ProcessGroup& group, const std::vector<BlockParameter>& params) {
  for (const BlockParameter& p : params) {
    if (p.placement != Placement::replicate() || !p.tensor.grad().defined()) continue;
    Tensor grad = p.tensor.grad();  // the leaf's gradient storage: reduced in place
    group.all_reduce(grad, ReduceOp::sum, CommPurpose::param_grad);
  }
}

ParallelTensor sp_mlp_block(ProcessGroup& group, const ParallelTensor& x, const SpMlpWeights& w) {
  const int t = group.size();
  const ParallelTensor ln = sequence_parallel_layernorm(group, x, w.ln_weight, w.ln_bias);
  const ParallelTensor full = g_gather_seq(group, ln);  // Replicate [s, b, h]
  // Column parallel: this rank's f/t columns; no f (copy_to_tp) here: g's backward sums already.
  const Tensor h1 = gelu(add(matmul(full.local, w.fc1_weight), w.fc1_bias));
  // Row parallel: this rank's term of the sum over the f/t blocks.
  const ParallelTensor partial =
      ParallelTensor::make(matmul(h1, w.fc2_weight), Placement::partial(), x.global, t);
  const ParallelTensor y = g_bar_reduce_scatter_seq(group, partial);  // Shard(0)
  // The bias once per row, after the reduction, on this rank's rows.
  return ParallelTensor::make(add(y.local, w.fc2_bias), Placement::shard(0), x.global, t);
}

SavedBytes predict_saved_bytes(const BlockShape& shape, Layout layout) {
  const double A = static_cast<double>(shape.A), t = shape.t;
  const double sb = static_cast<double>(shape.s * shape.b);
  const double sbh = sb * static_cast<double>(shape.h), sbf = sb * static_cast<double>(shape.f);
  // The LayerNorm sees s/t rows under sequence parallelism, all s under tp.
  const double ln_rows = layout == Layout::tp ? sb : sb / t;
  // fc1's input: the gathered [s, b, h] unless only the shard is kept (re-gathered in backward).
  const double fc1_input = layout == Layout::tp_sp ? A * sbh / t : A * sbh;
  SavedBytes saved;
  // LayerNorm input (h per row) + fc1 input + GeLU input [s, b, f/t] + fc2 input [s, b, f/t]
  saved.activations = A * ln_rows * static_cast<double>(shape.h) + fc1_input + 2 * A * sbf / t;
  saved.layernorm_stats = 2 * A * ln_rows;  // mean and rstd per row
  return saved;
}

CommBytes predict_comm_bytes(const BlockShape& shape, Layout layout) {
  CommBytes bytes;
  if (shape.t <= 1) return bytes;
  const double A = static_cast<double>(shape.A), t = shape.t;
  const double N = A * static_cast<double>(shape.s * shape.b * shape.h);
  const double share = (t - 1) / t;
  const double all_reduce = 2 * share * N, gather_or_scatter = share * N;
  switch (layout) {
    case Layout::tp:
      bytes.forward = all_reduce;   // g after fc2
      bytes.backward = all_reduce;  // f before fc1
      break;
    case Layout::tp_sp_keep_gathered:
    case Layout::tp_sp:
      bytes.forward = 2 * gather_or_scatter;   // g's all-gather, g-bar's reduce-scatter
      bytes.backward = 2 * gather_or_scatter;  // g-bar's all-gather, g's reduce-scatter
      if (layout == Layout::tp_sp) bytes.backward += gather_or_scatter;  // re-gather fc1's input
      // ln.weight, ln.bias and fc2.bias: three all-reduces of [h]
      bytes.param_grad = 3 * 2 * share * A * static_cast<double>(shape.h);
      break;
  }
  return bytes;
}

}  // namespace shardscope::labs
