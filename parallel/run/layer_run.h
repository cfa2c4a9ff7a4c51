// One rank's run of the layer in any mode: a few SGD steps on deterministic data with the memory
// ledger and the communication log attached, checked at every step against the single-device
// layer built from the same full weights and inputs and stepping in lockstep with it (the same SGD
// updates): the output, the loss, the input and parameter gradients, and the parameters after the
// update. Each rank compares its own slices; one all-gather of the per-rank counts gives every
// rank the group's result, and a failed tensor is gathered whole and diagnosed.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/comm_log.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/layer_config.h"
#include "parallel/layers/placement.h"
#include "parallel/models/memory_model.h"
#include "parallel/run/tensor_compare.h"

namespace shardscope {

// A tensor of a rank's run as the rank holds it (for dumps).
struct RankTensor {
  std::string name;  // "input", "output", "output.grad", "input.grad", "target", a parameter or
                     // its ".grad"
  Tensor local;
  Placement placement;
};

class SharedReference;

// 2^10 for f16, whose gradients of this layer at the MSE loss (order 1e-5) would otherwise sit in
// its subnormals, where its precision is absolute (2^-24); 1 for the other dtypes (bf16 has f32's
// range).
double default_loss_scale(DType dtype);

struct LayerRunSpec {
  LayerConfig layer;
  int steps = 5;
  double learning_rate = 0.1;
  // The loss scale S (Micikevicius et al. 2018): backward starts from S times the loss's gradient
  // and SGD steps by learning_rate / S, so the gradients (compared by the check, S times the
  // true ones) stay clear of a 2-byte type's subnormals. Unset: default_loss_scale(dtype).
  std::optional<double> loss_scale;
  // The scale the run and its reference use: loss_scale, else default_loss_scale(layer.dtype).
  double loss_scale_used() const { return loss_scale.value_or(default_loss_scale(layer.dtype)); }
  bool check = true;  // compare with the single-device layer; check replicated params
  // The steps checked, from step 0 (-1: every step). A step that is checked costs one
  // single-device step on the process (shared by its rank threads) and the comparisons.
  int check_steps = -1;
  // The rule's tolerance (unset: default_tolerance of the layer's dtype).
  std::optional<Tolerance> tolerance;
  // Go on checking after a step fails (the check's history then covers every checked step: what
  // bench/check_margins measures); by default the check stops at the first failure.
  bool check_past_failure = false;
  bool keep_gathered_input = false;  // tp-sp: keep the gathered linear inputs for backward
  // The numerical guard (Context::set_check_finite) on the rank's context for the whole run: the
  // first NaN or Inf in an op's output or a gradient is a NumericalError naming the op and rank.
  bool check_finite = false;
  // Called on every rank at step 0, after backward, with every tensor of the run (a dump).
  std::function<void(RankEnv&, const std::vector<RankTensor>&)> dump;
  // Overwrites a full tensor the run starts from (a parameter by name, "input", "target") with
  // loaded values, instead of the seed's.
  std::function<void(const std::string& name, const Tensor& full)> load;
  // Called on rank 0 as each step starts (a progress line); `checked`: the step is compared.
  std::function<void(int step, bool checked)> on_step;
  // Ranks that are threads of one process share one single-device reference through this (made
  // by the first rank to need it); without it every rank builds one of its own, as each MPI
  // process must.
  std::shared_ptr<SharedReference> reference;
};

struct ReferenceLayer;

// The single-device layer stepping in lockstep with the run, computed once for every rank of a
// process that is given the same SharedReference. Thread-safe: each rank copies its slices out
// under a lock into its own context.
class SharedReference {
 public:
  SharedReference();
  ~SharedReference();
  SharedReference(const SharedReference&) = delete;
  SharedReference& operator=(const SharedReference&) = delete;

  struct Slices {
    std::vector<Tensor> tensors;  // rank `rank`'s slice of each named tensor, in `into`
    std::vector<double> scales;   // each full tensor's max |value| (the tolerance's scale)
  };
  // Step `step` of the single-device layer (single_device_step's tensors), computed when the
  // first rank asks for it (the others wait): steps are taken in order, each once, and every rank
  // takes its slices of step k before any rank asks for step k + 1 (the check's all-gather orders
  // them). For every name in `names` the slice under `placements[i]`, copied into `into`.
  // StateError for a step out of order or a name the reference does not have.
  Slices slices(const LayerRunSpec& spec, int step, const std::vector<std::string>& names,
                const std::vector<Placement>& placements, int rank, int world, Context& into);
  // The full tensor `name` of step `step` (the latest step or the one before), copied into
  // `into`: what a failed tensor is diagnosed against.
  Tensor full(int step, const std::string& name, Context& into);
  // The reference of a 2-byte run (bf16, f16) in f32: the single-device layer in f32, started
  // from the run's 2-byte weights and data widened to f32 (exactly) and given to its `slices` by
  // widened_spec. Made by the first rank to ask.
  SharedReference& widened();

 private:
  std::mutex mutex_;
  std::unique_ptr<SharedReference> widened_;
  std::unique_ptr<Context> context_;  // the reference's tensors live here
  std::unique_ptr<ReferenceLayer> layer_;
  int step_ = -1;
  std::vector<std::pair<std::string, Tensor>> tensors_;   // of step_
  std::vector<double> scales_;                            // max |value| of each of tensors_
  std::vector<std::pair<std::string, Tensor>> previous_;  // of step_ - 1
};

struct StepRecord {
  double loss = 0;
  double time_ms = 0;
  // The ledger's live bytes (every category) at the end of the step, once its output, seed and
  // graph are gone: the parameters, the input and target, and what leaked. Equal from step to
  // step in a run that does not leak.
  std::size_t live_bytes = 0;
};

// One layer's saved activations beside the layer's formula.
struct LayerMemory {
  int layer = 0;
  double saved_activation_bytes = 0;
  double formula_bytes = 0;
  double extras_bytes = 0;
  double formula_extras_bytes = 0;
};

struct RankMemory {
  int rank = 0;
  // After the forward of step 0: every saved byte of the rank, in a layer or not, beside L times
  // the layer's formula (nothing outside the layers saves for backward).
  double saved_activation_bytes = 0;
  double formula_bytes = 0;
  double extras_bytes = 0;
  double formula_extras_bytes = 0;
  double peak_bytes = 0;            // all categories, over the whole run
  std::string formula;              // one layer's
  std::vector<LayerMemory> layers;  // each layer of the stack
  // Each layer's model terms, then any measured site the model lacks, layer by layer.
  std::vector<MeasuredTerm> terms;
};

// One checked step, in brief.
struct StepCheck {
  int step = 0;
  bool passed = true;
  int failed_tensors = 0;
  double output_worst = 0;  // the output's largest |a - b| over its bound
  double worst = 0;         // the largest over every compared tensor
  std::string worst_tensor;
};

struct CheckResult {
  bool ran = false;
  bool passed = true;
  Tolerance tolerance;
  std::vector<StepCheck> history;  // every checked step
  int steps_checked = 0;  // steps compared so far (the check stops at the first that fails)
  int step = -1;          // the step `tensors` are of: the first that failed, else the last checked
  std::vector<TensorCheck> tensors;  // every compared tensor of that step, a failed one diagnosed
};

// run_layer_rank ends with a NumericalError "step N: the loss is not finite (...)" when a step's
// loss is NaN or Inf (on every rank: the loss is the group's).
constexpr const char* kNonFiniteLoss = "the loss is not finite";

// The matrix products' FLOPs of one step on one rank (GemmFlops, autograd/flop_counter.h).
struct StepFlops {
  double forward = 0;
  double recomputed = 0;  // forward products run again in backward (LayerConfig::recompute)
};

struct RankRun {
  int rank = 0;
  std::vector<StepRecord> steps;
  StepFlops flops;  // step 0's
  RankMemory memory;
  std::vector<RankMemory> group_memory;  // every rank's totals (no terms), gathered at the end
  std::vector<CommLine> comm;            // step 0, every purpose
  CheckResult check;                     // the group's, on every rank
  // A 2-byte run's step 0 against the f32 single-device layer (SharedReference::widened) at
  // f32_reference_tolerance(dtype), the group's; `ran` false for f32 and f64 runs and where
  // `check` did not run.
  CheckResult f32_check;
};

// Lets a tool look inside a rank's run (the terminal debugger): called on the rank's thread.
class RunInspector {
 public:
  virtual ~RunInspector() = default;
  // Once the rank's ledger and communication log are attached to its context.
  virtual void attach(int /*rank*/, const MemoryLedger& /*ledger*/, const CommLog& /*comm*/) {}
  // When a named tensor of the run exists: "input", every parameter by its name, and "output"
  // after each forward. A parameter's gradient is its local tensor's grad(). A tensor with no
  // local tensor (undefined) means the name is gone: "output" before each later forward.
  virtual void tensor(int /*rank*/, const std::string& /*name*/, const ParallelTensor& /*t*/) {}
  // After each checked step's update, on every rank, with the group's reference check so far
  // (every tensor's error against the single-device layer).
  virtual void check(int /*rank*/, const CheckResult& /*result*/) {}
  // When the run ends (also by an exception), before the ledger, log and tensors go away: drop
  // every reference to them.
  virtual void detach(int /*rank*/) {}
};

// The single-device layer's step 0 on the run's full weights and data, in `ref`: "output",
// "loss" (a [1] tensor), "input.grad", every parameter's gradient ("attn.qkv.weight.grad") in
// LayerWeights order, then every parameter after the SGD update ("attn.qkv.weight"). What the
// reference check compares each rank's slices with, at every step (SharedReference).
std::vector<std::pair<std::string, Tensor>> single_device_reference(Context& ref,
                                                                    const LayerRunSpec& spec);

// Runs on every rank of env's group (the group size must equal spec.layer.degree).
RankRun run_layer_rank(RankEnv& env, const LayerRunSpec& spec, RunInspector* inspector = nullptr);

}  // namespace shardscope
