// MpiComm: each collective as one MPI collective after a checked exchange of call descriptors;
// run_spmd over the processes of an MPI world.
#include "parallel/comm/mpi_comm.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "parallel/comm/spmd_launch.h"

namespace shardscope {

void mpi_check(int code, const char* what, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw CommError(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " +
                  (length > 0 ? std::string(text, static_cast<std::size_t>(length))
                              : "MPI error " + std::to_string(code)));
}

namespace {

// Owns MPI's lifetime when shardscope initialised it: MPI_Finalize runs at process exit.
class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    SHARDSCOPE_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized) return;
    int provided = 0;
    SHARDSCOPE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    owned_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      throw CommError("MPI_Init_thread: asked for MPI_THREAD_FUNNELED, the library provides " +
                      std::to_string(provided));
    }
  }
  ~MpiSession() {
    int finalized = 0;
    if (owned_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owned_ = false;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::u8:
      return MPI_UNSIGNED_CHAR;
    case DType::bf16:
    case DType::f16:
      break;  // MPI has no 2-byte float type: its sum would need an operation of its own
  }
  throw ArgumentError(std::string("MpiComm moves f32, f64 and u8, given ") + dtype_name(dtype) +
                      " (run 2-byte types with --comm threads)");
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
}

// MPI counts are int; larger calls fail on every rank alike (the counts were checked equal).
int mpi_count(const CollectiveCall& call) {
  if (call.count > INT_MAX) {
    throw ArgumentError(call.str() + ": count exceeds MPI's int counts (" +
                        std::to_string(INT_MAX) + ")");
  }
  return static_cast<int>(call.count);
}

}  // namespace

void ensure_mpi_initialized() {
  static MpiSession session;
}

MpiComm::MpiComm(MPI_Comm comm) {
  SHARDSCOPE_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  init_from_handle();
}

MpiComm::MpiComm(MPI_Comm owned, Adopt) : comm_(owned) {
  init_from_handle();
}

void MpiComm::init_from_handle() {
  SHARDSCOPE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  SHARDSCOPE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  SHARDSCOPE_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiComm::~MpiComm() {
  int finalized = 0;
  if (comm_ == MPI_COMM_NULL || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  MPI_Comm_free(&comm_);
}

void MpiComm::run(const CollectiveCall& call, const void* send, void* recv) {
  // The check comes first: every rank then validates the same call, so a malformed call fails on
  // every rank alike instead of leaving the others waiting inside MPI.
  check_same_call(call);
  validate_call(call, size_, rank_);
  execute(call, send, recv);
}

// One MPI_Allgather of fixed-size descriptors per collective: the price of a mismatch being an
// error on every rank instead of undefined behaviour.
void MpiComm::check_same_call(const CollectiveCall& call) {
  shardscope::check_same_call(call, size_, [this](const void* mine, void* all, std::size_t bytes) {
    const int n = static_cast<int>(bytes);
    SHARDSCOPE_MPI_CHECK(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm_));
  });
}

void MpiComm::execute(const CollectiveCall& call, const void* send, void* recv) {
  const MPI_Datatype type = mpi_type(call.dtype);
  const MPI_Op op = mpi_op(call.reduce);
  const bool in_place = send == recv;
  const void* source = in_place ? MPI_IN_PLACE : send;
  const int count = mpi_count(call);
  const int chunk = count / size_;  // reduce_scatter, all_to_all: validate_call checked it divides
  const std::size_t count_bytes = static_cast<std::size_t>(count) * dtype_size(call.dtype);
  switch (call.kind) {
    case CollectiveKind::all_reduce:
      SHARDSCOPE_MPI_CHECK(MPI_Allreduce(source, recv, count, type, op, comm_));
      return;
    case CollectiveKind::all_gather:
      // In place, this rank's values start recv; MPI_IN_PLACE wants them at their chunk.
      if (in_place && rank_ > 0 && count > 0) {
        std::memmove(static_cast<unsigned char*>(recv) + rank_ * count_bytes, recv, count_bytes);
      }
      SHARDSCOPE_MPI_CHECK(MPI_Allgather(source, count, type, recv, count, type, comm_));
      return;
    case CollectiveKind::reduce_scatter:
      SHARDSCOPE_MPI_CHECK(MPI_Reduce_scatter_block(source, recv, chunk, type, op, comm_));
      return;
    case CollectiveKind::all_to_all:
      SHARDSCOPE_MPI_CHECK(MPI_Alltoall(source, chunk, type, recv, chunk, type, comm_));
      return;
    case CollectiveKind::broadcast:
      if (rank_ == call.root && !in_place && count > 0) std::memcpy(recv, send, count_bytes);
      SHARDSCOPE_MPI_CHECK(MPI_Bcast(recv, count, type, call.root, comm_));
      return;
    case CollectiveKind::barrier:
      SHARDSCOPE_MPI_CHECK(MPI_Barrier(comm_));
      return;
  }
}

std::unique_ptr<Communicator> MpiComm::split(int color, int key) {
  // Every rank first learns every (color, key), as ThreadComm's split does: the exchange is a
  // checked collective, and a color MPI cannot take fails on every rank, not inside MPI.
  const double mine[2] = {static_cast<double>(color), static_cast<double>(key)};
  std::vector<double> all(2 * static_cast<std::size_t>(size_));
  CollectiveCall call;
  call.kind = CollectiveKind::all_gather;
  call.count = 2;
  call.dtype = DType::f64;
  call.site.op = "split";
  run(call, mine, all.data());
  for (int r = 0; r < size_; ++r) {
    const double c = all[2 * static_cast<std::size_t>(r)];
    if (c < 0) {
      throw ArgumentError("split: rank " + std::to_string(r) + " passed color " +
                          std::to_string(static_cast<int>(c)) + "; MPI needs colors >= 0");
    }
  }
  MPI_Comm out = MPI_COMM_NULL;
  SHARDSCOPE_MPI_CHECK(MPI_Comm_split(comm_, color, key, &out));
  return std::unique_ptr<Communicator>(new MpiComm(out, Adopt{}));
}

void MpiComm::abort(const std::string& reason) {
  std::fprintf(stderr, "shardscope: rank %d failed: %s\n", rank_, reason.c_str());
  std::fflush(stderr);
  // The world, not comm_: on a split communicator MPI need only end that group's processes,
  // which would leave the others waiting for them.
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; should an implementation return, end anyway
}

bool mpi_available() {
  return true;
}

// Declared in spmd_launch.h. This process runs its own rank; a rank whose function throws ends the
// whole job with its message (MpiComm::abort), so no rank waits for it. SpmdOptions::timeout does
// not apply to collectives: MPI collectives have no time limit (mpirun --timeout bounds a whole
// job); it only sets how long an injected hang (SpmdOptions::fault) sleeps before its rank throws.
void run_spmd_mpi(int world, const SpmdOptions& options, const RankFn& fn) {
  ensure_mpi_initialized();
  int processes = 0;
  SHARDSCOPE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes));
  if (world != processes) {
    throw ConfigError("world " + std::to_string(world) + " but mpirun started " +
                          std::to_string(processes) + " processes",
                      {"world"});
  }
  MpiComm comm(MPI_COMM_WORLD);
  // run_spmd refused cuda with MPI: the rank's tensors are host memory, cpu or reference.
  run_process_rank(comm,
                   options.backend == DeviceKind::reference ? Device::reference() : Device::cpu(),
                   fn, options);
}

}  // namespace shardscope
