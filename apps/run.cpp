// `shardscope run`: the training loop and the memory table.
#include "apps/run.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>

#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "parallel/transformer_layer.h"

namespace shardscope {
namespace {

RankMemory measure(const MemoryLedger& ledger, const LayerConfig& config, int rank) {
  const ActivationModel model = single_device_activation_model(config);
  RankMemory m;
  m.rank = rank;
  m.formula = model.formula;
  m.formula_bytes = model.total_bytes;
  m.formula_extras_bytes = model.extras_bytes;
  m.saved_activation_bytes = static_cast<double>(ledger.saved_activation_bytes(config.layer));
  m.extras_bytes = static_cast<double>(ledger.extras_bytes(config.layer));
  std::vector<MemoryLedger::SavedSite> sites = ledger.saved_by_site(config.layer);
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
  for (const auto& site : sites) {  // saved bytes the model has no term for
    if (site.role == SaveRole::activation && site.bytes > 0) {
      m.terms.push_back(
          {"(not in the model)", site.scope, site.op, "-", 0, static_cast<double>(site.bytes)});
    }
  }
  return m;
}

void print_header(const RunOptions& o, std::ostream& out) {
  const LayerConfig& c = o.layer;
  out << "shardscope run: mode " << mode_name(c.mode) << ", degree " << c.degree << ", s=" << c.seq
      << " b=" << c.batch << " h=" << c.hidden << " a=" << c.heads << ", dropout " << c.dropout
      << ", " << dtype_name(c.dtype) << ", seed " << c.seed << ", " << o.steps << " SGD steps (lr "
      << o.learning_rate << "), backend cpu\n";
}

}  // namespace

void RunOptions::validate() const {
  layer.validate();
  if (layer.mode != ParallelMode::single) {
    throw ArgumentError(std::string("--mode ") + mode_name(layer.mode) +
                        " is not built yet: this version runs --mode single only");
  }
  if (steps < 1) throw ArgumentError("--steps must be >= 1, given " + std::to_string(steps));
  if (!(std::isfinite(learning_rate) && learning_rate > 0)) {
    throw ArgumentError("--lr must be a finite number > 0, given " + std::to_string(learning_rate));
  }
}

RunResult run_layer(const RunOptions& options, std::ostream& out) {
  const LayerConfig& c = options.layer;
  options.validate();
  print_header(options, out);
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  const Shape shape{c.seq, c.batch, c.hidden};
  Tensor x = Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedInput), 1.0, c.dtype);
  Tensor target =
      Tensor::randn(ctx, shape, kernels::derive_seed(c.seed, kSeedTarget), 1.0, c.dtype);
  x.set_name("input");
  target.set_name("target");
  RunResult result;
  out << "step        loss     time_ms\n";
  for (int step = 0; step < options.steps; ++step) {
    ctx.set_step(step);
    const auto start = std::chrono::steady_clock::now();
    Tensor y = layer.forward(x);
    if (step == 0) result.memory.push_back(measure(ledger, c, ctx.rank()));
    Tensor loss = mse_loss(y, target);
    const double loss_value = loss.item();
    loss.backward();
    sgd_step(layer.parameters(), options.learning_rate);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    result.steps.push_back({loss_value, elapsed.count()});
    out << std::setw(4) << step << std::setw(12) << std::fixed << std::setprecision(6) << loss_value
        << std::setw(12) << std::setprecision(3) << elapsed.count() << "\n";
  }
  result.memory.back().peak_bytes = static_cast<double>(ledger.peak_total());
  out.unsetf(std::ios::floatfield);
  for (const RankMemory& m : result.memory) print_memory_table(m, c, out);
  return result;
}

void print_memory_table(const RankMemory& m, const LayerConfig& c, std::ostream& out) {
  char line[256];
  out << "\nsaved activation memory of layer " << c.layer << ", rank " << m.rank
      << ", after the forward of step 0 (A = " << dtype_size(c.dtype) << " bytes, "
      << dtype_name(c.dtype) << "; M = 1 byte, u8 mask; s=" << c.seq << " b=" << c.batch
      << " h=" << c.hidden << " a=" << c.heads << ")\n";
  std::snprintf(line, sizeof line, "%-34s %-24s %-16s %14s %14s\n", "term", "saved by", "formula",
                "measured B", "formula B");
  out << line;
  for (const MeasuredTerm& t : m.terms) {
    std::snprintf(line, sizeof line, "%-34s %-24s %-16s %14.0f %14.0f%s\n", t.what.c_str(),
                  (t.scope + "/" + t.op).c_str(), t.formula.c_str(), t.measured_bytes,
                  t.model_bytes, t.measured_bytes == t.model_bytes ? "" : "  <- differs");
    out << line;
  }
  const bool match = m.saved_activation_bytes == m.formula_bytes;
  std::snprintf(line, sizeof line, "%-34s %-41s %14.0f %14.0f  %s\n", "total", m.formula.c_str(),
                m.saved_activation_bytes, m.formula_bytes, match ? "match" : "MISMATCH");
  out << line;
  std::snprintf(line, sizeof line, "%-34s %-41s %14.0f %14.0f\n", "extras (LayerNorm mean, rstd)",
                "4A sb, not in the formula", m.extras_bytes, m.formula_extras_bytes);
  out << line;
  std::snprintf(line, sizeof line, "%-34s %-41s %14.0f\n", "peak live bytes",
                "all categories, whole run", m.peak_bytes);
  out << line;
}

}  // namespace shardscope
