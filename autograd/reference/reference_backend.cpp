// ReferenceBackend: memory, GEMM, layout, elementwise ops and dropout (with its Philox generator),
// each a plain loop under a comment giving its shapes and formula.
#include "autograd/reference/reference_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "autograd/errors.h"

namespace shardscope {

using reference::with_floating;

namespace {

// The multi-index of row-major linear index `linear` in a tensor of extents `dims`.
std::vector<std::int64_t> unravel(std::int64_t linear, const Shape& dims) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(dims.rank()), 0);
  for (int d = dims.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = linear % dims[d];
    linear /= dims[d];
  }
  return index;
}

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

void* ReferenceBackend::allocate(std::size_t bytes) {
  void* p = std::calloc(bytes ? bytes : 1, 1);  // zeroed, as the table requires
  if (!p) {
    throw OutOfMemoryError("out of memory on reference: asked for " + std::to_string(bytes) +
                           " bytes (" + std::to_string(bytes >> 20) + " MiB)");
  }
  return p;
}

void ReferenceBackend::deallocate(void* data, std::size_t) {
  std::free(data);
}

void ReferenceBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void ReferenceBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// For each batch entry b, row i < m and column j < n:
//   C[b][i][j] = alpha * sum_p opA[b][i][p] * opB[b][p][j] + beta * C[b][i][j]
// opA[i][p] = A[i * lda + p], or A[p * lda + i] when trans_a; opB[p][j] = B[p * ldb + j], or
// B[j * ldb + p] when trans_b. Entry b of X starts at X + b * stride_x. As in BLAS, beta = 0
// means C is not read (whatever it held, even NaN, is overwritten).
void ReferenceBackend::gemm(const GemmDesc& d, DType dtype, const void* a, const void* b, void* c) {
  d.validate();
  with_floating(dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t e = 0; e < d.batch; ++e) {
      const T* A = static_cast<const T*>(a) + e * d.stride_a;
      const T* B = static_cast<const T*>(b) + e * d.stride_b;
      T* C = static_cast<T*>(c) + e * d.stride_c;
      for (std::int64_t i = 0; i < d.m; ++i) {
        for (std::int64_t j = 0; j < d.n; ++j) {
          double sum = 0.0;
          for (std::int64_t p = 0; p < d.k; ++p) {
            const double a_ip = d.trans_a ? A[p * d.lda + i] : A[i * d.lda + p];
            const double b_pj = d.trans_b ? B[j * d.ldb + p] : B[p * d.ldb + j];
            sum += a_ip * b_pj;
          }
          T& out = C[i * d.ldc + j];
          const double old = d.beta == 0.0 ? 0.0 : d.beta * static_cast<double>(out);
          out = static_cast<T>(d.alpha * sum + old);
        }
      }
    }
  });
}

// For each square e and i, j < n: dst[e][i][j] = src[e][i][j] when j <= i, else 0. Each row is
// read whole before it is written, so src and dst may be the same squares.
void ReferenceBackend::lower_triangle(const TriangleDesc& d, DType dtype, const void* src,
                                      void* dst) {
  d.validate();
  const std::size_t es = dtype_size(dtype);
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  std::vector<unsigned char> row(static_cast<std::size_t>(d.n) * es);
  for (std::int64_t e = 0; e < d.batch; ++e) {
    for (std::int64_t i = 0; i < d.n; ++i) {
      const unsigned char* from =
          in + static_cast<std::size_t>(e * d.stride_src + i * d.ld_src) * es;
      unsigned char* to = out + static_cast<std::size_t>(e * d.stride_dst + i * d.ld_dst) * es;
      for (std::int64_t j = 0; j < d.n; ++j) {
        for (std::size_t byte = 0; byte < es; ++byte) {
          row[static_cast<std::size_t>(j) * es + byte] =
              j <= i ? from[static_cast<std::size_t>(j) * es + byte] : 0;
        }
      }
      std::memcpy(to, row.data(), row.size());
    }
  }
}

// out[i] = value for every element (u8 too).
void ReferenceBackend::fill(Tensor& out, double value) {
  if (out.dtype() == DType::u8) {
    std::uint8_t* o = out.data<std::uint8_t>();
    for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<std::uint8_t>(value);
    return;
  }
  with_floating(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(value);
  });
}

// dst = src, byte by byte (same numel and dtype; any dtype).
void ReferenceBackend::copy(const Tensor& src, Tensor& dst) {
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  if (in == out) return;
  for (std::size_t i = 0; i < src.bytes(); ++i) out[i] = in[i];
}

// dst has dims dst[d] = src[perm[d]]:  dst[i_0, .., i_{r-1}] = src at index i_d in dim perm[d].
void ReferenceBackend::permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) {
  const std::vector<std::int64_t> src_strides = src.shape().strides();
  const std::size_t es = dtype_size(src.dtype());
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  for (std::int64_t o = 0; o < dst.numel(); ++o) {
    const std::vector<std::int64_t> index = unravel(o, dst.shape());
    std::int64_t from = 0;
    for (std::size_t d = 0; d < index.size(); ++d) {
      from += index[d] * src_strides[static_cast<std::size_t>(perm[d])];
    }
    std::memcpy(out + static_cast<std::size_t>(o) * es, in + static_cast<std::size_t>(from) * es,
                es);
  }
}

// With x = [outer, D, inner] around `dim`:
//   dst[o, dst_offset + i, k] = src[o, src_offset + i, k]  for i < count.
void ReferenceBackend::copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                                  std::int64_t dst_offset, std::int64_t count) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= src.shape()[d];
  for (int d = dim + 1; d < src.rank(); ++d) inner *= src.shape()[d];
  const std::int64_t src_dim = src.shape()[dim], dst_dim = dst.shape()[dim];
  const std::size_t es = dtype_size(src.dtype());
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < count; ++i) {
      for (std::int64_t k = 0; k < inner; ++k) {
        const std::int64_t from = (o * src_dim + src_offset + i) * inner + k;
        const std::int64_t to = (o * dst_dim + dst_offset + i) * inner + k;
        std::memcpy(out + static_cast<std::size_t>(to) * es,
                    in + static_cast<std::size_t>(from) * es, es);
      }
    }
  }
}

// For each index i over copy.dims, in the order of a row-major walk:
//   dst[dst_offset + sum_d i_d dst_strides[d]] = src[src_offset + sum_d i_d src_strides[d]].
void ReferenceBackend::copy_strided(const StridedCopy& copy, const Tensor& src, Tensor& dst) {
  copy.validate(src.numel(), dst.numel());
  const std::size_t es = dtype_size(src.dtype());
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const Shape dims(copy.dims);
  for (std::int64_t e = 0; e < copy.numel(); ++e) {
    const std::vector<std::int64_t> index = unravel(e, dims);
    std::int64_t from = copy.src_offset, to = copy.dst_offset;
    for (std::size_t d = 0; d < index.size(); ++d) {
      from += index[d] * copy.src_strides[d];
      to += index[d] * copy.dst_strides[d];
    }
    std::memcpy(out + static_cast<std::size_t>(to) * es, in + static_cast<std::size_t>(from) * es,
                es);
  }
}

// out[i] = alpha a[i] + beta b[i mod numel(b)]  (b's shape is a suffix of a's: it repeats).
void ReferenceBackend::add(const Tensor& a, const Tensor& b, double alpha, double beta,
                           Tensor& out) {
  with_floating(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t nb = b.numel();
    for (std::int64_t i = 0; nb && i < a.numel(); ++i) {
      out.data<T>()[i] = static_cast<T>(alpha * a.data<T>()[i] + beta * b.data<T>()[i % nb]);
    }
  });
}

// out[i] = a[i] b[i mod numel(b)]
void ReferenceBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  with_floating(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t nb = b.numel();
    for (std::int64_t i = 0; nb && i < a.numel(); ++i) {
      out.data<T>()[i] = static_cast<T>(static_cast<double>(a.data<T>()[i]) * b.data<T>()[i % nb]);
    }
  });
}

// out[i] = alpha x[i]
void ReferenceBackend::scale(const Tensor& x, double alpha, Tensor& out) {
  with_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      out.data<T>()[i] = static_cast<T>(alpha * x.data<T>()[i]);
    }
  });
}

namespace {

// GeLU, tanh form (Hendrycks & Gimpel 2016), in double:
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
constexpr double kPi = 3.14159265358979323846;

double textbook_gelu(double x) {
  const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double textbook_gelu_grad(double x) {
  const double u = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / kPi) * (1.0 + 3 * 0.044715 * x * x);
}

}  // namespace

// y[i] = gelu(x[i])
void ReferenceBackend::gelu_forward(const Tensor& x, Tensor& y) {
  with_floating(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      y.data<T>()[i] = static_cast<T>(textbook_gelu(x.data<T>()[i]));
    }
  });
}

// dx[i] = dy[i] gelu'(x[i])
void ReferenceBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  with_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      dx.data<T>()[i] = static_cast<T>(dy.data<T>()[i] * textbook_gelu_grad(x.data<T>()[i]));
    }
  });
}

// x [.., 2F] as F pairs (a, b) = (x[2j], x[2j + 1]), y [.., F]:
//   y[j] = silu(a) b,  silu(a) = a / (1 + exp(-a))
void ReferenceBackend::swiglu_forward(const Tensor& x, Tensor& y) {
  with_floating(x.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t j = 0; j < y.numel(); ++j) {
      const double a = x.data<T>()[2 * j], b = x.data<T>()[2 * j + 1];
      y.data<T>()[j] = static_cast<T>(a / (1.0 + std::exp(-a)) * b);
    }
  });
}

// With sigma = 1 / (1 + exp(-a)):  d silu / da = sigma + a sigma (1 - sigma)
//   dx[2j] = dy[j] b silu'(a),  dx[2j + 1] = dy[j] silu(a)
void ReferenceBackend::swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  with_floating(x.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t j = 0; j < dy.numel(); ++j) {
      const double a = x.data<T>()[2 * j], b = x.data<T>()[2 * j + 1], g = dy.data<T>()[j];
      const double sigma = 1.0 / (1.0 + std::exp(-a));
      dx.data<T>()[2 * j] = static_cast<T>(g * b * (sigma + a * sigma * (1.0 - sigma)));
      dx.data<T>()[2 * j + 1] = static_cast<T>(g * a * sigma);
    }
  });
}

// x and y [.., d], positions along seq_dim. Element e at multi-index idx sits at position
// p = first_position + idx[seq_dim] and place j = idx[last] of its row; with half = d / 2 its pair
// is k = j mod half, partner element e + half (j < half) or e - half (j >= half), and
//   angle = p base^(-2k / d),  s = sin(angle), or -sin(angle) when inverse
//   y[e] = x[e] cos(angle) - x[e + half] s   (j < half)
//   y[e] = x[e] cos(angle) + x[e - half] s   (j >= half)
void ReferenceBackend::rope_forward(const Tensor& x, int seq_dim, std::int64_t first_position,
                                    double base, bool inverse, Tensor& y) {
  with_floating(x.dtype(), "rope_forward", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t d = x.shape()[x.rank() - 1], half = d / 2;
    for (std::int64_t e = 0; e < x.numel(); ++e) {
      const std::vector<std::int64_t> idx = unravel(e, x.shape());
      const double p = static_cast<double>(first_position + idx[static_cast<std::size_t>(seq_dim)]);
      const std::int64_t j = idx.back();
      const std::int64_t k = j < half ? j : j - half;
      const double angle =
          p * std::pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(d));
      const double s = inverse ? -std::sin(angle) : std::sin(angle);
      const double own = x.data<T>()[e];
      const double partner = x.data<T>()[j < half ? e + half : e - half];
      const double out =
          j < half ? own * std::cos(angle) - partner * s : own * std::cos(angle) + partner * s;
      y.data<T>()[e] = static_cast<T>(out);
    }
  });
}

// One Philox round on the counter (c0, c1, c2, c3) with key (k0, k1):
//   (hi0, lo0) = 0xD2511F53 * c0,  (hi1, lo1) = 0xCD9E8D57 * c2   (64-bit products)
//   c' = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
// and the key then moves by the Weyl constants (0x9E3779B9, 0xBB67AE85). Ten rounds.
void reference::philox4x32_10(const std::uint32_t counter[4], std::uint64_t key,
                              std::uint32_t out[4]) {
  std::uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0];
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c[2];
    const std::uint32_t next[4] = {
        static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
        static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
    for (int w = 0; w < 4; ++w) c[w] = next[w];
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int w = 0; w < 4; ++w) out[w] = c[w];
}

// Element at global linear index g (its index in spec.global_shape, the local index shifted by
// spec.offset) draws word g mod 4 of Philox(counter = (g / 4 low, g / 4 high, stream, step),
// key = seed); u = (word >> 8) / 2^24 in [0, 1). It is kept when u >= p:
//   mask[i] = keep,  y[i] = keep ? x[i] / (1 - p) : 0
// Causal (x [.., S_q, S_k] whole): key j of query i is dropped, without drawing, when
// j > i + S_k - S_q (softmax_forward's masked keys).
void ReferenceBackend::dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask,
                                       Tensor& y) {
  const Shape global = spec.global_shape.rank() ? spec.global_shape : x.shape();
  const std::vector<std::int64_t> global_strides = global.strides();
  with_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::vector<std::int64_t> index = unravel(i, x.shape());
      if (spec.causal) {
        const std::int64_t sq = x.dim(-2), sk = x.dim(-1);
        const std::int64_t query = index[index.size() - 2], key = index.back();
        if (key > query + sk - sq) {
          mask.data<std::uint8_t>()[i] = 0;
          y.data<T>()[i] = T(0);
          continue;
        }
      }
      std::uint64_t g = 0;
      for (std::size_t d = 0; d < index.size(); ++d) {
        const std::int64_t start = spec.offset.empty() ? 0 : spec.offset[d];
        g += static_cast<std::uint64_t>((start + index[d]) * global_strides[d]);
      }
      const std::uint32_t counter[4] = {static_cast<std::uint32_t>(g / 4),
                                        static_cast<std::uint32_t>((g / 4) >> 32), spec.stream,
                                        spec.step};
      std::uint32_t words[4];
      reference::philox4x32_10(counter, spec.seed, words);
      const double u = static_cast<double>(words[g % 4] >> 8) / 16777216.0;
      const bool keep = u >= spec.p;
      mask.data<std::uint8_t>()[i] = keep ? 1 : 0;
      y.data<T>()[i] = keep ? static_cast<T>(x.data<T>()[i] / (1.0 - spec.p)) : T(0);
    }
  });
}

// dx[i] = mask[i] ? dy[i] / (1 - p) : 0
void ReferenceBackend::dropout_backward(const Tensor& dy, const Tensor& mask, double p,
                                        Tensor& dx) {
  with_floating(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < dy.numel(); ++i) {
      const bool keep = mask.data<std::uint8_t>()[i] != 0;
      dx.data<T>()[i] = keep ? static_cast<T>(dy.data<T>()[i] / (1.0 - p)) : T(0);
    }
  });
}

}  // namespace shardscope
