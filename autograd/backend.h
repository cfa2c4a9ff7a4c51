// Backend: the table of kernels for one device kind. Ops check shapes and dtypes, allocate
// outputs, then call the backend of their inputs' context; a backend only computes. CPU and CUDA
// implement the same table and share the per-element math in autograd/kernels/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "autograd/gemm.h"
#include "autograd/strided_copy.h"
#include "autograd/tensor.h"

namespace shardscope {

// Which dropout bits an element draws: Philox 4x32 keyed on the seed, counter = (global element
// index, stream, step). A shard passes its offset inside the global tensor, so it draws exactly the
// bits the same elements draw on a single device.
struct DropoutSpec {
  double p = 0.0;  // probability of dropping an element
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;  // (layer, site): see dropout_stream()
  std::uint32_t step = 0;
  Shape global_shape;                // the full tensor's shape; empty means the local shape
  std::vector<std::int64_t> offset;  // the local tensor's start in each global dim; empty: zeros
  // x is causal attention's probabilities [.., s_q, s_k] (softmax(x, true): 0 after each row's
  // visible keys, kernels::softmax_visible). Those elements are dropped without drawing their
  // bits (mask 0, y 0), as the products after them never read them (causal_matmul); the others
  // draw what they draw without it. Needs each [s_q, s_k] matrix whole in the shard.
  bool causal = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory: allocate returns zeroed memory; allocate_uninitialized memory of any content, for an
  // op's output that the op writes whole (ops_detail::new_output). A backend that cannot skip the
  // zeroing keeps this default.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void* allocate_uninitialized(std::size_t bytes) { return allocate(bytes); }
  virtual void deallocate(void* data, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;

  // Matrix products (f32, f64) through the GEMM descriptor.
  virtual void gemm(const GemmDesc& desc, DType dtype, const void* a, const void* b, void* c) = 0;

  // Attention's causal products (causal_matmul): the squares of `desc` copied from src to dst with
  // the elements above each one's diagonal set to 0 (bits copied: any dtype). In place when the
  // squares are the same.
  virtual void lower_triangle(const TriangleDesc& desc, DType dtype, const void* src,
                              void* dst) = 0;

  // Layout.
  virtual void fill(Tensor& out, double value) = 0;
  virtual void copy(const Tensor& src, Tensor& dst) = 0;  // same numel and dtype
  virtual void permute(const Tensor& src, const std::vector<int>& perm, Tensor& dst) = 0;
  // dst[.., dst_offset + i, ..] = src[.., src_offset + i, ..] along `dim`, for i < count.
  virtual void copy_slice(const Tensor& src, int dim, std::int64_t src_offset, Tensor& dst,
                          std::int64_t dst_offset, std::int64_t count) = 0;
  // The copy `copy` describes (autograd/strided_copy.h), from src's elements to dst's (one
  // dtype; bits moved). Throws ArgumentError where copy.validate does.
  virtual void copy_strided(const StridedCopy& copy, const Tensor& src, Tensor& dst) = 0;

  // Elementwise. `b` may have a suffix of `a`'s shape and then repeats over a's leading dims.
  virtual void add(const Tensor& a, const Tensor& b, double alpha, double beta, Tensor& out) = 0;
  virtual void mul(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void scale(const Tensor& x, double alpha, Tensor& out) = 0;
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  // SwiGLU: x [.., 2f] holds (gate, up) pairs interleaved, y and dy [.., f], dx [.., 2f].
  virtual void swiglu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  // Rotary position embedding (kernels/rope.h): x and y [.., d], d even, the pairs (i, i + d/2)
  // of each row rotated by position theta_i, the row's position first_position + its index along
  // seq_dim. inverse rotates by -angle: backward, called with dy for x and dx for y.
  virtual void rope_forward(const Tensor& x, int seq_dim, std::int64_t first_position, double base,
                            bool inverse, Tensor& y) = 0;
  virtual void dropout_forward(const Tensor& x, const DropoutSpec& spec, Tensor& mask,
                               Tensor& y) = 0;
  virtual void dropout_backward(const Tensor& dy, const Tensor& mask, double p, Tensor& dx) = 0;

  // Reductions. out has x's trailing shape (a suffix) and receives the sum over x's leading dims.
  virtual void sum_to_suffix(const Tensor& x, Tensor& out) = 0;
  virtual void sum_all(const Tensor& x, Tensor& out) = 0;  // out has one element

  // Row-wise ops over the last dim. mean and rstd [rows] are of statistics_dtype(x's dtype): f32
  // for bf16 / f16 rows (check_statistics_dtype).
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 double eps, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                  const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                  Tensor& dgamma, Tensor& dbeta) = 0;
  // RMSNorm: x, y, dy, dx [.., h]; gamma, dgamma [h]; rstd [rows] = 1 / sqrt(mean(x^2) + eps).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y,
                               Tensor& rstd) = 0;
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const Tensor& rstd, Tensor& dx, Tensor& dgamma) = 0;
  // causal: on a [.., s_q, s_k] tensor, key j > query i (aligned at the end) gets probability 0.
  virtual void softmax_forward(const Tensor& x, bool causal, Tensor& y) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;

  // Losses. logits [N, C]; targets hold N class indices in host memory.
  virtual void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) = 0;
  virtual void cross_entropy_forward(const Tensor& logits, const std::int64_t* targets,
                                     Tensor& probs, Tensor& loss) = 0;
  virtual void cross_entropy_backward(const Tensor& probs, const std::int64_t* targets,
                                      double scale, Tensor& dlogits) = 0;
};

// Throws DTypeError unless a norm's statistics tensor (mean or rstd) has statistics_dtype of the
// rows' dtype: a backend writes them as that type.
inline void check_statistics_dtype(const Tensor& x, const Tensor& statistic, const char* kernel) {
  if (statistic.dtype() != statistics_dtype(x.dtype())) {
    throw DTypeError(std::string(kernel) + ": the row statistics of " + dtype_name(x.dtype()) +
                     " rows must be " + dtype_name(statistics_dtype(x.dtype())) + ", given " +
                     statistic.describe());
  }
}

// The backend for a device; throws ArgumentError for a device this build has no backend for.
std::unique_ptr<Backend> make_backend(Device device);

}  // namespace shardscope
