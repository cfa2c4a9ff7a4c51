// parse_debug_command: one line of `shardscope debug` parsed into its command and argument.
#include <sstream>

#include "apps/debug_session.h"

namespace shardscope {
namespace {

// A whole-word integer in [lo, hi], else nullopt.
std::optional<std::int64_t> whole_integer(const std::string& text, std::int64_t lo,
                                          std::int64_t hi) {
  std::size_t used = 0;
  std::int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

void parse_step(std::istringstream& args, DebugCommand& c) {
  std::string n, extra;
  args >> n >> extra;
  if (n.empty()) return;
  const std::optional<std::int64_t> count = whole_integer(n, 1, 1000000);
  if (count && extra.empty()) {
    c.count = *count;
  } else {
    c.error = "step: expected a count of ops from 1 to 1000000 (step 5), given '" + n +
              (extra.empty() ? "" : " " + extra) + "'";
  }
}

void parse_delete(std::istringstream& args, DebugCommand& c) {
  std::string n, extra;
  args >> n >> extra;
  if (n.empty()) return;  // every breakpoint
  const std::optional<std::int64_t> id = whole_integer(n, 1, 1000000000);
  if (id && extra.empty()) {
    c.id = static_cast<int>(*id);
  } else {
    c.error = "delete: expected a breakpoint number (delete 2; see info breakpoints), given '" + n +
              (extra.empty() ? "" : " " + extra) + "'";
  }
}

void parse_break(std::istringstream& args, DebugCommand& c) {
  std::string rest;
  std::getline(args, rest);
  try {
    c.breakpoint = Breakpoint::parse(rest);
  } catch (const ArgumentError& e) {
    c.error = e.what();
  }
}

}  // namespace

DebugCommand parse_debug_command(const std::string& line) {
  using Kind = DebugCommand::Kind;
  std::istringstream args(line);
  DebugCommand c;
  args >> c.word;
  const std::string& w = c.word;
  if (w.empty()) return c;
  if (w == "quit" || w == "q") {
    c.kind = Kind::quit;
  } else if (w == "step" || w == "s") {
    c.kind = Kind::step;
    parse_step(args, c);
  } else if (w == "next-collective" || w == "nc") {
    c.kind = Kind::next_collective;
  } else if (w == "continue" || w == "c") {
    c.kind = Kind::resume;
  } else if (w == "break" || w == "b") {
    c.kind = Kind::add_break;
    parse_break(args, c);
  } else if (w == "delete" || w == "d") {
    c.kind = Kind::remove_break;
    parse_delete(args, c);
  } else if (w == "info" || w == "i") {
    c.kind = Kind::info_breaks;
    std::string what, extra;
    args >> what >> extra;
    if (!(what == "breakpoints" || what == "break" || what == "b") || !extra.empty()) {
      c.error = "info: expected info breakpoints, given '" + line + "'";
    }
  } else if (w == "where" || w == "w") {
    c.kind = Kind::where;
  } else if (w == "print" || w == "p") {
    c.kind = Kind::print;
    args >> c.tensor;
  } else if (w == "mem") {
    c.kind = Kind::mem;
  } else if (w == "comm") {
    c.kind = Kind::comm;
  } else if (w == "help" || w == "h" || w == "?") {
    c.kind = Kind::help;
  } else {
    c.kind = Kind::unknown;
  }
  return c;
}

}  // namespace shardscope
