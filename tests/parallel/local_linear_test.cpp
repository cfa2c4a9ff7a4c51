// local_linear with a bias: one op, a matmul whose output starts as the bias rows and whose GEMM
// adds x w into them (ops_detail::linear_values). Checked against a matmul and an add, values and
// the three gradients, on the CPU and the reference backends in f64, f32 and bf16; by finite
// differences in f64; and as the one op it is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "autograd/gradcheck.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "parallel/layers/parallel_linear.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using testing::GradientIds;
using ::testing::HasSubstr;

// The largest |a - b| over max(1, max |b|): 0 when the two lists are equal.
double worst(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1.0, err = 0.0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    err = std::max(err, std::abs(a[i] - b[i]));
  return err / scale;
}

// The output and the gradients of x, w and b after a backward seeded with fixed weights.
struct LinearRun {
  std::vector<double> y, dx, dw, db;
};

LinearRun run(Context& ctx, DType dtype, const Shape& x_shape, std::int64_t out, bool fused) {
  const std::int64_t in = x_shape.dim(-1);
  Tensor x = Tensor::randn(ctx, x_shape, 1, 1.0, dtype);
  Tensor w = Tensor::randn(ctx, {in, out}, 2, 0.2, dtype);
  Tensor b = Tensor::randn(ctx, {out}, 3, 1.0, dtype);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  const Tensor y = fused ? local_linear(x, {w}, {b}) : add(matmul(x, w), b);
  y.backward(Tensor::randn(ctx, y.shape(), 4, 1.0, dtype));
  return {y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
}

struct Case {
  Device device;
  DType dtype;
  double tolerance;  // of worst()
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.device.kind == DeviceKind::cpu ? "cpu " : "reference ") << dtype_name(c.dtype);
}

class LocalLinear : public ::testing::TestWithParam<Case> {};

// Small odd rows, and rows and columns above the CPU backend's thresholds (a GEMM cut over its
// threads, the bias's rows copied by both).
TEST_P(LocalLinear, BiasInTheProductGivesWhatAMatmulAndAnAddGive) {
  const Case c = GetParam();
  for (const auto& [x_shape, out] :
       {std::pair<Shape, std::int64_t>{Shape{7, 3, 5}, 9}, {Shape{64, 8, 96}, 256}}) {
    SCOPED_TRACE("x " + x_shape.str() + ", out " + std::to_string(out));
    Context ctx{0, c.device};
    const LinearRun fused = run(ctx, c.dtype, x_shape, out, true);
    const LinearRun apart = run(ctx, c.dtype, x_shape, out, false);
    EXPECT_LE(worst(fused.y, apart.y), c.tolerance) << "output";
    EXPECT_LE(worst(fused.dx, apart.dx), c.tolerance) << "x's gradient";
    EXPECT_LE(worst(fused.dw, apart.dw), c.tolerance) << "the weight's gradient";
    EXPECT_LE(worst(fused.db, apart.db), c.tolerance) << "the bias's gradient";
  }
}

// Two backwards through the same weight: the second adds its product into the gradient the first
// left (ops_detail::accumulation_target), the sum of what each gives alone; with the bias in the
// product and without it (a matmul and an add).
TEST_P(LocalLinear, ASecondBackwardAddsItsProductIntoTheWeightsGradient) {
  const Case c = GetParam();
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "bias in the product" : "matmul and add");
    Context ctx{0, c.device};
    const Tensor x = Tensor::randn(ctx, {64, 8, 96}, 1, 1.0, c.dtype);
    Tensor w = Tensor::randn(ctx, {96, 256}, 2, 0.2, c.dtype);
    Tensor b = Tensor::randn(ctx, {256}, 3, 1.0, c.dtype);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    auto backward = [&](std::uint64_t seed) {
      const Tensor y = fused ? local_linear(x, {w}, {b}) : add(matmul(x, w), b);
      y.backward(Tensor::randn(ctx, y.shape(), seed, 1.0, c.dtype));
    };
    std::vector<double> alone;
    for (const std::uint64_t seed : {4u, 5u}) {
      w.zero_grad();
      backward(seed);
      const std::vector<double> g = w.grad().to_vector();
      alone.resize(g.size(), 0.0);
      for (std::size_t i = 0; i < g.size(); ++i) alone[i] += g[i];
    }
    w.zero_grad();
    backward(4);
    const std::uint64_t first = w.grad().storage()->id();
    GradientIds out;
    {
      ObserverGuard watch(ctx, out);
      backward(5);
    }
    EXPECT_EQ(w.grad().storage()->id(), first);
    EXPECT_THAT(out.ids, Contains(first))
        << "no backward node handed back the weight's own gradient: the product wrote a new one";
    EXPECT_LE(worst(w.grad().to_vector(), alone), c.tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(
    DevicesAndDtypes, LocalLinear,
    ::testing::Values(Case{Device::cpu(), DType::f64, 1e-12}, Case{Device::cpu(), DType::f32, 1e-5},
                      Case{Device::cpu(), DType::bf16, 2e-2},
                      Case{Device::reference(), DType::f64, 1e-12},
                      Case{Device::reference(), DType::f32, 1e-5},
                      Case{Device::reference(), DType::bf16, 2e-2}),
    [](const ::testing::TestParamInfo<Case>& param) {
      return std::string(param.param.device.kind == DeviceKind::cpu ? "cpu_" : "reference_") +
             dtype_name(param.param.dtype);
    });

TEST(LocalLinearGradcheck, EveryInputByFiniteDifferences) {
  Context ctx;
  std::vector<Tensor> inputs{Tensor::randn(ctx, {4, 3, 5}, 1, 1.0, DType::f64),
                             Tensor::randn(ctx, {5, 6}, 2, 1.0, DType::f64),
                             Tensor::randn(ctx, {6}, 3, 1.0, DType::f64)};
  for (Tensor& t : inputs) t.set_requires_grad(true);
  testing::expect_gradients_match(
      [](const std::vector<Tensor>& in) { return local_linear(in[0], {in[1]}, {in[2]}); }, inputs);
}

// The ops and backward nodes a linear makes, with each one's count of input shapes.
class OpNames final : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override {
    ops.push_back(std::string(e.site.op) + (e.site.phase == Phase::forward ? "/" : "/backward/") +
                  std::to_string(e.inputs ? e.inputs->size() : 0));
  }
  std::vector<std::string> ops;
};

TEST(LocalLinearOps, OneMatmulWithTheBiasAsItsThirdInputAndNoAdd) {
  Context ctx;
  Tensor x = Tensor::randn(ctx, {4, 2, 5}, 1, 1.0, DType::f32);
  Tensor w = Tensor::randn(ctx, {5, 6}, 2, 1.0, DType::f32);
  Tensor b = Tensor::randn(ctx, {6}, 3, 1.0, DType::f32);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  OpNames names;
  {
    ObserverGuard watch(ctx, names);
    sum(local_linear(x, {w}, {b})).backward();
  }
  EXPECT_THAT(names.ops, ElementsAre("matmul/3", "sum/1", "sum/backward/1", "matmul/backward/1"));
  // Without a bias: the plain matmul, two inputs.
  names.ops.clear();
  {
    ObserverGuard watch(ctx, names);
    sum(local_linear(x, {w})).backward();
  }
  EXPECT_THAT(names.ops, ElementsAre("matmul/2", "sum/1", "sum/backward/1", "matmul/backward/1"));
}

TEST(LocalLinearOps, ABiasOfTheWrongWidthNamesTheOpAndTheBias) {
  Context ctx;
  const Tensor x = Tensor::randn(ctx, {4, 5}, 1, 1.0, DType::f32);
  const Tensor w = Tensor::randn(ctx, {5, 6}, 2, 1.0, DType::f32);
  const Tensor b = Tensor::randn(ctx, {7}, 3, 1.0, DType::f32);
  const std::string msg = testing::message_of<ShapeError>([&] { local_linear(x, {w}, {b}); });
  EXPECT_THAT(msg, HasSubstr("op 'matmul'"));
  EXPECT_THAT(msg, HasSubstr("bias f32[7]"));
  EXPECT_THAT(msg, HasSubstr("bias [out]"));
}

}  // namespace
}  // namespace shardscope
