// ThreadComm: the Communicator for ranks that are threads of one process, the default that runs
// anywhere. Ranks exchange data through each other's buffers (shared memory). Every collective
// checks that all ranks issued the same call; a mismatch, a rank that failed, or a wait longer
// than the timeout ends the collective with a CommError on every rank, naming each rank's call.
// Aborting a group (a rank failed) also fails every group split from it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/comm/stream_copy.h"

namespace shardscope {

// The memory traffic of one rank in one collective, in bytes: what it reads from send buffers
// (its own and its peers') and writes into outputs (its own; a split all_reduce writes its chunk
// into every rank's), the in-place staging copy included.
struct CommTraffic {
  double read = 0;
  double written = 0;
};

struct ThreadCommOptions {
  // How long a rank waits for the others inside one collective before the group fails.
  std::chrono::milliseconds timeout{10000};
  // Told, by each rank after each collective, the bytes it moved (counted as it moves them).
  std::function<void(int rank, const CommTraffic&)> on_traffic;
  // A rank whose output, or whose input to a reduction, has this many bytes or more writes the
  // output with streaming stores (parallel/comm/stream_copy.h); SIZE_MAX: plain stores always.
  std::size_t stream_bytes = kStreamOutputBytes;
};

// The bytes `rank` of `size` reads and writes in ThreadComm's algorithm for `call`
// (docs/benchmarks.md derives the bound they put on a collective's time). With N the send
// buffer's bytes and M the output's:
//   all_reduce, N >= 64 KiB and size > 1   read t c, write t c (c: its chunk of N, about N / t)
//   all_reduce, smaller                    read t N, write N
//   reduce_scatter                         read N, write M (= N / t)
//   all_gather, all_to_all, broadcast      read M, write M
// and an in-place call other than a split all_reduce adds its staging copy: read M, write M.
CommTraffic thread_comm_traffic(const CollectiveCall& call, int size, int rank, bool in_place);

// One communicator per rank of a new group of `size` threads; give element i to rank i's thread.
std::vector<std::unique_ptr<Communicator>> make_thread_comms(int size,
                                                             const ThreadCommOptions& options = {});

}  // namespace shardscope
