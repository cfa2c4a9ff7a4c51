// The Linear (column) -> LayerNorm -> Linear (row) block: weights, the single-device block and
// its per-slice variant, the parallel block, and one rank's run with the reference comparison.
#include "parallel/layers/mlp_ln_block.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"
#include "parallel/layers/sharded_layernorm.h"

namespace shardscope {
namespace {

// The block's weight streams, apart from the Transformer layer's kSeedWeights + 64 * layer + i
// (which reach 0x20000 only at layer 1024).
constexpr std::uint64_t kSeedMlpLnWeights = 0x20000;

enum class Dims { h_f, f, f_h, h };

// The one table of the block's parameters: name, member, shape, Normal(mean, std) values and the
// dim a rank's shard takes (-1: replicated).
struct WeightSlot {
  const char* name;
  Tensor MlpLnWeights::*member;
  Dims dims;
  double mean;
  double std;
  int shard_dim;
};

constexpr WeightSlot kWeightSlots[] = {
    {"fc1.weight", &MlpLnWeights::fc1_weight, Dims::h_f, 0.0, 0.02, 1},
    {"fc1.bias", &MlpLnWeights::fc1_bias, Dims::f, 0.0, 0.02, 0},
    {"ln.weight", &MlpLnWeights::ln_weight, Dims::f, 1.0, 0.1, 0},
    {"ln.bias", &MlpLnWeights::ln_bias, Dims::f, 0.0, 0.1, 0},
    {"fc2.weight", &MlpLnWeights::fc2_weight, Dims::f_h, 0.0, 0.02, 0},
    {"fc2.bias", &MlpLnWeights::fc2_bias, Dims::h, 0.0, 0.02, -1},
};

Shape slot_shape(const WeightSlot& slot, const MlpLnConfig& c) {
  switch (slot.dims) {
    case Dims::h_f:
      return {c.hidden, c.ffn};
    case Dims::f:
      return {c.ffn};
    case Dims::f_h:
      return {c.ffn, c.hidden};
    case Dims::h:
      return {c.hidden};
  }
  return {};
}

Placement slot_placement(const WeightSlot& slot) {
  return slot.shard_dim < 0 ? Placement::replicate() : Placement::shard(slot.shard_dim);
}

std::string block_where(const Context& ctx) {
  return "mlp-ln block (rank " + std::to_string(ctx.rank()) + ")";
}

// The single-device block (LayerNorm over `norm_slices` slices) on the same weights and data,
// backward from the same output gradient, compared with `got` (output, input grad, param grads).
std::vector<TensorCheck> compare_with_reference(const MlpLnConfig& c,
                                                const std::vector<Tensor>& got, int norm_slices) {
  Context ref(0);
  const MlpLnWeights w = make_mlp_ln_weights(ref, c);
  const Shape shape{c.seq, c.batch, c.hidden};
  Tensor x = Tensor::randn(ref, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype);
  x.set_requires_grad(true);
  const Tensor y = mlp_ln_block(w, x, c.layernorm_eps, norm_slices);
  y.backward(
      Tensor::randn(ref, shape, kernels::derive_seed(c.seed, kSeedOutputGrad), 1.0, c.dtype));
  std::vector<std::pair<std::string, Tensor>> want{{"output", y}, {"input.grad", x.grad()}};
  for (const auto& [name, t] : w.named()) want.emplace_back(name + ".grad", t.grad());
  std::vector<TensorCheck> out;
  for (std::size_t i = 0; i < want.size(); ++i) {
    out.push_back(
        check_tensor(want[i].first, got.at(i), want[i].second, default_tolerance(c.dtype)));
  }
  return out;
}

// Output, input gradient and every parameter gradient as full tensors, on every rank.
std::vector<Tensor> gather_results(ProcessGroup& g, const ParallelMlpLnBlock& block,
                                   const ParallelTensor& x, const ParallelTensor& y) {
  ScopeGuard scope(g.ctx(), "check");
  std::vector<Tensor> got{gather_to_full(g, y.local, y.placement, CommPurpose::check),
                          gather_to_full(g, x.local.grad(), x.placement, CommPurpose::check)};
  for (const ShardedParameter& p : block.parameters()) {
    got.push_back(gather_to_full(g, p.local.grad(), p.placement, CommPurpose::check));
  }
  return got;
}

}  // namespace

void MlpLnConfig::validate() const {
  require_positive("seq", seq);
  require_positive("batch", batch);
  require_positive("hidden", hidden);
  require_positive("ffn", ffn);
  require_positive("degree", degree);
  if (ffn % degree != 0) {
    throw ConfigError("ffn " + std::to_string(ffn) + " must be divisible by degree " +
                          std::to_string(degree) + " (each rank normalises ffn/degree features)",
                      {"ffn", "degree"});
  }
  require_floating("the block", dtype);
  require_eps(layernorm_eps);
  const double rows = static_cast<double>(seq) * static_cast<double>(batch);
  require_tensor_limit(std::max({rows * static_cast<double>(std::max(hidden, ffn)),
                                 static_cast<double>(hidden) * static_cast<double>(ffn)}),
                       {{"seq", seq}, {"batch", batch}, {"hidden", hidden}, {"ffn", ffn}});
}

const char* sharded_norm_name(ShardedNorm norm) {
  return norm == ShardedNorm::exact ? "exact" : "local";
}

std::vector<std::pair<std::string, Tensor>> MlpLnWeights::named() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const WeightSlot& slot : kWeightSlots) out.emplace_back(slot.name, this->*slot.member);
  return out;
}

MlpLnWeights make_mlp_ln_weights(Context& ctx, const MlpLnConfig& c) {
  c.validate();
  MlpLnWeights w;
  std::uint64_t index = kSeedMlpLnWeights;
  for (const WeightSlot& slot : kWeightSlots) {
    const std::uint64_t key = kernels::derive_seed(c.seed, index++);
    const Tensor values =
        Tensor::randn(ctx, slot_shape(slot, c), key, slot.std, c.dtype, slot.mean);
    w.*slot.member = Tensor::parameter(values, slot.name);
  }
  return w;
}

Tensor mlp_ln_block(const MlpLnWeights& w, const Tensor& x, double eps, int norm_slices) {
  Context& ctx = x.ctx();
  if (norm_slices < 1) {
    throw ArgumentError(block_where(ctx) + ": norm_slices must be >= 1, given " +
                        std::to_string(norm_slices));
  }
  Tensor h;
  {
    ScopeGuard s(ctx, "fc1");
    h = add(matmul(x, w.fc1_weight), w.fc1_bias);  // [s, b, f]
  }
  {
    ScopeGuard s(ctx, norm_slices == 1 ? "ln" : "ln_per_slice");
    if (norm_slices == 1) {
      h = layernorm(h, w.ln_weight, w.ln_bias, eps);
    } else {  // each [s, b, f/t] slice by its own statistics, as `local` does on t ranks
      std::vector<Tensor> parts = chunk(h, -1, norm_slices);
      const std::vector<Tensor> gammas = chunk(w.ln_weight, 0, norm_slices);
      const std::vector<Tensor> betas = chunk(w.ln_bias, 0, norm_slices);
      for (std::size_t i = 0; i < parts.size(); ++i) {
        parts[i] = layernorm(parts[i], gammas[i], betas[i], eps);
      }
      h = concat(parts, -1);
    }
  }
  ScopeGuard s(ctx, "fc2");
  return add(matmul(h, w.fc2_weight), w.fc2_bias);  // [s, b, h]
}

ParallelMlpLnBlock::ParallelMlpLnBlock(const MlpLnConfig& config, ShardedNorm norm,
                                       ProcessGroup& group, const MlpLnWeights& full)
    : config_(config), norm_(norm), group_(group) {
  config_.validate();
  if (group.size() != config_.degree) {
    throw ArgumentError(block_where(group.ctx()) + ": degree " + std::to_string(config_.degree) +
                        " but the group has " + std::to_string(group.size()) + " ranks");
  }
  for (const WeightSlot& slot : kWeightSlots) {
    const Tensor& tensor = full.*slot.member;
    const Shape expected = slot_shape(slot, config_);
    if (!tensor.defined() || tensor.shape() != expected || tensor.dtype() != config_.dtype) {
      throw ArgumentError(block_where(group.ctx()) + ": " + slot.name + " must be " +
                          dtype_name(config_.dtype) + expected.str() + ", given " +
                          tensor.describe());
    }
    ShardedParameter p;
    p.name = slot.name;
    p.placement = slot_placement(slot);
    p.global = expected;
    const Tensor slice = slice_of_full(tensor, p.placement, group.rank(), group.size());
    p.local = Tensor::parameter(slice.copy_to(group.ctx()), p.name);
    params_.push_back(std::move(p));
  }
}

ParallelTensor ParallelMlpLnBlock::forward(const ParallelTensor& x) const {
  Context& ctx = x.local.ctx();
  const Shape expected{config_.seq, config_.batch, config_.hidden};
  if (x.global != expected || x.local.dtype() != config_.dtype) {
    throw ShapeError(block_where(ctx) + ": input must be " + dtype_name(config_.dtype) +
                     expected.str() + " [s, b, h], given " + x.str() + " " + x.local.describe());
  }
  ParallelTensor h;
  {
    ScopeGuard s(ctx, "fc1");  // Replicate [s, b, h] -> Shard(2) [s, b, f/t]
    h = column_parallel_linear(group_, x, param(0), param(1), {});
  }
  {
    ScopeGuard s(ctx, "ln");  // over the full f (exact) or the local f/t (local)
    const double eps = config_.layernorm_eps;
    h = norm_ == ShardedNorm::exact ? layernorm_exact(group_, h, param(2), param(3), eps)
                                    : layernorm_local(group_, h, param(2), param(3), eps);
  }
  ScopeGuard s(ctx, "fc2");  // Shard(2) -> Partial -> all-reduce -> Replicate [s, b, h]
  return row_parallel_linear(group_, h, param(4), param(5), {});
}

double max_rel_err(const std::vector<TensorCheck>& diffs) {
  double worst = 0;
  for (const TensorCheck& d : diffs) worst = std::max(worst, d.max_rel_err);
  return worst;
}

MlpLnComparison run_mlp_ln_rank(RankEnv& env, const MlpLnConfig& c, ShardedNorm norm) {
  c.validate();
  Context scratch(env.rank);  // full weights and data, outside the rank's context
  const MlpLnWeights full = make_mlp_ln_weights(scratch, c);
  const Shape shape{c.seq, c.batch, c.hidden};
  const Tensor full_x =
      Tensor::randn(scratch, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype);
  const Tensor full_dy =
      Tensor::randn(scratch, shape, kernels::derive_seed(c.seed, kSeedOutputGrad), 1.0, c.dtype);

  const ParallelMlpLnBlock block(c, norm, env.group, full);
  ParallelTensor x =
      ParallelTensor::make(full_x.copy_to(env.ctx), Placement::replicate(), shape, env.world);
  x.local.set_name("input").set_requires_grad(true);
  const ParallelTensor y = block.forward(x);
  y.local.backward(full_dy.copy_to(env.ctx));  // the output is Replicate: one loss, one gradient
  const std::vector<Tensor> got = gather_results(env.group, block, x, y);

  MlpLnComparison result;
  result.norm = norm;
  if (env.rank != 0) return result;
  result.vs_single = compare_with_reference(c, got, 1);
  result.vs_sliced = compare_with_reference(c, got, c.degree);
  return result;
}

}  // namespace shardscope
