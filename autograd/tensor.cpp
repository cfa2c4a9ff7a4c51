// Tensor: factories, accessors and host transfers.
#include "autograd/tensor.h"

#include <cmath>
#include <cstring>

#include "autograd/backend.h"
#include "autograd/engine.h"
#include "autograd/errors.h"
#include "autograd/kernels/half.h"
#include "autograd/kernels/philox.h"
#include "autograd/node.h"

namespace shardscope {
namespace {

MemoryCategory default_category(const Context& ctx) {
  return ctx.phase() == Phase::forward ? MemoryCategory::activation : MemoryCategory::workspace;
}

// Rejects negative dims and shapes whose byte size does not fit in 63 bits.
void check_shape(const Shape& shape, DType dtype) {
  // Over the non-zero dims, so that the rule does not depend on where a zero dim stands: the
  // strides of an empty tensor are products of its other dims, and must fit too.
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (std::int64_t d : shape.dims()) {
    if (d < 0) throw ShapeError("tensor shape " + shape.str() + " has a negative dim");
    if (d != 0 && __builtin_mul_overflow(bytes, d, &bytes)) {
      throw ShapeError(std::string("tensor shape ") + dtype_name(dtype) + shape.str() +
                       " is too large: its byte size overflows 64 bits");
    }
  }
}

// Host buffer of `dtype` elements converted from doubles, each rounded once to the dtype.
std::vector<unsigned char> to_host_bytes(const std::vector<double>& values, DType dtype) {
  std::vector<unsigned char> bytes(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::f32: {
        const auto v = static_cast<float>(values[i]);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
        break;
      }
      case DType::f64:
        std::memcpy(bytes.data() + 8 * i, &values[i], 8);
        break;
      case DType::u8:
        bytes[i] = static_cast<unsigned char>(values[i]);
        break;
      case DType::bf16: {
        const std::uint16_t v = kernels::bf16_bits_from(values[i]);
        std::memcpy(bytes.data() + 2 * i, &v, 2);
        break;
      }
      case DType::f16: {
        const std::uint16_t v = kernels::f16_bits_from(values[i]);
        std::memcpy(bytes.data() + 2 * i, &v, 2);
        break;
      }
    }
  }
  return bytes;
}

}  // namespace

namespace {
std::shared_ptr<TensorImpl> allocated(Context& ctx, const Shape& shape, DType dtype, bool zeroed) {
  check_shape(shape, dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->ctx = &ctx;
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = ctx.allocate(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype),
                               default_category(ctx), zeroed);
  return impl;
}
}  // namespace

Tensor Tensor::empty(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor(allocated(ctx, shape, dtype, true));
}

Tensor Tensor::uninitialized(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor(allocated(ctx, shape, dtype, false));
}

Tensor Tensor::zeros(Context& ctx, const Shape& shape, DType dtype) {
  return empty(ctx, shape, dtype);  // backends hand out zeroed memory
}

Tensor Tensor::full(Context& ctx, const Shape& shape, double value, DType dtype) {
  Tensor t = empty(ctx, shape, dtype);
  ctx.backend().fill(t, value);
  return t;
}

Tensor Tensor::from_vector(Context& ctx, const Shape& shape, const std::vector<double>& values,
                           DType dtype) {
  check_shape(shape, dtype);
  if (static_cast<std::int64_t>(values.size()) != shape.numel()) {
    throw ShapeError("from_vector: shape " + shape.str() + " needs " +
                     std::to_string(shape.numel()) + " values, given " +
                     std::to_string(values.size()));
  }
  if (dtype == DType::u8) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (!(values[i] >= 0 && values[i] <= 255) || values[i] != static_cast<int>(values[i])) {
        throw ArgumentError("from_vector: u8 value " + std::to_string(i) + " is " +
                            std::to_string(values[i]) + ", expected an integer in [0, 255]");
      }
    }
  }
  Tensor t = empty(ctx, shape, dtype);
  const std::vector<unsigned char> bytes = to_host_bytes(values, dtype);
  ctx.backend().copy_from_host(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

Tensor Tensor::randn(Context& ctx, const Shape& shape, std::uint64_t seed, double std, DType dtype,
                     double mean) {
  check_shape(shape, dtype);
  std::vector<double> values(static_cast<std::size_t>(shape.numel()));
  constexpr double kTwoPi = 6.283185307179586;
  for (std::size_t i = 0; i < values.size(); ++i) {
    // Box-Muller on two uniforms from Philox words; u1 in (0, 1] keeps the log finite.
    const kernels::Philox4 r = kernels::philox4x32(
        static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 0x5eed, 0, seed);
    const double u1 = 1.0 - kernels::uniform_from_bits(r.v[0]);
    const double u2 = kernels::uniform_from_bits(r.v[1]);
    values[i] = mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  }
  return from_vector(ctx, shape, values, dtype);
}

Tensor Tensor::parameter(const Tensor& values, const std::string& name) {
  Tensor p = values.clone();  // its own storage: an SGD step must not write through an alias
  p.impl_->storage->set_category(MemoryCategory::parameter);
  p.impl_->is_parameter = true;
  p.impl_->requires_grad = true;
  p.impl_->name = name;
  return p;
}

const TensorImpl& Tensor::checked() const {
  if (!impl_) throw StateError("use of an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const {
  return checked().shape;
}
DType Tensor::dtype() const {
  return checked().dtype;
}
Device Tensor::device() const {
  return checked().ctx->device();
}
Context& Tensor::ctx() const {
  return *checked().ctx;
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  return checked().storage;
}
void* Tensor::raw_data() const {
  return checked().storage->data();
}
const std::string& Tensor::name() const {
  return checked().name;
}
bool Tensor::requires_grad() const {
  return checked().requires_grad;
}
bool Tensor::is_leaf() const {
  return checked().grad_fn == nullptr;
}
bool Tensor::is_parameter() const {
  return checked().is_parameter;
}
Tensor Tensor::grad() const {
  return checked().grad;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  return checked().grad_fn;
}
int Tensor::output_index() const {
  return checked().output_index;
}

Tensor& Tensor::set_name(std::string name) {
  checked();
  impl_->name = std::move(name);
  return *this;
}

Tensor& Tensor::set_requires_grad(bool requires) {
  if (checked().grad_fn && !requires) {
    throw StateError("set_requires_grad(false) on " + describe() +
                     ", which an op produced: use detach() to cut it from the graph");
  }
  impl_->requires_grad = requires;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) {
  checked();
  if (grad.defined() && (grad.shape() != shape() || grad.dtype() != dtype())) {
    throw ShapeError("set_grad on " + describe() + ": expected a gradient " + dtype_name(dtype()) +
                     shape().str() + ", given " + grad.describe());
  }
  impl_->grad = grad;
}

void Tensor::zero_grad() {
  checked();
  impl_->grad = Tensor();
}

std::vector<double> Tensor::to_vector() const {
  const TensorImpl& t = checked();
  const auto n = static_cast<std::size_t>(numel());
  std::vector<unsigned char> host(this->bytes());
  t.ctx->backend().copy_to_host(host.data(), raw_data(), host.size());
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::f32: {
        float v;
        std::memcpy(&v, host.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      case DType::f64:
        std::memcpy(&out[i], host.data() + 8 * i, 8);
        break;
      case DType::u8:
        out[i] = host[i];
        break;
      case DType::bf16:
      case DType::f16: {
        std::uint16_t v;
        std::memcpy(&v, host.data() + 2 * i, 2);
        out[i] = t.dtype == DType::bf16 ? kernels::float_from_bf16_bits(v)
                                        : kernels::float_from_f16_bits(v);
        break;
      }
    }
  }
  return out;
}

double Tensor::item() const {
  if (numel() != 1) {
    throw ShapeError("item() needs a one-element tensor, given " + describe());
  }
  return to_vector()[0];
}

void Tensor::backward(const Tensor& grad) const {
  run_backward(*this, grad);
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  auto impl = std::make_shared<TensorImpl>();
  impl->ctx = t.ctx;
  impl->storage = t.storage;
  impl->shape = t.shape;
  impl->dtype = t.dtype;
  impl->name = t.name;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  Tensor out = empty(ctx(), shape(), dtype());
  ctx().backend().copy(*this, out);
  out.impl_->name = name();
  return out;
}

Tensor Tensor::copy_to(Context& dst) const {
  std::vector<unsigned char> host(bytes());
  ctx().backend().copy_to_host(host.data(), raw_data(), host.size());
  Tensor out = empty(dst, shape(), dtype());
  dst.backend().copy_from_host(out.raw_data(), host.data(), host.size());
  out.impl_->name = name();
  return out;
}

std::string Tensor::describe() const {
  if (!impl_) return "undefined tensor";
  std::string out = impl_->name.empty() ? std::string() : impl_->name + " ";
  return out + dtype_name(impl_->dtype) + impl_->shape.str();
}

}  // namespace shardscope
