// ThreadComm: the Communicator for ranks that are threads of one process, the default that runs
// anywhere. Ranks exchange data through each other's buffers (shared memory). Every collective
// checks that all ranks issued the same call; a mismatch, a rank that failed, or a wait longer
// than the timeout ends the collective with a CommError on every rank, naming each rank's call.
// Aborting a group (a rank failed) also fails every group split from it.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace shardscope {

struct ThreadCommOptions {
  // How long a rank waits for the others inside one collective before the group fails.
  std::chrono::milliseconds timeout{10000};
};

// One communicator per rank of a new group of `size` threads; give element i to rank i's thread.
std::vector<std::unique_ptr<Communicator>> make_thread_comms(int size,
                                                             const ThreadCommOptions& options = {});

}  // namespace shardscope
