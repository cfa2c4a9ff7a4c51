// `shardscope debug`: the run of `shardscope run` on threads, every rank paused before its first
// op, driven by commands read from a stream (the terminal, or stdin for scripts and tests):
//   step [N]          every paused rank runs one op (N ops) and stops again
//   next-collective   every rank runs to just before its next collective
//   continue          every rank runs to a breakpoint or the end
//   break <op|layer N|phase forward|backward>   on every rank; refused when no op of the layer
//                     matches it (with the nearest real names)
//   delete [N]        breakpoint N (every breakpoint without N)
//   info breakpoints  the breakpoints and their hits per rank
//   where             each rank's op, phase, layer, step, and the collective it waits in
//   print <tensor>    per rank: placement, shape, a summary and the first values; the paused
//                     op's input0.. and the previous op's output0.., the layer's tensors, and
//                     after the run its final tensors
//   mem               the memory table now, per rank
//   comm              the collectives so far, per rank
//   help              the commands
//   quit              end the run (also at the end of the input)
// When the run ends the session prints the losses and the check. Unknown commands get a one-line
// help. A script's commands are echoed ("> step"); a terminal's are not (it echoes them itself).
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
// b, d, i, w, p, h, q); the rest of the line is its argument.
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
    remove_break,  // delete
    info_breaks,   // info breakpoints
    help,
    unknown,
  };
  Kind kind = Kind::none;
  std::string word;                      // the first word as typed
  std::string tensor;                    // print: the tensor name (may be empty)
  std::optional<Breakpoint> breakpoint;  // break: the breakpoint, when its text parsed
  std::int64_t count = 1;                // step: how many ops
  int id = 0;                            // delete: the breakpoint (0: every breakpoint)
  std::string error;  // break, step, delete, info: why the argument did not parse
};
// Never throws for any text: a bad argument is DebugCommand::error.
DebugCommand parse_debug_command(const std::string& line);

// Returns the exit code: 0 when the session ended by quit, end of input or the run's end; 1 when
// a rank failed for another reason. When `in` is std::cin and stdin is a terminal, commands are
// read with a prompt, line editing and history (libedit when the build found it) and not echoed.
int debug_main(const RunOptions& options, std::istream& in, std::ostream& out);

}  // namespace shardscope
