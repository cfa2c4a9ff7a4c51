// The row kernels in autograd/kernels/ split a row into pieces (first, step): the CPU runs one
// piece (0, 1), a CUDA block one piece per thread and then combines them. These tests run the
// block's split on the CPU and check that it gives the sequential result, so the combination the
// CUDA kernels rely on is tested without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/kernels/layernorm.h"
#include "autograd/kernels/layout.h"
#include "autograd/kernels/softmax.h"

namespace shardscope {
namespace {

// Pieces combined in a different order from the sequential loop: a few roundings of O(1) values.
constexpr double kReorderTol = 1e-12;
constexpr std::int64_t kThreads = 8;  // a small "block"

std::vector<double> row_values(std::int64_t n) {
  std::vector<double> x(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j)
    x[static_cast<std::size_t>(j)] = std::sin(0.7 * static_cast<double>(j)) * 3 + 1;
  return x;
}

// Pairwise tree over the per-thread values, as cuda_kernels::block_reduce combines them.
template <class V, class Op>
V tree_reduce(std::vector<V> v, Op op) {
  for (std::size_t width = v.size() / 2; width > 0; width /= 2) {
    for (std::size_t t = 0; t < width; ++t) v[t] = op(v[t], v[t + width]);
  }
  return v[0];
}

TEST(RowKernels, LayerNormStatisticsFromPiecesMatchTheSequentialRow) {
  for (std::int64_t n : {1, 5, 8, 37, 300}) {
    const std::vector<double> x = row_values(n);
    const kernels::Welford<double> whole = kernels::layernorm_row_statistics(x.data(), n, 0, 1);
    std::vector<kernels::Welford<double>> pieces;
    for (std::int64_t t = 0; t < kThreads; ++t)
      pieces.push_back(kernels::layernorm_row_statistics(x.data(), n, t, kThreads));
    const kernels::Welford<double> combined = tree_reduce(
        pieces, [](const auto& a, const auto& b) { return kernels::welford_combine(a, b); });
    EXPECT_EQ(combined.count, whole.count) << "n = " << n;
    EXPECT_NEAR(combined.mean, whole.mean, kReorderTol) << "n = " << n;
    EXPECT_NEAR(combined.m2, whole.m2, kReorderTol * static_cast<double>(n)) << "n = " << n;
  }
}

// RMSNorm's statistics (centered = false): count, mean pinned at 0 and M2 = sum x^2, from one
// piece or from a block's pieces combined as WelfordOp combines them.
TEST(RowKernels, RmsNormStatisticsFromPiecesAreTheSumOfSquares) {
  for (std::int64_t n : {1, 5, 8, 37, 300}) {
    const std::vector<double> x = row_values(n);
    double squares = 0.0;
    for (double v : x) squares += v * v;
    const kernels::Welford<double> whole =
        kernels::layernorm_row_statistics(x.data(), n, 0, 1, false);
    EXPECT_EQ(whole.count, static_cast<double>(n));
    EXPECT_EQ(whole.mean, 0.0);
    EXPECT_EQ(whole.m2, squares) << "n = " << n;  // the same sum in the same order
    std::vector<kernels::Welford<double>> pieces;
    for (std::int64_t t = 0; t < kThreads; ++t)
      pieces.push_back(kernels::layernorm_row_statistics(x.data(), n, t, kThreads, false));
    const kernels::Welford<double> combined = tree_reduce(
        pieces, [](const auto& a, const auto& b) { return kernels::welford_combine(a, b); });
    EXPECT_EQ(combined.count, whole.count) << "n = " << n;
    EXPECT_EQ(combined.mean, 0.0) << "n = " << n;
    EXPECT_NEAR(combined.m2, squares, kReorderTol * squares) << "n = " << n;
    EXPECT_NEAR(kernels::layernorm_rstd(combined, 1e-5),
                1.0 / std::sqrt(squares / static_cast<double>(n) + 1e-5), kReorderTol)
        << "n = " << n;
  }
}

// The LayerNorm row pieces with mean = 0, no beta and mean(dxhat) = 0 are RMSNorm's row:
// y = x rstd gamma, dx = rstd (dxhat - xhat mean(dxhat xhat)), dgamma += dy xhat.
TEST(RowKernels, UncenteredLayerNormPiecesAreRmsNorm) {
  const std::int64_t n = 45;
  const std::vector<double> x = row_values(n), dy = row_values(n + 3), gamma = row_values(n + 7);
  const double rstd = 0.37;
  std::vector<double> y(static_cast<std::size_t>(n)), dx(y.size());
  kernels::layernorm_normalise_row(x.data(), gamma.data(), static_cast<const double*>(nullptr),
                                   y.data(), n, 0, 1, 0.0, rstd);
  const kernels::LayerNormRowSums s =
      kernels::layernorm_backward_row_sums(dy.data(), x.data(), gamma.data(), n, 0, 1, 0.0, rstd);
  kernels::layernorm_backward_row(dy.data(), x.data(), gamma.data(), dx.data(), n, 0, 1, 0.0, rstd,
                                  0.0, s.dxhat_xhat / static_cast<double>(n));
  double dot = 0.0;  // sum(dxhat xhat)
  for (std::size_t j = 0; j < x.size(); ++j) dot += dy[j] * gamma[j] * x[j] * rstd;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double xhat = x[j] * rstd, dxhat = dy[j] * gamma[j];
    EXPECT_NEAR(y[j], xhat * gamma[j], kReorderTol) << "y at " << j;
    EXPECT_NEAR(dx[j], rstd * (dxhat - xhat * dot / static_cast<double>(n)), kReorderTol)
        << "dx at " << j;
    double dgamma = 0.0;
    kernels::layernorm_param_grad_add(dgamma, nullptr, dy[j], x[j], 0.0, rstd);
    EXPECT_NEAR(dgamma, dy[j] * xhat, kReorderTol) << "dgamma at " << j;
  }
}

TEST(RowKernels, LayerNormBackwardSumsFromPiecesMatchTheSequentialRow) {
  const std::int64_t n = 45;
  const std::vector<double> x = row_values(n), dy = row_values(n + 3), gamma = row_values(n + 7);
  const kernels::LayerNormRowSums whole =
      kernels::layernorm_backward_row_sums(dy.data(), x.data(), gamma.data(), n, 0, 1, 0.3, 1.7);
  std::vector<kernels::LayerNormRowSums> pieces;
  for (std::int64_t t = 0; t < kThreads; ++t) {
    pieces.push_back(kernels::layernorm_backward_row_sums(dy.data(), x.data(), gamma.data(), n, t,
                                                          kThreads, 0.3, 1.7));
  }
  const auto combined = tree_reduce(pieces, [](const auto& a, const auto& b) { return a + b; });
  EXPECT_NEAR(combined.dxhat, whole.dxhat, kReorderTol * static_cast<double>(n));
  EXPECT_NEAR(combined.dxhat_xhat, whole.dxhat_xhat, kReorderTol * static_cast<double>(n));
}

TEST(RowKernels, SoftmaxPiecesWriteTheSequentialRowIncludingTheCausalMask) {
  const std::int64_t s_q = 6, s_k = 9;
  const std::vector<double> x = row_values(s_k);
  for (std::int64_t row = 0; row < s_q; ++row) {
    const std::int64_t visible = kernels::softmax_visible(row, s_q, s_k, true);
    EXPECT_EQ(visible, row + 4);
    std::vector<double> whole(static_cast<std::size_t>(s_k)), split(whole.size());
    const double mx = kernels::row_max(x.data(), visible, 0, 1);
    kernels::softmax_write_row(x.data(), whole.data(), s_k, visible, 0, 1, mx,
                               kernels::row_sum_exp(x.data(), visible, 0, 1, mx));
    std::vector<double> maxima, sums;
    for (std::int64_t t = 0; t < kThreads; ++t)
      maxima.push_back(kernels::row_max(x.data(), visible, t, kThreads));
    const double block_max = tree_reduce(maxima, kernels::max_of);
    EXPECT_EQ(block_max, mx);
    for (std::int64_t t = 0; t < kThreads; ++t)
      sums.push_back(kernels::row_sum_exp(x.data(), visible, t, kThreads, block_max));
    const double total = tree_reduce(sums, [](double a, double b) { return a + b; });
    for (std::int64_t t = 0; t < kThreads; ++t)
      kernels::softmax_write_row(x.data(), split.data(), s_k, visible, t, kThreads, block_max,
                                 total);
    for (std::int64_t j = 0; j < s_k; ++j) {
      EXPECT_NEAR(split[static_cast<std::size_t>(j)], whole[static_cast<std::size_t>(j)],
                  kReorderTol);
      if (j >= visible) {
        EXPECT_EQ(split[static_cast<std::size_t>(j)], 0.0);
      }
    }
  }
}

TEST(RowKernels, StridedIndexMapsPermutesAndShardOffsets) {
  // A [2, 3] tensor transposed to [3, 2]: output (i, j) reads input (j, i) at j * 3 + i.
  const std::int64_t out_dims[] = {3, 2}, in_step[] = {1, 3};
  const std::int64_t expected[] = {0, 3, 1, 4, 2, 5};
  for (std::int64_t o = 0; o < 6; ++o)
    EXPECT_EQ(kernels::strided_index(o, 2, out_dims, in_step), expected[o]);
  // A [2, 2] shard at (1, 2) of a [4, 5] tensor: local element (1, 1) is global (2, 3) = 13.
  const std::int64_t local_dims[] = {2, 2}, global_strides[] = {5, 1};
  const std::int64_t origin = 1 * 5 + 2;
  EXPECT_EQ(origin + kernels::strided_index(3, 2, local_dims, global_strides), 13);
}

// Coalescing keeps every offset: permutes of a [2, 1, 3, 4] tensor, shards of a [3, 4, 6, 5]
// tensor along each dim (the dropout maps of sharded activations), and the whole tensor.
TEST(RowKernels, CoalescedMapsGiveTheSameOffsets) {
  struct Map {
    std::vector<std::int64_t> dims, strides;
    int coalesced_rank;  // what the merges must reach
  };
  const std::vector<Map> maps = {
      {{2, 1, 3, 4}, {12, 12, 4, 1}, 1},   // contiguous: one dim
      {{4, 3, 1, 2}, {1, 4, 12, 12}, 3},   // a permute: nothing to merge but the 1
      {{3, 4, 6, 5}, {120, 30, 5, 1}, 1},  // the whole tensor
      {{3, 2, 6, 5}, {120, 30, 5, 1}, 2},  // a shard along dim 1: [3] x [2 * 6 * 5]
      {{3, 4, 3, 5}, {120, 30, 5, 1}, 2},  // along dim 2: [3 * 4] x [3 * 5]
      {{3, 4, 6, 2}, {120, 30, 5, 1}, 2},  // along the last dim: [72] x [2]
      {{1}, {7}, 1},
      {{}, {}, 1},
  };
  for (const Map& m : maps) {
    std::int64_t dims[8], strides[8], n = 1;
    const int rank = static_cast<int>(m.dims.size());
    std::copy(m.dims.begin(), m.dims.end(), dims);
    std::copy(m.strides.begin(), m.strides.end(), strides);
    for (std::int64_t d : m.dims) n *= d;
    const int coalesced = kernels::coalesce_dims(rank, dims, strides);
    EXPECT_EQ(coalesced, m.coalesced_rank) << "map of rank " << rank;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t want =
          rank ? kernels::strided_index(i, rank, m.dims.data(), m.strides.data()) : 0;
      ASSERT_EQ(kernels::strided_index(i, coalesced, dims, strides), want)
          << "element " << i << " of a map of rank " << rank;
    }
  }
}

}  // namespace
}  // namespace shardscope
