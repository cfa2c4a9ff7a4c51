// Running mean and sum of squared deviations (M2) for LayerNorm statistics: Welford's update for
// one value and Chan et al.'s combination of two partial results, which the exact distributed
// LayerNorm uses to merge per-shard statistics.
#pragma once

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

template <class T>
struct Welford {
  T count = T(0);
  T mean = T(0);
  T m2 = T(0);
};

template <class T>
SS_HOST_DEVICE void welford_add(Welford<T>& w, T x) {
  w.count += T(1);
  const T delta = x - w.mean;
  w.mean += delta / w.count;
  w.m2 += delta * (x - w.mean);
}

template <class T>
SS_HOST_DEVICE Welford<T> welford_combine(const Welford<T>& a, const Welford<T>& b) {
  Welford<T> out;
  out.count = a.count + b.count;
  if (out.count == T(0)) return out;
  const T delta = b.mean - a.mean;
  const T wb = b.count / out.count;
  out.mean = a.mean + delta * wb;
  out.m2 = a.m2 + b.m2 + delta * delta * a.count * wb;
  return out;
}

}  // namespace shardscope::kernels
