// Lab 4: tensor-parallel attention. What the student implements in starter.cpp, each with the
// contract lab_test.cpp holds it to. Letters as in the papers: s sequence, b batch, h hidden,
// a heads, d = h / a the head dim, t the group size (config.degree), r this rank.
#pragma once

#include "parallel/comm/process_group.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"

namespace shardscope::labs {

// The attention block's parameters, [in, out] as everywhere in shardscope: the fused QKV linear
// [h, 3h] and [3h], the output projection [h, h] and [h]. Full (single device) or one rank's
// shards. The QKV columns are grouped by head (docs/architecture.md, "QKV column order"): column
// (head * 3 + j) * d + i is element i of head `head`'s query (j = 0), key (j = 1) or value (j = 2).
struct AttentionWeights {
  Tensor qkv_weight, qkv_bias, proj_weight, proj_bias;
};

// Task 1. This rank's shards of the full weights, as parameters (Tensor::parameter) of
// group.ctx(): rank r holds heads r a/t .. (r+1) a/t - 1, that is the QKV columns (and bias
// entries) of those heads' q, k and v ([h, 3h/t] and [3h/t]), the output projection's rows that
// read those heads' context features ([h/t, h]), and the whole projection bias [h] (added once,
// after the all-reduce). `full` lives in group.ctx(); config gives h and a.
AttentionWeights shard_attention_weights(ProcessGroup& group, const LayerConfig& config,
                                         const AttentionWeights& full);

// Task 2. The attention block on this rank's a/t heads. x is Replicate [s, b, h]; the result is
// Replicate [s, b, h] and equals, on every rank, the single-device block
//   qkv = x Wqkv + bqkv -> q, k, v per head -> softmax(q k^T / sqrt(d), causal) -> dropout
//   -> probs v -> heads merged [s, b, h] -> (.) Wproj + bproj -> dropout
// with the same dropout masks (config.dropout, config.seed; the sites kAttentionProbs and
// kAttentionOutput of parallel/layers/transformer_layer.h). One all-reduce in forward (after the
// output projection) and one in backward (the gradient of x). `shard` is as shard_attention_weights
// returns it.
ParallelTensor parallel_attention(ProcessGroup& group, const LayerConfig& config,
                                  const ParallelTensor& x, const AttentionWeights& shard);

// Task 3. Predict, before measuring: the bytes parallel_attention saves for backward on one rank
// (what the MemoryLedger counts as saved activations after the forward), for config.seq (s),
// batch (b), hidden (h), heads (a), degree (t), dtype (A bytes per element) and dropout (masks
// are u8, M = 1 byte per element; dropout 0 draws no mask). The input x counts: the QKV linear
// saves it. Parameters do not count.
double predicted_attention_activation_bytes(const LayerConfig& config);

}  // namespace shardscope::labs
