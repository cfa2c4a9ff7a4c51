// NcclComm: the Communicator for ranks that each own one CUDA device. Buffers are device memory
// (the layout table of communicator.h); each collective is one NCCL call (all-to-all: grouped
// ncclSend/ncclRecv), and run() returns once it finished on the device, because the engine is
// synchronous. The NCCL communicators are non-blocking (ncclConfig_t::blocking = 0): every wait,
// from joining the group to a collective's end, is a poll that a failed peer or the timeout ends
// by aborting the communicator, never a call that blocks for ever. Before each call the ranks
// exchange a small descriptor of their call through a host communicator of the same ranks
// (ThreadComm when ranks are threads, MpiComm when they are processes), so a mismatch is a
// CommError on every rank naming each rank's call, as with the host communicators;
// NcclOptions::check_calls turns that exchange off. Built only where SHARDSCOPE_HAVE_NCCL is
// defined.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"

namespace shardscope {

// Throw CommError "file:line: what failed: <error string>" unless the call succeeded.
void nccl_check(ncclResult_t code, const char* what, const char* file, int line);
void nccl_cuda_check(cudaError_t code, const char* what, const char* file, int line);
#define SHARDSCOPE_NCCL_CHECK(call) ::shardscope::nccl_check((call), #call, __FILE__, __LINE__)
#define SHARDSCOPE_NCCL_CUDA_CHECK(call) \
  ::shardscope::nccl_cuda_check((call), #call, __FILE__, __LINE__)

struct NcclOptions {
  // The host-side exchange before every NCCL call that checks every rank issues the same
  // collective with the same count, dtype, reduction and root.
  bool check_calls = true;
  // How long a rank waits for its collective to finish on the device, counted from when the
  // compute it follows has finished, before the group fails; zero waits for ever (under MPI a
  // failing rank ends the job instead).
  std::chrono::milliseconds timeout{0};
  // How long making a communicator may take (NCCL joining the ranks, then a warm-up all-reduce of
  // one float that makes NCCL connect and allocate its buffers); zero waits for ever. Longer than
  // a collective: NCCL's set-up takes seconds on a fresh machine.
  std::chrono::milliseconds create_timeout{60000};
};

// One process, one thread per device: communicator i for rank i on devices[i] (distinct
// devices), made together by this thread (grouped ncclCommInitRankConfig, then the warm-up); the
// host check runs over a ThreadComm group with `options.timeout`. Give element i to rank i's
// thread, and end them with close_nccl_thread_comms.
std::vector<std::unique_ptr<Communicator>> make_nccl_thread_comms(const std::vector<int>& devices,
                                                                  const NcclOptions& options = {});

// Ends the communicators of make_nccl_thread_comms all at once, a thread each (and empties
// `comms`): ncclCommDestroy is an intra-node collective, which one thread ending them one after
// the other could wait on for ever.
void close_nccl_thread_comms(std::vector<std::unique_ptr<Communicator>>& comms) noexcept;

// One rank per process (or a split): collective over `host`, a host communicator of the ranks
// (MpiComm under mpirun). Host rank 0 makes the NCCL unique id and broadcasts it over `host`; every
// rank joins with ncclCommInitRankConfig on `device`, then warms up. The NcclComm keeps `host` for
// its checks.
std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int device,
                                             const NcclOptions& options = {});

}  // namespace shardscope
