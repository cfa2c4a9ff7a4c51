// `shardscope run`: trains the layer for a few SGD steps on random data and measures its memory.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "parallel/layer_config.h"
#include "parallel/memory_model.h"

namespace shardscope {

// The defaults are the command line's (docs/user-guide.md).
struct RunOptions {
  RunOptions() {
    layer.seq = 64;
    layer.batch = 2;
    layer.hidden = 128;
    layer.heads = 4;
  }
  LayerConfig layer;
  int steps = 5;
  double learning_rate = 0.1;
  std::string report_path;  // empty: no JSON report

  // Throws ArgumentError naming the flag: the layer's rules, --steps >= 1, a finite --lr > 0,
  // and the modes this version runs.
  void validate() const;
};

struct StepRecord {
  double loss = 0;
  double time_ms = 0;
};

// One measured term beside the model's bytes for it.
struct MeasuredTerm {
  std::string what, scope, op, formula;
  double model_bytes = 0;
  double measured_bytes = 0;
};

struct RankMemory {
  int rank = 0;
  double saved_activation_bytes = 0;  // measured after the forward of the first step
  double formula_bytes = 0;
  double extras_bytes = 0;
  double formula_extras_bytes = 0;
  double peak_bytes = 0;  // all categories, over the whole run
  std::string formula;
  std::vector<MeasuredTerm> terms;  // model terms, then any measured site the model lacks
};

struct RunResult {
  std::vector<StepRecord> steps;
  std::vector<RankMemory> memory;  // one entry per rank
};

// Runs the steps, printing each step's loss and time and then the memory table to `out`.
// Throws ArgumentError for a bad configuration.
RunResult run_layer(const RunOptions& options, std::ostream& out);

// Prints the memory table of one rank.
void print_memory_table(const RankMemory& memory, const LayerConfig& config, std::ostream& out);

}  // namespace shardscope
