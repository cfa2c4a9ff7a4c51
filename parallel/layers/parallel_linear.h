// ColumnParallelLinear and RowParallelLinear (Shoeybi et al. 2019), with the sequence-parallel
// variants of Korthikanti et al. 2022. Weights are [in, out]; a rank holds a column block
// [in, out/t] (column parallel) or a row block [in/t, out] (row parallel).
//
//   column, TP:     x Replicate -> copy_to_tp -> x W_r + b_r            -> Shard(-1)
//   column, TP-SP:  x Shard(0)  -> all-gather x, x W_r + b_r            -> Shard(-1)
//                   saves only the local x shard and all-gathers it again in backward (as
//                   Megatron does), or keeps the gathered x when keep_gathered_input is set
//   row, TP:        x Shard(-1) -> x_r W_r (Partial) -> reduce_from_tp  -> + b -> Replicate
//   row, TP-SP:     x Shard(-1) -> x_r W_r (Partial) -> reduce_scatter_seq -> + b -> Shard(0)
#pragma once

#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"
#include "parallel/layers/planted_bug.h"

namespace shardscope {

struct ParallelLinearOptions {
  bool sequence_parallel = false;
  bool keep_gathered_input = false;  // TP-SP column only
  // row-bias-added-every-rank, f-backward-identity and sp-gather-wrong-dim are planted here.
  PlantedBug planted_bug = PlantedBug::none;
};

// x times each weight, the products side by side on the last dim, plus the biases (concatenated)
// when there are any: a linear as the single device, or one rank on its own weights, computes it.
// One weight with a bias is one op, a matmul with the bias as its third input (its output starts
// as the bias rows and the GEMM adds x w into them, as PyTorch's addmm). Several weights are GQA's
// query and key/value weights: their products side by side, not one product with the weights
// concatenated, which would save a copy of them for backward, then an add of the biases.
Tensor local_linear(const Tensor& x, const std::vector<Tensor>& weights,
                    const std::vector<Tensor>& biases = {});
Tensor concat_biases(const std::vector<Tensor>& biases);  // undefined for none

// An undefined bias: a linear without one (LayerConfig::bias off).
ParallelTensor column_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                      const Tensor& weight_shard, const Tensor& bias_shard,
                                      const ParallelLinearOptions& options);
// Several column-parallel weights on one input, their outputs side by side (GQA's query and
// key/value weights): one copy_to_tp, or in tp-sp one all-gather, for all of them.
ParallelTensor column_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                      const std::vector<Tensor>& weight_shards,
                                      const Tensor& bias_shard,
                                      const ParallelLinearOptions& options);
ParallelTensor row_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                   const Tensor& weight_shard, const Tensor& bias,
                                   const ParallelLinearOptions& options);

// The sequence-parallel product of the column linear as one autograd op ("gather_matmul"):
// y = all_gather(x_shard) W. Exposed for tests.
// `bug` plants sp-gather-wrong-dim.
Tensor gather_matmul(ProcessGroup& group, const Tensor& x_shard, const Tensor& weight,
                     bool keep_gathered_input, PlantedBug bug = PlantedBug::none);
// The same with several weights [in, out_i], the output their products side by side
// [..., sum out_i]: one gather, one saved input, one reduce-scatter of the input's gradient.
Tensor gather_matmul(ProcessGroup& group, const Tensor& x_shard, const std::vector<Tensor>& weights,
                     bool keep_gathered_input, PlantedBug bug = PlantedBug::none);

}  // namespace shardscope
