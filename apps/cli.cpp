// The shardscope command line (CLI11).
#include "apps/cli.h"

#include <CLI/CLI.hpp>

#include "apps/report.h"
#include "apps/run.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

void add_run_flags(CLI::App& run, RunOptions& o, std::string& mode, std::string& dtype) {
  LayerConfig& c = o.layer;
  run.add_option("--mode", mode, "single, tp, tp-sp or ulysses (single in this version)")
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
  run.add_option("--steps", o.steps, "SGD steps")->capture_default_str();
  run.add_option("--lr", o.learning_rate, "SGD learning rate")->capture_default_str();
  run.add_option("--seed", c.seed, "seed of weights, data and dropout masks")
      ->capture_default_str();
  run.add_option("--dtype", dtype, "f32 or f64")->capture_default_str();
  run.add_option("--report", o.report_path, "write a JSON report to this file");
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "f64") return DType::f64;
  throw ArgumentError("--dtype " + name + " is not supported: expected f32 or f64");
}

int run_subcommand(const RunOptions& o, std::ostream& out) {
  const RunResult result = run_layer(o, out);
  if (!o.report_path.empty()) {
    write_report(o.report_path, report_json(o, result));
    out << "report written to " << o.report_path << "\n";
  }
  return 0;
}

}  // namespace

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"shardscope: tensor parallelism you can step through and check"};
  app.require_subcommand(1);
  RunOptions options;
  std::string mode = "single", dtype = "f32";
  CLI::App* run = app.add_subcommand("run",
                                     "train the Transformer layer for a few SGD steps "
                                     "and print its loss and activation memory");
  add_run_flags(*run, options, mode, dtype);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help
    err << "shardscope: " << e.what() << " (see shardscope " << (run->parsed() ? "run " : "")
        << "--help)\n";
    return 2;
  }
  try {  // flag values and their rules: exit 2
    options.layer.mode = parse_mode(mode);
    options.layer.dtype = parse_dtype(dtype);
    options.validate();
  } catch (const ArgumentError& e) {
    err << "shardscope: " << e.what() << "\n";
    return 2;
  }
  try {  // the run itself: exit 1
    if (run->parsed()) return run_subcommand(options, out);
  } catch (const std::bad_alloc&) {
    err << "shardscope: error: out of memory for s=" << options.layer.seq
        << " b=" << options.layer.batch << " h=" << options.layer.hidden
        << " a=" << options.layer.heads << " (try smaller --seq, --batch or --hidden)\n";
    return 1;
  } catch (const std::exception& e) {
    err << "shardscope: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace shardscope
