// The shardscope command line (CLI11).
#include "apps/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "apps/debug_session.h"
#include "apps/edit_distance.h"
#include "apps/report.h"
#include "apps/run_flags.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

int run_subcommand(const RunOptions& o, std::ostream& out, std::ostream& err) {
  RunResult result = run_layer(o, out);
  if (result.printed && !o.report_path.empty()) {
    try {
      write_report(o.report_path, report_json(o, result));
      out << "report written to " << o.report_path << "\n";
    } catch (const Error& e) {
      result.file_errors.push_back("--report " + std::string(e.what()));
    }
  }
  for (const std::string& w : result.warnings) err << "shardscope: warning: " << w << "\n";
  for (const std::string& e : result.file_errors) err << "shardscope: error: " << e << "\n";
  if (!result.file_errors.empty()) return 1;
  if (result.rank0.check.ran && !result.rank0.check.passed) return 3;
  if (result.rank0.f32_check.ran && !result.rank0.f32_check.passed) return 3;
  return result.model_differences.empty() ? 0 : 4;
}

// The debugger reads and writes no files and prints no step table: the flags about them belong
// to `run`, and are refused rather than ignored.
void refuse_debug_outputs(const CLI::App& debug) {
  for (const char* flag : {"--report", "--dump", "--trace", "--load", "--overwrite",
                           "--trace-events", "--log-every"}) {
    if (debug.count(flag) > 0) {
      throw ArgumentError(std::string(flag) + " is a flag of shardscope run: the debugger reads " +
                          "and writes no files and prints no step table");
    }
  }
}

// " (did you mean --degree?)" for the first unexpected "--flag" of `extras` when one of the
// subcommand's flags is a few edits away; empty otherwise.
std::string nearest_flag(const CLI::App& sub, const std::vector<std::string>& extras) {
  for (const std::string& given : extras) {
    if (given.rfind("--", 0) != 0) continue;
    const std::string name = given.substr(0, given.find('='));
    std::string best;
    std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
    for (const CLI::Option* option : sub.get_options()) {
      for (const std::string& long_name : option->get_lnames()) {
        const std::size_t d = edit_distance(name, "--" + long_name);
        if (d < best_distance) {
          best_distance = d;
          best = "--" + long_name;
        }
      }
    }
    if (!best.empty()) return " (did you mean " + best + "?)";
  }
  return "";
}

}  // namespace

std::variant<Command, int> parse_command(int argc, const char* const* argv, std::ostream& out,
                                         std::ostream& err) {
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
  Command command;
  MlpLnFlags mlp_ln_flags;
  CLI::App* mlp_ln = add_mlp_ln_subcommand(app, mlp_ln_flags);
  CLI::App* check = add_check_subcommand(app, command.check);
  CLI::App* lab = add_lab_subcommand(app, command.lab);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help
    std::string suggestion;
    for (const CLI::App* sub : {run, debug, mlp_ln, check, lab}) {
      if (sub->parsed() && dynamic_cast<const CLI::ExtrasError*>(&e)) {
        suggestion = nearest_flag(*sub, sub->remaining());
      }
    }
    err << "shardscope: " << e.what() << suggestion << " (see shardscope "
        << (run->parsed()      ? "run "
            : debug->parsed()  ? "debug "
            : mlp_ln->parsed() ? "mlp-ln "
            : check->parsed()  ? "check "
            : lab->parsed()    ? "lab "
                               : "")
        << "--help)\n";
    return 2;
  }
  try {  // flag values and their rules: exit 2
    if (run->parsed() || debug->parsed()) {
      command.name = run->parsed() ? Command::Name::run : Command::Name::debug;
      command.run = flags.resolve(run->count("--timeout-ms") + debug->count("--timeout-ms") > 0);
      if (debug->parsed()) refuse_debug_outputs(*debug);
      const LayerConfig& layer = command.run.spec.layer;
      if (run->parsed() && command.run.comm == CommKind::mpi && mpi_available() &&
          !launched_by_mpirun()) {
        err << "shardscope: --comm mpi runs a process per rank, started by mpirun: mpirun -np "
            << layer.degree;
        for (int i = 0; i < argc; ++i) err << " " << argv[i];
        err << "\n";
        return 2;
      }
      if (layer.mode != ParallelMode::single && layer.degree == 1) {
        err << "shardscope: note: --mode " << mode_name(layer.mode)
            << " at --degree 1 is the single-device layer (one rank, no collectives); "
               "--degree 2 or more splits it\n";
      }
    } else if (mlp_ln->parsed()) {
      command.name = Command::Name::mlp_ln;
      command.mlp_ln = resolve_mlp_ln_flags(mlp_ln_flags);
    } else {
      command.name = check->parsed() ? Command::Name::check : Command::Name::lab;
    }
  } catch (const ArgumentError& e) {
    err << "shardscope: " << with_flags(e) << "\n";
    return 2;
  }
  return command;
}

int run_command(const Command& command, std::ostream& out, std::ostream& err) {
  switch (command.name) {
    case Command::Name::mlp_ln:
      return mlp_ln_main(command.mlp_ln, out, err);
    case Command::Name::check:
      return check_main(command.check, out, err);
    case Command::Name::lab:
      return lab_main(command.lab, out, err);
    case Command::Name::run:
    case Command::Name::debug:
      break;
  }
  try {  // the run itself: exit 1 (2 for a launch the flags made impossible, such as the
         // wrong number of MPI processes; rank failures arrive as SpmdError)
    if (command.name == Command::Name::run) return run_subcommand(command.run, out, err);
    return debug_main(command.run, std::cin, out);
  } catch (const ArgumentError& e) {
    err << "shardscope: " << with_flags(e) << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "shardscope: error: " << e.what() << "\n";
    const bool nan_loss = std::string(e.what()).find(kNonFiniteLoss) != std::string::npos;
    if (nan_loss && !command.run.spec.check_finite) {
      err << "shardscope: rerun with --check-finite to find the op that made the first NaN or "
             "Inf\n";
    }
    return 1;
  }
}

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::variant<Command, int> parsed = parse_command(argc, argv, out, err);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  return run_command(std::get<Command>(parsed), out, err);
}

}  // namespace shardscope
