// Lab 3: the tensor-parallel MLP. What the student implements in starter.cpp, each with the
// contract lab_test.cpp holds it to. Shapes use the papers' letters: s sequence, b batch, h hidden,
// f the MLP's inner size (4h in the Transformer layer), t the group size, r this rank.
#pragma once

#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"

namespace shardscope::labs {

// The MLP's parameters, [in, out] as everywhere in shardscope: fc1 [h, f] and [f], fc2 [f, h] and
// [h]. The same struct holds the full (single-device) weights or one rank's shards.
struct MlpWeights {
  Tensor fc1_weight, fc1_bias, fc2_weight, fc2_bias;
};

// Task 1. f, Megatron's "copy to the tensor-parallel region": identity in forward, all-reduce (sum)
// of the gradient in backward. x is Replicate; the result is Replicate with x's global shape and
// the same values. One autograd op written with apply_function (autograd/function.h), not the
// framework's copy_to_tp. Why the backward sums: after f each rank computes a different part of
// the output (its columns), so the gradient reaching f on rank r is only the part that flows
// through rank r's columns; x's true gradient is the sum over ranks.
ParallelTensor f_copy_to_tp(ProcessGroup& group, const ParallelTensor& x);

// Task 2. g, "reduce from the tensor-parallel region": all-reduce (sum) in forward, identity in
// backward. x is Partial (every rank holds a tensor of the global shape; the value is their sum);
// the result is Replicate with that sum on every rank. x itself is left unchanged. One autograd op
// written with apply_function, not the framework's reduce_from_tp. Why the backward is the
// identity: after g every rank computes the same thing, so the gradient reaching g is already the
// whole gradient on every rank.
ParallelTensor g_reduce_from_tp(ProcessGroup& group, const ParallelTensor& x);

// Task 3. This rank's shards of the full MLP weights, as parameters (Tensor::parameter) of
// group.ctx(): fc1 is column parallel (weight [h, f/t], columns r f/t .. (r+1) f/t; bias the same
// [f/t] slice), fc2 is row parallel (weight [f/t, h], the same rows r f/t ..; bias [h] whole, on
// every rank). `full` lives in group.ctx().
MlpWeights shard_mlp_weights(ProcessGroup& group, const MlpWeights& full);

// Task 4. Column-parallel linear: x Replicate [..., in] -> f -> x W_r + b_r. weight_shard is
// [in, out/t], bias_shard [out/t]. Returns Shard(last dim) of global [..., out] (local
// [..., out/t]): rank r's columns of the full x W + b.
ParallelTensor column_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                      const Tensor& weight_shard, const Tensor& bias_shard);

// Task 5. Row-parallel linear: x Shard(last dim) of global [..., in] (local [..., in/t]) ->
// x_r W_r (Partial [..., out]) -> g -> + b. weight_shard is [in/t, out], bias [out] (whole, on
// every rank, added once after the reduction). Returns Replicate [..., out]: the full x W + b.
ParallelTensor row_parallel_linear(ProcessGroup& group, const ParallelTensor& x,
                                   const Tensor& weight_shard, const Tensor& bias);

// Task 6. The MLP under tensor parallelism: fc1 (column parallel) -> GeLU -> fc2 (row parallel).
// x Replicate [s, b, h] -> Replicate [s, b, h], equal to gelu(x W1 + b1) W2 + b2 on one device.
// `shard` is this rank's shards (as shard_mlp_weights returns them). Exactly one all-reduce in
// forward (g) and one in backward (f).
ParallelTensor parallel_mlp(ProcessGroup& group, const ParallelTensor& x, const MlpWeights& shard);

}  // namespace shardscope::labs
