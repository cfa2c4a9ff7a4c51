// Runs the shardscope executable (SHARDSCOPE_EXE, set by CMake) for the end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace shardscope::testing {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line (sh), its stderr joined to its stdout.
inline Result run_shell(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) r.output += buffer.data();
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline Result run_cli(const std::string& args) {
  return run_shell(std::string(SHARDSCOPE_EXE) + " " + args);
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace shardscope::testing
