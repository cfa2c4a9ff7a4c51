// CpuBackend: reductions and the row-wise kernels (layernorm, rmsnorm, softmax, losses).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "autograd/cpu/column_sums.h"
#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/dispatch.h"
#include "autograd/cpu/exp_floats.h"
#include "autograd/kernels/layernorm.h"
#include "autograd/kernels/losses.h"
#include "autograd/kernels/softmax.h"

namespace shardscope {

using cpu::dispatch_floating;

namespace {

// Rows of the last dim of t.
std::int64_t row_length(const Tensor& t) {
  return t.rank() ? t.dim(-1) : 1;
}

// The fewest rows worth a thread: about 16k elements.
std::int64_t row_grain(std::int64_t row_length) {
  return std::max<std::int64_t>((std::int64_t{1} << 14) / std::max<std::int64_t>(row_length, 1), 1);
}

// combine(...combine(init, term(0))..., term(n - 1)) over kLanes lanes that the compiler keeps in
// vector registers (the shared kernels' single chain cannot vectorise): lane l takes the j = l mod
// kLanes, then the lanes are combined in order. A fixed order, so the same bits on every run and
// thread count.
template <std::int64_t kLanes, class Acc, class Term, class Combine>
Acc lane_reduce(std::int64_t n, Acc init, Term term, Combine combine) {
  Acc lanes[kLanes];
  for (Acc& l : lanes) l = init;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] = combine(lanes[l], term(j + l));
  }
  for (; j < n; ++j) lanes[j % kLanes] = combine(lanes[j % kLanes], term(j));
  Acc total = init;
  for (Acc l : lanes) total = combine(total, l);
  return total;
}

// sum_j term(j) for j < n in double, over 8 lanes (lane_reduce).
template <class Term>
double lane_sum(std::int64_t n, Term term) {
  return lane_reduce<8>(n, 0.0, term, [](double a, double b) { return a + b; });
}

// A row's statistics in double, as kernels::Welford (count, mean, the sum of squared
// deviations; centered = false: count, 0, the sum of squares) in two passes over 8 lanes
// (lane_sum), the row in cache for the second. Welford's update (the shared kernels', which
// merge pieces of rows) divides at every element: a [512, 256] f32 LayerNorm forward took 542 us
// on one Zen 3 core with it, 172 us with this. Two passes in double are at least as accurate.
template <class T>
kernels::Welford<double> row_statistics(const T* x, std::int64_t h, bool centered) {
  kernels::Welford<double> w;
  w.count = static_cast<double>(h);
  if (!centered) {
    w.m2 = lane_sum(h, [x](std::int64_t j) {
      const auto v = static_cast<double>(x[j]);
      return v * v;
    });
    return w;
  }
  w.mean = lane_sum(h, [x](std::int64_t j) { return static_cast<double>(x[j]); }) / w.count;
  w.m2 = lane_sum(h, [x, mean = w.mean](std::int64_t j) {
    const double d = static_cast<double>(x[j]) - mean;
    return d * d;
  });
  return w;
}

// kernels::layernorm_backward_row_sums as two sums over 8 lanes (lane_sum), the row in cache
// for the second: the kernel's two chains of additions wait on each add. centered = false: mean 0.
template <class T>
kernels::LayerNormRowSums backward_row_sums(const T* dy, const T* x, const T* gamma, std::int64_t h,
                                            double mean, double rstd) {
  auto dxhat = [=](std::int64_t j) {
    return static_cast<double>(dy[j]) * static_cast<double>(gamma[j]);
  };
  kernels::LayerNormRowSums sums;
  sums.dxhat = lane_sum(h, dxhat);
  sums.dxhat_xhat = lane_sum(
      h, [=](std::int64_t j) { return dxhat(j) * ((static_cast<double>(x[j]) - mean) * rstd); });
  return sums;
}

// What softmax's exponentials are computed in: f64 rows in double, the others in f32.
template <class T>
using exp_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The lanes a softmax row's loops pad to (softmax_row): an AVX-512 vector of floats.
constexpr std::int64_t kRowPad = 16;

// The largest of v[0 .. n) as kernels::max_of takes it (a NaN is passed over; -inf when n = 0),
// 8 at a time in a vector of GCC's and Clang's extension: the same comparison over lanes in an
// array (lane_reduce) stayed scalar, a load, a compare and a spill per element.
inline float max_of_floats(const float* v, std::int64_t n) {
  typedef float Floats8 __attribute__((vector_size(32)));
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  Floats8 lanes = Floats8{} + kLowest;
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    Floats8 x;
    std::memcpy(&x, v + k, sizeof x);
    lanes = lanes < x ? x : lanes;
  }
  float mx = kLowest;
  for (int l = 0; l < 8; ++l) mx = mx < lanes[l] ? lanes[l] : mx;
  for (; k < n; ++k) mx = mx < v[k] ? v[k] : mx;
  return mx;
}

// One softmax row of n elements, the first `visible` unmasked (none: a row of zeros); e holds n
// scratch values. f64: kernels::row_max, then each exp(x_j - max) in double (libm) kept for the
// sum and the quotients, the shared kernel's arithmetic in its order. f32 and the 2-byte types:
// max in f32 (exact), x_j - max in f32, exp by cpu::exp_floats (vectorised, within 1.5 ulp), the
// sum in double (lane_sum), y_j = e_j (1 / sum) rounded to T. Against the double path an element
// differs by about (|x_j - max| + 3) 2^-24 of itself: relative to the row's largest probability,
// under 2^-24 (e^-r r <= 1/e), far inside the CPU backend's tolerance against the reference.
template <class T>
void softmax_row(const T* in, T* out, std::int64_t n, std::int64_t visible, exp_t<T>* e) {
  const std::int64_t seen = std::max<std::int64_t>(visible, 0);
  if constexpr (std::is_same_v<T, double>) {
    const double mx = kernels::row_max(in, seen, 0, 1);
    double total = 0.0;
    for (std::int64_t j = 0; j < seen; ++j) total += (e[j] = std::exp(in[j] - mx));
    for (std::int64_t j = 0; j < seen; ++j) out[j] = e[j] / total;
    for (std::int64_t j = seen; j < n; ++j) out[j] = T(0);
  } else {
    // The row's visible values into e, then -inf up to `padded` (seen rounded up to whole
    // vectors, within the row), so that the loops after run in whole vectors (a causal row's seen
    // is 1 to s: its tails are most of a short row) and read e, never in past seen (a loop that
    // reads in[k] only for k < seen cannot load whole vectors of it). exp(-inf) = 0 adds
    // nothing to the sum (the same bits as a sum to seen) and is written as 0. With
    // max_of_floats, 8% off a [4, 8, 128, 128] causal softmax on one core (docs/benchmarks.md).
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    const std::int64_t padded = std::min(n, (seen + kRowPad - 1) / kRowPad * kRowPad);
    for (std::int64_t k = 0; k < seen; ++k) e[k] = static_cast<float>(in[k]);
    for (std::int64_t k = seen; k < padded; ++k) e[k] = kMasked;
    const float mx = max_of_floats(e, padded);
    for (std::int64_t k = 0; k < padded; ++k) e[k] -= mx;
    cpu::exp_floats(e, padded);
    const auto inverse =
        static_cast<float>(1.0 / lane_sum(padded, [&](std::int64_t k) { return double{e[k]}; }));
    for (std::int64_t k = 0; k < padded; ++k) {
      out[k] = static_cast<T>(k < seen ? e[k] * inverse : 0.0f);
    }
    for (std::int64_t j = padded; j < n; ++j) out[j] = T(0);
  }
}

// The element type of a norm's saved mean and rstd for rows of T: f32 for the 2-byte types
// (statistics_dtype in dtype.h), T otherwise.
template <class T>
using statistic_t = std::conditional_t<kernels::is_half_v<T>, float, T>;

// LayerNorm's forward, or with beta and mean null RMSNorm's (centered = false: the mean is 0 and
// there is no shift). Each thread a range of rows.
template <class T>
void normalise_rows(cpu::RowThreads& threads, const Tensor& x, const T* gamma, const T* beta,
                    double eps, Tensor& y, statistic_t<T>* mean, statistic_t<T>* rstd) {
  const bool centered = mean != nullptr;
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  threads.parallel_for(rows, row_grain(h), [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t r = first; r < end; ++r) {
      const kernels::Welford<double> w = row_statistics(x.data<T>() + r * h, h, centered);
      const double inv = kernels::layernorm_rstd(w, eps);
      if constexpr (!std::is_same_v<T, double>) {
        // kernels::layernorm_normalise_row with (x - mean) rstd in f32 where it computes it in
        // double: 8 lanes to a vector where double has 4, an f32 rounding or two apart. The mean
        // as two floats (its f32 rounding and the rest), so that a row far from 0 against its
        // spread (x = 1e4 + U(-1, 1)) does not lose (mean - f32(mean)) rstd from every element:
        // x - mean_high is exact for x near the mean.
        const T* in = x.data<T>() + r * h;
        T* out = y.data<T>() + r * h;
        const auto mean_high = static_cast<float>(w.mean);
        const auto mean_low = static_cast<float>(w.mean - static_cast<double>(mean_high));
        const auto finv = static_cast<float>(inv);
        for (std::int64_t j = 0; j < h; ++j) {
          const float centred = (static_cast<float>(in[j]) - mean_high) - mean_low;
          const float scaled = centred * finv * static_cast<float>(gamma[j]);
          out[j] = static_cast<T>(beta ? scaled + static_cast<float>(beta[j]) : scaled);
        }
      } else {
        kernels::layernorm_normalise_row(x.data<T>() + r * h, gamma, beta, y.data<T>() + r * h, h,
                                         0, 1, w.mean, inv);
      }
      if (mean) mean[r] = static_cast<statistic_t<T>>(w.mean);
      rstd[r] = static_cast<statistic_t<T>>(inv);
    }
  });
}

// LayerNorm's backward, or with mean and dbeta null RMSNorm's: the same row math with mean = 0
// and mean(dxhat) = 0 (kernels/layernorm.h). One pass over blocks of rows: each row's dx, and its
// terms of dgamma and dbeta added into its block's sums (blocked_column_sums).
template <class T>
void normalise_rows_backward(cpu::RowThreads& threads, const Tensor& dy, const Tensor& x,
                             const T* gamma, const statistic_t<T>* mean, const statistic_t<T>* rstd,
                             Tensor& dx, T* dgamma, T* dbeta) {
  const bool centered = mean != nullptr;
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  const std::int64_t width = dbeta ? 2 * h : h;  // dgamma's sums, then dbeta's
  auto add_rows = [&](std::int64_t first, std::int64_t end, double* sums) {
    for (std::int64_t r = first; r < end; ++r) {
      const T* in = x.data<T>() + r * h;
      const T* gy = dy.data<T>() + r * h;
      const double mu = centered ? static_cast<double>(mean[r]) : 0.0, inv = rstd[r];
      const kernels::LayerNormRowSums row = backward_row_sums(gy, in, gamma, h, mu, inv);
      const double n = static_cast<double>(h);
      const double mean_dxhat = centered ? row.dxhat / n : 0.0;
      const double mean_dxhat_xhat = row.dxhat_xhat / n;
      double* dg = sums;
      double* db = dbeta ? sums + h : nullptr;
      if constexpr (!std::is_same_v<T, double>) {
        // kernels::layernorm_backward_row in f32, rounded once to T (as softmax_backward's row),
        // and the row's terms of dgamma and dbeta (in double, from the f32 xhat) in the same
        // loop: one pass over the row where the shared kernels take two, in a loop the compiler
        // vectorises; f32 roundings, far below an ulp of a 2-byte T but for cancellation, a few
        // ulps of an f32 one.
        const auto fmu = static_cast<float>(mu), finv = static_cast<float>(inv);
        const auto a = static_cast<float>(mean_dxhat), b = static_cast<float>(mean_dxhat_xhat);
        T* o = dx.data<T>() + r * h;
        auto row_pass = [&](auto with_beta) {
          for (std::int64_t j = 0; j < h; ++j) {
            const auto g = static_cast<float>(gy[j]);
            const float xhat = (static_cast<float>(in[j]) - fmu) * finv;
            o[j] = static_cast<T>(finv * (g * static_cast<float>(gamma[j]) - a - xhat * b));
            dg[j] += static_cast<double>(g) * static_cast<double>(xhat);
            if constexpr (decltype(with_beta)::value) db[j] += static_cast<double>(g);
          }
        };
        if (db) {
          row_pass(std::true_type{});
        } else {
          row_pass(std::false_type{});
        }
      } else {
        kernels::layernorm_backward_row(gy, in, gamma, dx.data<T>() + r * h, h, 0, 1, mu, inv,
                                        mean_dxhat, mean_dxhat_xhat);
        for (std::int64_t j = 0; j < h; ++j)
          kernels::layernorm_param_grad_add(dg[j], db ? db + j : nullptr, gy[j], in[j], mu, inv);
      }
    }
  };
  const std::vector<double> sums = cpu::blocked_column_sums(threads, rows, width, add_rows);
  for (std::int64_t j = 0; j < h; ++j) {
    dgamma[j] = static_cast<T>(sums[static_cast<std::size_t>(j)]);
    if (dbeta) dbeta[j] = static_cast<T>(sums[static_cast<std::size_t>(h + j)]);
  }
}

}  // namespace

void CpuBackend::sum_to_suffix(const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "sum_to_suffix", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const std::int64_t m = out.numel(), rows = m ? x.numel() / m : 0;
    const std::vector<double> sums = cpu::blocked_column_sums(
        threads_, rows, m, [&](std::int64_t first, std::int64_t end, double* acc) {
          for (std::int64_t r = first; r < end; ++r) {
            for (std::int64_t j = 0; j < m; ++j) acc[j] += static_cast<double>(in[r * m + j]);
          }
        });
    T* o = out.data<T>();
    for (std::int64_t j = 0; j < m; ++j) o[j] = static_cast<T>(sums[static_cast<std::size_t>(j)]);
  });
}

void CpuBackend::sum_all(const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "sum_all", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const double total = cpu::blocked_sum(
        threads_, x.numel(), [in](std::int64_t i) { return static_cast<double>(in[i]); });
    *out.data<T>() = static_cast<T>(total);
  });
}

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  check_statistics_dtype(x, mean, "layernorm_forward");
  check_statistics_dtype(x, rstd, "layernorm_forward");
  dispatch_floating(x.dtype(), "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows<T>(threads_, x, gamma.data<T>(), beta.data<T>(), eps, y,
                      mean.data<statistic_t<T>>(), rstd.data<statistic_t<T>>());
  });
}

void CpuBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                    const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                    Tensor& dgamma, Tensor& dbeta) {
  check_statistics_dtype(x, mean, "layernorm_backward");
  check_statistics_dtype(x, rstd, "layernorm_backward");
  dispatch_floating(x.dtype(), "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows_backward<T>(threads_, dy, x, gamma.data<T>(), mean.data<statistic_t<T>>(),
                               rstd.data<statistic_t<T>>(), dx, dgamma.data<T>(), dbeta.data<T>());
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                                 Tensor& rstd) {
  check_statistics_dtype(x, rstd, "rmsnorm_forward");
  dispatch_floating(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows<T>(threads_, x, gamma.data<T>(), nullptr, eps, y, nullptr,
                      rstd.data<statistic_t<T>>());
  });
}

void CpuBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                  const Tensor& rstd, Tensor& dx, Tensor& dgamma) {
  check_statistics_dtype(x, rstd, "rmsnorm_backward");
  dispatch_floating(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows_backward<T>(threads_, dy, x, gamma.data<T>(), nullptr,
                               rstd.data<statistic_t<T>>(), dx, dgamma.data<T>(), nullptr);
  });
}

void CpuBackend::softmax_forward(const Tensor& x, bool causal, Tensor& y) {
  dispatch_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t sk = row_length(x), rows = x.numel() / std::max<std::int64_t>(sk, 1);
    const std::int64_t sq = causal ? x.dim(-2) : 1;
    threads_.parallel_for(rows, row_grain(sk) / 4 + 1, [&](std::int64_t first, std::int64_t end) {
      std::vector<exp_t<T>> e(static_cast<std::size_t>(sk));
      for (std::int64_t r = first; r < end; ++r) {
        const std::int64_t visible = kernels::softmax_visible(r, sq, sk, causal);
        softmax_row(x.data<T>() + r * sk, y.data<T>() + r * sk, sk, visible, e.data());
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t sk = row_length(y), rows = y.numel() / std::max<std::int64_t>(sk, 1);
    threads_.parallel_for(rows, row_grain(sk), [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t r = first; r < end; ++r) {
        const T* p = y.data<T>() + r * sk;
        const T* g = dy.data<T>() + r * sk;
        T* o = dx.data<T>() + r * sk;
        if constexpr (std::is_same_v<T, double>) {
          kernels::softmax_backward_row(p, g, o, sk, 0, 1,
                                        kernels::softmax_backward_dot(p, g, sk, 0, 1));
        } else {
          // The dot in double over interleaved lanes (lane_sum), then y (dy - dot) in f32, rounded
          // once to T, where the shared row computes it in double: the two differ by f32
          // roundings, about 2^-24 |y dot|, below an ulp of a 2-byte T unless dy - dot cancels
          // more than 16 bits.
          const auto d = static_cast<float>(
              lane_sum(sk, [&](std::int64_t j) { return static_cast<double>(p[j]) * g[j]; }));
          for (std::int64_t j = 0; j < sk; ++j) {
            o[j] = static_cast<T>(static_cast<float>(p[j]) * (static_cast<float>(g[j]) - d));
          }
        }
      }
    });
  });
}

void CpuBackend::mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  dispatch_floating(pred.dtype(), "mse_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = pred.data<T>();
    const T* t = target.data<T>();
    const std::int64_t n = pred.numel();
    const double total = cpu::blocked_sum(
        threads_, n, [p, t](std::int64_t i) { return kernels::squared_error(p[i], t[i]); });
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(n));
  });
}

void CpuBackend::cross_entropy_forward(const Tensor& logits, const std::int64_t* targets,
                                       Tensor& probs, Tensor& loss) {
  dispatch_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t c = logits.dim(1), rows = logits.dim(0);
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = logits.data<T>() + r * c;
      T* out = probs.data<T>() + r * c;
      const double mx = kernels::row_max(in, c, 0, 1);
      const double z = kernels::row_sum_exp(in, c, 0, 1, mx);
      kernels::softmax_write_row(in, out, c, c, 0, 1, mx, z);
      total += kernels::cross_entropy_row_loss(z, mx, in[targets[r]]);
    }
    *loss.data<T>() = static_cast<T>(total / static_cast<double>(rows));
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& probs, const std::int64_t* targets,
                                        double scale, Tensor& dlogits) {
  dispatch_floating(probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t c = probs.dim(1), rows = probs.dim(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* p = probs.data<T>() + r * c;
      T* out = dlogits.data<T>() + r * c;
      for (std::int64_t j = 0; j < c; ++j) {
        out[j] = kernels::cross_entropy_grad(p[j], j == targets[r], scale);
      }
    }
  });
}

}  // namespace shardscope
