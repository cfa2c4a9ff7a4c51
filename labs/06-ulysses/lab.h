// Lab 6: DeepSpeed-Ulysses. The two all-to-alls that move attention's q, k, v from sequence
// shards to head shards and its output back, as autograd ops; and a prediction of the bytes each
// rank sends per layer under Ulysses and under TP-SP.
//
// Shapes: s sequence, b batch, a heads, d head dim (h = a d), t = group.size() ranks, r =
// group.rank(). s and a must divide by t. The global tensor is [s, b, a, d].
#pragma once

#include <cstdint>

#include "autograd/tensor.h"
#include "parallel/comm/process_group.h"

namespace shardscope::labs {

// Sequence shard -> head shard. x: this rank's [s/t, b, a, d], positions r s/t .. (r + 1) s/t - 1
// of every head (Shard(0) of the global tensor). Returns [s, b, a/t, d]: every position of heads
// r a/t .. (r + 1) a/t - 1 (Shard(2)), positions in global order. Exactly one
// group.all_to_all in the forward. An autograd op recorded with apply_function
// (autograd/function.h) under the name "lab_seq_to_heads": its backward turns the gradient
// [s, b, a/t, d] back into [s/t, b, a, d] with heads_to_seq's all-to-all (one, in the backward).
// Equals shardscope::seq_to_heads (parallel/layers/collective_ops.h) on the local tensor.
Tensor seq_to_heads(ProcessGroup& group, const Tensor& x);

// Head shard -> sequence shard, the inverse. x: [s, b, a/t, d] (heads r a/t.., all positions).
// Returns [s/t, b, a, d] (positions r s/t.., all heads in order). One all_to_all forward; the
// backward is seq_to_heads's all-to-all. Op name "lab_heads_to_seq". Equals
// shardscope::heads_to_seq.
Tensor heads_to_seq(ProcessGroup& group, const Tensor& x);

// The shape of one layer for the communication prediction: activations [s, b, h] of
// element_bytes (A) bytes each, degree t.
struct LayerShape {
  std::int64_t seq = 0;     // s
  std::int64_t batch = 0;   // b
  std::int64_t hidden = 0;  // h
  int degree = 1;           // t
  int element_bytes = 4;    // A: 4 for f32, 8 for f64, 2 for the paper's fp16
};

enum class Pass { forward, forward_and_backward };

// Bytes ONE rank sends for the activations of ONE layer (CommPurpose::activation: no parameter
// gradients, loss or checks), by the ring formulas of parallel/models/comm_model.h, in `pass`.
// Ulysses: the all-to-alls of q, k, v and of the attention output.
double ulysses_bytes_per_rank(const LayerShape& shape, Pass pass);
// TP-SP as the framework runs it (Megatron's default): the all-gathers and reduce-scatters around
// the two column/row-parallel pairs, and in backward the re-gathers of the saved input shards.
double tp_sp_bytes_per_rank(const LayerShape& shape, Pass pass);

}  // namespace shardscope::labs
