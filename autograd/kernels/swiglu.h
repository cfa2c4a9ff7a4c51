// SwiGLU (Shazeer 2020) per output element, and its derivatives. The input's last dim holds the
// gate a and the up value b of each output interleaved in pairs, x[.., 2j] = a, x[.., 2j + 1] = b,
// so that a column shard of whole pairs holds matching gates and up values.
//   y = silu(a) b,  silu(a) = a s,  s = sigmoid(a) = 1 / (1 + exp(-a))
//   da = dy b silu'(a),  silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)),  db = dy silu(a)
// exp(-a) overflowing to +inf for very negative a gives s = 0, the limit (silu -> -0, silu' -> 0);
// for very positive a it is 0 and s = 1.
#pragma once

#include <cmath>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

template <class T>
SS_HOST_DEVICE T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

template <class T>
SS_HOST_DEVICE T silu(T a) {
  return a * sigmoid(a);
}

template <class T>
SS_HOST_DEVICE T swiglu(T gate, T up) {
  return silu(gate) * up;
}

// The gradients of one output's pair: dgate = dy up silu'(gate), dup = dy silu(gate), with one
// sigmoid for both.
template <class T>
SS_HOST_DEVICE void swiglu_grad(T gate, T up, T dy, T& dgate, T& dup) {
  const T s = sigmoid(gate);
  dgate = dy * up * (s * (T(1) + gate * (T(1) - s)));
  dup = dy * (gate * s);
}

}  // namespace shardscope::kernels
