// The cost of ranks sharing a device: all_reduce over ThreadComm with every rank's buffer on the
// given backend, staged through host memory (HostStagingComm: a device-to-host copy of the send
// buffer, the host collective, a host-to-device copy of the result), beside the parts it is made
// of, measured in the same run: the host all_reduce alone on host buffers of the same size, and
// the backend's copy of the buffer to the host and back (one rank, alone). On the CPU backend the
// copies are memcpys, so CI can run it; on a GPU (--backend cuda) the copies cross PCIe.
//   ./build/default/bench/staging_bench [--backend cpu|cuda|reference] [--ranks 2,4]
//                                       [--mib 1,16,64,256] [--reps 5]
// Prints one line per (ranks, size): the median time of each of the three, and the staged
// all_reduce's algbw (bytes / time) in GB/s.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/tensor.h"
#include "parallel/comm/host_staging_comm.h"
#include "parallel/comm/spmd_launch.h"
#include "parallel/comm/thread_comm.h"

namespace shardscope {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend = "cpu";
  std::vector<int> ranks{2, 4};
  std::vector<int> mib{1, 16, 64, 256};
  int reps = 5;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `reps` all_reduces of `bytes` on every rank (after one warm-up), as rank 0
// sees them; the ranks' buffers on `backend`, staged through host memory when `staged` (on the CPU
// too, where run_spmd would not stage).
double time_all_reduce(int ranks, std::int64_t bytes, DeviceKind backend, bool staged, int reps) {
  SpmdOptions options;
  options.timeout = std::chrono::minutes(5);
  ThreadCommOptions comm_options;
  comm_options.timeout = options.timeout;
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(ranks, comm_options);
  if (staged) {
    for (auto& comm : comms) comm = make_host_staging_comm(std::move(comm));
  }
  const int devices = backend == DeviceKind::cuda ? cuda_device_count() : 0;
  std::vector<double> times;
  std::mutex mutex;
  run_thread_ranks(
      comms, thread_rank_devices(ranks, backend, devices),
      [&](RankEnv& env) {
        Tensor x = Tensor::full(env.ctx, {bytes / 4}, 1.0, DType::f32);
        env.group.all_reduce(x, ReduceOp::sum);  // warm-up: pages, staging buffers, the device
        for (int i = 0; i < reps; ++i) {
          const auto start = Clock::now();
          env.group.all_reduce(x, ReduceOp::sum);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          if (env.rank == 0) {
            std::lock_guard<std::mutex> lock(mutex);
            times.push_back(ms);
          }
        }
      },
      options);
  return median(times);
}

// Median milliseconds of copying `bytes` from the backend to the host and back, one rank alone.
double time_round_trip(std::int64_t bytes, DeviceKind backend, int reps) {
  Context ctx(0, backend == DeviceKind::cuda ? Device::cuda(0) : Device::cpu());
  Tensor x = Tensor::full(ctx, {bytes / 4}, 1.0, DType::f32);
  std::vector<unsigned char> host(static_cast<std::size_t>(bytes));
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    const auto start = Clock::now();
    ctx.backend().copy_to_host(host.data(), x.raw_data(), host.size());
    ctx.backend().copy_from_host(x.raw_data(), host.data(), host.size());
    ctx.backend().copy_to_host(host.data(), x.raw_data(), 4);  // waits for the copy back
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i > 0) times.push_back(ms);  // the first is the warm-up
  }
  return median(times);
}

int run(const Options& o) {
  const DeviceKind backend = o.backend == "cuda"        ? DeviceKind::cuda
                             : o.backend == "reference" ? DeviceKind::reference
                                                        : DeviceKind::cpu;
  std::printf("staged all_reduce on backend %s, median of %d\n", o.backend.c_str(), o.reps);
  std::printf("%5s %8s %14s %14s %16s %12s\n", "ranks", "MiB", "staged_ms", "host_only_ms",
              "round_trip_ms", "algbw_GB/s");
  for (int ranks : o.ranks) {
    for (int mib : o.mib) {
      const std::int64_t bytes = std::int64_t{mib} << 20;
      const double staged = time_all_reduce(ranks, bytes, backend, true, o.reps);
      const double host = time_all_reduce(ranks, bytes, DeviceKind::cpu, false, o.reps);
      const double trip = time_round_trip(bytes, backend, o.reps);
      std::printf("%5d %8d %14.3f %14.3f %16.3f %12.2f\n", ranks, mib, staged, host, trip,
                  static_cast<double>(bytes) / (staged * 1e6));
    }
  }
  return 0;
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  shardscope::Options o;
  CLI::App app{"all_reduce of ranks sharing a device, staged through host memory"};
  app.add_option("--backend", o.backend, "cpu, cuda or reference")
      ->check(CLI::IsMember({"cpu", "cuda", "reference"}))
      ->capture_default_str();
  app.add_option("--ranks", o.ranks, "group sizes, e.g. 2,4")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_option("--mib", o.mib, "message sizes in MiB, e.g. 1,16,64,256")
      ->delimiter(',')
      ->check(CLI::Range(1, 65536));
  app.add_option("--reps", o.reps, "timed all_reduces per size (their median is shown)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return shardscope::run(o);
  } catch (const shardscope::ArgumentError& e) {  // no such device: as the other programs say it
    std::fprintf(stderr, "staging_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "staging_bench: %s\n", e.what());
    return 1;
  }
}
