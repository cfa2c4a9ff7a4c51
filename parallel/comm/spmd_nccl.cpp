// run_spmd over NCCL: ranks as threads of this process on devices 0..world-1, or, under mpirun,
// one process per device (nccl_devices_on_node: device 0 when each process sees one device of its
// own, else the process's rank on its node). Too few devices is an ArgumentError before any rank
// starts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <type_traits>

#include "parallel/comm/gpu_info.h"
#include "parallel/comm/nccl_comm.h"
#include "parallel/comm/spmd_launch.h"
#ifdef SHARDSCOPE_HAVE_MPI
#include "parallel/comm/mpi_comm.h"
#endif

namespace shardscope {
namespace {

void run_nccl_threads(int world, const SpmdOptions& options, const RankFn& fn) {
  const CudaDeviceCount found = count_cuda_devices();
  if (found.count < world) {
    throw ArgumentError(too_few_devices_message("comm nccl (one thread per device)", world, found));
  }
  std::vector<int> ids(static_cast<std::size_t>(world));
  std::iota(ids.begin(), ids.end(), 0);
  NcclOptions nccl;
  nccl.check_calls = options.check_calls;
  nccl.timeout = options.timeout;
  std::vector<std::unique_ptr<Communicator>> comms = make_nccl_thread_comms(ids, nccl);
  struct Closer {  // on every way out, every rank's communicator at once
    std::vector<std::unique_ptr<Communicator>>& comms;
    ~Closer() { close_nccl_thread_comms(comms); }
  } closer{comms};
  std::vector<Device> devices;
  for (int id : ids) devices.push_back(Device::cuda(id));
  run_thread_ranks(comms, devices, fn, options);
}

#ifdef SHARDSCOPE_HAVE_MPI

// What each process tells the others to find its device: its node and the node's devices.
struct NodeSlot {
  char host[64];
  std::int32_t devices;
  char why_none[160];
};
static_assert(std::is_trivially_copyable<NodeSlot>::value, "sent as raw bytes");

// The device-count reports of the processes on `host`, in world-rank order (local-rank order).
std::vector<CudaDeviceCount> seen_on(const std::vector<NodeSlot>& all, const char* host) {
  std::vector<CudaDeviceCount> seen;
  for (const NodeSlot& slot : all) {
    if (std::strcmp(slot.host, host) == 0) seen.push_back({slot.devices, slot.why_none});
  }
  return seen;
}

// This process's device (nccl_devices_on_node): every rank learns every node's process and device
// counts, so a node whose devices do not fit its ranks is the same ArgumentError on every rank.
int device_of_this_process(Communicator& host) {
  NodeSlot mine{};
  if (gethostname(mine.host, sizeof mine.host - 1) != 0) std::strcpy(mine.host, "?");
  const CudaDeviceCount found = count_cuda_devices();
  mine.devices = found.count;
  std::strncpy(mine.why_none, found.why_none.c_str(), sizeof mine.why_none - 1);
  std::vector<NodeSlot> all(static_cast<std::size_t>(host.size()));
  CollectiveCall exchange;
  exchange.kind = CollectiveKind::all_gather;
  exchange.dtype = DType::u8;
  exchange.count = static_cast<std::int64_t>(sizeof(NodeSlot));
  exchange.site.op = "placing the NCCL ranks on devices";
  host.run(exchange, &mine, all.data());
  for (const NodeSlot& slot : all) nccl_devices_on_node(slot.host, seen_on(all, slot.host));
  int local_rank = 0;
  for (int r = 0; r < host.rank(); ++r) {
    local_rank += std::strcmp(all[static_cast<std::size_t>(r)].host, mine.host) == 0;
  }
  return nccl_devices_on_node(mine.host,
                              seen_on(all, mine.host))[static_cast<std::size_t>(local_rank)];
}

void run_nccl_processes(int world, const SpmdOptions& options, const RankFn& fn) {
  ensure_mpi_initialized();
  int processes = 0, rank = 0;
  SHARDSCOPE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &processes));
  SHARDSCOPE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (world != processes) {
    throw ConfigError("world " + std::to_string(world) + " but mpirun started " +
                          std::to_string(processes) + " processes",
                      {"world"});
  }
  auto host = std::make_unique<MpiComm>(MPI_COMM_WORLD);
  const int device = device_of_this_process(*host);
  NcclOptions nccl;
  nccl.check_calls = options.check_calls;  // no timeout: a failing process ends the job
  std::unique_ptr<Communicator> comm;
  try {
    comm = make_nccl_comm(std::move(host), device, nccl);
  } catch (const std::exception& e) {  // the others wait in ncclCommInitRank: end the job
    std::fprintf(stderr, "shardscope: rank %d failed: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; should an implementation return, end anyway
  }
  run_process_rank(*comm, Device::cuda(device), fn, options);
}

#endif

}  // namespace

// Declared in spmd_launch.h.
void run_spmd_nccl(int world, const SpmdOptions& options, const RankFn& fn) {
  if (!launched_by_mpirun()) {
    run_nccl_threads(world, options, fn);
    return;
  }
#ifdef SHARDSCOPE_HAVE_MPI
  run_nccl_processes(world, options, fn);
#else
  throw ConfigError(
      "comm nccl under mpirun needs a build with MPI (install libopenmpi-dev and rebuild)",
      {"comm"});
#endif
}

}  // namespace shardscope
