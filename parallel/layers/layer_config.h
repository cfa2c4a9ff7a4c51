// LayerConfig: the shape and settings of one Transformer layer, with the parallel mode it runs
// in. validate() names the command-line flag of each rule it checks.
#pragma once

#include <cstdint>
#include <string>

#include "autograd/dtype.h"
#include "parallel/layers/planted_bug.h"

namespace shardscope {

enum class ParallelMode : std::uint8_t { single, tp, tp_sp, ulysses };

const char* mode_name(ParallelMode mode);  // "single", "tp", "tp-sp", "ulysses"
// Throws ConfigError (field "mode") listing the accepted names.
ParallelMode parse_mode(const std::string& name);

// Throws ConfigError "<field> must be a positive integer, given <value>" when value <= 0.
void require_positive(const char* field, std::int64_t value);

struct LayerConfig {
  std::int64_t seq = 16;     // s
  std::int64_t batch = 2;    // b
  std::int64_t hidden = 32;  // h
  std::int64_t heads = 4;    // a
  double dropout = 0.1;      // p of all three dropouts
  std::uint64_t seed = 1;    // weights, inputs and dropout masks derive from it
  int layer = 0;             // the layer index (dropout streams, traces)
  bool causal = true;
  double layernorm_eps = 1e-5;
  // LayerNorm weights 1 and biases 0 (the usual start, PyTorch's), or, when set, weights
  // 1 + Normal(0, 0.1) and biases Normal(0, 0.1): a mistake in a LayerNorm's scale or shift (a
  // gradient never reduced, a parameter sliced wrong) then shows in the output too.
  bool random_norms = false;
  DType dtype = DType::f32;
  ParallelMode mode = ParallelMode::single;
  int degree = 1;  // t: ranks in the tensor-parallel group
  // A known mistake planted into the parallel layer (parallel/layers/planted_bug.h), for seeing the
  // reference check catch it. The single-device reference never plants one.
  PlantedBug planted_bug = PlantedBug::none;

  std::int64_t head_dim() const { return hidden / heads; }
  // Throws ArgumentError naming the flag and the rule (zero sizes, hidden % heads, dropout range).
  void validate() const;
};

}  // namespace shardscope
