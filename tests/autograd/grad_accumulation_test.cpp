// Gradient-accumulation fusion (ops_detail::accumulation_target): a backward whose input is a leaf
// that already holds a gradient adds its product into that gradient (beta 1) and hands it back,
// and the engine leaves it as it is. Checked: the values over several backwards against the sums
// they must give, on the CPU and the reference backends; that the product wrote into the leaf's
// own gradient (no new tensor); a leaf that is both operands; and that under
// Context::check_finite nothing is added in place.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "autograd/observer.h"
#include "autograd/ops.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using testing::expect_near_all;
using testing::GradientIds;
using testing::leaf64;

// x^T ones [k, n]: the gradient of sum(x w) for w [k, n].
std::vector<double> column_sums(const std::vector<double>& x, std::int64_t m, std::int64_t k,
                                std::int64_t n) {
  std::vector<double> g(static_cast<std::size_t>(k * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t p = 0; p < k; ++p) {
      for (std::int64_t j = 0; j < n; ++j)
        g[static_cast<std::size_t>(p * n + j)] += x[static_cast<std::size_t>(i * k + p)];
    }
  }
  return g;
}

std::vector<double> times(std::vector<double> v, double s) {
  for (double& e : v) e *= s;
  return v;
}

class GradientAccumulation : public ::testing::TestWithParam<DeviceKind> {
 protected:
  Context ctx{0, Device{GetParam(), 0}};
};

TEST_P(GradientAccumulation, AWeightsProductAddsIntoTheGradientItHolds) {
  const Tensor x = Tensor::randn(ctx, {5, 3}, 1, 1.0, DType::f64);
  const Tensor w = leaf64(ctx, {3, 4}, 2, "w");
  const std::vector<double> once = column_sums(x.to_vector(), 5, 3, 4);
  sum(matmul(x, w)).backward();
  expect_near_all(w.grad().to_vector(), once);
  const std::uint64_t grad_id = w.grad().storage()->id();
  GradientIds out;
  {
    const ObserverGuard watch(ctx, out);
    sum(scale(matmul(x, w), 2.0)).backward();
  }
  expect_near_all(w.grad().to_vector(), times(once, 3.0));
  EXPECT_EQ(w.grad().storage()->id(), grad_id);
  ASSERT_EQ(out.ids.size(), 3u);  // sum's, scale's, then matmul's (w's)
  EXPECT_EQ(out.ids.back(), grad_id)
      << "the product wrote the weight's gradient into a new tensor, not into the one it holds";
  sum(matmul(x, w)).backward();
  expect_near_all(w.grad().to_vector(), times(once, 4.0));
}

// x x^T with x a leaf: both of the product's gradients go into x's, each added once.
TEST_P(GradientAccumulation, ALeafThatIsBothOperandsGetsBothProducts) {
  const Tensor x = leaf64(ctx, {3, 2}, 3, "x");
  // d/dx sum(x x^T) = 2 (column sums of x) on every row.
  const std::vector<double> v = x.to_vector();
  std::vector<double> once(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) once[i] = 2 * (v[i % 2] + v[2 + i % 2] + v[4 + i % 2]);
  for (int pass = 1; pass <= 3; ++pass) {
    sum(matmul(x, x, /*transpose_b=*/true)).backward();
    expect_near_all(x.grad().to_vector(), times(once, pass));
  }
}

// Under the numerical guard a sum is checked before it is stored: the product writes a new
// tensor, and the engine adds it.
TEST_P(GradientAccumulation, UnderTheFiniteCheckTheProductWritesANewTensor) {
  ctx.set_check_finite(true);
  const Tensor x = Tensor::randn(ctx, {5, 3}, 1, 1.0, DType::f64);
  const Tensor w = leaf64(ctx, {3, 4}, 2, "w");
  sum(matmul(x, w)).backward();
  GradientIds out;
  {
    const ObserverGuard watch(ctx, out);
    sum(matmul(x, w)).backward();
  }
  ASSERT_FALSE(out.ids.empty());
  EXPECT_NE(out.ids.back(), w.grad().storage()->id());
  expect_near_all(w.grad().to_vector(), times(column_sums(x.to_vector(), 5, 3, 4), 2.0));
}

// Only a node's handed-back gradient is left as it is: a backward from a leaf seeded with the
// leaf's own gradient adds it, as any seed.
TEST_P(GradientAccumulation, ALeafSeededWithItsOwnGradientAddsIt) {
  const Tensor x = leaf64(ctx, {2, 3}, 4, "x");
  x.backward(Tensor::full(ctx, {2, 3}, 1.5, DType::f64));
  x.backward(x.grad());
  expect_near_all(x.grad().to_vector(), std::vector<double>(6, 3.0));
}

INSTANTIATE_TEST_SUITE_P(Backends, GradientAccumulation,
                         ::testing::Values(DeviceKind::cpu, DeviceKind::reference),
                         [](const ::testing::TestParamInfo<DeviceKind>& param) {
                           return param.param == DeviceKind::cpu ? "cpu" : "reference";
                         });

}  // namespace
}  // namespace shardscope
