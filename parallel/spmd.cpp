// run_spmd over threads (and MPI where built).
#include "parallel/spmd.h"

#include <exception>
#include <mutex>
#include <thread>

#include "parallel/thread_comm.h"

namespace shardscope {

#ifndef SHARDSCOPE_HAVE_MPI
bool mpi_available() {
  return false;
}
#endif

void run_spmd_mpi(int world, const SpmdOptions& options, const RankFn& fn);  // mpi_comm.cpp

const char* comm_kind_name(CommKind kind) {
  return kind == CommKind::threads ? "threads" : "mpi";
}

CommKind parse_comm_kind(const std::string& name) {
  if (name == "threads") return CommKind::threads;
  if (name == "mpi") return CommKind::mpi;
  throw ArgumentError("--comm " + name + " is not a communicator: expected threads or mpi");
}

namespace {

std::string join_errors(const std::vector<SpmdError::RankError>& errors) {
  std::string out = std::to_string(errors.size()) + " rank(s) failed";
  for (const auto& e : errors) out += "\n  rank " + std::to_string(e.rank) + ": " + e.message;
  return out;
}

}  // namespace

SpmdError::SpmdError(std::vector<RankError> errors)
    : Error(join_errors(errors)), errors_(std::move(errors)) {}

void run_spmd(int world, const SpmdOptions& options, const RankFn& fn) {
  if (world < 1) throw ArgumentError("--degree must be >= 1, given " + std::to_string(world));
  if (options.comm == CommKind::mpi) {
#ifdef SHARDSCOPE_HAVE_MPI
    run_spmd_mpi(world, options, fn);
    return;
#else
    throw ArgumentError("--comm mpi: this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
  }
  ThreadCommOptions comm_options;
  comm_options.timeout = options.timeout;
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(world, comm_options);
  std::mutex mutex;
  std::vector<SpmdError::RankError> failures;  // in the order they happened
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[static_cast<std::size_t>(r)];
      try {
        Context ctx(r);
        ProcessGroup group(ctx, comm);
        RankEnv env{r, world, ctx, comm, group};
        fn(env);
      } catch (const std::exception& e) {
        {
          // Recorded before the abort: the ranks it releases record their CommErrors after it.
          std::lock_guard<std::mutex> lock(mutex);
          failures.push_back({r, e.what()});
        }
        comm.abort(e.what());  // release every rank waiting on this one
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (!failures.empty()) throw SpmdError(std::move(failures));
}

}  // namespace shardscope
