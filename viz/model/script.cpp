// Script commands: the controls of the visualizer as text, for headless runs and tests.
#include <sstream>

#include "autograd/errors.h"
#include "viz/model/source.h"

namespace shardscope::viz {
namespace {

const char* kForms =
    "step [N], next-collective [N], step-layer [N], continue, pause, "
    "break <op|layer N|phase forward|backward>, clear";

int repeat_count(std::istringstream& args, const std::string& command) {
  std::string n;
  if (!(args >> n)) return 1;
  try {
    std::size_t used = 0;
    const int value = std::stoi(n, &used);
    if (used == n.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  throw ArgumentError("script command '" + command +
                      "': the count must be a positive integer, given '" + n + "'");
}

void wait(Source& source, const std::string& command, std::chrono::milliseconds limit) {
  if (!source.wait_idle(limit)) {
    throw Error("script command '" + command + "': the ranks did not stop within " +
                std::to_string(limit.count()) + " ms");
  }
}

}  // namespace

void run_script_command(Source& source, const std::string& text, std::chrono::milliseconds limit) {
  const std::size_t first = text.find_first_not_of(" \t\r");
  const std::size_t last = text.find_last_not_of(" \t\r");
  const std::string command =
      first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  std::istringstream args(command);
  std::string verb;
  args >> verb;
  if (verb.empty()) return;
  if (verb == "step" || verb == "next-collective" || verb == "step-layer") {
    const int n = repeat_count(args, command);
    for (int i = 0; i < n; ++i) {
      if (verb == "step") {
        source.step_op();
      } else if (verb == "next-collective") {
        source.next_collective();
      } else {
        source.step_layer();
      }
      wait(source, command, limit);
    }
  } else if (verb == "continue") {
    source.run_continue();
    wait(source, command, limit);
  } else if (verb == "pause") {
    source.pause();
    wait(source, command, limit);
  } else if (verb == "clear") {
    source.clear_breakpoints();
  } else if (verb == "break") {
    std::string rest;
    std::getline(args, rest);
    try {
      source.add_breakpoint(Breakpoint::parse(rest));
    } catch (const ArgumentError& e) {
      throw ArgumentError("script command '" + command + "': " + e.what());
    }
    return;
  } else {
    throw ArgumentError("unknown script command '" + command + "'; the commands are " + kForms);
  }
  std::string extra;
  if (args >> extra) {
    throw ArgumentError("script command '" + command + "': unexpected '" + extra + "'");
  }
}

void run_script(Source& source, const std::string& script, std::chrono::milliseconds limit) {
  std::string command;
  for (char c : script + ";") {
    if (c == ';' || c == '\n') {
      run_script_command(source, command, limit);
      command.clear();
    } else {
      command += c;
    }
  }
}

}  // namespace shardscope::viz
