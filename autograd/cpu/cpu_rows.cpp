// CpuBackend: reductions and the row-wise kernels (layernorm, softmax, losses).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/dispatch.h"
#include "autograd/kernels/welford.h"

namespace shardscope {

using cpu::dispatch_floating;

namespace {

// Rows of the last dim of t.
std::int64_t row_length(const Tensor& t) {
  return t.rank() ? t.dim(-1) : 1;
}

}  // namespace

void CpuBackend::sum_to_suffix(const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "sum_to_suffix", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const std::int64_t n = x.numel(), m = out.numel();
    std::vector<double> acc(static_cast<std::size_t>(m), 0.0);
    for (std::int64_t i = 0; i < n; i += m) {
      for (std::int64_t j = 0; j < m; ++j) acc[static_cast<std::size_t>(j)] += in[i + j];
    }
    T* o = out.data<T>();
    for (std::int64_t j = 0; j < m; ++j) o[j] = static_cast<T>(acc[static_cast<std::size_t>(j)]);
  });
}

void CpuBackend::sum_all(const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "sum_all", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    double acc = 0.0;
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) acc += in[i];
    *out.data<T>() = static_cast<T>(acc);
  });
}

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * h;
      T* out = y.data<T>() + r * h;
      kernels::Welford<double> w;
      for (std::int64_t j = 0; j < h; ++j) kernels::welford_add(w, static_cast<double>(in[j]));
      const double inv = 1.0 / std::sqrt(w.m2 / static_cast<double>(h) + eps);
      for (std::int64_t j = 0; j < h; ++j) {
        out[j] = static_cast<T>((static_cast<double>(in[j]) - w.mean) * inv) * g[j] + b[j];
      }
      mean.data<T>()[r] = static_cast<T>(w.mean);
      rstd.data<T>()[r] = static_cast<T>(inv);
    }
  });
}

void CpuBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                    const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                    Tensor& dgamma, Tensor& dbeta) {
  dispatch_floating(x.dtype(), "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
    const T* g = gamma.data<T>();
    std::vector<double> dg(static_cast<std::size_t>(h), 0.0), db(static_cast<std::size_t>(h), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * h;
      const T* gy = dy.data<T>() + r * h;
      T* out = dx.data<T>() + r * h;
      const double mu = mean.data<T>()[r], inv = rstd.data<T>()[r];
      double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
      for (std::int64_t j = 0; j < h; ++j) {
        const double xhat = (in[j] - mu) * inv;
        const double dxhat = static_cast<double>(gy[j]) * g[j];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        dg[static_cast<std::size_t>(j)] += gy[j] * xhat;
        db[static_cast<std::size_t>(j)] += gy[j];
      }
      const double mean_dxhat = sum_dxhat / static_cast<double>(h);
      const double mean_dxhat_xhat = sum_dxhat_xhat / static_cast<double>(h);
      for (std::int64_t j = 0; j < h; ++j) {
        const double xhat = (in[j] - mu) * inv;
        const double dxhat = static_cast<double>(gy[j]) * g[j];
        out[j] = static_cast<T>(inv * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
      }
    }
    for (std::int64_t j = 0; j < h; ++j) {
      dgamma.data<T>()[j] = static_cast<T>(dg[static_cast<std::size_t>(j)]);
      dbeta.data<T>()[j] = static_cast<T>(db[static_cast<std::size_t>(j)]);
    }
  });
}

void CpuBackend::softmax_forward(const Tensor& x, bool causal, Tensor& y) {
  dispatch_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t sk = row_length(x), rows = x.numel() / std::max<std::int64_t>(sk, 1);
    const std::int64_t sq = causal ? x.dim(-2) : 1;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * sk;
      T* out = y.data<T>() + r * sk;
      // Causal: query i (aligned to the end of the keys) sees keys 0 .. i + sk - sq.
      const std::int64_t visible = causal ? (r % sq) + (sk - sq) + 1 : sk;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < visible; ++j) mx = std::max(mx, static_cast<double>(in[j]));
      double total = 0.0;
      for (std::int64_t j = 0; j < visible; ++j) total += std::exp(in[j] - mx);
      for (std::int64_t j = 0; j < visible; ++j) {
        out[j] = static_cast<T>(std::exp(in[j] - mx) / total);
      }
      for (std::int64_t j = visible; j < sk; ++j) out[j] = T(0);
    }
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t sk = row_length(y), rows = y.numel() / std::max<std::int64_t>(sk, 1);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* p = y.data<T>() + r * sk;
      const T* g = dy.data<T>() + r * sk;
      T* out = dx.data<T>() + r * sk;
      double dot = 0.0;
      for (std::int64_t j = 0; j < sk; ++j) dot += static_cast<double>(g[j]) * p[j];
      for (std::int64_t j = 0; j < sk; ++j) out[j] = static_cast<T>(p[j] * (g[j] - dot));
    }
  });
}

void CpuBackend::mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  dispatch_floating(pred.dtype(), "mse_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* p = pred.data<T>();
    const T* t = target.data<T>();
    double acc = 0.0;
    const std::int64_t n = pred.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(p[i]) - t[i];
      acc += d * d;
    }
    *loss.data<T>() = static_cast<T>(acc / static_cast<double>(n));
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
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(in[j]));
      double z = 0.0;
      for (std::int64_t j = 0; j < c; ++j) z += std::exp(in[j] - mx);
      for (std::int64_t j = 0; j < c; ++j) out[j] = static_cast<T>(std::exp(in[j] - mx) / z);
      total += std::log(z) + mx - in[targets[r]];
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
        out[j] = static_cast<T>(scale * (p[j] - (j == targets[r] ? 1.0 : 0.0)));
      }
    }
  });
}

}  // namespace shardscope
