// causal_matmul against its definition: the dense product with the causal mask applied by plain
// ops (the scores: mask * (q k^T); the context: (mask * p) v), forward and both gradients, on
// every backend, in f64 (to rounding) and bf16 (to bf16's precision), across block edges, with
// more keys than queries and with stacked query heads (grouped-query attention). The masked
// entries are not read (NaN there changes nothing), the products above each block's diagonal are
// not computed (the GEMM events add up to the blocks' share of the dense FLOPs), and bad shapes
// are errors naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "autograd/gemm.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

// One case: [batch, r s_q, ..] score-shaped operands with `periods` = r.
struct Case {
  std::int64_t queries, keys, periods, width;  // s_q, s_k, r, d
};

// Queries per block as causal_matmul takes them (ops/matmul.cpp): 1/8 of s_q, at least 32, a
// multiple of 16, at most s_q.
std::int64_t block_of(std::int64_t queries) {
  const std::int64_t eighth = (queries + 7) / 8;
  return std::min(queries, (std::max<std::int64_t>(32, eighth) + 15) / 16 * 16);
}

// The causal mask of a score-shaped [r s_q, s_k] matrix: 1 where query (row mod s_q) sees the key.
Tensor mask_of(Context& ctx, const Case& c, DType dtype) {
  std::vector<double> m(static_cast<std::size_t>(c.periods * c.queries * c.keys));
  for (std::int64_t i = 0; i < c.periods * c.queries; ++i) {
    for (std::int64_t j = 0; j < c.keys; ++j) {
      m[static_cast<std::size_t>(i * c.keys + j)] = j <= i % c.queries + c.keys - c.queries;
    }
  }
  return Tensor::from_vector(ctx, {c.periods * c.queries, c.keys}, m, dtype);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// The largest |x - y|, over the largest |y|; infinity when any x is not finite.
double relative_difference(const Tensor& x, const Tensor& y) {
  const std::vector<double> a = x.to_vector(), b = y.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst / std::max(max_abs(b), 1e-300);
}

// out, d(sum(out * w))/da and /db for the causal product and for the dense definition.
struct Results {
  Tensor out, da, db;
};

Results run(Context& ctx, const Case& c, bool scores, DType dtype, bool causal, double nan_above,
            double alpha) {
  const std::int64_t batch = 2, rows = c.periods * c.queries;
  const Shape a_shape = scores ? Shape{batch, rows, c.width} : Shape{batch, rows, c.keys};
  std::vector<double> a_values = Tensor::randn(ctx, a_shape, 11, 1.0, DType::f64).to_vector();
  if (!scores && nan_above != 0) {  // entries of p above the diagonal: never read
    for (std::int64_t e = 0; e < batch; ++e) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = i % c.queries + c.keys - c.queries + 1; j < c.keys; ++j) {
          a_values[static_cast<std::size_t>((e * rows + i) * c.keys + j)] = nan_above;
        }
      }
    }
  }
  Tensor a = Tensor::from_vector(ctx, a_shape, a_values, dtype).set_requires_grad(true);
  Tensor b = Tensor::randn(ctx, {batch, c.keys, c.width}, 12, 1.0, dtype).set_requires_grad(true);
  const Tensor mask = mask_of(ctx, c, dtype);
  Tensor out;
  if (causal) {
    out = causal_matmul(a, b, scores, c.queries, alpha);
  } else {
    out = scale(scores ? mul(matmul(a, b, true), mask) : matmul(mul(a, mask), b), alpha);
  }
  Tensor w = Tensor::randn(ctx, out.shape(), 13, 1.0, dtype);
  if (scores && nan_above != 0) {  // the upstream gradient above the diagonal: never read
    std::vector<double> wv = w.to_vector();
    const std::vector<double> m = mask.to_vector();
    for (std::size_t i = 0; i < wv.size(); ++i) {
      if (m[i % m.size()] == 0) wv[i] = nan_above;
    }
    w = Tensor::from_vector(ctx, out.shape(), wv, dtype);
    if (!causal) w = mul(w, mask);  // the definition: those entries of the output are constant 0
  }
  sum(mul(out, w)).backward();
  return {out, a.grad(), b.grad()};
}

class CausalMatmul : public testing::BackendTest {
 protected:
  void expect_matches(const Case& c, bool scores, DType dtype, double tolerance,
                      double nan_above = 0, double alpha = 1.0) {
    const Results got = run(ctx, c, scores, dtype, true, nan_above, alpha);
    const Results want = run(ctx, c, scores, DType::f64, false, nan_above, alpha);
    const std::string where = std::string(scores ? "scores" : "context") +
                              " s_q=" + std::to_string(c.queries) +
                              " s_k=" + std::to_string(c.keys) + " r=" + std::to_string(c.periods) +
                              " " + dtype_name(dtype);
    EXPECT_LE(relative_difference(got.out, want.out), tolerance) << where << ": output";
    EXPECT_LE(relative_difference(got.da, want.da), tolerance) << where << ": gradient of a";
    EXPECT_LE(relative_difference(got.db, want.db), tolerance) << where << ": gradient of b";
  }
};

// Block edges (80 = 32 + 32 + 16), more keys than queries, stacked heads, one block, a single key.
const std::vector<Case> kCases = {
    {80, 80, 1, 8}, {80, 104, 3, 4}, {33, 33, 2, 4}, {7, 9, 1, 3}, {1, 1, 2, 2}};

TEST_P(CausalMatmul, EqualsTheDenseProductUnderTheMaskForwardAndBackward) {
  for (const Case& c : kCases) {
    for (bool scores : {true, false}) expect_matches(c, scores, DType::f64, 1e-13);
  }
}

TEST_P(CausalMatmul, ScalesTheProductAndBothGradientsByAlpha) {
  // alpha (attention's 1/sqrt(d)) goes into every GEMM piece, forward and backward.
  for (const Case& c : {kCases[0], kCases[1]}) {
    for (bool scores : {true, false}) expect_matches(c, scores, DType::f64, 1e-13, 0, 0.37);
  }
}

TEST_P(CausalMatmul, EqualsTheDenseProductInBf16ToItsPrecision) {
  // bf16 operands widened exactly; each result rounded once (scores) or a sum split at the
  // diagonal block rounded once more: a few units of bf16's 2^-8 relative to the largest value.
  for (const Case& c : {kCases[0], kCases[1]}) {
    for (bool scores : {true, false}) expect_matches(c, scores, DType::bf16, 3.0 / 256);
  }
}

TEST_P(CausalMatmul, NeverReadsTheEntriesAboveTheDiagonal) {
  // NaN in p above the diagonal (context), or in the gradient coming into the scores there.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Case& c : {kCases[0], kCases[1]}) {
    for (bool scores : {true, false}) expect_matches(c, scores, DType::f64, 1e-13, nan);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CausalMatmul, testing::all_backends(), testing::BackendName());

class GemmFlopLog : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override {
    flops += 2.0 * static_cast<double>(e.desc->m * e.desc->n * e.desc->k * e.desc->batch);
  }
  double flops = 0;
};

TEST(CausalMatmulBlocks, ComputeOnlyTheBlocksUpToEachDiagonal) {
  // s_q = s_k = 256: 8 blocks of 32 queries, block i computing 32 (i + 1) keys: 36 of the 64
  // squares of 32 x 32, forward and in each gradient.
  Context ctx(0);
  const Case c{256, 256, 1, 16};
  std::int64_t pairs = 0;
  const std::int64_t block = block_of(c.queries);
  ASSERT_EQ(block, 32);
  for (std::int64_t q0 = 0; q0 < c.queries; q0 += block) pairs += block * (q0 + block);
  ASSERT_EQ(pairs, 36 * 32 * 32);
  for (bool scores : {true, false}) {
    GemmFlopLog log;
    ObserverGuard attach(ctx, log);
    Tensor a = Tensor::randn(ctx, scores ? Shape{3, 256, 16} : Shape{3, 256, 256}, 1)
                   .set_requires_grad(true);
    Tensor b = Tensor::randn(ctx, {3, 256, 16}, 2).set_requires_grad(true);
    const Tensor out = causal_matmul(a, b, scores, c.queries);
    const double forward = 2.0 * 3 * static_cast<double>(pairs) * 16;
    EXPECT_EQ(log.flops, forward) << (scores ? "scores" : "context");
    sum(out).backward();
    EXPECT_EQ(log.flops, 3 * forward) << (scores ? "scores" : "context");
  }
}

TEST(CausalMatmulBlocks, BadShapesAreErrorsNamingTheOp) {
  Context ctx(0);
  const Tensor q = Tensor::randn(ctx, {2, 12, 4}, 1), k = Tensor::randn(ctx, {2, 12, 4}, 2);
  const Tensor w = Tensor::randn(ctx, {4, 4}, 3);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no ShapeError");
  };
  const std::string not_dividing = message([&] { causal_matmul(q, k, true, 5); });
  EXPECT_NE(not_dividing.find("causal_matmul"), std::string::npos) << not_dividing;
  EXPECT_NE(not_dividing.find("queries = 5"), std::string::npos) << not_dividing;
  const Tensor few_keys = Tensor::randn(ctx, {2, 6, 4}, 4);
  const std::string more_queries = message([&] { causal_matmul(q, few_keys, true, 12); });
  EXPECT_NE(more_queries.find("at most the 6 keys"), std::string::npos) << more_queries;
  const std::string shared = message([&] { causal_matmul(q, w, false, 12); });
  EXPECT_NE(shared.find("batched"), std::string::npos) << shared;
}

}  // namespace
}  // namespace shardscope
