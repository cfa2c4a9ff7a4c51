// `shardscope mlp-ln`: flags, the runs on every rank, the comparison table and the verdicts.
#include "apps/mlp_ln_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "apps/run_flags.h"
#include "autograd/errors.h"
#include "parallel/comm/spmd.h"

namespace shardscope {
namespace {

std::string sci(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", v);
  return text;
}

void print_header(const MlpLnOptions& p, std::ostream& out) {
  const MlpLnConfig& c = p.config;
  out << "shardscope mlp-ln: Linear (column) -> LayerNorm over f -> Linear (row), degree "
      << c.degree << " (" << comm_kind_name(p.comm) << "), s=" << c.seq << " b=" << c.batch
      << " h=" << c.hidden << " f=" << c.ffn << " (f/t=" << c.ffn / c.degree << " per rank), "
      << dtype_name(c.dtype) << ", seed " << c.seed << ", backend cpu\n";
  out << "against the single-device block on the same weights, input and output gradient:\n";
  char line[128];
  std::snprintf(line, sizeof line, "%-6s %-18s %12s %12s\n", "norm", "tensor", "max_abs_err",
                "max_rel_err");
  out << line;
}

void print_rows(const MlpLnComparison& r, std::ostream& out) {
  for (const TensorCheck& d : r.vs_single) {
    char line[160];
    std::snprintf(line, sizeof line, "%-6s %-18s %12.3e %12.3e\n", sharded_norm_name(r.norm),
                  d.name.c_str(), d.max_abs_err, d.max_rel_err);
    out << line;
  }
}

// One line per norm; false when `exact` does not equal the single-device block.
bool print_verdict(const MlpLnComparison& r, const MlpLnConfig& c, std::ostream& out) {
  const Tolerance tol = default_tolerance(c.dtype);
  const double worst = max_rel_err(r.vs_single);
  auto all_pass = [](const std::vector<TensorCheck>& diffs) {
    return std::all_of(diffs.begin(), diffs.end(), [](const TensorCheck& d) { return d.passed; });
  };
  if (r.norm == ShardedNorm::exact) {
    if (all_pass(r.vs_single)) {
      out << "exact: equals the single-device LayerNorm (max rel err " << sci(worst) << ")\n";
      return true;
    }
    out << "exact: DIFFERS from the single-device LayerNorm (max rel err " << sci(worst)
        << "; elements pass when |a - b| <= " << sci(tol.atol) << " max|b| + " << sci(tol.rtol)
        << " |b|)\n";
    return false;
  }
  const double output = r.vs_single.empty() ? 0.0 : r.vs_single[0].max_rel_err;
  if (r.vs_single.empty() || r.vs_single[0].passed) {
    out << "local: equals the single-device LayerNorm here (max rel err " << sci(worst)
        << "): with --degree " << c.degree << " a shard holds the whole feature dim\n";
    return true;
  }
  out << "local: a different model: output differs by " << sci(output)
      << " (max rel err) from the single-device LayerNorm; it equals LayerNorm of each of the "
      << c.degree << " feature slices alone (max rel err " << sci(max_rel_err(r.vs_sliced))
      << ") (TransformerEngine's te.ops.LayerNorm on a local shard behaves like this)\n";
  return true;
}

// Runs every rank for one norm; returns rank 0's comparison (empty lists on other MPI ranks).
MlpLnComparison run_norm(const MlpLnOptions& p, ShardedNorm norm, bool& have_rank0) {
  SpmdOptions spmd;
  spmd.comm = p.comm;
  std::mutex mutex;
  MlpLnComparison rank0;
  have_rank0 = false;
  run_spmd(p.config.degree, spmd, [&](RankEnv& env) {
    MlpLnComparison result = run_mlp_ln_rank(env, p.config, norm);
    if (env.rank != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    rank0 = std::move(result);
    have_rank0 = true;
  });
  return rank0;
}

}  // namespace

CLI::App* add_mlp_ln_subcommand(CLI::App& app, MlpLnFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "mlp-ln",
      "Linear (column parallel) -> LayerNorm over the sharded feature dim -> Linear (row "
      "parallel), exact and local LayerNorm against the single-device block");
  MlpLnConfig& c = o.config;
  cmd->add_option("--degree", c.degree, "ranks in the tensor-parallel group (t)")
      ->capture_default_str();
  cmd->add_option("--seq", c.seq, "sequence length s")->capture_default_str();
  cmd->add_option("--batch", c.batch, "micro-batch size b")->capture_default_str();
  cmd->add_option("--hidden", c.hidden, "hidden size h")->capture_default_str();
  cmd->add_option("--ffn", c.ffn, "feature dim f of the LayerNorm (divisible by --degree)")
      ->capture_default_str();
  cmd->add_option("--norm", o.norm, "exact, local or both")->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "f32 or f64")->capture_default_str();
  cmd->add_option("--seed", c.seed, "seed of weights, input and output gradient")
      ->capture_default_str();
  cmd->add_option("--comm", o.comm, "threads (ranks are threads) or mpi (under mpirun)")
      ->capture_default_str();
  return cmd;
}

MlpLnOptions resolve_mlp_ln_flags(const MlpLnFlags& o) {
  MlpLnOptions p;
  p.config = o.config;
  p.config.dtype = parse_dtype(o.dtype);
  if (o.norm == "exact" || o.norm == "both") p.norms.push_back(ShardedNorm::exact);
  if (o.norm == "local" || o.norm == "both") p.norms.push_back(ShardedNorm::local);
  if (p.norms.empty()) {
    throw ArgumentError("--norm " + o.norm + " is not a LayerNorm: expected exact, local or both");
  }
  p.comm = parse_comm_kind(o.comm);
  p.config.validate();
  return p;
}

int mlp_ln_main(const MlpLnOptions& p, std::ostream& out, std::ostream& err) {
  try {  // the runs: exit 1
    std::vector<MlpLnComparison> results;
    bool have_rank0 = false;
    for (ShardedNorm norm : p.norms) results.push_back(run_norm(p, norm, have_rank0));
    if (!have_rank0) return 0;  // an MPI rank other than 0
    print_header(p, out);
    for (const MlpLnComparison& r : results) print_rows(r, out);
    bool exact_ok = true;
    for (const MlpLnComparison& r : results) exact_ok = print_verdict(r, p.config, out) && exact_ok;
    return exact_ok ? 0 : 3;
  } catch (const std::bad_alloc&) {
    err << "shardscope: error: out of memory for s=" << p.config.seq << " b=" << p.config.batch
        << " h=" << p.config.hidden << " f=" << p.config.ffn << "\n";
    return 1;
  } catch (const std::exception& e) {
    err << "shardscope: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace shardscope
