// Placement: how a logical (global) tensor lives on the ranks of a group. Replicate: every rank
// holds all of it. Shard(d): rank r holds the r-th of t equal slices along dim d. Partial: every
// rank holds a tensor of the global shape, and the logical value is their sum (a reduction is
// pending). ParallelTensor pairs a rank's local tensor with its placement and the global shape;
// parallel ops check the placements they receive and name themselves when one is wrong.
#pragma once

#include <string>

#include "autograd/errors.h"
#include "autograd/tensor.h"

namespace shardscope {

struct Placement {
  enum class Kind : std::uint8_t { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int dim = 0;  // the sharded dim (non-negative) for Kind::shard

  static Placement replicate() { return {Kind::replicate, 0}; }
  static Placement shard(int dim) { return {Kind::shard, dim}; }
  static Placement partial() { return {Kind::partial, 0}; }
  bool is_shard() const { return kind == Kind::shard; }
  bool operator==(const Placement& o) const {
    return kind == o.kind && (kind != Kind::shard || dim == o.dim);
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  std::string str() const;  // "Replicate", "Shard(0)", "Partial"
};

class PlacementError : public Error {
 public:
  using Error::Error;
};

struct ParallelTensor {
  Tensor local;
  Placement placement;
  Shape global;

  // Checks that `local` is the rank's part of `global` under `placement` for a group of `t`.
  static ParallelTensor make(Tensor local, Placement placement, Shape global, int t);
  std::string str() const;  // "Shard(0) of [16, 2, 32], local [4, 2, 32]"
};

// Throws PlacementError naming `op`, what it needs and what it got.
void expect_placement(const std::string& where, const ParallelTensor& x, Placement wanted);

// The local shape of a `global` tensor under `placement` in a group of `t` (ShapeError when the
// sharded dim does not divide by t).
Shape local_shape(const Shape& global, Placement placement, int t);

}  // namespace shardscope
