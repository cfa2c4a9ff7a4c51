// The controls: the commands of the Controls panel's buttons and their keyboard shortcuts, in one
// table, so a button and its key always do the same thing and the help overlay lists both. The
// drawing code walks this table for the buttons and for the keys; nothing here knows ImGui.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viz/model/source.h"

namespace shardscope::viz {

enum class Command : std::uint8_t { step_op, next_collective, step_layer, run_continue, pause };

struct Control {
  Command command;
  std::string button;  // the Controls panel's label, "Step op"
  char key;            // a lowercase letter; with GLFW its key code is the uppercase ASCII
  std::string what;    // what it does, for the help overlay
};

// Step op (s), Next collective (n), Step layer (l), Continue (c), Pause (p), in panel order.
const std::vector<Control>& controls();
// The key that shows and hides the help overlay ('?', shift and '/', does too).
inline constexpr char kHelpKey = 'h';

// The control a key runs (a letter in either case); nullopt for other keys.
std::optional<Command> command_for_key(char key);
// Whether the command can run now: the steps while every rank is stopped and the run goes on,
// pause while a live run's ranks are moving.
bool command_enabled(Command command, bool idle, const Snapshot& s);
// Runs it on `source` (returns at once; a live run moves on its own threads).
void run_command(Source& source, Command command);
// The help overlay's lines: "s  Step op: every rank runs one op", ..., then the help key's.
std::vector<std::string> help_lines();

}  // namespace shardscope::viz
