// Rotary position embedding (Su et al. 2021, RoFormer) per element, in the rotate-half convention
// of Megatron-LM and Hugging Face's Llama: the last dim d holds two halves and element i < d/2 is
// paired with element i + d/2 (not with its neighbour 2i + 1, the paper's interleaved pairs).
// For a row at position p, with theta_i = base^(-2i/d) and angle = p theta_i:
//   y[i]       = x[i] cos(angle) - x[i + d/2] sin(angle)
//   y[i + d/2] = x[i + d/2] cos(angle) + x[i] sin(angle)
// the pair (x[i], x[i + d/2]) rotated by angle. Backward rotates dy back by -angle (a rotation's
// transpose is its inverse): dx[i] = dy[i] cos + dy[i + d/2] sin, dx[i + d/2] = dy[i + d/2] cos -
// dy[i] sin; so nothing but the settings is kept for it. The angle, cos and sin are taken in double
// for every element type (a position of 10^5 times an f32 theta would be off by 1e-2 rad) and the
// result is rounded to the element type once.
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

// x seen as [outer, positions, inner, d]: `positions` is x's extent along the sequence dim,
// `inner` the product of the dims between it and the last (b h for [s, b, h, d]; 1 for
// [b, h, s, d]). Row r (d elements) then sits at position first_position + (r / inner) % positions.
struct RopeGeometry {
  std::int64_t positions = 1;
  std::int64_t inner = 1;
  std::int64_t d = 2;
  std::int64_t first_position = 0;
  double base = 10000.0;
};

// The geometry of a tensor of extents dims[0..rank) whose positions run along seq_dim
// (0 <= seq_dim < rank - 1, checked by the op).
SS_HOST_DEVICE RopeGeometry rope_geometry(const std::int64_t* dims, int rank, int seq_dim,
                                          std::int64_t first_position, double base) {
  RopeGeometry g;
  g.positions = dims[seq_dim];
  for (int k = seq_dim + 1; k < rank - 1; ++k) g.inner *= dims[k];
  g.d = dims[rank - 1];
  g.first_position = first_position;
  g.base = base;
  return g;
}

// The position of row r (the d elements r d .. r d + d - 1).
SS_HOST_DEVICE std::int64_t rope_row_position(std::int64_t row, const RopeGeometry& g) {
  return g.first_position + (row / g.inner) % g.positions;
}

// Where element `flat` of x sits: its row's position, its pair i < d/2, and whether it is the
// pair's second half (element i + d/2 of the row).
struct RopeSlot {
  std::int64_t position;
  std::int64_t pair;
  bool second;
};

SS_HOST_DEVICE RopeSlot rope_slot(std::int64_t flat, const RopeGeometry& g) {
  const std::int64_t half = g.d / 2, j = flat % g.d;
  return {rope_row_position(flat / g.d, g), j < half ? j : j - half, j >= half};
}

// theta_i = base^(-2i/d), the angle per position of pair i.
SS_HOST_DEVICE double rope_theta(std::int64_t pair, std::int64_t d, double base) {
  return std::pow(base, -2.0 * static_cast<double>(pair) / static_cast<double>(d));
}

// angle = position theta_i.
SS_HOST_DEVICE double rope_angle(std::int64_t position, std::int64_t pair, std::int64_t d,
                                 double base) {
  return static_cast<double>(position) * rope_theta(pair, d, base);
}

// The pair (a, b) = (x[i], x[i + d/2]) rotated by the angle whose cosine and sine are c and s.
template <class T>
SS_HOST_DEVICE void rope_rotate_by(T a, T b, double c, double s, T& ya, T& yb) {
  const double da = static_cast<double>(a), db = static_cast<double>(b);
  ya = static_cast<T>(da * c - db * s);
  yb = static_cast<T>(db * c + da * s);
}

// The pair (a, b) = (x[i], x[i + d/2]) rotated by angle, or by -angle when inverse.
template <class T>
SS_HOST_DEVICE void rope_rotate(T a, T b, double angle, bool inverse, T& ya, T& yb) {
  rope_rotate_by(a, b, std::cos(angle), inverse ? -std::sin(angle) : std::sin(angle), ya, yb);
}

// Element `flat` of the output: the half of its pair's rotation that lands on it.
template <class T>
SS_HOST_DEVICE T rope_element(const T* x, std::int64_t flat, const RopeGeometry& g, bool inverse) {
  const RopeSlot s = rope_slot(flat, g);
  const std::int64_t half = g.d / 2, first = s.second ? flat - half : flat;
  T ya, yb;
  rope_rotate(x[first], x[first + half], rope_angle(s.position, s.pair, g.d, g.base), inverse, ya,
              yb);
  return s.second ? yb : ya;
}

}  // namespace shardscope::kernels
