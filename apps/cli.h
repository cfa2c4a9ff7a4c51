// The shardscope command line: parses arguments, checks the chosen subcommand's flags, and runs it.
// The two halves are apart so that the command-line fuzz target (fuzz/cli_fuzz.cpp) drives the
// very parsing and checks that cli_main does, and stops before anything runs.
#pragma once

#include <ostream>
#include <variant>

#include "apps/check_command.h"
#include "apps/lab_command.h"
#include "apps/mlp_ln_command.h"
#include "apps/run.h"

namespace shardscope {

// A command line parsed, with its flags checked, before anything runs. Only the member of the
// subcommand `name` names is meaningful.
struct Command {
  enum class Name { run, debug, mlp_ln, check, lab };
  Name name = Name::run;
  RunOptions run;       // run and debug: RunFlags::resolve's options
  MlpLnOptions mlp_ln;  // mlp-ln: resolve_mlp_ln_flags's result
  CheckOptions check;   // check and lab: as parsed; their mains check what needs the files
  LabOptions lab;
};

// Parses argv and checks the chosen subcommand's flags. Returns the Command, or the process exit
// code when there is nothing to run: 0 after --help (the help on `out`), 2 after a bad flag or
// value (one line on `err` naming the flag and the rule).
std::variant<Command, int> parse_command(int argc, const char* const* argv, std::ostream& out,
                                         std::ostream& err);

// Runs a parsed command. Returns the process exit code: 0 on success, 1 when a run fails (one
// line on `err`), 2 for a launch the flags made impossible (such as the wrong number of MPI
// processes), 3 when a run's check against the single-device layer fails.
int run_command(const Command& command, std::ostream& out, std::ostream& err);

// parse_command, then run_command.
int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace shardscope
