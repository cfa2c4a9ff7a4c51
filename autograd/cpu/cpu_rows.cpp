// CpuBackend: reductions and the row-wise kernels (layernorm, softmax, losses).
#include <algorithm>
#include <vector>

#include "autograd/cpu/cpu_backend.h"
#include "autograd/cpu/dispatch.h"
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
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * h;
      const kernels::Welford<double> w = kernels::layernorm_row_statistics(in, h, 0, 1);
      const double inv = kernels::layernorm_rstd(w, eps);
      kernels::layernorm_normalise_row(in, gamma.data<T>(), beta.data<T>(), y.data<T>() + r * h, h,
                                       0, 1, w.mean, inv);
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
      const double mu = mean.data<T>()[r], inv = rstd.data<T>()[r];
      const kernels::LayerNormRowSums sums =
          kernels::layernorm_backward_row_sums(gy, in, g, h, 0, 1, mu, inv);
      for (std::int64_t j = 0; j < h; ++j) {
        kernels::layernorm_param_grad_add(dg[static_cast<std::size_t>(j)],
                                          db[static_cast<std::size_t>(j)], gy[j], in[j], mu, inv);
      }
      const double n = static_cast<double>(h);
      kernels::layernorm_backward_row(gy, in, g, dx.data<T>() + r * h, h, 0, 1, mu, inv,
                                      sums.dxhat / n, sums.dxhat_xhat / n);
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
      const std::int64_t visible = kernels::softmax_visible(r, sq, sk, causal);
      const double mx = kernels::row_max(in, visible, 0, 1);
      const double total = kernels::row_sum_exp(in, visible, 0, 1, mx);
      kernels::softmax_write_row(in, y.data<T>() + r * sk, sk, visible, 0, 1, mx, total);
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
      const double dot = kernels::softmax_backward_dot(p, g, sk, 0, 1);
      kernels::softmax_backward_row(p, g, dx.data<T>() + r * sk, sk, 0, 1, dot);
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
    for (std::int64_t i = 0; i < n; ++i) acc += kernels::squared_error(p[i], t[i]);
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
