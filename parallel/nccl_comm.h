// NcclComm: the Communicator for ranks that each own one CUDA device. Buffers are device memory
// (the layout table of communicator.h); each collective is one NCCL call (all-to-all: grouped
// ncclSend/ncclRecv), and run() returns once it finished on the device, because the engine is
// synchronous. Before each call the ranks exchange a small descriptor of their call through a host
// communicator of the same ranks (ThreadComm when ranks are threads, MpiComm when they are
// processes), so a mismatch is a CommError on every rank naming each rank's call, as with the host
// communicators; NcclOptions::check_calls turns that exchange off. Built only where
// SHARDSCOPE_HAVE_NCCL is defined.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

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
  // How long a rank waits for its collective to finish on the device before the group fails;
  // zero waits for ever (under MPI a failing rank ends the job instead).
  std::chrono::milliseconds timeout{0};
};

// One process, one thread per device: communicator i for rank i on devices[i] (distinct
// devices), made together with ncclCommInitAll; the host check runs over a ThreadComm group with
// `options.timeout`. Give element i to rank i's thread.
std::vector<std::unique_ptr<Communicator>> make_nccl_thread_comms(const std::vector<int>& devices,
                                                                  const NcclOptions& options = {});

// One rank per process (or a split): collective over `host`, a host communicator of the ranks
// (MpiComm under mpirun). Host rank 0 makes the NCCL unique id and broadcasts it over `host`; every
// rank joins with ncclCommInitRank on `device`. The NcclComm keeps `host` for its checks.
std::unique_ptr<Communicator> make_nccl_comm(std::unique_ptr<Communicator> host, int device,
                                             const NcclOptions& options = {});

}  // namespace shardscope
