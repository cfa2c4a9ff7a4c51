// The shardscope command line (CLI11).
#include "apps/cli.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "apps/check_command.h"
#include "apps/debug_session.h"
#include "apps/lab_command.h"
#include "apps/mlp_ln_command.h"
#include "apps/report.h"
#include "apps/run.h"
#include "apps/run_flags.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

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
  RunFlags flags;
  CLI::App* run = app.add_subcommand("run",
                                     "train the Transformer layer for a few SGD steps "
                                     "and print its loss and activation memory");
  flags.add_to(*run);
  CLI::App* debug = app.add_subcommand(
      "debug",
      "the run of `shardscope run` (threads), paused before the first op on every rank, "
      "driven by commands from the terminal or stdin (step, next-collective, continue, break, "
      "where, print, mem, comm, quit)");
  flags.add_to(*debug);
  MlpLnOptions mlp_ln_options;
  CLI::App* mlp_ln = add_mlp_ln_subcommand(app, mlp_ln_options);
  CheckOptions check_options;
  CLI::App* check = add_check_subcommand(app, check_options);
  LabOptions lab_options;
  CLI::App* lab = add_lab_subcommand(app, lab_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help
    err << "shardscope: " << e.what() << " (see shardscope "
        << (run->parsed()      ? "run "
            : debug->parsed()  ? "debug "
            : mlp_ln->parsed() ? "mlp-ln "
            : check->parsed()  ? "check "
            : lab->parsed()    ? "lab "
                               : "")
        << "--help)\n";
    return 2;
  }
  if (mlp_ln->parsed()) return mlp_ln_main(mlp_ln_options, out, err);
  if (check->parsed()) return check_main(check_options, out, err);
  if (lab->parsed()) return lab_main(lab_options, out, err);
  RunOptions options;
  try {  // flag values and their rules: exit 2
    options = flags.resolve(run->count("--timeout-ms") + debug->count("--timeout-ms") > 0);
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
