// Script commands: the controls of the visualizer as text, for headless runs and tests.
#include <sstream>

#include "autograd/errors.h"
#include "viz/model/source.h"

namespace shardscope::viz {
namespace {

const char* kForms =
    "step [N], next-collective [N], step-layer [N], continue, pause, "
    "break <op|layer N|phase forward|backward>, clear, show-layer <N|follow>";

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

// "show-layer N" picks the stack's layer the memory and shard panels show (which stops them
// following the focused rank's op); "show-layer follow" makes them follow it again.
void show_layer(Source& source, std::istringstream& args, const std::string& command,
                LayerSelection* view) {
  if (view == nullptr) {
    throw ArgumentError("script command '" + command +
                        "': there are no panels here to show a layer in");
  }
  std::string which;
  if (!(args >> which)) {
    throw ArgumentError("script command '" + command + "': expected show-layer <N|follow>");
  }
  if (which == "follow") {
    view->follow = true;
    return;
  }
  const int layers = source.snapshot().config.layers;
  int layer = -1;
  try {
    std::size_t used = 0;
    layer = std::stoi(which, &used);
    if (used != which.size()) layer = -1;
  } catch (const std::exception&) {
  }
  if (layer < 0 || layer >= layers) {
    throw ArgumentError("script command '" + command + "': the layer must be 'follow' or 0 to " +
                        std::to_string(layers - 1) + " (a stack of " + std::to_string(layers) +
                        (layers == 1 ? " layer" : " layers") + "), given '" + which + "'");
  }
  view->follow = false;
  view->layer = layer;
}

}  // namespace

void run_script_command(Source& source, const std::string& text, std::chrono::milliseconds limit,
                        LayerSelection* view) {
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
  } else if (verb == "show-layer") {
    show_layer(source, args, command, view);
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

void run_script(Source& source, const std::string& script, std::chrono::milliseconds limit,
                LayerSelection* view) {
  std::string command;
  for (char c : script + ";") {
    if (c == ';' || c == '\n') {
      run_script_command(source, command, limit, view);
      command.clear();
    } else {
      command += c;
    }
  }
}

}  // namespace shardscope::viz
