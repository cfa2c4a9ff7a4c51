// The row-wise kernels (reductions, LayerNorm, RMSNorm, softmax, losses) on the tuned CPU backend
// against the reference backend, f32 and f64, with rows above the CPU backend's 2^14 elements per
// thread. Then the planted-bug check: CPU kernels rebuilt from autograd/kernels/'s shared math with
// one piece of it wrong, as a bug in that shared math would be; the comparison must catch each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/kernels/gelu.h"
#include "autograd/kernels/layernorm.h"
#include "autograd/kernels/losses.h"
#include "autograd/kernels/softmax.h"
#include "autograd/kernels/swiglu.h"
#include "tests/autograd/reference_backend_testing.h"

namespace shardscope {
namespace {

using testing::compare_with_reference;
using testing::Mismatch;
using testing::NamedTensors;
using testing::OpCase;
using testing::test_input;

OpCase reductions_case(Shape shape, Shape suffix) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const Tensor x = test_input(ctx, shape, dt, 1);
    Tensor out = Tensor::empty(ctx, suffix, dt), all = Tensor::empty(ctx, {1}, dt);
    be.sum_to_suffix(x, out);
    be.sum_all(x, all);
    return NamedTensors{{"sum_to_suffix", out}, {"sum_all", all}};
  };
}

// Forward, then backward from the forward's own mean and rstd; x uniform in [low, high).
OpCase layernorm_case(Shape shape, double low = -3.0, double high = 5.0) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const std::int64_t h = shape[shape.rank() - 1], rows = shape.numel() / h;
    const Tensor x = test_input(ctx, shape, dt, 1, low, high), dy = test_input(ctx, shape, dt, 2);
    const Tensor gamma = test_input(ctx, {h}, dt, 3), beta = test_input(ctx, {h}, dt, 4);
    Tensor y = Tensor::empty(ctx, shape, dt), dx = Tensor::empty(ctx, shape, dt);
    Tensor mean = Tensor::empty(ctx, {rows}, statistics_dtype(dt));
    Tensor rstd = Tensor::empty(ctx, {rows}, statistics_dtype(dt));
    Tensor dgamma = Tensor::empty(ctx, {h}, dt), dbeta = Tensor::empty(ctx, {h}, dt);
    be.layernorm_forward(x, gamma, beta, 1e-5, y, mean, rstd);
    be.layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
    return NamedTensors{{"y", y},   {"mean", mean},     {"rstd", rstd},
                        {"dx", dx}, {"dgamma", dgamma}, {"dbeta", dbeta}};
  };
}

// Forward, then backward from the forward's own rstd. x in [-1, 5): rows with a nonzero mean, where
// a centred statistic would differ from the mean square.
OpCase rmsnorm_case(Shape shape) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const std::int64_t h = shape[shape.rank() - 1], rows = shape.numel() / h;
    const Tensor x = test_input(ctx, shape, dt, 1, -1.0, 5.0), dy = test_input(ctx, shape, dt, 2);
    const Tensor gamma = test_input(ctx, {h}, dt, 3);
    Tensor y = Tensor::empty(ctx, shape, dt), dx = Tensor::empty(ctx, shape, dt);
    Tensor rstd = Tensor::empty(ctx, {rows}, statistics_dtype(dt));
    Tensor dgamma = Tensor::empty(ctx, {h}, dt);
    be.rmsnorm_forward(x, gamma, 1e-5, y, rstd);
    be.rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
    return NamedTensors{{"y", y}, {"rstd", rstd}, {"dx", dx}, {"dgamma", dgamma}};
  };
}

OpCase softmax_case(Shape shape, bool causal) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const Tensor x = test_input(ctx, shape, dt, 1, -4.0, 4.0), dy = test_input(ctx, shape, dt, 2);
    Tensor y = Tensor::empty(ctx, shape, dt), dx = Tensor::empty(ctx, shape, dt);
    be.softmax_forward(x, causal, y);
    be.softmax_backward(y, dy, dx);
    return NamedTensors{{"y", y}, {"dx", dx}};
  };
}

OpCase losses_case(std::int64_t n, std::int64_t c) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const Tensor logits = test_input(ctx, {n, c}, dt, 1, -5.0, 5.0);
    const Tensor target = test_input(ctx, {n, c}, dt, 2);
    std::vector<std::int64_t> targets;
    for (std::int64_t r = 0; r < n; ++r) targets.push_back((r * 7 + 3) % c);
    Tensor mse = Tensor::empty(ctx, {1}, dt), ce = Tensor::empty(ctx, {1}, dt);
    Tensor probs = Tensor::empty(ctx, {n, c}, dt), dlogits = Tensor::empty(ctx, {n, c}, dt);
    be.mse_forward(logits, target, mse);
    be.cross_entropy_forward(logits, targets.data(), probs, ce);
    be.cross_entropy_backward(probs, targets.data(), 1.0 / static_cast<double>(n ? n : 1), dlogits);
    return NamedTensors{
        {"mse", mse}, {"cross_entropy", ce}, {"probs", probs}, {"dlogits", dlogits}};
  };
}

class CpuVsReferenceRows : public ::testing::TestWithParam<DType> {
 protected:
  void expect_match(const OpCase& op, const std::string& what) {
    const Mismatch m = compare_with_reference(cpu_.backend(), cpu_, op, GetParam());
    EXPECT_EQ(m.count, 0) << what << " [" << dtype_name(GetParam()) << "]: first " << m.first;
  }

  Context cpu_{0, Device::cpu()};
};

TEST_P(CpuVsReferenceRows, Reductions) {
  expect_match(reductions_case({5, 3, 7}, {3, 7}), "sums of [5, 3, 7]");
  expect_match(reductions_case({130, 257}, {257}), "sums of [130, 257]");
  expect_match(reductions_case({4000, 3}, {3}), "sums of [4000, 3]");
  expect_match(reductions_case({1}, {1}), "sums of [1]");
  // sum_all in blocks of lanes (cpu::blocked_sum): several blocks and a tail of 5.
  expect_match(reductions_case({301, 1001}, {1001}), "sums of [301, 1001]");
}

TEST_P(CpuVsReferenceRows, LayerNormForwardAndBackward) {
  for (const Shape& s :
       {Shape{1, 1}, Shape{3, 5}, Shape{2, 3, 7}, Shape{130, 257}, Shape{3, 4000}}) {
    expect_match(layernorm_case(s), "layernorm " + s.str());
  }
  // f32 rows far from 0 against their spread: the CPU backend centres each element in f32, where
  // the mean rounded to one float would shift every output by (mean - f32(mean)) rstd, some 3e-4
  // here. (The 2-byte types cannot hold such rows, their spacing at 1e4 being 32 or more; f64
  // rows, in double on both backends, differ there by their sums' orders, 1e-8 of an x of 1e4,
  // beyond f64's tolerance.)
  if (GetParam() == DType::f32) {
    expect_match(layernorm_case({130, 257}, 9999.0, 10001.0), "layernorm of [130, 257] near 1e4");
  }
}

TEST_P(CpuVsReferenceRows, RmsNormForwardAndBackward) {
  for (const Shape& s :
       {Shape{1, 1}, Shape{3, 5}, Shape{2, 3, 7}, Shape{130, 257}, Shape{3, 4000}}) {
    expect_match(rmsnorm_case(s), "rmsnorm " + s.str());
  }
}

TEST_P(CpuVsReferenceRows, SoftmaxPlainAndCausalForwardAndBackward) {
  // Causal queries are aligned at the end of the keys: s_q < s_k sees more keys, s_q > s_k leaves
  // the first queries with no key at all (rows of zeros).
  for (const Shape& s : {Shape{2, 3, 5}, Shape{4, 7, 7}, Shape{3, 5, 9}, Shape{2, 9, 4},
                         Shape{8, 64, 65}, Shape{1, 1}}) {
    expect_match(softmax_case(s, false), "softmax " + s.str());
    if (s.rank() >= 2) expect_match(softmax_case(s, true), "causal softmax " + s.str());
  }
}

TEST_P(CpuVsReferenceRows, LossesIncludingNaNOverZeroRows) {
  for (auto [n, c] : {std::pair<std::int64_t, std::int64_t>{5, 7}, {300, 129}, {1, 1}, {0, 7}}) {
    expect_match(losses_case(n, c),
                 "losses [" + std::to_string(n) + ", " + std::to_string(c) + "]");
  }
  Context ref(0, Device::reference());
  const NamedTensors empty = losses_case(0, 7)(ref.backend(), ref, GetParam());
  EXPECT_TRUE(std::isnan(empty[0].second.item())) << "mse of no element is 0 / 0";
  EXPECT_TRUE(std::isnan(empty[1].second.item())) << "cross-entropy of no row is 0 / 0";
}

// Causal rows with a NaN among their visible keys: such a row's visible outputs are NaN (its
// max passes over the NaN, its exponential makes the sum NaN) and its masked ones stay exactly
// +0, on the CPU backend (whose f32 rows pad the visible part with -inf to a multiple of 16) as
// on the reference; the other rows are probabilities. Rows of 40 keys: row 4 sees 5 (padded to
// 16, zeros after), row 20 sees 21 (padded to 32).
TEST_P(CpuVsReferenceRows, ACausalRowWithANaNKeepsItsMaskedEntriesZero) {
  constexpr std::int64_t kSeq = 40;
  const std::vector<std::int64_t> nan_rows{4, 20};
  std::vector<double> values(static_cast<std::size_t>(kSeq * kSeq));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<double>(i));
  for (std::int64_t q : nan_rows) values[static_cast<std::size_t>(q * kSeq + 3)] = std::nan("");
  for (Device device : {Device::cpu(), Device::reference()}) {
    Context ctx(0, device);
    const Tensor x = Tensor::from_vector(ctx, {kSeq, kSeq}, values, GetParam());
    Tensor y = Tensor::empty(ctx, {kSeq, kSeq}, GetParam());
    ctx.backend().softmax_forward(x, true, y);
    const std::vector<double> out = y.to_vector();
    for (std::int64_t q = 0; q < kSeq; ++q) {
      const bool nan_row = std::count(nan_rows.begin(), nan_rows.end(), q) > 0;
      for (std::int64_t k = 0; k < kSeq; ++k) {
        const double v = out[static_cast<std::size_t>(q * kSeq + k)];
        const std::string where = std::string(ctx.backend().name()) + " y[" + std::to_string(q) +
                                  ", " + std::to_string(k) + "] = " + std::to_string(v);
        if (k > q) {
          EXPECT_TRUE(v == 0.0 && !std::signbit(v)) << where << ", expected +0 (masked)";
        } else if (nan_row) {
          EXPECT_TRUE(std::isnan(v)) << where << ", expected NaN (its row holds a NaN)";
        } else {
          EXPECT_TRUE(v > 0.0 && v <= 1.0) << where << ", expected a probability";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CpuVsReferenceRows,
                         ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16),
                         testing::DTypeName());

// A bug in the shared row math of autograd/kernels/, as the CPU (and CUDA) backend would run it.
enum class RowMathBug {
  none,               // the pieces as they are: the rebuilt kernels must pass
  unbiased_variance,  // LayerNorm's variance M2 / (n - 1) instead of M2 / n
  gelu_grad_cubic,    // gelu' with 0.044715 x^2 where the derivative of x^3 gives 3 * 0.044715 x^2
  causal_off_by_one,  // the causal mask lets each query see one key of its future
  ce_without_max,     // cross-entropy's row loss forgets to add back the max it subtracted
  rms_centered,       // RMSNorm's statistics centred (the variance) instead of the mean square
  rms_mean_dxhat,     // RMSNorm's dx subtracts LayerNorm's mean(dxhat) as well
  swiglu_silu_grad,   // silu' as s (1 + a s) instead of s (1 + a (1 - s))
};

// The CPU backend with one op rebuilt from autograd/kernels/'s pieces, one of them planted wrong;
// every other op goes to the CPU backend. Its memory is the CPU backend's (host memory).
class PlantedBugBackend final : public Backend {
 public:
  explicit PlantedBugBackend(Backend& cpu, RowMathBug bug) : cpu_(cpu), bug_(bug) {}
  const char* name() const override { return "planted"; }
  void* allocate(std::size_t n) override { return cpu_.allocate(n); }
  void deallocate(void* p, std::size_t n) override { cpu_.deallocate(p, n); }
  void copy_from_host(void* d, const void* s, std::size_t n) override {
    cpu_.copy_from_host(d, s, n);
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override { cpu_.copy_to_host(d, s, n); }
  void gemm(const GemmDesc& g, DType t, const void* a, const void* b, void* c) override {
    cpu_.gemm(g, t, a, b, c);
  }
  void lower_triangle(const TriangleDesc& g, DType t, const void* s, void* d) override {
    cpu_.lower_triangle(g, t, s, d);
  }
  void fill(Tensor& o, double v) override { cpu_.fill(o, v); }
  void copy(const Tensor& s, Tensor& d) override { cpu_.copy(s, d); }
  void permute(const Tensor& s, const std::vector<int>& p, Tensor& d) override {
    cpu_.permute(s, p, d);
  }
  void copy_slice(const Tensor& s, int dim, std::int64_t so, Tensor& d, std::int64_t dof,
                  std::int64_t n) override {
    cpu_.copy_slice(s, dim, so, d, dof, n);
  }
  void copy_strided(const StridedCopy& c, const Tensor& s, Tensor& d) override {
    cpu_.copy_strided(c, s, d);
  }
  void add(const Tensor& a, const Tensor& b, double x, double y, Tensor& o) override {
    cpu_.add(a, b, x, y, o);
  }
  void mul(const Tensor& a, const Tensor& b, Tensor& o) override { cpu_.mul(a, b, o); }
  void scale(const Tensor& x, double a, Tensor& o) override { cpu_.scale(x, a, o); }
  void gelu_forward(const Tensor& x, Tensor& y) override { cpu_.gelu_forward(x, y); }
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void swiglu_forward(const Tensor& x, Tensor& y) override { cpu_.swiglu_forward(x, y); }
  void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void rope_forward(const Tensor& x, int dim, std::int64_t first, double base, bool inverse,
                    Tensor& y) override {
    cpu_.rope_forward(x, dim, first, base, inverse, y);
  }
  void dropout_forward(const Tensor& x, const DropoutSpec& s, Tensor& m, Tensor& y) override {
    cpu_.dropout_forward(x, s, m, y);
  }
  void dropout_backward(const Tensor& dy, const Tensor& m, double p, Tensor& dx) override {
    cpu_.dropout_backward(dy, m, p, dx);
  }
  void sum_to_suffix(const Tensor& x, Tensor& o) override { cpu_.sum_to_suffix(x, o); }
  void sum_all(const Tensor& x, Tensor& o) override { cpu_.sum_all(x, o); }
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& g, const Tensor& m,
                          const Tensor& r, Tensor& dx, Tensor& dg, Tensor& db) override {
    cpu_.layernorm_backward(dy, x, g, m, r, dx, dg, db);
  }
  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                       Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                        Tensor& dx, Tensor& dgamma) override;
  void softmax_forward(const Tensor& x, bool causal, Tensor& y) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    cpu_.softmax_backward(y, dy, dx);
  }
  void mse_forward(const Tensor& p, const Tensor& t, Tensor& l) override {
    cpu_.mse_forward(p, t, l);
  }
  void cross_entropy_forward(const Tensor& logits, const std::int64_t* targets, Tensor& probs,
                             Tensor& loss) override;
  void cross_entropy_backward(const Tensor& p, const std::int64_t* t, double s,
                              Tensor& d) override {
    cpu_.cross_entropy_backward(p, t, s, d);
  }

 private:
  // f64 only: the tests below run the planted kernels in f64, where the tolerance is tightest.
  template <class F>
  void rows(const Tensor& x, F&& f) {
    const std::int64_t n = x.dim(-1);
    for (std::int64_t r = 0; r < x.numel() / n; ++r) f(r, n);
  }

  Backend& cpu_;
  RowMathBug bug_;
};

void PlantedBugBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<double>()[i];
    double grad = kernels::gelu_grad(v);
    if (bug_ == RowMathBug::gelu_grad_cubic) {
      const double s = kernels::gelu_half_one_plus_tanh(v);
      grad = s + 2 * v * s * (1 - s) * kernels::kSqrt2OverPi * (1 + kernels::kGeluCubic * v * v);
    }
    dx.data<double>()[i] = dy.data<double>()[i] * grad;
  }
}

void PlantedBugBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  rows(x, [&](std::int64_t r, std::int64_t h) {
    kernels::Welford<double> w =
        kernels::layernorm_row_statistics(x.data<double>() + r * h, h, 0, 1);
    double inv = kernels::layernorm_rstd(w, eps);
    if (bug_ == RowMathBug::unbiased_variance) inv = 1.0 / std::sqrt(w.m2 / (w.count - 1) + eps);
    kernels::layernorm_normalise_row(x.data<double>() + r * h, gamma.data<double>(),
                                     beta.data<double>(), y.data<double>() + r * h, h, 0, 1, w.mean,
                                     inv);
    mean.data<double>()[r] = w.mean;
    rstd.data<double>()[r] = inv;
  });
}

void PlantedBugBackend::swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  for (std::int64_t i = 0; i < dy.numel(); ++i) {
    const double a = x.data<double>()[2 * i], b = x.data<double>()[2 * i + 1];
    double* out = dx.data<double>() + 2 * i;
    kernels::swiglu_grad(a, b, dy.data<double>()[i], out[0], out[1]);
    if (bug_ == RowMathBug::swiglu_silu_grad) {
      const double s = kernels::sigmoid(a);
      out[0] = dy.data<double>()[i] * b * (s * (1 + a * s));
    }
  }
}

void PlantedBugBackend::rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                                        Tensor& rstd) {
  const bool centered = bug_ == RowMathBug::rms_centered;
  rows(x, [&](std::int64_t r, std::int64_t h) {
    const kernels::Welford<double> w =
        kernels::layernorm_row_statistics(x.data<double>() + r * h, h, 0, 1, centered);
    const double inv = kernels::layernorm_rstd(w, eps);
    kernels::layernorm_normalise_row(x.data<double>() + r * h, gamma.data<double>(),
                                     static_cast<const double*>(nullptr), y.data<double>() + r * h,
                                     h, 0, 1, 0.0, inv);
    rstd.data<double>()[r] = inv;
  });
}

void PlantedBugBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                         const Tensor& rstd, Tensor& dx, Tensor& dgamma) {
  const std::int64_t h = x.dim(-1);
  std::vector<double> dg(static_cast<std::size_t>(h), 0.0);
  rows(x, [&](std::int64_t r, std::int64_t n) {
    const double* in = x.data<double>() + r * n;
    const double* gy = dy.data<double>() + r * n;
    const double inv = rstd.data<double>()[r];
    const kernels::LayerNormRowSums s =
        kernels::layernorm_backward_row_sums(gy, in, gamma.data<double>(), n, 0, 1, 0.0, inv);
    const double length = static_cast<double>(n);
    const double mean_dxhat = bug_ == RowMathBug::rms_mean_dxhat ? s.dxhat / length : 0.0;
    kernels::layernorm_backward_row(gy, in, gamma.data<double>(), dx.data<double>() + r * n, n, 0,
                                    1, 0.0, inv, mean_dxhat, s.dxhat_xhat / length);
    for (std::int64_t j = 0; j < n; ++j) {
      kernels::layernorm_param_grad_add(dg[static_cast<std::size_t>(j)], nullptr, gy[j], in[j], 0.0,
                                        inv);
    }
  });
  for (std::int64_t j = 0; j < h; ++j) dgamma.data<double>()[j] = dg[static_cast<std::size_t>(j)];
}

void PlantedBugBackend::softmax_forward(const Tensor& x, bool causal, Tensor& y) {
  const std::int64_t sq = causal ? x.dim(-2) : 1;
  rows(x, [&](std::int64_t r, std::int64_t sk) {
    const double* in = x.data<double>() + r * sk;
    std::int64_t visible = kernels::softmax_visible(r, sq, sk, causal);
    if (bug_ == RowMathBug::causal_off_by_one && causal) visible = std::min(visible + 1, sk);
    const double mx = kernels::row_max(in, visible, 0, 1);
    const double z = kernels::row_sum_exp(in, visible, 0, 1, mx);
    kernels::softmax_write_row(in, y.data<double>() + r * sk, sk, visible, 0, 1, mx, z);
  });
}

void PlantedBugBackend::cross_entropy_forward(const Tensor& logits, const std::int64_t* targets,
                                              Tensor& probs, Tensor& loss) {
  double total = 0.0;
  rows(logits, [&](std::int64_t r, std::int64_t c) {
    const double* in = logits.data<double>() + r * c;
    const double mx = kernels::row_max(in, c, 0, 1), z = kernels::row_sum_exp(in, c, 0, 1, mx);
    kernels::softmax_write_row(in, probs.data<double>() + r * c, c, c, 0, 1, mx, z);
    total += bug_ == RowMathBug::ce_without_max
                 ? std::log(z) - in[targets[r]]
                 : kernels::cross_entropy_row_loss(z, mx, in[targets[r]]);
  });
  loss.data<double>()[0] = total / static_cast<double>(logits.dim(0));
}

// Each planted bug makes the comparison with the reference backend fail on the op it lives in,
// on the shapes the tests above use, while the same kernels without the bug pass: the comparison
// would catch such a bug in autograd/kernels/, which the CPU and CUDA backends share.
TEST(ReferenceBackend, PlantedRowMathBugsAreCaught) {
  Context cpu(0, Device::cpu());
  struct Planted {
    RowMathBug bug;
    OpCase op;
    const char* what;
  };
  const Planted cases[] = {
      {RowMathBug::unbiased_variance, layernorm_case({130, 257}), "unbiased variance"},
      {RowMathBug::gelu_grad_cubic,
       [](Backend& be, Context& ctx, DType dt) {
         const Tensor x = test_input(ctx, {1000}, dt, 1, -6.0, 6.0),
                      dy = test_input(ctx, {1000}, dt, 2);
         Tensor dx = Tensor::empty(ctx, {1000}, dt);
         be.gelu_backward(x, dy, dx);
         return NamedTensors{{"dx", dx}};
       },
       "gelu' without the 3"},
      {RowMathBug::causal_off_by_one, softmax_case({4, 7, 7}, true), "causal off by one"},
      {RowMathBug::ce_without_max, losses_case(5, 7), "cross-entropy without the max"},
      {RowMathBug::rms_centered, rmsnorm_case({130, 257}), "rmsnorm centred"},
      {RowMathBug::rms_mean_dxhat, rmsnorm_case({3, 5}), "rmsnorm dx with mean(dxhat)"},
      {RowMathBug::swiglu_silu_grad,
       [](Backend& be, Context& ctx, DType dt) {
         const Tensor x = test_input(ctx, {50, 8}, dt, 1, -6.0, 6.0);
         const Tensor dy = test_input(ctx, {50, 4}, dt, 2);
         Tensor dx = Tensor::empty(ctx, {50, 8}, dt);
         be.swiglu_backward(x, dy, dx);
         return NamedTensors{{"dx", dx}};
       },
       "silu' with s for 1 - s"},
  };
  for (const Planted& p : cases) {
    PlantedBugBackend correct(cpu.backend(), RowMathBug::none);
    const Mismatch clean = compare_with_reference(correct, cpu, p.op, DType::f64);
    EXPECT_EQ(clean.count, 0) << p.what << ", not planted: " << clean.first;
    PlantedBugBackend planted(cpu.backend(), p.bug);
    const Mismatch caught = compare_with_reference(planted, cpu, p.op, DType::f64);
    EXPECT_GT(caught.count, 0) << p.what << ": planted, yet every element matched the reference";
  }
}

}  // namespace
}  // namespace shardscope
