// run_spmd: runs the same rank function on every rank, as threads of this process (ThreadComm),
// as the processes of an MPI world (MpiComm, under mpirun), or on CUDA devices (NcclComm: one
// thread per device, or one process per device under mpirun). Each rank gets its own Context
// (with the CUDA backend of its device under NCCL), Communicator and ProcessGroup. A rank that
// throws marks its communicator failed, so the other ranks' collectives end with a CommError
// instead of waiting; run_spmd then throws SpmdError with every rank's error, the first failure
// first. Never a hang. SpmdOptions::fault makes one rank misbehave on purpose (fault_injection.h).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/fault_injection.h"
#include "parallel/comm/process_group.h"

namespace shardscope {

enum class CommKind { threads, mpi, nccl };
const char* comm_kind_name(CommKind kind);
// "threads", "mpi" or "nccl"; ArgumentError naming the accepted values otherwise.
CommKind parse_comm_kind(const std::string& name);
// True when this build has MpiComm.
bool mpi_available();
// True when this build has NcclComm (the CUDA toolkit with NCCL was found).
bool nccl_available();
// The devices of ranks 0..world-1 run as threads on `backend` with `device_count` visible CUDA
// devices: all cpu, all reference, or rank r on cuda:(r mod device_count). ArgumentError when
// cuda has no device.
std::vector<Device> thread_rank_devices(int world, DeviceKind backend, int device_count,
                                        const std::string& why_none = {});
// True when this process was started by mpirun / mpiexec (Open MPI, MPICH, PMIx environments).
bool launched_by_mpirun();

struct RankEnv {
  int rank;
  int world;
  Context& ctx;
  Communicator& comm;
  ProcessGroup& group;
};

using RankFn = std::function<void(RankEnv&)>;

struct SpmdOptions {
  CommKind comm = CommKind::threads;
  // Where the ranks' tensors live. cpu: every launcher. cuda: comm nccl (a device per rank), or
  // comm threads, where the ranks are threads sharing the visible devices (rank r on device
  // r mod count, so one GPU serves every rank) and their collectives are staged through host
  // memory (host_staging_comm.h). reference: the plain loops of autograd/reference/, host memory
  // like cpu, on threads or mpi. comm mpi takes cpu or reference; comm nccl is cuda whatever this
  // says.
  DeviceKind backend = DeviceKind::cpu;
  std::chrono::milliseconds timeout{
      10000};  // threads, nccl threads: the wait limit of a collective
  // nccl: the host-side exchange before every NCCL call that checks every rank issues the same
  // collective (ThreadComm and MpiComm always check).
  bool check_calls = true;
  // Rank fault->rank misbehaves at its first collective or op named fault->at, on every launcher
  // (fault_injection.h); a fault that never fires is an error after the run. Checked by
  // check_fault_plan before any rank starts.
  std::optional<FaultPlan> fault;
};

class SpmdError : public Error {
 public:
  struct RankError {
    int rank;
    std::string message;
  };
  explicit SpmdError(std::vector<RankError> errors);
  const std::vector<RankError>& errors() const { return errors_; }

 private:
  std::vector<RankError> errors_;
};

// Threads: `world` ranks, each ending with a barrier so a rank that returns while another waits in
// a collective is an error at once; with backend cuda they share the devices (see SpmdOptions).
// MPI: `world` must equal the MPI world size and this process runs its own rank only; there a
// failing rank calls MPI_Abort, which ends every process of the job with the rank's message (the
// one place the library ends the process: an MPI job cannot recover a failed rank). NCCL: under
// mpirun as MPI (one process per device, the device being the process's rank on its node modulo the
// node's devices), otherwise as threads on devices 0..world-1. Launch errors come before any rank
// starts, as ArgumentError: too few CUDA devices
// ("--comm nccl needs 4 CUDA devices, found 0 (...)"), a build without MPI or NCCL, a wrong process
// count.
void run_spmd(int world, const SpmdOptions& options, const RankFn& fn);

}  // namespace shardscope
