// Lab 5: sequence parallelism (Korthikanti et al. 2022). What the student implements in
// starter.cpp, each with the contract lab_test.cpp holds it to. Shapes use the papers' letters:
// s sequence, b batch, h hidden, f the MLP's inner size (4h in the Transformer layer), t the group
// size, r this rank, A bytes per activation element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"

namespace shardscope::labs {

// Task 1. g (Korthikanti et al.'s notation): all-gather along the sequence dim 0 in forward,
// reduce-scatter in backward. x is Shard(0) of [s, b, h] (local [s/t, b, h], rank r holding rows
// r s/t .. (r+1) s/t); the result is Replicate [s, b, h], the ranks' rows in rank order. One
// autograd op written with apply_function (autograd/function.h), not the framework's gather_seq.
// Why the backward reduce-scatters: after g each rank computes something different (its columns
// of a column-parallel linear), so the gradient arriving on rank r is its part of a sum over ranks;
// x's gradient is the sum, and rank r keeps only its own s/t rows of it.
ParallelTensor g_gather_seq(ProcessGroup& group, const ParallelTensor& x);

// Task 2. g-bar: reduce-scatter along dim 0 in forward, all-gather in backward. x is Partial of
// [s, b, h] (every rank holds a full-shape tensor; the value is their sum); the result is
// Shard(0) [s/t, b, h]: rows r s/t .. of the sum. One autograd op written with apply_function, not
// the framework's reduce_scatter_seq. Why the backward all-gathers: every rank's Partial term
// contributed to every row of the sum, so each needs the gradient of all s rows, and rank q holds
// the gradient of rows q s/t .. only.
ParallelTensor g_bar_reduce_scatter_seq(ProcessGroup& group, const ParallelTensor& x);

// Task 3. LayerNorm in the sequence-parallel region: x Shard(0) [s/t, b, h] -> Shard(0), the
// ordinary layernorm (autograd/ops.h) of this rank's rows with gamma and beta [h] replicated on
// every rank. No communication in forward or backward. (Its gamma and beta gradients are then
// partial sums over this rank's rows: task 4 completes them.) A placement other than Shard(0) is a
// PlacementError (expect_placement, parallel/layers/placement.h).
ParallelTensor sequence_parallel_layernorm(ProcessGroup& group, const ParallelTensor& x,
                                           const Tensor& gamma, const Tensor& beta,
                                           double eps = 1e-5);

// One parameter of a block as this rank holds it: its leaf and the placement of the full weight.
struct BlockParameter {
  std::string name;  // "ln.weight"
  Tensor tensor;     // this rank's leaf (a shard, or the whole weight when replicated)
  Placement placement;
};

// Task 4. Run after the backward of a TP-SP block, as the framework's
// ParallelTransformerLayer::reduce_parameter_gradients does: all-reduce (sum) over the group, in
// place, the gradient of every Replicate parameter, because each rank computed it from its own s/t
// rows only; leave the sharded parameters' gradients alone (each rank's shard already has its
// whole gradient) and skip parameters that got no gradient. Purpose CommPurpose::param_grad.
void all_reduce_partial_gradients(ProcessGroup& group, const std::vector<BlockParameter>& params);

// The TP-SP MLP block's parameters, as one rank holds them: the LayerNorm's and fc2's bias are
// replicated; fc1 is column parallel, fc2 row parallel (weights [in, out]).
struct SpMlpWeights {
  Tensor ln_weight, ln_bias;    // [h], [h]        Replicate
  Tensor fc1_weight, fc1_bias;  // [h, f/t], [f/t] Shard(1), Shard(0): columns r f/t ..
  Tensor fc2_weight, fc2_bias;  // [f/t, h], [h]   Shard(0): rows r f/t ..; Replicate

  std::vector<BlockParameter> parameters() const {
    return {{"ln.weight", ln_weight, Placement::replicate()},
            {"ln.bias", ln_bias, Placement::replicate()},
            {"fc1.weight", fc1_weight, Placement::shard(1)},
            {"fc1.bias", fc1_bias, Placement::shard(0)},
            {"fc2.weight", fc2_weight, Placement::shard(0)},
            {"fc2.bias", fc2_bias, Placement::replicate()}};
  }
};

// Task 5. The MLP block under TP + sequence parallelism, from your tasks 1-3 and the framework's
// ops (matmul, add, gelu):
//   x Shard(0) [s/t, b, h] -> LayerNorm -> g -> x W1_r + b1_r -> GeLU -> x W2_r (Partial)
//     -> g-bar -> + b2 -> Shard(0) [s/t, b, h]
// equal to this rank's rows of gelu(LN(x) W1 + b1) W2 + b2 on one device. Forward: one
// all-gather and one reduce-scatter of [s, b, h]; backward: the same two, swapped. The caller runs
// all_reduce_partial_gradients(group, w.parameters()) after backward.
ParallelTensor sp_mlp_block(ProcessGroup& group, const ParallelTensor& x, const SpMlpWeights& w);

// ---- predict ------------------------------------------------------------------------------------

// How the block is laid out on the t ranks.
enum class Layout {
  tp,  // Megatron TP (Shoeybi et al. 2019): x Replicate [s, b, h]; LN on all s rows; f (identity,
       // backward all-reduce) before fc1; g (all-reduce) after fc2; no gradient all-reduce
  tp_sp,  // Megatron's TP-SP: as your block, but fc1 is the framework's gather_matmul, which saves
          // only its local input shard and all-gathers it again in backward
  tp_sp_keep_gathered,  // your block: g, then matmul, which saves the gathered [s, b, h] input
};

struct BlockShape {
  std::int64_t s = 0, b = 0, h = 0, f = 0;  // f: fc1's output width
  int t = 1;
  std::size_t A = 8;  // bytes per element (8 for f64, 4 for f32)
};

// Bytes one rank keeps for backward after the block's forward, as the MemoryLedger counts them:
// each saved storage once, parameters never.
struct SavedBytes {
  double activations = 0;      // SaveRole::activation (the paper's terms)
  double layernorm_stats = 0;  // the LayerNorm's per-row mean and rstd (SaveRole::extra)
};

// Task 6. The prediction for `shape` in `layout`.
SavedBytes predict_saved_bytes(const BlockShape& shape, Layout layout);

// Bytes one rank sends by the ring formulas (parallel/models/comm_model.h) in one forward and
// backward of the block, with N = A s b h: all-reduce 2 (t-1)/t N, all-gather and reduce-scatter
// (t-1)/t N of the full (gathered, or not yet scattered) tensor; 0 at t = 1.
struct CommBytes {
  double forward = 0;     // activations, forward
  double backward = 0;    // activations and activation gradients, backward
  double param_grad = 0;  // the parameter-gradient all-reduces after backward
};

// Task 7. The prediction for `shape` in `layout`.
CommBytes predict_comm_bytes(const BlockShape& shape, Layout layout);

}  // namespace shardscope::labs
