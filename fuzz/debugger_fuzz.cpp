// Fuzz target: the step debugger's command parsers, without a run: each input line through the
// terminal session's parse_debug_command (apps/debug_session.h), and the whole input through
// Breakpoint::parse (autograd/debugger.h). Properties: parse_debug_command never throws;
// Breakpoint::parse throws only ArgumentError; a parsed breakpoint is valid, prints, matches
// without failing, and parses back the same from its canonical text ("<op>", "layer <N>" or
// "phase <p>"). Any crash or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "apps/debug_session.h"
#include "autograd/debugger.h"
#include "fuzz/fuzz_support.h"

namespace shardscope::fuzz {
namespace {

std::string canonical(const Breakpoint& b) {
  if (b.layer) return "layer " + std::to_string(*b.layer);
  if (b.phase) return std::string("phase ") + phase_name(*b.phase);
  return b.op;
}

bool same(const Breakpoint& a, const Breakpoint& b) {
  return a.op == b.op && a.phase == b.phase && a.layer == b.layer;
}

void check_breakpoint(const Breakpoint& b, const std::string& text) {
  try {
    b.validate();
  } catch (const ArgumentError& e) {
    broken("Breakpoint::parse('" + text + "') returned an invalid breakpoint: " + e.what());
  }
  if (b.str().empty()) broken("breakpoint of '" + text + "' prints as nothing");
  for (const char* scope : {"", "attn.qkv", "mlp.fc1"}) {
    for (const char* op : {"matmul", "gelu", ""}) {
      Site site;
      site.op = op;
      site.scope = scope;
      site.layer = b.layer.value_or(0);
      site.phase = b.phase.value_or(Phase::backward);
      b.matches(site);
    }
  }
  const std::string again_text = canonical(b);
  try {
    if (!same(Breakpoint::parse(again_text), b)) {
      broken("'" + text + "' and its canonical text '" + again_text + "' parse differently");
    }
  } catch (const ArgumentError& e) {
    broken("the canonical text '" + again_text + "' of '" + text + "' does not parse: " + e.what());
  }
}

void check_command_line(const std::string& line) {
  DebugCommand c;
  try {
    c = parse_debug_command(line);
  } catch (const std::exception& e) {
    broken("parse_debug_command('" + line + "') threw: " + e.what());
  }
  if (c.kind == DebugCommand::Kind::add_break) {
    if (c.breakpoint.has_value() == !c.error.empty()) {
      broken("break '" + line + "' has both or neither of a breakpoint and an error");
    }
    if (c.breakpoint) check_breakpoint(*c.breakpoint, line);
  }
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardscope;
  const std::string text = fuzz::as_text(data, size);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) fuzz::check_command_line(line);
  try {
    fuzz::check_breakpoint(Breakpoint::parse(text), text);
  } catch (const ArgumentError&) {
  }
  return 0;
}
