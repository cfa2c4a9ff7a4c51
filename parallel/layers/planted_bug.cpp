// The bug catalogue's table and the names, checks and errors derived from it.
#include "parallel/layers/planted_bug.h"

#include <sstream>

#include "autograd/errors.h"
#include "parallel/layers/layer_config.h"

namespace shardscope {
namespace {

constexpr unsigned bit(ParallelMode m) {
  return 1u << static_cast<unsigned>(m);
}
constexpr unsigned kTp = bit(ParallelMode::tp), kSp = bit(ParallelMode::tp_sp),
                   kUlysses = bit(ParallelMode::ulysses);
constexpr ParallelMode kModes[] = {ParallelMode::single, ParallelMode::tp, ParallelMode::tp_sp,
                                   ParallelMode::ulysses};

using K = Diagnosis::Kind;
constexpr const char* kLayerNormGrads =
    "ln1.weight.grad ln1.bias.grad ln2.weight.grad ln2.bias.grad";
constexpr const char* kRowBiasGrads = "attn.proj.bias.grad mlp.fc2.bias.grad";
constexpr const char* kReplicatedGrads =
    "ln1.weight.grad ln1.bias.grad ln2.weight.grad ln2.bias.grad attn.proj.bias.grad "
    "mlp.fc2.bias.grad";

const std::vector<PlantedBugInfo>& table() {
  // bug, name, description, modes, needs_dropout, diverging, exact, output_ok, main_tensor,
  // diagnosis of the main tensor, needs_rope
  static const std::vector<PlantedBugInfo> bugs{
      {PlantedBug::sp_layernorm_grad_not_reduced, "sp-layernorm-grad-not-reduced",
       "the LayerNorm weight and bias gradients are never all-reduced over the sequence shards",
       kSp, false, kLayerNormGrads, true, true, "ln2.bias.grad", K::unstructured},
      {PlantedBug::row_bias_grad_not_reduced, "row-bias-grad-not-reduced",
       "the row-parallel biases' gradients (attn.proj.bias, mlp.fc2.bias) are never all-reduced",
       kSp, false, kRowBiasGrads, true, true, "mlp.fc2.bias.grad", K::unstructured},
      {PlantedBug::row_bias_added_every_rank, "row-bias-added-every-rank",
       "every rank adds the row-parallel bias before the all-reduce, so the sum holds it t times",
       kTp | kSp, false, "output input.grad attn.proj.bias.grad mlp.fc2.bias.grad", false, false,
       "output", K::unstructured},
      {PlantedBug::f_backward_identity, "f-backward-identity",
       "f and g swapped: the column-parallel input's backward passes the gradient on where it must "
       "all-reduce it",
       kTp, false, "input.grad ln1.weight.grad ln1.bias.grad ln2.weight.grad ln2.bias.grad", false,
       true, "ln2.bias.grad", K::unstructured},
      {PlantedBug::loss_times_t, "loss-times-t",
       "the MSE gradient is normalised by the rank's element count instead of the global one",
       kSp | kUlysses, false,
       "input.grad ln1.weight.grad attn.qkv.weight.grad mlp.fc2.weight.grad mlp.fc2.bias.grad",
       false, true, "input.grad", K::ratio},
      {PlantedBug::qkv_block_split, "qkv-block-split",
       "the fused QKV columns are split as [q | k | v] blocks instead of whole heads", kTp, false,
       "output attn.qkv.weight.grad", false, false, "output", K::unstructured},
      {PlantedBug::attention_local_scale, "attention-local-scale",
       "the attention scores are scaled by 1/sqrt(h/t), the rank's hidden slice, instead of "
       "1/sqrt(d)",
       kTp | kSp | kUlysses, false, "ln1.weight.grad attn.qkv.weight.grad attn.proj.weight.grad",
       false, false, "attn.qkv.weight.grad", K::unstructured},
      {PlantedBug::dropout_per_rank_seed, "dropout-per-rank-seed",
       "the dropout on a replicated activation is seeded per rank where every rank needs the same "
       "mask",
       kTp, true, "output", false, false, "output", K::unstructured},
      {PlantedBug::sp_gather_wrong_dim, "sp-gather-wrong-dim",
       "the sequence all-gather runs along the batch dim and is read as [s, b, h]", kSp, false,
       "output attn.qkv.weight.grad mlp.fc1.weight.grad", false, false, "output", K::unstructured},
      {PlantedBug::ulysses_a2a_order, "ulysses-a2a-order",
       "the all-to-all's receive buffer [t, s/t, b, a/t, d] is read as [s/t, b, a, d]: the source "
       "rank's head chunk taken for sequence order",
       kUlysses, false, "output attn.proj.weight.grad", false, false, "output", K::unstructured},
      {PlantedBug::causal_mask_local_positions, "causal-mask-local-positions",
       "the causal mask is built from each sequence shard's local positions (0 .. s/t-1)",
       kSp | kUlysses, false, "output attn.qkv.weight.grad", false, false, "output",
       K::unstructured},
      {PlantedBug::layernorm_local_shard, "layernorm-local-shard",
       "the LayerNorms run on the rank's h/t columns with that slice's own mean and variance", kTp,
       false, "output ln1.weight.grad", false, false, "output", K::unstructured},
      {PlantedBug::grad_scaled_twice, "grad-scaled-twice",
       "the replicated gradients are divided by t before the all-reduce and again after it",
       kSp | kUlysses, false, kReplicatedGrads, true, true, "ln1.weight.grad", K::ratio},
      {PlantedBug::replicated_grad_averaged, "replicated-grad-averaged",
       "the replicated gradients are averaged (sum, then 1/t) where the partial sums must be "
       "summed",
       kSp | kUlysses, false, kReplicatedGrads, true, true, "ln1.weight.grad", K::ratio},
      {PlantedBug::rope_local_positions, "rope-local-positions",
       "the rotary embedding on a sequence shard numbers its positions from 0 instead of the "
       "shard's global offset",
       kUlysses, false, "output attn.qkv.weight.grad", false, false, "output", K::one_block_wrong,
       true},
  };
  return bugs;
}

}  // namespace

const std::vector<PlantedBugInfo>& planted_bugs() {
  return table();
}

const PlantedBugInfo& planted_bug_info(PlantedBug bug) {
  for (const PlantedBugInfo& info : table()) {
    if (info.bug == bug) return info;
  }
  throw ArgumentError("planted_bug none has no catalogue entry");
}

const char* planted_bug_name(PlantedBug bug) {
  return bug == PlantedBug::none ? "none" : planted_bug_info(bug).name;
}

std::string planted_bug_names() {
  std::string names = "none";
  for (const PlantedBugInfo& info : table()) names += std::string(", ") + info.name;
  return names;
}

PlantedBug parse_planted_bug(const std::string& name) {
  if (name == "none") return PlantedBug::none;
  for (const PlantedBugInfo& info : table()) {
    if (name == info.name) return info.bug;
  }
  throw ArgumentError("planted_bug '" + name + "' is not in the bug catalogue: expected one of " +
                      planted_bug_names());
}

bool planted_bug_applies(PlantedBug bug, ParallelMode mode) {
  return bug == PlantedBug::none || (planted_bug_info(bug).modes & bit(mode)) != 0;
}

ParallelMode first_mode(PlantedBug bug) {
  for (ParallelMode m : kModes) {
    if (bug != PlantedBug::none && planted_bug_applies(bug, m)) return m;
  }
  return ParallelMode::single;
}

std::string planted_bug_modes(PlantedBug bug) {
  std::vector<std::string> names;
  for (ParallelMode m : kModes) {
    if (bug != PlantedBug::none && planted_bug_applies(bug, m)) names.push_back(mode_name(m));
  }
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

std::vector<std::string> diverging_tensors(PlantedBug bug) {
  std::vector<std::string> names;
  std::istringstream words(planted_bug_info(bug).diverging);
  for (std::string w; words >> w;) names.push_back(w);
  return names;
}

void validate_planted_bug(PlantedBug bug, const LayerConfig& config) {
  if (bug == PlantedBug::none) return;
  const ParallelMode mode = config.mode;
  const double dropout = config.dropout;
  const PlantedBugInfo& info = planted_bug_info(bug);
  if (!planted_bug_applies(bug, mode)) {
    throw ArgumentError(std::string("planted_bug ") + info.name + " is a mistake of mode " +
                        planted_bug_modes(bug) + ", given mode " + mode_name(mode));
  }
  if (info.needs_dropout && !(dropout > 0)) {
    throw ArgumentError(std::string("planted_bug ") + info.name +
                        " changes the dropout masks: it needs dropout > 0, given " +
                        std::to_string(dropout));
  }
  if (bug == PlantedBug::causal_mask_local_positions && !config.causal) {
    throw ArgumentError(std::string("planted_bug ") + info.name + " needs causal attention");
  }
  const bool bias_bug =
      bug == PlantedBug::row_bias_grad_not_reduced || bug == PlantedBug::row_bias_added_every_rank;
  if (bias_bug && !config.bias) {
    throw ArgumentError(std::string("planted_bug ") + info.name +
                        " is a mistake with the row-parallel biases: it needs bias on");
  }
  if (info.needs_rope && !config.rope) {
    throw ArgumentError(std::string("planted_bug ") + info.name +
                        " is a mistake of the rotary embedding: it needs rope on");
  }
  if (bug == PlantedBug::qkv_block_split && config.kv_heads_count() != config.heads) {
    throw ArgumentError(std::string("planted_bug ") + info.name +
                        " is a mistake with GPT's fused QKV weight: it needs kv_heads = heads");
  }
  if (bug == PlantedBug::layernorm_local_shard && config.norm != Norm::layernorm) {
    throw ArgumentError(std::string("planted_bug ") + info.name + " needs norm layernorm, given " +
                        norm_name(config.norm));
  }
}

std::vector<PlantedBug> plantable_bugs(const LayerConfig& config) {
  std::vector<PlantedBug> bugs;
  for (const PlantedBugInfo& info : table()) {
    try {
      validate_planted_bug(info.bug, config);
      bugs.push_back(info.bug);
    } catch (const ArgumentError&) {
      // not plantable into this config: the table's own rule says why
    }
  }
  return bugs;
}

namespace {

// SplitMix64's finaliser (Steele, Lea and Flood 2014): neighbouring seeds give unrelated values.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

PlantedBug choose_random_bug(std::uint64_t seed, const LayerConfig& config) {
  const std::vector<PlantedBug> bugs = plantable_bugs(config);
  if (bugs.empty()) {
    throw ArgumentError(
        std::string("planted_bug random: no bug of the catalogue applies to mode ") +
        mode_name(config.mode) + " (expected tp, tp-sp or ulysses)");
  }
  // The mode enters the hash, so that seed N hides unrelated bugs in different modes.
  const std::uint64_t h = mix(seed ^ mix(static_cast<std::uint64_t>(config.mode) + 1));
  return bugs[static_cast<std::size_t>(h % bugs.size())];
}

}  // namespace shardscope
