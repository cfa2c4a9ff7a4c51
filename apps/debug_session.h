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

#include <istream>
#include <ostream>

#include "apps/run.h"

namespace shardscope {

// Returns the exit code: 0 when the session ended by quit, end of input or the run's end; 1 when
// a rank failed for another reason.
int debug_main(const RunOptions& options, std::istream& in, std::ostream& out);

}  // namespace shardscope
