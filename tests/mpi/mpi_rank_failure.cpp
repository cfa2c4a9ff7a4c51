// A program for the mpi label, run by mpiexec as a world of 4: rank 2's function throws while the
// other ranks wait in an all_reduce. run_spmd must end the whole job with rank 2's message
// ("shardscope: rank 2 failed: ..."), never hang and never return.
#include <cstdio>

#include "autograd/tensor.h"
#include "parallel/comm/spmd.h"

int main() {
  using namespace shardscope;
  SpmdOptions options;
  options.comm = CommKind::mpi;
  int rank = -1;
  run_spmd(4, options, [&](RankEnv& env) {
    rank = env.rank;
    if (env.rank == 2) throw StateError("rank 2 fails on purpose");
    Tensor t = Tensor::full(env.ctx, {4}, 1.0);
    env.group.all_reduce(t, ReduceOp::sum);
  });
  std::fprintf(stderr, "mpi_rank_failure: run_spmd returned on rank %d\n", rank);
  return 0;
}
