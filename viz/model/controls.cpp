// The controls' table: each command's button, key and help text, and how it runs.
#include "viz/model/controls.h"

#include <cctype>

namespace shardscope::viz {

const std::vector<Control>& controls() {
  static const std::vector<Control> table = {
      {Command::step_op, "Step op", 's', "every rank runs one op"},
      {Command::next_collective, "Next collective", 'n',
       "every rank runs to just before its next collective"},
      {Command::step_layer, "Step layer", 'l',
       "every rank runs to its first op of another layer or phase"},
      {Command::run_continue, "Continue", 'c', "every rank runs to a breakpoint or the end"},
      {Command::pause, "Pause", 'p', "a live run's moving ranks stop at their next op"},
  };
  return table;
}

std::optional<Command> command_for_key(char key) {
  const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(key)));
  for (const Control& c : controls()) {
    if (c.key == lower) return c.command;
  }
  return std::nullopt;
}

bool command_enabled(Command command, bool idle, const Snapshot& s) {
  if (command == Command::pause) return !idle && s.live;
  return idle && !s.finished;
}

void run_command(Source& source, Command command) {
  switch (command) {
    case Command::step_op:
      source.step_op();
      break;
    case Command::next_collective:
      source.next_collective();
      break;
    case Command::step_layer:
      source.step_layer();
      break;
    case Command::run_continue:
      source.run_continue();
      break;
    case Command::pause:
      source.pause();
      break;
  }
}

std::vector<std::string> help_lines() {
  std::vector<std::string> lines;
  for (const Control& c : controls()) {
    lines.push_back(std::string(1, c.key) + "  " + c.button + ": " + c.what);
  }
  lines.push_back(std::string(1, kHelpKey) + "  (or ?) shows and hides these keys");
  lines.push_back("keys act while no text box has the keyboard");
  return lines;
}

}  // namespace shardscope::viz
