// Fuzz target: the shardscope command line's parsing, without running anything. The input is
// split at whitespace into argv ("run --mode tp --degree 2") and handed to parse_command
// (apps/cli.h), the first half of cli_main: the CLI11 app with every subcommand and its flags,
// then the chosen subcommand's checks (RunFlags::resolve with RunOptions::validate and the
// layer's rules for run and debug, resolve_mlp_ln_flags for mlp-ln). The second half, run_command,
// would start SPMD jobs, read dump folders or run CMake, and is never called.
// Properties: parse_command returns a Command, or 0 after --help with nothing on err, or 2 with
// the 'shardscope: ...' line naming the flag; any exception, a crash or undefined behaviour is a
// bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "apps/cli.h"
#include "fuzz/fuzz_support.h"

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
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const std::variant<Command, int> parsed =
      parse_command(static_cast<int>(argv.size()), argv.data(), out, err);
  const int* exit_code = std::get_if<int>(&parsed);
  if (exit_code == nullptr) return;
  const std::string e = err.str();
  if (*exit_code == 0 && e.empty()) return;  // --help
  if (*exit_code == 2 && e.rfind("shardscope: ", 0) == 0 && e.back() == '\n') return;
  broken("parse_command returned " + std::to_string(*exit_code) + " with '" + e +
         "' on err: expected 0 (help) with nothing, or 2 with 'shardscope: ...' naming the flag");
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  shardscope::fuzz::parse_and_check(
      shardscope::fuzz::split_args(shardscope::fuzz::as_text(data, size)));
  return 0;
}
