// Lab 4, the instructor's solution: the head shards of the fused QKV and output weights, the
// attention block on a rank's heads with the framework's parallel linears, and the activation
// bytes it saves.
#include <cmath>

#include "autograd/ops.h"
#include "labs/04-tp-attention/lab.h"
#include "labs/common/lab_support.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope::labs {

AttentionWeights shard_attention_weights(ProcessGroup& group, const LayerConfig& /*config*/,
                                         const AttentionWeights& full) {
  auto shard = [&](const Tensor& weight, Placement placement, const char* name) {
    return Tensor::parameter(slice_of_full(weight, placement, group.rank(), group.size()), name);
  };
  AttentionWeights w;
  // The columns are grouped by head, 3d per head: rank r's a/t heads are the contiguous block of
  // 3h/t columns starting at r * 3h/t, their q, k and v together.
  w.qkv_weight = shard(full.qkv_weight, Placement::shard(1), "attn.qkv.weight");
  w.qkv_bias = shard(full.qkv_bias, Placement::shard(0), "attn.qkv.bias");
  // The merged context is [s, b, heads * d]: rank r's heads are its features r h/t .. (r+1) h/t,
  // which the projection reads through those rows.
  w.proj_weight = shard(full.proj_weight, Placement::shard(0), "attn.proj.weight");
  w.proj_bias = shard(full.proj_bias, Placement::replicate(), "attn.proj.bias");
  return w;
}

ParallelTensor parallel_attention(ProcessGroup& group, const LayerConfig& config,
                                  const ParallelTensor& x, const AttentionWeights& shard) {
  Context& ctx = group.ctx();
  const int t = group.size();
  const std::int64_t s = x.global[0], b = x.global[1], h = config.hidden;
  const std::int64_t d = config.head_dim(), heads = config.heads / t;
  const std::int64_t first_head = group.rank() * heads;
  ScopeGuard attn(ctx, "attn");
  ParallelTensor qkv;  // Shard(2) of [s, b, 3h]: this rank's heads, [s, b, heads * 3 * d]
  {
    ScopeGuard scope(ctx, "qkv");
    qkv = column_parallel_linear(group, x, shard.qkv_weight, shard.qkv_bias, {});
  }
  Tensor q, k, v;  // [b, heads, s, d]
  {
    ScopeGuard scope(ctx, "heads");
    // [s, b, heads, 3, d] -> [3, b, heads, s, d] -> q, k, v
    const std::vector<Tensor> parts =
        chunk(permute(reshape(qkv.local, {s, b, heads, 3, d}), {3, 1, 2, 0, 4}), 0, 3);
    q = reshape(parts[0], {b, heads, s, d});
    k = reshape(parts[1], {b, heads, s, d});
    v = reshape(parts[2], {b, heads, s, d});
  }
  Tensor probs;  // [b, heads, s, s]
  {
    ScopeGuard scope(ctx, "scores");
    probs = scale(matmul(q, k, /*transpose_b=*/true), 1.0 / std::sqrt(static_cast<double>(d)));
  }
  {
    ScopeGuard scope(ctx, "softmax");
    probs = softmax(probs, config.causal);
  }
  // The mask of the single device's heads first_head .. first_head + heads - 1.
  probs = layer_dropout(config, "dropout", probs, kAttentionProbs, Shape{b, config.heads, s, s},
                        {0, first_head, 0, 0});
  Tensor context;  // [s, b, heads * d]: this rank's features of the merged heads
  {
    ScopeGuard scope(ctx, "context");
    context = reshape(permute(matmul(probs, v), {2, 0, 1, 3}), {s, b, heads * d});
  }
  ParallelTensor out;
  {
    ScopeGuard scope(ctx, "proj");
    out =
        row_parallel_linear(group, ParallelTensor::make(context, Placement::shard(2), {s, b, h}, t),
                            shard.proj_weight, shard.proj_bias, {});
  }
  // The output is Replicate: every rank draws the whole single-device mask.
  out.local = layer_dropout(config, "out_dropout", out.local, kAttentionOutput);
  return out;
}

double predicted_attention_activation_bytes(const LayerConfig& config) {
  const double A = static_cast<double>(dtype_size(config.dtype));
  const double M = 1.0;
  const double s = static_cast<double>(config.seq), b = static_cast<double>(config.batch);
  const double h = static_cast<double>(config.hidden), a = static_cast<double>(config.heads);
  const double t = static_cast<double>(config.degree);
  const double sbh = s * b * h, as2b = a * s * s * b;
  const bool dropout = config.dropout > 0.0;
  // Replicated on every rank: the QKV linear's input x (f's output shares x's storage) and the
  // mask of the dropout after the all-reduce.
  const double replicated = A * sbh + (dropout ? M * sbh : 0.0);
  // Inside this rank's a/t heads: Q and K (scores), the softmax output, V (probs x V) and the
  // projection's input; with dropout, the attention mask and the dropout's output (probs x V's
  // other operand). Without dropout probs x V saves the softmax output, already counted.
  const double split =
      2 * A * sbh + A * as2b + A * sbh + A * sbh + (dropout ? M * as2b + A * as2b : 0.0);
  return replicated + split / t;
}

}  // namespace shardscope::labs
