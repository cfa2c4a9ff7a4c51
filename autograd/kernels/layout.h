// Index arithmetic of the layout kernels (permute) and of dropout's global element index, shared
// by the CPU backend and the CUDA kernels.
#pragma once

#include <cstddef>
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

// Coalesces two maps over the same dims (a strided copy's source and destination) in place and
// returns their new rank (at least 1): dims of extent 1 are dropped, and a dim is merged into the
// one before it where the one before steps over it exactly in both maps (a[d - 1] == dims[d] a[d],
// and the same for b). strided_index gives each map the same offset for every linear index before
// and after; a contiguous walk becomes one dim, so the device does one multiplication instead of
// a 64-bit division per dim. a and b may be the same array (coalesce_dims).
SS_HOST_DEVICE int coalesce_dims2(int rank, std::int64_t* dims, std::int64_t* a, std::int64_t* b) {
  int out = 0;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (out > 0 && a[out - 1] == dims[d] * a[d] && b[out - 1] == dims[d] * b[d]) {
      dims[out - 1] *= dims[d];
      a[out - 1] = a[d];
      b[out - 1] = b[d];
    } else {
      dims[out] = dims[d];
      a[out] = a[d];
      b[out] = b[d];
      ++out;
    }
  }
  if (out == 0) {  // one element: a single dim of extent 1
    dims[0] = 1;
    a[0] = b[0] = 1;
    out = 1;
  }
  return out;
}

// coalesce_dims2 of one map.
SS_HOST_DEVICE int coalesce_dims(int rank, std::int64_t* dims, std::int64_t* strides) {
  return coalesce_dims2(rank, dims, strides, strides);
}

// Calls f(U{}) with U the unsigned integer of `es` bytes (1, 2, 4 or 8), for loops and kernels
// that move elements whatever their dtype; false, without calling f, for any other size. Host code.
template <class F>
bool with_unsigned_of_size(std::size_t es, F&& f) {
  switch (es) {
    case 1:
      f(std::uint8_t{});
      return true;
    case 2:
      f(std::uint16_t{});
      return true;
    case 4:
      f(std::uint32_t{});
      return true;
    case 8:
      f(std::uint64_t{});
      return true;
    default:
      return false;
  }
}

// Dropout on one element: kept elements are scaled by 1 / (1 - p), dropped ones become 0.
template <class T>
SS_HOST_DEVICE T dropout_apply(T x, bool keep, T keep_scale) {
  return keep ? x * keep_scale : T(0);
}

}  // namespace shardscope::kernels
