// The launchers behind run_spmd, one per way of starting ranks (internal to parallel/): threads of
// this process (spmd.cpp), MPI processes (mpi_comm.cpp) and NCCL devices (spmd_nccl.cpp).
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm/spmd.h"

namespace shardscope {

// Runs rank r of `fn` on a thread of its own with comms[r] and a Context on devices[r]; a rank that
// throws aborts its communicator. Throws SpmdError with every rank's error once all have joined.
// With options.fault, rank fault->rank runs with the fault (a rank failing ends a hang early).
void run_thread_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                      const std::vector<Device>& devices, const RankFn& fn,
                      const SpmdOptions& options);

// Runs this process's rank of `fn` with `comm` and a Context on `device`, then a checked barrier;
// an exception calls comm.abort (under MPI: ends the job with the rank's message). With
// options.fault on this rank, it runs with the fault.
void run_process_rank(Communicator& comm, Device device, const RankFn& fn,
                      const SpmdOptions& options);

void run_spmd_mpi(int world, const SpmdOptions& options, const RankFn& fn);   // mpi_comm.cpp
void run_spmd_nccl(int world, const SpmdOptions& options, const RankFn& fn);  // spmd_nccl.cpp

}  // namespace shardscope
