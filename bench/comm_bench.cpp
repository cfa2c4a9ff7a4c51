// ThreadComm bandwidth: all_reduce, all_gather, reduce_scatter and all_to_all at 2, 4 and 8 ranks
// (threads of this process) for messages of 1 KiB to 256 MiB, beside memcpy of the same sizes on
// the same machine (the limit for ranks that share memory).
//
// Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md there): `bytes` is the whole
// message (all_reduce: the buffer; all_gather: the gathered output; reduce_scatter and
// all_to_all: the input), algbw = bytes / time, and busbw = algbw * 2(t-1)/t for all_reduce and
// algbw * (t-1)/t for the others. Counters algbw and busbw are in bytes per second; memcpy's bw is
// the bytes one thread copies per second, and BM_MemcpyTwoThreads's the bytes two threads copy
// per second together, each its own buffers at the same time (what two ranks that both copy get
// from the memory). Run (bench/comm_vs_memcpy.sh prints the table):
//   ./build/default/bench/comm_bench --benchmark_filter="Memcpy|ranks:2"
#include <benchmark/benchmark.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/thread_comm.h"

namespace shardscope {
namespace {

constexpr std::int64_t kSmallest = std::int64_t{1} << 10;  // 1 KiB
constexpr std::int64_t kLargest = std::int64_t{1} << 28;   // 256 MiB

// A page-aligned buffer of `count` values, all written (so its pages are mapped). Page-aligned so
// that no benchmark copies between buffers a few bytes apart modulo 4 KiB: on this project's
// machine (AMD EPYC, glibc 2.36) memcpy of 4 KiB to 1 MiB, which glibc does with `rep movsb`,
// runs some 20 times slower when the destination is 16 bytes past the source modulo 4 KiB, as
// two std::vectors allocated one after the other often are (docs/benchmarks.md).
template <class T>
struct PageBuffer {
  PageBuffer(std::size_t count, T value) {
    const std::size_t bytes = (count * sizeof(T) + 4095) / 4096 * 4096;
    data.reset(static_cast<T*>(std::aligned_alloc(4096, bytes ? bytes : 4096)));
    if (!data) throw std::bad_alloc();
    std::fill(data.get(), data.get() + count, value);
  }
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data;
};

// One rank's buffers, in elements of f32, for a message of `bytes` over t ranks.
struct BufferSizes {
  std::size_t send = 0, recv = 0;
  double bus_factor = 1.0;
};

BufferSizes buffer_sizes(CollectiveKind kind, std::int64_t bytes, int t) {
  const auto n = static_cast<std::size_t>(bytes) / sizeof(float);
  const auto ranks = static_cast<std::size_t>(t);
  const double ring = static_cast<double>(t - 1) / t;
  switch (kind) {
    case CollectiveKind::all_reduce:
      return {n, n, 2.0 * ring};
    case CollectiveKind::all_gather:
      return {n / ranks, n, ring};
    case CollectiveKind::reduce_scatter:
      return {n, n / ranks, ring};
    default:  // all_to_all
      return {n, n, ring};
  }
}

// Ranks 1 .. t-1 run `iterations` collectives on helper threads while rank 0 runs the benchmark
// loop; the collective's rendezvous keeps them in step, and rank 0 leaves each collective only
// when every rank has (ThreadComm's departure), so rank 0's loop times whole collectives.
void BM_Collective(benchmark::State& state, CollectiveKind kind) {
  const int t = static_cast<int>(state.range(0));
  const std::int64_t bytes = state.range(1);
  const BufferSizes sizes = buffer_sizes(kind, bytes, t);
  ThreadCommOptions options;
  options.timeout = std::chrono::minutes(5);  // 8 ranks on 2 cores at 256 MiB take seconds
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_comms(t, options);
  std::vector<PageBuffer<float>> send, recv;
  for (int r = 0; r < t; ++r) {
    send.emplace_back(sizes.send, static_cast<float>(r + 1));
    recv.emplace_back(sizes.recv, 0.0f);
  }
  CollectiveCall call;
  call.kind = kind;
  call.count = static_cast<std::int64_t>(sizes.send);
  call.dtype = DType::f32;
  call.site.op = "comm_bench";

  const benchmark::IterationCount iterations = state.max_iterations;
  std::vector<std::exception_ptr> errors(send.size());
  std::vector<std::thread> helpers;
  for (int r = 1; r < t; ++r) {
    helpers.emplace_back([&, r] {
      const auto u = static_cast<std::size_t>(r);
      try {
        for (benchmark::IterationCount i = 0; i < iterations; ++i) {
          comms[u]->run(call, send[u].data.get(), recv[u].data.get());
        }
      } catch (...) {
        errors[u] = std::current_exception();
      }
    });
  }
  try {
    for (auto _ : state) comms[0]->run(call, send[0].data.get(), recv[0].data.get());
  } catch (...) {
    comms[0]->abort("comm_bench: rank 0 failed");
    errors[0] = std::current_exception();
  }
  for (std::thread& h : helpers) h.join();
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& what) {
      state.SkipWithError(what.what());
      return;
    }
  }
  const auto rate = [&](double factor) {
    return benchmark::Counter(static_cast<double>(bytes) * factor,
                              benchmark::Counter::kIsIterationInvariantRate,
                              benchmark::Counter::kIs1024);
  };
  state.counters["algbw"] = rate(1.0);
  state.counters["busbw"] = rate(sizes.bus_factor);
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  PageBuffer<unsigned char> from(bytes, 1), to(bytes, 0);
  for (auto _ : state) {
    std::memcpy(to.data.get(), from.data.get(), bytes);
    benchmark::DoNotOptimize(to.data.get());
    benchmark::ClobberMemory();
  }
  state.counters["bw"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1024);
}

void BM_MemcpyTwoThreads(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  PageBuffer<unsigned char> from0(bytes, 1), to0(bytes, 0), from1(bytes, 1), to1(bytes, 0);
  std::mutex mutex;
  std::condition_variable cv;
  std::int64_t started = 0, finished = 0;  // copies the helper was asked for, and has done
  bool stop = false;
  std::thread helper([&] {
    for (std::int64_t done = 0;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || started > done; });
        if (stop) return;
      }
      std::memcpy(to1.data.get(), from1.data.get(), bytes);
      std::lock_guard<std::mutex> lock(mutex);
      finished = ++done;
      cv.notify_all();
    }
  });
  for (auto _ : state) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++started;
    }
    cv.notify_all();
    std::memcpy(to0.data.get(), from0.data.get(), bytes);
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return finished == started; });
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  cv.notify_all();
  helper.join();
  state.counters["bw"] = benchmark::Counter(static_cast<double>(2 * bytes),
                                            benchmark::Counter::kIsIterationInvariantRate,
                                            benchmark::Counter::kIs1024);
}

// Registered size by size (memcpy, then every collective and rank count of that size), so that a
// collective and its memcpy reference are measured minutes apart at most on a shared machine.
void register_benchmarks() {
  const std::pair<const char*, CollectiveKind> kinds[] = {
      {"all_reduce", CollectiveKind::all_reduce},
      {"all_gather", CollectiveKind::all_gather},
      {"reduce_scatter", CollectiveKind::reduce_scatter},
      {"all_to_all", CollectiveKind::all_to_all}};
  auto common = [](benchmark::internal::Benchmark* b) {
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  for (std::int64_t bytes = kSmallest; bytes <= kLargest; bytes *= 4) {
    common(benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy)->ArgName("bytes")->Arg(bytes));
    common(benchmark::RegisterBenchmark("BM_MemcpyTwoThreads", BM_MemcpyTwoThreads)
               ->ArgName("bytes")
               ->Arg(bytes));
    for (const auto& [name, kind] : kinds) {
      const std::string full = std::string("BM_Collective/") + name;
      for (int t : {2, 4, 8}) {
        common(benchmark::RegisterBenchmark(full.c_str(), BM_Collective, kind)
                   ->ArgNames({"ranks", "bytes"})
                   ->Args({t, bytes}));
      }
    }
  }
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  shardscope::register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
