// CpuBackend: memory, GEMM, layout and elementwise kernels.
#include "autograd/cpu/cpu_backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "autograd/cpu/dispatch.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/kernels/gelu.h"
#include "autograd/kernels/layout.h"
#include "autograd/kernels/philox.h"

namespace shardscope {

using cpu::dispatch_floating;

std::unique_ptr<Backend> make_backend(Device device) {
  if (device.kind == DeviceKind::cpu) return std::make_unique<CpuBackend>();
  return make_cuda_backend(device.index);
}

void* CpuBackend::allocate(std::size_t bytes) {
  void* p = std::calloc(bytes ? bytes : 1, 1);
  if (!p) throw std::bad_alloc();
  return p;
}

void CpuBackend::deallocate(void* data, std::size_t) {
  std::free(data);
}

void CpuBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) {
  const ColumnMajorGemm g = to_column_major(desc);
  if (g.m == 0 || g.n == 0) return;
  const auto ta = g.trans_first ? CblasTrans : CblasNoTrans;
  const auto tb = g.trans_second ? CblasTrans : CblasNoTrans;
  const auto m = static_cast<blasint>(g.m), n = static_cast<blasint>(g.n);
  const auto k = static_cast<blasint>(g.k);
  const auto l1 = static_cast<blasint>(g.ld_first), l2 = static_cast<blasint>(g.ld_second);
  const auto lc = static_cast<blasint>(g.ldc);
  // Column-major: the first operand is the row-major B, the second the row-major A.
  dispatch_floating(dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* first = static_cast<const T*>(b);
    const T* second = static_cast<const T*>(a);
    T* out = static_cast<T*>(c);
    for (std::int64_t i = 0; i < g.batch; ++i) {
      const T* f = first + i * g.stride_first;
      const T* s = second + i * g.stride_second;
      T* o = out + i * g.stride_c;
      if constexpr (std::is_same_v<T, float>) {
        cblas_sgemm(CblasColMajor, ta, tb, m, n, k, static_cast<float>(g.alpha), f, l1, s, l2,
                    static_cast<float>(g.beta), o, lc);
      } else {
        cblas_dgemm(CblasColMajor, ta, tb, m, n, k, g.alpha, f, l1, s, l2, g.beta, o, lc);
      }
    }
  });
}

void CpuBackend::fill(Tensor& out, double value) {
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::u8) {
    std::memset(out.raw_data(), static_cast<int>(value), static_cast<std::size_t>(n));
    return;
  }
  dispatch_floating(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(value);
  });
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  if (src.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), src.bytes());
}

void CpuBackend::permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) {
  const int r = src.rank();
  const std::size_t es = dtype_size(src.dtype());
  const std::vector<std::int64_t> in_strides = src.shape().strides();
  // `in_step[d]` is how far the input moves for output dim d.
  std::vector<std::int64_t> in_step(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d)
    in_step[static_cast<std::size_t>(d)] =
        in_strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(d)])];
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const std::int64_t n = dst.numel();
  const std::int64_t last = r ? dst.shape()[r - 1] : 1;
  const std::int64_t last_step = r ? in_step[static_cast<std::size_t>(r - 1)] : 0;
  for (std::int64_t o = 0; o < n; o += last) {
    // Input element offset of this output row (the CUDA kernel computes it per element).
    const std::int64_t offset =
        kernels::strided_index(o, r, dst.shape().dims().data(), in_step.data());
    for (std::int64_t j = 0; j < last; ++j) {
      std::memcpy(out + static_cast<std::size_t>(o + j) * es,
                  in + static_cast<std::size_t>(offset + j * last_step) * es, es);
    }
  }
}

void CpuBackend::copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                            std::int64_t dst_offset, std::int64_t count) {
  const Shape& s = src.shape();
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int d = dim + 1; d < s.rank(); ++d) inner *= s[d];
  const std::size_t es = dtype_size(src.dtype());
  const std::int64_t src_dim = s[dim], dst_dim = dst.shape()[dim];
  const auto* in = static_cast<const unsigned char*>(src.raw_data());
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const auto block = static_cast<std::size_t>(count * inner) * es;
  for (std::int64_t o = 0; o < outer; ++o) {
    if (!block) break;
    std::memcpy(out + static_cast<std::size_t>((o * dst_dim + dst_offset) * inner) * es,
                in + static_cast<std::size_t>((o * src_dim + src_offset) * inner) * es, block);
  }
}

void CpuBackend::add(const Tensor& a, const Tensor& b, double alpha, double beta, Tensor& out) {
  dispatch_floating(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = a.numel(), nb = b.numel();
    const T ta = static_cast<T>(alpha), tb = static_cast<T>(beta);
    for (std::int64_t i = 0; i < n; i += nb) {
      for (std::int64_t j = 0; j < nb; ++j) o[i + j] = ta * x[i + j] + tb * y[j];
    }
  });
}

void CpuBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = a.numel(), nb = b.numel();
    for (std::int64_t i = 0; i < n; i += nb) {
      for (std::int64_t j = 0; j < nb; ++j) o[i + j] = x[i + j] * y[j];
    }
  });
}

void CpuBackend::scale(const Tensor& x, double alpha, Tensor& out) {
  dispatch_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    const T k = static_cast<T>(alpha);
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = k * in[i];
  });
}

void CpuBackend::gelu_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = y.data<T>();
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = kernels::gelu(in[i]);
  });
}

void CpuBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const T* g = dy.data<T>();
    T* o = dx.data<T>();
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = g[i] * kernels::gelu_grad(in[i]);
  });
}

void CpuBackend::dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask,
                                 Tensor& y) {
  const Shape& local = x.shape();
  const Shape global = spec.global_shape.rank() ? spec.global_shape : local;
  const int r = local.rank();
  const std::vector<std::int64_t> gstride = global.strides();
  // Global linear index of the local tensor's first element.
  std::int64_t origin = 0;
  for (int d = 0; d < r && !spec.offset.empty(); ++d)
    origin += spec.offset[static_cast<std::size_t>(d)] * gstride[static_cast<std::size_t>(d)];
  const std::int64_t last = r ? local[r - 1] : 1;
  auto* m = mask.data<std::uint8_t>();
  dispatch_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T keep_scale = static_cast<T>(1.0 / (1.0 - spec.p));
    for (std::int64_t row = 0, n = x.numel(); row < n; row += last) {
      // Global linear index of this local row's first element.
      const std::int64_t base =
          origin + kernels::strided_index(row, r, local.dims().data(), gstride.data());
      for (std::int64_t j = 0; j < last; ++j) {
        const bool keep = kernels::dropout_keep(spec.seed, spec.stream, spec.step,
                                                static_cast<std::uint64_t>(base + j), spec.p);
        m[row + j] = keep ? 1 : 0;
        out[row + j] = kernels::dropout_apply(in[row + j], keep, keep_scale);
      }
    }
  });
}

void CpuBackend::dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) {
  dispatch_floating(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    const auto* m = mask.data<std::uint8_t>();
    T* o = dx.data<T>();
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    for (std::int64_t i = 0, n = dy.numel(); i < n; ++i) {
      o[i] = kernels::dropout_apply(g[i], m[i] != 0, keep_scale);
    }
  });
}

}  // namespace shardscope
