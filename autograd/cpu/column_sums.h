// blocked_column_sums: sums over the rows of a matrix, per column, in blocks of rows that depend
// only on the sizes, so that the CPU backend's column reductions (a bias's gradient, LayerNorm's
// dgamma and dbeta) give the same bits at every thread count and still share the rows out.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/cpu/grain.h"
#include "autograd/cpu/thread_pool.h"

namespace shardscope::cpu {

// Sums over `rows` rows of `width` doubles each (column sums: a bias's gradient, LayerNorm's
// dgamma and dbeta side by side), in at most kSumBlocks blocks of rows: add_rows(first, end, sums)
// adds rows [first, end) into one block's zeroed sums, each block on one thread, then the blocks'
// sums are added in block order. The blocks depend only on rows and width, so the bits do not
// depend on the thread count; each thread reads whole rows (a thread per range of columns read a
// few cache lines of every row, and the bias gradients took longer at 2 threads than at 1).
constexpr std::int64_t kSumBlocks = 16;

template <class AddRows>
std::vector<double> blocked_column_sums(RowThreads& threads, std::int64_t rows, std::int64_t width,
                                        AddRows add_rows) {
  const auto w = static_cast<std::size_t>(width);
  if (rows <= 0 || width <= 0) return std::vector<double>(w, 0.0);
  const std::int64_t per_block =
      std::max((rows + kSumBlocks - 1) / kSumBlocks, (kCheapGrain + width - 1) / width);
  const std::int64_t blocks = (rows + per_block - 1) / per_block;
  std::vector<double> sums(static_cast<std::size_t>(blocks) * w, 0.0);
  threads.parallel_for(blocks, 1, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t b = first; b < end; ++b) {
      add_rows(b * per_block, std::min(rows, (b + 1) * per_block),
               sums.data() + static_cast<std::size_t>(b) * w);
    }
  });
  for (std::int64_t b = 1; b < blocks; ++b) {
    const double* block = sums.data() + static_cast<std::size_t>(b) * w;
    for (std::size_t j = 0; j < w; ++j) sums[j] += block[j];
  }
  sums.resize(w);
  return sums;
}

// sum term(i) over i < n in double: kSumLanes interleaved lanes as the columns of
// blocked_column_sums (so its blocks, threads and bits), then the lanes in order, then the last
// n mod kSumLanes terms. A whole tensor's sum (sum_all, the MSE loss) shared out, where one chain
// of additions waits on each add's latency.
constexpr std::int64_t kSumLanes = 8;

template <class Term>
double blocked_sum(RowThreads& threads, std::int64_t n, Term term) {
  const std::int64_t rows = std::max<std::int64_t>(n, 0) / kSumLanes;
  const std::vector<double> lanes = blocked_column_sums(
      threads, rows, kSumLanes, [&](std::int64_t first, std::int64_t end, double* acc) {
        double a[kSumLanes];  // a local copy, which the compiler keeps in vector registers
        std::copy(acc, acc + kSumLanes, a);
        for (std::int64_t r = first; r < end; ++r) {
          for (std::int64_t l = 0; l < kSumLanes; ++l) a[l] += term(r * kSumLanes + l);
        }
        std::copy(a, a + kSumLanes, acc);
      });
  double total = 0.0;
  for (const double lane : lanes) total += lane;
  for (std::int64_t i = rows * kSumLanes; i < n; ++i) total += term(i);
  return total;
}

}  // namespace shardscope::cpu
