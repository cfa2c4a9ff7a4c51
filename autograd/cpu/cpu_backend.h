// CpuBackend: the kernel table on the host. Loops call the per-element math in autograd/kernels/;
// matrix products go to OpenBLAS through the GEMM descriptor. GEMMs and the element and row loops
// of large tensors are split over threads that every CpuBackend of the process shares, as many
// as OpenBLAS had (OPENBLAS_NUM_THREADS, else the cores); OpenBLAS itself then runs each call on
// one thread. Loops compute each element or row whole on one thread, so their results do not
// depend on the count; a GEMM's do (its pieces), as OpenBLAS's own threading did, but never on
// which thread ran a piece: a run with the same count gives the same bits.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "autograd/backend.h"
#include "autograd/caching_allocator.h"
#include "autograd/cpu/thread_pool.h"

namespace shardscope {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  const char* name() const override { return "cpu"; }

  // Blocks of this size or more are kept for reuse when freed (a CachingAllocator, its free lists
  // at most the peak bytes in use) and zeroed when handed out again: a fresh large block is pages
  // the kernel faults in and zeroes one by one at first touch, which cost a Transformer step up
  // to a sixth of its time. Smaller blocks come from calloc. The bound was 1 MiB: the blocks of
  // 64 KiB to 1 MiB of a step at s=64 (a whole step's worth at the end of backward) then went
  // back to malloc's heap, which gave its top back to the kernel (brk) and faulted it in again
  // at the next step, six times a step: 2.6 -> 2.0 ms at s=64, b=2, h=128.
  static constexpr std::size_t kCachedBlockBytes = std::size_t{1} << 16;
  // Whether this build and process cache them: not under AddressSanitizer or ThreadSanitizer
  // (whose checks need every free to reach them), nor with SHARDSCOPE_CPU_CACHE=0. Read once.
  static bool caches_blocks();
  // The cache's statistics (all zero when it is off).
  AllocatorStats cache_stats() const;

  void* allocate(std::size_t bytes) override;
  // Not zeroed; filled with 0xff bytes (NaN in every floating dtype) when the environment sets
  // SHARDSCOPE_POISON_UNINITIALIZED=1, as the test presets do, so that an op reading what it
  // did not write shows as NaN.
  void* allocate_uninitialized(std::size_t bytes) override;
  void deallocate(void* data, std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;

  void gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) override;
  void lower_triangle(const TriangleDesc& desc, DType dtype, const void* src, void* dst) override;

  void fill(Tensor& out, double value) override;
  void copy(const Tensor& src, Tensor& dst) override;
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
  // A memcpy of `bytes` whose ranges the loop threads share out (copy, and copy_rows's one run).
  void copy_bytes(const void* src, void* dst, std::int64_t bytes);
  // permute's and copy_strided's copy (`kernel` names it in errors): for every index i over
  // dims, out[sum i_d out_step[d]] = in[sum i_d in_step[d]], in tiles of rows (cpu_layout.cpp).
  void copy_rows(const char* kernel, const std::vector<std::int64_t>& dims,
                 const std::vector<std::int64_t>& in_step, const void* in,
                 const std::vector<std::int64_t>& out_step, void* out, DType dtype);
  // A bf16 / f16 product: f32 copies of the operands through the f32 GEMM, C rounded once.
  template <class T>
  void gemm_through_f32(const GemmDesc& desc, const void* a, const void* b, void* c);

  // Uninitialised f32 memory that grows to the largest size asked for and is kept.
  class F32Scratch {
   public:
    float* take(std::size_t n);

   private:
    std::unique_ptr<float[]> data_;
    std::size_t size_ = 0;
  };
  // gemm_through_f32's copies of A, B and C, kept from one product to the next until the backend
  // goes: fresh host memory for each product was paged in and zeroed by the kernel, then zeroed
  // again by a vector, before it was written. A thread that finds them in use (the mutex held)
  // takes its own for that product.
  std::mutex f32_mutex_;
  F32Scratch f32_[3];

  // rope_forward's cosines and sines of each (position, pair), for the last geometry it tabulated:
  // a layer's queries and keys, forward and backward, and every step after the first take the
  // same one, which cost a cosine and a sine (some 40 ns) an entry to compute. The sines are
  // kept as sin(angle); a backward's rotation by -angle negates them as it reads them (exact).
  struct RopeTable {
    std::int64_t positions = 0, first_position = 0, d = 0;  // the key, with base (d/2 pairs)
    double base = 0;
    std::vector<double> cos, sin;         // [position - first_position][pair]
    std::vector<float> cos_f32, sin_f32;  // the same, rounded to f32 (for bf16 and f16 rows)
  };
  // The table of that geometry: the one kept when it matches, else a new one (then kept).
  std::shared_ptr<const RopeTable> rope_table(std::int64_t positions, std::int64_t first_position,
                                              std::int64_t d, double base);
  std::mutex rope_mutex_;
  std::shared_ptr<const RopeTable> rope_table_;

  cpu::RowThreads& threads_;                 // shared by every CpuBackend (cpu_backend.cpp)
  std::unique_ptr<RawAllocator> blocks_;     // malloc and free (before cache_: destroyed after it)
  std::unique_ptr<CachingAllocator> cache_;  // null when caches_blocks() is false
};

}  // namespace shardscope
