// RowThreads (autograd/cpu/thread_pool.h), the CPU backend's loop threads: every index of [0, n)
// is visited exactly once; the chunks depend only on n, grain and the thread count, never on who
// runs them or on a second caller holding the workers; the first exception reaches the caller and
// the pool goes on working; a call from inside a chunk runs alone; several callers at once (ranks
// as threads) each get their whole loop.
// In the threads label, so ThreadSanitizer runs it.
#include "autograd/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace shardscope::cpu {
namespace {

using Chunks = std::vector<std::pair<std::int64_t, std::int64_t>>;

// The chunks one call made, sorted; checks on the way that they tile [0, n) exactly once.
Chunks run_and_collect(RowThreads& pool, std::int64_t n, std::int64_t grain) {
  std::mutex mutex;
  Chunks chunks;
  std::vector<std::atomic<int>> visits(static_cast<std::size_t>(n));
  pool.parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) visits[static_cast<std::size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mutex);
    chunks.emplace_back(begin, end);
  });
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(visits[static_cast<std::size_t>(i)].load(), 1)
        << "index " << i << " of " << n << " (grain " << grain << ")";
  }
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

TEST(RowThreads, EveryIndexOnceAndChunksOfAtLeastTheGrain) {
  for (int threads : {1, 2, 3, 8}) {
    RowThreads pool(threads);
    for (std::int64_t n : {0, 1, 7, 100, 1000, 4097}) {
      for (std::int64_t grain : {1, 10, 64, 5000}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + ", n " + std::to_string(n) +
                     ", grain " + std::to_string(grain));
        const Chunks chunks = run_and_collect(pool, n, grain);
        if (n == 0) {
          EXPECT_TRUE(chunks.empty());
          continue;
        }
        ASSERT_FALSE(chunks.empty());
        EXPECT_EQ(chunks.front().first, 0);
        EXPECT_EQ(chunks.back().second, n);
        for (std::size_t c = 1; c < chunks.size(); ++c) {
          EXPECT_EQ(chunks[c].first, chunks[c - 1].second) << "chunks must tile [0, n)";
        }
        if (chunks.size() > 1) {
          for (const auto& [begin, end] : chunks) EXPECT_GE(end - begin, grain);
          EXPECT_LE(chunks.size(), static_cast<std::size_t>(4 * threads));
        }
        if (threads == 1 || n < 2 * grain) {
          EXPECT_EQ(chunks.size(), 1u);
        }
      }
    }
  }
}

// The chunks are what makes a cut GEMM give the same bits every run: the same with the workers
// free and with another caller holding them (that caller then runs the chunks alone).
TEST(RowThreads, ChunksAreTheSameWhenAnotherCallerHoldsTheWorkers) {
  RowThreads pool(4);
  const Chunks alone = run_and_collect(pool, 10000, 100);
  ASSERT_GT(alone.size(), 1u);

  std::atomic<bool> holding{false}, release{false};
  std::thread holder([&] {
    pool.parallel_for(1000, 1, [&](std::int64_t begin, std::int64_t) {
      if (begin != 0) return;
      holding = true;
      while (!release) std::this_thread::yield();
    });
  });
  while (!holding) std::this_thread::yield();
  const Chunks contended = run_and_collect(pool, 10000, 100);
  release = true;
  holder.join();
  EXPECT_EQ(contended, alone);
}

TEST(RowThreads, TheFirstExceptionReachesTheCallerAndThePoolGoesOn) {
  RowThreads pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(1000, 10,
                                 [&](std::int64_t begin, std::int64_t) {
                                   ran.fetch_add(1);
                                   if (begin >= 500) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  EXPECT_GT(ran.load(), 1) << "the other chunks still run";
  const Chunks after = run_and_collect(pool, 1000, 10);
  EXPECT_FALSE(after.empty());
}

// A kernel that loops inside a chunk (on the caller, which holds the workers, or on a worker)
// runs its inner chunks alone: no second lock of the mutex the caller holds, no wait on itself.
TEST(RowThreads, ACallFromInsideAChunkRunsItsChunksAlone) {
  RowThreads pool(3);
  constexpr std::int64_t kOuter = 12, kInner = 1000;
  std::vector<std::atomic<int>> visits(static_cast<std::size_t>(kOuter * kInner));
  pool.parallel_for(kOuter, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      pool.parallel_for(kInner, 10, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          visits[static_cast<std::size_t>(o * kInner + i)].fetch_add(1);
        }
      });
    }
  });
  for (std::size_t i = 0; i < visits.size(); ++i) ASSERT_EQ(visits[i].load(), 1) << "index " << i;
  EXPECT_EQ(run_and_collect(pool, 1000, 10).size(), 12u) << "the pool works as before after";
}

// Ranks running as threads share one pool (the CPU backend's): each caller gets its whole loop,
// whether it had the workers or ran its chunks alone.
TEST(RowThreads, SeveralCallersAtOnceEachGetTheirWholeLoop) {
  RowThreads pool(2);
  constexpr int kCallers = 4, kRounds = 50;
  constexpr std::int64_t kN = 3000;
  std::vector<std::int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::int64_t> out(kN, 0);
        pool.parallel_for(kN, 64, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) out[static_cast<std::size_t>(i)] = i + c;
        });
        for (std::int64_t v : out) sums[static_cast<std::size_t>(c)] += v;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(sums[static_cast<std::size_t>(c)], kRounds * (kN * (kN - 1) / 2 + kN * c))
        << "caller " << c;
  }
}

// The workers spin longer only while one thread has been the pool's only user for kAloneAfter:
// another caller, or a caller that finds the workers busy, puts them back to the short spin.
TEST(RowThreads, WorkersSpinLongOnlyForAPoolWithOneUser) {
  RowThreads pool(2);
  auto call = [&pool] { pool.parallel_for(1000, 10, [](std::int64_t, std::int64_t) {}); };
  auto alone_after_a_while = [&] {
    const auto until = std::chrono::steady_clock::now() + 2 * std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < until) call();
    return pool.spins_alone();
  };
  call();
  EXPECT_FALSE(pool.spins_alone()) << "a new pool";
  EXPECT_TRUE(alone_after_a_while()) << "one caller for 200 ms";

  std::thread other(call);  // a second caller
  other.join();
  EXPECT_FALSE(pool.spins_alone()) << "right after another thread called";
  call();
  EXPECT_FALSE(pool.spins_alone()) << "the first caller again, just after the other";
  EXPECT_TRUE(alone_after_a_while());

  // A thread that finds the workers busy (started from inside one of this caller's chunks, while
  // it holds them) runs alone, and the next call sees that the pool is shared.
  std::atomic<bool> started{false};
  pool.parallel_for(1000, 10, [&](std::int64_t, std::int64_t) {
    if (started.exchange(true)) return;
    std::thread busy(call);
    busy.join();
  });
  call();
  EXPECT_FALSE(pool.spins_alone()) << "after a caller found the workers busy";
}

}  // namespace
}  // namespace shardscope::cpu
