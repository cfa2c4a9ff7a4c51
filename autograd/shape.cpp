// Shape helpers.
#include "autograd/shape.h"

#include "autograd/errors.h"

namespace shardscope {

int Shape::normalize_dim(int i) const {
  const int r = rank();
  const int d = i < 0 ? i + r : i;
  if (d < 0 || d >= r) {
    throw ShapeError("dim " + std::to_string(i) + " is out of range for shape " + str() +
                     " (rank " + std::to_string(r) + ")");
  }
  return d;
}

std::int64_t Shape::dim(int i) const {
  return dims_[static_cast<std::size_t>(normalize_dim(i))];
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims_) n *= d;
  return n;
}

std::vector<std::int64_t> Shape::strides() const {
  std::vector<std::int64_t> s(dims_.size(), 1);
  for (int i = rank() - 2; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    s[u] = s[u + 1] * dims_[u + 1];
  }
  return s;
}

std::string Shape::str() const {
  std::string out = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + "]";
}

}  // namespace shardscope
