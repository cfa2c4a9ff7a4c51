// MpiComm: the Communicator for ranks that are the processes of an MPI world (started by mpirun).
// Each collective maps onto one MPI collective with the buffer semantics of communicator.h. Before
// it, the ranks exchange a small descriptor of their call (kind, reduction, count, dtype, root and
// the call site), so a mismatch ends with a CommError on every rank naming each rank's call
// instead of undefined behaviour or a hang. Built only where SHARDSCOPE_HAVE_MPI is defined.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/comm/communicator.h"

namespace shardscope {

// Throws CommError "file:line: what failed: <MPI error string>" when `code` is not MPI_SUCCESS.
void mpi_check(int code, const char* what, const char* file, int line);
#define SHARDSCOPE_MPI_CHECK(call) ::shardscope::mpi_check((call), #call, __FILE__, __LINE__)

// Initialises MPI once for this process (MPI_THREAD_FUNNELED) unless the program already did, and
// finalises it at process exit if it was initialised here.
void ensure_mpi_initialized();

class MpiComm final : public Communicator {
 public:
  // A communicator over a duplicate of `comm` (collective over `comm`), so its messages never
  // match those of other users of `comm`. Errors return (MPI_ERRORS_RETURN) and become CommError.
  explicit MpiComm(MPI_Comm comm);
  ~MpiComm() override;  // frees the duplicate (before MPI_Finalize)
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  void run(const CollectiveCall& call, const void* send, void* recv) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // Prints "shardscope: rank R failed: reason" to stderr and ends the whole job (MPI_Abort on
  // MPI_COMM_WORLD, also from a split communicator).
  void abort(const std::string& reason) override;

 private:
  struct Adopt {};
  MpiComm(MPI_Comm owned, Adopt);  // takes ownership of a communicator made by split
  void init_from_handle();
  void check_same_call(const CollectiveCall& call);
  void execute(const CollectiveCall& call, const void* send, void* recv);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace shardscope
