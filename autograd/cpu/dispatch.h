// Calls f(T{}) with T = float or double for a floating dtype; throws DTypeError otherwise.
#pragma once

#include <string>

#include "autograd/dtype.h"
#include "autograd/errors.h"

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
    case DType::u8:
      break;
  }
  throw DTypeError(std::string("cpu kernel '") + kernel + "' needs f32 or f64, given " +
                   dtype_name(dtype));
}

}  // namespace shardscope::cpu
