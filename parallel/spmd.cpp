// run_spmd over threads (and MPI where built).
#include "parallel/spmd.h"

#include <exception>
#include <functional>
#include <mutex>
#include <new>
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

// One rank's thread: its Context, group and function, then a barrier so a rank that returns
// while another still waits in a collective is a mismatch error at once, not a timeout.
void run_thread_rank(int r, int world, Communicator& comm, const RankFn& fn,
                     const std::function<void(int, const std::string&)>& fail) {
  try {
    Context ctx(r);
    ProcessGroup group(ctx, comm);
    RankEnv env{r, world, ctx, comm, group};
    try {
      fn(env);
    } catch (const std::bad_alloc&) {
      throw Error("out of memory (std::bad_alloc) in " + ctx.where(ctx.current_op()));
    }
    ctx.set_current_op("end of the rank function");
    group.barrier();
  } catch (const std::exception& e) {
    fail(r, e.what());
  }
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
  auto fail = [&](int r, const std::string& message) {
    {
      // Recorded before the abort: the ranks it releases record their CommErrors after it.
      std::lock_guard<std::mutex> lock(mutex);
      failures.push_back({r, message});
    }
    comms[static_cast<std::size_t>(r)]->abort(message);  // release every rank waiting on r
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    try {
      threads.emplace_back(
          [&, r] { run_thread_rank(r, world, *comms[static_cast<std::size_t>(r)], fn, fail); });
    } catch (const std::exception& e) {  // no thread for rank r: fail the group, join the rest
      fail(r, std::string("could not start the thread of rank ") + std::to_string(r) + ": " +
                  e.what());
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (!failures.empty()) throw SpmdError(std::move(failures));
}

}  // namespace shardscope
