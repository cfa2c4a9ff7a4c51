// The analytic activation-memory model of one Transformer layer (Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models", section 4.1 and eq. 1):
// single device, sbh(16A + 2M) + as^2b(2A + M) bytes, with A bytes per activation element and M
// per dropout-mask element (the paper's A = 2, M = 1 give sbh(34 + 5as/h)). Each term names the
// op that saves it, so the measured ledger can be set beside it term by term.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/memory_ledger.h"
#include "parallel/layers/layer_config.h"

namespace shardscope {

struct ActivationTerm {
  std::string what;     // "QK^T: Q and K"
  std::string scope;    // the saving op's scope in TransformerLayer: "attn.scores"
  std::string op;       // its kind: "matmul"
  std::string formula;  // "2A sbh"
  double bytes = 0;
};

struct ActivationModel {
  std::vector<ActivationTerm> terms;
  double total_bytes = 0;   // sum of the terms: the paper's formula
  double extras_bytes = 0;  // the norms' per-row statistics, outside the formula
  // The terms' sum in closed form, "sbh(16A + 2M) + as^2b(2A + M)": grouped by size (sbh; sbf
  // where the MLP's f is no multiple of h; as^2b) and by whether the mode splits them over t.
  std::string formula;
};

// A = bytes of the layer's dtype, M = 1 (u8 masks). Without dropout (p = 0) the masks and the
// dropout output vanish: probs x V then saves the softmax output, already counted. The terms are
// the declared modules' (layer_decl.h): RMSNorm, SwiGLU (its input, 2f wide, and fc2's, f) and
// no biases change them as docs/derivations.md derives.
ActivationModel single_device_activation_model(const LayerConfig& config);

// The model of config.mode on config.degree = t ranks, per rank (Korthikanti et al. 2022, eq. 2
// for tp, section 4.2.2 for tp-sp; Ulysses shards every activation by t):
//   tp       sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t
//   tp-sp    (sbh(16A + 2M) + as^2b(2A + M))/t, or with the gathered linear inputs kept
//            sbh(2A + (14A + 2M)/t) + as^2b(2A + M)/t
//   ulysses  (sbh(16A + 2M) + as^2b(2A + M))/t
ActivationModel activation_model(const LayerConfig& config, bool keep_gathered_input);

// One model term beside the bytes the ledger measured for it.
struct MeasuredTerm {
  std::string what, scope, op, formula;
  double model_bytes = 0;
  double measured_bytes = 0;
  int layer = 0;  // the stack's layer it was measured in
};

// Saved activation bytes of one saving op (its scope and kind), from a ledger or from a trace's
// forward slices.
struct SavedAt {
  std::string scope, op;
  double bytes = 0;
};

// Sets saved bytes beside the model's terms: each site is claimed by the first term with its
// scope and op; sites no term claims follow as "(not in the model)" rows. The one matching rule
// for every measurement (the ledger's below, the visualizer's from a trace).
std::vector<MeasuredTerm> measure_sites(const ActivationModel& model,
                                        const std::vector<SavedAt>& sites);
// measure_sites on the ledger's saved activations (SaveRole::activation) of `layer`, each term
// marked with it.
std::vector<MeasuredTerm> measure_terms(const ActivationModel& model, const MemoryLedger& ledger,
                                        int layer);
std::string formula_text(const LayerConfig& config, bool keep_gathered_input);  // model's formula

// The peak bytes a layer run needs at least, estimated before it starts from the models: per
// rank, the larger of the saved activations with their extras (activation_model) and the rank's
// parameters, or its parameters and their gradients, plus its input, target and output; per
// process, that for each of its `ranks_in_process` ranks plus each rank's full weights and data,
// and, when `checked`, the single-device reference layer (its own estimate and full data). A
// lower bound of the ledger's peak (measured within a factor of 1.5 of it).
struct RunMemoryEstimate {
  double per_rank_bytes = 0;
  double process_bytes = 0;
};
RunMemoryEstimate estimate_run_memory(const LayerConfig& config, bool keep_gathered_input,
                                      bool checked, int ranks_in_process);

}  // namespace shardscope
