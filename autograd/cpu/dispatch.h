// Calls f(T{}) with T = float, double, kernels::BFloat16 or kernels::Float16 for a floating dtype;
// throws DTypeError otherwise. A kernel computes in kernels::compute_t<T> (f32 for the 2-byte
// types) and rounds each result to T once, when it stores it.
#pragma once

#include <string>

#include "autograd/dtype.h"
#include "autograd/errors.h"
#include "autograd/kernels/half.h"

namespace shardscope::cpu {

template <class F>
void dispatch_floating(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    case DType::bf16:
      f(kernels::BFloat16{});
      return;
    case DType::f16:
      f(kernels::Float16{});
      return;
    case DType::u8:
      break;
  }
  throw DTypeError(std::string("cpu kernel '") + kernel + "' needs a floating dtype, given " +
                   dtype_name(dtype));
}

}  // namespace shardscope::cpu
