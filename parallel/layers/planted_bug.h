// The bug catalogue: known mistakes of tensor and sequence parallelism that a run can plant into
// the parallel layer (LayerConfig::planted_bug), so that the reference check is seen to catch
// each one. One table (planted_bugs()) holds every bug's name, description, the modes it applies
// to and what it is expected to break; the accepted names, the errors and docs/bug-catalogue.md
// derive from it. Each bug is planted by one commented `if (... == PlantedBug::...)` at the place
// in the parallel code where a person would make the mistake (grep for "PLANTED BUG").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/run/diagnosis.h"

namespace shardscope {

enum class ParallelMode : std::uint8_t;  // layer_config.h
struct LayerConfig;                      // layer_config.h

enum class PlantedBug : std::uint8_t {
  none,
  sp_layernorm_grad_not_reduced,
  row_bias_grad_not_reduced,
  row_bias_added_every_rank,
  f_backward_identity,
  loss_times_t,
  qkv_block_split,
  attention_local_scale,
  dropout_per_rank_seed,
  sp_gather_wrong_dim,
  ulysses_a2a_order,
  causal_mask_local_positions,
  layernorm_local_shard,
  grad_scaled_twice,
  replicated_grad_averaged,
  rope_local_positions,
};

struct PlantedBugInfo {
  PlantedBug bug;
  const char* name;         // "sp-layernorm-grad-not-reduced"
  const char* description;  // one line
  unsigned modes;           // bit 1 << ParallelMode of each mode it applies to
  bool needs_dropout;       // a no-op at dropout 0
  // Space-separated names of the checked tensors that diverge in the first mode the bug applies
  // to; with `exact`, no other tensor diverges there.
  const char* diverging;
  bool exact;
  bool output_ok;           // a backward-only bug: the output still matches
  const char* main_tensor;  // the tensor whose diagnosis tells the bug
  Diagnosis::Kind diagnosis;
  bool needs_rope = false;  // a mistake of the rotary embedding (LayerConfig::rope)
};

// Every bug of the catalogue (none excluded), in catalogue order.
const std::vector<PlantedBugInfo>& planted_bugs();
// Throws ArgumentError for PlantedBug::none (it has no entry).
const PlantedBugInfo& planted_bug_info(PlantedBug bug);
const char* planted_bug_name(PlantedBug bug);  // "none" for none
// "none" or a catalogue name; else ArgumentError "planted_bug: ... expected none, a, b, ...".
PlantedBug parse_planted_bug(const std::string& name);
std::string planted_bug_names();  // "none, sp-layernorm-grad-not-reduced, ..."
bool planted_bug_applies(PlantedBug bug, ParallelMode mode);  // none applies everywhere
ParallelMode first_mode(PlantedBug bug);                      // where the catalogue measures it
std::string planted_bug_modes(PlantedBug bug);                // "tp or tp-sp"
std::vector<std::string> diverging_tensors(PlantedBug bug);
// Throws ArgumentError naming the field planted_bug when `bug` cannot be planted in config.mode
// (with the modes it needs) or needs what the layer lacks: dropout > 0, causal attention, the
// linears' biases, LayerNorm, the rotary embedding.
void validate_planted_bug(PlantedBug bug, const LayerConfig& config);

// The bugs that can be planted into a run of `config` (its mode, dropout and causal setting, by
// validate_planted_bug's rules), in catalogue order; empty for mode single.
std::vector<PlantedBug> plantable_bugs(const LayerConfig& config);
// The hidden bug of a "find the bug" run (`--plant-bug random`, lab 8): one of
// plantable_bugs(config), chosen by a hash of `seed` and the mode, the same on every machine and
// every run (it changes only when the catalogue does). Throws ArgumentError naming the field mode
// when no bug can be planted (mode single).
PlantedBug choose_random_bug(std::uint64_t seed, const LayerConfig& config);

}  // namespace shardscope
