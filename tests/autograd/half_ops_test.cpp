// Every op's forward and backward in bf16 and f16, on the cpu and the reference backends, against
// the same op in f64 on the same inputs (values first rounded to the 2-byte type, so that both
// runs compute the same function and only the 2-byte path's arithmetic differs).
//
// The tolerance is derived, per element, from the unit roundoffs u (bf16 2^-8, f16 2^-11; a
// rounding to the 2-byte type moves a value v by at most u |v| + eta / 2, eta the smallest
// subnormal, bf16 2^-133, f16 2^-24: below the smallest normal, f16's 2^-14, the spacing stops
// shrinking) and e = 2^-24 (f32's), the precision every kernel computes and accumulates in, or
// better:
//   |got - want| <= r (u |want| + eta / 2) + (k + c) e M  (+ the error of a saved 2-byte input,
//                                               where backward reads one, derived at the op)
// r: the roundings to the 2-byte type on the way (1: each result is rounded once when stored; 2
// where an op stores an intermediate, mean's sum), k: the longest accumulation behind the
// element, c: the f32 operations around it, M: the sum of the magnitudes of the terms, so that
// (k + c) e M bounds f32's error however the terms cancel (Higham, Accuracy and Stability of
// Numerical Algorithms, 2nd ed., §3.1 and §4.2: recursive summation of k terms is off by at most
// (k - 1) e sum |x_i| to first order; a dot product by k e sum |x_i y_i|). The f64 run is exact
// by comparison (2^-53).
//
// Why not a gradient check: finite differences in 2-byte precision have a step either swamped by
// the rounding of f(x + h) (u = 2^-8 makes (f(x+h) - f(x-h)) / 2h off by u |f| / h) or too large
// for the derivative: a gradcheck cannot tell a right bf16 gradient from a wrong one. The f64
// ops are gradient-checked (ops_gradcheck_test); these tests tie the 2-byte ops to them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/ops.h"
#include "tests/autograd/reference_backend_testing.h"

namespace shardscope {
namespace {

using testing::test_values;
constexpr double kE = 0x1p-24;  // f32's unit roundoff

double unit_roundoff(DType dtype) {
  return dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
}

// An input: its shape and values (already rounded to the 2-byte dtype).
struct Input {
  Shape shape;
  std::vector<double> values;
};

// The output and the input gradients of one run.
struct OpRun {
  std::vector<double> y;
  std::vector<std::vector<double>> grads;
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

OpRun run(Context& ctx, DType dtype, const std::vector<Input>& inputs,
          const std::vector<double>& dy, const OpFn& op) {
  std::vector<Tensor> leaves;
  for (const Input& in : inputs) {
    leaves.push_back(Tensor::from_vector(ctx, in.shape, in.values, dtype).set_requires_grad(true));
  }
  const Tensor y = op(leaves);
  EXPECT_EQ(y.dtype(), dtype);
  y.backward(Tensor::from_vector(ctx, y.shape(), dy, dtype));
  OpRun r{y.to_vector(), {}};
  for (const Tensor& leaf : leaves) {
    EXPECT_EQ(leaf.grad().dtype(), dtype);
    r.grads.push_back(leaf.grad().to_vector());
  }
  return r;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

class HalfOps : public ::testing::TestWithParam<std::tuple<DeviceKind, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
  double u() const { return unit_roundoff(dtype()); }
  // Half the smallest subnormal: the most a rounding moves a value in the subnormal range.
  double half_eta() const { return dtype() == DType::bf16 ? 0x1p-134 : 0x1p-25; }

  // Deterministic values in [lo, hi) rounded to the dtype under test.
  Input input(const Shape& shape, std::uint64_t seed, double lo = -2.0, double hi = 2.0) {
    const Tensor t =
        Tensor::from_vector(half_ctx_, shape, test_values(shape.numel(), seed, lo, hi), dtype());
    return {shape, t.to_vector()};
  }

  // The op in the dtype under test and in f64, on the same inputs and output gradient.
  std::pair<OpRun, OpRun> both(const std::vector<Input>& inputs, const std::vector<double>& dy,
                               const OpFn& op) {
    return {run(half_ctx_, dtype(), inputs, dy, op), run(f64_ctx_, DType::f64, inputs, dy, op)};
  }

  // Every element within its tolerance tol[i]; on failure the first few offenders and the worst
  // ratio error / tolerance.
  void expect_within(const std::string& what, const std::vector<double>& got,
                     const std::vector<double>& want, const std::vector<double>& tol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    ASSERT_EQ(tol.size(), want.size()) << what;
    std::int64_t bad = 0;
    double worst = 0.0;
    std::ostringstream first;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = std::abs(got[i] - want[i]);
      worst = std::max(worst, tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0.0));
      if (err <= tol[i]) continue;
      if (bad++ < 3) {
        first << "\n  [" << i << "] got " << got[i] << ", f64 " << want[i] << ", error " << err
              << " > tolerance " << tol[i];
      }
    }
    EXPECT_EQ(bad, 0) << what << " [" << dtype_name(dtype()) << " on " << half_ctx_.device().str()
                      << "]: " << bad << " of " << want.size()
                      << " elements out of tolerance, worst error / tolerance " << worst
                      << first.str();
  }

  // tol[i] = r (u |want[i]| + eta / 2) + (k + c) e M[i].
  std::vector<double> tolerance(const std::vector<double>& want, double r, double kc,
                                const std::vector<double>& magnitude) const {
    std::vector<double> tol(want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      tol[i] = r * (u() * std::abs(want[i]) + half_eta()) + kc * kE * magnitude[i];
    }
    return tol;
  }

  Context half_ctx_{0, Device{std::get<0>(GetParam()), 0}};
  Context f64_ctx_{0, Device::cpu()};
};

// C = A B, A [3, 40, 300] and B [300, 50] (k = 300 for C), dA = dC B^T (k = 50), dB = A^T dC
// summed over the 120 rows of A (k = 120). c = 1 (the rounding of each product). M: the same
// products of absolute values, which the f64 matmul of |A|, |B| and |dC| gives exactly.
TEST_P(HalfOps, Matmul) {
  const Input a = input({3, 40, 300}, 1), b = input({300, 50}, 2), dc = input({3, 40, 50}, 3);
  const OpFn op = [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); };
  const auto [got, want] = both({a, b}, dc.values, op);
  const OpRun m =
      run(f64_ctx_, DType::f64, {{a.shape, abs_of(a.values)}, {b.shape, abs_of(b.values)}},
          abs_of(dc.values), op);
  expect_within("C", got.y, want.y, tolerance(want.y, 1, 300 + 1, m.y));
  expect_within("dA", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 50 + 1, m.grads[0]));
  expect_within("dB", got.grads[1], want.grads[1],
                tolerance(want.grads[1], 1, 120 + 1, m.grads[1]));
}

// y = a + bias: one f32 addition (c = 1, M = |a| + |bias|); da = dy exactly; dbias sums dy over
// the 4 x 50 leading rows (k = 200, M = sum |dy|).
TEST_P(HalfOps, AddWithBroadcastBias) {
  const Input a = input({4, 50, 33}, 1), bias = input({33}, 2), dy = input({4, 50, 33}, 3);
  const auto [got, want] =
      both({a, bias}, dy.values, [](const std::vector<Tensor>& t) { return add(t[0], t[1]); });
  std::vector<double> m(want.y.size()), m_bias(33, 0.0);
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i] = std::abs(a.values[i]) + std::abs(bias.values[i % 33]);
    m_bias[i % 33] += std::abs(dy.values[i]);
  }
  expect_within("y", got.y, want.y, tolerance(want.y, 1, 1, m));
  expect_within("da", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 0, m));
  expect_within("dbias", got.grads[1], want.grads[1], tolerance(want.grads[1], 1, 200, m_bias));
}

// y = a b, da = dy b, db = dy a: one f32 product each (c = 1, M = the value itself).
TEST_P(HalfOps, MulAndScale) {
  const Input a = input({1000}, 1), b = input({1000}, 2), dy = input({1000}, 3);
  const auto [got, want] =
      both({a, b}, dy.values, [](const std::vector<Tensor>& t) { return mul(t[0], t[1]); });
  expect_within("a b", got.y, want.y, tolerance(want.y, 1, 1, abs_of(want.y)));
  expect_within("d a", got.grads[0], want.grads[0],
                tolerance(want.grads[0], 1, 1, abs_of(want.grads[0])));
  expect_within("d b", got.grads[1], want.grads[1],
                tolerance(want.grads[1], 1, 1, abs_of(want.grads[1])));
  // 0.3 x: 0.3 rounded to f32, then one product (c = 2).
  const auto [sg, sw] =
      both({a}, dy.values, [](const std::vector<Tensor>& t) { return scale(t[0], 0.3); });
  expect_within("0.3 x", sg.y, sw.y, tolerance(sw.y, 1, 2, abs_of(sw.y)));
  expect_within("d 0.3 x", sg.grads[0], sw.grads[0],
                tolerance(sw.grads[0], 1, 2, abs_of(sw.grads[0])));
}

// gelu(x) = x s, s = 1 / (1 + exp(-2v)), v = sqrt(2/pi) (x + 0.044715 x^3), in f32 for x in
// [-6, 6): v carries a few e relative, exp(-2v) then 2|v| that (|v| <= 12.6), s at most that plus
// 2e, and y = x s one more: c = 8 |v|max + 4 <= 128 relative to |y|. gelu' = s + 2 x s (1 - s) v',
// v' = sqrt(2/pi) (1 + 3 0.044715 x^2): the error of s enters both terms, so M = |dy| (s +
// 2 |x| s v'), c = 2 x 128.
TEST_P(HalfOps, Gelu) {
  const Input x = input({4000}, 1, -6.0, 6.0), dy = input({4000}, 2);
  const auto [got, want] =
      both({x}, dy.values, [](const std::vector<Tensor>& t) { return gelu(t[0]); });
  std::vector<double> m(x.values.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    const double v = x.values[i], k = 0.7978845608028654;
    const double s = 1.0 / (1.0 + std::exp(-2.0 * k * (v + 0.044715 * v * v * v)));
    m[i] = std::abs(dy.values[i]) * (s + 2.0 * std::abs(v) * s * k * (1.0 + 3 * 0.044715 * v * v));
  }
  expect_within("gelu", got.y, want.y, tolerance(want.y, 1, 128, abs_of(want.y)));
  expect_within("gelu'", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 256, m));
}

// swiglu: y = silu(a) b, s = sigmoid(a) in f32 for a in [-6, 6): exp(-a) is off by (|a| + 1) e
// relative, s by 2e more, silu and the product by one e each: c = 16 relative to |y|. dgate =
// dy up s (1 + a (1 - s)): s's absolute error enters (1 - s) times |a|, so M = |dy up| s (1 + 2
// |a|), c = 32; dup = dy silu(a): c = 16 relative.
TEST_P(HalfOps, Swiglu) {
  const Input x = input({300, 2 * 40}, 1, -6.0, 6.0), dy = input({300, 40}, 2);
  const auto [got, want] =
      both({x}, dy.values, [](const std::vector<Tensor>& t) { return swiglu(t[0]); });
  std::vector<double> m(x.values.size());
  for (std::size_t j = 0; j < dy.values.size(); ++j) {
    const double gate = x.values[2 * j], up = x.values[2 * j + 1];
    const double s = 1.0 / (1.0 + std::exp(-gate));
    m[2 * j] = std::abs(dy.values[j] * up) * s * (1.0 + 2.0 * std::abs(gate));
    m[2 * j + 1] = std::abs(dy.values[j] * gate * s);
  }
  expect_within("swiglu", got.y, want.y, tolerance(want.y, 1, 16, abs_of(want.y)));
  expect_within("swiglu'", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 32, m));
}

// rope: each output a rotation of the pair (x_i, x_{i + d/2}) with cos and sin in double, rounded
// once: M = |x_i| + |x_{i + d/2}|, c = 4 (f32's bound, looser than the double the kernels use).
// Backward rotates dy back: the same with dy.
TEST_P(HalfOps, Rope) {
  const std::int64_t s = 37, b = 2, heads = 3, d = 16;
  const Input x = input({s, b, heads, d}, 1), dy = input({s, b, heads, d}, 2);
  const auto [got, want] =
      both({x}, dy.values, [](const std::vector<Tensor>& t) { return rope(t[0], 0, 5); });
  std::vector<double> mx(x.values.size()), mdy(x.values.size());
  const auto half = static_cast<std::size_t>(d / 2);
  for (std::size_t i = 0; i < mx.size(); ++i) {
    const std::size_t j = i % (2 * half), partner = j < half ? i + half : i - half;
    mx[i] = std::abs(x.values[i]) + std::abs(x.values[partner]);
    mdy[i] = std::abs(dy.values[i]) + std::abs(dy.values[partner]);
  }
  expect_within("rope", got.y, want.y, tolerance(want.y, 1, 4, mx));
  expect_within("rope backward", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 4, mdy));
}

// dropout p = 0.25: the same Philox mask in both runs; a kept element times 1/0.75 rounded to f32
// (c = 2 relative to the value).
TEST_P(HalfOps, Dropout) {
  const Input x = input({64, 100}, 1), dy = input({64, 100}, 2);
  DropoutSpec spec;
  spec.p = 0.25;
  spec.seed = 9;
  const auto [got, want] =
      both({x}, dy.values, [&](const std::vector<Tensor>& t) { return dropout(t[0], spec); });
  expect_within("dropout", got.y, want.y, tolerance(want.y, 1, 2, abs_of(want.y)));
  expect_within("dropout backward", got.grads[0], want.grads[0],
                tolerance(want.grads[0], 1, 2, abs_of(want.grads[0])));
}

// Row statistics of the f64 rows: mean, rstd and xhat = (x - mean) rstd (centered = false:
// RMSNorm's mean 0).
struct RowStatistics {
  std::vector<double> mean, rstd, xhat;
};

RowStatistics row_statistics(const std::vector<double>& x, std::int64_t h, bool centered) {
  RowStatistics s;
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / h;
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0.0, m2 = 0.0;
    for (std::int64_t j = 0; j < h; ++j)
      mu += centered ? x[static_cast<std::size_t>(r * h + j)] : 0.0;
    mu /= static_cast<double>(h);
    for (std::int64_t j = 0; j < h; ++j) {
      const double c = x[static_cast<std::size_t>(r * h + j)] - mu;
      m2 += c * c;
    }
    const double inv = 1.0 / std::sqrt(m2 / static_cast<double>(h) + 1e-5);
    s.mean.push_back(mu);
    s.rstd.push_back(inv);
    for (std::int64_t j = 0; j < h; ++j) {
      s.xhat.push_back((x[static_cast<std::size_t>(r * h + j)] - mu) * inv);
    }
  }
  return s;
}

// LayerNorm and RMSNorm over rows of h = 300 (x in [-3, 5): a nonzero mean). The statistics are
// sums over the row (k = h), kept in f32 for backward (one more e): an error of (2h + 3) e
// relative moves xhat by that times (|xhat| + rstd |mean|) <= (|xhat| + 1) for these rows.
//   y = xhat gamma + beta: the normalisation, the product and the sum in f32 (c = 3),
//     M = (|xhat| + 1) |gamma| + |beta|.
//   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma: sums of h terms,
//     M = rstd (|dxhat| + mean |dxhat| + (|xhat| + 1) mean |dxhat xhat|).
//   dgamma = sum over rows of dy xhat (k = rows), M = sum |dy| (|xhat| + 1); dbeta = sum dy.
// Every sum k <= 2h + rows and c = 4 below: (2h + rows + 4) e for all, one bound.
TEST_P(HalfOps, LayerNormAndRmsNorm) {
  const std::int64_t rows = 21, h = 300;
  const Input x = input({3, 7, h}, 1, -3.0, 5.0), dy = input({3, 7, h}, 2);
  const Input gamma = input({h}, 3), beta = input({h}, 4);
  const double kc = static_cast<double>(2 * h + rows + 4);
  for (bool centered : {true, false}) {
    SCOPED_TRACE(centered ? "layernorm" : "rmsnorm");
    const auto [got, want] =
        centered ? both({x, gamma, beta}, dy.values,
                        [](const std::vector<Tensor>& t) { return layernorm(t[0], t[1], t[2]); })
                 : both({x, gamma}, dy.values,
                        [](const std::vector<Tensor>& t) { return rmsnorm(t[0], t[1]); });
    const RowStatistics s = row_statistics(x.values, h, centered);
    std::vector<double> my(x.values.size()), mdx(x.values.size());
    std::vector<double> mdgamma(static_cast<std::size_t>(h), 0.0), mdbeta(mdgamma);
    for (std::int64_t r = 0; r < rows; ++r) {
      double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
      for (std::int64_t j = 0; j < h; ++j) {
        const auto i = static_cast<std::size_t>(r * h + j);
        const double dxhat = dy.values[i] * gamma.values[static_cast<std::size_t>(j)];
        mean_dxhat += std::abs(dxhat) / static_cast<double>(h);
        mean_dxhat_xhat += std::abs(dxhat * s.xhat[i]) / static_cast<double>(h);
      }
      for (std::int64_t j = 0; j < h; ++j) {
        const auto i = static_cast<std::size_t>(r * h + j), g = static_cast<std::size_t>(j);
        const double xhat = std::abs(s.xhat[i]) + 1.0;
        my[i] = xhat * std::abs(gamma.values[g]) + (centered ? std::abs(beta.values[g]) : 0.0);
        mdx[i] = s.rstd[static_cast<std::size_t>(r)] *
                 (std::abs(dy.values[i] * gamma.values[g]) + mean_dxhat + xhat * mean_dxhat_xhat);
        mdgamma[g] += std::abs(dy.values[i]) * xhat;
        mdbeta[g] += std::abs(dy.values[i]);
      }
    }
    expect_within("y", got.y, want.y, tolerance(want.y, 1, kc, my));
    expect_within("dx", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, kc, mdx));
    expect_within("dgamma", got.grads[1], want.grads[1], tolerance(want.grads[1], 1, kc, mdgamma));
    if (centered) {
      expect_within("dbeta", got.grads[2], want.grads[2], tolerance(want.grads[2], 1, kc, mdbeta));
    }
  }
}

// softmax over k = 257 keys, plain and causal: y = exp(x_j - max) / sum (k terms, c = 4),
// rounded once: M = |y|. Backward reads the saved 2-byte y, y (1 + d) + h with |d| <= u and
// |h| <= eta / 2: dx_j = y_j (dy_j - sum_k dy_k y_k) then moves by at most
// u |y_j| (|dy_j| + 2 sum_k |dy_k y_k|) + eta / 2 (|dy_j| + sum_k |dy_k y_k| + |y_j| sum_k |dy_k|)
// (first order), on top of its own rounding and the f32 bound on the sum over the same M.
TEST_P(HalfOps, SoftmaxPlainAndCausal) {
  const std::int64_t sq = 33, sk = 257;
  const Input x = input({4, sq, sk}, 1, -4.0, 4.0), dy = input({4, sq, sk}, 2);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "plain");
    const auto [got, want] = both(
        {x}, dy.values, [causal](const std::vector<Tensor>& t) { return softmax(t[0], causal); });
    std::vector<double> m(want.y.size()), underflow(want.y.size());
    const auto keys = static_cast<std::size_t>(sk);
    for (std::size_t r = 0; r < want.y.size() / keys; ++r) {
      double dot = 0.0, dy_sum = 0.0;
      for (std::size_t j = 0; j < keys; ++j) {
        dot += std::abs(dy.values[r * keys + j] * want.y[r * keys + j]);
        dy_sum += std::abs(dy.values[r * keys + j]);
      }
      for (std::size_t j = 0; j < keys; ++j) {
        const std::size_t i = r * keys + j;
        m[i] = std::abs(want.y[i]) * (std::abs(dy.values[i]) + 2.0 * dot);
        underflow[i] = half_eta() * (std::abs(dy.values[i]) + dot + std::abs(want.y[i]) * dy_sum);
      }
    }
    expect_within("y", got.y, want.y,
                  tolerance(want.y, 1, static_cast<double>(sk + 4), abs_of(want.y)));
    std::vector<double> tol = tolerance(want.grads[0], 1, static_cast<double>(sk + 4), m);
    for (std::size_t i = 0; i < tol.size(); ++i) tol[i] += u() * (1 + u()) * m[i] + underflow[i];
    expect_within("dx", got.grads[0], want.grads[0], tol);
  }
}

// sum and mean of 8192 values in [0.5, 1.5): all terms positive, so M = the sum itself and f32's
// bound (k e M, k = 8192: 4.9e-4 relative) stays far below a 2-byte accumulator's error, which
// stalls once half the running sum's ulp passes the terms (bf16 at 2^9, f16 at 2^12, both below
// the sum, about 2^13; a sum that does not stall wanders by rounding errors of either sign and
// may come out close, as f16's does over 4096 of these values). mean stores the sum in
// the 2-byte type, then scales it: two roundings (r = 2). Backward: the gradient broadcast, exact
// but for the rounding of g / n.
TEST_P(HalfOps, SumAndMeanOfALongVector) {
  const std::int64_t n = 8192;
  const Input x = input({n}, 1, 0.5, 1.5);
  const std::vector<double> g{0.75};
  for (bool is_mean : {false, true}) {
    SCOPED_TRACE(is_mean ? "mean" : "sum");
    const auto [got, want] = both({x}, g, [is_mean](const std::vector<Tensor>& t) {
      return is_mean ? mean(t[0]) : sum(t[0]);
    });
    expect_within("y", got.y, want.y,
                  tolerance(want.y, is_mean ? 2 : 1, static_cast<double>(n + 2), abs_of(want.y)));
    expect_within("dx", got.grads[0], want.grads[0],
                  tolerance(want.grads[0], 1, 2, abs_of(want.grads[0])));
  }
}

// mse over 2000 elements: sum of squares (k = 2000, c = 3, all terms positive: M = the loss).
// Backward: k p - k t with k = 2 g / n in f32 (c = 3, M = |k p| + |k t|), rounded once; dt its
// exact negation.
TEST_P(HalfOps, MseLoss) {
  const Input p = input({50, 40}, 1), t = input({50, 40}, 2);
  const std::vector<double> g{1.5};
  const auto [got, want] =
      both({p, t}, g, [](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); });
  expect_within("loss", got.y, want.y, tolerance(want.y, 1, 2000 + 3, abs_of(want.y)));
  std::vector<double> m(p.values.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i] = 2 * 1.5 / 2000.0 * (std::abs(p.values[i]) + std::abs(t.values[i]));
  }
  expect_within("dpred", got.grads[0], want.grads[0], tolerance(want.grads[0], 1, 3, m));
  expect_within("dtarget", got.grads[1], want.grads[1], tolerance(want.grads[1], 1, 3, m));
}

// Cross-entropy of 64 rows of C = 1000 logits: loss = mean over rows of log(sum exp(x - max)) +
// max - x_target (sums of C terms, c = 4), M = mean (|log z| + |max| + |x_target|). Backward:
// dlogits = (g / N)(p - onehot) from the saved 2-byte probabilities p (1 + d) + h, |d| <= u,
// |h| <= eta / 2: off by (g / N)(u p + eta / 2) beyond its own rounding.
TEST_P(HalfOps, CrossEntropy) {
  const std::int64_t rows = 64, c = 1000;
  const Input logits = input({rows, c}, 1, -5.0, 5.0);
  std::vector<std::int64_t> targets;
  for (std::int64_t r = 0; r < rows; ++r) targets.push_back((r * 37 + 11) % c);
  const std::vector<double> g{1.0};
  const auto [got, want] =
      both({logits}, g, [&](const std::vector<Tensor>& t) { return cross_entropy(t[0], targets); });
  double m_loss = 0.0;
  std::vector<double> m(logits.values.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = logits.values.data() + r * c;
    double mx = row[0], z = 0.0;
    for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, row[j]);
    for (std::int64_t j = 0; j < c; ++j) z += std::exp(row[j] - mx);
    m_loss += (std::abs(std::log(z)) + std::abs(mx) +
               std::abs(row[targets[static_cast<std::size_t>(r)]])) /
              static_cast<double>(rows);
    for (std::int64_t j = 0; j < c; ++j) {
      m[static_cast<std::size_t>(r * c + j)] =
          std::exp(row[j] - mx) / z / static_cast<double>(rows);
    }
  }
  expect_within("loss", got.y, want.y, tolerance(want.y, 1, static_cast<double>(c + 4), {m_loss}));
  std::vector<double> tol = tolerance(want.grads[0], 1, 4, m);
  for (std::size_t i = 0; i < tol.size(); ++i) {
    tol[i] += u() * (1 + u()) * m[i] + half_eta() / static_cast<double>(rows);
  }
  expect_within("dlogits", got.grads[0], want.grads[0], tol);
}

// Layout ops move 2-byte elements without touching them: the same values as f64, exactly.
TEST_P(HalfOps, LayoutOpsAreExact) {
  const Input x = input({4, 5, 6}, 1), dy = input({5, 4, 6}, 2);
  const auto [got, want] = both({x}, dy.values, [](const std::vector<Tensor>& t) {
    const std::vector<Tensor> parts = split(permute(t[0], {1, 0, 2}), 2, {2, 4});
    return reshape(concat({parts[1], parts[0]}, 2), {5, 4, 6});
  });
  const std::vector<double> zero(want.y.size(), 0.0);
  expect_within("y", got.y, want.y, zero);
  expect_within("dx", got.grads[0], want.grads[0], zero);
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<DeviceKind, DType>>& info) {
  return std::string(device_kind_name(std::get<0>(info.param))) + "_" +
         dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(TwoByte, HalfOps,
                         ::testing::Combine(::testing::Values(DeviceKind::cpu,
                                                              DeviceKind::reference),
                                            ::testing::Values(DType::bf16, DType::f16)),
                         case_name);

}  // namespace
}  // namespace shardscope
