// `shardscope mlp-ln`: the Linear (column) -> LayerNorm over the sharded feature dim -> Linear
// (row) block on threads (or MPI ranks), once per requested LayerNorm (exact, local or both),
// each compared tensor by tensor with the single-device block, with a verdict per norm.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "parallel/layers/mlp_ln_block.h"

namespace CLI {
class App;
}

namespace shardscope {

// The flags as typed (the run command's RunFlags is the same kind); the defaults are the command
// line's.
struct MlpLnFlags {
  MlpLnConfig config;
  std::string norm = "both";  // exact, local or both
  std::string dtype = "f32";
  std::string comm = "threads";
};

// Adds the `mlp-ln` subcommand and its flags to `app`; parsing writes into `flags`.
CLI::App* add_mlp_ln_subcommand(CLI::App& app, MlpLnFlags& flags);

// The flags checked and turned into what the runs take (as RunFlags::resolve gives RunOptions).
struct MlpLnOptions {
  MlpLnConfig config;              // with the dtype of --dtype
  std::vector<ShardedNorm> norms;  // exact, local, or both in that order
  CommKind comm = CommKind::threads;
};

// Throws ArgumentError naming the flag and the rule (the command line's exit 2).
MlpLnOptions resolve_mlp_ln_flags(const MlpLnFlags& flags);

// Runs the block for each requested norm and prints the table and the verdicts on `out`.
// Returns 0; 1 when a run fails (one line on `err`); 3 when `exact` does not equal the
// single-device block.
int mlp_ln_main(const MlpLnOptions& options, std::ostream& out, std::ostream& err);

}  // namespace shardscope
