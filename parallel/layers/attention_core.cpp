// The attention core.
#include "parallel/layers/attention_core.h"

#include <cmath>

#include "autograd/checkpoint.h"
#include "autograd/errors.h"
#include "autograd/ops.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {

HeadTensors split_heads(const LayerConfig& config, const Tensor& qkv, std::int64_t heads,
                        std::int64_t kv_heads) {
  ScopeGuard scope(qkv.ctx(), decl::layer(config).heads.scope);
  const std::int64_t d = config.head_dim();
  const std::int64_t kv = kv_heads ? kv_heads : heads;
  std::vector<HeadColumns> parts;
  if (config.kv_heads_count() != config.heads) {
    // [s, b, heads d | kv_heads (k, v) d] -> q [b, heads, s, d], k and v [b, kv_heads, s, d]
    parts = {{0, heads, d}, {heads * d, kv, 2 * d}, {heads * d + d, kv, 2 * d}};
  } else {
    // [s, b, heads (q, k, v) d] -> q, k, v [b, heads, s, d]
    parts = {{0, heads, 3 * d}, {d, heads, 3 * d}, {2 * d, heads, 3 * d}};
  }
  const std::vector<Tensor> qkv_heads = head_split(qkv, d, parts);
  return {qkv_heads[0], qkv_heads[1], qkv_heads[2]};
}

HeadTensors split_grouped_by_position(const LayerConfig& config, const Tensor& qkv,
                                      std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t d = config.head_dim();
  const std::int64_t s = qkv.dim(0), b = qkv.dim(1);
  const std::vector<Tensor> q_kv = split(qkv, 2, {heads * d, kv_heads * 2 * d});
  // [s, b, g, 2, d] -> [2, s, b, g, d] -> k, v
  const std::vector<Tensor> kv =
      chunk(permute(reshape(q_kv[1], {s, b, kv_heads, 2, d}), {3, 0, 1, 2, 4}), 0, 2);
  return {reshape(q_kv[0], {s, b, heads, d}), reshape(kv[0], {s, b, kv_heads, d}),
          reshape(kv[1], {s, b, kv_heads, d})};
}

HeadTensors rotary(const LayerConfig& config, const HeadTensors& qkv, int seq_dim,
                   std::int64_t first_position) {
  const decl::ModuleDecl* module = decl::layer(config).rope;
  if (!module) return qkv;
  ScopeGuard scope(qkv.q.ctx(), module->scope);
  return {rope(qkv.q, seq_dim, first_position, config.rope_base),
          rope(qkv.k, seq_dim, first_position, config.rope_base), qkv.v};
}

Tensor layer_dropout(const LayerConfig& config, const char* scope, const Tensor& x, int site,
                     const Shape& global, std::vector<std::int64_t> offset, bool causal) {
  ScopeGuard guard(x.ctx(), scope);
  DropoutSpec spec;
  spec.p = config.dropout;
  spec.seed = config.seed;
  spec.stream = dropout_stream(config.layer, site);
  spec.step = static_cast<std::uint32_t>(x.ctx().step());
  spec.global_shape = global;
  spec.offset = std::move(offset);
  spec.causal = causal;
  return dropout(x, spec);
}

Tensor layer_dropout(const LayerConfig& config, const decl::ModuleDecl& module, const Tensor& x,
                     const Shape& global, std::vector<std::int64_t> offset, bool causal) {
  if (module.dropout_site < 0) {
    throw ArgumentError(std::string("layer_dropout: module ") + module.scope +
                        " declares no dropout site (it is not a dropout)");
  }
  return layer_dropout(config, module.scope, x, module.dropout_site, global, std::move(offset),
                       causal);
}

namespace {

// PLANTED BUG causal-mask-local-positions: the mask [s, s] built from the position ids each
// sequence shard numbers from 0 (0 .. s/t - 1 on every rank): key j is hidden from query i when
// j's local position is past i's, so a query sees later keys of other shards and misses earlier
// ones. Added to the scores before a softmax without its own causal mask.
Tensor local_position_mask(Context& ctx, const LayerConfig& config, std::int64_t s, DType dtype) {
  const std::int64_t shard = config.seq / config.degree;
  std::vector<double> mask(static_cast<std::size_t>(s * s), 0.0);
  for (std::int64_t i = 0; i < s; ++i) {
    for (std::int64_t j = 0; j < s; ++j) {
      if (j % shard > i % shard) mask[static_cast<std::size_t>(i * s + j)] = -1e9;
    }
  }
  return Tensor::from_vector(ctx, {s, s}, mask, dtype);
}

// The core itself: scores, softmax, dropout, probs x V.
Tensor core(const LayerConfig& config, const HeadTensors& qkv, std::int64_t first_head) {
  Context& ctx = qkv.q.ctx();
  const decl::Modules& m = decl::layer(config);
  const std::int64_t d = qkv.q.dim(3);
  // 1/sqrt(d): d is the width of one head, the same on every rank.
  double width = static_cast<double>(d);
  // PLANTED BUG attention-local-scale: the scale taken from the width this rank holds (its
  // heads x d = h/t) instead of one head's width d.
  if (config.planted_bug == PlantedBug::attention_local_scale)
    width *= static_cast<double>(qkv.q.dim(1));
  // The queries of each key/value head's group stacked along the sequence: [b, g, r s, d] for r
  // query heads per key/value head (r = 1 under MHA: the same tensors).
  const std::int64_t b = qkv.q.dim(0), heads = qkv.q.dim(1), s = qkv.q.dim(2);
  const std::int64_t groups = qkv.k.dim(1), r = heads / groups;
  // Under the causal mask the products skip the blocks above the diagonal (causal_matmul).
  const bool causal = decl::causal_products(config);
  auto product = [&](const Tensor& x, const Tensor& y, bool transpose_y, double alpha) {
    return causal ? causal_matmul(x, y, transpose_y, s, alpha) : matmul(x, y, transpose_y, alpha);
  };
  Tensor scores;
  {
    ScopeGuard scope(ctx, m.scores.scope);
    const Tensor q = r == 1 ? qkv.q : reshape(qkv.q, {b, groups, r * s, d});
    // q k^T / sqrt(d), the scale applied inside the GEMM.
    scores = product(q, qkv.k, /*transpose_y=*/true, 1.0 / std::sqrt(width));
    if (r != 1) scores = reshape(scores, {b, heads, s, qkv.k.dim(2)});
  }
  Tensor probs;
  {
    ScopeGuard scope(ctx, m.softmax.scope);
    if (!causal && config.causal) {  // the planted bug causal-mask-local-positions
      probs = softmax(add(scores, local_position_mask(ctx, config, scores.dim(2), scores.dtype())),
                      false);
    } else {
      probs = softmax(scores, config.causal);  // [b, heads, s, s]
    }
  }
  const Shape& local = probs.shape();
  // Under causal products the probabilities after each row's visible keys are dropped without
  // drawing: causal_matmul never reads them.
  probs = layer_dropout(config, m.attn_dropout, probs,
                        Shape{local[0], config.heads, local[2], local[3]}, {0, first_head, 0, 0},
                        causal);
  ScopeGuard scope(ctx, m.context.scope);
  if (r == 1) return product(probs, qkv.v, false, 1.0);
  const Tensor grouped =
      product(reshape(probs, {b, groups, r * s, probs.dim(3)}), qkv.v, false, 1.0);
  return reshape(grouped, {b, heads, s, d});
}

}  // namespace

Tensor attention_core(const LayerConfig& config, const HeadTensors& qkv, std::int64_t first_head) {
  if (config.recompute != Recompute::selective) return core(config, qkv, first_head);
  // Selective recomputation: only Q, K and V are kept; backward runs the core again.
  return checkpoint(decl::layer(config).recompute->scope, {qkv.q, qkv.k, qkv.v},
                    [config, first_head](const std::vector<Tensor>& in) {
                      return core(config, {in[0], in[1], in[2]}, first_head);
                    });
}

Tensor merge_heads(const LayerConfig& config, const Tensor& context) {
  ScopeGuard scope(context.ctx(), decl::layer(config).context.scope);
  const Shape& c = context.shape();  // [b, heads, s, d]
  return reshape(permute(context, {2, 0, 1, 3}), {c[2], c[0], c[1] * c[3]});
}

}  // namespace shardscope

namespace shardscope {

Tensor norm_op(const decl::ModuleDecl& norm, const Tensor& x, const Tensor& w, const Tensor& b,
               double eps) {
  switch (norm.kind) {
    case decl::Kind::layernorm:
      return layernorm(x, w, b, eps);
    case decl::Kind::rmsnorm:
      return rmsnorm(x, w, eps);
    default:
      throw ArgumentError(std::string("norm_op: module ") + norm.scope + " is not a norm");
  }
}

Tensor mlp_activation(const decl::ModuleDecl& act, const Tensor& h) {
  ScopeGuard scope(h.ctx(), act.scope);
  switch (act.kind) {
    case decl::Kind::gelu:
      return gelu(h);
    case decl::Kind::swiglu:
      return swiglu(h);
    default:
      throw ArgumentError(std::string("mlp_activation: module ") + act.scope +
                          " is not an MLP activation");
  }
}

}  // namespace shardscope
