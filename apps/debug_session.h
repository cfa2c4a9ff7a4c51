// `shardscope debug`: the run of `shardscope run` on threads, every rank paused before its first
// op, driven by commands read from a stream (the terminal, or stdin for scripts and tests):
//   step              every paused rank runs one op and stops again
//   next-collective   every rank runs to just before its next collective
//   continue          every rank runs to a breakpoint or the end
//   break <op|layer N|phase forward|backward>   on every rank
//   where             each rank's op, phase, layer, step, and the collective it waits in
//   print <tensor>    per rank: placement, shape, a summary and the first values
//   mem               the memory table now, per rank
//   comm              the collectives so far, per rank
//   quit              end the run (also at the end of the input)
// Unknown commands get a one-line help.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>

#include "apps/run.h"
#include "autograd/debugger.h"

namespace shardscope {

// One input line of the session, parsed without a run (what the session and the fuzz target
// fuzz/debugger_fuzz.cpp share). The first word names the command (or its short form: s, nc, c,
// b, w, p, q); the rest of the line is its argument.
struct DebugCommand {
  enum class Kind : std::uint8_t {
    none,  // an empty or blank line
    quit,
    step,
    next_collective,
    resume,  // continue
    add_break,
    where,
    print,
    mem,
    comm,
    unknown,
  };
  Kind kind = Kind::none;
  std::string word;                      // the first word as typed
  std::string tensor;                    // print: the tensor name (may be empty)
  std::optional<Breakpoint> breakpoint;  // break: the breakpoint, when its text parsed
  std::string error;                     // break: why its text did not parse
};
// Never throws for any text: a bad breakpoint is DebugCommand::error.
DebugCommand parse_debug_command(const std::string& line);

// Returns the exit code: 0 when the session ended by quit, end of input or the run's end; 1 when
// a rank failed for another reason.
int debug_main(const RunOptions& options, std::istream& in, std::ostream& out);

}  // namespace shardscope
