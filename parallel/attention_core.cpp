// The attention core.
#include "parallel/attention_core.h"

#include <cmath>

#include "autograd/ops.h"

namespace shardscope {

HeadTensors split_heads(const Tensor& qkv, std::int64_t heads, std::int64_t d) {
  ScopeGuard scope(qkv.ctx(), "heads");
  const std::int64_t s = qkv.dim(0), b = qkv.dim(1);
  // [s, b, heads, 3, d] -> [3, b, heads, s, d] -> q, k, v
  Tensor grouped = permute(reshape(qkv, {s, b, heads, 3, d}), {3, 1, 2, 0, 4});
  std::vector<Tensor> parts = chunk(grouped, 0, 3);
  return {reshape(parts[0], {b, heads, s, d}), reshape(parts[1], {b, heads, s, d}),
          reshape(parts[2], {b, heads, s, d})};
}

Tensor layer_dropout(const LayerConfig& config, const char* scope, const Tensor& x, int site,
                     const Shape& global, std::vector<std::int64_t> offset) {
  ScopeGuard guard(x.ctx(), scope);
  DropoutSpec spec;
  spec.p = config.dropout;
  spec.seed = config.seed;
  spec.stream = dropout_stream(config.layer, site);
  spec.step = static_cast<std::uint32_t>(x.ctx().step());
  spec.global_shape = global;
  spec.offset = std::move(offset);
  return dropout(x, spec);
}

Tensor attention_core(const LayerConfig& config, const HeadTensors& qkv, std::int64_t first_head) {
  Context& ctx = qkv.q.ctx();
  const std::int64_t d = qkv.q.dim(3);
  Tensor scores;
  {
    ScopeGuard scope(ctx, "scores");
    scores =
        scale(matmul(qkv.q, qkv.k, /*transpose_b=*/true), 1.0 / std::sqrt(static_cast<double>(d)));
  }
  Tensor probs;
  {
    ScopeGuard scope(ctx, "softmax");
    probs = softmax(scores, config.causal);  // [b, heads, s, s]
  }
  const Shape& local = probs.shape();
  probs = layer_dropout(config, "dropout", probs, /*site=*/0,
                        Shape{local[0], config.heads, local[2], local[3]}, {0, first_head, 0, 0});
  ScopeGuard scope(ctx, "context");
  return matmul(probs, qkv.v);
}

Tensor merge_heads(const Tensor& context) {
  ScopeGuard scope(context.ctx(), "context");
  const Shape& c = context.shape();  // [b, heads, s, d]
  return reshape(permute(context, {2, 0, 1, 3}), {c[2], c[0], c[1] * c[3]});
}

}  // namespace shardscope
