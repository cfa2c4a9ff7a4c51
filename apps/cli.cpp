// The shardscope command line (CLI11).
#include "apps/cli.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "apps/check_command.h"
#include "apps/debug_session.h"
#include "apps/mlp_ln_command.h"
#include "apps/report.h"
#include "apps/run.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

struct FlagText {
  std::string mode = "single", dtype = "f32", comm = "threads";
  bool no_check = false;
};

void add_run_flags(CLI::App& run, RunOptions& o, FlagText& text) {
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

int run_subcommand(const RunOptions& o, std::ostream& out) {
  const RunResult result = run_layer(o, out);
  if (result.printed && !o.report_path.empty()) {
    write_report(o.report_path, report_json(o, result));
    out << "report written to " << o.report_path << "\n";
  }
  return result.rank0.check.ran && !result.rank0.check.passed ? 3 : 0;
}

}  // namespace

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"shardscope: tensor parallelism you can step through and check"};
  app.require_subcommand(1);
  RunOptions options;
  FlagText text;
  CLI::App* run = app.add_subcommand("run",
                                     "train the Transformer layer for a few SGD steps "
                                     "and print its loss and activation memory");
  add_run_flags(*run, options, text);
  CLI::App* debug = app.add_subcommand(
      "debug",
      "the run of `shardscope run` (threads), paused before the first op on every rank, "
      "driven by commands from the terminal or stdin (step, next-collective, continue, break, "
      "where, print, mem, comm, quit)");
  add_run_flags(*debug, options, text);
  MlpLnOptions mlp_ln_options;
  CLI::App* mlp_ln = add_mlp_ln_subcommand(app, mlp_ln_options);
  CheckOptions check_options;
  CLI::App* check = add_check_subcommand(app, check_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help
    err << "shardscope: " << e.what() << " (see shardscope "
        << (run->parsed()      ? "run "
            : debug->parsed()  ? "debug "
            : mlp_ln->parsed() ? "mlp-ln "
            : check->parsed()  ? "check "
                               : "")
        << "--help)\n";
    return 2;
  }
  if (mlp_ln->parsed()) return mlp_ln_main(mlp_ln_options, out, err);
  if (check->parsed()) return check_main(check_options, out, err);
  try {  // flag values and their rules: exit 2
    options.spec.layer.mode = parse_mode(text.mode);
    options.spec.layer.dtype = parse_dtype(text.dtype);
    options.comm = parse_comm_kind(text.comm);
    options.spec.check = !text.no_check;
    if (options.comm == CommKind::mpi &&
        (run->count("--timeout-ms") + debug->count("--timeout-ms")) > 0) {
      throw ArgumentError("--timeout-ms applies to --comm threads; under mpi use mpirun --timeout");
    }
    options.validate();
  } catch (const ArgumentError& e) {
    err << "shardscope: " << e.what() << "\n";
    return 2;
  }
  try {  // the run itself: exit 1 (2 for a launch the flags made impossible, such as the
         // wrong number of MPI processes; rank failures arrive as SpmdError)
    if (run->parsed()) return run_subcommand(options, out);
    if (debug->parsed()) return debug_main(options, std::cin, out);
  } catch (const ArgumentError& e) {
    err << "shardscope: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "shardscope: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace shardscope
