// Lab 1 tests: each of the student's backward functions becomes an autograd op through
// apply_function (forward = the framework's op on the values, backward = the student's function).
// The op is judged twice: by the finite-difference gradient checker (f64), and against the
// framework's own backward on the same inputs and output gradient. On a mismatch the message names
// the mistake the wrong gradient reproduces (the test computes what each common mistake would
// give).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/kernels/gelu.h"
#include "autograd/ops.h"
#include "labs/01-autograd/lab.h"
#include "labs/common/lab_testing.h"

namespace shardscope::labs {
namespace {

constexpr double kEps = 1e-5;  // the LayerNorm eps of the tests (the framework's default)
constexpr double kPi = 3.14159265358979323846;

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// ---- the student's functions as autograd ops ----------------------------------------------------

// A tensor of `shape` holding what a student function returned; a wrong count is an error that
// says which result and what it should hold.
Tensor as_tensor(Context& ctx, const Shape& shape, const std::vector<double>& values,
                 const std::string& what, const std::string& hint) {
  if (static_cast<std::int64_t>(values.size()) != shape.numel()) {
    throw ArgumentError(what + " has " + std::to_string(values.size()) + " values, expected " +
                        std::to_string(shape.numel()) + " (" + shape.str() + "): " + hint);
  }
  return Tensor::from_vector(ctx, shape, values, DType::f64);
}

std::int64_t rows_of(const Tensor& x) {
  return x.numel() / x.dim(-1);
}

// gelu with the student's backward.
Tensor lab_gelu(const Tensor& x) {
  return apply_function1(
      "lab_gelu", {x},
      [](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
        save.push_back(in[0]);
        return std::vector<Tensor>{gelu(in[0])};
      },
      [](const std::vector<Tensor>& saved, const std::vector<Tensor>& dy) {
        const Tensor& sx = saved[0];
        const std::vector<double> dx = gelu_backward(sx.to_vector(), dy[0].to_vector());
        return std::vector<Tensor>{
            as_tensor(sx.ctx(), sx.shape(), dx, "gelu_backward's dx", "one value per element")};
      });
}

// layernorm with the student's backward.
Tensor lab_layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  return apply_function1(
      "lab_layernorm", {x, gamma, beta},
      [](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
        save.push_back(in[0]);
        save.push_back(in[1]);
        return std::vector<Tensor>{layernorm(in[0], in[1], in[2], kEps)};
      },
      [](const std::vector<Tensor>& saved, const std::vector<Tensor>& dy) {
        const Tensor &sx = saved[0], &sgamma = saved[1];
        const LayerNormGrads g = layernorm_backward(
            sx.to_vector(), sgamma.to_vector(), dy[0].to_vector(), rows_of(sx), sx.dim(-1), kEps);
        Context& ctx = sx.ctx();
        return std::vector<Tensor>{
            as_tensor(ctx, sx.shape(), g.dx, "layernorm_backward's dx", "dx has x's shape"),
            as_tensor(ctx, sgamma.shape(), g.dgamma, "layernorm_backward's dgamma",
                      "dgamma is [h]: did you sum dy * xhat over the rows?"),
            as_tensor(ctx, sgamma.shape(), g.dbeta, "layernorm_backward's dbeta",
                      "dbeta is [h]: did you sum dy over the rows?")};
      });
}

// softmax (causal or not) with the student's backward.
Tensor lab_softmax(const Tensor& x, bool causal) {
  return apply_function1(
      "lab_softmax", {x},
      [causal](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
        Tensor y = softmax(in[0], causal);
        save.push_back(y);
        return std::vector<Tensor>{y};
      },
      [](const std::vector<Tensor>& saved, const std::vector<Tensor>& dy) {
        const Tensor& y = saved[0];
        const std::vector<double> dx =
            softmax_backward(y.to_vector(), dy[0].to_vector(), rows_of(y), y.dim(-1));
        return std::vector<Tensor>{
            as_tensor(y.ctx(), y.shape(), dx, "softmax_backward's dx", "dx has y's shape")};
      });
}

// ---- running and judging ------------------------------------------------------------------------

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// The gradients of sum(op(inputs) * dy) with respect to every input, from fresh leaf copies.
std::vector<std::vector<double>> gradients(const Op& op, const std::vector<Tensor>& inputs,
                                           const Tensor& dy) {
  std::vector<Tensor> leaves;
  for (const Tensor& in : inputs) {
    Tensor leaf = in.clone();
    leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  op(leaves).backward(dy);
  std::vector<std::vector<double>> grads;
  for (const Tensor& leaf : leaves) grads.push_back(leaf.grad().to_vector());
  return grads;
}

// A common mistake: the gradient it would give, and what to tell the student.
struct Mistake {
  std::vector<double> would_give;
  std::string hint;
};

// The hint of the first mistake `got` reproduces, or `fallback`.
std::string diagnose(const std::vector<double>& got, const std::vector<Mistake>& mistakes,
                     const std::string& fallback) {
  for (const Mistake& m : mistakes) {
    if (m.would_give.size() == got.size() && matches("", got, m.would_give, 1)) return m.hint;
  }
  return fallback;
}

// got against want (t = 1: one device), with the diagnosis as the hint.
::testing::AssertionResult judge(const std::string& what, const std::vector<double>& got,
                                 const std::vector<double>& want,
                                 const std::vector<Mistake>& mistakes,
                                 const std::string& fallback) {
  return matches(what, got, want, 1,
                 Hints()
                     .if_negated("a sign is flipped")
                     .if_zeros("did you return a zero-filled vector?")
                     .otherwise(diagnose(got, mistakes, fallback)));
}

void expect_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << "the finite differences disagree with your backward:\n" << r.report;
}

Tensor leaf(Context& ctx, const Shape& shape, std::uint64_t seed, double std, double mean,
            const char* name) {
  Tensor t = Tensor::randn(ctx, shape, seed, std, DType::f64, mean);
  t.set_requires_grad(true).set_name(name);
  return t;
}

// ---- GeLU ---------------------------------------------------------------------------------------

struct GeluCase {
  Context ctx;
  Tensor x, dy;
  GeluCase() {
    std::vector<double> values;  // -5 .. 5, through 0, where the tanh and erf forms differ most
    for (int i = 0; i <= 40; ++i) values.push_back(-5.0 + 0.25 * i);
    x = Tensor::from_vector(ctx, {41}, values, DType::f64);
    x.set_requires_grad(true).set_name("x");
    dy = Tensor::randn(ctx, {41}, 11, 1.0, DType::f64, 0.5);
  }
};

std::vector<Mistake> gelu_mistakes(const std::vector<double>& x, const std::vector<double>& dy) {
  const double c = kernels::kSqrt2OverPi, k = kernels::kGeluCubic;
  std::vector<Mistake> m(10);
  m[0].hint =
      "this is the derivative of the exact (erf) GeLU, Phi(x) + x phi(x); the framework "
      "uses the tanh approximation (autograd/kernels/gelu.h)";
  m[1].hint =
      "only the first product-rule term, 0.5 (1 + tanh(u)): the term 0.5 x d tanh(u)/dx is "
      "missing";
  m[2].hint = "this is gelu'(x) itself: multiply it by dy (the chain rule)";
  m[3].hint =
      "du/dx is missing the cubic term's derivative: du/dx = sqrt(2/pi) (1 + 3 * 0.044715 "
      "x^2)";
  m[4].hint = "du/dx: the derivative of 0.044715 x^3 is 3 * 0.044715 x^2 (the 3 is missing)";
  m[5].hint = "d tanh(u)/du = 1 - tanh(u)^2, not 1 - tanh(u)";
  m[6].hint = "this is gelu(x) * dy, the forward value, not the derivative";
  m[7].hint =
      "twice the derivative: the factor 0.5 of gelu(x) = 0.5 x (1 + tanh(u)) is missing from "
      "both product-rule terms";
  m[8].hint =
      "the first product-rule term is 0.5 (1 + tanh(u)): its 0.5 is missing (the second term is "
      "right)";
  m[9].hint =
      "the second product-rule term is 0.5 x (1 - tanh(u)^2) du/dx: its 0.5 is missing (the "
      "first term is right)";
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double t = std::tanh(c * (v + k * v * v * v));
    const double phi = std::exp(-0.5 * v * v) / std::sqrt(2.0 * kPi);
    const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    m[0].would_give.push_back(dy[i] * (cdf + v * phi));
    m[1].would_give.push_back(dy[i] * 0.5 * (1.0 + t));
    m[2].would_give.push_back(kernels::gelu_grad(v));
    m[3].would_give.push_back(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c));
    m[4].would_give.push_back(dy[i] *
                              (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + k * v * v)));
    m[5].would_give.push_back(
        dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t) * c * (1.0 + 3.0 * k * v * v)));
    m[6].would_give.push_back(dy[i] * kernels::gelu(v));
    const double du = c * (1.0 + 3.0 * k * v * v);
    m[7].would_give.push_back(dy[i] * ((1.0 + t) + v * (1.0 - t * t) * du));
    m[8].would_give.push_back(dy[i] * ((1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
    m[9].would_give.push_back(dy[i] * (0.5 * (1.0 + t) + v * (1.0 - t * t) * du));
  }
  return m;
}

// A gelu dx against the framework's on the case's x and dy.
::testing::AssertionResult judge_gelu(GeluCase& c, const std::vector<double>& got) {
  const Op framework = [](const std::vector<Tensor>& in) { return gelu(in[0]); };
  const std::vector<double> want = gradients(framework, {c.x}, c.dy)[0];
  return judge("gelu dx", got, want, gelu_mistakes(c.x.to_vector(), c.dy.to_vector()),
               "check each factor of the product rule on 0.5 x (1 + tanh(u))");
}

TEST(GeluBackward, MatchesTheFrameworksBackward) {
  GeluCase c;
  const Op lab = [](const std::vector<Tensor>& in) { return lab_gelu(in[0]); };
  EXPECT_TRUE(judge_gelu(c, gradients(lab, {c.x}, c.dy)[0]));
}

TEST(GeluBackward, PassesTheGradientCheck) {
  GeluCase c;
  expect_gradcheck([](const std::vector<Tensor>& in) { return lab_gelu(in[0]); }, {c.x});
}

// ---- LayerNorm ----------------------------------------------------------------------------------

// x [3, 2, 8] (6 rows of h = 8) with a mean away from 0, gamma away from 1 so that a forgotten
// gamma shows, and an output gradient with a mean away from 0 so that every row sum matters.
struct LayerNormCase {
  Context ctx;
  Tensor x, gamma, beta, dy;
  LayerNormCase()
      : x(leaf(ctx, {3, 2, 8}, 21, 1.5, 0.3, "x")),
        gamma(leaf(ctx, {8}, 22, 0.5, 1.0, "gamma")),
        beta(leaf(ctx, {8}, 23, 0.5, 0.0, "beta")),
        dy(Tensor::randn(ctx, {3, 2, 8}, 24, 1.0, DType::f64, 0.4)) {}
  std::int64_t rows() const { return 6; }
  std::int64_t h() const { return 8; }
};

// The per-row pieces of the LayerNorm backward, from which the test builds each mistake.
struct LayerNormPieces {
  std::vector<double> xhat, dxhat;  // [rows, h]
  std::vector<double> rstd;         // [rows]
  std::vector<double> mean_dxhat, mean_dxhat_xhat;
};

LayerNormPieces pieces(const LayerNormCase& c, double var_divisor_offset = 0.0, double eps = kEps) {
  const std::vector<double> x = c.x.to_vector(), g = c.gamma.to_vector(), dy = c.dy.to_vector();
  const std::int64_t h = c.h();
  const double n = static_cast<double>(h);
  LayerNormPieces p;
  for (std::int64_t r = 0; r < c.rows(); ++r) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < h; ++j) mean += x[at(r * h + j)] / n;
    for (std::int64_t j = 0; j < h; ++j) {
      var += (x[at(r * h + j)] - mean) * (x[at(r * h + j)] - mean);
    }
    const double rstd = 1.0 / std::sqrt(var / (n + var_divisor_offset) + eps);
    double s1 = 0.0, s2 = 0.0;
    for (std::int64_t j = 0; j < h; ++j) {
      const double xhat = (x[at(r * h + j)] - mean) * rstd;
      const double dxhat = dy[at(r * h + j)] * g[at(j)];
      p.xhat.push_back(xhat);
      p.dxhat.push_back(dxhat);
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    p.rstd.push_back(rstd);
    p.mean_dxhat.push_back(s1 / n);
    p.mean_dxhat_xhat.push_back(s2 / n);
  }
  return p;
}

// dx = rstd (dxhat - a * mean(dxhat) - b * xhat * mean(dxhat xhat)), a and b in {-1, 0, 1}; with
// `gamma` false, dxhat = dy.
std::vector<double> layernorm_dx(const LayerNormCase& c, const LayerNormPieces& p, double a,
                                 double b, bool gamma = true) {
  const std::vector<double> dy = c.dy.to_vector(), g = c.gamma.to_vector();
  std::vector<double> dx;
  for (std::int64_t r = 0; r < c.rows(); ++r) {
    double s1 = 0.0, s2 = 0.0;
    for (std::int64_t j = 0; j < c.h(); ++j) {
      const std::size_t i = at(r * c.h() + j);
      const double dxhat = gamma ? p.dxhat[i] : dy[i];
      s1 += dxhat / static_cast<double>(c.h());
      s2 += dxhat * p.xhat[i] / static_cast<double>(c.h());
    }
    for (std::int64_t j = 0; j < c.h(); ++j) {
      const std::size_t i = at(r * c.h() + j);
      const double dxhat = gamma ? p.dxhat[i] : dy[i];
      dx.push_back(p.rstd[at(r)] * (dxhat - a * s1 - b * p.xhat[i] * s2));
    }
  }
  return dx;
}

// sum over rows of v [rows, h] (or only the last row's term: "=" instead of "+=").
std::vector<double> row_sum(const LayerNormCase& c, const std::vector<double>& v,
                            bool last_row_only = false) {
  std::vector<double> out(at(c.h()), 0.0);
  for (std::int64_t r = last_row_only ? c.rows() - 1 : 0; r < c.rows(); ++r) {
    for (std::int64_t j = 0; j < c.h(); ++j) out[at(j)] += v[at(r * c.h() + j)];
  }
  return out;
}

// a * b element by element.
std::vector<double> times(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] *= b[i];
  return a;
}

std::vector<std::vector<double>> layernorm_gradients(const LayerNormCase& c, bool lab) {
  const Op op =
      lab ? Op([](const std::vector<Tensor>& in) { return lab_layernorm(in[0], in[1], in[2]); })
          : Op([](const std::vector<Tensor>& in) { return layernorm(in[0], in[1], in[2], kEps); });
  return gradients(op, {c.x, c.gamma, c.beta}, c.dy);
}

TEST(LayerNormBackward, DbetaMatchesTheFrameworks) {
  LayerNormCase c;
  const std::vector<double> dy = c.dy.to_vector();
  const LayerNormPieces p = pieces(c);  // p.dxhat = dy * gamma
  const std::vector<Mistake> mistakes{
      {row_sum(c, dy, true),
       "only the last row counts: accumulate (+=) dy over the rows instead of assigning (=)"},
      {row_sum(c, p.dxhat), "dbeta = sum over rows of dy; gamma does not enter it"},
      {row_sum(c, times(dy, p.xhat)), "that is dgamma's formula; dbeta = sum over rows of dy"}};
  EXPECT_TRUE(judge("dbeta", layernorm_gradients(c, true)[2], layernorm_gradients(c, false)[2],
                    mistakes, "dbeta: did you sum dy over the rows?"));
}

TEST(LayerNormBackward, DgammaMatchesTheFrameworks) {
  LayerNormCase c;
  const std::vector<double> dy = c.dy.to_vector();
  const LayerNormPieces p = pieces(c), unbiased = pieces(c, -1.0), no_eps = pieces(c, 0.0, 0.0);
  const std::vector<Mistake> mistakes{
      {row_sum(c, dy),
       "that is dbeta; dgamma = sum over rows of dy * xhat (the xhat factor is missing)"},
      {row_sum(c, times(dy, c.x.to_vector())),
       "dgamma multiplies dy by the normalised xhat = (x - mean) rstd, not by x"},
      {row_sum(c, times(p.dxhat, p.xhat)),  // dxhat = dy * gamma
       "dgamma = sum over rows of dy * xhat, with no gamma factor"},
      {row_sum(c, times(dy, p.xhat), true),
       "only the last row counts: accumulate (+=) over the rows instead of assigning (=)"},
      {row_sum(c, times(dy, unbiased.xhat)),
       "xhat is off: the variance is biased, divide by h, not h - 1"},
      {row_sum(c, times(dy, no_eps.xhat)),
       "xhat is off: rstd = 1 / sqrt(var + eps), and eps is missing"}};
  EXPECT_TRUE(judge("dgamma", layernorm_gradients(c, true)[1], layernorm_gradients(c, false)[1],
                    mistakes, "dgamma = sum over rows of dy * xhat"));
}

// A LayerNorm dx against the framework's on the case's inputs.
::testing::AssertionResult judge_layernorm_dx(const LayerNormCase& c,
                                              const std::vector<double>& got) {
  const LayerNormPieces p = pieces(c);
  const std::vector<Mistake> mistakes{
      {layernorm_dx(c, p, 0.0, 0.0),
       "dx off: did you forget the mean terms (the gradient through mean and variance)? "
       "dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))"},
      {layernorm_dx(c, p, 1.0, 0.0),
       "the gradient through the variance is missing: - xhat * mean(dxhat * xhat)"},
      {layernorm_dx(c, p, 0.0, 1.0), "the gradient through the mean is missing: - mean(dxhat)"},
      {layernorm_dx(c, p, 1.0, 1.0, false),
       "dxhat = dy * gamma: gamma is missing (it would pass with gamma = 1; the test's is not)"},
      {layernorm_dx(c, pieces(c, -1.0), 1.0, 1.0),
       "the variance is biased: divide by h, not h - 1"},
      {layernorm_dx(c, pieces(c, 0.0, 0.0), 1.0, 1.0),
       "rstd = 1 / sqrt(var + eps): eps is missing"},
      {layernorm_dx(c, p, -1.0, 1.0),
       "the sign of the mean term is flipped: dx = rstd (dxhat - mean(dxhat) - xhat "
       "mean(dxhat xhat)), minus mean(dxhat), not plus"},
      {layernorm_dx(c, p, 1.0, -1.0),
       "the sign of the variance term is flipped: dx = rstd (dxhat - mean(dxhat) - xhat "
       "mean(dxhat xhat)), minus xhat mean(dxhat xhat), not plus"},
      {layernorm_dx(c, p, -1.0, -1.0),
       "the signs of both mean terms are flipped: dx = rstd (dxhat - mean(dxhat) - xhat "
       "mean(dxhat xhat))"}};
  return judge("dx", got, layernorm_gradients(c, false)[0], mistakes,
               "compare with dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))");
}

TEST(LayerNormBackward, DxMatchesTheFrameworks) {
  LayerNormCase c;
  EXPECT_TRUE(judge_layernorm_dx(c, layernorm_gradients(c, true)[0]));
}

TEST(LayerNormBackward, PassesTheGradientCheck) {
  LayerNormCase c;
  expect_gradcheck([](const std::vector<Tensor>& in) { return lab_layernorm(in[0], in[1], in[2]); },
                   {c.x, c.gamma, c.beta});
}

// ---- softmax ------------------------------------------------------------------------------------

std::vector<Mistake> softmax_mistakes(const Tensor& y_tensor, const Tensor& dy_tensor) {
  const std::vector<double> y = y_tensor.to_vector(), dy = dy_tensor.to_vector();
  const std::int64_t n = y_tensor.dim(-1), rows = y_tensor.numel() / n;
  std::vector<Mistake> m(6);
  m[0].hint = "softmax dx = y*dy: the -y*sum(y*dy) term is missing";
  m[1].hint = "the row sum is sum_k y_k dy_k, not sum_k dy_k";
  m[2].hint =
      "y (1 - y) dy is only the diagonal of the Jacobian; its off-diagonal terms -y_i y_j "
      "give the -y * sum(y*dy) term";
  m[3].hint = "sum(y*dy) runs over each row on its own, not over the whole tensor";
  m[4].hint = "dx_j = y_j (dy_j - sum_k y_k dy_k): the factor y_j is missing";
  m[5].hint = "the row sum carries over from the rows before: start it at 0 for every row";
  double total = 0.0, running = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) total += y[i] * dy[i];
  for (std::int64_t r = 0; r < rows; ++r) {
    double dot = 0.0, sum_dy = 0.0;
    for (std::int64_t j = 0; j < n; ++j) {
      dot += y[at(r * n + j)] * dy[at(r * n + j)];
      sum_dy += dy[at(r * n + j)];
    }
    running += dot;
    for (std::int64_t j = 0; j < n; ++j) {
      const std::size_t i = at(r * n + j);
      m[0].would_give.push_back(y[i] * dy[i]);
      m[1].would_give.push_back(y[i] * (dy[i] - sum_dy));
      m[2].would_give.push_back(y[i] * (1.0 - y[i]) * dy[i]);
      m[3].would_give.push_back(y[i] * (dy[i] - total));
      m[4].would_give.push_back(dy[i] - dot);
      m[5].would_give.push_back(y[i] * (dy[i] - running));
    }
  }
  return m;
}

void expect_softmax_matches(const Shape& shape, bool causal) {
  Context ctx;
  const Tensor x = leaf(ctx, shape, 31, 1.5, 0.0, "x");
  const Tensor dy = Tensor::randn(ctx, shape, 32, 1.0, DType::f64, 0.3);
  const Op lab = [causal](const std::vector<Tensor>& in) { return lab_softmax(in[0], causal); };
  const Op framework = [causal](const std::vector<Tensor>& in) { return softmax(in[0], causal); };
  const std::vector<double> got = gradients(lab, {x}, dy)[0];
  const std::vector<double> want = gradients(framework, {x}, dy)[0];
  Tensor y;
  {
    NoGradGuard no_grad(ctx);
    y = softmax(x, causal);
  }
  EXPECT_TRUE(judge(std::string(causal ? "causal " : "") + "softmax dx " + shape.str(), got, want,
                    softmax_mistakes(y, dy), "per row, dx_j = y_j (dy_j - sum_k y_k dy_k)"));
}

TEST(SoftmaxBackward, MatchesTheFrameworksBackward) {
  expect_softmax_matches({4, 6}, false);
}

// Causal attention scores [b, s_q, s_k]: square, and with more keys than queries.
TEST(SoftmaxBackward, CausalMatchesTheFrameworksBackward) {
  expect_softmax_matches({2, 5, 5}, true);
  expect_softmax_matches({2, 3, 5}, true);
}

TEST(SoftmaxBackward, CausalPassesTheGradientCheck) {
  Context ctx;
  const Tensor x = leaf(ctx, {2, 4, 4}, 33, 1.5, 0.0, "x");
  expect_gradcheck([](const std::vector<Tensor>& in) { return lab_softmax(in[0], true); }, {x});
}

#ifdef SHARDSCOPE_LAB_GRADER_TESTS
// ---- the graders' own tests (the instructor's tree only) ----------------------------------------
// Planted student mistakes, judged by the helpers the lab's tests use: the hint must name each.

// The planted gelu_backward: the 0.5 of gelu(x) = 0.5 x (1 + tanh(u)) dropped from one term (the
// first, the second) or from both.
std::vector<double> gelu_backward_without_half(const std::vector<double>& x,
                                               const std::vector<double>& dy, bool first,
                                               bool second) {
  std::vector<double> dx;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], c = kernels::kSqrt2OverPi, k = kernels::kGeluCubic;
    const double t = std::tanh(c * (v + k * v * v * v));
    const double du = c * (1.0 + 3.0 * k * v * v);
    dx.push_back(dy[i] *
                 ((first ? 1.0 : 0.5) * (1.0 + t) + (second ? 1.0 : 0.5) * v * (1.0 - t * t) * du));
  }
  return dx;
}

void expect_gelu_hint(bool first, bool second, const std::string& hint) {
  GeluCase c;
  const ::testing::AssertionResult r =
      judge_gelu(c, gelu_backward_without_half(c.x.to_vector(), c.dy.to_vector(), first, second));
  ASSERT_FALSE(r);
  EXPECT_THAT(r.message(), ::testing::HasSubstr(hint));
}

TEST(GraderHints, GeluWithoutItsHalfIsNamed) {
  expect_gelu_hint(true, true, "the factor 0.5 of gelu(x) = 0.5 x (1 + tanh(u)) is missing");
  expect_gelu_hint(true, false, "the first product-rule term is 0.5 (1 + tanh(u)): its 0.5 is");
  expect_gelu_hint(false, true, "the second product-rule term is 0.5 x (1 - tanh(u)^2) du/dx");
}

// The planted layernorm_backward's dx: one of the two mean terms added instead of subtracted.
std::vector<double> layernorm_dx_with_flipped_sign(const LayerNormCase& c, bool mean_term) {
  const std::vector<double> x = c.x.to_vector(), g = c.gamma.to_vector(), dy = c.dy.to_vector();
  const std::int64_t h = c.h();
  const double n = static_cast<double>(h);
  std::vector<double> dx;
  for (std::int64_t r = 0; r < c.rows(); ++r) {
    const auto row = x.begin() + r * h;
    double mean = 0.0, var = 0.0, s1 = 0.0, s2 = 0.0;
    for (std::int64_t j = 0; j < h; ++j) mean += row[j] / n;
    for (std::int64_t j = 0; j < h; ++j) var += (row[j] - mean) * (row[j] - mean) / n;
    const double rstd = 1.0 / std::sqrt(var + kEps);
    for (std::int64_t j = 0; j < h; ++j) {
      s1 += dy[at(r * h + j)] * g[at(j)] / n;
      s2 += dy[at(r * h + j)] * g[at(j)] * (row[j] - mean) * rstd / n;
    }
    for (std::int64_t j = 0; j < h; ++j) {
      const double dxhat = dy[at(r * h + j)] * g[at(j)], xhat = (row[j] - mean) * rstd;
      dx.push_back(mean_term ? rstd * (dxhat + s1 - xhat * s2) : rstd * (dxhat - s1 + xhat * s2));
    }
  }
  return dx;
}

TEST(GraderHints, LayerNormDxWithAFlippedSignIsNamed) {
  LayerNormCase c;
  for (bool mean_term : {true, false}) {
    const ::testing::AssertionResult r =
        judge_layernorm_dx(c, layernorm_dx_with_flipped_sign(c, mean_term));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.message(),
                ::testing::HasSubstr(mean_term ? "the sign of the mean term is flipped"
                                               : "the sign of the variance term is flipped"));
  }
}
#endif

}  // namespace
}  // namespace shardscope::labs
