// RowThreads: the CPU backend's loop threads. parallel_for(n, grain, f) cuts [0, n) into chunks
// of at least `grain` indices and calls f(begin, end) once per chunk; the calling thread and the
// workers take chunks from a shared counter until none is left. A worker that the system runs
// late (a machine shared with other work) finds the chunks taken, so the call never waits for a
// thread that has not started: at worst the caller does it all. The chunks depend only on n,
// grain and the thread count, never on who runs them: when another caller is using the workers
// the caller runs the same chunks alone, so a kernel whose result depends on its pieces (a GEMM
// cut into column slices) gives the same bits every time. With one thread, or n < 2 grain, the
// one chunk is [0, n). Workers start on first use and sleep on a condition variable between
// calls, after spinning for a while: a step's ops come microseconds apart, and a worker that
// slept would be woken through the kernel for every one of them (5 to 6% of a small step's
// profile). They spin kSpinAlone while one thread has been the pool's only user for kAloneAfter
// (a single-device step: its serial stretches between parallel ops run past kSpin several times
// a step, more with observers attached), else kSpin (ranks as threads taking turns, where a
// spinning worker would take a core from a rank). A caller waiting for the workers' last chunks
// spins kSpin before it sleeps.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace shardscope::cpu {

class RowThreads {
 public:
  explicit RowThreads(int threads) : threads_(std::max(threads, 1)) {}
  ~RowThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      stopping_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  RowThreads(const RowThreads&) = delete;
  RowThreads& operator=(const RowThreads&) = delete;

  int threads() const { return threads_; }
  // Whether the workers now spin kSpinAlone: one thread has called for kAloneAfter, with no other
  // thread calling or finding the workers busy meanwhile.
  bool spins_alone() const { return worker_spin_.load(std::memory_order_relaxed) == kSpinAlone; }

  template <class F>
  void parallel_for(std::int64_t n, std::int64_t grain, F&& f) {
    const std::int64_t most = n / std::max<std::int64_t>(grain, 1);
    if (threads_ < 2 || most < 2) {
      if (n > 0) f(std::int64_t{0}, n);
      return;
    }
    // A few chunks per thread, so that a thread slowed down by other work costs little.
    const std::int64_t chunks = std::min<std::int64_t>(most, 4 * std::int64_t{threads_});
    // A call from inside a chunk (a thread already running this pool's work, which may hold
    // busy_) runs its chunks alone, as a caller that finds the workers busy does.
    if (in_chunk()) {
      for (std::int64_t c = 0; c < chunks; ++c) f(n * c / chunks, n * (c + 1) / chunks);
      return;
    }
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) {
      shared_.store(true, std::memory_order_relaxed);  // another caller has the workers
      InChunk mark;
      for (std::int64_t c = 0; c < chunks; ++c) f(n * c / chunks, n * (c + 1) / chunks);
      return;
    }
    run(n, chunks, std::function<void(std::int64_t, std::int64_t)>(f));
  }

 private:
  // Whether this thread is running chunks of a RowThreads (any pool) right now.
  static bool& in_chunk() {
    static thread_local bool inside = false;
    return inside;
  }
  struct InChunk {
    InChunk() { in_chunk() = true; }
    ~InChunk() { in_chunk() = false; }
    InChunk(const InChunk&) = delete;
    InChunk& operator=(const InChunk&) = delete;
  };

  // How long a worker with nothing to do, or a caller waiting for the workers, spins before it
  // sleeps; and a worker while the pool has had one user only (see the top of the file).
  static constexpr std::chrono::microseconds kSpin{50};
  static constexpr std::chrono::microseconds kSpinAlone{200};
  static constexpr std::chrono::milliseconds kAloneAfter{100};

  // Spins until done() or `spin` has passed (the caller then takes the lock and checks itself).
  template <class Done>
  static void spin_until(Done done, std::chrono::microseconds spin = kSpin) {
    const auto until = std::chrono::steady_clock::now() + spin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (done()) return;
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      }
      if (std::chrono::steady_clock::now() >= until) return;
    }
  }

  // Under busy_: notes who calls, and sets how long the workers spin after this call.
  void note_caller() {
    const auto now = std::chrono::steady_clock::now();
    if (shared_.exchange(false, std::memory_order_relaxed) ||
        std::this_thread::get_id() != last_caller_) {
      last_caller_ = std::this_thread::get_id();
      alone_since_ = now;
    }
    worker_spin_.store(now - alone_since_ >= kAloneAfter ? kSpinAlone : kSpin,
                       std::memory_order_relaxed);
  }

  void run(std::int64_t n, std::int64_t chunks, std::function<void(std::int64_t, std::int64_t)> f) {
    note_caller();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < threads_ - 1) {
        workers_.emplace_back([this] { work(); });
      }
      job_ = std::move(f);
      n_ = n;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      active_ = true;
      error_ = nullptr;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();
    take_chunks();
    spin_until([this] { return working_now_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    active_ = false;  // a worker waking from now on leaves this call alone
    done_.wait(lock, [this] { return working_ == 0; });
    job_ = nullptr;
    const std::exception_ptr error = error_;
    lock.unlock();
    if (error) std::rethrow_exception(error);
  }

  // Runs chunks until every chunk is taken; the first exception is kept for the caller.
  void take_chunks() {
    InChunk mark;
    for (;;) {
      const std::int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks_) return;
      try {
        job_(n_ * c / chunks_, n_ * (c + 1) / chunks_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void work() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!stop_ && generation_ == seen) {  // nothing new yet: spin a while, unlocked, then sleep
        lock.unlock();
        spin_until(
            [&] {
              return published_.load(std::memory_order_acquire) != seen ||
                     stopping_.load(std::memory_order_acquire);
            },
            worker_spin_.load(std::memory_order_relaxed));
        lock.lock();
      }
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (!active_) continue;
      ++working_;
      working_now_.store(working_, std::memory_order_release);
      lock.unlock();
      take_chunks();
      lock.lock();
      working_now_.store(working_ - 1, std::memory_order_release);
      if (--working_ == 0) done_.notify_one();
    }
  }

  const int threads_;
  std::mutex busy_;  // held by the one caller using the workers
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  // The current call, written under mutex_ before the workers are woken.
  std::function<void(std::int64_t, std::int64_t)> job_;
  std::int64_t n_ = 0;
  std::int64_t chunks_ = 0;
  std::atomic<std::int64_t> next_{0};  // the next chunk to take
  bool active_ = false;                // the caller has not finished its share yet
  int working_ = 0;                    // workers inside take_chunks()
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  // Copies of generation_, working_ and stop_ (written with them, under mutex_) for the spins,
  // which read them without the lock.
  std::atomic<std::uint64_t> published_{0};
  std::atomic<int> working_now_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
  // Who uses the pool (note_caller, under busy_): the last caller, since when it has been the
  // only one, whether another found the workers busy since, and the workers' spin that follows.
  std::thread::id last_caller_;
  std::chrono::steady_clock::time_point alone_since_;
  std::atomic<bool> shared_{false};
  std::atomic<std::chrono::microseconds> worker_spin_{kSpin};
};

}  // namespace shardscope::cpu
