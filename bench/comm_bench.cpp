// ThreadComm bandwidth: all_reduce, all_gather, reduce_scatter and all_to_all at 2, 4 and 8 ranks
// (threads of this process) for messages of 1 KiB to 256 MiB, beside memcpy of the same sizes on
// the same machine (the limit for ranks that share memory).
//
// Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md there): `bytes` is the whole
// message (all_reduce: the buffer; all_gather: the gathered output; reduce_scatter and
// all_to_all: the input), algbw = bytes / time, and busbw = algbw * 2(t-1)/t for all_reduce and
// algbw * (t-1)/t for the others. Counters algbw and busbw are in bytes per second; `traffic` is
// the bytes all ranks read and write in one call (thread_comm_traffic) and `bound_us` the time
// they take at the machine's copy rate, measured beside each collective (bound_seconds). memcpy's
// bw is the bytes one thread copies per second, and BM_MemcpyTwoThreads's and
// BM_StreamCopyTwoThreads's the bytes two threads copy per second together, each its own buffers
// at the same time, with memcpy and with streaming stores (what two ranks that both copy get from
// the memory). Run (bench/comm_vs_memcpy.sh prints the table):
//   ./build/default/bench/comm_bench --benchmark_filter="Memcpy|Copy|ranks:2"
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/stream_copy.h"
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

using CopyFn = void (*)(void*, const void*, std::size_t);  // plain_copy or stream_copy

// Two threads copying their own buffers of `bytes` at once with `copy`: run() starts the helper's
// copy, makes the caller's, and returns when both are done.
class TwoThreadCopy {
 public:
  TwoThreadCopy(std::size_t bytes, CopyFn copy)
      : bytes_(bytes),
        copy_(copy),
        from0_(bytes, 1),
        to0_(bytes, 0),
        from1_(bytes, 1),
        to1_(bytes, 0),
        helper_([this] { serve(); }) {}
  ~TwoThreadCopy() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    helper_.join();
  }
  void run() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++started_;
    }
    cv_.notify_all();
    copy_(to0_.data.get(), from0_.data.get(), bytes_);
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return finished_ == started_; });
  }
  // Seconds per run(): the median of `reps` after one warm-up.
  double seconds(int reps) {
    run();
    std::vector<double> times;
    for (int i = 0; i < reps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      run();
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  void serve() {
    for (std::int64_t done = 0;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || started_ > done; });
        if (stop_) return;
      }
      copy_(to1_.data.get(), from1_.data.get(), bytes_);
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = ++done;
      cv_.notify_all();
    }
  }

  const std::size_t bytes_;
  const CopyFn copy_;
  PageBuffer<unsigned char> from0_, to0_, from1_, to1_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::int64_t started_ = 0, finished_ = 0;  // copies the helper was asked for, and has done
  bool stop_ = false;
  std::thread helper_;  // last: starts once the members above exist
};

// The two threads' copy with memcpy (BM_MemcpyTwoThreads) or with streaming stores
// (BM_StreamCopyTwoThreads).
void BM_CopyTwoThreads(benchmark::State& state, CopyFn copy) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  TwoThreadCopy copier(bytes, copy);
  for (auto _ : state) copier.run();
  state.counters["bw"] = benchmark::Counter(static_cast<double>(2 * bytes),
                                            benchmark::Counter::kIsIterationInvariantRate,
                                            benchmark::Counter::kIs1024);
}

// The bound shared memory puts on a collective (docs/benchmarks.md): the bytes all its ranks read
// and write (thread_comm_traffic) at the machine's copy rate C, a copied byte being one read and
// one write: traffic / (2 C). C is measured here, right after the collective (a shared machine's
// rate drifts): two threads copying buffers the size of what a rank reads (its working set: a
// copy of a rank's output alone would fit the caches where the output is a small chunk, as a
// reduce_scatter's of 8 ranks), with memcpy and with streaming stores, the faster of the medians.
double bound_seconds(double traffic, std::size_t copy_bytes) {
  double fastest = 0;
  for (CopyFn copy : {plain_copy, stream_copy}) {
    TwoThreadCopy copier(copy_bytes, copy);
    const double rate = 2.0 * static_cast<double>(copy_bytes) / copier.seconds(5);
    fastest = std::max(fastest, rate);
  }
  return traffic / (2.0 * fastest);
}

// Ranks 1 .. t-1 run `iterations` collectives on helper threads while rank 0 runs the benchmark
// loop; the collective's rendezvous keeps them in step, and rank 0 leaves each collective only
// when every rank has (ThreadComm's departure), so rank 0's loop times whole collectives.
void BM_Collective(benchmark::State& state, CollectiveKind kind, bool streaming) {
  const int t = static_cast<int>(state.range(0));
  const std::int64_t bytes = state.range(1);
  const BufferSizes sizes = buffer_sizes(kind, bytes, t);
  ThreadCommOptions options;
  options.timeout = std::chrono::minutes(5);  // 8 ranks on 2 cores at 256 MiB take seconds
  if (!streaming) options.stream_bytes = std::numeric_limits<std::size_t>::max();  // plain only
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
  double traffic = 0, most_read = 0;  // bytes all ranks read and write; the most one reads
  for (int r = 0; r < t; ++r) {
    const CommTraffic mine = thread_comm_traffic(call, t, r, false);
    traffic += mine.read + mine.written;
    most_read = std::max(most_read, mine.read);
  }
  state.counters["traffic"] = traffic;
  state.counters["bound_us"] = 1e6 * bound_seconds(traffic, static_cast<std::size_t>(most_read));
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
    common(benchmark::RegisterBenchmark("BM_MemcpyTwoThreads", BM_CopyTwoThreads, plain_copy)
               ->ArgName("bytes")
               ->Arg(bytes));
    common(benchmark::RegisterBenchmark("BM_StreamCopyTwoThreads", BM_CopyTwoThreads, stream_copy)
               ->ArgName("bytes")
               ->Arg(bytes));
    // BM_CollectivePlain: the same with plain stores only (ThreadCommOptions::stream_bytes), to
    // show what streaming stores change, side by side.
    const std::pair<const char*, bool> variants[] = {{"BM_Collective/", true},
                                                     {"BM_CollectivePlain/", false}};
    for (const auto& [variant, streaming] : variants) {
      for (const auto& [name, kind] : kinds) {
        const std::string full = variant + std::string(name);
        for (int t : {2, 4, 8}) {
          common(benchmark::RegisterBenchmark(full.c_str(), BM_Collective, kind, streaming)
                     ->ArgNames({"ranks", "bytes"})
                     ->Args({t, bytes}));
        }
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
