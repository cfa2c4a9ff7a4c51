// blocked_column_sums (autograd/cpu/column_sums.h), the CPU backend's column reductions: the blocks
// of rows tile the rows once and are at most kSumBlocks; the sums are the bits of the same blocks
// summed one after another, whatever the thread count; and they are the column sums. blocked_sum,
// a whole array's sum over lanes as columns: the same bits at every thread count, and the sum.
// In the threads label, so ThreadSanitizer runs it.
#include "autograd/cpu/column_sums.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

namespace shardscope::cpu {
namespace {

// Rows whose terms span 2^-30 to 2^30, so that summing them in another order changes the bits.
std::vector<double> spread_rows(std::int64_t rows, std::int64_t width) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<double> m(static_cast<std::size_t>(rows * width));
  for (double& x : m) x = std::ldexp(value(rng), exponent(rng));
  return m;
}

struct Sums {
  std::vector<double> sums;
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;  // as add_rows was given them
};

Sums column_sums(int threads, const std::vector<double>& m, std::int64_t rows, std::int64_t width) {
  RowThreads pool(threads);
  Sums out;
  std::mutex mutex;
  out.sums = blocked_column_sums(pool, rows, width,
                                 [&](std::int64_t first, std::int64_t end, double* acc) {
                                   {
                                     std::lock_guard<std::mutex> lock(mutex);
                                     out.blocks.emplace_back(first, end);
                                   }
                                   for (std::int64_t r = first; r < end; ++r) {
                                     for (std::int64_t j = 0; j < width; ++j) {
                                       acc[j] += m[static_cast<std::size_t>(r * width + j)];
                                     }
                                   }
                                 });
  std::sort(out.blocks.begin(), out.blocks.end());
  return out;
}

TEST(BlockedColumnSums, SameBitsAtEveryThreadCount) {
  for (const auto& [rows, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {512, 768}, {2048, 64}, {37, 5000}, {1000, 33}}) {
    const std::vector<double> m = spread_rows(rows, width);
    const Sums one = column_sums(1, m, rows, width);
    for (int threads : {2, 3, 8}) {
      const Sums many = column_sums(threads, m, rows, width);
      EXPECT_EQ(many.blocks, one.blocks) << rows << " x " << width << ", " << threads << " threads";
      ASSERT_EQ(many.sums.size(), one.sums.size());
      EXPECT_EQ(std::memcmp(many.sums.data(), one.sums.data(), one.sums.size() * sizeof(double)), 0)
          << "the sums of " << rows << " x " << width << " at " << threads
          << " threads differ in their bits from 1 thread's";
    }
  }
}

TEST(BlockedColumnSums, BlocksTileTheRowsAndSumsAreTheColumnSums) {
  for (const auto& [rows, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {512, 768}, {2048, 64}, {37, 5000}, {1, 7}, {3, 1}}) {
    const std::vector<double> m = spread_rows(rows, width);
    const Sums got = column_sums(2, m, rows, width);
    ASSERT_FALSE(got.blocks.empty());
    EXPECT_LE(static_cast<std::int64_t>(got.blocks.size()), kSumBlocks);
    std::int64_t next = 0;
    for (const auto& [first, end] : got.blocks) {
      EXPECT_EQ(first, next) << rows << " x " << width;
      EXPECT_LT(first, end);
      next = end;
    }
    EXPECT_EQ(next, rows);
    ASSERT_EQ(static_cast<std::int64_t>(got.sums.size()), width);
    for (std::int64_t j = 0; j < width; ++j) {
      double plain = 0.0, magnitude = 0.0;
      for (std::int64_t r = 0; r < rows; ++r) {
        plain += m[static_cast<std::size_t>(r * width + j)];
        magnitude += std::fabs(m[static_cast<std::size_t>(r * width + j)]);
      }
      // Two orders of the same sum: apart by at most (rows + kSumBlocks) 2^-53 of the magnitudes.
      EXPECT_LE(std::fabs(got.sums[static_cast<std::size_t>(j)] - plain),
                static_cast<double>(rows + kSumBlocks) * 0x1p-53 * magnitude)
          << "column " << j << " of " << rows << " x " << width;
    }
  }
}

// blocked_sum: a whole array's sum shared out as the lanes of blocked_column_sums, plus the tail.
double whole_sum(int threads, const std::vector<double>& v, std::int64_t n) {
  RowThreads pool(threads);
  return blocked_sum(pool, n, [&](std::int64_t i) { return v[static_cast<std::size_t>(i)]; });
}

TEST(BlockedSum, SameBitsAtEveryThreadCountAndTheSum) {
  // Sizes with no tail, a tail, fewer than one lane row, several blocks, and none.
  for (const std::int64_t n : {std::int64_t{131072}, std::int64_t{300005}, std::int64_t{7},
                               std::int64_t{33411}, std::int64_t{0}}) {
    const std::vector<double> v = spread_rows(std::max<std::int64_t>(n, 1), 1);
    const double one = whole_sum(1, v, n);
    for (int threads : {2, 3}) {
      const double many = whole_sum(threads, v, n);
      EXPECT_EQ(std::memcmp(&many, &one, sizeof(double)), 0)
          << "the sum of " << n << " at " << threads << " threads differs in its bits from 1 "
          << "thread's: " << many << " against " << one;
    }
    double plain = 0.0, magnitude = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      plain += v[static_cast<std::size_t>(i)];
      magnitude += std::fabs(v[static_cast<std::size_t>(i)]);
    }
    EXPECT_LE(std::fabs(one - plain),
              static_cast<double>(n / kSumLanes + kSumBlocks + 2 * kSumLanes) * 0x1p-53 * magnitude)
        << "the sum of " << n << " terms";
  }
}

TEST(BlockedColumnSums, NoRowsGiveZeros) {
  RowThreads pool(2);
  int calls = 0;
  const std::vector<double> sums =
      blocked_column_sums(pool, 0, 4, [&](std::int64_t, std::int64_t, double*) { ++calls; });
  EXPECT_EQ(sums, std::vector<double>(4, 0.0));
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace shardscope::cpu
