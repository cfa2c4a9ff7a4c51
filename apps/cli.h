// The shardscope command line: parses arguments and dispatches to the subcommands.
#pragma once

#include <ostream>

namespace shardscope {

// Returns the process exit code: 0 on success, 2 for bad flags, 1 when a run fails. Errors are
// one line on `err` naming the flag and the rule.
int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace shardscope
