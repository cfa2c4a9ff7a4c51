// Placement checks.
#include "parallel/layers/placement.h"

namespace shardscope {

std::string Placement::str() const {
  switch (kind) {
    case Kind::replicate:
      return "Replicate";
    case Kind::shard:
      return "Shard(" + std::to_string(dim) + ")";
    case Kind::partial:
      return "Partial";
  }
  return "?";
}

Shape local_shape(const Shape& global, Placement placement, int t) {
  if (!placement.is_shard()) return global;
  if (placement.dim < 0 || placement.dim >= global.rank() || global[placement.dim] % t != 0) {
    throw ShapeError(placement.str() + " of " + global.str() + " over " + std::to_string(t) +
                     " ranks: the dim must exist and divide by " + std::to_string(t));
  }
  Shape local = global;
  local[placement.dim] /= t;
  return local;
}

ParallelTensor ParallelTensor::make(Tensor local, Placement placement, Shape global, int t) {
  const Shape expected = local_shape(global, placement, t);
  if (local.shape() != expected) {
    throw ShapeError("a " + placement.str() + " of " + global.str() + " over " + std::to_string(t) +
                     " ranks is local " + expected.str() + ", given " + local.describe());
  }
  return ParallelTensor{std::move(local), placement, std::move(global)};
}

std::string ParallelTensor::str() const {
  return placement.str() + " of " + global.str() + ", local " +
         (local.defined() ? local.shape().str() : std::string("undefined"));
}

void expect_placement(const std::string& where, const ParallelTensor& x, Placement wanted) {
  if (x.placement != wanted) {
    throw PlacementError(where + ": needs a " + wanted.str() + " input, given " + x.str() +
                         (x.placement.kind == Placement::Kind::partial
                              ? " (a Partial sum must be reduced first: is a reduction missing?)"
                              : ""));
  }
}

}  // namespace shardscope
