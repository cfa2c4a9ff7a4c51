// Index arithmetic of the layout kernels (permute) and of dropout's global element index, shared
// by the CPU backend and the CUDA kernels.
#pragma once

#include <cstdint>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

// The row-major linear index `linear` of a tensor with extents dims[0..rank) as a multi-index i,
// mapped to sum_d i[d] * strides[d]. Permute passes the input's stride of each output dim;
// dropout passes the global tensor's strides to find a local element's global index.
SS_HOST_DEVICE std::int64_t strided_index(std::int64_t linear, int rank, const std::int64_t* dims,
                                          const std::int64_t* strides) {
  std::int64_t out = 0;
  for (int d = rank - 1; d >= 0; --d) {
    out += (linear % dims[d]) * strides[d];
    linear /= dims[d];
  }
  return out;
}

// Dropout on one element: kept elements are scaled by 1 / (1 - p), dropped ones become 0.
template <class T>
SS_HOST_DEVICE T dropout_apply(T x, bool keep, T keep_scale) {
  return keep ? x * keep_scale : T(0);
}

}  // namespace shardscope::kernels
