// Lab 7: LayerNorm over a feature dim that a column-parallel linear left sharded across the t
// ranks of the tensor-parallel group. The exact distributed LayerNorm (row statistics and the
// backward's row sums all-reduced) against normalising each local shard alone, a different model.
//
// Every tensor here is f64 on the CPU (the tests use f64). x is Shard(last) of a global
// [..., f]: this rank holds features rank * f/t .. (rank + 1) * f/t - 1 of every row, local
// [..., f/t]; "rows" is the product of the leading dims. gamma and beta are sharded like x's
// features: this rank holds their [f/t] slice.
#pragma once

#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"

namespace shardscope::labs {

// The statistics of the full rows (all f features), the same on every rank.
struct RowStatistics {
  Tensor mean;  // [rows] f64: (1/f) sum_j x_j
  Tensor rstd;  // [rows] f64: 1 / sqrt(var + eps),  var = (1/f) sum_j (x_j - mean)^2 (biased)
};

// Task 1. From this rank's x_shard [..., f/t] (f = t * f/t), the mean and rstd of the full rows,
// by all-reduces (sum) over `group` of per-row partial sums: a few numbers per row, never the
// features themselves. Every rank must call the same collectives in the same order.
RowStatistics distributed_row_statistics(ProcessGroup& group, const Tensor& x_shard, double eps);

// Task 3. The two row sums of the LayerNorm backward, over the full rows and on every rank:
//   [rows, 2] f64; column 0: S1 = sum_j dxhat_j, column 1: S2 = sum_j dxhat_j xhat_j,
//   with dxhat_j = dy_j gamma_j and xhat_j = (x_j - mean) rstd, j over all f features.
// dy and x_shard are [..., f/t], gamma_shard [f/t], stats from Task 1. One all-reduce (sum) of
// this rank's partial sums.
Tensor distributed_backward_row_sums(ProcessGroup& group, const Tensor& dy, const Tensor& x_shard,
                                     const Tensor& gamma_shard, const RowStatistics& stats);

// Tasks 2 (forward) and 4 (backward). The exact distributed LayerNorm as one autograd op, built
// with apply_function under the name "lab_layernorm_distributed":
//   in:  x Shard(last) of [..., f] (local [..., f/t]), gamma_shard and beta_shard [f/t];
//   out: Shard(last) of [..., f]: this rank's columns of the single-device layernorm of the
//        gathered x with the gathered gamma and beta.
// Forward: Task 1's statistics, then y = (x - mean) rstd gamma + beta on the shard.
// Backward: given dy [..., f/t] (this rank's columns of the output gradient; the row-parallel
// linear that follows hands every rank exactly those), returns dx [..., f/t] from Task 3's sums
// divided by the full f, and dgamma, dbeta [f/t] for this rank's features (no collective).
ParallelTensor layernorm_distributed(ProcessGroup& group, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps = 1e-5);

// Task 5. The local model: normalise this rank's shard by its own statistics (no
// communication), as TransformerEngine's te.ops.LayerNorm does with the shard it receives.
// Same inputs and output placement as layernorm_distributed; differentiable.
ParallelTensor layernorm_local_shard(ProcessGroup& group, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps = 1e-5);

// Task 6. max |local - exact| over every element of the output on every rank, the same value
// on every rank (0 at t = 1). Computes no gradients.
double local_vs_exact_max_difference(ProcessGroup& group, const ParallelTensor& x,
                                     const Tensor& gamma_shard, const Tensor& beta_shard,
                                     double eps = 1e-5);

// Task 7 (one device). The single-device model that layernorm_local_shard on t ranks computes:
// x [..., f], gamma and beta [f]; each of the t slices of f/t features of a row is normalised by
// its own mean and rstd, then y = xhat gamma + beta. ShapeError when t does not divide f.
Tensor layernorm_of_slices(const Tensor& x, const Tensor& gamma, const Tensor& beta, int t,
                           double eps = 1e-5);

}  // namespace shardscope::labs
