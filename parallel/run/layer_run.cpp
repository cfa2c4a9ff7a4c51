// One rank's run of the layer: steps, memory, communication and the reference check.
#include "parallel/run/layer_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <tuple>

#include "autograd/backend.h"
#include "autograd/flop_counter.h"
#include "autograd/kernels/philox.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/layer_stack.h"
#include "parallel/models/memory_model.h"
#include "parallel/run/diagnosis.h"

namespace shardscope {
namespace {

// The single-device stack or the parallel one behind one interface.
struct LayerHandle {
  std::unique_ptr<TransformerStack> single;
  std::unique_ptr<ParallelTransformerStack> parallel;
  std::vector<ShardedParameter> single_params;

  Placement placement() const {
    return parallel ? parallel->activation_placement() : Placement::replicate();
  }
  const std::vector<ShardedParameter>& params() const {
    return parallel ? parallel->parameters() : single_params;
  }
  ParallelTensor forward(const ParallelTensor& x) const {
    if (parallel) return parallel->forward(x);
    return {single->forward(x.local), x.placement, x.global};
  }
  void reduce_gradients() {
    if (parallel) parallel->reduce_parameter_gradients();
  }
  void check_replicated() const {
    if (parallel) parallel->check_replicated();
  }
};

// The stack's full weights, inputs and targets: deterministic from the seed, or loaded.
struct FullData {
  std::vector<LayerWeights> weights;  // layer by layer
  Tensor x, target;
};

FullData full_data(Context& ctx, const LayerRunSpec& spec) {
  const LayerConfig& c = spec.layer;
  const Shape shape{c.seq, c.batch, c.hidden};
  FullData d{make_stack_weights(ctx, c),
             Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype),
             Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedTarget), 1.0, c.dtype)};
  if (spec.load) {
    for (const auto& [name, t] : stack_named(c, d.weights)) spec.load(name, t);
    spec.load("input", d.x);
    spec.load("target", d.target);
  }
  return d;
}

// The spec of a 2-byte run's f32 reference: the same layer in f32, its weights and data the run's
// (`narrow`) widened exactly, the run's loss scale (the gradients compared are the scaled ones).
LayerRunSpec widened_spec(const LayerRunSpec& spec, const FullData& narrow) {
  LayerRunSpec wide = spec;
  wide.layer.dtype = DType::f32;
  wide.loss_scale = spec.loss_scale_used();
  std::vector<std::pair<std::string, Tensor>> values = stack_named(spec.layer, narrow.weights);
  values.push_back({"input", narrow.x});
  values.push_back({"target", narrow.target});
  wide.load = [values = std::move(values)](const std::string& name, const Tensor& full) {
    for (const auto& [n, t] : values) {
      if (n != name) continue;
      const std::vector<double> v = t.to_vector();
      float* out = full.data<float>();
      for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
      return;
    }
    throw StateError("the f32 reference found no tensor '" + name + "' in the run's data");
  };
  return wide;
}

LayerHandle make_layer(RankEnv& env, const LayerRunSpec& spec,
                       const std::vector<LayerWeights>& full) {
  const LayerConfig& c = spec.layer;
  LayerHandle h;
  if (c.mode == ParallelMode::single) {
    std::vector<LayerWeights> mine;
    for (int i = 0; i < c.layers; ++i) {
      const LayerConfig layer = stack_layer(c, i);
      mine.push_back(copy_weights(full[static_cast<std::size_t>(i)], env.ctx));
      for (const auto& [name, t] : mine.back().named()) {
        h.single_params.push_back({decl::stack_name(layer, name),
                                   decl::parameter(layer, name).module, t, Placement::replicate(),
                                   t.shape()});
      }
    }
    h.single = std::make_unique<TransformerStack>(c, std::move(mine));
  } else {
    ParallelLinearOptions linear;
    linear.keep_gathered_input = spec.keep_gathered_input;
    h.parallel = std::make_unique<ParallelTransformerStack>(c, env.group, full, linear);
  }
  return h;
}

// The saved activations of every layer beside the model, which is the same for each; the rank's
// totals count every saved byte, in a layer or not, against L times the layer's formula.
RankMemory measure_memory(const MemoryLedger& ledger, const LayerRunSpec& spec, int rank) {
  const ActivationModel model = activation_model(spec.layer, spec.keep_gathered_input);
  const double layers = spec.layer.layers;
  RankMemory m;
  m.rank = rank;
  m.formula = model.formula;
  m.formula_bytes = layers * model.total_bytes;
  m.formula_extras_bytes = layers * model.extras_bytes;
  m.saved_activation_bytes = static_cast<double>(ledger.saved_activation_bytes());
  m.extras_bytes = static_cast<double>(ledger.extras_bytes());
  for (int i = 0; i < spec.layer.layers; ++i) {
    m.layers.push_back({i, static_cast<double>(ledger.saved_activation_bytes(i)), model.total_bytes,
                        static_cast<double>(ledger.extras_bytes(i)), model.extras_bytes});
    for (MeasuredTerm& t : measure_terms(model, ledger, i)) m.terms.push_back(std::move(t));
  }
  return m;
}

// MSE over the global tensor: returns the loss and this rank's gradient seed 2 S (y - t) / N, S the
// loss scale.
std::pair<double, Tensor> mse_and_seed(ProcessGroup& g, const ParallelTensor& y,
                                       const Tensor& target, PlantedBug bug, double loss_scale) {
  Context& ctx = y.local.ctx();
  NoGradGuard no_grad(ctx);
  const double n = static_cast<double>(y.global.numel());
  Tensor mean_sq = Tensor::empty(ctx, Shape{}, y.local.dtype());
  ctx.backend().mse_forward(y.local, target, mean_sq);
  Tensor sum_sq = Tensor::full(ctx, Shape{1}, mean_sq.item() * static_cast<double>(y.local.numel()),
                               DType::f64);
  ScopeGuard scope(ctx, decl::kLossScope);
  if (y.placement.is_shard()) g.all_reduce(sum_sq, ReduceOp::sum, CommPurpose::loss);
  Tensor seed = Tensor::empty(ctx, y.local.shape(), y.local.dtype());
  // PLANTED BUG loss-times-t: the seed normalised by this rank's elements, N/t, not N.
  const double seed_n = bug == PlantedBug::loss_times_t ? static_cast<double>(y.local.numel()) : n;
  ctx.backend().add(y.local, target, 2.0 * loss_scale / seed_n, -2.0 * loss_scale / seed_n, seed);
  return {sum_sq.item() / n, seed};
}

// The tensors a rank compares at a checked step, named as the reference names them: the output,
// the loss, the input gradient and every parameter gradient (before the update), or every
// parameter (after it).
struct CheckedTensors {
  std::vector<std::string> names;
  std::vector<ParallelTensor> got;
  void add(const std::string& name, const ParallelTensor& t) {
    names.push_back(name);
    got.push_back(t);
  }
  std::vector<Placement> placements() const {
    std::vector<Placement> out;
    for (const ParallelTensor& t : got) out.push_back(t.placement);
    return out;
  }
};

CheckedTensors before_update(const LayerHandle& layer, const ParallelTensor& x,
                             const ParallelTensor& y, double loss) {
  CheckedTensors c;
  c.add("output", y);
  c.add("loss", {Tensor::full(x.local.ctx(), Shape{1}, loss, DType::f64), Placement::replicate(),
                 Shape{1}});
  c.add("input.grad", {x.local.grad(), x.placement, x.global});
  for (const ShardedParameter& p : layer.params()) {
    c.add(p.name + ".grad", {p.local.grad(), p.placement, p.global});
  }
  return c;
}

CheckedTensors after_update(const LayerHandle& layer) {
  CheckedTensors c;
  for (const ShardedParameter& p : layer.params()) c.add(p.name, {p.local, p.placement, p.global});
  return c;
}

// Compares the tensors of `c` with their reference slices `want`, every rank its own; one
// all-gather of the per-rank statistics gives every rank the group's. A failed tensor is
// diagnosed whole: a sharded one gathered, a replicated one broadcast from the first rank whose
// copy failed, against the full reference on the rank that diagnoses (rank 0; the others keep the
// statistics).
std::vector<TensorCheck> compare_part(RankEnv& env, const Tolerance& tolerance,
                                      const CheckedTensors& c, const SharedReference::Slices& want,
                                      SharedReference& reference, int step) {
  constexpr std::size_t kStats = 4;
  std::vector<double> mine;
  for (std::size_t i = 0; i < c.names.size(); ++i) {
    const ElementStats e = compare_elements(c.names[i], c.got[i].local.to_vector(),
                                            want.tensors[i].to_vector(), want.scales[i], tolerance);
    mine.insert(mine.end(), {static_cast<double>(e.elements), static_cast<double>(e.failed),
                             e.max_abs, e.worst});
  }
  const std::vector<double> all = [&] {
    CurrentOpGuard op(env.ctx, "reference_check");
    return env.group
        .all_gather(Tensor::from_vector(env.ctx, {static_cast<std::int64_t>(mine.size())}, mine,
                                        DType::f64),
                    CommPurpose::check)
        .to_vector();
  }();
  std::vector<TensorCheck> out;
  for (std::size_t i = 0; i < c.names.size(); ++i) {
    const bool replicated = !c.got[i].placement.is_shard();
    ElementStats group;
    int first_failed = -1;
    for (int r = 0; r < env.world; ++r) {
      const double* v = &all[static_cast<std::size_t>(r) * mine.size() + i * kStats];
      const ElementStats e{static_cast<std::int64_t>(v[0]), static_cast<std::int64_t>(v[1]), v[2],
                           v[3]};
      if (e.failed > 0 && first_failed < 0) first_failed = r;
      // A replicated tensor is whole on every rank: its count is the worst rank's, not a sum.
      group =
          replicated
              ? ElementStats{std::max(group.elements, e.elements), std::max(group.failed, e.failed),
                             std::max(group.max_abs, e.max_abs), std::max(group.worst, e.worst)}
              : merge(group, e);
    }
    TensorCheck check = finish_check(c.names[i], group, want.scales[i]);
    if (!check.passed) {
      Tensor whole = c.got[i].local;
      if (replicated) {
        whole = c.got[i].local.clone();
        env.group.broadcast(whole, first_failed, CommPurpose::check);
      } else {
        whole = gather_to_full(env.group, whole, c.got[i].placement, CommPurpose::check);
      }
      if (env.rank == 0) {
        const Tensor full_want = reference.full(step, c.names[i], env.ctx);
        check.diagnosis = diagnose(whole.to_vector(), full_want.to_vector(), whole.shape(),
                                   env.world, tolerance.rtol, tolerance.atol * want.scales[i])
                              .text;
        if (replicated && first_failed > 0) {
          check.diagnosis += " (rank " + std::to_string(first_failed) + "'s copy; rank 0's " +
                             std::string(all[i * kStats + 1] > 0 ? "differs too" : "is right") +
                             ")";
        }
      }
    }
    out.push_back(std::move(check));
  }
  return out;
}

// One reference's check of one step: the tensors before the SGD update are compared in the step's
// scope (while the output and the gradients live), the parameters after it.
struct StepComparison {
  SharedReference& reference;
  const LayerRunSpec& spec;  // the reference's
  Tolerance tolerance;
  SharedReference::Slices want_after;
  std::vector<TensorCheck> tensors;

  void before_update(RankEnv& env, const CheckedTensors& before, const CheckedTensors& after,
                     int step, Context& into) {
    std::vector<std::string> names = before.names;
    std::vector<Placement> placements = before.placements();
    names.insert(names.end(), after.names.begin(), after.names.end());
    for (const Placement& p : after.placements()) placements.push_back(p);
    SharedReference::Slices want =
        reference.slices(spec, step, names, placements, env.rank, env.world, into);
    const auto n = static_cast<std::ptrdiff_t>(before.names.size());
    want_after.tensors.assign(want.tensors.begin() + n, want.tensors.end());
    want_after.scales.assign(want.scales.begin() + n, want.scales.end());
    want.tensors.resize(before.names.size());
    want.scales.resize(before.names.size());
    tensors = compare_part(env, tolerance, before, want, reference, step);
  }
  void after_update(RankEnv& env, const CheckedTensors& after, int step) {
    for (TensorCheck& t : compare_part(env, tolerance, after, want_after, reference, step)) {
      tensors.push_back(std::move(t));
    }
    want_after = {};
  }
};

StepCheck summarise(int step, const std::vector<TensorCheck>& tensors) {
  StepCheck s;
  s.step = step;
  for (const TensorCheck& t : tensors) {
    s.failed_tensors += t.passed ? 0 : 1;
    if (t.name == "output") s.output_worst = t.worst;
    if (s.worst_tensor.empty() || t.worst > s.worst) {
      s.worst = t.worst;
      s.worst_tensor = t.name;
    }
  }
  s.passed = s.failed_tensors == 0;
  return s;
}

// Adds a checked step to `check`: its brief to the history, and its tensors as the ones reported
// unless an earlier step failed (the first failed step's stay: from there the layers differ
// anyway). Returns the brief.
StepCheck record_step(CheckResult& check, int step, std::vector<TensorCheck>&& tensors) {
  const StepCheck brief = summarise(step, tensors);
  check.history.push_back(brief);
  check.steps_checked = step + 1;
  if (check.passed) {
    check.step = step;
    check.tensors = std::move(tensors);
    check.passed = brief.passed;
  }
  return brief;
}

// Every rank's memory totals and each layer's, so one rank (or one MPI process) can report them
// all.
std::vector<RankMemory> gather_memory_totals(RankEnv& env, const RankMemory& mine) {
  std::vector<double> values{mine.saved_activation_bytes, mine.formula_bytes, mine.extras_bytes,
                             mine.formula_extras_bytes, mine.peak_bytes};
  for (const LayerMemory& l : mine.layers) {
    values.insert(values.end(), {l.saved_activation_bytes, l.formula_bytes, l.extras_bytes,
                                 l.formula_extras_bytes});
  }
  const std::size_t n = values.size();
  Tensor local = Tensor::from_vector(env.ctx, {static_cast<std::int64_t>(n)}, values, DType::f64);
  const std::vector<double> all = env.group.all_gather(local, CommPurpose::check).to_vector();
  std::vector<RankMemory> out(static_cast<std::size_t>(env.world));
  for (std::size_t r = 0; r < out.size(); ++r) {
    const double* v = &all[n * r];
    out[r].rank = static_cast<int>(r);
    out[r].saved_activation_bytes = v[0];
    out[r].formula_bytes = v[1];
    out[r].extras_bytes = v[2];
    out[r].formula_extras_bytes = v[3];
    out[r].peak_bytes = v[4];
    out[r].formula = mine.formula;
    for (std::size_t i = 0; i < mine.layers.size(); ++i) {
      const double* l = v + 5 + 4 * i;
      out[r].layers.push_back({static_cast<int>(i), l[0], l[1], l[2], l[3]});
    }
  }
  return out;
}

// Every tensor of step 0 with its placement, for a dump.
std::vector<RankTensor> run_tensors(const LayerHandle& layer, const ParallelTensor& x,
                                    const Tensor& target, const ParallelTensor& y,
                                    const Tensor& seed) {
  std::vector<RankTensor> out{{"input", x.local, x.placement},
                              {"target", target, x.placement},
                              {"output", y.local, y.placement},
                              {"output.grad", seed, y.placement},
                              {"input.grad", x.local.grad(), x.placement}};
  for (const ShardedParameter& p : layer.params()) {
    out.push_back({p.name, p.local, p.placement});
    out.push_back({p.name + ".grad", p.local.grad(), p.placement});
  }
  return out;
}

}  // namespace

double default_loss_scale(DType dtype) {
  return dtype == DType::f16 ? 1024.0 : 1.0;
}

// The single-device stack on the run's full weights and data, stepping as the run does.
struct ReferenceLayer {
  TransformerStack layer;
  Tensor x, target;
  double learning_rate;
  double loss_scale;

  static LayerConfig single(LayerConfig c) {
    c.mode = ParallelMode::single;
    c.degree = 1;
    c.planted_bug = PlantedBug::none;  // the reference is always right
    return c;
  }
  ReferenceLayer(FullData d, const LayerRunSpec& spec)
      : layer(single(spec.layer), std::move(d.weights)),
        x(d.x.set_requires_grad(true)),
        target(d.target),
        learning_rate(spec.learning_rate),
        loss_scale(spec.loss_scale_used()) {}

  // One step in `ctx` (whose step is set): forward, loss, backward, then the SGD update.
  std::vector<std::pair<std::string, Tensor>> step(Context& ctx) {
    std::vector<std::pair<std::string, Tensor>> out;
    {
      Tensor y = layer.forward(x);
      Tensor loss = mse_loss(y, target);
      loss.backward(Tensor::full(ctx, loss.shape(), loss_scale, loss.dtype()));
      out.push_back({"output", y.detach()});
      out.push_back({"loss", Tensor::full(ctx, Shape{1}, loss.item(), DType::f64)});
    }
    NoGradGuard no_grad(ctx);
    out.push_back({"input.grad", x.grad().clone()});
    x.zero_grad();
    const auto named = layer.named();
    for (const auto& [name, p] : named) out.push_back({name + ".grad", p.grad().clone()});
    sgd_step(layer.parameters(), learning_rate / loss_scale);
    for (const auto& [name, p] : named) out.push_back({name, p});
    return out;
  }
};

std::vector<std::pair<std::string, Tensor>> single_device_reference(Context& ref,
                                                                    const LayerRunSpec& spec) {
  ReferenceLayer reference(full_data(ref, spec), spec);
  return reference.step(ref);
}

SharedReference::SharedReference() = default;
SharedReference::~SharedReference() = default;

SharedReference::Slices SharedReference::slices(const LayerRunSpec& spec, int step,
                                                const std::vector<std::string>& names,
                                                const std::vector<Placement>& placements, int rank,
                                                int world, Context& into) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string where = "rank " + std::to_string(rank) + ": the reference check";
  if (step != step_) {
    if (step != step_ + 1) {
      throw StateError(where + " asked for step " + std::to_string(step) +
                       " of the single-device reference, which is at step " +
                       std::to_string(step_) + " (steps are checked in order, from 0)");
    }
    if (!context_) {
      context_ = std::make_unique<Context>(into.rank());  // the first rank that asks
      layer_ = std::make_unique<ReferenceLayer>(full_data(*context_, spec), spec);
    }
    context_->set_step(step);
    previous_ = std::move(tensors_);
    tensors_ = layer_->step(*context_);
    scales_.clear();  // once per step, not once per rank
    for (const auto& entry : tensors_) scales_.push_back(scale_of(entry.second.to_vector()));
    step_ = step;
  }
  std::vector<std::string> have;
  for (const auto& entry : tensors_) have.push_back(entry.first);
  const std::vector<std::size_t> pair = pair_by_name(names, have, where);
  Slices out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Tensor& full = tensors_[pair[i]].second;
    out.tensors.push_back(slice_of_full(full, placements[i], rank, world).copy_to(into));
    out.scales.push_back(scales_[pair[i]]);
  }
  return out;
}

SharedReference& SharedReference::widened() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!widened_) widened_ = std::make_unique<SharedReference>();
  return *widened_;
}

Tensor SharedReference::full(int step, const std::string& name, Context& into) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto& tensors = step == step_ ? tensors_ : previous_;
  if (step != step_ && step != step_ - 1) {
    throw StateError("the single-device reference no longer holds step " + std::to_string(step));
  }
  for (const auto& [n, t] : tensors) {
    if (n == name) return t.copy_to(into);
  }
  throw StateError("the single-device reference has no tensor '" + name + "'");
}

RankRun run_layer_rank(RankEnv& env, const LayerRunSpec& spec, RunInspector* inspector) {
  const LayerConfig& c = spec.layer;
  c.validate();
  const double loss_scale = spec.loss_scale_used();
  Context scratch(env.rank);  // full weights and data, outside the measured context
  const FullData data = full_data(scratch, spec);
  const std::vector<LayerWeights>& full = data.weights;
  const Tensor& full_x = data.x;
  const Tensor& full_t = data.target;
  const Shape shape{c.seq, c.batch, c.hidden};

  MemoryLedger ledger;
  CommLog comm;
  GemmFlops flops;  // step 0's only: attached until it ends, off the later steps' ops
  ObserverGuard attach_ledger(env.ctx, ledger), attach_comm(env.ctx, comm);
  std::optional<ObserverGuard> attach_flops;
  attach_flops.emplace(env.ctx, flops);
  LayerHandle layer = make_layer(env, spec, full);
  const Placement placement = layer.placement();
  ParallelTensor x =
      ParallelTensor::make(slice_of_full(full_x, placement, env.rank, env.world).copy_to(env.ctx),
                           placement, shape, env.world);
  x.local.set_name("input").set_requires_grad(true);
  const Tensor target = slice_of_full(full_t, placement, env.rank, env.world).copy_to(env.ctx);
  struct Detach {  // runs before the ledger, log and tensors above are destroyed
    RunInspector* inspector;
    int rank;
    ~Detach() {
      if (inspector) inspector->detach(rank);
    }
  } detach{inspector, env.rank};
  if (inspector) {
    inspector->attach(env.rank, ledger, comm);
    inspector->tensor(env.rank, "input", x);
    for (const ShardedParameter& p : layer.params()) {
      inspector->tensor(env.rank, p.name, {p.local, p.placement, p.global});
    }
  }

  struct CheckFinite {  // the numerical guard for this run only
    Context& ctx;
    bool previous;
    ~CheckFinite() { ctx.set_check_finite(previous); }
  } check_finite{env.ctx, env.ctx.check_finite()};
  env.ctx.set_check_finite(spec.check_finite || check_finite.previous);

  const bool checked_run = spec.check && c.mode != ParallelMode::single;
  std::unique_ptr<SharedReference> own_reference;  // when the process shares none (MPI)
  SharedReference* reference = spec.reference.get();
  if (checked_run && !reference) {
    own_reference = std::make_unique<SharedReference>();
    reference = own_reference.get();
  }
  RankRun run;
  run.rank = env.rank;
  run.check.ran = checked_run;
  run.check.tolerance = spec.tolerance.value_or(default_tolerance(c.dtype));
  // A 2-byte run's step 0 is compared with the f32 single-device layer too.
  run.f32_check.ran = checked_run && is_half(c.dtype);
  std::optional<LayerRunSpec> f32_spec;
  if (run.f32_check.ran) {
    f32_spec = widened_spec(spec, data);
    run.f32_check.tolerance = f32_reference_tolerance(c.dtype);
  }
  run.steps.reserve(static_cast<std::size_t>(spec.steps));  // no growth as the run goes on
  for (int step = 0; step < spec.steps; ++step) {
    env.ctx.set_step(step);
    // The check stops at the first step that fails: from there the two layers differ anyway.
    const bool check_step = checked_run && (run.check.passed || spec.check_past_failure) &&
                            (spec.check_steps < 0 || step < spec.check_steps);
    if (spec.on_step && env.rank == 0) spec.on_step(step, check_step);
    const auto start = std::chrono::steady_clock::now();
    // The last step's output is let go first, so an inspector never holds memory the run
    // would have freed (the ledger's numbers stay those of `shardscope run`).
    if (inspector && step > 0) inspector->tensor(env.rank, "output", ParallelTensor{});
    std::chrono::duration<double, std::milli> checking{0};  // left out of the step's time
    auto timed = [&checking](auto&& work) {
      const auto from = std::chrono::steady_clock::now();
      work();
      checking += std::chrono::steady_clock::now() - from;
    };
    double loss = 0;
    Context ref(env.rank);  // the references' slices for this rank
    std::optional<StepComparison> compared, compared_f32;
    if (check_step) compared.emplace(StepComparison{*reference, spec, run.check.tolerance, {}, {}});
    if (check_step && step == 0 && f32_spec) {
      compared_f32.emplace(
          StepComparison{reference->widened(), *f32_spec, run.f32_check.tolerance, {}, {}});
    }
    {  // the step's output, seed and graph live in here
      ParallelTensor y = layer.forward(x);
      if (inspector) inspector->tensor(env.rank, "output", y);
      if (step == 0) run.memory = measure_memory(ledger, spec, env.rank);
      Tensor seed;
      std::tie(loss, seed) = mse_and_seed(env.group, y, target, c.planted_bug, loss_scale);
      if (!std::isfinite(loss)) {  // every rank has the same loss: all stop here
        throw NumericalError("step " + std::to_string(step) + ": " + kNonFiniteLoss + " (" +
                             std::to_string(loss) + ", rank " + std::to_string(env.rank) +
                             "): a value overflowed or became NaN earlier in the step "
                             "(LayerRunSpec::check_finite names the first op that made one)");
      }
      y.local.backward(seed);
      layer.reduce_gradients();
      if (check_step) {
        timed([&] {
          const CheckedTensors before = before_update(layer, x, y, loss);
          const CheckedTensors after = after_update(layer);
          compared->before_update(env, before, after, step, ref);
          if (compared_f32) compared_f32->before_update(env, before, after, step, ref);
        });
      }
      if (step == 0 && spec.dump) {  // also left out of the step's time
        timed([&] { spec.dump(env, run_tensors(layer, x, target, y, seed)); });
      }
    }
    std::vector<Tensor> params;
    for (const ShardedParameter& p : layer.params()) params.push_back(p.local);
    sgd_step(params, spec.learning_rate / loss_scale);
    x.local.zero_grad();
    if (check_step) {
      timed([&] {
        const CheckedTensors after = after_update(layer);
        compared->after_update(env, after, step);
        if (compared_f32) {
          compared_f32->after_update(env, after, step);
          record_step(run.f32_check, step, std::move(compared_f32->tensors));
        }
        const StepCheck brief = record_step(run.check, step, std::move(compared->tensors));
        // Replicated parameters bit-equal on every rank (the reference check allows rounding).
        if (brief.passed) layer.check_replicated();
        if (inspector) inspector->check(env.rank, run.check);
      });
    }
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start - checking;
    run.steps.push_back({loss, elapsed.count(), ledger.live_total()});
    if (step == 0) {
      run.comm = comm.lines();
      run.flops = {flops.forward(), flops.recomputed()};
      attach_flops.reset();
    }
  }
  run.memory.peak_bytes = static_cast<double>(ledger.peak_total());
  run.group_memory = gather_memory_totals(env, run.memory);
  return run;
}

}  // namespace shardscope
