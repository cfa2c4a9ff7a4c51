// One rank's run of the layer: steps, memory, communication and the reference check.
#include "parallel/layer_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <tuple>

#include "autograd/backend.h"
#include "autograd/kernels/philox.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "parallel/collective_ops.h"
#include "parallel/memory_model.h"
#include "parallel/parallel_layer.h"

namespace shardscope {
namespace {

// The single-device layer or the parallel one behind one interface.
struct LayerHandle {
  std::unique_ptr<TransformerLayer> single;
  std::unique_ptr<ParallelTransformerLayer> parallel;
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

// The layer's full weights, inputs and targets: deterministic from the seed, or loaded.
struct FullData {
  LayerWeights weights;
  Tensor x, target;
};

FullData full_data(Context& ctx, const LayerRunSpec& spec) {
  const LayerConfig& c = spec.layer;
  const Shape shape{c.seq, c.batch, c.hidden};
  FullData d{make_layer_weights(ctx, c),
             Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype),
             Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedTarget), 1.0, c.dtype)};
  if (spec.load) {
    for (const auto& [name, t] : d.weights.named()) spec.load(name, t);
    spec.load("input", d.x);
    spec.load("target", d.target);
  }
  return d;
}

LayerHandle make_layer(RankEnv& env, const LayerRunSpec& spec, const LayerWeights& full) {
  LayerHandle h;
  if (spec.layer.mode == ParallelMode::single) {
    LayerWeights w = copy_weights(full, env.ctx);
    for (const auto& [name, t] : w.named()) {
      h.single_params.push_back({name, t, Placement::replicate(), t.shape(), false});
    }
    h.single = std::make_unique<TransformerLayer>(spec.layer, std::move(w));
  } else {
    ParallelLinearOptions linear;
    linear.keep_gathered_input = spec.keep_gathered_input;
    h.parallel = std::make_unique<ParallelTransformerLayer>(spec.layer, env.group, full, linear);
  }
  return h;
}

RankMemory measure_memory(const MemoryLedger& ledger, const LayerRunSpec& spec, int rank) {
  const ActivationModel model = activation_model(spec.layer, spec.keep_gathered_input);
  RankMemory m;
  m.rank = rank;
  m.formula = model.formula;
  m.formula_bytes = model.total_bytes;
  m.formula_extras_bytes = model.extras_bytes;
  m.saved_activation_bytes = static_cast<double>(ledger.saved_activation_bytes(spec.layer.layer));
  m.extras_bytes = static_cast<double>(ledger.extras_bytes(spec.layer.layer));
  m.terms = measure_terms(model, ledger, spec.layer.layer);
  return m;
}

// MSE over the global tensor: returns the loss and this rank's gradient seed 2 (y - t) / N.
std::pair<double, Tensor> mse_and_seed(ProcessGroup& g, const ParallelTensor& y,
                                       const Tensor& target, PlantedBug bug) {
  Context& ctx = y.local.ctx();
  NoGradGuard no_grad(ctx);
  const double n = static_cast<double>(y.global.numel());
  Tensor mean_sq = Tensor::empty(ctx, Shape{}, y.local.dtype());
  ctx.backend().mse_forward(y.local, target, mean_sq);
  Tensor sum_sq = Tensor::full(ctx, Shape{1}, mean_sq.item() * static_cast<double>(y.local.numel()),
                               DType::f64);
  ScopeGuard scope(ctx, "loss");
  if (y.placement.is_shard()) g.all_reduce(sum_sq, ReduceOp::sum, CommPurpose::loss);
  Tensor seed = Tensor::empty(ctx, y.local.shape(), y.local.dtype());
  // PLANTED BUG loss-times-t: the seed normalised by this rank's elements, N/t, not N.
  const double seed_n = bug == PlantedBug::loss_times_t ? static_cast<double>(y.local.numel()) : n;
  ctx.backend().add(y.local, target, 2.0 / seed_n, -2.0 / seed_n, seed);
  return {sum_sq.item() / n, seed};
}

// Every rank compares its slices of the output, input gradient and parameter gradients with the
// same slices of the single-device layer's (the process's shared reference, or one of its own);
// one all-reduce (max) of the error maxima gives every rank the group's result.
CheckResult reference_check(RankEnv& env, const LayerRunSpec& spec, const LayerHandle& layer,
                            const ParallelTensor& x, const ParallelTensor& y) {
  Context ref(env.rank);
  ref.set_step(env.ctx.step());
  std::vector<std::pair<std::string, ParallelTensor>> got{
      {"output", y}, {"input.grad", {x.local.grad(), x.placement, x.global}}};
  for (const ShardedParameter& p : layer.params()) {
    got.push_back({p.name + ".grad", {p.local.grad(), p.placement, p.global}});
  }
  std::vector<std::string> names;
  std::vector<Placement> placements;
  for (const auto& entry : got) {
    names.push_back(entry.first);
    placements.push_back(entry.second.placement);
  }
  SharedReference own;  // used only when the process shares none
  SharedReference& reference = spec.reference ? *spec.reference : own;
  const std::vector<Tensor> want =
      reference.slices(spec, names, placements, env.rank, env.world, ref);
  std::vector<double> maxima;  // max_abs, scale per tensor
  for (std::size_t i = 0; i < got.size(); ++i) {
    const ParallelTensor& g = got[i].second;
    const Tensor& mine = want[i];
    const ErrorParts parts = error_parts(got[i].first, g.local, mine);
    maxima.push_back(parts.max_abs);
    maxima.push_back(parts.scale);
  }
  Tensor all =
      Tensor::from_vector(env.ctx, {static_cast<std::int64_t>(maxima.size())}, maxima, DType::f64);
  env.ctx.set_current_op("reference_check");
  env.group.all_reduce(all, ReduceOp::max, CommPurpose::check);
  const std::vector<double> m = all.to_vector();
  CheckResult result;
  result.ran = true;
  result.tolerance = check_tolerance(spec.layer.dtype);
  for (std::size_t i = 0; i < got.size(); ++i) {
    result.tensors.push_back(
        finish_check(got[i].first, {m[2 * i], m[2 * i + 1]}, result.tolerance));
    result.passed = result.passed && result.tensors.back().passed;
  }
  return result;
}

// Every rank's memory totals, so one rank (or one MPI process) can report them all.
std::vector<RankMemory> gather_memory_totals(RankEnv& env, const RankMemory& mine) {
  const std::vector<double> values{mine.saved_activation_bytes, mine.formula_bytes,
                                   mine.extras_bytes, mine.formula_extras_bytes, mine.peak_bytes};
  Tensor local = Tensor::from_vector(env.ctx, {5}, values, DType::f64);
  const std::vector<double> all = env.group.all_gather(local, CommPurpose::check).to_vector();
  std::vector<RankMemory> out(static_cast<std::size_t>(env.world));
  for (std::size_t r = 0; r < out.size(); ++r) {
    out[r].rank = static_cast<int>(r);
    out[r].saved_activation_bytes = all[5 * r];
    out[r].formula_bytes = all[5 * r + 1];
    out[r].extras_bytes = all[5 * r + 2];
    out[r].formula_extras_bytes = all[5 * r + 3];
    out[r].peak_bytes = all[5 * r + 4];
    out[r].formula = mine.formula;
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

std::vector<std::pair<std::string, Tensor>> single_device_reference(Context& ref,
                                                                    const LayerRunSpec& spec) {
  LayerConfig single = spec.layer;
  single.mode = ParallelMode::single;
  single.degree = 1;
  single.planted_bug = PlantedBug::none;  // the reference is always right
  FullData d = full_data(ref, spec);
  TransformerLayer reference(single, std::move(d.weights));
  Tensor x = d.x.set_requires_grad(true);
  Tensor y = reference.forward(x);
  mse_loss(y, d.target).backward();
  std::vector<std::pair<std::string, Tensor>> out{{"output", y}, {"input.grad", x.grad()}};
  for (const auto& [name, p] : reference.weights().named())
    out.push_back({name + ".grad", p.grad()});
  return out;
}

std::vector<Tensor> SharedReference::slices(const LayerRunSpec& spec,
                                            const std::vector<std::string>& names,
                                            const std::vector<Placement>& placements, int rank,
                                            int world, Context& into) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!context_) {
    context_ = std::make_unique<Context>(into.rank());  // the first rank that asks
    context_->set_step(into.step());
    tensors_ = single_device_reference(*context_, spec);
  }
  std::vector<std::string> have;
  for (const auto& entry : tensors_) have.push_back(entry.first);
  const std::vector<std::size_t> pair =
      pair_by_name(names, have, "rank " + std::to_string(rank) + ": the reference check");
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out.push_back(
        slice_of_full(tensors_[pair[i]].second, placements[i], rank, world).copy_to(into));
  }
  return out;
}

RankRun run_layer_rank(RankEnv& env, const LayerRunSpec& spec, RunInspector* inspector) {
  const LayerConfig& c = spec.layer;
  validate_parallel_config(c);
  Context scratch(env.rank);  // full weights and data, outside the measured context
  const FullData data = full_data(scratch, spec);
  const LayerWeights& full = data.weights;
  const Tensor& full_x = data.x;
  const Tensor& full_t = data.target;
  const Shape shape{c.seq, c.batch, c.hidden};

  MemoryLedger ledger;
  CommLog comm;
  ObserverGuard attach_ledger(env.ctx, ledger), attach_comm(env.ctx, comm);
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

  RankRun run;
  run.rank = env.rank;
  run.steps.reserve(static_cast<std::size_t>(spec.steps));  // no growth as the run goes on
  for (int step = 0; step < spec.steps; ++step) {
    env.ctx.set_step(step);
    if (spec.on_step && env.rank == 0) spec.on_step(step);
    const auto start = std::chrono::steady_clock::now();
    // The last step's output is let go first, so an inspector never holds memory the run
    // would have freed (the ledger's numbers stay those of `shardscope run`).
    if (inspector && step > 0) inspector->tensor(env.rank, "output", ParallelTensor{});
    std::chrono::duration<double, std::milli> checking{0};  // left out of the step's time
    double loss = 0;
    {  // the step's output, seed and graph live in here
      ParallelTensor y = layer.forward(x);
      if (inspector) inspector->tensor(env.rank, "output", y);
      if (step == 0) run.memory = measure_memory(ledger, spec, env.rank);
      Tensor seed;
      std::tie(loss, seed) = mse_and_seed(env.group, y, target, c.planted_bug);
      y.local.backward(seed);
      layer.reduce_gradients();
      if (step == 0 && spec.check && c.mode != ParallelMode::single) {
        const auto check_start = std::chrono::steady_clock::now();
        run.check = reference_check(env, spec, layer, x, y);
        if (run.check.passed) layer.check_replicated();  // a failed check says more
        if (inspector) inspector->check(env.rank, run.check);
        checking = std::chrono::steady_clock::now() - check_start;
      }
      if (step == 0 && spec.dump) {  // also left out of the step's time
        const auto dump_start = std::chrono::steady_clock::now();
        spec.dump(env, run_tensors(layer, x, target, y, seed));
        checking += std::chrono::steady_clock::now() - dump_start;
      }
    }
    std::vector<Tensor> params;
    for (const ShardedParameter& p : layer.params()) params.push_back(p.local);
    sgd_step(params, spec.learning_rate);
    x.local.zero_grad();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start - checking;
    run.steps.push_back({loss, elapsed.count(), ledger.live_total()});
    if (step == 0) run.comm = comm.lines();
  }
  run.memory.peak_bytes = static_cast<double>(ledger.peak_total());
  run.group_memory = gather_memory_totals(env, run.memory);
  return run;
}

}  // namespace shardscope
