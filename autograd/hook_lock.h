// HookLock: the lock of an observer's hooks (the memory ledger's, the trace recorder's), which the
// ranks' threads take some 260 times a step each, almost never against one another: an atomic
// exchange to take it and a store to give it back, where std::mutex's lock and unlock are two
// calls into libc and two atomic read-modify-writes (some 2 us a step of the small layer,
// docs/benchmarks.md, Observer overhead). A thread that finds it held spins a little, then
// yields, then sleeps in steps of 50 us: the other holders (a viewer copying the recorder's
// events, a writer serializing them) hold it for milliseconds, and a waiter must not burn a core
// that a rank needs meanwhile.
//
// Not fair, not recursive; a Lockable, for std::lock_guard and std::unique_lock.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace shardscope {

class HookLock {
 public:
  HookLock() = default;
  HookLock(const HookLock&) = delete;
  HookLock& operator=(const HookLock&) = delete;

  bool try_lock() noexcept {
    // Read first: a waiter that only reads keeps the line shared until the holder lets go.
    return !held_.load(std::memory_order_relaxed) &&
           !held_.exchange(true, std::memory_order_acquire);
  }
  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept {
    for (int attempt = 0; !try_lock(); ++attempt) {
      if (attempt < 64) {
        pause();
      } else if (attempt < 128) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> held_{false};
};

}  // namespace shardscope
