// shardscope-viz's command line: a live run (the flags of `shardscope run`) or a replayed trace,
// in a window, or headless with a screenshot, or as a frame-time benchmark.
#pragma once

#include <ostream>

namespace shardscope::viz {

// Returns the exit code: 0 on success, 2 for bad flags, 1 when the run, the trace or the window
// fails. Errors are one line on `err`.
int viz_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace shardscope::viz
