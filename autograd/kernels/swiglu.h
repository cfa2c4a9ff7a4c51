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

// sigmoid(a) given e = exp(-a) (a CPU loop takes the exp, a libm call, in a loop of its own, so
// that the others vectorise).
template <class T>
SS_HOST_DEVICE T sigmoid_from_exp(T e) {
  return T(1) / (T(1) + e);
}

template <class T>
SS_HOST_DEVICE T sigmoid(T a) {
  return sigmoid_from_exp(std::exp(-a));
}

template <class T>
SS_HOST_DEVICE T silu(T a) {
  return a * sigmoid(a);
}

// ... given s = sigmoid(gate).
template <class T>
SS_HOST_DEVICE T swiglu_from_sigmoid(T gate, T up, T s) {
  return (gate * s) * up;
}

template <class T>
SS_HOST_DEVICE T swiglu(T gate, T up) {
  return swiglu_from_sigmoid(gate, up, sigmoid(gate));
}

// The gradients of one output's pair: dgate = dy up silu'(gate), dup = dy silu(gate), with one
// sigmoid s = sigmoid(gate) for both.
template <class T>
SS_HOST_DEVICE void swiglu_grad_from_sigmoid(T gate, T up, T dy, T s, T& dgate, T& dup) {
  dgate = dy * up * (s * (T(1) + gate * (T(1) - s)));
  dup = dy * (gate * s);
}

template <class T>
SS_HOST_DEVICE void swiglu_grad(T gate, T up, T dy, T& dgate, T& dup) {
  swiglu_grad_from_sigmoid(gate, up, dy, sigmoid(gate), dgate, dup);
}

}  // namespace shardscope::kernels
