// ParallelTransformerLayer: TP, TP-SP and Ulysses.
#include "parallel/layers/parallel_layer.h"

#include <algorithm>
#include <cmath>

#include "autograd/backend.h"
#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/sharded_layernorm.h"

namespace shardscope {
namespace {

bool sequence_sharded(ParallelMode mode) {
  return mode == ParallelMode::tp_sp || mode == ParallelMode::ulysses;
}

// PLANTED BUG qkv-block-split: the fused QKV weight [h, 3h] (or bias [3h]) sliced as if its
// columns were [q | k | v] blocks: rank r takes the r-th h/t columns of each block. The columns
// are grouped by head ([a, 3, d], as split_heads reads them), so the rank gets parts of other
// heads' q, k and v in the wrong roles.
Tensor qkv_block_slice(const Tensor& full, int rank, int t) {
  NoGradGuard no_grad(full.ctx());
  std::vector<std::int64_t> dims = full.shape().dims();
  const std::int64_t columns = dims.back();
  dims.back() = 3;
  dims.push_back(columns / 3);  // [..., 3, h]
  const Tensor blocks = reshape(full.detach(), Shape(dims));
  const Tensor mine = slice_of_full(blocks, Placement::shard(static_cast<int>(dims.size()) - 1),
                                    rank, t);  // [..., 3, h/t]
  dims.pop_back();
  dims.back() = 3 * (columns / 3 / t);
  return reshape(mine, Shape(dims));
}

}  // namespace

ParallelTransformerLayer::ParallelTransformerLayer(const LayerConfig& config, ProcessGroup& group,
                                                   const LayerWeights& full,
                                                   const ParallelLinearOptions& linear)
    : config_(config), group_(group), linear_(linear) {
  config_.validate();
  if (config_.mode == ParallelMode::single) {
    throw ArgumentError("ParallelTransformerLayer runs tp, tp-sp or ulysses; use TransformerLayer");
  }
  if (group.size() != config_.degree) {
    throw ArgumentError("ParallelTransformerLayer: degree " + std::to_string(config_.degree) +
                        " but the group has " + std::to_string(group.size()) + " ranks");
  }
  linear_.sequence_parallel = config_.mode == ParallelMode::tp_sp;
  linear_.planted_bug = config_.planted_bug;
  for (const auto& [name, tensor] : full.named()) {
    // Where it goes and whether its gradient needs a reduction: the declaration says.
    const decl::Param declared = decl::parameter(config_, name);
    ShardedParameter p;
    p.name = decl::stack_name(config_, name);
    p.module = declared.module;
    p.global = tensor.shape();
    p.placement = decl::placement(*declared.decl, config_);
    p.partial_grad = decl::partial_grad(*declared.decl, config_);
    const bool block_split =
        config_.planted_bug == PlantedBug::qkv_block_split && p.module == &decl::layer(config_).qkv;
    const Tensor slice = block_split
                             ? qkv_block_slice(tensor, group.rank(), group.size())
                             : slice_of_full(tensor, p.placement, group.rank(), group.size());
    p.local = Tensor::parameter(slice.copy_to(group.ctx()), p.name);
    params_.push_back(std::move(p));
  }
}

Placement ParallelTransformerLayer::activation_placement() const {
  return sequence_sharded(config_.mode) ? Placement::shard(0) : Placement::replicate();
}

const Tensor& ParallelTransformerLayer::param(const std::string& name) const {
  const std::string in_stack = decl::stack_name(config_, name);
  for (const ShardedParameter& p : params_) {
    if (p.name == in_stack) return p.local;
  }
  throw ArgumentError("ParallelTransformerLayer: no parameter " + name);
}

Tensor ParallelTransformerLayer::bias(const decl::ModuleDecl& module) const {
  return decl::has_bias(module) ? param(decl::bias(module)) : Tensor();
}

Tensor ParallelTransformerLayer::linear(const decl::ModuleDecl& module, const Tensor& x) const {
  const LocalWeights w = local_weights(module);
  return local_linear(x, w.weights, w.biases);
}

ParallelTransformerLayer::LocalWeights ParallelTransformerLayer::local_weights(
    const decl::ModuleDecl& module) const {
  LocalWeights out;
  for (const std::string& n : decl::weights(module)) out.weights.push_back(param(n));
  for (const std::string& n : decl::biases(module)) out.biases.push_back(param(n));
  return out;
}

ParallelTensor ParallelTransformerLayer::dropout_block(const decl::ModuleDecl& dropout,
                                                       const ParallelTensor& x) const {
  std::vector<std::int64_t> offset;
  if (x.placement.is_shard()) {
    offset.assign(static_cast<std::size_t>(x.global.rank()), 0);
    offset[static_cast<std::size_t>(x.placement.dim)] =
        group_.rank() * x.local.dim(x.placement.dim);
  }
  LayerConfig masks = config_;
  // PLANTED BUG dropout-per-rank-seed: the dropout of a replicated activation seeded per rank
  // (seed + rank, as for the dropout inside the sharded region), so the ranks drop different
  // elements of what must stay one identical tensor.
  if (config_.planted_bug == PlantedBug::dropout_per_rank_seed && !x.placement.is_shard()) {
    masks.seed = config_.seed + static_cast<std::uint64_t>(group_.rank());
  }
  return {layer_dropout(masks, dropout, x.local, x.global, offset), x.placement, x.global};
}

ParallelTensor ParallelTransformerLayer::attention(const ParallelTensor& x) const {
  if (config_.mode == ParallelMode::ulysses) return attention_ulysses(x);
  Context& ctx = x.local.ctx();
  const decl::Modules& m = decl::layer(config_);
  const int t = group_.size();
  const std::int64_t heads = config_.heads / t, g = config_.kv_heads_count();
  const std::int64_t kv_heads = g >= t ? g / t : 1;  // t > g: the one head its queries need
  ParallelTensor qkv;
  {
    ScopeGuard s(ctx, m.qkv.scope);
    const LocalWeights w = local_weights(m.qkv);
    qkv = column_parallel_linear(group_, x, w.weights, concat_biases(w.biases), linear_);
    if (g < t) {
      // The key/value weights are replicated over more ranks than heads: every rank makes all g
      // heads' keys and values (from the whole weight, a parameter: nothing extra is saved) and
      // keeps the head its a/t query heads need, rank / (t / g). The other heads' gradients are
      // zero here; the all-reduce of the weight's partial gradient sums each head's users.
      const std::int64_t d = config_.head_dim();
      const std::vector<Tensor> q_kv = split(qkv.local, 2, {heads * d, 2 * g * d});
      const Tensor own = chunk(
          q_kv[1], 2,
          static_cast<int>(g))[static_cast<std::size_t>(group_.rank() / (t / static_cast<int>(g)))];
      qkv.local = concat({q_kv[0], own}, 2);
    }
  }
  // Every rank holds the whole sequence here (tp-sp gathered it): positions from 0.
  const HeadTensors h = rotary(config_, split_heads(config_, qkv.local, heads, kv_heads), 2, 0);
  Tensor context = merge_heads(config_, attention_core(config_, h, group_.rank() * heads));
  const Shape full{config_.seq, config_.batch, config_.hidden};
  ParallelTensor out;
  {
    ScopeGuard s(ctx, m.proj.scope);
    out = row_parallel_linear(
        group_, ParallelTensor::make(context, Placement::shard(2), full, group_.size()),
        param(decl::weight(m.proj)), bias(m.proj), linear_);
  }
  return dropout_block(m.out_dropout, out);
}

ParallelTensor ParallelTransformerLayer::attention_ulysses(const ParallelTensor& x) const {
  Context& ctx = x.local.ctx();
  const decl::Modules& m = decl::layer(config_);
  const int t = group_.size();
  const std::int64_t s = x.local.dim(0), b = config_.batch, a = config_.heads;
  const std::int64_t d = config_.head_dim();
  const std::int64_t g = config_.kv_heads_count();
  Tensor qkv;
  {
    ScopeGuard q(ctx, m.qkv.scope);
    qkv = linear(m.qkv, x.local);  // [s/t, b, 3h], or under GQA [s/t, b, h + 2gd]
  }
  HeadTensors heads;  // by position: [s/t, b, a, d] and [s/t, b, g, d]
  {
    ScopeGuard hs(ctx, m.heads.scope);
    if (g == a) {
      // [s/t, b, a, 3, d] -> [3, s/t, b, a, d] -> q, k, v [s/t, b, a, d], by sequence.
      std::vector<Tensor> parts =
          chunk(permute(reshape(qkv, {s, b, a, 3, d}), {3, 0, 1, 2, 4}), 0, 3);
      heads = {reshape(parts[0], {s, b, a, d}), reshape(parts[1], {s, b, a, d}),
               reshape(parts[2], {s, b, a, d})};
    } else {
      heads = split_grouped_by_position(config_, qkv, a, g);
    }
  }
  // Rotated on the sequence shard (before the all-to-all, as Megatron-DeepSpeed does), so each
  // position is rotated by its global index: this rank's rows start at rank * s/t.
  // PLANTED BUG rope-local-positions: every rank numbers its shard's positions from 0.
  const std::int64_t first_position =
      config_.planted_bug == PlantedBug::rope_local_positions ? 0 : group_.rank() * s;
  heads = rotary(config_, heads, 0, first_position);
  {
    ScopeGuard hs(ctx, m.heads.scope);
    // Fewer key/value heads than ranks (t > g): each head repeated t/g times, so that the
    // all-to-all gives every rank the head its a/t query heads need (DeepSpeed-Ulysses's
    // treatment of GQA); backward sums the copies' gradients.
    const std::int64_t sent_kv = std::max<std::int64_t>(g, t);
    if (sent_kv != g) {
      for (Tensor* kv : {&heads.k, &heads.v}) {
        const std::vector<Tensor> one = chunk(*kv, 2, static_cast<int>(g));
        std::vector<Tensor> copies;
        for (const Tensor& head : one)
          copies.insert(copies.end(), static_cast<std::size_t>(t / g), head);
        *kv = concat(copies, 2);
      }
    }
    // Each of q, k, v from sequence to head shards.
    Tensor* slots[] = {&heads.q, &heads.k, &heads.v};
    for (Tensor* slot : slots) {
      const Shape global{s * t, b, slot == &heads.q ? a : sent_kv, d};
      const ParallelTensor seq_sharded =
          ParallelTensor::make(*slot, Placement::shard(0), global, t);
      *slot = permute(seq_to_heads(group_, seq_sharded).local, {1, 2, 0, 3});  // [b, heads/t, s, d]
    }
  }
  Tensor context = attention_core(config_, heads, group_.rank() * (a / t));  // [b, a/t, s, d]
  Tensor merged;
  {
    ScopeGuard c(ctx, m.context.scope);
    const ParallelTensor head_sharded = ParallelTensor::make(
        permute(context, {2, 0, 1, 3}), Placement::shard(2), Shape{s * t, b, a, d}, t);
    merged = reshape(heads_to_seq(group_, head_sharded, config_.planted_bug).local, {s, b, a * d});
  }
  Tensor out;
  {
    ScopeGuard p(ctx, m.proj.scope);
    out = linear(m.proj, merged);
  }
  return dropout_block(m.out_dropout, {out, x.placement, x.global});
}

ParallelTensor ParallelTransformerLayer::mlp(const ParallelTensor& x) const {
  Context& ctx = x.local.ctx();
  const decl::Modules& m = decl::layer(config_);
  if (config_.mode == ParallelMode::ulysses) {
    Tensor h;
    {
      ScopeGuard s(ctx, m.fc1.scope);
      h = linear(m.fc1, x.local);
    }
    h = mlp_activation(m.act, h);
    {
      ScopeGuard s(ctx, m.fc2.scope);
      h = linear(m.fc2, h);
    }
    return dropout_block(m.mlp_dropout, {h, x.placement, x.global});
  }
  ParallelTensor h;
  {
    ScopeGuard s(ctx, m.fc1.scope);
    const LocalWeights w = local_weights(m.fc1);
    h = column_parallel_linear(group_, x, w.weights, concat_biases(w.biases), linear_);
  }
  h.local = mlp_activation(m.act, h.local);
  {
    ScopeGuard s(ctx, m.fc2.scope);
    h = row_parallel_linear(group_, h, param(decl::weight(m.fc2)), bias(m.fc2), linear_);
  }
  return dropout_block(m.mlp_dropout, h);
}

Tensor ParallelTransformerLayer::layer_norm(const ParallelTensor& x,
                                            const decl::ModuleDecl& norm) const {
  const Tensor& gamma = param(decl::weight(norm));
  const Tensor beta = bias(norm);
  if (config_.planted_bug != PlantedBug::layernorm_local_shard) {
    return norm_op(norm, x.local, gamma, beta, config_.layernorm_eps);
  }
  // PLANTED BUG layernorm-local-shard: the LayerNorm split over the hidden dim like the linears
  // around it, each rank normalising its h/t columns with their own mean and variance
  // (layernorm_local) instead of the full row's, then gathering the columns back.
  const Shape vector{config_.hidden};
  const ParallelTensor columns = split_last(group_, x);
  const ParallelTensor g = split_last(group_, {gamma, Placement::replicate(), vector});
  const ParallelTensor b = split_last(group_, {beta, Placement::replicate(), vector});
  return gather_last(group_,
                     layernorm_local(group_, columns, g.local, b.local, config_.layernorm_eps))
      .local;
}

ParallelTensor ParallelTransformerLayer::forward(const ParallelTensor& x) const {
  Context& ctx = x.local.ctx();
  const Shape full{config_.seq, config_.batch, config_.hidden};
  if (x.global != full || x.local.dtype() != config_.dtype) {
    throw ShapeError("ParallelTransformerLayer (layer " + std::to_string(config_.layer) +
                     ", rank " + std::to_string(group_.rank()) + "): input must be " +
                     dtype_name(config_.dtype) + full.str() + ", given " + x.str());
  }
  expect_placement(ctx.where("transformer_layer"), x, activation_placement());
  LayerGuard layer(ctx, config_.layer);
  if (config_.recompute != Recompute::full) return body(x);
  // Full recomputation: only the layer's input (this rank's part of it) is kept; backward runs the
  // layer again, its collectives too.
  const Placement placement = x.placement;
  const Shape global = x.global;
  const Tensor y = checkpoint(decl::layer(config_).recompute->scope, {x.local},
                              [this, placement, global](const std::vector<Tensor>& in) {
                                return body({in[0], placement, global}).local;
                              });
  return {y, x.placement, x.global};
}

ParallelTensor ParallelTransformerLayer::body(const ParallelTensor& x) const {
  Context& ctx = x.local.ctx();
  const decl::Modules& m = decl::layer(config_);
  ParallelTensor ln1{Tensor(), x.placement, x.global};
  {
    ScopeGuard s(ctx, m.ln1.scope);
    ln1.local = layer_norm(x, m.ln1);
  }
  const ParallelTensor attn_out = attention(ln1);
  ParallelTensor h1{Tensor(), x.placement, x.global};
  {
    ScopeGuard r(ctx, m.residual1.scope);
    h1.local = add(x.local, attn_out.local);
  }
  ParallelTensor ln2{Tensor(), x.placement, x.global};
  {
    ScopeGuard s(ctx, m.ln2.scope);
    ln2.local = layer_norm(h1, m.ln2);
  }
  const ParallelTensor mlp_out = mlp(ln2);
  ScopeGuard r(ctx, m.residual2.scope);
  return {add(h1.local, mlp_out.local), x.placement, x.global};
}

void ParallelTransformerLayer::reduce_parameter_gradients() {
  Context& ctx = group_.ctx();
  NoGradGuard no_grad(ctx);
  LayerGuard layer(ctx, config_.layer);
  ScopeGuard scope(ctx, decl::kGradReduceScope);
  // Names the all-reduces in logs and errors; these reductions finish the backward.
  CurrentOpGuard op(ctx, "reduce_parameter_gradients", Phase::backward);
  const PlantedBug bug = config_.planted_bug;
  const double inverse_t = 1.0 / group_.size();
  for (ShardedParameter& p : params_) {
    if (!p.partial_grad || !p.local.grad().defined()) continue;
    // PLANTED BUG sp-layernorm-grad-not-reduced: the LayerNorms taken for replicated weights
    // whose gradients need no reduction; each rank keeps the sum over its own positions only.
    if (bug == PlantedBug::sp_layernorm_grad_not_reduced && decl::is_norm(p.module->kind)) {
      continue;
    }
    // PLANTED BUG row-bias-grad-not-reduced: the same for the row-parallel linears' biases.
    if (bug == PlantedBug::row_bias_grad_not_reduced && p.module->kind == decl::Kind::row_linear &&
        decl::has_bias(*p.module) && p.name == decl::stack_name(config_, decl::bias(*p.module))) {
      continue;
    }
    Tensor g = p.local.grad();
    // PLANTED BUG grad-scaled-twice: divided by t before the all-reduce (a pre-divide, as data
    // parallelism does against overflow) and again after it (the post-divide of an average).
    if (bug == PlantedBug::grad_scaled_twice) ctx.backend().scale(g, inverse_t, g);
    group_.all_reduce(g, ReduceOp::sum, CommPurpose::param_grad);
    // PLANTED BUG replicated-grad-averaged: averaged as data-parallel gradients are, where the
    // ranks' partial sums over the sequence must be summed.
    if (bug == PlantedBug::grad_scaled_twice || bug == PlantedBug::replicated_grad_averaged) {
      ctx.backend().scale(g, inverse_t, g);
    }
    if (ctx.check_finite()) {  // finite partial sums can overflow when summed across ranks
      check_finite(g, ctx.where("reduce_parameter_gradients"),
                   "gradient of " + p.name + " after the all-reduce",
                   "every rank's partial gradient was finite (the backward checked them): the "
                   "sum over the ranks overflowed");
    }
  }
}

void ParallelTransformerLayer::check_replicated() const {
  Context& ctx = group_.ctx();
  CurrentOpGuard op(ctx, "check_replicated");
  // A missing all-reduce leaves finite copies that differ; NaN or Inf has another cause.
  auto fail = [&](const std::string& what, bool finite = true) {
    throw Error(what + " (rank " + std::to_string(group_.rank()) + ")" +
                (finite ? ": is a gradient all-reduce missing?"
                        : ": the values overflowed or became NaN, not a missing all-reduce"));
  };
  for (const ShardedParameter& p : params_) {
    if (p.placement.is_shard()) continue;
    const Tensor tensors[] = {p.local, p.local.grad()};
    for (int i = 0; i < 2; ++i) {
      if (!tensors[i].defined()) continue;
      const std::string name = (i ? "gradient of " : "parameter ") + p.name;
      for (double v : tensors[i].to_vector()) {
        if (!std::isfinite(v)) fail("replicated " + name + " holds " + std::to_string(v), false);
      }
      // Equal on every rank iff max over ranks of x equals the min: max(x) + max(-x) == 0.
      Tensor hi = tensors[i].clone(), lo = tensors[i].clone();
      ctx.backend().scale(lo, -1.0, lo);
      group_.all_reduce(hi, ReduceOp::max, CommPurpose::check);
      group_.all_reduce(lo, ReduceOp::max, CommPurpose::check);
      const std::vector<double> a = hi.to_vector(), b = lo.to_vector();
      double worst = 0;
      for (std::size_t j = 0; j < a.size(); ++j) worst = std::max(worst, a[j] + b[j]);
      if (worst > 0) {
        fail("replicated " + name + " differs across ranks by up to " + std::to_string(worst));
      }
    }
  }
}

}  // namespace shardscope
