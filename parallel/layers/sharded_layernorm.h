// LayerNorm over a feature dim that is sharded across the tensor-parallel group, as it arrives
// after a column-parallel linear (Linear column -> LayerNorm -> Linear row). Two models:
//
//   layernorm_exact   all-gathers each rank's per-row (count, mean, M2), combines them in rank
//                     order (Chan et al.), and normalises with the full row's mean and rstd: the
//                     single-device LayerNorm, forward and backward. Its backward all-reduces the
//                     two row sums sum(dxhat) and sum(dxhat * xhat) over the full feature dim.
//   layernorm_local   normalises each rank's shard by its own statistics (what TransformerEngine's
//                     te.ops.LayerNorm does on a local shard): a different model.
//
// Both take x Shard(last) [..., f] (local [..., f/t]) and this rank's gamma and beta shards
// [f/t], and return Shard(last). Their gamma and beta gradients are local (sharded). The
// derivation is in docs/derivations.md, "The exact distributed LayerNorm".
#pragma once

#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"

namespace shardscope {

// One autograd op, "layernorm_exact". Forward: one all-gather of the [rows, 3] f64 statistics.
// Backward: one all-reduce (sum) of the [rows, 2] f64 partial row sums. Saves the x shard, gamma
// (a parameter) and the per-row mean and rstd (extras). Every rank computes bitwise identical
// mean and rstd. Throws PlacementError for an input that is not Shard(last), ShapeError for a
// gamma or beta that is not [f/t]. Runs on the CPU backend.
ParallelTensor layernorm_exact(ProcessGroup& group, const ParallelTensor& x,
                               const Tensor& gamma_shard, const Tensor& beta_shard,
                               double eps = 1e-5);

// The ordinary layernorm op on the local shard, in scope "layernorm_local" so traces and errors
// show which model ran. No communication.
ParallelTensor layernorm_local(ProcessGroup& group, const ParallelTensor& x,
                               const Tensor& gamma_shard, const Tensor& beta_shard,
                               double eps = 1e-5);

}  // namespace shardscope
