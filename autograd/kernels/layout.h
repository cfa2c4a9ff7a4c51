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

// Coalesces the map of strided_index in place and returns its new rank (at least 1): dims of
// extent 1 are dropped, and a dim is merged into the one before it where the one before steps
// over it exactly (strides[d - 1] == dims[d] * strides[d]). strided_index gives the same offset
// for every linear index before and after; a contiguous walk becomes one dim, so the device does
// one multiplication instead of a 64-bit division per dim.
SS_HOST_DEVICE int coalesce_dims(int rank, std::int64_t* dims, std::int64_t* strides) {
  int out = 0;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (out > 0 && strides[out - 1] == dims[d] * strides[d]) {
      dims[out - 1] *= dims[d];
      strides[out - 1] = strides[d];
    } else {
      dims[out] = dims[d];
      strides[out] = strides[d];
      ++out;
    }
  }
  if (out == 0) {  // one element: a single dim of extent 1
    dims[0] = 1;
    strides[0] = 1;
    out = 1;
  }
  return out;
}

// Dropout on one element: kept elements are scaled by 1 / (1 - p), dropped ones become 0.
template <class T>
SS_HOST_DEVICE T dropout_apply(T x, bool keep, T keep_scale) {
  return keep ? x * keep_scale : T(0);
}

}  // namespace shardscope::kernels
