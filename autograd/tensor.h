// Tensor: a shared handle to a contiguous row-major Storage with shape, dtype, device, a name for
// traces and, when it requires grad, its gradient and the Node that produced it (grad_fn).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/dtype.h"
#include "autograd/shape.h"
#include "autograd/storage.h"

namespace shardscope {

class Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Memory is zero-initialised and reported to the context's observers.
  static Tensor empty(Context& ctx, const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(Context& ctx, const Shape& shape, DType dtype = DType::f32);
  static Tensor full(Context& ctx, const Shape& shape, double value, DType dtype = DType::f32);
  // Memory of any content (Backend::allocate_uninitialized), for an op's output that it writes
  // whole; reported like the others.
  static Tensor uninitialized(Context& ctx, const Shape& shape, DType dtype);
  // Copies values (row-major) into a new tensor; the count must equal the shape's numel.
  static Tensor from_vector(Context& ctx, const Shape& shape, const std::vector<double>& values,
                            DType dtype = DType::f32);
  // Normal(mean, std) values from a counter-based generator: the same seed gives the same values
  // on every platform and device.
  static Tensor randn(Context& ctx, const Shape& shape, std::uint64_t seed, double std = 1.0,
                      DType dtype = DType::f32, double mean = 0.0);
  // A parameter: a copy of `values` in its own storage, a leaf that requires grad, counted as
  // MemoryCategory::parameter.
  static Tensor parameter(const Tensor& values, const std::string& name);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim(int i) const { return shape().dim(i); }
  int rank() const { return shape().rank(); }
  std::int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  Context& ctx() const;
  const std::shared_ptr<Storage>& storage() const;

  template <class T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  // Values as doubles (any dtype), for tests and reports.
  std::vector<double> to_vector() const;
  double item() const;  // the single value of a one-element tensor

  const std::string& name() const;
  Tensor& set_name(std::string name);

  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires);
  bool is_leaf() const;
  bool is_parameter() const;
  Tensor grad() const;  // undefined until a backward reached this leaf
  void set_grad(const Tensor& grad);
  void zero_grad();
  const std::shared_ptr<Node>& grad_fn() const;
  int output_index() const;

  // Runs reverse-mode differentiation from this tensor. Without a gradient it must hold one
  // element; otherwise `grad` must match its shape and dtype.
  void backward(const Tensor& grad = Tensor()) const;

  // A new handle on the same storage and shape with no autograd history.
  Tensor detach() const;
  // A copy of the values in new storage (no autograd history).
  Tensor clone() const;
  // A copy of the values in new storage of another context (another rank, a reference run).
  Tensor copy_to(Context& ctx) const;
  // "name f32[2, 3]"
  std::string describe() const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  Context* ctx = nullptr;
  std::shared_ptr<Storage> storage;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;
  bool requires_grad = false;
  bool is_parameter = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  int output_index = 0;
};

}  // namespace shardscope
