// ReferenceBackend: the kernel table as textbook loops, to be read and to check the others by.
// One thread, no blocking, no vector tricks, and none of the shared per-element math of
// autograd/kernels/: every formula is written out again here, so that a bug in that shared math
// (which the CPU and CUDA backends both call) shows as a difference against this backend.
// Memory is host memory (calloc), like the CPU backend's. Sums are kept in double whatever the
// element type; each result is rounded to the element type once, at the end.
#pragma once

#include <string>

#include "autograd/backend.h"
#include "autograd/errors.h"
#include "autograd/reference/reference_half.h"

namespace shardscope {

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }

  void* allocate(std::size_t bytes) override;
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
};

// A ReferenceBackend (make_backend's answer for Device::reference()).
std::unique_ptr<Backend> make_reference_backend();

namespace reference {

// Calls f(T{}) with T = float, double, Bf16 or F16 (reference_half.h) for a floating dtype; throws
// DTypeError naming `kernel` otherwise. The loops read every element as a double and round each
// result to T once, so a 2-byte type is simply a T that rounds more.
template <class F>
void with_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::bf16:
      return f(Bf16{});
    case DType::f16:
      return f(F16{});
    case DType::u8:
      break;
  }
  throw DTypeError(std::string("reference kernel '") + kernel + "' needs a floating dtype, given " +
                   dtype_name(dtype));
}

// Philox 4x32-10 (Salmon et al., SC 2011), written out round by round: the four 32-bit words for
// counter (c0, c1, c2, c3) under a 64-bit key. Dropout's mask bits come from it.
void philox4x32_10(const std::uint32_t counter[4], std::uint64_t key, std::uint32_t out[4]);

}  // namespace reference

}  // namespace shardscope
