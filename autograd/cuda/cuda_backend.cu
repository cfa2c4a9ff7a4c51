// CudaBackend: the kernel table on one CUDA device. Memory comes from a CachingAllocator over
// cudaMalloc/cudaFree; GEMMs go to cuBLAS with the ColumnMajorGemm the CPU hands to OpenBLAS; the
// other kernels (device_kernels.cuh) call the math in autograd/kernels/. All work runs on the
// backend's one stream, so it is ordered; copy_to_host waits for it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <string>
#include <vector>

#include "autograd/caching_allocator.h"
#include "autograd/cuda/check.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/cuda/device_kernels.cuh"

namespace shardscope {
namespace {

namespace k = cuda_kernels;
using k::kThreads;

// Blocks for a grid-stride loop over n items (the loop covers what the grid does not).
unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// The error for a dtype the CUDA kernels do not run: u8 anywhere but the mask, and bf16 / f16,
// which only the cpu and reference backends run so far.
DTypeError unsupported_dtype(const char* kernel, DType dtype) {
  return DTypeError(
      std::string("cuda kernel '") + kernel + "' cannot run " + dtype_name(dtype) +
      ": the CUDA kernels run f32 and f64 only" +
      (is_half(dtype) ? " (bf16 and f16 run on the cpu and reference backends)" : ""));
}

template <class F>
void dispatch_floating(DType dtype, const char* kernel, F&& f) {
  if (dtype == DType::f32) return f(float{});
  if (dtype == DType::f64) return f(double{});
  throw unsupported_dtype(kernel, dtype);
}

std::int64_t row_length(const Tensor& t) {
  return t.rank() ? t.dim(-1) : 1;
}

int as_int(std::int64_t v, const char* what) {
  if (v > INT_MAX) throw ArgumentError(std::string("cuBLAS: ") + what + " exceeds INT_MAX");
  return static_cast<int>(v);
}

// cudaMalloc / cudaFree on the current device. A full device is OutOfMemoryError, to which the
// caching allocator adds the request and the device.
class CudaRawAllocator final : public RawAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      throw OutOfMemoryError("cudaMalloc of " + std::to_string(bytes) + " bytes: " +
                             cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ")");
    }
    cuda_detail::check(status, __FILE__, __LINE__, "cudaMalloc(&p, bytes)");
    return p;
  }
  // cudaFree fails only after an earlier sticky error, which the next checked call reports; it
  // runs from destructors, so it does not throw.
  void release(void* data, std::size_t) override { cudaFree(data); }
  // A failed cudaMalloc leaves its status as the runtime's last error, which cudaGetLastError in
  // the next launch check would report as that kernel's failure ("out of memory" after a retry
  // that succeeded). Its status is in the error already thrown, so it is reset here; a sticky
  // error would come back from the next call anyway.
  void clear_error() override { cudaGetLastError(); }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : device_(device), options_(options) {
    SS_CUDA_CHECK(cudaSetDevice(device_));
    SS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SS_CUBLAS_CHECK(cublasCreate(&cublas_));
    SS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  }
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  AllocatorStats memory_stats() const { return allocator_.stats(); }
  cudaStream_t stream() const { return stream_; }

  void* allocate(std::size_t bytes) override {
    activate();
    void* p = allocator_.allocate(bytes);
    SS_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void deallocate(void* data, std::size_t bytes) override { allocator_.deallocate(data, bytes); }
  // From pageable host memory, cudaMemcpyAsync returns once the source is staged, so the caller
  // may reuse it at once.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    activate();
    if (bytes) SS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    activate();
    if (bytes) SS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) override;
  void lower_triangle(const TriangleDesc& desc, DType dtype, const void* src, void* dst) override;

  void fill(Tensor& out, double value) override;
  void copy(const Tensor& src, Tensor& dst) override {
    activate();
    if (src.raw_data() == dst.raw_data() || !src.bytes()) return;
    SS_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.bytes(),
                                  cudaMemcpyDeviceToDevice, stream_));
  }
  void permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) override;
  void copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                  std::int64_t dst_offset, std::int64_t count) override;
  void copy_strided(const StridedCopy& copy, const Tensor& src, Tensor& dst) override;

  void add(const Tensor& a, const Tensor& b, double alpha, double beta, Tensor& out) override;
  void mul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& x, double alpha, Tensor& out) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void swiglu_forward(const Tensor& x, Tensor& y) override;
  void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void rope_forward(const Tensor& x, int seq_dim, std::int64_t first_position, double base,
                    bool inverse, Tensor& y) override;
  void dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask, Tensor& y) override;
  void dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) override;

  void sum_to_suffix(const Tensor& x, Tensor& out) override;
  void sum_all(const Tensor& x, Tensor& out) override;

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                          const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma,
                          Tensor& dbeta) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                       Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                        Tensor& dx, Tensor& dgamma) override;
  void softmax_forward(const Tensor& x, bool causal, Tensor& y) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;

  void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) override;
  void cross_entropy_forward(const Tensor& logits, const std::int64_t* targets, Tensor& probs,
                             Tensor& loss) override;
  void cross_entropy_backward(const Tensor& probs, const std::int64_t* targets, double scale,
                              Tensor& dlogits) override;

 private:
  // Each thread has its own current device: make it ours before any call.
  void activate() const { SS_CUDA_CHECK(cudaSetDevice(device_)); }

  // Device scratch of `count` doubles that a kernel writes in full before it is read (so no
  // memset), freed in stream order after its last use.
  struct Scratch {
    CudaBackend& backend;
    std::size_t bytes;
    double* data;
    Scratch(CudaBackend& b, std::int64_t count)
        : backend(b), bytes(static_cast<std::size_t>(count) * sizeof(double)) {
      data = static_cast<double*>(b.allocator_.allocate(bytes));
    }
    ~Scratch() { backend.deallocate(data, bytes); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
  };
  // The two-pass reductions of device_kernels.cuh: out[j] = sum over rows of x[r * m + j], and
  // *out = sum(x) / divisor (with a target, sum((x - target)^2) / divisor).
  template <class T>
  void column_sums(const T* x, T* out, std::int64_t rows, std::int64_t m);
  template <class In, class Out>
  void total(const In* x, const In* target, Out* out, std::int64_t n, double divisor);
  // LayerNorm's forward (rows > 0) and backward (h > 0) launches; RMSNorm's with beta, mean and
  // dbeta null.
  template <class T>
  void normalise_rows(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                      std::int64_t rows, std::int64_t h, double eps);
  template <class T>
  void normalise_rows_backward(const T* dy, const T* x, const T* gamma, const T* mean,
                               const T* rstd, T* dx, T* dgamma, T* dbeta, std::int64_t rows,
                               std::int64_t h);

  // A device copy of host class indices, freed in stream order after its last use.
  struct DeviceTargets {
    CudaBackend& backend;
    std::size_t bytes;
    std::int64_t* data;
    DeviceTargets(CudaBackend& b, const std::int64_t* host, std::int64_t n)
        : backend(b), bytes(static_cast<std::size_t>(n) * sizeof(std::int64_t)) {
      data = static_cast<std::int64_t*>(b.allocate(bytes));
      b.copy_from_host(data, host, bytes);
    }
    ~DeviceTargets() { backend.deallocate(data, bytes); }
  };

  int device_;
  CudaOptions options_;
  CudaRawAllocator raw_;
  CachingAllocator allocator_{raw_, "cuda:" + std::to_string(device_)};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

void CudaBackend::gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) {
  const ColumnMajorGemm g = to_column_major(desc);
  if (g.m == 0 || g.n == 0) return;
  activate();
  const cublasOperation_t t1 = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t t2 = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), kk = as_int(g.k, "k");
  const int l1 = as_int(g.ld_first, "ld"), l2 = as_int(g.ld_second, "ld");
  const int lc = as_int(g.ldc, "ldc"), batch = as_int(g.batch, "batch");
  // Column-major: the first operand is the row-major B, the second the row-major A.
  if (dtype == DType::f32) {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    const cublasComputeType_t compute =
        options_.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    SS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_, t1, t2, m, n, kk, &alpha, b, CUDA_R_32F, l1,
                                               g.stride_first, a, CUDA_R_32F, l2, g.stride_second,
                                               &beta, c, CUDA_R_32F, lc, g.stride_c, batch, compute,
                                               CUBLAS_GEMM_DEFAULT));
  } else if (dtype == DType::f64) {
    SS_CUBLAS_CHECK(cublasDgemmStridedBatched(
        cublas_, t1, t2, m, n, kk, &g.alpha, static_cast<const double*>(b), l1, g.stride_first,
        static_cast<const double*>(a), l2, g.stride_second, &g.beta, static_cast<double*>(c), lc,
        g.stride_c, batch));
  } else {
    throw unsupported_dtype("gemm", dtype);
  }
}

void CudaBackend::lower_triangle(const TriangleDesc& d, DType dtype, const void* src, void* dst) {
  d.validate();
  const std::int64_t n = d.batch * d.n * d.n;
  if (!n) return;
  activate();
  const unsigned grid = grid_for(n);
  auto launch = [&](auto word) {
    using Word = decltype(word);
    k::lower_triangle<<<grid, kThreads, 0, stream_>>>(static_cast<const Word*>(src), d.ld_src,
                                                      d.stride_src, static_cast<Word*>(dst),
                                                      d.ld_dst, d.stride_dst, d.n, n);
  };
  if (!kernels::with_unsigned_of_size(dtype_size(dtype), launch)) {
    throw unsupported_dtype("lower_triangle", dtype);
  }
  SS_CUDA_CHECK_LAUNCH("lower_triangle");
}

void CudaBackend::fill(Tensor& out, double value) {
  activate();
  const std::int64_t n = out.numel();
  if (!n) return;
  if (out.dtype() == DType::u8) {
    SS_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), static_cast<int>(value),
                                  static_cast<std::size_t>(n), stream_));
    return;
  }
  dispatch_floating(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    k::fill<T><<<grid_for(n), kThreads, 0, stream_>>>(out.data<T>(), n, static_cast<T>(value));
  });
  SS_CUDA_CHECK_LAUNCH("fill");
}

// Throws for more dims than the kernels' index maps take.
void check_map_rank(std::size_t rank, const char* kernel) {
  if (rank > static_cast<std::size_t>(k::kMaxDims)) {
    throw ArgumentError(std::string("cuda kernel '") + kernel + "' takes at most " +
                        std::to_string(k::kMaxDims) + " dims, given " + std::to_string(rank));
  }
}

// An index map over `dims` with `strides`; throws for more dims than the kernels take.
k::IndexMap index_map(const std::vector<std::int64_t>& dims,
                      const std::vector<std::int64_t>& strides, const char* kernel) {
  check_map_rank(dims.size(), kernel);
  k::IndexMap map;  // coalesced: fewer dims, the same offsets (kernels::coalesce_dims)
  std::copy(dims.begin(), dims.end(), map.dims);
  std::copy(strides.begin(), strides.end(), map.strides);
  map.rank = kernels::coalesce_dims(static_cast<int>(dims.size()), map.dims, map.strides);
  return map;
}

void CudaBackend::permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) {
  activate();
  const std::int64_t n = dst.numel();
  if (!n) return;
  const std::vector<std::int64_t> in_strides = src.shape().strides();
  std::vector<std::int64_t> in_step(perm.size());
  for (std::size_t d = 0; d < perm.size(); ++d)
    in_step[d] = in_strides[static_cast<std::size_t>(perm[d])];
  const k::IndexMap map = index_map(dst.shape().dims(), in_step, "permute");
  const unsigned grid = grid_for(n);
  auto launch = [&](auto word) {
    using Word = decltype(word);
    k::permute<<<grid, kThreads, 0, stream_>>>(static_cast<const Word*>(src.raw_data()),
                                               static_cast<Word*>(dst.raw_data()), n, map);
  };
  if (!kernels::with_unsigned_of_size(dtype_size(src.dtype()), launch)) {
    throw unsupported_dtype("permute", src.dtype());
  }
  SS_CUDA_CHECK_LAUNCH("permute");
}

// One thread an element, the two maps coalesced together (kernels::coalesce_dims2).
void CudaBackend::copy_strided(const StridedCopy& copy, const Tensor& src, Tensor& dst) {
  activate();
  copy.validate(src.numel(), dst.numel());
  const std::int64_t n = copy.numel();
  if (!n) return;
  check_map_rank(copy.dims.size(), "copy_strided");
  k::IndexMap from, to;
  std::copy(copy.dims.begin(), copy.dims.end(), from.dims);
  std::copy(copy.src_strides.begin(), copy.src_strides.end(), from.strides);
  std::copy(copy.dst_strides.begin(), copy.dst_strides.end(), to.strides);
  from.rank = to.rank = kernels::coalesce_dims2(static_cast<int>(copy.dims.size()), from.dims,
                                                from.strides, to.strides);
  std::copy(from.dims, from.dims + from.rank, to.dims);
  const std::size_t es = dtype_size(src.dtype());
  const auto* in = static_cast<const unsigned char*>(src.raw_data()) +
                   static_cast<std::size_t>(copy.src_offset) * es;
  auto* out =
      static_cast<unsigned char*>(dst.raw_data()) + static_cast<std::size_t>(copy.dst_offset) * es;
  auto launch = [&](auto word) {
    using Word = decltype(word);
    k::copy_strided<<<grid_for(n), kThreads, 0, stream_>>>(
        reinterpret_cast<const Word*>(in), reinterpret_cast<Word*>(out), n, from, to);
  };
  if (!kernels::with_unsigned_of_size(es, launch))
    throw unsupported_dtype("copy_strided", src.dtype());
  SS_CUDA_CHECK_LAUNCH("copy_strided");
}

// `outer` rows of count * inner elements, with the source's and destination's row pitches. A
// contiguous slice (one row, or whole rows on both sides) is one copy; otherwise a kernel copies
// the rows (cudaMemcpy2DAsync refuses pitches of 2 GiB and more).
void CudaBackend::copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                             std::int64_t dst_offset, std::int64_t count) {
  activate();
  const Shape& s = src.shape();
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int d = dim + 1; d < s.rank(); ++d) inner *= s[d];
  const std::int64_t width = count * inner;  // elements per row
  if (!width || !outer) return;
  const std::int64_t src_pitch = s[dim] * inner, dst_pitch = dst.shape()[dim] * inner;
  const std::size_t es = dtype_size(src.dtype());
  const auto* in = static_cast<const unsigned char*>(src.raw_data()) +
                   static_cast<std::size_t>(src_offset * inner) * es;
  auto* out = static_cast<unsigned char*>(dst.raw_data()) +
              static_cast<std::size_t>(dst_offset * inner) * es;
  if (outer == 1 || (width == src_pitch && width == dst_pitch)) {
    SS_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<std::size_t>(outer * width) * es,
                                  cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  const std::int64_t n = outer * width;
  const unsigned grid = grid_for(n);
  auto launch = [&](auto word) {
    using Word = decltype(word);
    k::copy_rows<<<grid, kThreads, 0, stream_>>>(reinterpret_cast<const Word*>(in), src_pitch,
                                                 reinterpret_cast<Word*>(out), dst_pitch, width, n);
  };
  if (!kernels::with_unsigned_of_size(es, launch))
    throw unsupported_dtype("copy_slice", src.dtype());
  SS_CUDA_CHECK_LAUNCH("copy_slice");
}

void CudaBackend::add(const Tensor& a, const Tensor& b, double alpha, double beta, Tensor& out) {
  activate();
  const std::int64_t n = a.numel();
  if (!n) return;
  dispatch_floating(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    k::add<T><<<grid_for(n), kThreads, 0, stream_>>>(a.data<T>(), b.data<T>(), out.data<T>(), n,
                                                     b.numel(), static_cast<T>(alpha),
                                                     static_cast<T>(beta));
  });
  SS_CUDA_CHECK_LAUNCH("add");
}

void CudaBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  activate();
  const std::int64_t n = a.numel();
  if (!n) return;
  dispatch_floating(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    k::mul<T><<<grid_for(n), kThreads, 0, stream_>>>(a.data<T>(), b.data<T>(), out.data<T>(), n,
                                                     b.numel());
  });
  SS_CUDA_CHECK_LAUNCH("mul");
}

void CudaBackend::scale(const Tensor& x, double alpha, Tensor& out) {
  activate();
  const std::int64_t n = x.numel();
  if (!n) return;
  dispatch_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    k::scale<T><<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), out.data<T>(), n,
                                                       static_cast<T>(alpha));
  });
  SS_CUDA_CHECK_LAUNCH("scale");
}

void CudaBackend::gelu_forward(const Tensor& x, Tensor& y) {
  activate();
  const std::int64_t n = x.numel();
  if (!n) return;
  dispatch_floating(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    k::gelu_forward<T><<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), y.data<T>(), n);
  });
  SS_CUDA_CHECK_LAUNCH("gelu_forward");
}

void CudaBackend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  activate();
  const std::int64_t n = x.numel();
  if (!n) return;
  dispatch_floating(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    k::gelu_backward<T>
        <<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), dy.data<T>(), dx.data<T>(), n);
  });
  SS_CUDA_CHECK_LAUNCH("gelu_backward");
}

void CudaBackend::swiglu_forward(const Tensor& x, Tensor& y) {
  activate();
  const std::int64_t n = y.numel();
  if (!n) return;
  dispatch_floating(x.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    k::swiglu_forward<T><<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), y.data<T>(), n);
  });
  SS_CUDA_CHECK_LAUNCH("swiglu_forward");
}

void CudaBackend::swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  activate();
  const std::int64_t n = dy.numel();
  if (!n) return;
  dispatch_floating(x.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    k::swiglu_backward<T>
        <<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), dy.data<T>(), dx.data<T>(), n);
  });
  SS_CUDA_CHECK_LAUNCH("swiglu_backward");
}

void CudaBackend::rope_forward(const Tensor& x, int seq_dim, std::int64_t first_position,
                               double base, bool inverse, Tensor& y) {
  activate();
  const std::int64_t n = x.numel();
  if (!n) return;
  const kernels::RopeGeometry g =
      kernels::rope_geometry(x.shape().dims().data(), x.rank(), seq_dim, first_position, base);
  dispatch_floating(x.dtype(), "rope_forward", [&](auto tag) {
    using T = decltype(tag);
    k::rope_forward<T>
        <<<grid_for(n), kThreads, 0, stream_>>>(x.data<T>(), y.data<T>(), n, g, inverse);
  });
  SS_CUDA_CHECK_LAUNCH("rope_forward");
}

void CudaBackend::dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask,
                                  Tensor& y) {
  activate();
  const std::int64_t n = x.numel();
  if (!n) return;
  const Shape& local = x.shape();
  const Shape global = spec.global_shape.rank() ? spec.global_shape : local;
  const std::vector<std::int64_t> gstride = global.strides();
  std::int64_t origin = 0;  // the global index of the local tensor's first element
  for (std::size_t d = 0; d < spec.offset.size(); ++d) origin += spec.offset[d] * gstride[d];
  const k::IndexMap map = index_map(local.dims(), gstride, "dropout_forward");
  const bool contiguous = map.rank == 1 && map.strides[0] == 1 && origin % 4 == 0;
  dispatch_floating(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    k::dropout_forward<T><<<grid_for(contiguous ? (n + 3) / 4 : n), kThreads, 0, stream_>>>(
        x.data<T>(), mask.data<std::uint8_t>(), y.data<T>(), n, map, origin, contiguous, spec.seed,
        spec.stream, spec.step, kernels::dropout_keep_threshold(spec.p),
        static_cast<T>(1.0 / (1.0 - spec.p)), spec.causal ? local.dim(-2) : 0,
        spec.causal ? local.dim(-1) : 0);
  });
  SS_CUDA_CHECK_LAUNCH("dropout_forward");
}

void CudaBackend::dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) {
  activate();
  const std::int64_t n = dy.numel();
  if (!n) return;
  dispatch_floating(dy.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    k::dropout_backward<T><<<grid_for(n), kThreads, 0, stream_>>>(
        dy.data<T>(), mask.data<std::uint8_t>(), dx.data<T>(), n, static_cast<T>(1.0 / (1.0 - p)));
  });
  SS_CUDA_CHECK_LAUNCH("dropout_backward");
}

// How a column sum over `rows` rows of `m` columns is cut: `chunk` rows per chunk (kRowsPerChunk,
// or more where the chunks would pass the grid's y limit, 65535), and a grid of one thread per
// (column, chunk) for the first pass.
struct ColumnChunks {
  std::int64_t chunk, chunks;
  dim3 grid;
};
ColumnChunks column_chunks(std::int64_t rows, std::int64_t m) {
  const std::int64_t chunk = std::max<std::int64_t>(k::kRowsPerChunk, (rows + 65534) / 65535);
  const std::int64_t chunks = std::max<std::int64_t>(1, (rows + chunk - 1) / chunk);
  return {
      chunk, chunks,
      dim3(static_cast<unsigned>((m + kThreads - 1) / kThreads), static_cast<unsigned>(chunks))};
}

template <class T>
void CudaBackend::column_sums(const T* x, T* out, std::int64_t rows, std::int64_t m) {
  const ColumnChunks c = column_chunks(rows, m);
  const Scratch partial(*this, c.chunks * m);
  k::column_partials<T><<<c.grid, kThreads, 0, stream_>>>(x, partial.data, rows, m, c.chunk);
  k::column_finish<T><<<grid_for(m), kThreads, 0, stream_>>>(partial.data, out, c.chunks, m);
}

template <class In, class Out>
void CudaBackend::total(const In* x, const In* target, Out* out, std::int64_t n, double divisor) {
  // Blocks of at least 16 elements a thread, at most 1024 of them (the second pass's loop).
  const std::int64_t blocks =
      std::clamp<std::int64_t>((n + kThreads * 16 - 1) / (kThreads * 16), 1, 1024);
  const std::int64_t per = (n + blocks - 1) / blocks;
  const Scratch partial(*this, blocks);
  k::sum_partials<In>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(x, target, partial.data, n, per);
  k::sum_finish<Out><<<1, kThreads, 0, stream_>>>(partial.data, out, blocks, divisor);
}

void CudaBackend::sum_to_suffix(const Tensor& x, Tensor& out) {
  activate();
  const std::int64_t m = out.numel();
  if (!m) return;
  dispatch_floating(x.dtype(), "sum_to_suffix", [&](auto tag) {
    using T = decltype(tag);
    column_sums<T>(x.data<T>(), out.data<T>(), x.numel() / m, m);
  });
  SS_CUDA_CHECK_LAUNCH("sum_to_suffix");
}

void CudaBackend::sum_all(const Tensor& x, Tensor& out) {
  activate();
  dispatch_floating(x.dtype(), "sum_all", [&](auto tag) {
    using T = decltype(tag);
    total<T, T>(x.data<T>(), nullptr, out.data<T>(), x.numel(), 1.0);
  });
  SS_CUDA_CHECK_LAUNCH("sum_all");
}

template <class T>
void CudaBackend::normalise_rows(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                                 std::int64_t rows, std::int64_t h, double eps) {
  k::layernorm_forward<T>
      <<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream_>>>(
          x, gamma, beta, y, mean, rstd, rows, h, eps);
}

// dx one block per row, then dgamma (and dbeta) as two-pass column sums. h > 0.
template <class T>
void CudaBackend::normalise_rows_backward(const T* dy, const T* x, const T* gamma, const T* mean,
                                          const T* rstd, T* dx, T* dgamma, T* dbeta,
                                          std::int64_t rows, std::int64_t h) {
  if (rows) {
    k::layernorm_backward_rows<T>
        <<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream_>>>(
            dy, x, gamma, mean, rstd, dx, rows, h);
  }
  const ColumnChunks c = column_chunks(rows, h);
  const std::int64_t sums = dbeta ? 2 : 1;  // dgamma's partials, then dbeta's
  const Scratch partial(*this, sums * c.chunks * h);
  k::layernorm_param_partials<T>
      <<<c.grid, kThreads, 0, stream_>>>(dy, x, mean, rstd, partial.data, rows, h, c.chunk);
  k::column_finish<T><<<grid_for(h), kThreads, 0, stream_>>>(partial.data, dgamma, c.chunks, h);
  if (dbeta) {
    k::column_finish<T>
        <<<grid_for(h), kThreads, 0, stream_>>>(partial.data + c.chunks * h, dbeta, c.chunks, h);
  }
}

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  activate();
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  if (!rows) return;
  dispatch_floating(x.dtype(), "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), mean.data<T>(),
                      rstd.data<T>(), rows, h, eps);
  });
  SS_CUDA_CHECK_LAUNCH("layernorm_forward");
}

void CudaBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& dgamma, Tensor& dbeta) {
  activate();
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  if (!h) return;
  dispatch_floating(x.dtype(), "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows_backward<T>(dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(),
                               rstd.data<T>(), dx.data<T>(), dgamma.data<T>(), dbeta.data<T>(),
                               rows, h);
  });
  SS_CUDA_CHECK_LAUNCH("layernorm_backward");
}

void CudaBackend::rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                                  Tensor& rstd) {
  activate();
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  if (!rows) return;
  dispatch_floating(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows<T>(x.data<T>(), gamma.data<T>(), nullptr, y.data<T>(), nullptr, rstd.data<T>(),
                      rows, h, eps);
  });
  SS_CUDA_CHECK_LAUNCH("rmsnorm_forward");
}

void CudaBackend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& rstd, Tensor& dx, Tensor& dgamma) {
  activate();
  const std::int64_t h = row_length(x), rows = x.numel() / std::max<std::int64_t>(h, 1);
  if (!h) return;
  dispatch_floating(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    normalise_rows_backward<T>(dy.data<T>(), x.data<T>(), gamma.data<T>(), nullptr, rstd.data<T>(),
                               dx.data<T>(), dgamma.data<T>(), nullptr, rows, h);
  });
  SS_CUDA_CHECK_LAUNCH("rmsnorm_backward");
}

void CudaBackend::softmax_forward(const Tensor& x, bool causal, Tensor& y) {
  activate();
  const std::int64_t sk = row_length(x), rows = x.numel() / std::max<std::int64_t>(sk, 1);
  const std::int64_t sq = causal ? x.dim(-2) : 1;
  if (!rows) return;
  dispatch_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    k::softmax_forward<T>
        <<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream_>>>(
            x.data<T>(), y.data<T>(), rows, sk, sq, causal, nullptr, nullptr);
  });
  SS_CUDA_CHECK_LAUNCH("softmax_forward");
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  activate();
  const std::int64_t sk = row_length(y), rows = y.numel() / std::max<std::int64_t>(sk, 1);
  if (!rows) return;
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    k::softmax_backward<T>
        <<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream_>>>(
            y.data<T>(), dy.data<T>(), dx.data<T>(), rows, sk);
  });
  SS_CUDA_CHECK_LAUNCH("softmax_backward");
}

void CudaBackend::mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  activate();
  dispatch_floating(pred.dtype(), "mse_forward", [&](auto tag) {
    using T = decltype(tag);
    total<T, T>(pred.data<T>(), target.data<T>(), loss.data<T>(), pred.numel(),
                static_cast<double>(pred.numel()));
  });
  SS_CUDA_CHECK_LAUNCH("mse_forward");
}

void CudaBackend::cross_entropy_forward(const Tensor& logits, const std::int64_t* targets,
                                        Tensor& probs, Tensor& loss) {
  activate();
  const std::int64_t c = logits.dim(1), rows = logits.dim(0);
  if (!rows) {  // the mean over no rows is 0 / 0, as the CPU backend computes it
    fill(loss, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const DeviceTargets device_targets(*this, targets, rows);
  const auto loss_bytes = static_cast<std::size_t>(rows) * sizeof(double);
  auto* row_loss = static_cast<double*>(allocate(loss_bytes));
  dispatch_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    k::softmax_forward<T>
        <<<static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)), kThreads, 0, stream_>>>(
            logits.data<T>(), probs.data<T>(), rows, c, 1, false, device_targets.data, row_loss);
    total<double, T>(row_loss, nullptr, loss.data<T>(), rows, static_cast<double>(rows));
  });
  deallocate(row_loss, loss_bytes);  // reused only by later work on this stream
  SS_CUDA_CHECK_LAUNCH("cross_entropy_forward");
}

void CudaBackend::cross_entropy_backward(const Tensor& probs, const std::int64_t* targets,
                                         double scale, Tensor& dlogits) {
  activate();
  const std::int64_t c = probs.dim(1), rows = probs.dim(0), n = probs.numel();
  if (!n) return;
  const DeviceTargets device_targets(*this, targets, rows);
  dispatch_floating(probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    k::cross_entropy_backward<T><<<grid_for(n), kThreads, 0, stream_>>>(
        probs.data<T>(), device_targets.data, scale, dlogits.data<T>(), n, c);
  });
  SS_CUDA_CHECK_LAUNCH("cross_entropy_backward");
}

}  // namespace

bool cuda_backend_built() {
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("no CUDA device: ") + cudaGetErrorString(status) + " (" +
                cudaGetErrorName(status) + "; asked for cuda:" + std::to_string(index) + ")");
  }
  if (index < 0 || index >= count) {
    throw Error("no CUDA device cuda:" + std::to_string(index) + ": this machine has " +
                std::to_string(count) + " (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
  }
  return std::make_unique<CudaBackend>(index, options);
}

namespace {

const CudaBackend& as_cuda(const Backend& backend, const char* caller) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (!cuda) {
    throw ArgumentError(std::string(caller) + ": backend '" + backend.name() +
                        "' is not a CUDA backend");
  }
  return *cuda;
}

}  // namespace

AllocatorStats cuda_memory_stats(const Backend& backend) {
  return as_cuda(backend, "cuda_memory_stats").memory_stats();
}

void* cuda_backend_stream(const Backend& backend) {
  return as_cuda(backend, "cuda_backend_stream").stream();
}

}  // namespace shardscope
