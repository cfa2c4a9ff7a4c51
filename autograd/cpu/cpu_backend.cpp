// CpuBackend: memory, GEMM and the arithmetic elementwise kernels (fill, add, mul, scale); the
// layout kernels (copies, permutes, lower_triangle) are in cpu_layout.cpp, the activations, rotary
// embedding and dropout in cpu_activations.cpp, the row-wise kernels in cpu_rows.cpp.
#include "autograd/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/cpu/dispatch.h"
#include "autograd/cpu/gemm_bf16.h"
#include "autograd/cpu/grain.h"
#include "autograd/errors.h"
#include "autograd/kernels/half.h"

namespace shardscope {

using cpu::dispatch_floating;
using cpu::kCheapGrain;

namespace {

// Elements [begin, end) of a tensor whose operand b of nb elements repeats along it, as runs that
// do not wrap around b: f(i, j, len) for elements i .. i + len of the tensor and j .. j + len of b.
template <class F>
void broadcast_runs(std::int64_t begin, std::int64_t end, std::int64_t nb, F&& f) {
  for (std::int64_t i = begin; i < end;) {
    const std::int64_t j = i % nb;
    const std::int64_t len = std::min(end - i, nb - j);
    f(i, j, len);
    i += len;
  }
}

// The fewest rows (or columns) of C in a piece of one product.
constexpr std::int64_t kGemmMinCut = 64;

// The loop threads every CpuBackend of the process shares, as OpenBLAS shares its own: as many as
// OpenBLAS had when the process first asked (OPENBLAS_NUM_THREADS, else the cores). From then on
// each OpenBLAS call runs on the thread that makes it and the backend splits GEMMs over these
// threads (CpuBackend::gemm): OpenBLAS's workers spin between calls, which on a busy machine kept
// the other core from the backend's loops, and OpenBLAS threaded each small product of a batch
// separately. Shared, so that ranks running as threads (each with its own context and backend)
// never start more loop threads than that: a rank that finds the workers busy with another
// rank's loop runs the same chunks alone. OpenBLAS's setting is the process's, so it is read and
// changed once, here; the pool is never destroyed (a rank may still be in a loop at exit).
cpu::RowThreads& shared_row_threads() {
  static cpu::RowThreads* const threads = [] {
    const int t = openblas_get_num_threads();
    openblas_set_num_threads(1);
    return new cpu::RowThreads(t);
  }();
  return *threads;
}

}  // namespace

namespace {

std::string out_of_host_memory(std::size_t bytes) {
  return "out of memory on cpu: asked for " + std::to_string(bytes) + " bytes (" +
         std::to_string(bytes >> 20) + " MiB)";
}

// The cache's blocks: malloc and free (CpuBackend::allocate zeroes what it hands out). The
// cache's out-of-memory error names the request and what it holds, then this.
class HostBlocks final : public RawAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = std::malloc(bytes);
    if (!p) throw OutOfMemoryError("malloc of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void release(void* data, std::size_t) override { std::free(data); }
};

}  // namespace

CpuBackend::CpuBackend() : threads_(shared_row_threads()) {
  if (caches_blocks()) {
    blocks_ = std::make_unique<HostBlocks>();
    cache_ = std::make_unique<CachingAllocator>(*blocks_, "cpu",
                                                CachingAllocator::CacheLimit::peak_in_use);
  }
}

CpuBackend::~CpuBackend() = default;

bool CpuBackend::caches_blocks() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  static const bool caching = [] {
    const char* choice = std::getenv("SHARDSCOPE_CPU_CACHE");
    return !(choice && std::strcmp(choice, "0") == 0);
  }();
  return caching;
#endif
}

AllocatorStats CpuBackend::cache_stats() const {
  return cache_ ? cache_->stats() : AllocatorStats{};
}

void* CpuBackend::allocate(std::size_t bytes) {
  if (cache_ && bytes >= kCachedBlockBytes) {
    // Memory is handed out zeroed (Backend::allocate); a large block in threads (a causal
    // product's scores, zeroed above the diagonal, are 2 MiB at s=128, b=4, 8 heads).
    auto* p = static_cast<unsigned char*>(cache_->allocate(bytes));
    threads_.parallel_for(static_cast<std::int64_t>(bytes), cpu::kCheapGrain * 4,
                          [p](std::int64_t begin, std::int64_t end) {
                            std::memset(p + begin, 0, static_cast<std::size_t>(end - begin));
                          });
    return p;
  }
  void* p = std::calloc(bytes ? bytes : 1, 1);
  if (!p) throw OutOfMemoryError(out_of_host_memory(bytes));
  return p;
}

void* CpuBackend::allocate_uninitialized(std::size_t bytes) {
  static const bool poison = [] {
    const char* choice = std::getenv("SHARDSCOPE_POISON_UNINITIALIZED");
    return choice && std::strcmp(choice, "1") == 0;
  }();
  void* p = nullptr;
  if (cache_ && bytes >= kCachedBlockBytes) {
    p = cache_->allocate(bytes);
  } else {
    p = std::malloc(bytes ? bytes : 1);
    if (!p) throw OutOfMemoryError(out_of_host_memory(bytes));
  }
  if (poison) std::memset(p, 0xff, bytes);
  return p;
}

void CpuBackend::deallocate(void* data, std::size_t bytes) {
  if (cache_ && bytes >= kCachedBlockBytes) return cache_->deallocate(data, bytes);
  std::free(data);
}

void CpuBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

float* CpuBackend::F32Scratch::take(std::size_t n) {
  if (n > size_) {
    data_.reset();  // the old block first, so that both are never held at once
    size_ = 0;      // and nothing is kept if the new one cannot be had
    data_.reset(new float[n]);
    size_ = n;
  }
  return data_.get();
}

// bf16 / f16: the operands (and C when beta reads it) widened to f32 buffers of the same layout,
// the f32 product (sgemm: f32 multiply-adds and accumulation, as a GPU's tensor cores do for 2-byte
// inputs), then each element of C rounded to T once. The f32 buffers (f32_, or a call's own when
// another thread has them) are host scratch, like OpenBLAS's packing buffers, not counted by the
// ledger; f32_ keeps four bytes for each element of the largest A, B and C of a 2-byte product
// for as long as the backend lives.
template <class T>
void CpuBackend::gemm_through_f32(const GemmDesc& d, const void* a, const void* b, void* c) {
  d.validate();  // before its sizes size the buffers
  // Never called from inside itself (gemm's f32 path and the loops below make no 2-byte product),
  // so a thread never finds the mutex held by itself.
  std::unique_lock<std::mutex> kept(f32_mutex_, std::try_to_lock);
  F32Scratch own[3];
  F32Scratch* scratch = kept.owns_lock() ? f32_ : own;
  auto widen = [&](F32Scratch& to, const void* from, std::int64_t n) {
    float* out = to.take(static_cast<std::size_t>(n));
    const T* in = static_cast<const T*>(from);
    threads_.parallel_for(n, kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = in[i];
    });
    return out;
  };
  const float* fa = widen(scratch[0], a, d.elements_a());
  const float* fb = widen(scratch[1], b, d.elements_b());
  const std::int64_t nc = d.elements_c();
  // With beta 0 the f32 GEMM writes C without reading it.
  float* fc =
      d.beta == 0.0 ? scratch[2].take(static_cast<std::size_t>(nc)) : widen(scratch[2], c, nc);
  gemm(d, DType::f32, fa, fb, fc);
  T* out = static_cast<T*>(c);
  for (std::int64_t e = 0; e < d.batch; ++e) {
    threads_.parallel_for(d.m,
                          std::max<std::int64_t>(kCheapGrain / std::max<std::int64_t>(d.n, 1), 1),
                          [&](std::int64_t begin, std::int64_t end) {
                            for (std::int64_t i = begin; i < end; ++i) {
                              const std::int64_t row = e * d.stride_c + i * d.ldc;
                              for (std::int64_t j = 0; j < d.n; ++j) {
                                out[row + j] = static_cast<T>(fc[row + j]);
                              }
                            }
                          });
  }
}

void CpuBackend::gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) {
  if (dtype == DType::bf16) {
    // The CPU's bf16 dot products where it has them (cpu/gemm_bf16.h), else widened to f32.
    if (cpu::bf16_dot_products()) {
      return cpu::gemm_bf16_dot(desc, static_cast<const std::uint16_t*>(a),
                                static_cast<const std::uint16_t*>(b),
                                static_cast<std::uint16_t*>(c), threads_);
    }
    return gemm_through_f32<kernels::BFloat16>(desc, a, b, c);
  }
  if (dtype == DType::f16) return gemm_through_f32<kernels::Float16>(desc, a, b, c);
  const ColumnMajorGemm g = to_column_major(desc);
  if (g.m == 0 || g.n == 0) return;
  const auto ta = g.trans_first ? CblasTrans : CblasNoTrans;
  const auto tb = g.trans_second ? CblasTrans : CblasNoTrans;
  const auto k = static_cast<blasint>(g.k);
  const auto l1 = static_cast<blasint>(g.ld_first), l2 = static_cast<blasint>(g.ld_second);
  const auto lc = static_cast<blasint>(g.ldc);
  // Column-major: the first operand is the row-major B, the second the row-major A.
  dispatch_floating(dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T* first = static_cast<const T*>(b);
    const T* second = static_cast<const T*>(a);
    T* out = static_cast<T*>(c);
    // Entry i's block of C from row r and column j, rows x cols: its rows need the same rows of
    // op(first) (at first + r, or first + r * ld when transposed), its columns the same columns of
    // op(second) (at second + j * ld, or second + j when transposed).
    auto product = [&](std::int64_t i, std::int64_t r, std::int64_t rows, std::int64_t j,
                       std::int64_t cols) {
      const T* f = first + i * g.stride_first + (g.trans_first ? r * g.ld_first : r);
      const T* s = second + i * g.stride_second + (g.trans_second ? j : j * g.ld_second);
      T* o = out + i * g.stride_c + j * g.ldc + r;
      const auto mr = static_cast<blasint>(rows), nc = static_cast<blasint>(cols);
      if constexpr (kernels::is_half_v<T>) {
        return;  // never called: 2-byte products take gemm_through_f32 (above)
      } else if constexpr (std::is_same_v<T, float>) {
        cblas_sgemm(CblasColMajor, ta, tb, mr, nc, k, static_cast<float>(g.alpha), f, l1, s, l2,
                    static_cast<float>(g.beta), o, lc);
      } else {
        cblas_dgemm(CblasColMajor, ta, tb, mr, nc, k, g.alpha, f, l1, s, l2, g.beta, o, lc);
      }
    };
    const std::int64_t work = std::max<std::int64_t>(g.m * g.n * std::max<std::int64_t>(g.k, 1), 1);
    if (g.batch > 1) {  // whole entries per thread
      threads_.parallel_for(g.batch, std::max<std::int64_t>(cpu::kGemmEntriesGrain / work, 1),
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t i = begin; i < end; ++i) product(i, 0, g.m, 0, g.n);
                            });
      return;
    }
    // One product: one piece per thread (each piece packs the whole of the operand it shares
    // with the others, so more pieces cost more), cut along C's column-major rows while there
    // are enough of them (measured faster than cutting its columns for every product of the
    // layer), each at least kGemmGrain multiply-adds.
    const bool by_rows = g.m >= kGemmMinCut * 2 || g.m >= g.n;
    const std::int64_t extent = by_rows ? g.m : g.n;
    const std::int64_t per_line =
        std::max<std::int64_t>(work / std::max<std::int64_t>(extent, 1), 1);
    const std::int64_t grain = std::max({cpu::kGemmGrain / per_line, kGemmMinCut,
                                         (extent + threads_.threads() - 1) / threads_.threads()});
    threads_.parallel_for(extent, grain, [&](std::int64_t begin, std::int64_t end) {
      if (by_rows) {
        product(0, begin, end - begin, 0, g.n);
      } else {
        product(0, 0, g.m, begin, end - begin);
      }
    });
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
    threads_.parallel_for(n, kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) o[i] = static_cast<T>(value);
    });
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, double alpha, double beta, Tensor& out) {
  dispatch_floating(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = a.numel(), nb = b.numel();
    using C = kernels::compute_t<T>;
    const C ta = static_cast<C>(alpha), tb = static_cast<C>(beta);
    if (nb == 0) return;
    threads_.parallel_for(n, kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      broadcast_runs(begin, end, nb, [&](std::int64_t i, std::int64_t j, std::int64_t len) {
        for (std::int64_t k = 0; k < len; ++k) {
          o[i + k] = static_cast<T>(ta * static_cast<C>(x[i + k]) + tb * static_cast<C>(y[j + k]));
        }
      });
    });
  });
}

void CpuBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(a.dtype(), "mul", [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = a.numel(), nb = b.numel();
    if (nb == 0) return;
    threads_.parallel_for(n, kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      broadcast_runs(begin, end, nb, [&](std::int64_t i, std::int64_t j, std::int64_t len) {
        for (std::int64_t k = 0; k < len; ++k) {
          o[i + k] = static_cast<T>(static_cast<kernels::compute_t<T>>(x[i + k]) * y[j + k]);
        }
      });
    });
  });
}

void CpuBackend::scale(const Tensor& x, double alpha, Tensor& out) {
  dispatch_floating(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    using C = kernels::compute_t<T>;
    const C k = static_cast<C>(alpha);
    threads_.parallel_for(x.numel(), kCheapGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) o[i] = static_cast<T>(k * static_cast<C>(in[i]));
    });
  });
}

}  // namespace shardscope
