// One rank's run of the layer: steps, memory, communication and the reference check.
#include "parallel/layer_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

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

// f32 sums of thousands of products in a different order (sharded GEMMs, collectives) differ by
// a few ulp of the sum, about 1e-6 relative; 1e-4 leaves room for the layer's depth while any
// real error (a missing reduction, a wrong slice) is of order 1. f64 rounding is 1e-16.
constexpr double kTolF32 = 1e-4;
constexpr double kTolF64 = 1e-10;

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
  void finish_backward() {
    if (!parallel) return;
    parallel->reduce_parameter_gradients();
    parallel->check_replicated();
  }
};

LayerHandle make_layer(RankEnv& env, const LayerRunSpec& spec, const LayerWeights& full) {
  LayerHandle h;
  if (spec.layer.mode == ParallelMode::single) {
    LayerWeights w = make_layer_weights(env.ctx, spec.layer);
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
  std::vector<MemoryLedger::SavedSite> sites = ledger.saved_by_site(spec.layer.layer);
  for (const ActivationTerm& t : model.terms) {
    MeasuredTerm row{t.what, t.scope, t.op, t.formula, t.bytes, 0};
    for (auto& site : sites) {
      if (site.role == SaveRole::activation && site.scope == t.scope && site.op == t.op) {
        row.measured_bytes += static_cast<double>(site.bytes);
        site.bytes = 0;  // claimed by this term
      }
    }
    m.terms.push_back(row);
  }
  for (const auto& site : sites) {
    if (site.role == SaveRole::activation && site.bytes > 0) {
      m.terms.push_back(
          {"(not in the model)", site.scope, site.op, "-", 0, static_cast<double>(site.bytes)});
    }
  }
  return m;
}

// MSE over the global tensor: returns the loss and this rank's gradient seed 2 (y - t) / N.
std::pair<double, Tensor> mse_and_seed(ProcessGroup& g, const ParallelTensor& y,
                                       const Tensor& target) {
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
  ctx.backend().add(y.local, target, 2.0 / n, -2.0 / n, seed);
  return {sum_sq.item() / n, seed};
}

TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& want, double tol) {
  TensorCheck c;
  c.name = name;
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    c.max_abs_err = std::max(c.max_abs_err, std::fabs(a[i] - b[i]));
  }
  c.max_rel_err = scale > 0 ? c.max_abs_err / scale : c.max_abs_err;
  c.passed = a.size() == b.size() && c.max_rel_err <= tol && std::isfinite(c.max_rel_err);
  return c;
}

// Gathers output, input gradient and parameter gradients on every rank; rank 0 compares them
// with the single-device layer run on the same weights and data.
CheckResult reference_check(RankEnv& env, const LayerRunSpec& spec, const LayerHandle& layer,
                            const ParallelTensor& x, const ParallelTensor& y) {
  ProcessGroup& g = env.group;
  ScopeGuard scope(env.ctx, "check");
  std::vector<std::pair<std::string, Tensor>> got;
  got.emplace_back("output", gather_to_full(g, y.local, y.placement, CommPurpose::check));
  got.emplace_back("input.grad",
                   gather_to_full(g, x.local.grad(), x.placement, CommPurpose::check));
  for (const ShardedParameter& p : layer.params()) {
    got.emplace_back(p.name + ".grad",
                     gather_to_full(g, p.local.grad(), p.placement, CommPurpose::check));
  }
  CheckResult result;
  result.ran = true;
  result.tolerance = check_tolerance(spec.layer.dtype);
  if (env.rank != 0) return result;
  Context ref(0);
  ref.set_step(0);
  LayerConfig single = spec.layer;
  single.mode = ParallelMode::single;
  single.degree = 1;
  TransformerLayer reference(single, make_layer_weights(ref, single));
  const Shape shape{single.seq, single.batch, single.hidden};
  Tensor rx =
      Tensor::randn(ref, shape, kernels::derive_seed(single.seed, kSeedInput), 1.0, single.dtype);
  rx.set_requires_grad(true);
  Tensor rt =
      Tensor::randn(ref, shape, kernels::derive_seed(single.seed, kSeedTarget), 1.0, single.dtype);
  Tensor ry = reference.forward(rx);
  mse_loss(ry, rt).backward();
  std::vector<Tensor> want{ry, rx.grad()};
  for (const Tensor& p : reference.parameters()) want.push_back(p.grad());
  for (std::size_t i = 0; i < got.size(); ++i) {
    result.tensors.push_back(compare(got[i].first, got[i].second, want[i], result.tolerance));
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

}  // namespace

double check_tolerance(DType dtype) {
  return dtype == DType::f64 ? kTolF64 : kTolF32;
}

RankRun run_layer_rank(RankEnv& env, const LayerRunSpec& spec) {
  const LayerConfig& c = spec.layer;
  validate_parallel_config(c);
  Context scratch(env.rank);  // full weights and data, outside the measured context
  const LayerWeights full = make_layer_weights(scratch, c);
  const Shape shape{c.seq, c.batch, c.hidden};
  const Tensor full_x =
      Tensor::randn(scratch, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype);
  const Tensor full_t =
      Tensor::randn(scratch, shape, kernels::derive_seed(c.seed, kSeedTarget), 1.0, c.dtype);

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

  RankRun run;
  run.rank = env.rank;
  for (int step = 0; step < spec.steps; ++step) {
    env.ctx.set_step(step);
    const auto start = std::chrono::steady_clock::now();
    ParallelTensor y = layer.forward(x);
    if (step == 0) run.memory = measure_memory(ledger, spec, env.rank);
    auto [loss, seed] = mse_and_seed(env.group, y, target);
    y.local.backward(seed);
    layer.finish_backward();
    if (step == 0 && spec.check && c.mode != ParallelMode::single) {
      run.check = reference_check(env, spec, layer, x, y);
    }
    std::vector<Tensor> params;
    for (const ShardedParameter& p : layer.params()) params.push_back(p.local);
    sgd_step(params, spec.learning_rate);
    x.local.zero_grad();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    run.steps.push_back({loss, elapsed.count()});
    if (step == 0) run.comm = comm.lines();
  }
  run.memory.peak_bytes = static_cast<double>(ledger.peak_total());
  run.group_memory = gather_memory_totals(env, run.memory);
  return run;
}

}  // namespace shardscope
