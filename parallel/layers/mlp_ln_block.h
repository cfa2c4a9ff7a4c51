// The Linear (column parallel) -> LayerNorm over the sharded feature dim -> Linear (row parallel)
// block, the case TransformerEngine does not cover. Activations are [s, b, h]:
//
//   single device:  y = LN(x W1 + b1) W2 + b2,   W1 [h, f], LN over f, W2 [f, h]
//   t ranks:        x Replicate -> column_parallel_linear (W1 columns, Shard(-1) [s, b, f/t])
//                   -> layernorm_exact or layernorm_local over the sharded f
//                   -> row_parallel_linear (W2 rows) -> Replicate [s, b, h]
//
// The shards are slices of the full weights, so the single-device block can always be run on the
// same weights and inputs and compared tensor by tensor (run_mlp_ln_rank).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/spmd.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/run/tensor_compare.h"

namespace shardscope {

struct MlpLnConfig {
  std::int64_t seq = 8;      // s
  std::int64_t batch = 2;    // b
  std::int64_t hidden = 16;  // h
  std::int64_t ffn = 64;     // f, the LayerNorm's feature dim
  int degree = 2;            // t
  DType dtype = DType::f32;
  std::uint64_t seed = 1;  // weights, input and output gradient derive from it
  double layernorm_eps = 1e-5;

  // Throws ArgumentError naming the flag and the rule (sizes, --ffn divisible by --degree).
  void validate() const;
};

// Which LayerNorm the parallel block runs over the sharded f.
enum class ShardedNorm : std::uint8_t { exact, local };
const char* sharded_norm_name(ShardedNorm norm);  // "exact", "local"

struct MlpLnWeights {
  Tensor fc1_weight, fc1_bias;  // [h, f], [f]
  Tensor ln_weight, ln_bias;    // [f], [f]
  Tensor fc2_weight, fc2_bias;  // [f, h], [h]

  // "fc1.weight", "fc1.bias", "ln.weight", "ln.bias", "fc2.weight", "fc2.bias", in that order.
  std::vector<std::pair<std::string, Tensor>> named() const;
};

// Deterministic parameters from config.seed: linear weights and biases Normal(0, 0.02), LayerNorm
// weight Normal(1, 0.1) and bias Normal(0, 0.1) (not 1 and 0, so a wrong gamma slice shows).
MlpLnWeights make_mlp_ln_weights(Context& ctx, const MlpLnConfig& config);

// The single-device block on x [s, b, h]. norm_slices = 1 is the ordinary LayerNorm over f;
// norm_slices = t normalises each of t equal feature slices by itself (the model `local`
// computes on t ranks), with the matching slices of the LayerNorm weight and bias.
Tensor mlp_ln_block(const MlpLnWeights& weights, const Tensor& x, double eps, int norm_slices = 1);

class ParallelMlpLnBlock {
 public:
  // Slices this rank's shards from the full weights `full` (in any context) into the group's
  // context. config.degree must equal the group size.
  ParallelMlpLnBlock(const MlpLnConfig& config, ShardedNorm norm, ProcessGroup& group,
                     const MlpLnWeights& full);

  // x Replicate [s, b, h] -> Replicate [s, b, h], in scopes "fc1", "ln", "fc2".
  ParallelTensor forward(const ParallelTensor& x) const;
  const std::vector<ShardedParameter>& parameters() const { return params_; }

 private:
  const Tensor& param(std::size_t i) const { return params_[i].local; }

  MlpLnConfig config_;
  ShardedNorm norm_;
  ProcessGroup& group_;
  std::vector<ShardedParameter> params_;  // in MlpLnWeights::named() order
};

// Parallel against a single-device reference, one tensor.

struct MlpLnComparison {
  ShardedNorm norm = ShardedNorm::exact;
  std::vector<TensorCheck> vs_single;  // against the single-device LayerNorm over the full f
  std::vector<TensorCheck> vs_sliced;  // against LayerNorm of each of the t feature slices alone
};

// The largest max_rel_err of a list (0 for an empty one).
double max_rel_err(const std::vector<TensorCheck>& diffs);
// The max_rel_err under which the parallel block counts as equal to a reference in `dtype`.

// Runs on every rank of env's group (its size must equal config.degree): the parallel block with
// `norm` on the deterministic input, backward from a deterministic output gradient, then gathers
// the output, input gradient and parameter gradients. Rank 0 returns the comparison with both
// single-device references; the other ranks return it with empty lists.
MlpLnComparison run_mlp_ln_rank(RankEnv& env, const MlpLnConfig& config, ShardedNorm norm);

}  // namespace shardscope
