// HookLock: one holder at a time among threads that take it in a race (counts kept without atomics
// come out whole), try_lock refused while it is held, and a waiter that outlasts its spinning
// (a holder for 20 ms, as a viewer copying the recorder's events) still gets it once it is free.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "autograd/hook_lock.h"

namespace shardscope {
namespace {

TEST(HookLock, OneHolderAtATimeAmongRacingThreads) {
  HookLock lock;
  // Two words written apart under the lock: a second holder between the two writes, or a lost
  // increment, leaves them different or short.
  std::uint64_t first = 0, second = 0;
  int torn = 0;
  constexpr int kThreads = 4, kEach = 100'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        std::lock_guard<HookLock> held(lock);
        if (first != second) ++torn;
        first = first + 1;
        std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the two writes apart
        second = second + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(first, std::uint64_t{kThreads} * kEach);
  EXPECT_EQ(second, first);
}

TEST(HookLock, TryLockIsRefusedWhileHeld) {
  HookLock lock;
  ASSERT_TRUE(lock.try_lock());
  bool taken_elsewhere = true;
  std::thread([&] { taken_elsewhere = lock.try_lock(); }).join();
  EXPECT_FALSE(taken_elsewhere);
  lock.unlock();
  std::thread([&] { taken_elsewhere = lock.try_lock(); }).join();
  EXPECT_TRUE(taken_elsewhere);
  lock.unlock();
}

TEST(HookLock, AWaiterPastItsSpinGetsTheLockOnceFree) {
  HookLock lock;
  lock.lock();
  std::atomic<bool> released{false};
  std::atomic<bool> got_it_early{false};
  std::thread waiter([&] {
    std::lock_guard<HookLock> held(lock);
    got_it_early = !released.load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  released = true;
  lock.unlock();
  waiter.join();
  EXPECT_FALSE(got_it_early) << "the waiter held the lock while its holder still did";
}

}  // namespace
}  // namespace shardscope
