// ReferenceBackend: reductions and the row-wise kernels (LayerNorm, RMSNorm, softmax, losses), each
// a plain loop over rows under a comment giving its shapes and formula. Everything sums in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/reference/reference_backend.h"

namespace shardscope {

using reference::with_floating;

namespace {

// The length of the rows of the last dim (1 for a scalar) and how many rows there are.
std::int64_t row_length(const Tensor& t) {
  return t.rank() ? t.dim(-1) : 1;
}

std::int64_t row_count(const Tensor& t) {
  const std::int64_t n = row_length(t);
  return n ? t.numel() / n : 0;
}

}  // namespace

// x [R, M] (R = the leading dims flattened), out [M]:  out[j] = sum_r x[r][j]
void ReferenceBackend::sum_to_suffix(const Tensor& x, Tensor& out) {
  with_floating(x.dtype(), "sum_to_suffix", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t m = out.numel(), rows = m ? x.numel() / m : 0;
    for (std::int64_t j = 0; j < m; ++j) {
      double sum = 0.0;
      for (std::int64_t r = 0; r < rows; ++r) sum += x.data<T>()[r * m + j];
      out.data<T>()[j] = static_cast<T>(sum);
    }
  });
}

// out[0] = sum_i x[i]
void ReferenceBackend::sum_all(const Tensor& x, Tensor& out) {
  with_floating(x.dtype(), "sum_all", [&](auto tag) {
    using T = decltype(tag);
    double sum = 0.0;
    for (std::int64_t i = 0; i < x.numel(); ++i) sum += x.data<T>()[i];
    out.data<T>()[0] = static_cast<T>(sum);
  });
}

// x, y [R, H]; gamma, beta [H]; mean, rstd [R]. For each row r (two passes, not Welford):
//   mean = sum_j x_j / H,  var = sum_j (x_j - mean)^2 / H,  rstd = 1 / sqrt(var + eps)
//   y_j = (x_j - mean) rstd gamma_j + beta_j
void ReferenceBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  check_statistics_dtype(x, mean, "layernorm_forward");
  check_statistics_dtype(x, rstd, "layernorm_forward");
  with_floating(x.dtype(), "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using Statistic = reference::statistic_t<T>;  // f32 for bf16 / f16
    const std::int64_t h = row_length(x);
    for (std::int64_t r = 0; r < row_count(x); ++r) {
      const T* in = x.data<T>() + r * h;
      double mu = 0.0;
      for (std::int64_t j = 0; j < h; ++j) mu += in[j];
      mu /= static_cast<double>(h);
      double var = 0.0;
      for (std::int64_t j = 0; j < h; ++j) var += (in[j] - mu) * (in[j] - mu);
      var /= static_cast<double>(h);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (std::int64_t j = 0; j < h; ++j) {
        const double xhat = (in[j] - mu) * inv;
        y.data<T>()[r * h + j] = static_cast<T>(xhat * gamma.data<T>()[j] + beta.data<T>()[j]);
      }
      mean.data<Statistic>()[r] = static_cast<Statistic>(mu);
      rstd.data<Statistic>()[r] = static_cast<Statistic>(inv);
    }
  });
}

// With the forward's mean and rstd per row, xhat_j = (x_j - mean) rstd and dxhat_j = dy_j gamma_j:
//   dx_j = rstd (dxhat_j - sum_k dxhat_k / H - xhat_j sum_k dxhat_k xhat_k / H)
//   dgamma_j = sum_r dy_rj xhat_rj,  dbeta_j = sum_r dy_rj
void ReferenceBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                          const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                          Tensor& dgamma, Tensor& dbeta) {
  check_statistics_dtype(x, mean, "layernorm_backward");
  check_statistics_dtype(x, rstd, "layernorm_backward");
  with_floating(x.dtype(), "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using Statistic = reference::statistic_t<T>;  // f32 for bf16 / f16
    const std::int64_t h = row_length(x), rows = row_count(x);
    std::vector<double> dg(static_cast<std::size_t>(h), 0.0), db(static_cast<std::size_t>(h), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const double mu = mean.data<Statistic>()[r], inv = rstd.data<Statistic>()[r];
      std::vector<double> xhat(static_cast<std::size_t>(h)), dxhat(static_cast<std::size_t>(h));
      double sum_dxhat = 0.0, sum_dxhat_xhat = 0.0;
      for (std::int64_t j = 0; j < h; ++j) {
        const auto u = static_cast<std::size_t>(j);
        const double g = dy.data<T>()[r * h + j];
        xhat[u] = (x.data<T>()[r * h + j] - mu) * inv;
        dxhat[u] = g * gamma.data<T>()[j];
        sum_dxhat += dxhat[u];
        sum_dxhat_xhat += dxhat[u] * xhat[u];
        dg[u] += g * xhat[u];
        db[u] += g;
      }
      for (std::int64_t j = 0; j < h; ++j) {
        const auto u = static_cast<std::size_t>(j);
        const double n = static_cast<double>(h);
        dx.data<T>()[r * h + j] =
            static_cast<T>(inv * (dxhat[u] - sum_dxhat / n - xhat[u] * sum_dxhat_xhat / n));
      }
    }
    for (std::int64_t j = 0; j < h; ++j) {
      dgamma.data<T>()[j] = static_cast<T>(dg[static_cast<std::size_t>(j)]);
      dbeta.data<T>()[j] = static_cast<T>(db[static_cast<std::size_t>(j)]);
    }
  });
}

// x, y [R, H]; gamma [H]; rstd [R]. For each row r:
//   rstd = 1 / sqrt(sum_j x_j^2 / H + eps),  y_j = x_j rstd gamma_j
void ReferenceBackend::rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                                       Tensor& rstd) {
  check_statistics_dtype(x, rstd, "rmsnorm_forward");
  with_floating(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using Statistic = reference::statistic_t<T>;  // f32 for bf16 / f16
    const std::int64_t h = row_length(x);
    for (std::int64_t r = 0; r < row_count(x); ++r) {
      const T* in = x.data<T>() + r * h;
      double squares = 0.0;
      for (std::int64_t j = 0; j < h; ++j) squares += static_cast<double>(in[j]) * in[j];
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(h) + eps);
      for (std::int64_t j = 0; j < h; ++j) {
        y.data<T>()[r * h + j] = static_cast<T>(in[j] * inv * gamma.data<T>()[j]);
      }
      rstd.data<Statistic>()[r] = static_cast<Statistic>(inv);
    }
  });
}

// With the forward's rstd per row, xhat_j = x_j rstd and dxhat_j = dy_j gamma_j:
//   dx_j = rstd (dxhat_j - xhat_j sum_k dxhat_k xhat_k / H)
//   dgamma_j = sum_r dy_rj xhat_rj
void ReferenceBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                        const Tensor& rstd, Tensor& dx, Tensor& dgamma) {
  check_statistics_dtype(x, rstd, "rmsnorm_backward");
  with_floating(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using Statistic = reference::statistic_t<T>;  // f32 for bf16 / f16
    const std::int64_t h = row_length(x), rows = row_count(x);
    std::vector<double> dg(static_cast<std::size_t>(h), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const double inv = rstd.data<Statistic>()[r];
      std::vector<double> xhat(static_cast<std::size_t>(h)), dxhat(static_cast<std::size_t>(h));
      double sum_dxhat_xhat = 0.0;
      for (std::int64_t j = 0; j < h; ++j) {
        const auto u = static_cast<std::size_t>(j);
        const double g = dy.data<T>()[r * h + j];
        xhat[u] = x.data<T>()[r * h + j] * inv;
        dxhat[u] = g * gamma.data<T>()[j];
        sum_dxhat_xhat += dxhat[u] * xhat[u];
        dg[u] += g * xhat[u];
      }
      for (std::int64_t j = 0; j < h; ++j) {
        const auto u = static_cast<std::size_t>(j);
        dx.data<T>()[r * h + j] =
            static_cast<T>(inv * (dxhat[u] - xhat[u] * sum_dxhat_xhat / static_cast<double>(h)));
      }
    }
    for (std::int64_t j = 0; j < h; ++j) {
      dgamma.data<T>()[j] = static_cast<T>(dg[static_cast<std::size_t>(j)]);
    }
  });
}

// x, y [.., S_q, S_k]; each row over the keys:  y_j = exp(x_j - max) / sum_k exp(x_k - max).
// Causal: query i (of S_q, aligned with the END of the keys, so the last query sees every key)
// sees keys j <= i + S_k - S_q; the max and sum run over those, and the others get y_j = 0.
void ReferenceBackend::softmax_forward(const Tensor& x, bool causal, Tensor& y) {
  with_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t sk = row_length(x), sq = causal ? x.dim(-2) : 1;
    for (std::int64_t r = 0; r < row_count(x); ++r) {
      const T* in = x.data<T>() + r * sk;
      const std::int64_t query = r % sq;
      const std::int64_t last_key = causal ? query + sk - sq : sk - 1;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j <= last_key; ++j) mx = std::max(mx, static_cast<double>(in[j]));
      double total = 0.0;
      for (std::int64_t j = 0; j <= last_key; ++j) total += std::exp(in[j] - mx);
      for (std::int64_t j = 0; j < sk; ++j) {
        y.data<T>()[r * sk + j] =
            j <= last_key ? static_cast<T>(std::exp(in[j] - mx) / total) : T(0);
      }
    }
  });
}

// y, dy, dx [.., S]; each row:  dx_j = y_j (dy_j - sum_k dy_k y_k)
void ReferenceBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  with_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t s = row_length(y);
    for (std::int64_t r = 0; r < row_count(y); ++r) {
      const T* p = y.data<T>() + r * s;
      const T* g = dy.data<T>() + r * s;
      double dot = 0.0;
      for (std::int64_t k = 0; k < s; ++k) dot += static_cast<double>(g[k]) * p[k];
      for (std::int64_t j = 0; j < s; ++j) {
        dx.data<T>()[r * s + j] = static_cast<T>(p[j] * (g[j] - dot));
      }
    }
  });
}

// loss = sum_i (pred_i - target_i)^2 / N  (N = 0 gives 0 / 0 = NaN)
void ReferenceBackend::mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  with_floating(pred.dtype(), "mse_forward", [&](auto tag) {
    using T = decltype(tag);
    double sum = 0.0;
    for (std::int64_t i = 0; i < pred.numel(); ++i) {
      const double d = static_cast<double>(pred.data<T>()[i]) - target.data<T>()[i];
      sum += d * d;
    }
    loss.data<T>()[0] = static_cast<T>(sum / static_cast<double>(pred.numel()));
  });
}

// logits, probs [N, C]; targets N class indices. Per row, with max = max_j x_j and
// Z = sum_j exp(x_j - max):  probs_j = exp(x_j - max) / Z,  loss_r = log Z + max - x_target.
// loss = sum_r loss_r / N  (N = 0 gives 0 / 0 = NaN).
void ReferenceBackend::cross_entropy_forward(const Tensor& logits, const std::int64_t* targets,
                                             Tensor& probs, Tensor& loss) {
  with_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t n = logits.dim(0), c = logits.dim(1);
    double total = 0.0;
    for (std::int64_t r = 0; r < n; ++r) {
      const T* x = logits.data<T>() + r * c;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(x[j]));
      double z = 0.0;
      for (std::int64_t j = 0; j < c; ++j) z += std::exp(x[j] - mx);
      for (std::int64_t j = 0; j < c; ++j) {
        probs.data<T>()[r * c + j] = static_cast<T>(std::exp(x[j] - mx) / z);
      }
      total += std::log(z) + mx - x[targets[r]];
    }
    loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
  });
}

// dlogits [N, C]:  dlogits_rj = scale (probs_rj - [j == target_r])
void ReferenceBackend::cross_entropy_backward(const Tensor& probs, const std::int64_t* targets,
                                              double scale, Tensor& dlogits) {
  with_floating(probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t n = probs.dim(0), c = probs.dim(1);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < c; ++j) {
        const double onehot = j == targets[r] ? 1.0 : 0.0;
        dlogits.data<T>()[r * c + j] =
            static_cast<T>(scale * (probs.data<T>()[r * c + j] - onehot));
      }
    }
  });
}

}  // namespace shardscope
