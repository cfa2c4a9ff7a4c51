// Forward values of the ops against reference loops written in the tests, and the f32 kernels
// against the f64 ones, on every backend (the cuda instances skip, naming what is missing, without
// a CUDA device).
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>

#include "tests/autograd/autograd_testing.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

using testing::const64;
using testing::expect_near_all;
using testing::kF32Tol;
using testing::kF64Tol;

class OpsForward : public testing::BackendTest {};

TEST_P(OpsForward, CausalSoftmaxZeroesFutureKeysAndNormalisesTheRest) {
  const std::int64_t sq = 3, sk = 5;
  const Tensor x = const64(ctx, {2, sq, sk}, 1, 3.0);
  const std::vector<double> in = x.to_vector(), y = softmax(x, true).to_vector();
  for (std::int64_t row = 0; row < 2 * sq; ++row) {
    const std::int64_t i = row % sq, visible = i + (sk - sq) + 1;  // queries end-aligned
    double total = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) total += std::exp(in[row * sk + j]);
    for (std::int64_t j = 0; j < sk; ++j) {
      const double want = j < visible ? std::exp(in[row * sk + j]) / total : 0.0;
      if (j >= visible) {
        EXPECT_EQ(y[row * sk + j], 0.0) << "row " << row << " key " << j;
      } else {
        EXPECT_NEAR(y[row * sk + j], want, kF64Tol) << "row " << row << " key " << j;
      }
    }
  }
}

TEST_P(OpsForward, AProductWithAnEmptyInnerDimIsZero) {
  // Op outputs start as any content (NaN under the test presets: Tensor::uninitialized); a
  // product over k = 0 computes nothing and must still write its zeros.
  const Tensor a = Tensor::randn(ctx, {3, 0}, 1), b = Tensor::randn(ctx, {0, 4}, 2);
  for (double v : matmul(a, b).to_vector()) EXPECT_EQ(v, 0.0);
  const Tensor q = Tensor::randn(ctx, {2, 3, 0}, 3), k = Tensor::randn(ctx, {2, 3, 0}, 4);
  for (double v : causal_matmul(q, k, true, 3).to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(UninitializedMemory, IsNaNUnderTheTestPresets) {
  // What the check above relies on: the test presets set SHARDSCOPE_POISON_UNINITIALIZED=1.
  const char* poison = std::getenv("SHARDSCOPE_POISON_UNINITIALIZED");
  if (!poison || std::string(poison) != "1") {
    GTEST_SKIP() << "SHARDSCOPE_POISON_UNINITIALIZED is not 1 (ctest --preset default sets it)";
  }
  Context ctx(0);
  for (const Shape& shape : {Shape{7}, Shape{1 << 19}}) {  // below and above the cached blocks
    const Tensor t = Tensor::uninitialized(ctx, shape, DType::f32);
    for (double v : t.to_vector()) ASSERT_TRUE(std::isnan(v));
  }
}

TEST_P(OpsForward, SoftmaxIsStableForLargeScores) {
  const Tensor x = Tensor::from_vector(ctx, {1, 3}, {1000.0, 1001.0, 999.0}, DType::f64);
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), z = e0 + 1.0 + e2;
  expect_near_all(softmax(x).to_vector(), {e0 / z, 1.0 / z, e2 / z}, kF64Tol);
}

TEST_P(OpsForward, LayerNormMatchesReferenceAndNormalisesRows) {
  const std::int64_t h = 8;
  const Tensor x = const64(ctx, {3, 2, h}, 2, 2.0);
  const Tensor gamma = const64(ctx, {h}, 3), beta = const64(ctx, {h}, 4);
  const double eps = 1e-5;
  const std::vector<double> in = x.to_vector(), g = gamma.to_vector(), b = beta.to_vector();
  const std::vector<double> y = layernorm(x, gamma, beta, eps).to_vector();
  const Tensor ones = Tensor::full(ctx, {h}, 1.0, DType::f64);
  const Tensor zeros = Tensor::zeros(ctx, {h}, DType::f64);
  const std::vector<double> plain = layernorm(x, ones, zeros, eps).to_vector();
  for (std::int64_t r = 0; r < 6; ++r) {
    const auto row = in.begin() + r * h;
    const double mu = std::accumulate(row, row + h, 0.0) / h;
    double var = 0.0;
    for (std::int64_t j = 0; j < h; ++j) var += (row[j] - mu) * (row[j] - mu) / h;
    double out_mean = 0.0, out_var = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      const double xhat = (row[j] - mu) / std::sqrt(var + eps);
      EXPECT_NEAR(y[r * h + j], xhat * g[j] + b[j], kF64Tol);
      out_mean += plain[r * h + j] / h;
      out_var += plain[r * h + j] * plain[r * h + j] / h;
    }
    EXPECT_NEAR(out_mean, 0.0, kF64Tol);
    EXPECT_NEAR(out_var, var / (var + eps), kF64Tol);  // 1, shrunk by eps in the denominator
    EXPECT_NEAR(out_var, 1.0, 1e-5 / var + kF64Tol);
  }
}

// Rows whose mean(x^2) + eps is a perfect square, so rstd and y are exact by hand: eps = 4,
// row 0 mean(x^2) = 20 / 4 = 5 (rstd = 1/3), row 1 mean(x^2) = 84 / 4 = 21 (rstd = 1/5).
TEST_P(OpsForward, RmsNormKnownValues) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const Tensor x =
        Tensor::from_vector(ctx, {2, 4}, {1.0, 3.0, -1.0, 3.0, 2.0, 4.0, 8.0, 0.0}, dtype);
    const Tensor gamma = Tensor::from_vector(ctx, {4}, {1.0, 2.0, 0.5, -1.0}, dtype);
    const Tensor y = rmsnorm(x, gamma, 4.0);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.dtype(), dtype);
    const double tol = dtype == DType::f64 ? kF64Tol : kF32Tol;
    expect_near_all(y.to_vector(),
                    {1.0 / 3, 2.0, -1.0 / 6, -1.0,  // x / 3 * gamma
                     0.4, 1.6, 0.8, 0.0},           // x / 5 * gamma
                    tol);
    // The backend's rstd per row, as the op saves it for backward.
    Tensor out = Tensor::empty(ctx, {2, 4}, dtype), rstd = Tensor::empty(ctx, {2}, dtype);
    ctx.backend().rmsnorm_forward(x, gamma, 4.0, out, rstd);
    expect_near_all(rstd.to_vector(), {1.0 / 3, 0.2}, tol);
  }
}

TEST_P(OpsForward, RmsNormMatchesReferenceAndGivesUnitRootMeanSquare) {
  const std::int64_t h = 8;
  const Tensor x = const64(ctx, {3, 2, h}, 2, 2.0);
  const Tensor gamma = const64(ctx, {h}, 3);
  const double eps = 1e-5;
  const std::vector<double> in = x.to_vector(), g = gamma.to_vector();
  const std::vector<double> y = rmsnorm(x, gamma, eps).to_vector();
  const std::vector<double> plain =
      rmsnorm(x, Tensor::full(ctx, {h}, 1.0, DType::f64), eps).to_vector();
  for (std::int64_t r = 0; r < 6; ++r) {
    double ms = 0.0, mean_in = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      ms += in[r * h + j] * in[r * h + j] / h;
      mean_in += in[r * h + j] / h;
    }
    double out_ms = 0.0, out_mean = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      EXPECT_NEAR(y[r * h + j], in[r * h + j] / std::sqrt(ms + eps) * g[j], kF64Tol);
      out_ms += plain[r * h + j] * plain[r * h + j] / h;
      out_mean += plain[r * h + j] / h;
    }
    EXPECT_NEAR(out_ms, ms / (ms + eps), kF64Tol);  // 1, shrunk by eps in the denominator
    // Not centred: the output keeps the input's mean, scaled by rstd (LayerNorm's would be 0).
    EXPECT_NEAR(out_mean, mean_in / std::sqrt(ms + eps), kF64Tol);
  }
}

// Pairs (gate, up) = (0, 5), (1, 2), (-1, 3), (2, -4): y = silu(gate) up.
TEST_P(OpsForward, SwigluKnownValues) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const Tensor x =
        Tensor::from_vector(ctx, {2, 4}, {0.0, 5.0, 1.0, 2.0, -1.0, 3.0, 2.0, -4.0}, dtype);
    const Tensor y = swiglu(x);
    EXPECT_EQ(y.shape(), Shape({2, 2}));
    EXPECT_EQ(y.dtype(), dtype);
    const std::vector<double> v = y.to_vector();
    const auto silu = [](double a) { return a / (1.0 + std::exp(-a)); };
    const double tol = dtype == DType::f64 ? kF64Tol : kF32Tol;
    expect_near_all(v, {0.0, silu(1.0) * 2.0, silu(-1.0) * 3.0, silu(2.0) * -4.0}, tol);
    // silu(1) = 0.7310586, silu(-1) = -0.2689414, silu(2) = 1.7615942 (PyTorch's F.silu).
    expect_near_all(v, {0.0, 1.4621172, -0.8068243, -7.0463766}, 1e-7 + tol);
  }
  // Saturated gates: sigmoid -> 0 gives silu -> 0 (not NaN), sigmoid -> 1 gives the gate itself.
  const Tensor far = Tensor::from_vector(ctx, {4}, {-1000.0, 3.0, 1000.0, 0.5}, DType::f64);
  const std::vector<double> v = swiglu(far).to_vector();
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], 500.0);
}

// Rows (1, 2, 3, 4) at positions 0, 1, 2, d = 4: pair 0 is (x[0], x[2]) at theta_0 = 1, pair 1
// is (x[1], x[3]) at theta_1 = base^(-1/2) = 0.01 (base 10000) or 0.1 (base 100).
TEST_P(OpsForward, RopeKnownValues) {
  struct Case {
    double base;
    std::vector<double> at1, at2;  // the row at positions 1 and 2, to 7 digits
  };
  const Case cases[] = {
      {10000.0,
       {-1.9841106, 1.9599007, 2.4623779, 4.0197997},
       {-3.1440391, 1.9196053, -0.3391431, 4.0391974}},
      {100.0,
       {-1.9841106, 1.5906747, 2.4623779, 4.1796835},
       {-3.1440391, 1.1654558, -0.3391431, 4.3176050}},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? kF64Tol : kF32Tol;
    const std::vector<double> row{1.0, 2.0, 3.0, 4.0};
    std::vector<double> rows;
    for (int r = 0; r < 3; ++r) rows.insert(rows.end(), row.begin(), row.end());
    const Tensor x = Tensor::from_vector(ctx, {3, 4}, rows, dtype);
    for (const Case& c : cases) {
      const Tensor y = rope(x, 0, 0, c.base);
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_EQ(y.dtype(), dtype);
      const std::vector<double> v = y.to_vector();
      const double theta1 = 1.0 / std::sqrt(c.base);
      for (int p = 0; p < 3; ++p) {  // the formula, pair by pair
        const double a0 = p * 1.0, a1 = p * theta1;
        expect_near_all(
            {v.begin() + 4 * p, v.begin() + 4 * p + 4},
            {std::cos(a0) - 3.0 * std::sin(a0), 2.0 * std::cos(a1) - 4.0 * std::sin(a1),
             3.0 * std::cos(a0) + std::sin(a0), 4.0 * std::cos(a1) + 2.0 * std::sin(a1)},
            tol);
      }
      expect_near_all({v.begin(), v.begin() + 4}, row, 0.0);  // position 0: the identity
      expect_near_all({v.begin() + 4, v.begin() + 8}, c.at1, 1e-7 + tol);
      expect_near_all({v.begin() + 8, v.end()}, c.at2, 1e-7 + tol);
      // One row at first_position 2 is the whole tensor's row 2.
      const Tensor one = Tensor::from_vector(ctx, {1, 4}, row, dtype);
      expect_near_all(rope(one, 0, 2, c.base).to_vector(), c.at2, 1e-7 + tol);
    }
  }
}

// The pairs (x[i], x[i + d/2]) of every row keep their length: a rotation.
TEST_P(OpsForward, RopeKeepsEachPairsNorm) {
  const std::int64_t s = 5, b = 3, d = 8;
  const Tensor x = const64(ctx, {s, b, d}, 60);
  const std::vector<double> in = x.to_vector(), y = rope(x, 0, 11).to_vector();
  for (std::int64_t r = 0; r < s * b; ++r) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const std::int64_t a = r * d + i, c = a + d / 2;
      EXPECT_NEAR(y[a] * y[a] + y[c] * y[c], in[a] * in[a] + in[c] * in[c], kF64Tol)
          << "row " << r << " pair " << i;
    }
  }
}

// RoPE's point: <rope(q) at m, rope(k) at n> depends on m - n only. Every pair of positions of q
// [s, d] and k [s, d] gives the same dot products with the positions all shifted by 7, and a
// vector repeated at every position has one dot product per distance.
TEST_P(OpsForward, RopeDotProductsDependOnlyOnRelativePosition) {
  const std::int64_t s = 6, d = 8;
  const auto dots = [&](const Tensor& q, const Tensor& k) {
    const std::vector<double> a = q.to_vector(), c = k.to_vector();
    std::vector<double> out;
    for (std::int64_t m = 0; m < s; ++m) {
      for (std::int64_t n = 0; n < s; ++n) {
        double dot = 0.0;
        for (std::int64_t j = 0; j < d; ++j) dot += a[m * d + j] * c[n * d + j];
        out.push_back(dot);
      }
    }
    return out;
  };
  for (double base : {10000.0, 100.0}) {
    const Tensor q = const64(ctx, {s, d}, 61), k = const64(ctx, {s, d}, 62);
    const std::vector<double> at0 = dots(rope(q, 0, 0, base), rope(k, 0, 0, base));
    expect_near_all(dots(rope(q, 0, 7, base), rope(k, 0, 7, base)), at0, kF64Tol);
    // Without the rotation the dot products are another matrix: the test can tell.
    EXPECT_GT(std::abs(dots(q, k)[1] - at0[1]), 1e-3);
    // v at every position: dot(m, n) == dot(m + 1, n + 1).
    const std::vector<double> v = const64(ctx, {1, d}, 63).to_vector();
    std::vector<double> repeated;
    for (std::int64_t p = 0; p < s; ++p) repeated.insert(repeated.end(), v.begin(), v.end());
    const Tensor rv = rope(Tensor::from_vector(ctx, {s, d}, repeated, DType::f64), 0, 3, base);
    const std::vector<double> same = dots(rv, rv);
    for (std::int64_t m = 0; m + 1 < s; ++m) {
      for (std::int64_t n = 0; n + 1 < s; ++n) {
        EXPECT_NEAR(same[(m + 1) * s + n + 1], same[m * s + n], kF64Tol)
            << "m " << m << " n " << n << " base " << base;
      }
    }
  }
}

// A shard of the sequence, rows P .. P + len of the whole, rotated with first_position P is the
// whole tensor's result on those rows: what a sequence-sharded rank relies on. seq_dim 0 of
// [s, b, h, d] and seq_dim 2 of [b, h, s, d], and the two layouts agree with each other.
TEST_P(OpsForward, RopeOnASequenceShardEqualsTheWholeTensorsRows) {
  const std::int64_t s = 8, b = 2, h = 3, d = 6, first = 4, len = 3;
  const Tensor sbhd = const64(ctx, {s, b, h, d}, 64);
  const Tensor bhsd = permute(sbhd, {1, 2, 0, 3});
  for (std::int64_t global : {std::int64_t{0}, std::int64_t{5}}) {  // the whole's first position
    const Tensor whole = rope(sbhd, 0, global), whole_bhsd = rope(bhsd, 2, global);
    expect_near_all(permute(whole, {1, 2, 0, 3}).to_vector(), whole_bhsd.to_vector(), 0.0);
    const std::vector<std::int64_t> sizes{first, len, s - first - len};
    const Tensor shard = rope(split(sbhd, 0, sizes)[1], 0, global + first);
    expect_near_all(shard.to_vector(), split(whole, 0, sizes)[1].to_vector(), 0.0);
    const Tensor shard_bhsd = rope(split(bhsd, 2, sizes)[1], 2, global + first);
    expect_near_all(shard_bhsd.to_vector(), split(whole_bhsd, 2, sizes)[1].to_vector(), 0.0);
  }
}

// The f32 kernel against the f64 one at positions near 10^5, where an angle taken in f32 would be
// off by 1e-2 rad: the angles are taken in double for both.
TEST_P(OpsForward, RopeF32MatchesF64AtLargePositions) {
  const Tensor x = const64(ctx, {4, 2, 16}, 65);
  const Tensor x32 = Tensor::from_vector(ctx, x.shape(), x.to_vector(), DType::f32);
  const Tensor x64 = Tensor::from_vector(ctx, x.shape(), x32.to_vector(), DType::f64);
  const std::vector<double> want = rope(x64, 0, 99998).to_vector();
  expect_near_all(rope(x32, 0, 99998).to_vector(), want, kF32Tol);
}

TEST_P(OpsForward, GeluKnownValues) {
  const double pi = std::acos(-1.0);
  const auto tanh_gelu = [pi](double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (v + 0.044715 * v * v * v)));
  };
  const Tensor x = Tensor::from_vector(ctx, {3}, {0.0, 1.0, -1.0}, DType::f64);
  const std::vector<double> y = gelu(x).to_vector();
  EXPECT_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1], tanh_gelu(1.0), kF64Tol);
  EXPECT_NEAR(y[2], tanh_gelu(-1.0), kF64Tol);
  // PyTorch's gelu(approximate='tanh') prints these to 7 digits.
  EXPECT_NEAR(y[1], 0.8411920, 1e-7);
  EXPECT_NEAR(y[2], -0.1588080, 1e-7);
}

TEST_P(OpsForward, CrossEntropyIsMeanNegativeLogSoftmax) {
  const std::int64_t n = 4, c = 5;
  const Tensor logits = const64(ctx, {n, c}, 5, 3.0);
  const std::vector<std::int64_t> targets{1, 4, 0, 1};
  const std::vector<double> z = logits.to_vector();
  double want = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    double total = 0.0;
    for (std::int64_t j = 0; j < c; ++j) total += std::exp(z[r * c + j]);
    want -= (z[r * c + targets[r]] - std::log(total)) / n;
  }
  EXPECT_NEAR(cross_entropy(logits, targets).item(), want, kF64Tol);
}

// The backends' loss kernels over no rows (the ops refuse an empty input before them): the mean
// of nothing is 0 / 0, NaN, on every backend alike.
TEST_P(OpsForward, LossKernelsOverNoRowsGiveNaN) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const Tensor logits = Tensor::zeros(ctx, {0, 5}, dtype), none = Tensor::zeros(ctx, {0}, dtype);
    Tensor probs = Tensor::zeros(ctx, {0, 5}, dtype), loss = Tensor::zeros(ctx, Shape{}, dtype);
    ctx.backend().cross_entropy_forward(logits, nullptr, probs, loss);
    EXPECT_TRUE(std::isnan(loss.item()))
        << "cross entropy, " << dtype_name(dtype) << ": " << loss.item();
    Tensor mse = Tensor::zeros(ctx, Shape{}, dtype);
    ctx.backend().mse_forward(none, none, mse);
    EXPECT_TRUE(std::isnan(mse.item())) << "mse, " << dtype_name(dtype) << ": " << mse.item();
  }
}

TEST_P(OpsForward, MseAndReductions) {
  const Tensor p = const64(ctx, {3, 4}, 6), t = const64(ctx, {3, 4}, 7);
  const std::vector<double> pv = p.to_vector(), tv = t.to_vector();
  double sq = 0.0, total = 0.0;
  for (std::size_t i = 0; i < pv.size(); ++i)
    sq += (pv[i] - tv[i]) * (pv[i] - tv[i]), total += pv[i];
  EXPECT_NEAR(mse_loss(p, t).item(), sq / 12, kF64Tol);
  EXPECT_NEAR(sum(p).item(), total, kF64Tol);
  EXPECT_NEAR(mean(p).item(), total / 12, kF64Tol);
  EXPECT_EQ(sum(p).rank(), 0);
}

TEST_P(OpsForward, MatmulMatchesLoops) {
  // a [2, 3, 4] times: a shared w [4, 5], a batched b [2, 4, 5], and k [2, 5, 4] transposed.
  const Tensor a = const64(ctx, {2, 3, 4}, 8), w = const64(ctx, {4, 5}, 9);
  const Tensor b = const64(ctx, {2, 4, 5}, 10), k = const64(ctx, {2, 5, 4}, 11);
  const std::vector<double> av = a.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const std::vector<double> kv = k.to_vector();
  std::vector<double> shared(30), batched(30), transposed(30);
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        const int o = (e * 3 + i) * 5 + j;
        for (int p = 0; p < 4; ++p) {
          const double x = av[(e * 3 + i) * 4 + p];
          shared[o] += x * wv[p * 5 + j];
          batched[o] += x * bv[(e * 4 + p) * 5 + j];
          transposed[o] += x * kv[(e * 5 + j) * 4 + p];
        }
      }
    }
  }
  expect_near_all(matmul(a, w).to_vector(), shared, kF64Tol);
  expect_near_all(matmul(a, b).to_vector(), batched, kF64Tol);
  expect_near_all(matmul(a, k, true).to_vector(), transposed, kF64Tol);
  EXPECT_EQ(matmul(a, w).shape(), Shape({2, 3, 5}));
}

TEST_P(OpsForward, BroadcastAddAndMulRepeatOverLeadingDims) {
  const Tensor a = const64(ctx, {2, 3, 4}, 12), bias = const64(ctx, {4}, 13);
  const std::vector<double> av = a.to_vector(), bv = bias.to_vector();
  std::vector<double> sum_want(24), prod_want(24);
  for (std::size_t i = 0; i < 24; ++i) {
    sum_want[i] = av[i] + bv[i % 4];
    prod_want[i] = av[i] * bv[i % 4];
  }
  expect_near_all(add(a, bias).to_vector(), sum_want, kF64Tol);
  expect_near_all(mul(a, bias).to_vector(), prod_want, kF64Tol);
  expect_near_all(scale(bias, -3.0).to_vector(), {-3 * bv[0], -3 * bv[1], -3 * bv[2], -3 * bv[3]},
                  kF64Tol);
}

TEST_P(OpsForward, PermuteAndTransposeMoveElements) {
  const Tensor x = const64(ctx, {2, 3, 4}, 14);
  const std::vector<double> xv = x.to_vector();
  const Tensor y = permute(x, {2, 0, 1});  // y[k][i][j] = x[i][j][k]
  ASSERT_EQ(y.shape(), Shape({4, 2, 3}));
  const std::vector<double> yv = y.to_vector(), tv = transpose(x, 0, 1).to_vector();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(yv[(k * 2 + i) * 3 + j], xv[(i * 3 + j) * 4 + k]);
        EXPECT_EQ(tv[(j * 2 + i) * 4 + k], xv[(i * 3 + j) * 4 + k]);
      }
    }
  }
}

TEST_P(OpsForward, ReshapeIsAViewAndSplitConcatRoundTrip) {
  const Tensor x = const64(ctx, {2, 6, 3}, 15);
  const Tensor r = reshape(x, {-1, 3});
  EXPECT_EQ(r.shape(), Shape({12, 3}));
  EXPECT_EQ(r.raw_data(), x.raw_data());
  const std::vector<Tensor> parts = split(x, 1, {1, 2, 3});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), Shape({2, 3, 3}));
  const std::vector<double> xv = x.to_vector(), p1 = parts[1].to_vector();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      for (int k = 0; k < 3; ++k) EXPECT_EQ(p1[(i * 2 + j) * 3 + k], xv[(i * 6 + 1 + j) * 3 + k]);
    }
  }
  EXPECT_EQ(concat(parts, 1).to_vector(), xv);
  EXPECT_EQ(concat(chunk(x, -1, 3), -1).to_vector(), xv);
}

// head_split gives what the layer's permute and split gave before it (one copy instead of two):
// GPT's columns grouped by head [s, b, a, 3, d], and grouped-query attention's [s, b, a d | g 2 d].
TEST_P(OpsForward, HeadSplitMovesWhatAPermuteAndASplitMoved) {
  const std::int64_t s = 5, b = 3, a = 4, d = 2, g = 2;
  const Tensor fused = const64(ctx, {s, b, a * 3 * d}, 19);
  const std::vector<Tensor> by_head =
      head_split(fused, d, {{0, a, 3 * d}, {d, a, 3 * d}, {2 * d, a, 3 * d}});
  const std::vector<Tensor> parts =
      chunk(permute(reshape(fused, {s, b, a, 3, d}), {3, 1, 2, 0, 4}), 0, 3);
  ASSERT_EQ(by_head.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(by_head[i].shape(), Shape({b, a, s, d}));
    EXPECT_EQ(by_head[i].to_vector(), parts[i].to_vector()) << "part " << i;
  }
  const Tensor grouped = const64(ctx, {s, b, a * d + g * 2 * d}, 20);
  const std::vector<Tensor> heads =
      head_split(grouped, d, {{0, a, d}, {a * d, g, 2 * d}, {a * d + d, g, 2 * d}});
  const std::vector<Tensor> q_kv = split(grouped, 2, {a * d, g * 2 * d});
  const std::vector<Tensor> kv =
      chunk(permute(reshape(q_kv[1], {s, b, g, 2, d}), {3, 1, 2, 0, 4}), 0, 2);
  EXPECT_EQ(heads[0].to_vector(),
            permute(reshape(q_kv[0], {s, b, a, d}), {1, 2, 0, 3}).to_vector());
  EXPECT_EQ(heads[1].shape(), Shape({b, g, s, d}));
  EXPECT_EQ(heads[1].to_vector(), kv[0].to_vector());
  EXPECT_EQ(heads[2].to_vector(), kv[1].to_vector());
}

TEST_P(OpsForward, HeadSplitPartsMustCoverEachColumnOnce) {
  const Tensor x = const64(ctx, {2, 2, 8}, 21);
  auto error_of = [&](const std::vector<HeadColumns>& parts) {
    try {
      head_split(x, 2, parts);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{0, 2, 4}, {2, 1, 2}}).find("column 6 is in 0"), std::string::npos);
  EXPECT_NE(error_of({{0, 2, 4}, {2, 2, 4}, {0, 1, 2}}).find("column 0 is in 2"),
            std::string::npos);
  EXPECT_NE(error_of({{0, 2, 4}, {4, 2, 4}}).find("part 1 (first 4, heads 2, stride 4)"),
            std::string::npos);
  EXPECT_NE(error_of({{0, 4, 1}}).find("part 0"), std::string::npos);  // heads overlap
  EXPECT_NE(error_of({{0, 2, 4}, {2, 1, -2}, {6, 1, 0}}).find("part 1"), std::string::npos);
  EXPECT_EQ(error_of({{0, 2, 4}, {2, 2, 4}}), "no error");
}

TEST_P(OpsForward, SinglePrecisionKernelsMatchDouble) {
  const Tensor x64 = const64(ctx, {2, 3, 8}, 16), w64 = const64(ctx, {8, 8}, 17);
  const Tensor g64 = const64(ctx, {8}, 18);
  const auto as_f32 = [&](const Tensor& t) {
    return Tensor::from_vector(ctx, t.shape(), t.to_vector(), DType::f32);
  };
  const Tensor x32 = as_f32(x64), w32 = as_f32(w64), g32 = as_f32(g64);
  const auto chain = [](const Tensor& x, const Tensor& w, const Tensor& g) {
    const Tensor h = gelu(add(matmul(x, w), g));
    return softmax(layernorm(h, g, g), true);
  };
  expect_near_all(chain(x32, w32, g32).to_vector(), chain(x64, w64, g64).to_vector(), kF32Tol);
  const Tensor l64 = reshape(x64, {6, 8}), l32 = reshape(x32, {6, 8});
  EXPECT_NEAR(cross_entropy(l32, {0, 7, 3, 1, 2, 5}).item(),
              cross_entropy(l64, {0, 7, 3, 1, 2, 5}).item(), kF32Tol);
  EXPECT_EQ(chain(x32, w32, g32).dtype(), DType::f32);
  const auto gated = [](const Tensor& x, const Tensor& w, const Tensor& g) {
    return rmsnorm(swiglu(matmul(x, w)), chunk(g, 0, 2)[0]);  // [2, 3, 8] -> [2, 3, 4]
  };
  expect_near_all(gated(x32, w32, g32).to_vector(), gated(x64, w64, g64).to_vector(), kF32Tol);
  EXPECT_EQ(gated(x32, w32, g32).dtype(), DType::f32);
}

INSTANTIATE_TEST_SUITE_P(Backends, OpsForward, testing::all_backends(), testing::BackendName());

}  // namespace
}  // namespace shardscope
