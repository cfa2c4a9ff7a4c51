// run_spmd: runs the same rank function on every rank, as threads of this process (ThreadComm)
// or as the processes of an MPI world (MpiComm, under mpirun). Each rank gets its own Context,
// Communicator and ProcessGroup. A rank that throws marks its communicator failed, so the other
// ranks' collectives end with a CommError instead of waiting; run_spmd then throws SpmdError with
// every rank's error, the first failure first. Never a hang.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "parallel/communicator.h"
#include "parallel/process_group.h"

namespace shardscope {

enum class CommKind { threads, mpi };
const char* comm_kind_name(CommKind kind);
CommKind parse_comm_kind(const std::string& name);  // "threads" or "mpi"; ArgumentError otherwise
// True when this build has MpiComm.
bool mpi_available();

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
  std::chrono::milliseconds timeout{10000};  // ThreadComm's wait limit inside one collective
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
// a collective is an error at once. MPI: `world` must equal the MPI world size and this process
// runs its own rank only; there a failing rank calls MPI_Abort, which ends every process of the
// job with the rank's message (the one place the library ends the process: an MPI job cannot
// recover a failed rank).
void run_spmd(int world, const SpmdOptions& options, const RankFn& fn);

}  // namespace shardscope
