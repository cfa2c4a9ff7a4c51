// run_spmd: the choice of launcher, and the launchers for ranks as threads and as processes.
#include "parallel/comm/spmd.h"

#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "autograd/cuda/cuda_backend.h"
#include "parallel/comm/host_staging_comm.h"
#include "parallel/comm/spmd_launch.h"
#include "parallel/comm/thread_comm.h"

namespace shardscope {

#ifndef SHARDSCOPE_HAVE_MPI
bool mpi_available() {
  return false;
}
#endif

bool nccl_available() {
#ifdef SHARDSCOPE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::threads:
      return "threads";
    case CommKind::mpi:
      return "mpi";
    case CommKind::nccl:
      return "nccl";
  }
  return "?";
}

CommKind parse_comm_kind(const std::string& name) {
  if (name == "threads") return CommKind::threads;
  if (name == "mpi") return CommKind::mpi;
  if (name == "nccl") return CommKind::nccl;
  throw ConfigError("comm \"" + name + "\" is not a communicator: expected threads, mpi or nccl",
                    {"comm"});
}

namespace {

std::string join_errors(const std::vector<SpmdError::RankError>& errors) {
  std::string out = std::to_string(errors.size()) + " rank(s) failed";
  for (const auto& e : errors) out += "\n  rank " + std::to_string(e.rank) + ": " + e.message;
  return out;
}

// The rank function in `ctx`, with out-of-memory named where it happened, then a barrier so a rank
// that returns while another still waits in a collective is a mismatch error at once. On the rank
// of an injected fault, `comm` is the faulty one and `fault` watches the rank's ops; before the
// barrier (and after it, for a fault at the barrier itself) it says whether the fault fired.
void run_rank_function(Context& ctx, Communicator& comm, const RankFn& fn, FaultInjector* fault) {
  comm.attach(ctx);
  std::optional<ObserverGuard> watch;
  if (fault) watch.emplace(ctx, fault->op_observer());
  ProcessGroup group(ctx, comm);
  RankEnv env{comm.rank(), comm.size(), ctx, comm, group};
  try {
    fn(env);
  } catch (const std::bad_alloc&) {
    throw Error("out of memory (std::bad_alloc) in " + ctx.where(ctx.current_op()));
  }
  ctx.set_current_op("end of the rank function");
  if (fault && fault->plan().at != "barrier") fault->check_fired();
  group.barrier();
  if (fault) fault->check_after_run();
}

// One rank's thread: its Context and function; a failure is reported through `fail`.
void run_thread_rank(int r, Device device, Communicator& comm, const RankFn& fn,
                     FaultInjector* fault,
                     const std::function<void(int, const std::string&)>& fail) {
  try {
    Context ctx(r, device);
    run_rank_function(ctx, comm, fn, fault);
  } catch (const std::exception& e) {
    fail(r, e.what());
  }
}

}  // namespace

SpmdError::SpmdError(std::vector<RankError> errors)
    : Error(join_errors(errors)), errors_(std::move(errors)) {}

void run_thread_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                      const std::vector<Device>& devices, const RankFn& fn,
                      const SpmdOptions& options) {
  const int world = static_cast<int>(comms.size());
  std::vector<Communicator*> rank_comms;
  for (auto& c : comms) rank_comms.push_back(c.get());
  std::shared_ptr<FaultInjector> fault;
  std::unique_ptr<Communicator> faulty;
  if (options.fault) {
    fault = std::make_shared<FaultInjector>(*options.fault, options.timeout);
    const auto u = static_cast<std::size_t>(options.fault->rank);
    faulty = make_faulty_comm(*comms[u], fault);
    rank_comms[u] = faulty.get();
  }
  std::mutex mutex;
  std::vector<SpmdError::RankError> failures;  // in the order they happened
  auto fail = [&](int r, const std::string& message) {
    {
      // Recorded before the abort: the ranks it releases record their CommErrors after it.
      std::lock_guard<std::mutex> lock(mutex);
      failures.push_back({r, message});
    }
    comms[static_cast<std::size_t>(r)]->abort(message);  // release every rank waiting on r
    // The group is failing: an injected hang on another rank need not wait any longer.
    if (fault && r != fault->plan().rank) fault->interrupt();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    const auto u = static_cast<std::size_t>(r);
    try {
      FaultInjector* rank_fault = fault && fault->plan().rank == r ? fault.get() : nullptr;
      threads.emplace_back([&, r, u, rank_fault] {
        run_thread_rank(r, devices[u], *rank_comms[u], fn, rank_fault, fail);
      });
    } catch (const std::exception& e) {  // no thread for rank r: fail the group, join the rest
      fail(r, std::string("could not start the thread of rank ") + std::to_string(r) + ": " +
                  e.what());
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (!failures.empty()) throw SpmdError(std::move(failures));
}

void run_process_rank(Communicator& comm, Device device, const RankFn& fn,
                      const SpmdOptions& options) {
  try {
    std::shared_ptr<FaultInjector> fault;
    std::unique_ptr<Communicator> faulty;
    if (options.fault && options.fault->rank == comm.rank()) {
      // No rank can interrupt a hang here: it lasts its limit, then its throw ends the job.
      fault = std::make_shared<FaultInjector>(*options.fault, options.timeout);
      faulty = make_faulty_comm(comm, fault);
    }
    Context ctx(comm.rank(), device);
    run_rank_function(ctx, faulty ? *faulty : comm, fn, fault.get());
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
}

std::vector<Device> thread_rank_devices(int world, DeviceKind backend, int device_count,
                                        const std::string& why_none) {
  if (backend == DeviceKind::cpu) return std::vector<Device>(static_cast<std::size_t>(world));
  if (backend == DeviceKind::reference) {
    return std::vector<Device>(static_cast<std::size_t>(world), Device::reference());
  }
  if (device_count < 1) {
    throw ArgumentError("backend cuda with ranks as threads needs 1 CUDA device, found 0" +
                        (why_none.empty() ? std::string() : " (" + why_none + ")"));
  }
  std::vector<Device> devices;
  for (int r = 0; r < world; ++r) devices.push_back(Device::cuda(r % device_count));
  return devices;
}

void run_spmd(int world, const SpmdOptions& options, const RankFn& fn) {
  if (world < 1) throw ConfigError("world must be >= 1, given " + std::to_string(world), {"world"});
  if (options.backend == DeviceKind::cuda && options.comm == CommKind::mpi) {
    throw ArgumentError(
        "backend cuda with comm mpi: MPI moves host memory; use comm nccl (a device per rank) or "
        "threads (ranks sharing the devices)");
  }
  if (options.fault) check_fault_plan(*options.fault, world, options.check_calls);
  switch (options.comm) {
    case CommKind::mpi:
#ifdef SHARDSCOPE_HAVE_MPI
      run_spmd_mpi(world, options, fn);
      return;
#else
      throw ConfigError("comm mpi: this build has no MPI (install libopenmpi-dev and rebuild)",
                        {"comm"});
#endif
    case CommKind::nccl:
#ifdef SHARDSCOPE_HAVE_NCCL
      run_spmd_nccl(world, options, fn);
      return;
#else
      throw ConfigError(
          "comm nccl: this build has no NCCL (it needs the CUDA toolkit's nvcc and NCCL at "
          "configure time; see docs/user-guide.md)",
          {"comm"});
#endif
    case CommKind::threads:
      break;
  }
  ThreadCommOptions comm_options;
  comm_options.timeout = options.timeout;
  std::string why_none;
  const int count = options.backend == DeviceKind::cuda ? cuda_device_count(&why_none) : 0;
  const std::vector<Device> devices = thread_rank_devices(world, options.backend, count, why_none);
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(world, comm_options);
  if (options.backend == DeviceKind::cuda) {  // cpu and reference tensors are host memory
    for (auto& comm : comms) comm = make_host_staging_comm(std::move(comm));
  }
  run_thread_ranks(comms, devices, fn, options);
}

}  // namespace shardscope
