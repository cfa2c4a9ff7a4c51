// The flags of `shardscope run`.
#include "apps/run_flags.h"

#include <algorithm>
#include <iterator>

#include "autograd/errors.h"

namespace shardscope {

void RunFlags::add_to(CLI::App& run, bool outputs) {
  RunOptions& o = options;
  RunFlags& text = *this;
  LayerConfig& c = o.spec.layer;
  run.add_option("--mode", text.mode, "single, tp, tp-sp or ulysses")->capture_default_str();
  run.add_option("--comm", text.comm, "threads (ranks are threads) or mpi (under mpirun)")
      ->capture_default_str();
  run.add_flag("--no-check", text.no_check, "skip the comparison with the single-device layer");
  run.add_flag("--keep-gathered-input", o.spec.keep_gathered_input,
               "tp-sp: keep the all-gathered linear inputs for backward instead of re-gathering");
  run.add_option("--timeout-ms", o.timeout_ms, "threads: how long a collective waits for a rank")
      ->capture_default_str();
  run.add_option("--degree", c.degree, "ranks in the tensor-parallel group (t)")
      ->capture_default_str();
  run.add_option("--seq", c.seq, "sequence length s")->capture_default_str();
  run.add_option("--batch", c.batch, "micro-batch size b")->capture_default_str();
  run.add_option("--hidden", c.hidden, "hidden size h")->capture_default_str();
  run.add_option("--heads", c.heads, "attention heads a (h must divide by a)")
      ->capture_default_str();
  run.add_option("--dropout", c.dropout, "dropout probability of the three dropouts")
      ->capture_default_str();
  run.add_option("--steps", o.spec.steps, "SGD steps")->capture_default_str();
  run.add_option("--lr", o.spec.learning_rate, "SGD learning rate")->capture_default_str();
  run.add_option("--seed", c.seed, "seed of weights, data and dropout masks")
      ->capture_default_str();
  run.add_option("--dtype", text.dtype, "f32 or f64")->capture_default_str();
  if (!outputs) return;
  run.add_option("--report", o.report_path, "write a JSON report to this file");
  run.add_option("--dump", o.dump_dir,
                 "write every tensor of step 0 (full and per-rank .npy, manifest.json) here");
  run.add_option("--load", o.load_dir, "start from this dump's weights, input and target");
  run.add_option("--trace", o.trace_path,
                 "write a Chrome trace (Perfetto, chrome://tracing) of the run to this file");
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "f64") return DType::f64;
  throw ArgumentError("--dtype " + name + " is not supported: expected f32 or f64");
}

bool RunFlags::is_run_flag(const std::string& name) {
  static const char* const kNames[] = {
      "--mode",       "--comm",   "--no-check", "--keep-gathered-input",
      "--timeout-ms", "--degree", "--seq",      "--batch",
      "--hidden",     "--heads",  "--dropout",  "--steps",
      "--lr",         "--seed",   "--dtype",    "--report",
      "--dump",       "--load"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

RunOptions RunFlags::resolve(bool timeout_set) const {
  RunOptions o = options;
  o.spec.layer.mode = parse_mode(mode);
  o.spec.layer.dtype = parse_dtype(dtype);
  o.comm = parse_comm_kind(comm);
  o.spec.check = !no_check;
  if (o.comm == CommKind::mpi && timeout_set) {
    throw ArgumentError("--timeout-ms applies to --comm threads; under mpi use mpirun --timeout");
  }
  o.validate();
  return o;
}

}  // namespace shardscope
