// Lab 4: tensor-parallel attention. Your file: replace each TODO with your code (lab.h gives every
// function's contract). Run the tests with `shardscope lab 4`; README.md explains the background.
#include <cmath>

#include "autograd/ops.h"
#include "labs/04-tp-attention/lab.h"
#include "labs/common/lab_support.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope::labs {

AttentionWeights shard_attention_weights(ProcessGroup& /*group*/, const LayerConfig& /*config*/,
                                         const AttentionWeights& /*full*/) {
  // TODO(task 1): which columns of qkv_weight [h, 3h] feed rank r's heads? Read the column order
  // in lab.h (or docs/architecture.md) before you slice: it is not [q | k | v].
  // slice_of_full(tensor, placement, group.rank(), group.size()) (parallel/layers/collective_ops.h)
  // cuts a contiguous slice along one dim; Tensor::parameter(slice, "attn.qkv.weight") makes it
  // a leaf that collects its gradient. The projection reads the merged heads [s, b, a * d]:
  // which of its rows belong to rank r's heads? And its bias?
  not_implemented("shard_attention_weights");
}

ParallelTensor parallel_attention(ProcessGroup& /*group*/, const LayerConfig& /*config*/,
                                  const ParallelTensor& /*x*/, const AttentionWeights& /*shard*/) {
  // TODO(task 2): the attention of your a/t heads (heads = config.heads / t, d = head_dim()).
  // 1. qkv = column_parallel_linear(group, x, shard.qkv_weight, shard.qkv_bias, {})
  //    (parallel/layers/parallel_linear.h: f, then x W + b): Shard(2), local [s, b, heads * 3 * d].
  // 2. Split the local heads: reshape to [s, b, heads, 3, d], permute to [3, b, heads, s, d],
  //    chunk(.., 0, 3), reshape each part to q, k, v [b, heads, s, d].
  // 3. scores = scale(matmul(q, k, /*transpose_b=*/true), 1 / sqrt(d));
  //    probs = softmax(scores, config.causal).
  // 4. Dropout on the probabilities, drawing the single-device mask of YOUR heads:
  //    layer_dropout(config, "dropout", probs, kAttentionProbs, Shape{b, a, s, s},
  //                  {0, first_head, 0, 0}) with first_head = rank * heads
  //    (parallel/layers/attention_core.h; a is config.heads, all the heads).
  // 5. context = matmul(probs, v) [b, heads, s, d] -> permute {2, 0, 1, 3} -> reshape
  //    [s, b, heads * d]: this rank's features of the merged heads, a Shard(2) of [s, b, h].
  // 6. out = row_parallel_linear(group, that Shard(2), shard.proj_weight, shard.proj_bias, {})
  //    (the Partial products, g's all-reduce, the bias once): Replicate [s, b, h].
  // 7. out.local = layer_dropout(config, "out_dropout", out.local, kAttentionOutput): the whole
  //    tensor, the same mask on every rank.
  // Write the head split and the attention yourself: not split_heads / attention_core /
  // merge_heads from attention_core.h, which are the framework's answer to this task.
  // ScopeGuard scope(group.ctx(), "softmax") around a step names it in the ledger's table.
  not_implemented("parallel_attention");
}

double predicted_attention_activation_bytes(const LayerConfig& /*config*/) {
  // TODO(task 3): add up, op by op, what your parallel_attention saves for backward on one rank
  // (README: "Predict, then measure"). A = dtype_size(config.dtype), M = 1. For each saved tensor
  // ask: is it whole on every rank, or only this rank's a/t heads? Does it exist at all when
  // config.dropout is 0? Is it a tensor another op already saved (counted once)?
  not_implemented("predicted_attention_activation_bytes");
}

}  // namespace shardscope::labs
