// Fuzz target: the shardscope command line's parsing, without running anything. The input is
// split at whitespace into argv ("run --mode tp --degree 2"); the target builds the same CLI11
// app as cli_main (apps/cli.cpp: run, debug, mlp-ln, check and lab with their flags), parses,
// and then checks the flags the way each subcommand does before it starts: RunFlags::resolve
// (with RunOptions::validate and the layer's rules) for run and debug, MlpLnConfig::validate and
// the --comm name for mlp-ln. It never calls cli_main itself: that would start SPMD jobs (run,
// debug, mlp-ln), read dump folders (check) or run CMake (lab).
// Properties: bad flags are a CLI::ParseError or an ArgumentError (what cli_main turns into
// exit 2); any other exception, a crash or undefined behaviour is a bug.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "apps/check_command.h"
#include "apps/lab_command.h"
#include "apps/mlp_ln_command.h"
#include "apps/run_flags.h"
#include "autograd/errors.h"
#include "fuzz/fuzz_support.h"
#include "parallel/spmd.h"

namespace shardscope::fuzz {
namespace {

constexpr std::size_t kMaxArgs = 64;

std::vector<std::string> split_args(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> args{"shardscope"};
  std::string arg;
  while (args.size() <= kMaxArgs && in >> arg) args.push_back(arg);
  return args;
}

void parse_and_check(const std::vector<std::string>& args) {
  CLI::App app{"shardscope"};
  app.require_subcommand(1);
  RunFlags flags;
  CLI::App* run = app.add_subcommand("run", "");
  flags.add_to(*run);
  CLI::App* debug = app.add_subcommand("debug", "");
  flags.add_to(*debug);
  MlpLnOptions mlp_ln_options;
  CLI::App* mlp_ln = add_mlp_ln_subcommand(app, mlp_ln_options);
  CheckOptions check_options;
  add_check_subcommand(app, check_options);
  LabOptions lab_options;
  add_lab_subcommand(app, lab_options);

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    app.exit(e, out, err);  // the help text or the error line, as cli_main prints them
    return;
  }
  try {
    if (mlp_ln->parsed()) {
      mlp_ln_options.config.validate();
      parse_comm_kind(mlp_ln_options.comm);
    }
    if (run->parsed() || debug->parsed()) {
      flags.resolve(run->count("--timeout-ms") + debug->count("--timeout-ms") > 0);
    }
  } catch (const ArgumentError&) {
  }
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  shardscope::fuzz::parse_and_check(
      shardscope::fuzz::split_args(shardscope::fuzz::as_text(data, size)));
  return 0;
}
